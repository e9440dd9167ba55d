//! Canary parity with transformers: a tiny random-weight `CanaryForConditionalGeneration` (fixture
//! from tools/reference/fastconformer_canary.py, with a real SentencePiece tokenizer holding
//! Canary's control tokens) on the three clips' features: encoder output within 1e-4 relative L2,
//! greedy ids after the canary2 prompt identical to `generate`, beam-4 ids identical to
//! `generate(num_beams=4)`, on the reference backend and the CPU home; prompts resolved by name
//! equal to the ids sentencepiece gives the same names.

use serde_json::Value;
use stapes_core::reference::ReferenceBackend;
use stapes_core::tensor::rel_l2;
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::fastconformer::{Canary, CanaryRequest};
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
        let beam = m.generate_beam(&enc, &prompt, max_new, 4, 1.0).unwrap();
        assert_eq!(beam, ids(&exp["results"][clip]["beam4"]), "{clip} beam 4");
        // Beam 1 is greedy.
        assert_eq!(
            m.generate_beam(&enc, &prompt, max_new, 1, 1.0).unwrap(),
            got,
            "{clip} beam 1"
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
    // The default request is canary2's en -> en with punctuation; decoding runs to the end of
    // the decoder's positions, as the reference did.
    let req = CanaryRequest::default();
    assert_eq!(m.prompt(&req).unwrap(), ids(&exp["prompt"]));
    for (beam, key, text_key) in [(1, "generated", "text"), (4, "beam4", "beam4_text")] {
        let t = m.transcribe_request(&samples, &req, beam).unwrap();
        let mut gen = ids(&want[key]);
        if gen.last() == Some(&eos) {
            gen.pop();
        }
        assert_eq!(t.segments[0].tokens, gen, "beam {beam}");
        assert_eq!(
            t.text(),
            want[text_key].as_str().unwrap().trim(),
            "beam {beam}"
        );
    }
}

/// The prompt builder resolves Canary's control tokens by name from the model's tokenizer.json:
/// the same ids sentencepiece gives those names, for transcription, translation without
/// punctuation, and every switch on; unknown languages are a typed error naming the known ones.
#[test]
fn canary_prompts_from_the_tokenizer() {
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_canary.json")).unwrap(),
    )
    .unwrap();
    let m = Canary::new(
        ReferenceBackend::new(),
        &fixtures().join("canary"),
        Lane::F32,
    )
    .unwrap();
    for p in exp["prompts"].as_array().unwrap() {
        let flag = |k: &str| p.get(k).and_then(Value::as_bool).unwrap_or(false);
        let req = CanaryRequest {
            source: p["source"].as_str().unwrap().into(),
            target: p["target"].as_str().unwrap().into(),
            pnc: flag("pnc"),
            itn: flag("itn"),
            timestamps: flag("timestamps"),
            diarize: flag("diarize"),
        };
        assert_eq!(m.prompt(&req).unwrap(), ids(&p["ids"]), "{req:?}");
    }
    let bad = CanaryRequest {
        source: "xx".into(),
        ..CanaryRequest::default()
    };
    let e = m.prompt(&bad).unwrap_err().to_string();
    assert!(e.contains("xx") && e.contains("de, en, es, fr"), "{e}");
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
    let params = |c: &CanaryConfig| -> f64 {
        c.expected_shapes()
            .iter()
            .filter(|(n, _)| n != "proj_out.weight") // tied
            .map(|(_, s)| s.iter().product::<usize>() as f64)
            .sum::<f64>()
            / 1e9
    };
    // Model cards: canary-1b-v2 978 M, canary-1b-flash 883 M, canary-180m-flash 182 M.
    for (name, lo, hi) in [
        ("canary-1b-v2", 0.9, 1.05),
        ("canary-1b-flash", 0.83, 0.93),
        ("canary-180m-flash", 0.16, 0.2),
    ] {
        let n = params(&CanaryConfig::published(name).unwrap());
        assert!((lo..hi).contains(&n), "{name}: {n:.3} B parameters");
    }
    let big = CanaryConfig::published("canary-1b-v2").unwrap();
    let mut small = big.clone();
    small.encoder.num_layers = 1;
    small.num_layers = 1;
    small.vocab_size = 256;
    let m = Canary::synthetic(CpuBackend::new(2).unwrap(), small, 3, Lane::F32).unwrap();
    let noise = HostTensor::random(vec![8000], 1, 0.1);
    let t = m.transcribe(&noise.data, &[7, 4], 3).unwrap();
    assert!(t.segments[0].tokens.len() <= 3);
    // canary-180m-flash's shape: an encoder narrower than the decoder, bridged by
    // encoder_decoder_proj; beam search runs through it.
    let mut flash = CanaryConfig::published("canary-180m-flash").unwrap();
    flash.encoder.num_layers = 1;
    flash.num_layers = 1;
    flash.vocab_size = 128;
    assert_ne!(flash.encoder.hidden_size, flash.hidden_size);
    let m = Canary::synthetic(CpuBackend::new(2).unwrap(), flash, 5, Lane::F32).unwrap();
    let feats = HostTensor::random(vec![40, 128], 2, 1.0);
    let enc = m.encode_host(&feats).unwrap();
    assert_eq!(m.backend().download(&enc).unwrap().shape, vec![1, 5, 1024]);
    assert!(m.generate_beam(&enc, &[7, 4], 4, 3, 1.0).unwrap().len() <= 4);
}

/// Inputs longer than `canary::WINDOW_SECONDS` (40) are cut into windows, each decoded alone: 85 s
/// give three contiguous segments, handed out one by one, whose ids are those of each window by
/// itself; the cuts fall in the pauses nearest the equal split (here half-second silences put
/// 1.7 s and 2.6 s from it), never more than 5 s from it.
#[test]
fn canary_long_input_runs_in_windows() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/jfk.wav");
    let mut r = hound::WavReader::open(&path).expect("samples/jfk.wav opens");
    let jfk: Vec<f32> = r
        .samples::<i16>()
        .map(|s| s.unwrap() as f32 / 32768.0)
        .collect();
    let mut samples: Vec<f32> = jfk.iter().copied().cycle().take(85 * 16_000).collect();
    for at in [30 * 16_000, 55 * 16_000] {
        samples[at..at + 8_000].fill(0.0);
    }
    let m = Canary::new(
        CpuBackend::new(2).unwrap(),
        &fixtures().join("canary"),
        Lane::F32,
    )
    .unwrap();
    let req = CanaryRequest::default();
    let mut seen = Vec::new();
    let t = m
        .transcribe_request_observed(&samples, &req, 1, &mut |s| seen.push(s.clone()))
        .unwrap();
    assert_eq!(t.segments.len(), 3);
    // Each window's segment is handed out as it is decoded: the same segments, in order.
    assert_eq!(seen.len(), 3);
    for (a, b) in seen.iter().zip(&t.segments) {
        assert_eq!(
            (a.id, &a.tokens, a.start, a.end),
            (b.id, &b.tokens, b.start, b.end)
        );
    }
    let cuts = stapes_models::fastconformer::canary::windows(&samples);
    assert_eq!(cuts.len(), 3);
    assert_eq!((cuts[0].start, cuts[2].end), (0, samples.len()));
    for (i, w) in cuts.windows(2).enumerate() {
        assert_eq!(w[0].end, w[1].start, "contiguous");
        let silence = [30 * 16_000, 55 * 16_000][i];
        assert!(
            (silence..silence + 8_000).contains(&w[0].end),
            "cut {i} at {} s, not in the pause at {} s",
            w[0].end as f64 / 16_000.0,
            silence / 16_000
        );
    }
    for (i, (s, w)) in t.segments.iter().zip(&cuts).enumerate() {
        assert!(w.len() <= 40 * 16_000);
        assert!((s.start - w.start as f64 / 16_000.0).abs() < 1e-9);
        assert!((s.end - w.end as f64 / 16_000.0).abs() < 1e-9);
        let alone = m.transcribe_request(&samples[w.clone()], &req, 1).unwrap();
        assert_eq!(s.tokens, alone.segments[0].tokens, "window {i}");
    }
}

/// Window bounds on awkward lengths: none longer than 40 s, contiguous, covering the input, as
/// many as the limit needs, and each cut within 5 s of the equal split.
#[test]
fn canary_window_bounds() {
    use stapes_models::fastconformer::canary::windows;
    assert!(windows(&[]).is_empty());
    let max: usize = 40 * 16_000;
    for n in [
        1,
        1600,
        max - 1,
        max,
        max + 1,
        2 * max,
        2 * max + 7,
        5 * max - 3,
    ] {
        // a tone with a slow loudness swing, so the quietest frame is somewhere definite
        let x: Vec<f32> = (0..n)
            .map(|i| (i as f32 * 0.05).sin() * (1.1 + (i as f32 / 37_000.0).sin()))
            .collect();
        let w = windows(&x);
        assert_eq!(w.len(), n.div_ceil(max), "n {n}");
        assert_eq!((w[0].start, w[w.len() - 1].end), (0, n), "n {n}");
        for (i, r) in w.iter().enumerate() {
            assert!(!r.is_empty() && r.len() <= max, "n {n}: window {i} {r:?}");
            if i + 1 < w.len() {
                assert_eq!(r.end, w[i + 1].start);
                let nominal = r.start + (n - r.start).div_ceil(w.len() - i);
                assert!(
                    r.end.abs_diff(nominal) <= 5 * 16_000,
                    "n {n}: cut {i} {r:?}"
                );
            }
        }
    }
}

/// Language identification as NeMo's canary2 does it (two greedy steps after
/// `<|startofcontext|><|startoftranscript|>`): the ids equal transformers' greedy ids after the
/// same partial prompt; this random model names no language, so detection says so (and an
/// `auto` request falls back to English: the en -> en prompt's ids).
#[test]
fn canary_language_ids_match_transformers() {
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_canary_lid.json")).unwrap(),
    )
    .unwrap();
    let m = Canary::new(
        CpuBackend::new(2).unwrap(),
        &fixtures().join("canary"),
        Lane::F32,
    )
    .unwrap();
    let inputs = read("inputs.safetensors");
    for clip in ["jfk", "beckett", "lv0880"] {
        let enc = m.encode_host(&inputs[&format!("features.{clip}")]).unwrap();
        assert_eq!(
            m.language_ids(&enc).unwrap(),
            ids(&exp["ids"][clip]),
            "{clip}"
        );
        assert_eq!(m.detect_language(&enc).unwrap(), None, "{clip}");
    }
    let noise = HostTensor::random(vec![32000], 4, 0.1);
    let auto = CanaryRequest {
        source: "auto".into(),
        target: "auto".into(),
        ..CanaryRequest::default()
    };
    let a = m.transcribe_request(&noise.data, &auto, 1).unwrap();
    let b = m
        .transcribe_request(&noise.data, &CanaryRequest::default(), 1)
        .unwrap();
    assert_eq!(a.segments[0].tokens, b.segments[0].tokens);
    assert_eq!(a.language, "en");
}

/// NeMo's first prompt format (canary-1b: source, task, target, pnc) from the same tokenizer:
/// the ids sentencepiece gives those names; canary2-only switches are refused there.
#[test]
fn canary1_prompts_from_the_tokenizer() {
    use stapes_models::fastconformer::{CanaryTokenizer, PromptFormat};
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_canary_lid.json")).unwrap(),
    )
    .unwrap();
    let tok = CanaryTokenizer::from_hf_file(&fixtures().join("canary/tokenizer.json")).unwrap();
    assert_eq!(tok.default_format(), PromptFormat::Canary2);
    for p in exp["canary1_prompts"].as_array().unwrap() {
        let req = CanaryRequest {
            source: p["source"].as_str().unwrap().into(),
            target: p["target"].as_str().unwrap().into(),
            pnc: p["pnc"].as_bool().unwrap(),
            ..CanaryRequest::default()
        };
        assert_eq!(
            tok.prompt(PromptFormat::Canary, &req).unwrap(),
            ids(&p["ids"]),
            "{req:?}"
        );
    }
    let itn = CanaryRequest {
        itn: true,
        ..CanaryRequest::default()
    };
    assert!(tok.prompt(PromptFormat::Canary, &itn).is_err());
}

/// The fixture's margins (`expected_canary_lanes.json`) are the decisions we make: CPU f32
/// per-step margins equal transformers'; every margin is ≥ 4× the emulated f16 logit error (what
/// the CUDA f16 "identical ids" rule rests on); the CPU q8 lane follows the q8 rule (ids identical
/// until the first step whose f32 margin is below 2× the emulated q8 logit error, which bounds
/// this home's finer 32-block activation quantization too).
#[test]
fn canary_margins_and_lane_rules() {
    let lanes: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_canary_lanes.json")).unwrap(),
    )
    .unwrap();
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_canary.json")).unwrap(),
    )
    .unwrap();
    let f16 = lanes["lane_logit_error"]["f16"].as_f64().unwrap() as f32;
    let q8 = lanes["lane_logit_error"]["q8"].as_f64().unwrap() as f32;
    let prompt = ids(&exp["prompt"]);
    let max_new = exp["max_new_tokens"].as_u64().unwrap() as usize;
    let inputs = read("inputs.safetensors");
    let cpu = |lane| {
        Canary::new(
            CpuBackend::new(2).unwrap(),
            &fixtures().join("canary"),
            lane,
        )
    };
    let (f32m, q8m) = (cpu(Lane::F32).unwrap(), cpu(Lane::Q8).unwrap());
    for clip in ["jfk", "beckett", "lv0880"] {
        let want: Vec<f32> = lanes["results"][clip]["margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let f = &inputs[&format!("features.{clip}")];
        let (got, margins) = f32m
            .generate_with_margins(&f32m.encode_host(f).unwrap(), &prompt, max_new)
            .unwrap();
        assert_eq!(got, ids(&exp["results"][clip]["generated"]), "{clip}");
        assert_eq!(margins.len(), want.len(), "{clip}");
        for (k, (a, b)) in margins.iter().zip(&want).enumerate() {
            assert!((a - b).abs() < 1e-3, "{clip}: step {k} margin {a} vs {b}");
            assert!(
                *b >= 4.0 * f16,
                "{clip}: step {k} margin {b} within f16's reach"
            );
        }
        let q = q8m
            .generate(&q8m.encode_host(f).unwrap(), &prompt, max_new)
            .unwrap();
        let same = q.iter().zip(&got).take_while(|(a, b)| a == b).count();
        let safe = want.iter().take_while(|&&m| m >= 2.0 * q8).count();
        eprintln!("q8 {clip}: {same} leading ids equal, {safe} safe steps; {q:?} vs {got:?}");
        assert!(
            same >= safe.min(got.len()),
            "q8 {clip}: step {same} differs"
        );
    }
}
