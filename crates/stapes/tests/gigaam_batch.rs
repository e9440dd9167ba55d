//! GigaAM inputs batched through the Engine (`Engine::transcribe_batch_each`, what the server's
//! cross-request batching calls) on the CPU, with the tiny v3 CTC, v3 RNNT and v1 CTC fixtures of
//! tools/reference/gigaam_ckpt.py: every result equals `Engine::transcribe` of that input alone,
//! in input order; the inputs really share encoder calls (the batch sizes say so); an empty
//! input and one with a NaN each get their own error while the others succeed.

#[allow(dead_code)]
mod batch_common;
#[allow(dead_code)]
mod clips_common;

use batch_common::{assert_same, batch_equals_alone, ids, with_options};
use stapes::runtime::DeviceRequest;
use stapes::{Engine, EngineOptions, StapesError, TranscribeOptions, Transcript};
use std::path::Path;

const MODELS: [&str; 3] = ["v3_ctc", "v3_rnnt", "v1_ctc"];

fn engine(model: &str) -> Engine {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../stapes-models/tests/fixtures/gigaam/{model}.ckpt"
    ));
    Engine::load(
        &path,
        &EngineOptions {
            device: DeviceRequest::Cpu,
            lane: None,
            threads: Some(2),
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Three real clips of different lengths (4 s, 2.5 s, 1.23 s), so two are padded in a batch of
/// three.
fn clips() -> Vec<Vec<f32>> {
    [
        ("jfk", 64_000),
        ("beckett", 40_000),
        ("librivox-0880", 19_680),
    ]
    .iter()
    .map(|&(name, n)| {
        let mut s = clips_common::clip(name);
        assert!(s.len() >= n, "{name}: {} samples, need {n}", s.len());
        s.truncate(n);
        s
    })
    .collect()
}

#[test]
fn engine_batch_equals_one_at_a_time() {
    let clips = clips();
    for model in MODELS {
        let (_, alone) = batch_equals_alone(&engine(model), &clips, model);
        assert!(
            alone.iter().all(|t| !ids(t).is_empty()),
            "{model}: a clip emitted nothing"
        );
        assert_ne!(ids(&alone[0]), ids(&alone[2]), "{model}: clips alike");
    }
}

#[test]
fn order_kept_and_bad_inputs_keep_their_own_errors() {
    let clips = clips();
    let opts = TranscribeOptions::default();
    let empty: Vec<f32> = Vec::new();
    let mut nan = clips[1].clone();
    nan[100] = f32::NAN;
    // jfk, nothing, 0880, beckett with a NaN, beckett: the empty input is refused before
    // batching; the NaN fails its batch, whose inputs then run alone.
    let inputs: [&[f32]; 5] = [&clips[0], &empty, &clips[2], &nan, &clips[1]];
    let good: [Option<usize>; 5] = [Some(0), None, Some(2), None, Some(1)];
    let e = engine("v3_ctc");
    let alone: Vec<Transcript> = clips
        .iter()
        .map(|c| e.transcribe(c, &opts, None).expect("alone"))
        .collect();
    let each = with_options(inputs, &opts);
    let out = e.transcribe_batch_each(&each, 8);
    assert_eq!(out.results.len(), inputs.len());
    for (slot, (got, g)) in out.results.iter().zip(good).enumerate() {
        match g {
            Some(i) => {
                let got = got.as_ref().unwrap_or_else(|e| panic!("slot {slot}: {e}"));
                assert_same(got, &alone[i], &format!("slot {slot}"));
            }
            None => assert!(
                matches!(got, Err(StapesError::BadInput(_))),
                "slot {slot} should be refused, got {got:?}"
            ),
        }
    }
    // Without the bad inputs the three clips share one call.
    let each = with_options([&clips[0][..], &clips[2], &clips[1]], &opts);
    assert_eq!(
        e.transcribe_batch_each(&each, 8).stats.encoder_batches,
        vec![3]
    );
}
