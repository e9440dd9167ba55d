//! NeMo `.nemo` loading: the tiny TDT fixture written in NeMo's layout (tar + model_config.yaml +
//! torch.save zip-pickle, by tools/reference/fastconformer_nemo.py) gives the same tensors, encoder
//! output and greedy steps as the HF directory of the same weights, transformers' expected ids, and
//! the text sentencepiece decodes from the archive's tokenizer.model.

use serde_json::Value;
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::fastconformer::nemo::{canonical_name, parse_yaml};
use stapes_models::fastconformer::{load_hf, load_nemo, Parakeet};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fastconformer")
}

#[test]
fn nemo_archive_equals_hf_directory() {
    let nemo = load_nemo(&fixtures().join("tdt.nemo")).expect("tdt.nemo loads");
    let hf = load_hf(&fixtures().join("tdt")).unwrap();
    assert_eq!(nemo.config, hf.config);
    for (name, t) in &hf.tensors {
        assert_eq!(nemo.tensors.get(name), Some(t), "{name}");
    }

    let feats =
        stapes_formats::safetensors_dir::read_file(&fixtures().join("inputs.safetensors")).unwrap();
    let exp: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap())
            .unwrap();
    let spm: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_nemo.json")).unwrap(),
    )
    .unwrap();
    let a = Parakeet::new(
        CpuBackend::new(2).unwrap(),
        &fixtures().join("tdt.nemo"),
        Lane::F32,
    )
    .unwrap();
    let b = Parakeet::from_checkpoint(CpuBackend::new(2).unwrap(), &hf, Lane::F32).unwrap();
    for clip in ["jfk", "beckett", "lv0880"] {
        let raw = &feats.tensors[&format!("features.{clip}")];
        let f = HostTensor::new(raw.shape.clone(), raw.to_f32()).unwrap();
        let ea = a.encode_host(&f).unwrap();
        let eb = b.encode_host(&f).unwrap();
        assert_eq!(
            a.backend().download(&ea).unwrap(),
            b.backend().download(&eb).unwrap()
        );
        let (da, db) = (a.greedy(&ea).unwrap(), b.greedy(&eb).unwrap());
        assert_eq!(da, db, "{clip}");
        let want: Vec<u32> = exp["models"]["tdt"]["results"][clip]["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(da.ids(), want, "{clip}");
        // Text through the archive's own SentencePiece model, as sentencepiece decodes it.
        assert_eq!(
            a.decode_text(&da.ids()).unwrap(),
            spm["texts"][clip].as_str().unwrap(),
            "{clip}"
        );
    }
}

#[test]
fn nemo_names_map_to_transformers_names() {
    let pairs = [
        (
            "encoder.pre_encode.conv.0.weight",
            "encoder.subsampling.layers.0.weight",
        ),
        (
            "encoder.pre_encode.out.bias",
            "encoder.subsampling.linear.bias",
        ),
        (
            "encoder.layers.3.self_attn.linear_pos.weight",
            "encoder.layers.3.self_attn.relative_k_proj.weight",
        ),
        (
            "encoder.layers.3.self_attn.pos_bias_u",
            "encoder.layers.3.self_attn.bias_u",
        ),
        (
            "encoder.layers.0.conv.batch_norm.running_var",
            "encoder.layers.0.conv.norm.running_var",
        ),
        ("decoder.decoder_layers.0.weight", "ctc_head.weight"),
        (
            "decoder.prediction.dec_rnn.lstm.weight_hh_l1",
            "decoder.lstm.weight_hh_l1",
        ),
        ("joint.joint_net.2.bias", "joint.head.bias"),
        ("joint.pred.weight", "decoder.decoder_projector.weight"),
    ];
    for (n, h) in pairs {
        assert_eq!(canonical_name(n).as_deref(), Some(h), "{n}");
    }
    assert_eq!(canonical_name("preprocessor.featurizer.fb"), None);
}

#[test]
fn yaml_subset_reads_omegaconf_output() {
    let v = parse_yaml(
        "a: 1\nb:\n  c: 'it''s'\n  d: [1, 2]\n  e:\n  - x\n  - k: 2.5e-05\n    j: null\n# note\nf: true # trailing\ng: \"q: r\"\n",
    )
    .unwrap();
    assert_eq!(
        v,
        serde_json::json!({"a": 1, "b": {"c": "it's", "d": [1, 2], "e": ["x", {"k": 2.5e-05, "j": null}]},
                           "f": true, "g": "q: r"})
    );
}

#[test]
fn damaged_archives_are_errors() {
    let bytes = std::fs::read(fixtures().join("tdt.nemo")).unwrap();
    let dir = std::env::temp_dir().join(format!("stapes-fc-nemo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Truncations at several depths: header, config, checkpoint middle, the checkpoint's zip
    // directory (the last 10 kB of the tar are end-of-archive padding).
    for cut in [100, 2_000, bytes.len() / 2, bytes.len() - 10_000] {
        let p = dir.join(format!("cut{cut}.nemo"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let Err(e) = load_nemo(&p) else {
            panic!("an archive cut at {cut} of {} bytes loaded", bytes.len());
        };
        assert!(e.to_string().contains(&format!("cut{cut}.nemo")), "{e}");
    }
    // Flipped bytes across the pickle, the storages and the zip directory: an error or a load,
    // never a panic.
    let pkl = bytes.windows(8).position(|w| w == b"data.pkl").unwrap();
    for k in 0..24 {
        let at = pkl + 60 + k * (bytes.len() - pkl - 10_000) / 24;
        let mut bad = bytes.clone();
        for b in &mut bad[at..at + 48] {
            *b ^= 0x5a;
        }
        let p = dir.join(format!("flip{k}.nemo"));
        std::fs::write(&p, &bad).unwrap();
        let _ = load_nemo(&p);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Canary `.nemo` archives (tools/reference/fastconformer_nemo.py canary) of the HF fixture's
/// weights: NeMo's EncDecMultiTaskModel names map onto the same tensors and config, and greedy
/// and beam ids through the archive equal transformers' (the HF fixture's expectations); the text
/// comes from the archive's own tokenizer: the unified SentencePiece model (sentencepiece's
/// decode) and NeMo's aggregate tokenizer (`spl_tokens` then `en`, ids offset in the config's
/// order, which is not the keys' sorted order).
#[test]
fn canary_nemo_archives_equal_hf_directory() {
    use stapes_models::fastconformer::{load_canary, Canary, CanaryRequest};
    let hf = load_canary(&fixtures().join("canary")).unwrap();
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_canary.json")).unwrap(),
    )
    .unwrap();
    let texts: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_canary_nemo.json")).unwrap(),
    )
    .unwrap();
    let want = &exp["results"]["end_to_end_jfk"];
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/jfk.wav");
    let mut r = hound::WavReader::open(&path).expect("samples/jfk.wav opens");
    let samples: Vec<f32> = r
        .samples::<i16>()
        .take(want["samples"].as_u64().unwrap() as usize)
        .map(|s| s.unwrap() as f32 / 32768.0)
        .collect();
    let ids = |v: &Value| -> Vec<u32> {
        let mut v: Vec<u32> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        if v.last() == Some(&3) {
            v.pop();
        }
        v
    };
    for archive in ["canary.nemo", "canary-agg.nemo"] {
        let nemo = load_canary(&fixtures().join(archive)).expect(archive);
        assert_eq!(nemo.config, hf.config, "{archive}");
        for (name, t) in &hf.tensors {
            assert_eq!(nemo.tensors.get(name), Some(t), "{archive}: {name}");
        }
        let m = Canary::from_checkpoint(CpuBackend::new(2).unwrap(), nemo, Lane::F32).unwrap();
        let req = CanaryRequest::default();
        assert_eq!(m.prompt(&req).unwrap(), ids(&exp["prompt"]), "{archive}");
        for (beam, key) in [(1, "generated"), (4, "beam4")] {
            let t = m.transcribe_request(&samples, &req, beam).unwrap();
            assert_eq!(t.segments[0].tokens, ids(&want[key]), "{archive} {key}");
            assert_eq!(
                t.text(),
                texts["texts"][archive][key].as_str().unwrap().trim(),
                "{archive} {key}"
            );
        }
    }
    // A Parakeet reader refuses a Canary archive by name, and the other way round.
    let e = load_nemo(&fixtures().join("canary.nemo")).err().unwrap();
    assert!(e.to_string().contains("Canary"), "{e}");
    let e = load_canary(&fixtures().join("tdt.nemo")).err().unwrap();
    assert!(e.to_string().contains("not a Canary"), "{e}");
}
