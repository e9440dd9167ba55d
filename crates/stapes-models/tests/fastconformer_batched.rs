//! Batched (padded, masked) Parakeet encoding against one clip at a time. The fixture clips
//! (~300 feature frames each) are cut to 300, 200 and 123 frames, so two are padded in the
//! batch: each clip's encoder frames must match its own unpadded pass (whose parity with
//! transformers `fastconformer_parity.rs` checks), and the uncut clip must still match
//! transformers' encoder output and ids; also with tiny chunks (masks cut per subsampling chunk
//! and attention block). Padding without masks must break the bar, so the check can fail.

use serde_json::Value;
use stapes_core::tensor::rel_l2;
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::fastconformer::{Chunking, Parakeet};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const CLIPS: [&str; 3] = ["jfk", "beckett", "lv0880"];
/// The f32 parity bar of `fastconformer_parity.rs` (against transformers).
const BAR: f32 = 1e-4;
/// Batched against single on the same home: only summation order may differ.
const SAME_HOME_BAR: f32 = 1e-5;
/// Feature frames kept of each clip.
const KEEP: [usize; 3] = [300, 200, 123];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fastconformer")
}

fn read(name: &str) -> BTreeMap<String, HostTensor> {
    let st = stapes_formats::safetensors_dir::read_file(&fixtures().join(name)).expect("fixture");
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

fn expected_ids(exp: &Value, model: &str, clip: &str) -> Vec<u32> {
    exp["models"][model]["results"][clip]["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect()
}

/// Rows `0..frames` of sequence `i` of `(B, T, d)`.
fn rows(enc: &HostTensor, i: usize, frames: usize) -> Vec<f32> {
    let (t, d) = (enc.shape[1], enc.shape[2]);
    enc.data[i * t * d..(i * t + frames) * d].to_vec()
}

fn cut(f: &HostTensor, frames: usize) -> HostTensor {
    let mels = f.shape[1];
    HostTensor::new(vec![frames, mels], f.data[..frames * mels].to_vec()).unwrap()
}

#[test]
fn padded_batch_equals_one_clip_at_a_time() {
    let inputs = read("inputs.safetensors");
    let want = read("expected.safetensors");
    let exp: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap())
            .unwrap();
    let feats: Vec<HostTensor> = CLIPS
        .iter()
        .zip(KEEP)
        .map(|(c, k)| cut(&inputs[&format!("features.{c}")], k))
        .collect();
    for model in ["ctc", "rnnt", "tdt"] {
        let mut m = Parakeet::new(
            CpuBackend::new(2).unwrap(),
            &fixtures().join(model),
            Lane::F32,
        )
        .expect("model");
        for chunking in [
            Chunking::default(),
            Chunking {
                subsampling_frames: 64,
                attention_queries: 7,
            },
        ] {
            m.set_chunking(chunking);
            let (enc, out_lens) = m.encode_batch(&feats).expect("batched encode");
            let host = m.backend().download(&enc).unwrap();
            for (i, clip) in CLIPS.iter().enumerate() {
                let one = m.encode_host(&feats[i]).expect("single");
                let single = m.backend().download(&one).unwrap();
                assert_eq!(out_lens[i], single.shape[1], "{model}/{clip}: frames");
                let got = rows(&host, i, out_lens[i]);
                let e = rel_l2(&got, &single.data);
                eprintln!(
                    "{model}/{clip}[..{}] {chunking:?}: batched vs single rel L2 {e:.2e}",
                    KEEP[i]
                );
                assert!(
                    e <= SAME_HOME_BAR,
                    "{model}/{clip} {chunking:?}: rel L2 {e}"
                );
                let ids = m.greedy_at(&enc, i, out_lens[i]).unwrap().ids();
                assert_eq!(ids, m.greedy(&one).unwrap().ids(), "{model}/{clip}");
                if KEEP[i] == inputs[&format!("features.{clip}")].shape[0] {
                    let w = &want[&format!("{model}.encoder.{clip}")];
                    let e = rel_l2(&got, &w.data);
                    assert!(e <= BAR, "{model}/{clip}: vs transformers rel L2 {e}");
                    assert_eq!(ids, expected_ids(&exp, model, clip), "{model}/{clip}");
                }
            }
        }
    }
}

#[test]
fn padding_without_masks_breaks_the_bar() {
    let inputs = read("inputs.safetensors");
    let m = Parakeet::new(
        CpuBackend::new(2).unwrap(),
        &fixtures().join("tdt"),
        Lane::F32,
    )
    .expect("model");
    let short = cut(&inputs["features.lv0880"], KEEP[2]);
    let mels = short.shape[1];
    let t = KEEP[0];
    let mut data = short.data.clone();
    data.resize(t * mels, 0.0);
    let x = m
        .backend()
        .upload(&HostTensor::new(vec![1, t, mels], data).unwrap())
        .unwrap();
    let padded = m.backend().download(&m.encode(&x).unwrap()).unwrap();
    let single = m
        .backend()
        .download(&m.encode_host(&short).unwrap())
        .unwrap();
    let e = rel_l2(&rows(&padded, 0, single.shape[1]), &single.data);
    eprintln!(
        "tdt/lv0880[..{}] zero-padded to {t} frames, no masks: rel L2 {e:.2e}",
        KEEP[2]
    );
    assert!(
        e > SAME_HOME_BAR * 100.0,
        "unmasked padding stayed near the bar: {e}"
    );
}

/// A bucketed chain slot (the CUDA home's shape buckets, here on the CPU) serves several
/// lengths: its masks must follow each call's lengths, also when a call repeats the last
/// lengths and rewrites nothing.
#[test]
fn bucketed_slot_follows_each_calls_lengths() {
    let inputs = read("inputs.safetensors");
    let mut m = Parakeet::new(
        CpuBackend::new(2).unwrap(),
        &fixtures().join("tdt"),
        Lane::F32,
    )
    .expect("model");
    let clip = &inputs["features.jfk"];
    let lens = [300, 290, 300, 300, 290];
    let exact: Vec<HostTensor> = lens
        .iter()
        .map(|&n| {
            let e = m.encode_host(&cut(clip, n)).expect("exact");
            m.backend().download(&e).unwrap()
        })
        .collect();
    m.graph_bucket = 32;
    for (n, want) in lens.iter().zip(&exact) {
        let e = m.encode_host(&cut(clip, *n)).expect("bucketed");
        let got = m.backend().download(&e).unwrap();
        assert_eq!(got.shape, want.shape, "{n} frames");
        let err = rel_l2(&got.data, &want.data);
        eprintln!("jfk[..{n}] in a 320-frame slot: rel L2 {err:.2e}");
        assert!(err <= SAME_HOME_BAR, "{n} frames: rel L2 {err}");
    }
}
