//! What the FastConformer GPU tests (cuda_parakeet, cuda_canary) share: the serial GPU guard
//! that also reports a skip by name, and the fixture directory and its safetensors files.

use stapes_core::HostTensor;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

pub const CLIPS: [&str; 3] = ["jfk", "beckett", "lv0880"];

/// One test at a time: each opens its own backends, and a capture records every launch on the
/// device's streams of this process.
static SERIAL: Mutex<()> = Mutex::new(());

/// The GPU turn for test `name`, or `None` after printing `SKIPPED (no CUDA device): name`.
pub fn gpu(name: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    if stapes_cuda::available() {
        Some(SERIAL.lock().unwrap_or_else(|p| p.into_inner()))
    } else {
        eprintln!("SKIPPED (no CUDA device): {name}");
        None
    }
}

/// `STAPES_FC_FIXTURES`, else the fixtures beside the build tree, else relative to the checkout.
pub fn fixtures() -> PathBuf {
    if let Ok(p) = std::env::var("STAPES_FC_FIXTURES") {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../stapes-models/tests/fixtures/fastconformer");
    if built.exists() {
        return built;
    }
    PathBuf::from("crates/stapes-models/tests/fixtures/fastconformer")
}

/// Every tensor of fixture file `name`, widened to f32.
pub fn read(name: &str) -> BTreeMap<String, HostTensor> {
    let path = fixtures().join(name);
    let st = stapes_formats::safetensors_dir::read_file(&path)
        .unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    st.tensors
        .iter()
        .map(|(k, t)| {
            let v = HostTensor::new(t.shape.clone(), t.to_f32()).expect("fixture tensor");
            (k.clone(), v)
        })
        .collect()
}
