//! Batched (padded, masked) Parakeet encoding against transformers' one-clip outputs: the three
//! fixture clips have different lengths, so two of the three are padded in the batch. Each
//! clip's encoder frames must stay within the parity bar of transformers' unpadded pass and its
//! greedy ids must be identical, also with tiny chunks (masks cut per subsampling chunk and
//! attention block). Padding without masks must break the bar, so the check can fail.

use serde_json::Value;
use stapes_core::tensor::rel_l2;
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::fastconformer::{Chunking, Parakeet};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const CLIPS: [&str; 3] = ["jfk", "beckett", "lv0880"];
/// The f32 parity bar of `fastconformer_parity.rs`.
const BAR: f32 = 1e-4;

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

#[test]
fn padded_batch_equals_transformers_one_clip_at_a_time() {
    let inputs = read("inputs.safetensors");
    let want = read("expected.safetensors");
    let exp: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap())
            .unwrap();
    let feats: Vec<HostTensor> = CLIPS
        .iter()
        .map(|c| inputs[&format!("features.{c}")].clone())
        .collect();
    let lens: Vec<usize> = feats.iter().map(|f| f.shape[0]).collect();
    assert!(
        lens.iter().any(|&l| l != lens[0]),
        "the clips must differ in length for padding to be tested: {lens:?}"
    );
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
                let w = &want[&format!("{model}.encoder.{clip}")];
                assert_eq!(out_lens[i], w.shape[1], "{model}/{clip}: frames");
                let e = rel_l2(&rows(&host, i, out_lens[i]), &w.data);
                eprintln!("{model}/{clip} {chunking:?}: batched rel L2 {e:.2e}");
                assert!(e <= BAR, "{model}/{clip} {chunking:?}: rel L2 {e} > {BAR}");
                let ids = m.greedy_at(&enc, i, out_lens[i]).unwrap().ids();
                assert_eq!(ids, expected_ids(&exp, model, clip), "{model}/{clip}");
            }
        }
    }
}

#[test]
fn padding_without_masks_breaks_the_bar() {
    let inputs = read("inputs.safetensors");
    let want = read("expected.safetensors");
    let feats: Vec<&HostTensor> = CLIPS
        .iter()
        .map(|c| &inputs[&format!("features.{c}")])
        .collect();
    let t = feats.iter().map(|f| f.shape[0]).max().unwrap();
    let mels = feats[0].shape[1];
    let m = Parakeet::new(
        CpuBackend::new(2).unwrap(),
        &fixtures().join("tdt"),
        Lane::F32,
    )
    .expect("model");
    let (i, short) = feats
        .iter()
        .enumerate()
        .min_by_key(|(_, f)| f.shape[0])
        .unwrap();
    let mut data = short.data.clone();
    data.resize(t * mels, 0.0);
    let x = m
        .backend()
        .upload(&HostTensor::new(vec![1, t, mels], data).unwrap())
        .unwrap();
    let enc = m.backend().download(&m.encode(&x).unwrap()).unwrap();
    let w = &want[&format!("tdt.encoder.{}", CLIPS[i])];
    let e = rel_l2(&rows(&enc, 0, w.shape[1]), &w.data);
    eprintln!(
        "tdt/{}: zero-padded to {t} frames, no masks: rel L2 {e:.2e}",
        CLIPS[i]
    );
    assert!(e > BAR, "unmasked padding stayed under the bar: {e}");
}
