//! Shared helpers of the Whisper parity tests: real weights from `$STAPES_CACHE`, the clips, and
//! the faster-whisper fixtures dumped by `tools/reference/whisper_fw.py`.
#![allow(dead_code)]

use serde_json::Value;
use stapes_core::{HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::whisper::weights::load_checkpoint;
use stapes_models::whisper::{Whisper, WhisperOptions};
use std::path::{Path, PathBuf};

pub const MODELS: [&str; 2] = ["whisper-tiny.en", "whisper-base"];
pub const CLIPS: [&str; 7] = [
    "jfk",
    "beckett",
    "librivox-0870",
    "librivox-0880",
    "librivox-0890",
    "librivox-0920",
    "librivox-0930",
];

pub fn cache() -> PathBuf {
    std::env::var_os("STAPES_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/stapes")
        })
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/whisper")
}

pub fn clip_path(name: &str) -> PathBuf {
    match name {
        "jfk" => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/audio/jfk.wav"),
        "beckett" => cache().join("audio/beckett.wav"),
        other => {
            let n = other.trim_start_matches("librivox-");
            cache().join(format!(
                "audio/librivox/sense_and_sensibility_01_austen_64kb-{n}.wav"
            ))
        }
    }
}

pub fn audio(name: &str) -> Vec<f32> {
    let p = clip_path(name);
    stapes_audio::load_file(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch-models.sh audio)", p.display()))
}

pub fn model(name: &str, lane: Lane) -> Whisper<CpuBackend> {
    let dir = cache().join("models").join(name);
    let ckpt = load_checkpoint(&dir).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/fetch-models.sh {name})",
            dir.display()
        )
    });
    let cpu = CpuBackend::new(0).expect("cpu backend");
    Whisper::new(cpu, &ckpt, lane).expect("upload weights")
}

pub fn reference() -> Value {
    let p = fixtures().join("fw_decode.json");
    let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&s).expect("fixture json")
}

pub fn tensors() -> Vec<(String, HostTensor)> {
    let p = fixtures().join("fw_encoder.safetensors");
    let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    st.tensors()
        .into_iter()
        .map(|(name, v)| {
            let data: Vec<f32> = v
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            (
                name,
                HostTensor::new(v.shape().to_vec(), data).expect("shape"),
            )
        })
        .collect()
}

pub fn tensor(all: &[(String, HostTensor)], name: &str) -> HostTensor {
    all.iter()
        .find(|(n, _)| n == name)
        .map(|(_, t)| t.clone())
        .unwrap_or_else(|| panic!("fixture tensor {name}"))
}

/// The options of the reference runs: temperature 0 only, no previous-text conditioning.
pub fn ref_options(beam: usize) -> WhisperOptions {
    WhisperOptions {
        beam_size: beam,
        temperatures: vec![0.0],
        condition_on_previous_text: false,
        ..Default::default()
    }
}

/// (tokens, start, end, text) of each reference segment.
pub fn ref_segments(v: &Value) -> Vec<(Vec<u32>, f64, f64, String)> {
    v["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .map(|s| {
            let toks = s["tokens"]
                .as_array()
                .expect("tokens")
                .iter()
                .map(|t| t.as_u64().expect("id") as u32)
                .collect();
            (
                toks,
                s["start"].as_f64().unwrap_or(-1.0),
                s["end"].as_f64().unwrap_or(-1.0),
                s["text"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}
