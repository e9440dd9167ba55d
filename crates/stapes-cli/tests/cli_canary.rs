//! `stapes transcribe` on Canary: the tiny random-weight transformers fixture (HF directory) and
//! the `.nemo` archives of the same weights (unified and aggregate tokenizer), from
//! tools/reference/fastconformer_canary.py / fastconformer_nemo.py. The ids and text must be the
//! ones transformers' `generate` (greedy, and `num_beams=4`) produced after the canary2 en->en
//! prompt for the same 3 s of samples/jfk.wav; the Canary flags reach the prompt.

mod cli_common;

use cli_common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    repo().join("crates/stapes-models/tests/fixtures/fastconformer")
}

fn json(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixtures().join(name)).expect(name)).expect("json")
}

/// The first `n` samples of samples/jfk.wav (16 kHz mono 16-bit) as a WAV of its own: the
/// reference's input, bit for bit (the samples are copied, not re-quantized).
fn jfk_cut(n: usize) -> PathBuf {
    let raw = std::fs::read(repo().join("samples/jfk.wav")).expect("jfk.wav");
    let at = raw
        .windows(4)
        .position(|w| w == b"data")
        .expect("a data chunk");
    let pcm = &raw[at + 8..];
    let pcm = &pcm[..(2 * n).min(pcm.len())];
    let w = wav_16k_from_pcm(pcm);
    let dir = std::env::temp_dir().join(format!("stapes-cli-canary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join("jfk-3s.wav");
    std::fs::write(&p, w).expect("write wav");
    p
}

fn ids(v: &Value) -> Vec<u64> {
    let mut v: Vec<u64> = v
        .as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id"))
        .collect();
    if v.last() == Some(&3) {
        v.pop(); // end-of-text is not a segment token
    }
    v
}

fn transcribe_json(model: &Path, extra: &[&str], clip: &Path) -> Value {
    let m = model.display().to_string();
    let c = clip.display().to_string();
    let mut args = vec!["transcribe", "-m", &m, "--device", "cpu", "-f", "json"];
    args.extend_from_slice(extra);
    args.push(&c);
    let o = stapes(&args);
    assert!(
        o.status.success(),
        "{m} {extra:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("json output")
}

fn tokens(v: &Value) -> Vec<u64> {
    v["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .flat_map(|s| s["tokens"].as_array().cloned().unwrap_or_default())
        .map(|t| t.as_u64().expect("id"))
        .collect()
}

#[test]
fn canary_through_the_cli_matches_transformers() {
    let exp = json("expected_canary.json");
    let texts = json("expected_canary_nemo.json");
    let want = &exp["results"]["end_to_end_jfk"];
    let clip = jfk_cut(want["samples"].as_u64().expect("samples") as usize);
    for (model, text_of) in [
        ("canary", None),
        ("canary.nemo", Some("canary.nemo")),
        ("canary-agg.nemo", Some("canary-agg.nemo")),
    ] {
        let path = fixtures().join(model);
        // Default: greedy (NeMo's default for Canary), en -> en with punctuation.
        for (extra, key, hf_text) in [
            (&[][..], "generated", "text"),
            (&["--beam-size", "4"][..], "beam4", "beam4_text"),
        ] {
            let v = transcribe_json(&path, extra, &clip);
            assert_eq!(v["family"], "canary", "{model}");
            assert_eq!(tokens(&v), ids(&want[key]), "{model} {key}");
            let text = match text_of {
                None => want[hf_text].as_str().expect("text").to_string(),
                Some(a) => texts["texts"][a][key].as_str().expect("text").to_string(),
            };
            assert_eq!(
                v["text"].as_str().map(str::trim),
                Some(text.trim()),
                "{model} {key}"
            );
        }
    }
}

/// The Canary flags change the prompt (the output of a random model then differs or not, but the
/// run must succeed); a language the model lacks is bad input (3) naming the known ones; Canary
/// flags on another family are a usage error (2).
#[test]
fn canary_flags_reach_the_prompt() {
    let clip = jfk_cut(48000);
    let hf = fixtures().join("canary");
    for extra in [
        &["--target-language", "de", "--no-pnc"][..],
        &["--language", "fr", "--task", "translate"][..],
        &["--pnc"][..],
    ] {
        let v = transcribe_json(&hf, extra, &clip);
        assert_eq!(v["family"], "canary");
    }
    let m = hf.display().to_string();
    let c = clip.display().to_string();
    let o = stapes(&[
        "transcribe",
        "-m",
        &m,
        "--device",
        "cpu",
        "--target-language",
        "xx",
        &c,
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("xx") && err.contains("de, en, es, fr"),
        "{err}"
    );
    let tdt = fixtures().join("tdt").display().to_string();
    let o = stapes(&[
        "transcribe",
        "-m",
        &tdt,
        "--device",
        "cpu",
        "--target-language",
        "de",
        &c,
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
