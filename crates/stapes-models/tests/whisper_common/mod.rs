//! Shared helpers of the Whisper parity tests: real weights from `$STAPES_CACHE`, the clips, and
//! the faster-whisper fixtures dumped by `tools/reference/whisper_fw.py`.
#![allow(dead_code)]

pub mod probe;

use serde_json::Value;
use stapes_core::{HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::whisper::weights::{load_checkpoint, WhisperCheckpoint};
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
        "jfk" => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/jfk.wav"),
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

/// The cached weights of `name`, for a model on a backend of the test's choosing.
pub fn checkpoint(name: &str) -> WhisperCheckpoint {
    let dir = cache().join("models").join(name);
    load_checkpoint(&dir).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/fetch-models.sh {name})",
            dir.display()
        )
    })
}

pub fn model(name: &str, lane: Lane) -> Whisper<CpuBackend> {
    let cpu = CpuBackend::new(0).expect("cpu backend");
    Whisper::new(cpu, &checkpoint(name), lane).expect("upload weights")
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

/// Differences between our segments and faster-whisper's (a JSON array of segments): ids, times
/// (±1 ms), text, and the decoding statistics (avg log-prob and no-speech probability ±2e-3,
/// compression ratio ±0.15: on texts under ~100 bytes miniz stores or codes a block where zlib
/// uses static Huffman codes, 3–7 bytes longer; the ratio is then far below the 2.4 threshold).
pub fn compare_segments(
    label: &str,
    got: &stapes_models::transcript::Transcript,
    want: &Value,
) -> Vec<String> {
    let want = want.as_array().cloned().unwrap_or_default();
    let got_ids: Vec<Vec<u32>> = got.segments.iter().map(|s| s.tokens.clone()).collect();
    let want_ids: Vec<Vec<u32>> = want
        .iter()
        .map(|s| {
            s["tokens"]
                .as_array()
                .map(|a| a.iter().map(|t| t.as_u64().unwrap_or(0) as u32).collect())
                .unwrap_or_default()
        })
        .collect();
    if got_ids != want_ids {
        return vec![format!(
            "{label}: ids differ\n  got  {got_ids:?}\n  want {want_ids:?}"
        )];
    }
    let mut out = Vec::new();
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    for (s, w) in got.segments.iter().zip(&want) {
        let bad = (s.start - f(w, "start")).abs() > 1e-3
            || (s.end - f(w, "end")).abs() > 1e-3
            || Some(s.text.as_str()) != w["text"].as_str()
            || (s.avg_logprob as f64 - f(w, "avg_logprob")).abs() > 2e-3
            || (s.no_speech_prob as f64 - f(w, "no_speech_prob")).abs() > 2e-3
            || (s.compression_ratio as f64 - f(w, "compression_ratio")).abs() > 0.15;
        if bad {
            out.push(format!(
                "{label}: {:?} {:.2}–{:.2} lp {:.4} ns {:.4} cr {:.3}\n   vs {} {}–{} lp {:.4} ns {:.4} cr {:.3}",
                s.text,
                s.start,
                s.end,
                s.avg_logprob,
                s.no_speech_prob,
                s.compression_ratio,
                w["text"],
                f(w, "start"),
                f(w, "end"),
                f(w, "avg_logprob"),
                f(w, "no_speech_prob"),
                f(w, "compression_ratio")
            ));
        }
    }
    out
}
