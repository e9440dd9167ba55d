//! Reading the parity fixtures the tools/reference scripts write: a family's folder under
//! tests/fixtures, its safetensors widened to f32, its expected.json, and the cached clips.
#![allow(dead_code)] // each test crate uses its share

use serde_json::Value;
use stapes_core::HostTensor;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tests/fixtures/<family>`.
pub fn dir(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(family)
}

/// `$STAPES_CACHE`, else `~/.cache/stapes` (where scripts/fetch-models.sh puts the clips).
pub fn cache() -> PathBuf {
    std::env::var_os("STAPES_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/stapes")
        })
}

/// Every tensor of `dir/name`, widened to f32.
pub fn tensors(dir: &Path, name: &str) -> BTreeMap<String, HostTensor> {
    let st = stapes_formats::safetensors_dir::read_file(&dir.join(name)).expect("fixture reads");
    st.tensors
        .iter()
        .map(|(k, t)| {
            (
                k.clone(),
                HostTensor::new(t.shape.clone(), t.to_f32()).unwrap(),
            )
        })
        .collect()
}

/// `dir/expected.json`.
pub fn expected(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json parses")
}

/// The clip's samples as the reference script read them (16-bit PCM / 32768).
pub fn clip_samples(exp: &Value, clip: &str) -> Vec<f32> {
    let c = &exp["clips"][clip];
    let rel = c["path"].as_str().unwrap();
    let path = if rel.starts_with("samples/") {
        root().join(rel)
    } else {
        let p = cache().join("audio").join(rel);
        let p = if p.exists() {
            p
        } else {
            cache().join("audio/librivox").join(rel)
        };
        assert!(
            p.exists(),
            "{} is missing: run scripts/fetch-models.sh audio",
            p.display()
        );
        p
    };
    let mut r = hound::WavReader::open(&path).expect("clip opens");
    let pcm: Vec<f32> = r
        .samples::<i16>()
        .map(|s| s.unwrap() as f32 / 32768.0)
        .collect();
    let start = (c["start_s"].as_f64().unwrap() * 16000.0).round() as usize;
    let end = match c["seconds"].as_f64() {
        Some(s) => start + (s * 16000.0).round() as usize,
        None => pcm.len(),
    };
    pcm[start..end].to_vec()
}
