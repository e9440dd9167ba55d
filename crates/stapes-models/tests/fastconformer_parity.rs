//! FastConformer (Parakeet) parity with transformers: tiny random-weight CTC, RNNT and TDT models
//! saved by `save_pretrained`, run on the log-mel of three real speech clips (fixtures from
//! tools/reference/fastconformer_hf.py). Encoder output within 1e-4 relative L2; greedy steps,
//! ids, TDT durations and text identical; on the scalar reference backend and the CPU home.

use serde_json::Value;
use stapes_core::reference::ReferenceBackend;
use stapes_core::tensor::rel_l2;
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::fastconformer::{ctc_collapse, load_hf, Parakeet};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MODELS: [&str; 3] = ["ctc", "rnnt", "tdt"];
const CLIPS: [&str; 3] = ["jfk", "beckett", "lv0880"];
/// f32 everywhere; the remaining difference is summation order (the reference sums in f64).
const ENCODER_BAR: f32 = 1e-4;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fastconformer")
}

fn read_tensors(name: &str) -> BTreeMap<String, HostTensor> {
    let st =
        stapes_formats::safetensors_dir::read_file(&fixtures().join(name)).expect("fixture reads");
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

fn expected() -> Value {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json parses")
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("integer") as u32)
        .collect()
}

fn usizes(v: &Value) -> Vec<usize> {
    u32s(v).into_iter().map(|x| x as usize).collect()
}

fn check<B: Backend>(make: impl Fn() -> B) {
    let inputs = read_tensors("inputs.safetensors");
    let enc_ref = read_tensors("expected.safetensors");
    let exp = expected();
    for m in MODELS {
        let model = Parakeet::new(make(), &fixtures().join(m), Lane::F32).expect("model loads");
        for clip in CLIPS {
            let feats = &inputs[&format!("features.{clip}")];
            let want = &exp["models"][m]["results"][clip];
            let enc = model.encode_host(feats).unwrap();
            let host = model.backend().download(&enc).unwrap();
            let r = &enc_ref[&format!("{m}.encoder.{clip}")];
            assert_eq!(host.shape[1..], r.shape[..], "{m}/{clip}: encoder shape");
            let err = rel_l2(&host.data, &r.data);
            eprintln!(
                "{} {m}/{clip}: encoder rel L2 {err:.2e}",
                model.backend().name()
            );
            assert!(
                err <= ENCODER_BAR,
                "{m}/{clip}: encoder rel L2 {err} > {ENCODER_BAR}"
            );

            let d = model.greedy(&enc).unwrap();
            let steps: Vec<u32> = d.steps.iter().map(|s| s.token).collect();
            if m == "ctc" {
                assert_eq!(steps, u32s(&want["frames"]), "{m}/{clip}: frame argmax");
            } else {
                assert_eq!(steps, u32s(&want["steps"]), "{m}/{clip}: steps");
                let durs: Vec<usize> = d.steps.iter().map(|s| s.duration).collect();
                assert_eq!(durs, usizes(&want["durations"]), "{m}/{clip}: durations");
                let frames: Vec<usize> = d.steps.iter().map(|s| s.frame).collect();
                assert_eq!(frames, usizes(&want["frames"]), "{m}/{clip}: frames");
            }
            assert_eq!(d.ids(), u32s(&want["ids"]), "{m}/{clip}: ids");
            // Our transducer margins are transformers' (CTC's argmax runs on the device and
            // reports none): the fixture's margins describe the decisions we make.
            let fixture_margins = f32s(&want["margins"]);
            if m != "ctc" {
                assert_eq!(
                    d.margins.len(),
                    fixture_margins.len(),
                    "{m}/{clip}: margins"
                );
                for (k, (a, b)) in d.margins.iter().zip(&fixture_margins).enumerate() {
                    assert!(
                        (a - b).abs() < 1e-3,
                        "{m}/{clip}: step {k} margin {a} vs {b}"
                    );
                }
            }
            let text = model.decode_text(&d.ids()).unwrap();
            assert_eq!(text, want["text"].as_str().unwrap(), "{m}/{clip}: text");
        }
    }
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("a number list")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

/// The fixture's promise, which the GPU tests' exact-id rules rest on: every decision's f32
/// margin clears the stated floor and 4x the emulated f16 logit error, and the q8 error bound
/// the q8 rule uses is recorded.
#[test]
fn fixture_decisions_clear_the_margin_floor() {
    let exp = expected();
    for m in MODELS {
        let model = &exp["models"][m];
        let floor = model["margin_floor"].as_f64().expect("margin_floor") as f32;
        let f16 = model["lane_logit_error"]["f16"]
            .as_f64()
            .expect("f16 error") as f32;
        let q8 = model["lane_logit_error"]["q8"].as_f64().expect("q8 error") as f32;
        assert!(
            floor >= 0.05 && floor >= 4.0 * f16,
            "{m}: floor {floor}, f16 error {f16}"
        );
        assert!(q8 > f16, "{m}: q8 error {q8} not above f16's {f16}");
        let mut runs = vec![("", &model["end_to_end_jfk"])];
        runs.extend(CLIPS.iter().map(|c| (*c, &model["results"][c])));
        for (clip, r) in runs.into_iter().filter(|(_, r)| !r.is_null()) {
            let margins = f32s(&r["margins"]);
            let steps = if m == "ctc" {
                &r["frames"]
            } else {
                &r["steps"]
            };
            assert_eq!(
                margins.len(),
                u32s(steps).len(),
                "{m}/{clip}: one margin a step"
            );
            let low = margins.iter().copied().fold(f32::INFINITY, f32::min);
            // the JSON keeps 4 decimals
            assert!(
                low >= floor - 1e-4,
                "{m}/{clip}: margin {low} under {floor}"
            );
        }
    }
}

#[test]
fn reference_backend_matches_transformers() {
    check(ReferenceBackend::new);
}

#[test]
fn cpu_backend_matches_transformers() {
    check(|| CpuBackend::new(2).expect("cpu backend"));
}

/// The bar is not loose enough to pass a broken model: zeroing the position bias of one layer
/// (a term only the relative-position path carries) must fail it.
#[test]
fn planted_fault_fails_the_encoder_bar() {
    let mut ck = load_hf(&fixtures().join("tdt")).unwrap();
    let name = "encoder.layers.1.self_attn.bias_v";
    ck.tensors
        .get_mut(name)
        .unwrap()
        .data
        .iter_mut()
        .for_each(|v| *v = 0.0);
    let model = Parakeet::from_checkpoint(CpuBackend::new(2).unwrap(), &ck, Lane::F32).unwrap();
    let feats = &read_tensors("inputs.safetensors")["features.jfk"];
    let out = model
        .backend()
        .download(&model.encode_host(feats).unwrap())
        .unwrap();
    let err = rel_l2(
        &out.data,
        &read_tensors("expected.safetensors")["tdt.encoder.jfk"].data,
    );
    eprintln!("planted fault: rel L2 {err:.2e}");
    assert!(
        err > 100.0 * ENCODER_BAR,
        "a zeroed bias_v went unnoticed ({err})"
    );
}

#[test]
fn ctc_collapse_merges_repeats_and_drops_blank() {
    let d = ctc_collapse(&[3, 3, 0, 3, 5, 5, 0, 0, 5], 0);
    assert_eq!(d.ids(), vec![3, 3, 5, 5]);
    let frames: Vec<usize> = d.tokens.iter().map(|s| s.frame).collect();
    assert_eq!(frames, vec![0, 3, 4, 8]);
    assert_eq!(d.tokens[0].duration, 2);
    assert!(ctc_collapse(&[], 0).tokens.is_empty());
}

/// From raw samples through stapes' own NeMo front end (transformers' extractor made the
/// expected ids from the same samples): the first 3 s of samples/jfk.wav with the TDT model.
#[test]
fn tdt_transcribes_jfk_from_samples() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let exp = expected();
    let clip = &exp["clips"]["jfk"];
    let path = root.join(clip["source"].as_str().unwrap());
    let mut r = hound::WavReader::open(&path).expect("samples/jfk.wav opens");
    let n = clip["samples"].as_u64().unwrap() as usize;
    let samples: Vec<f32> = r
        .samples::<i16>()
        .take(n)
        .map(|s| s.unwrap() as f32 / 32768.0)
        .collect();
    let want = &exp["models"]["tdt"]["end_to_end_jfk"];
    let model = Parakeet::new(
        CpuBackend::new(2).unwrap(),
        &fixtures().join("tdt"),
        Lane::F32,
    )
    .unwrap();
    let t = model.transcribe(&samples).unwrap();
    let ids: Vec<u32> = t.segments.iter().flat_map(|s| s.tokens.clone()).collect();
    assert_eq!(ids, u32s(&want["ids"]));
    assert_eq!(t.text(), want["text"].as_str().unwrap().trim());
    // Token frames from durations: the first segment starts at the first emission's frame.
    let first = usizes(&want["frames"])[want["steps"]
        .as_array()
        .unwrap()
        .iter()
        .position(|s| s.as_u64() != Some(47))
        .unwrap()];
    assert!((t.segments[0].start - first as f64 * model.frame_seconds()).abs() < 1e-9);
    assert!(t
        .segments
        .iter()
        .all(|s| s.end <= t.duration + 1e-9 && s.start <= s.end));
    // Words: pieces joined at "▁" boundaries, in time order, spelling the text.
    let words: Vec<_> = t
        .segments
        .iter()
        .flat_map(|s| s.words.clone().unwrap())
        .collect();
    let joined: Vec<&str> = words.iter().map(|w| w.word.as_str()).collect();
    assert_eq!(joined.join(" "), t.text());
    assert!(words
        .windows(2)
        .all(|w| w[0].start <= w[1].start && w[0].start < w[0].end));
}

#[test]
fn bad_directories_are_errors() {
    let cpu = || CpuBackend::new(1).unwrap();
    let missing = Parakeet::new(cpu(), Path::new("/nonexistent/parakeet"), Lane::F32);
    assert!(missing.is_err());
    // A tensor with the wrong shape names the tensor.
    let mut ck = load_hf(&fixtures().join("ctc")).unwrap();
    let name = "encoder.layers.0.self_attn.q_proj.weight";
    let t = ck.tensors.remove(name).unwrap();
    ck.tensors
        .insert(name.into(), t.reshape(vec![32, 128]).unwrap());
    let e = stapes_models::fastconformer::weights::validate(&ck.config, &ck.tensors, &ck.path)
        .unwrap_err()
        .to_string();
    assert!(e.contains(name), "{e}");
    // Features of the wrong width are an input error, not a panic.
    let m = Parakeet::new(cpu(), &fixtures().join("ctc"), Lane::F32).unwrap();
    assert!(m.encode_host(&HostTensor::zeros(vec![40, 64])).is_err());
    assert!(m.transcribe(&[]).unwrap().segments.is_empty());
}

/// Published shapes have the published parameter counts, and a synthetic model of a small shape
/// runs end to end with finite outputs.
#[test]
fn published_shapes_and_synthetic_weights() {
    use stapes_models::fastconformer::{expected_shapes, synthetic_checkpoint, ParakeetConfig};
    let params = |name: &str| -> f64 {
        let c = ParakeetConfig::published(name).expect("published name");
        c.validate().unwrap();
        expected_shapes(&c)
            .iter()
            .map(|(_, s)| s.iter().product::<usize>() as f64)
            .sum::<f64>()
            / 1e9
    };
    for (name, lo, hi) in [
        ("parakeet-tdt-0.6b-v2", 0.58, 0.66),
        ("parakeet-tdt-0.6b-v3", 0.58, 0.66),
        ("parakeet-ctc-1.1b", 1.0, 1.15),
        ("parakeet-rnnt-1.1b", 1.0, 1.15),
    ] {
        let p = params(name);
        assert!((lo..hi).contains(&p), "{name}: {p:.3} B parameters");
    }
    assert!(ParakeetConfig::published("parakeet-nonexistent").is_none());

    let mut cfg = load_hf(&fixtures().join("tdt")).unwrap().config;
    cfg.encoder.num_layers = 1;
    let ck = synthetic_checkpoint(&cfg, 7).unwrap();
    let m = Parakeet::from_checkpoint(CpuBackend::new(2).unwrap(), &ck, Lane::F32).unwrap();
    let noise = HostTensor::random(vec![16_000], 3, 0.1);
    let enc = m.encode_host(&m.features(&noise.data).unwrap()).unwrap();
    let host = m.backend().download(&enc).unwrap();
    assert_eq!(
        host.shape,
        vec![1, cfg.encoder.output_frames(100), cfg.encoder.hidden_size]
    );
    assert!(host.data.iter().all(|v| v.is_finite()));
    m.transcribe(&noise.data).unwrap();
}

/// Long-input chunking (subsampling in time chunks with a halo, attention in query blocks) gives
/// the unchunked numbers: tiny chunks on the fixture exercise every seam.
#[test]
fn chunked_encoder_equals_one_block() {
    use stapes_models::fastconformer::Chunking;
    let feats = &read_tensors("inputs.safetensors")["features.lv0880"];
    let whole = Parakeet::new(
        CpuBackend::new(2).unwrap(),
        &fixtures().join("tdt"),
        Lane::F32,
    )
    .unwrap();
    let mut cut = Parakeet::new(
        CpuBackend::new(2).unwrap(),
        &fixtures().join("tdt"),
        Lane::F32,
    )
    .unwrap();
    for (frames, queries) in [(64, 7), (40, 1), (96, 37)] {
        cut.set_chunking(Chunking {
            subsampling_frames: frames,
            attention_queries: queries,
        });
        let a = whole.encode_host(feats).unwrap();
        let b = cut.encode_host(feats).unwrap();
        let (ha, hb) = (
            whole.backend().download(&a).unwrap(),
            cut.backend().download(&b).unwrap(),
        );
        assert_eq!(ha.shape, hb.shape);
        let err = rel_l2(&hb.data, &ha.data);
        assert!(err < 1e-6, "chunks ({frames}, {queries}): rel L2 {err}");
        assert_eq!(whole.greedy(&a).unwrap(), cut.greedy(&b).unwrap());
    }
}

/// Two equal-length clips encoded as one batch give each clip's single-sequence output.
#[test]
fn batched_encoder_equals_single() {
    let inputs = read_tensors("inputs.safetensors");
    let (a, b) = (&inputs["features.jfk"], &inputs["features.beckett"]);
    assert_eq!(a.shape, b.shape, "the fixture clips have equal length");
    let m = Parakeet::new(
        CpuBackend::new(2).unwrap(),
        &fixtures().join("rnnt"),
        Lane::F32,
    )
    .unwrap();
    let be = m.backend();
    let mut both = a.data.clone();
    both.extend_from_slice(&b.data);
    let x = be
        .upload(&HostTensor::new(vec![2, a.shape[0], a.shape[1]], both).unwrap())
        .unwrap();
    let out = be.download(&m.encode(&x).unwrap()).unwrap();
    let half = out.data.len() / 2;
    for (i, f) in [a, b].into_iter().enumerate() {
        let single = be.download(&m.encode_host(f).unwrap()).unwrap();
        let err = rel_l2(&out.data[i * half..(i + 1) * half], &single.data);
        assert!(err < 1e-6, "batch row {i}: rel L2 {err}");
    }
}
