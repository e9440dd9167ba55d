//! The device-form label loop (`Parakeet::set_device_decode(Some(true))`: state tensors and the
//! `transducer_*` ops, here through their composed defaults on the CPU home) against the host
//! loop and transformers' ids, on the TDT and RNNT fixtures: one clip at a time, and a padded
//! batch of the three clips (cut to different lengths) decoded together.

use serde_json::Value;
use stapes_core::HostTensor;
use stapes_core::Lane;
use stapes_cpu::CpuBackend;
use stapes_models::fastconformer::{Decoded, Parakeet};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const CLIPS: [&str; 3] = ["jfk", "beckett", "lv0880"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fastconformer")
}

fn features() -> Vec<HostTensor> {
    let st = stapes_formats::safetensors_dir::read_file(&fixtures().join("inputs.safetensors"))
        .expect("fixture inputs.safetensors");
    CLIPS
        .iter()
        .map(|c| {
            let t = &st.tensors[&format!("features.{c}")];
            HostTensor::new(t.shape.clone(), t.to_f32()).expect("features")
        })
        .collect()
}

fn expected() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected.json")).expect("expected.json"),
    )
    .expect("json")
}

fn hf_ids(exp: &Value, model: &str, clip: &str) -> Vec<u32> {
    exp["models"][model]["results"][clip]["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect()
}

/// Steps (token, frame, duration), emitted tokens and frames equal, margins within f32 noise.
fn same(got: &Decoded, want: &Decoded, what: &str) {
    assert_eq!(got, want, "{what}: decisions differ");
    assert_eq!(got.margins.len(), want.margins.len(), "{what}: margins");
    for (k, (a, b)) in got.margins.iter().zip(&want.margins).enumerate() {
        assert!((a - b).abs() <= 1e-4, "{what}: step {k} margin {a} vs {b}");
    }
}

#[test]
fn device_form_label_loop_equals_the_host_loop_single_and_batched() {
    let feats = features();
    let exp = expected();
    let mut by_model: BTreeMap<&str, usize> = BTreeMap::new();
    for model in ["tdt", "rnnt"] {
        let m = Parakeet::new(
            CpuBackend::new(2).unwrap(),
            &fixtures().join(model),
            Lane::F32,
        )
        .expect("model");
        let mut hosts = Vec::new();
        for (i, f) in feats.iter().enumerate() {
            let enc = m.encode_host(f).expect("encode");
            m.set_device_decode(Some(false));
            let host = m.greedy(&enc).expect("host loop");
            assert_eq!(
                host.ids(),
                hf_ids(&exp, model, CLIPS[i]),
                "{model}/{}",
                CLIPS[i]
            );
            m.set_device_decode(Some(true));
            let dev = m.greedy(&enc).expect("device loop");
            same(&dev, &host, &format!("{model}/{}: single", CLIPS[i]));
            hosts.push(host);
        }
        // A padded batch: every clip cut shorter than the longest, so the loop's frame bounds
        // differ per clip; each must equal its own host loop over the same frames.
        let mels = feats[0].shape[1];
        let cut: Vec<HostTensor> = feats
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let n = f.shape[0] - 40 * i;
                HostTensor::new(vec![n, mels], f.data[..n * mels].to_vec()).unwrap()
            })
            .collect();
        let (enc, lens) = m.encode_batch(&cut).expect("batch");
        m.set_device_decode(Some(false));
        let want: Vec<Decoded> = (0..cut.len())
            .map(|i| m.greedy_at(&enc, i, lens[i]).expect("host loop"))
            .collect();
        m.set_device_decode(Some(true));
        let got = m.greedy_batch(&enc, &lens).expect("device loop batch");
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            same(g, w, &format!("{model}/{}: batched", CLIPS[i]));
            *by_model.entry(model).or_default() += w.steps.len();
        }
        // three steps per chain call: clips finish mid-call, later records are invalid
        m.set_device_decode_steps(3);
        let got = m
            .greedy_batch(&enc, &lens)
            .expect("device loop batch, 3 steps per call");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            same(g, w, &format!("{model}/{}: batched, 3 per call", CLIPS[i]));
        }
        m.set_device_decode_steps(8);
        // the batched transcripts follow the device loop too
        m.set_device_decode(None);
    }
    eprintln!("steps compared per model (batched pass): {by_model:?}");
}
