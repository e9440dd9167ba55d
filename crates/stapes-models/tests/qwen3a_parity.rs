//! Qwen3-ASR parity with transformers 5.17 (`Qwen3ASRForConditionalGeneration`): a tiny
//! random-weight model saved with `save_pretrained`, run on four real speech clips (fixtures from
//! tools/reference/qwen3_asr_hf.py). The audio tower's output and the projected audio
//! embeddings within 1e-4 relative L2; greedy ids identical (every decision's top-1/top-2
//! margin was at least 0.05 logits in transformers), with and without a forced language; on the
//! scalar reference backend and the CPU home; then from raw samples through stapes' own front
//! end; and the loader's refusals.

use serde_json::Value;
use stapes_core::reference::ReferenceBackend;
use stapes_core::tensor::rel_l2;
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::qwen3a::{Prompt, Qwen3Asr, Qwen3AsrOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const CLIPS: [&str; 4] = ["jfk", "beckett", "lv0870", "short"];
/// f32 everywhere; what remains is summation order and f32 transcendentals.
const TOWER_BAR: f32 = 1e-4;
/// transformers' features were stored rounded to f16 (|x| ≤ ~2: half an ulp ≤ 1e-3).
const FEATURE_BAR: f32 = 1e-3;

#[path = "support/fixture.rs"]
mod fixture;
use fixture::clip_samples;

fn fixtures() -> PathBuf {
    fixture::dir("qwen3a")
}

fn read_tensors(name: &str) -> BTreeMap<String, HostTensor> {
    fixture::tensors(&fixtures(), name)
}

fn expected() -> Value {
    fixture::expected(&fixtures())
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn model<B: Backend>(b: B) -> Qwen3Asr<B> {
    Qwen3Asr::new(b, &fixtures().join("model"), Lane::F32).expect("model loads")
}

/// Tower output, audio embeddings and the greedy ids of every run against transformers.
fn parity<B: Backend>(b: B) {
    let exp = expected();
    let m = model(b);
    let inputs = read_tensors("inputs.safetensors");
    let outputs = read_tensors("expected.safetensors");
    for clip in CLIPS {
        let r = &exp["results"][clip];
        let feats = &inputs[&format!("features.{clip}")];
        let valid = r["valid_frames"].as_u64().unwrap() as usize;
        let (tower, audio) = m.encode(feats, valid).expect("encode");
        for (name, got) in [("tower", &tower), ("audio", &audio)] {
            let got = m.backend().download(got).expect("download");
            let want = &outputs[&format!("{name}.{clip}")];
            assert_eq!(&got.shape[1..], &want.shape[..], "{name} {clip} shape");
            let err = rel_l2(&got.data, &want.data);
            eprintln!("{} {name} {clip}: rel L2 {err:e}", m.backend().name());
            assert!(err <= TOWER_BAR, "{name} {clip}: rel L2 {err:e}");
        }
        for (run, lang) in [("ids", None), ("ids_english", Some("en"))] {
            let want = &r["runs"][run];
            let prompt = m.prompt(lang).expect("prompt");
            let g = m
                .generate(&audio, &prompt, want["ids"].as_array().unwrap().len())
                .expect("generate");
            assert_eq!(g.prompt, u32s(&want["prompt"]), "{clip} {run}: prompt ids");
            assert_eq!(g.ids, u32s(&want["ids"]), "{clip} {run}: greedy ids");
        }
    }
}

#[test]
fn matches_transformers_on_the_reference_backend() {
    parity(ReferenceBackend::new());
}

#[test]
fn matches_transformers_on_the_cpu_home() {
    parity(CpuBackend::new(2).expect("CPU backend"));
}

/// Qwen's original layout of the same weights (`thinker_config`, `thinker.*` tensors, the
/// projector inside the tower, a stored but tied head) gives exactly the transformers
/// directory's tower output and ids.
#[test]
fn qwens_original_layout_reads_as_the_same_model() {
    let exp = expected();
    let hf = model(ReferenceBackend::new());
    let orig = Qwen3Asr::new(
        ReferenceBackend::new(),
        &fixtures().join("model_original"),
        Lane::F32,
    )
    .expect("original layout loads");
    assert_eq!(orig.config, hf.config);
    let inputs = read_tensors("inputs.safetensors");
    for clip in ["jfk", "short"] {
        let r = &exp["results"][clip];
        let valid = r["valid_frames"].as_u64().unwrap() as usize;
        let f = &inputs[&format!("features.{clip}")];
        let (_, a) = hf.encode(f, valid).unwrap();
        let (_, b) = orig.encode(f, valid).unwrap();
        let (a_h, b_h) = (
            hf.backend().download(&a).unwrap(),
            orig.backend().download(&b).unwrap(),
        );
        assert_eq!(a_h, b_h, "{clip}: audio embeddings");
        let want = u32s(&r["runs"]["ids"]["ids"]);
        let g = orig
            .generate(&b, &orig.prompt(None).unwrap(), want.len())
            .unwrap();
        assert_eq!(g.ids, want, "{clip}");
    }
}

/// From raw samples through stapes' own front end: the features within f16 rounding of
/// transformers' and the ids `generate` gave on the extractor's own (unrounded) features.
#[test]
fn transcribes_from_samples_through_our_front_end() {
    let exp = expected();
    let m = model(CpuBackend::new(2).expect("CPU backend"));
    let inputs = read_tensors("inputs.safetensors");
    for clip in CLIPS {
        let r = &exp["results"][clip];
        let samples = clip_samples(&exp, clip);
        assert_eq!(
            samples.len() as u64,
            r["samples"].as_u64().unwrap(),
            "{clip}"
        );
        let (f, valid) = m.features(&samples).expect("features");
        assert_eq!(
            valid as u64,
            r["valid_frames"].as_u64().unwrap(),
            "{clip} valid"
        );
        let want = &inputs[&format!("features.{clip}")];
        assert_eq!(f.shape, want.shape, "{clip} feature shape");
        let worst = f
            .data
            .iter()
            .zip(&want.data)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!("{clip}: features within {worst:e} of transformers' (f16-rounded)");
        assert!(worst <= FEATURE_BAR, "{clip}: features off by {worst}");
        let want_ids = u32s(&r["runs"]["ids_e2e"]["ids"]);
        let opts = Qwen3AsrOptions {
            language: None,
            max_new_tokens: Some(want_ids.len()),
        };
        let g = m.generate_ids(&samples, &opts).expect("generate");
        assert_eq!(g.ids, want_ids, "{clip}: ids from samples");
        let t = m.transcribe(&samples, &opts).expect("transcribe");
        assert_eq!(t.duration, samples.len() as f64 / 16000.0);
    }
}

/// The prompt is the chat template transformers' processor writes (checked through the
/// fixture's tokenizer against the reference's prompt ids), and unknown languages are refused.
#[test]
fn prompts_and_languages() {
    let m = model(ReferenceBackend::new());
    let p = m.prompt(None).expect("prompt");
    let forced = m.prompt(Some("English")).expect("prompt");
    assert_eq!(forced.prefix, p.prefix);
    assert!(forced.suffix.starts_with(&p.suffix) && forced.suffix.len() > p.suffix.len());
    assert_eq!(m.prompt(Some("en")).unwrap(), forced);
    let err = m.prompt(Some("klingon")).unwrap_err().to_string();
    assert!(err.contains("klingon"), "{err}");
    let empty = Prompt {
        prefix: vec![],
        suffix: vec![],
    };
    // An out-of-vocabulary prompt id is an error, not a panic.
    let bad = Prompt {
        prefix: vec![1_000_000],
        suffix: vec![],
    };
    let audio = m
        .backend()
        .upload(&HostTensor::zeros(vec![1, 3, m.config.text.hidden]))
        .unwrap();
    assert!(m.generate(&audio, &bad, 2).is_err());
    assert!(m.generate(&audio, &empty, 2).is_ok());
}

/// The answer `language <Name><asr_text><text>` is split into the language code and the text.
#[test]
fn answers_split_at_the_asr_text_marker() {
    let m = model(ReferenceBackend::new());
    let plain = m.prompt(None).unwrap();
    let forced = m.prompt(Some("en")).unwrap();
    // what the forced prompt adds is the head of an answer: "language English<asr_text>"
    let mut answer = forced.suffix[plain.suffix.len()..].to_vec();
    answer.extend([5, 6, 7]);
    let (lang, text) = m.split_answer(&answer).unwrap();
    assert_eq!(lang.as_deref(), Some("en"));
    assert_eq!(text, &[5, 6, 7]);
    let (lang, text) = m.split_answer(&[5, 6]).unwrap();
    assert_eq!((lang, text), (None, &[5u32, 6][..]));
}

/// Bad directories are refused with the file and tensor named.
#[test]
fn loader_refusals_name_the_problem() {
    let src = fixtures().join("model");
    let dir = std::env::temp_dir().join(format!("stapes-qwen3a-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let load = |d: &Path| {
        Qwen3Asr::new(ReferenceBackend::new(), d, Lane::F32)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert_eq!(load(&dir), "", "the copy loads");
    // a config whose layer count the weights do not have
    let cfg = std::fs::read_to_string(src.join("config.json")).unwrap();
    let mut v: Value = serde_json::from_str(&cfg).unwrap();
    v["audio_config"]["encoder_layers"] = 3.into();
    std::fs::write(dir.join("config.json"), v.to_string()).unwrap();
    let e = load(&dir);
    assert!(e.contains("layers.2") && e.contains("missing"), "{e}");
    // a width the weights do not have
    v["audio_config"]["encoder_layers"] = 2.into();
    v["text_config"]["intermediate_size"] = 80.into();
    std::fs::write(dir.join("config.json"), v.to_string()).unwrap();
    let e = load(&dir);
    assert!(e.contains("shape"), "{e}");
    // a truncated weights file
    std::fs::write(dir.join("config.json"), &cfg).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("model.safetensors"), &bytes[..bytes.len() / 2]).unwrap();
    let e = load(&dir);
    assert!(e.contains("model.safetensors"), "{e}");
    // a corrupt tokenizer
    std::fs::write(dir.join("model.safetensors"), &bytes).unwrap();
    std::fs::write(dir.join("tokenizer.json"), "{").unwrap();
    let e = load(&dir);
    assert!(e.contains("tokenizer"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Past one pass, `transcribe` cuts the audio into windows of at most 300 s at quiet moments,
/// each its own segment on the input's timeline.
#[test]
fn long_audio_is_cut_into_windows() {
    let exp = expected();
    let m = model(CpuBackend::new(2).expect("CPU backend"));
    let jfk = clip_samples(&exp, "jfk");
    let long: Vec<f32> = std::iter::repeat_n(&jfk[..], 30)
        .flatten()
        .copied()
        .collect(); // 330 s
    let opts = Qwen3AsrOptions {
        language: Some("en".into()),
        max_new_tokens: Some(3),
    };
    let mut seen = Vec::new();
    let done = std::cell::Cell::new(0.0);
    let t = m
        .transcribe_observed(&long, &opts, Some(&|s| done.set(s)), &mut |s| {
            seen.push((s.start, s.end, done.get()))
        })
        .expect("transcribe");
    assert_eq!(t.duration, long.len() as f64 / 16000.0);
    // each window's segment is handed over when that window is done, in order
    let bounds: Vec<(f64, f64, f64)> = t.segments.iter().map(|s| (s.start, s.end, s.end)).collect();
    assert_eq!(seen, bounds);
    assert_eq!(done.get(), t.duration);
    assert_eq!(t.segments.len(), 2, "{:?}", t.segments);
    let (a, b) = (&t.segments[0], &t.segments[1]);
    assert_eq!(a.start, 0.0);
    assert_eq!(a.end, b.start);
    assert_eq!(b.end, t.duration);
    assert!(a.end - a.start <= 300.0 && b.end - b.start <= 300.0);
    // the cut is near the equal split (within the 5 s it may move to a quieter moment)
    assert!((a.end - t.duration / 2.0).abs() <= 5.0, "{}", a.end);
}

/// jfk's projected audio embeddings on `m`.
fn jfk_audio(m: &Qwen3Asr<CpuBackend>) -> <CpuBackend as Backend>::Tensor {
    let valid = expected()["results"]["jfk"]["valid_frames"]
        .as_u64()
        .unwrap() as usize;
    let inputs = read_tensors("inputs.safetensors");
    m.encode(&inputs["features.jfk"], valid).unwrap().1
}

/// The K/V cache grows as the answer does: a decode whose cache starts with room for one token
/// (and doubles) gives the ids of one that had room for all of them from the start.
#[test]
fn a_growing_cache_gives_the_same_ids() {
    let m = model(CpuBackend::new(2).expect("CPU backend"));
    let audio = jfk_audio(&m);
    let p = m.prompt(None).unwrap();
    let roomy = m.generate_in(&audio, &p, 200, 200).unwrap();
    let grown = m.generate_in(&audio, &p, 200, 1).unwrap();
    assert!(roomy.ids.len() > 16, "{:?}", roomy.ids);
    assert_eq!(grown.ids, roomy.ids);
    assert_eq!(grown.finished, roomy.finished);
}

/// The decoder step chain (the step tensor's position read by the `*_step` ops, the rotary rows
/// gathered at it) gives the eager pass's ids, also when its cache fills and the answer goes on
/// eagerly from a copy of it. On the CPU home a chain is the eager pass of the same ops, so this
/// checks the step form's arithmetic; `cuda_qwen3a` checks the captured one.
#[test]
fn the_step_chain_gives_the_eager_ids() {
    let m = model(CpuBackend::new(2).expect("CPU backend"));
    let audio = jfk_audio(&m);
    let p = m.prompt(None).unwrap();
    m.set_step_chain(Some(false));
    let eager = m.generate(&audio, &p, 40).unwrap();
    assert!(eager.ids.len() > 16, "{:?}", eager.ids);
    m.set_step_chain(Some(true));
    let chained = m.generate(&audio, &p, 40).unwrap();
    assert_eq!(chained.ids, eager.ids);
    // a cache 5 rows past the prompt: 5 steps in the chain, the rest eager
    m.set_step_chain_rows(eager.prompt.len() + 5);
    let spilled = m.generate(&audio, &p, 40).unwrap();
    assert_eq!(spilled.ids, eager.ids);
    assert_eq!(spilled.finished, eager.finished);
}

/// Audio the model cannot take is refused, not panicked on.
#[test]
fn bad_audio_is_refused() {
    let m = model(ReferenceBackend::new());
    let opts = Qwen3AsrOptions::default();
    let e = m
        .transcribe(&[0.0, f32::NAN], &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("finite"), "{e}");
    // one pass is bounded (the library's stage call refuses past it) …
    let long = vec![0.0; 16_000 * 301];
    let e = m.generate_ids(&long, &opts).unwrap_err().to_string();
    assert!(e.contains("--vad"), "{e}");
    // silence and nothing at all decode (padded to the 0.5 s minimum)
    let short = Qwen3AsrOptions {
        language: None,
        max_new_tokens: Some(2),
    };
    assert!(m.transcribe(&[], &short).is_ok());
}
