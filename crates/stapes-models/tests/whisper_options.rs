//! Prompt-construction paths against faster-whisper (tools/reference/whisper_fw_options.py):
//! `<|notimestamps|>` mode, an initial prompt (`<|startofprev|>` …, no-speech at the SOT row of
//! the prefill), a forced prefix, and previous-text conditioning over the long-form signal.

mod whisper_common;

use serde_json::Value;
use stapes_core::Lane;
use stapes_models::whisper::WhisperOptions;
use whisper_common::*;

fn options_reference() -> Value {
    let p = fixtures().join("fw_options.json");
    let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&s).expect("fixture json")
}

#[test]
fn jfk_option_paths_match_faster_whisper() {
    let r = options_reference();
    let jfk = audio("jfk");
    let mut failures = Vec::new();
    for name in MODELS {
        let m = model(name, Lane::F32);
        let cases = [
            (
                "without_timestamps",
                WhisperOptions {
                    without_timestamps: true,
                    ..ref_options(1)
                },
            ),
            (
                "initial_prompt",
                WhisperOptions {
                    initial_prompt: Some("President Kennedy's inaugural address.".into()),
                    ..ref_options(1)
                },
            ),
            (
                "prefix",
                WhisperOptions {
                    prefix: Some("And so, my fellow".into()),
                    ..ref_options(1)
                },
            ),
        ];
        for (case, opts) in cases {
            let t = m.transcribe(&jfk, &opts).unwrap();
            failures.extend(compare_segments(
                &format!("{name} {case}"),
                &t,
                &r["models"][name][case],
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The long-form signal of whisper_longform.rs with condition_on_previous_text (prompts of up to
/// 223 previous tokens, the prompt reset rule).
#[test]
fn conditioned_longform_matches_faster_whisper_tiny_en() {
    let r = options_reference();
    let gap = vec![0f32; 40_000];
    let mut samples = Vec::new();
    for _ in 0..3 {
        for c in CLIPS {
            samples.extend_from_slice(&gap);
            samples.extend(audio(c));
        }
    }
    samples.extend_from_slice(&gap);
    let m = model("whisper-tiny.en", Lane::F32);
    let opts = WhisperOptions {
        condition_on_previous_text: true,
        ..ref_options(1)
    };
    let t = m.transcribe(&samples, &opts).unwrap();
    let f = compare_segments(
        "tiny.en conditioned",
        &t,
        &r["models"]["whisper-tiny.en"]["longform_conditioned"],
    );
    assert!(f.is_empty(), "{}", f.join("\n"));
}
