//! Edge inputs through the whole pipeline: nothing panics, results stay well-formed.

mod whisper_common;

use stapes_core::Lane;
use stapes_models::whisper::{Task, WhisperOptions};
use whisper_common::*;

#[test]
fn short_silent_and_noisy_inputs_are_well_formed() {
    let m = model("whisper-base", Lane::F32);
    let noise: Vec<f32> = (0..48_000u32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.2)
        .collect();
    let inputs: Vec<(&str, Vec<f32>)> = vec![
        ("empty", vec![]),
        ("one sample", vec![0.1]),
        ("10 ms", vec![0.01; 160]),
        ("silence 5 s", vec![0.0; 80_000]),
        ("noise 3 s", noise),
        ("jfk head 0.7 s", audio("jfk")[..11_200].to_vec()),
    ];
    let variants = [
        WhisperOptions {
            word_timestamps: true,
            ..Default::default()
        },
        WhisperOptions {
            task: Task::Translate,
            without_timestamps: true,
            ..Default::default()
        },
        WhisperOptions {
            beam_size: 1,
            temperatures: vec![0.0, 0.5, 1.0],
            best_of: 3,
            ..Default::default()
        },
    ];
    for (label, samples) in &inputs {
        for o in &variants {
            let t = m
                .transcribe(samples, o)
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            assert!((t.duration - samples.len() as f64 / 16000.0).abs() < 1e-9);
            for s in &t.segments {
                assert!(
                    s.start <= s.end && s.end <= t.duration + 30.0,
                    "{label}: {s:?}"
                );
                for w in s.words.iter().flatten() {
                    assert!(w.start <= w.end, "{label}: {w:?}");
                }
            }
        }
    }
}

#[test]
fn bad_options_are_errors() {
    let m = model("whisper-tiny.en", Lane::F32);
    let a = vec![0.0f32; 16_000];
    for o in [
        WhisperOptions {
            beam_size: 0,
            ..Default::default()
        },
        WhisperOptions {
            temperatures: vec![f32::NAN],
            ..Default::default()
        },
        WhisperOptions {
            patience: 0.0,
            ..Default::default()
        },
        WhisperOptions {
            max_new_tokens: Some(1000),
            ..Default::default()
        },
    ] {
        assert!(m.transcribe(&a, &o).is_err(), "{o:?} accepted");
    }
    let base = model("whisper-base", Lane::F32);
    let o = WhisperOptions {
        language: Some("xx".into()),
        ..Default::default()
    };
    assert!(base.transcribe(&a, &o).is_err());
}
