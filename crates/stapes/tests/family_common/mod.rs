//! What the GPU tests of the one-fixture families (cuda_gigaam, cuda_qwen3a, cuda_gemma4a) share:
//! the serial GPU guard that also reports a skip by name, and a family's fixture folder, its
//! safetensors and its expected.json.
#![allow(dead_code)] // each test crate uses its share

use serde_json::Value;
use stapes_core::HostTensor;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

/// `crates/stapes-models/tests/fixtures/<family>`, beside the build tree or from the checkout.
pub fn dir(family: &str) -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../stapes-models/tests/fixtures")
        .join(family);
    if built.exists() {
        return built;
    }
    PathBuf::from("crates/stapes-models/tests/fixtures").join(family)
}

/// Every tensor of `dir/name`, widened to f32.
pub fn tensors(dir: &Path, name: &str) -> BTreeMap<String, HostTensor> {
    let path = dir.join(name);
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

/// `dir/expected.json`.
pub fn expected(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json parses")
}
