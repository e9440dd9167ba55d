//! Canary parity with transformers: a tiny random-weight `CanaryForConditionalGeneration` (fixture
//! from tools/reference/fastconformer_canary.py) on the three clips' features: encoder output
//! within 1e-4 relative L2 and greedy ids after the fixed prompt identical to `generate`, on the
//! reference backend and the CPU home.

use serde_json::Value;
use stapes_core::reference::ReferenceBackend;
use stapes_core::tensor::rel_l2;
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::fastconformer::Canary;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fastconformer")
}

fn read(name: &str) -> BTreeMap<String, HostTensor> {
    let st = stapes_formats::safetensors_dir::read_file(&fixtures().join(name)).unwrap();
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

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn check<B: Backend>(backend: B) {
    let m = Canary::new(backend, &fixtures().join("canary"), Lane::F32).expect("canary loads");
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_canary.json")).unwrap(),
    )
    .unwrap();
    let (inputs, encs) = (
        read("inputs.safetensors"),
        read("expected_canary.safetensors"),
    );
    let prompt = ids(&exp["prompt"]);
    let max_new = exp["max_new_tokens"].as_u64().unwrap() as usize;
    for clip in ["jfk", "beckett", "lv0880"] {
        let enc = m.encode_host(&inputs[&format!("features.{clip}")]).unwrap();
        let host = m.backend().download(&enc).unwrap();
        let err = rel_l2(&host.data, &encs[&format!("canary.encoder.{clip}")].data);
        eprintln!(
            "{} canary/{clip}: encoder rel L2 {err:.2e}",
            m.backend().name()
        );
        assert!(err <= 1e-4, "{clip}: encoder rel L2 {err}");
        let got = m.generate(&enc, &prompt, max_new).unwrap();
        assert_eq!(got, ids(&exp["results"][clip]["generated"]), "{clip}");
        // The KV-cached path equals re-running the prefix.
        assert_eq!(
            m.generate_uncached(&enc, &prompt, max_new).unwrap(),
            got,
            "{clip}"
        );
    }
    assert!(m
        .generate(&m.encode_host(&inputs["features.jfk"]).unwrap(), &[], 3)
        .is_err());
}

#[test]
fn canary_reference_backend_matches_transformers() {
    check(ReferenceBackend::new());
}

#[test]
fn canary_cpu_backend_matches_transformers() {
    check(CpuBackend::new(2).unwrap());
}

/// From raw samples through stapes' NeMo front end: the first 3 s of samples/jfk.wav give the ids
/// and text transformers produced from the same samples with its own feature extractor.
#[test]
fn canary_transcribes_jfk_from_samples() {
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_canary.json")).unwrap(),
    )
    .unwrap();
    let want = &exp["results"]["end_to_end_jfk"];
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/jfk.wav");
    let mut r = hound::WavReader::open(&path).expect("samples/jfk.wav opens");
    let n = want["samples"].as_u64().unwrap() as usize;
    let samples: Vec<f32> = r
        .samples::<i16>()
        .take(n)
        .map(|s| s.unwrap() as f32 / 32768.0)
        .collect();
    let m = Canary::new(
        CpuBackend::new(2).unwrap(),
        &fixtures().join("canary"),
        Lane::F32,
    )
    .unwrap();
    let eos = exp["eos"].as_u64().unwrap() as u32;
    let t = m
        .transcribe(
            &samples,
            &ids(&exp["prompt"]),
            exp["max_new_tokens"].as_u64().unwrap() as usize,
        )
        .unwrap();
    let mut gen = ids(&want["generated"]);
    if gen.last() == Some(&eos) {
        gen.pop();
    }
    assert_eq!(t.segments[0].tokens, gen);
    assert_eq!(t.text(), want["text"].as_str().unwrap().trim());
}

/// The tensor table matches a real transformers checkpoint's names and shapes (the fixture), and
/// the published canary-1b-v2 shape has ~1B parameters; a synthetic model of a reduced shape runs.
#[test]
fn canary_shapes_and_synthetic_weights() {
    use stapes_models::fastconformer::CanaryConfig;
    let dir = fixtures().join("canary");
    let cfg_json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let cfg = CanaryConfig::from_hf_json(&cfg_json, &dir).unwrap();
    let st = stapes_formats::safetensors_dir::read_dir(&dir).unwrap();
    for (name, shape) in cfg.expected_shapes() {
        let key = if name.starts_with("proj_out") {
            name.clone()
        } else {
            format!("model.{name}")
        };
        if name == "proj_out.weight" {
            continue; // tied to the embedding, not stored
        }
        assert_eq!(
            st.tensors.get(&key).map(|t| t.shape.clone()),
            Some(shape),
            "{key}"
        );
    }
    let big = CanaryConfig::published("canary-1b-v2").unwrap();
    let n: f64 = big
        .expected_shapes()
        .iter()
        .map(|(_, s)| s.iter().product::<usize>() as f64)
        .sum::<f64>()
        / 1e9;
    assert!((0.9..1.1).contains(&n), "canary-1b-v2: {n:.3} B parameters");
    let mut small = big.clone();
    small.encoder.num_layers = 1;
    small.num_layers = 1;
    small.vocab_size = 256;
    let m = Canary::synthetic(CpuBackend::new(2).unwrap(), small, 3, Lane::F32).unwrap();
    let noise = HostTensor::random(vec![8000], 1, 0.1);
    let t = m.transcribe(&noise.data, &[7, 4], 3).unwrap();
    assert!(t.segments[0].tokens.len() <= 3);
}
