//! Parakeet inputs batched through the Engine (`Engine::transcribe_batch_each`, what the server's
//! cross-request batching calls) on the CPU, with the tiny CTC, RNNT and TDT fixtures of
//! tools/reference/fastconformer_hf.py: every result equals `Engine::transcribe` of that input
//! alone, in input order, the inputs really share encoder calls (the batch sizes say so), an
//! empty input in the middle gets its own error while the others succeed, and the TDT model's
//! first 3 s of jfk still give transformers' ids. The CTC batched greedy decode (one argmax over
//! the padded batch) is checked against one clip at a time and against transformers' ids.

#[allow(dead_code)]
mod batch_common;
#[allow(dead_code)]
mod clips_common;
#[allow(dead_code)]
mod fc_common;

use batch_common::{assert_same, batch_equals_alone, ids, with_options};
use serde_json::Value;
use stapes::runtime::DeviceRequest;
use stapes::{Engine, EngineOptions, StapesError, TranscribeOptions, Transcript};
use stapes_core::Lane;
use stapes_cpu::CpuBackend;
use stapes_models::fastconformer::Parakeet;

const MODELS: [&str; 3] = ["ctc", "rnnt", "tdt"];

fn engine(model: &str) -> Engine {
    let dir = fc_common::fixtures().join(model);
    Engine::load(
        &dir,
        &EngineOptions {
            device: DeviceRequest::Cpu,
            lane: None,
            threads: Some(2),
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn expected() -> Value {
    let p = fc_common::fixtures().join("expected.json");
    serde_json::from_str(&std::fs::read_to_string(&p).expect("expected.json")).expect("json")
}

/// Three clips of different lengths (3 s, 2 s, 1.23 s), so two are padded in a batch of three;
/// the first is the 3 s of jfk transformers' end-to-end ids were made from.
fn clips() -> Vec<Vec<f32>> {
    let exp = expected();
    let jfk_n = exp["clips"]["jfk"]["samples"]
        .as_u64()
        .expect("jfk samples") as usize;
    let mut out = Vec::new();
    for (name, n) in [
        ("jfk", jfk_n),
        ("beckett", 32_000),
        ("librivox-0880", 19_680),
    ] {
        let mut s = clips_common::clip(name);
        assert!(s.len() >= n, "{name}: {} samples, need {n}", s.len());
        s.truncate(n);
        out.push(s);
    }
    out
}

#[test]
fn engine_batch_equals_one_at_a_time() {
    let clips = clips();
    let exp = expected();
    for model in MODELS {
        let (out, _) = batch_equals_alone(&engine(model), &clips, model);
        if model == "tdt" {
            let want: Vec<u32> = exp["models"]["tdt"]["end_to_end_jfk"]["ids"]
                .as_array()
                .expect("end_to_end_jfk ids")
                .iter()
                .map(|v| v.as_u64().expect("id") as u32)
                .collect();
            let got = out.results[0].as_ref().expect("jfk");
            assert_eq!(ids(got), want, "tdt/jfk batched vs transformers");
        }
    }
}

#[test]
fn order_kept_and_a_bad_input_keeps_its_own_error() {
    let clips = clips();
    let opts = TranscribeOptions::default();
    let empty: Vec<f32> = Vec::new();
    // jfk (longest), nothing, 0880 (shortest), beckett: the batcher sorts by length inside, so
    // order is only kept if results go back to their own slots.
    let order: [Option<usize>; 4] = [Some(0), None, Some(2), Some(1)];
    for model in ["ctc", "tdt"] {
        let e = engine(model);
        let alone: Vec<Transcript> = clips
            .iter()
            .map(|c| e.transcribe(c, &opts, None).expect("alone"))
            .collect();
        let each = with_options(
            order.map(|o| o.map_or(&empty[..], |i| &clips[i][..])),
            &opts,
        );
        let delivered = std::sync::Mutex::new(vec![0usize; order.len()]);
        let stats = e.transcribe_batch_with(&each, 2, &|i, _| {
            delivered.lock().unwrap()[i] += 1;
        });
        assert_eq!(
            *delivered.lock().unwrap(),
            vec![1; 4],
            "{model}: one result each"
        );
        // Sorted: (0880, beckett) share a call, jfk runs alone (max 2 a batch).
        assert_eq!(stats.encoder_batches, vec![2, 1], "{model}: batch sizes");
        let out = e.transcribe_batch_each(&each, 2);
        for (slot, (got, o)) in out.results.iter().zip(order).enumerate() {
            match o {
                None => assert!(
                    matches!(got, Err(StapesError::BadInput(_))),
                    "{model}: slot {slot} should be refused, got {got:?}"
                ),
                Some(i) => {
                    let got = got
                        .as_ref()
                        .unwrap_or_else(|e| panic!("{model}/{slot}: {e}"));
                    assert_same(got, &alone[i], &format!("{model}/slot {slot}"));
                }
            }
        }
        // The clips differ, so a mix-up of slots would show.
        assert_ne!(ids(&alone[0]), ids(&alone[2]), "{model}: clips alike");
    }
}

#[test]
fn ctc_greedy_batch_equals_one_clip_at_a_time() {
    let inputs = fc_common::read("inputs.safetensors");
    let exp = expected();
    let m = Parakeet::new(
        CpuBackend::new(2).expect("cpu"),
        &fc_common::fixtures().join("ctc"),
        Lane::F32,
    )
    .expect("ctc model");
    // Cut to 300, 200 and 123 feature frames: two padded in the batch.
    let feats: Vec<stapes_core::HostTensor> = fc_common::CLIPS
        .iter()
        .zip([300usize, 200, 123])
        .map(|(c, k)| {
            let f = &inputs[&format!("features.{c}")];
            let (frames, mels) = (k.min(f.shape[0]), f.shape[1]);
            stapes_core::HostTensor::new(vec![frames, mels], f.data[..frames * mels].to_vec())
                .expect("cut")
        })
        .collect();
    let (enc, lens) = m.encode_batch(&feats).expect("encode");
    let batched = m.greedy_batch(&enc, &lens).expect("greedy batch");
    assert_eq!(batched.len(), 3);
    for (i, clip) in fc_common::CLIPS.iter().enumerate() {
        let one = m.greedy_at(&enc, i, lens[i]).expect("greedy one");
        assert_eq!(batched[i], one, "ctc/{clip}: batch vs one");
        assert_eq!(batched[i].frames, lens[i], "ctc/{clip}: frames");
        if i == 0 {
            let want: Vec<u32> = exp["models"]["ctc"]["results"][clip]["frames"]
                .as_array()
                .expect("frame ids")
                .iter()
                .map(|v| v.as_u64().expect("id") as u32)
                .collect();
            let steps: Vec<u32> = batched[i].steps.iter().map(|s| s.token).collect();
            assert_eq!(steps, want, "ctc/{clip}: frame argmax vs transformers");
        }
    }
    assert!(
        m.greedy_batch(&enc, &lens[..2]).is_err(),
        "lengths must match the batch"
    );
}

/// A batch that fails as a whole (here: two inputs hold non-finite samples, which the front end
/// refuses) is rerun one input at a time: each bad input gets its own error (naming its own
/// sample), each good one the transcript it gets alone, in its own slot.
#[test]
fn a_failed_batch_reruns_alone_and_each_bad_input_keeps_its_own_error() {
    let clips = clips();
    let opts = TranscribeOptions::default();
    let mut nan = clips[1].clone();
    nan[100] = f32::NAN;
    let mut inf = clips[2].clone();
    inf[7] = f32::INFINITY;
    // jfk, beckett with a NaN, 0880, 0880 with +inf, beckett: five lengths under one batch's
    // cap, so the batcher puts all five into one call, which fails.
    let inputs: [&[f32]; 5] = [&clips[0], &nan, &clips[2], &inf, &clips[1]];
    let good: [Option<usize>; 5] = [Some(0), None, Some(2), None, Some(1)];
    for model in ["ctc", "tdt"] {
        let e = engine(model);
        let alone: Vec<Transcript> = clips
            .iter()
            .map(|c| e.transcribe(c, &opts, None).expect("alone"))
            .collect();
        let each = with_options(inputs, &opts);
        let out = e.transcribe_batch_each(&each, 8);
        // the failed call is not counted; its five inputs then ran one by one
        assert_eq!(
            out.stats.encoder_batches,
            vec![1; 5],
            "{model}: batch sizes after the fallback"
        );
        for (slot, (got, g)) in out.results.iter().zip(good).enumerate() {
            match g {
                Some(i) => {
                    let got = got
                        .as_ref()
                        .unwrap_or_else(|e| panic!("{model}/slot {slot}: {e}"));
                    assert_same(got, &alone[i], &format!("{model}/slot {slot}"));
                }
                None => {
                    let Err(StapesError::BadInput(msg)) = got else {
                        panic!("{model}/slot {slot}: want a BadInput error, got {got:?}");
                    };
                    let (index, value) = if slot == 1 { (100, "NaN") } else { (7, "inf") };
                    assert!(
                        msg.contains(&format!("sample {index} ")) && msg.contains(value),
                        "{model}/slot {slot}: error names another sample: {msg}"
                    );
                    // the same error as the input gets alone
                    match e.transcribe(inputs[slot], &opts, None) {
                        Err(StapesError::BadInput(alone_msg)) => {
                            assert_eq!(&alone_msg, msg, "{model}/slot {slot}: alone vs batch")
                        }
                        other => panic!("{model}/slot {slot}: alone gave {other:?}"),
                    }
                }
            }
        }
        assert_ne!(ids(&alone[0]), ids(&alone[1]), "{model}: clips alike");
    }
}
