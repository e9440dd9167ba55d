//! What the FastConformer GPU tests (cuda_parakeet, cuda_canary) share: the serial GPU guard
//! that also reports a skip by name, and the fixture directory and its safetensors files.

use stapes_core::HostTensor;
use std::collections::BTreeMap;
use std::path::PathBuf;

pub const CLIPS: [&str; 3] = ["jfk", "beckett", "lv0880"];

#[path = "../family_common/mod.rs"]
mod family_common;
/// The GPU turn for a test, or a skip reported by name (one guard for every GPU test file).
#[allow(unused_imports)] // parakeet_batch reads the fixtures only
pub use family_common::gpu;

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
