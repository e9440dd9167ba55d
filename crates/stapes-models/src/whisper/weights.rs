//! Whisper weights in every format, mapped onto one canonical naming (transformers'
//! `WhisperForConditionalGeneration`): `model.encoder.conv1.weight`,
//! `model.encoder.layers.N.self_attn.q_proj.weight`, … All name tables live in this file.
//!
//! Every loader checks each expected name, shape and dtype and the hyper-parameters, and rejects
//! unknown tensors by name (unknown rank-0 CTranslate2 flags are fine).

use super::config::{WhisperConfig, WhisperGeneration};
use super::tokenizer::WhisperTokenizer;
use crate::{ModelError, Result};
use stapes_core::HostTensor;
use stapes_formats::{ct2, DType, Format, RawTensor};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A loaded Whisper checkpoint: hyper-parameters, generation settings, tokenizer and every
/// weight as f32 under its canonical name.
#[derive(Clone, Debug)]
pub struct WhisperCheckpoint {
    pub config: WhisperConfig,
    pub generation: WhisperGeneration,
    pub tokenizer: WhisperTokenizer,
    pub tensors: BTreeMap<String, HostTensor>,
    /// Container the weights came from: "ctranslate2", "ggml", "safetensors", "synthetic".
    pub format: &'static str,
    pub path: PathBuf,
}

impl WhisperCheckpoint {
    /// A tensor by canonical name (an error naming it when absent).
    pub fn tensor(&self, name: &str) -> Result<&HostTensor> {
        self.tensors
            .get(name)
            .ok_or_else(|| ModelError::bad_tensor(&self.path, name, "missing"))
    }
}

/// Every canonical tensor a Whisper model of `c` has, with its shape.
pub fn expected_shapes(c: &WhisperConfig) -> Vec<(String, Vec<usize>)> {
    let d = c.d_model;
    let mut v: Vec<(String, Vec<usize>)> = vec![
        ("model.encoder.conv1.weight".into(), vec![d, c.n_mels, 3]),
        ("model.encoder.conv1.bias".into(), vec![d]),
        ("model.encoder.conv2.weight".into(), vec![d, d, 3]),
        ("model.encoder.conv2.bias".into(), vec![d]),
        (
            "model.encoder.embed_positions.weight".into(),
            vec![c.n_audio_ctx, d],
        ),
        ("model.encoder.layer_norm.weight".into(), vec![d]),
        ("model.encoder.layer_norm.bias".into(), vec![d]),
        (
            "model.decoder.embed_tokens.weight".into(),
            vec![c.vocab_size, d],
        ),
        (
            "model.decoder.embed_positions.weight".into(),
            vec![c.n_text_ctx, d],
        ),
        ("model.decoder.layer_norm.weight".into(), vec![d]),
        ("model.decoder.layer_norm.bias".into(), vec![d]),
    ];
    let attn = |v: &mut Vec<(String, Vec<usize>)>, p: &str| {
        for m in ["q_proj", "k_proj", "v_proj", "out_proj"] {
            v.push((format!("{p}.{m}.weight"), vec![d, d]));
            if m != "k_proj" {
                v.push((format!("{p}.{m}.bias"), vec![d]));
            }
        }
    };
    let norm = |v: &mut Vec<(String, Vec<usize>)>, p: &str| {
        v.push((format!("{p}.weight"), vec![d]));
        v.push((format!("{p}.bias"), vec![d]));
    };
    let ffn = |v: &mut Vec<(String, Vec<usize>)>, p: &str, f: usize| {
        v.push((format!("{p}.fc1.weight"), vec![f, d]));
        v.push((format!("{p}.fc1.bias"), vec![f]));
        v.push((format!("{p}.fc2.weight"), vec![d, f]));
        v.push((format!("{p}.fc2.bias"), vec![d]));
    };
    for i in 0..c.encoder_layers {
        let p = format!("model.encoder.layers.{i}");
        attn(&mut v, &format!("{p}.self_attn"));
        norm(&mut v, &format!("{p}.self_attn_layer_norm"));
        ffn(&mut v, &p, c.encoder_ffn);
        norm(&mut v, &format!("{p}.final_layer_norm"));
    }
    for i in 0..c.decoder_layers {
        let p = format!("model.decoder.layers.{i}");
        attn(&mut v, &format!("{p}.self_attn"));
        norm(&mut v, &format!("{p}.self_attn_layer_norm"));
        attn(&mut v, &format!("{p}.encoder_attn"));
        norm(&mut v, &format!("{p}.encoder_attn_layer_norm"));
        ffn(&mut v, &p, c.decoder_ffn);
        norm(&mut v, &format!("{p}.final_layer_norm"));
    }
    v
}

/// Infers the shapes of a canonical tensor set: d_model and n_mels from conv1, contexts from the
/// position tables, vocabulary from the embeddings, layer counts from the names, FFN width from
/// fc1. Heads are not visible in shapes and are taken from the caller.
pub fn infer_config<T>(
    path: &Path,
    shapes: &BTreeMap<String, T>,
    shape_of: impl Fn(&T) -> &[usize],
    encoder_heads: usize,
    decoder_heads: usize,
) -> Result<WhisperConfig> {
    let get = |name: &str, rank: usize| -> Result<&[usize]> {
        let t = shapes
            .get(name)
            .ok_or_else(|| ModelError::bad_tensor(path, name, "missing"))?;
        let s = shape_of(t);
        if s.len() != rank {
            return Err(ModelError::bad_tensor(
                path,
                name,
                format!("rank {} (shape {s:?}), expected {rank}", s.len()),
            ));
        }
        Ok(s)
    };
    let conv1 = get("model.encoder.conv1.weight", 3)?;
    let (d_model, n_mels) = (conv1[0], conv1[1]);
    let n_audio_ctx = get("model.encoder.embed_positions.weight", 2)?[0];
    let n_text_ctx = get("model.decoder.embed_positions.weight", 2)?[0];
    let vocab_size = get("model.decoder.embed_tokens.weight", 2)?[0];
    let count = |prefix: &str| {
        let mut n = 0;
        while shapes
            .keys()
            .any(|k| k.starts_with(&format!("{prefix}.{n}.")))
        {
            n += 1;
        }
        n
    };
    let encoder_layers = count("model.encoder.layers");
    let decoder_layers = count("model.decoder.layers");
    if encoder_layers == 0 || decoder_layers == 0 {
        return Err(ModelError::bad_model(
            path,
            format!("{encoder_layers} encoder / {decoder_layers} decoder layers found"),
        ));
    }
    let encoder_ffn = get("model.encoder.layers.0.fc1.weight", 2)?[0];
    let decoder_ffn = get("model.decoder.layers.0.fc1.weight", 2)?[0];
    for (what, heads) in [("encoder", encoder_heads), ("decoder", decoder_heads)] {
        if heads == 0 || d_model % heads != 0 {
            return Err(ModelError::bad_model(
                path,
                format!("{what} heads {heads} do not divide d_model {d_model}"),
            ));
        }
    }
    if d_model == 0 || n_mels == 0 || vocab_size == 0 || n_audio_ctx == 0 || n_text_ctx == 0 {
        return Err(ModelError::bad_model(
            path,
            "a zero dimension in the model shapes",
        ));
    }
    Ok(WhisperConfig {
        n_mels,
        n_audio_ctx,
        n_text_ctx,
        d_model,
        encoder_layers,
        encoder_heads,
        encoder_ffn,
        decoder_layers,
        decoder_heads,
        decoder_ffn,
        vocab_size,
    })
}

/// Checks a canonical tensor set against `config` (every name present with its shape, nothing
/// else, no NaN/Inf) and assembles the checkpoint.
pub fn checkpoint_from_tensors(
    config: WhisperConfig,
    generation: WhisperGeneration,
    tokenizer: WhisperTokenizer,
    mut tensors: BTreeMap<String, HostTensor>,
    format: &'static str,
    path: PathBuf,
) -> Result<WhisperCheckpoint> {
    let expected = expected_shapes(&config);
    let names: BTreeSet<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    let unknown: Vec<&String> = tensors
        .keys()
        .filter(|k| !names.contains(k.as_str()))
        .collect();
    if !unknown.is_empty() {
        let list: Vec<&str> = unknown.iter().take(8).map(|s| s.as_str()).collect();
        return Err(ModelError::bad_model(
            &path,
            format!(
                "{} unknown tensor(s) for a Whisper model: {}",
                unknown.len(),
                list.join(", ")
            ),
        ));
    }
    for (name, shape) in &expected {
        let t = tensors
            .get_mut(name)
            .ok_or_else(|| ModelError::bad_tensor(&path, name, "missing"))?;
        if &t.shape != shape {
            return Err(ModelError::bad_tensor(
                &path,
                name,
                format!("shape {:?}, expected {shape:?}", t.shape),
            ));
        }
        if let Some(i) = t.data.iter().position(|v| !v.is_finite()) {
            return Err(ModelError::bad_tensor(
                &path,
                name,
                format!("non-finite value at element {i}"),
            ));
        }
    }
    if tokenizer.vocab_size() != config.vocab_size {
        return Err(ModelError::bad_model(
            &path,
            format!(
                "tokenizer has {} tokens, the embeddings {}",
                tokenizer.vocab_size(),
                config.vocab_size
            ),
        ));
    }
    let max_id = config.vocab_size as u32;
    for &id in generation
        .suppress_tokens
        .iter()
        .chain(&generation.begin_suppress_tokens)
    {
        if id >= max_id {
            return Err(ModelError::bad_model(
                &path,
                format!("suppressed token {id} is outside the vocabulary"),
            ));
        }
    }
    for &(layer, head) in &generation.alignment_heads {
        if layer >= config.decoder_layers || head >= config.decoder_heads {
            return Err(ModelError::bad_model(
                &path,
                format!("alignment head ({layer}, {head}) does not exist"),
            ));
        }
    }
    Ok(WhisperCheckpoint {
        config,
        generation,
        tokenizer,
        tensors,
        format,
        path,
    })
}

/// Loads a Whisper checkpoint from any supported container (sniffed from content): a
/// CTranslate2 directory or its `model.bin`, an HF transformers directory, a whisper.cpp file.
pub fn load_checkpoint(path: &Path) -> Result<WhisperCheckpoint> {
    match stapes_formats::sniff(path)? {
        Format::Ct2 => load_ct2(path),
        other => Err(ModelError::bad_model(
            path,
            format!("{other} files do not hold a Whisper model this engine reads"),
        )),
    }
}

fn to_host(path: &Path, name: &str, t: &RawTensor) -> Result<HostTensor> {
    match t.dtype {
        DType::F32 | DType::F16 | DType::BF16 | DType::Q8_0 => {}
        other => {
            return Err(ModelError::bad_tensor(
                path,
                name,
                format!("dtype {other} is not a float type"),
            ))
        }
    }
    HostTensor::new(t.shape.clone(), t.to_f32())
        .map_err(|e| ModelError::bad_tensor(path, name, e.to_string()))
}

// ---------------------------------------------------------------------------------------------
// CTranslate2

/// CTranslate2 name → canonical name, for everything that is not split. `{}` is the layer index.
const CT2_TABLE: &[(&str, &str)] = &[
    ("encoder/conv1/weight", "model.encoder.conv1.weight"),
    ("encoder/conv1/bias", "model.encoder.conv1.bias"),
    ("encoder/conv2/weight", "model.encoder.conv2.weight"),
    ("encoder/conv2/bias", "model.encoder.conv2.bias"),
    (
        "encoder/position_encodings/encodings",
        "model.encoder.embed_positions.weight",
    ),
    (
        "encoder/layer_norm/gamma",
        "model.encoder.layer_norm.weight",
    ),
    ("encoder/layer_norm/beta", "model.encoder.layer_norm.bias"),
    (
        "decoder/embeddings/weight",
        "model.decoder.embed_tokens.weight",
    ),
    (
        "decoder/position_encodings/encodings",
        "model.decoder.embed_positions.weight",
    ),
    (
        "decoder/layer_norm/gamma",
        "model.decoder.layer_norm.weight",
    ),
    ("decoder/layer_norm/beta", "model.decoder.layer_norm.bias"),
    (
        "encoder/layer_{}/self_attention/layer_norm/gamma",
        "model.encoder.layers.{}.self_attn_layer_norm.weight",
    ),
    (
        "encoder/layer_{}/self_attention/layer_norm/beta",
        "model.encoder.layers.{}.self_attn_layer_norm.bias",
    ),
    (
        "encoder/layer_{}/self_attention/linear_1/weight",
        "model.encoder.layers.{}.self_attn.out_proj.weight",
    ),
    (
        "encoder/layer_{}/self_attention/linear_1/bias",
        "model.encoder.layers.{}.self_attn.out_proj.bias",
    ),
    (
        "encoder/layer_{}/ffn/layer_norm/gamma",
        "model.encoder.layers.{}.final_layer_norm.weight",
    ),
    (
        "encoder/layer_{}/ffn/layer_norm/beta",
        "model.encoder.layers.{}.final_layer_norm.bias",
    ),
    (
        "encoder/layer_{}/ffn/linear_0/weight",
        "model.encoder.layers.{}.fc1.weight",
    ),
    (
        "encoder/layer_{}/ffn/linear_0/bias",
        "model.encoder.layers.{}.fc1.bias",
    ),
    (
        "encoder/layer_{}/ffn/linear_1/weight",
        "model.encoder.layers.{}.fc2.weight",
    ),
    (
        "encoder/layer_{}/ffn/linear_1/bias",
        "model.encoder.layers.{}.fc2.bias",
    ),
    (
        "decoder/layer_{}/self_attention/layer_norm/gamma",
        "model.decoder.layers.{}.self_attn_layer_norm.weight",
    ),
    (
        "decoder/layer_{}/self_attention/layer_norm/beta",
        "model.decoder.layers.{}.self_attn_layer_norm.bias",
    ),
    (
        "decoder/layer_{}/self_attention/linear_1/weight",
        "model.decoder.layers.{}.self_attn.out_proj.weight",
    ),
    (
        "decoder/layer_{}/self_attention/linear_1/bias",
        "model.decoder.layers.{}.self_attn.out_proj.bias",
    ),
    (
        "decoder/layer_{}/attention/layer_norm/gamma",
        "model.decoder.layers.{}.encoder_attn_layer_norm.weight",
    ),
    (
        "decoder/layer_{}/attention/layer_norm/beta",
        "model.decoder.layers.{}.encoder_attn_layer_norm.bias",
    ),
    (
        "decoder/layer_{}/attention/linear_0/weight",
        "model.decoder.layers.{}.encoder_attn.q_proj.weight",
    ),
    (
        "decoder/layer_{}/attention/linear_0/bias",
        "model.decoder.layers.{}.encoder_attn.q_proj.bias",
    ),
    (
        "decoder/layer_{}/attention/linear_2/weight",
        "model.decoder.layers.{}.encoder_attn.out_proj.weight",
    ),
    (
        "decoder/layer_{}/attention/linear_2/bias",
        "model.decoder.layers.{}.encoder_attn.out_proj.bias",
    ),
    (
        "decoder/layer_{}/ffn/layer_norm/gamma",
        "model.decoder.layers.{}.final_layer_norm.weight",
    ),
    (
        "decoder/layer_{}/ffn/layer_norm/beta",
        "model.decoder.layers.{}.final_layer_norm.bias",
    ),
    (
        "decoder/layer_{}/ffn/linear_0/weight",
        "model.decoder.layers.{}.fc1.weight",
    ),
    (
        "decoder/layer_{}/ffn/linear_0/bias",
        "model.decoder.layers.{}.fc1.bias",
    ),
    (
        "decoder/layer_{}/ffn/linear_1/weight",
        "model.decoder.layers.{}.fc2.weight",
    ),
    (
        "decoder/layer_{}/ffn/linear_1/bias",
        "model.decoder.layers.{}.fc2.bias",
    ),
];

/// Fused CTranslate2 matrices and the canonical projections they hold, in row order, with
/// whether Whisper has a bias for the part (key projections have none; CTranslate2 stores zeros).
const CT2_FUSED: &[(&str, &[(&str, bool)])] = &[
    (
        "encoder/layer_{}/self_attention/linear_0",
        &[
            ("model.encoder.layers.{}.self_attn.q_proj", true),
            ("model.encoder.layers.{}.self_attn.k_proj", false),
            ("model.encoder.layers.{}.self_attn.v_proj", true),
        ],
    ),
    (
        "decoder/layer_{}/self_attention/linear_0",
        &[
            ("model.decoder.layers.{}.self_attn.q_proj", true),
            ("model.decoder.layers.{}.self_attn.k_proj", false),
            ("model.decoder.layers.{}.self_attn.v_proj", true),
        ],
    ),
    (
        "decoder/layer_{}/attention/linear_1",
        &[
            ("model.decoder.layers.{}.encoder_attn.k_proj", false),
            ("model.decoder.layers.{}.encoder_attn.v_proj", true),
        ],
    ),
];

/// Splits `name` at its first `layer_N` into (pattern with `{}`, N).
fn layer_pattern(name: &str, sep: char) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut found = None;
    for (i, part) in name.split(sep).enumerate() {
        if i > 0 {
            out.push(sep);
        }
        let idx = if sep == '/' {
            part.strip_prefix("layer_")
        } else {
            None
        };
        match idx.and_then(|n| n.parse::<usize>().ok()) {
            Some(n) if found.is_none() => {
                found = Some(n);
                out.push_str("layer_{}");
            }
            _ => out.push_str(part),
        }
    }
    found.map(|n| (out, n))
}

/// Dequantizes CTranslate2 int8 weights (`weight` i8 + per-row `weight_scale`: w = q / scale).
fn ct2_value(f: &ct2::Ct2File, name: &str) -> Result<HostTensor> {
    let t = f
        .get(name)
        .ok_or_else(|| ModelError::bad_tensor(&f.path, name, "missing"))?;
    if t.dtype == DType::I8 || t.dtype == DType::I16 {
        let scale_name = format!("{name}_scale");
        let s = f.get(&scale_name).ok_or_else(|| {
            ModelError::bad_tensor(&f.path, name, "integer weights without a `_scale`")
        })?;
        let rows = *t.shape.first().unwrap_or(&0);
        let sv = s.to_f32();
        if t.shape.len() != 2 || (sv.len() != rows && sv.len() != 1) {
            return Err(ModelError::bad_tensor(
                &f.path,
                &scale_name,
                format!("shape {:?} does not fit weights {:?}", s.shape, t.shape),
            ));
        }
        let cols = t.shape[1];
        let q = t.to_f32();
        let data = q
            .iter()
            .enumerate()
            .map(|(i, &v)| v / sv[if sv.len() == 1 { 0 } else { i / cols.max(1) }])
            .collect();
        return HostTensor::new(t.shape.clone(), data)
            .map_err(|e| ModelError::bad_tensor(&f.path, name, e.to_string()));
    }
    to_host(&f.path, name, t)
}

/// Loads a CTranslate2 Whisper model: a directory with `model.bin`, `config.json` and a
/// vocabulary, or the `model.bin` itself (the rest is looked for beside it).
pub fn load_ct2(path: &Path) -> Result<WhisperCheckpoint> {
    let (dir, bin) = if path.is_dir() {
        (path.to_path_buf(), path.join("model.bin"))
    } else {
        (
            path.parent().map(Path::to_path_buf).unwrap_or_default(),
            path.to_path_buf(),
        )
    };
    let f = ct2::read(&bin)?;
    if f.spec != "WhisperSpec" {
        return Err(ModelError::bad_model(
            &bin,
            format!("CTranslate2 spec `{}` is not WhisperSpec", f.spec),
        ));
    }
    let mut tensors = BTreeMap::new();
    for (name, t) in f.tensors() {
        if name.ends_with("_scale") && f.variables.contains_key(name.trim_end_matches("_scale")) {
            continue;
        }
        let (pattern, layer) = match layer_pattern(name, '/') {
            Some((p, n)) => (p, Some(n)),
            None => (name.clone(), None),
        };
        let subst = |s: &str| match layer {
            Some(n) => s.replace("{}", &n.to_string()),
            None => s.to_string(),
        };
        if let Some((_, canon)) = CT2_TABLE.iter().find(|(c, _)| *c == pattern) {
            tensors.insert(subst(canon), ct2_value(&f, name)?);
            continue;
        }
        let fused = CT2_FUSED.iter().find(|(c, _)| {
            pattern
                .strip_prefix(*c)
                .is_some_and(|rest| rest == "/weight" || rest == "/bias")
        });
        let Some((_, parts)) = fused else {
            return Err(ModelError::bad_tensor(
                &bin,
                name,
                "unknown tensor for a Whisper model",
            ));
        };
        let is_bias = pattern.ends_with("/bias");
        let v = ct2_value(&f, name)?;
        let rows = t.shape.first().copied().unwrap_or(0);
        if rows % parts.len() != 0
            || (is_bias && t.shape.len() != 1)
            || (!is_bias && t.shape.len() != 2)
        {
            return Err(ModelError::bad_tensor(
                &bin,
                name,
                format!(
                    "shape {:?} cannot be split into {} parts",
                    t.shape,
                    parts.len()
                ),
            ));
        }
        let n = rows / parts.len();
        let per = v.data.len() / parts.len();
        for (k, (canon, has_bias)) in parts.iter().enumerate() {
            let chunk = v.data[k * per..(k + 1) * per].to_vec();
            let mut shape = t.shape.clone();
            shape[0] = n;
            if is_bias {
                if !has_bias {
                    // Whisper's key projections have no bias; the zeros CTranslate2 stores must
                    // stay zeros or the file is not what it claims.
                    if chunk.iter().any(|&x| x != 0.0) {
                        return Err(ModelError::bad_tensor(
                            &bin,
                            name,
                            "the key part of the fused bias is not zero",
                        ));
                    }
                    continue;
                }
                tensors.insert(
                    format!("{}.bias", subst(canon)),
                    HostTensor { shape, data: chunk },
                );
            } else {
                tensors.insert(
                    format!("{}.weight", subst(canon)),
                    HostTensor { shape, data: chunk },
                );
            }
        }
    }
    let heads = |name: &str| f.scalar_i64(name).filter(|&h| h > 0).map(|h| h as usize);
    let d = tensors
        .get("model.encoder.conv1.weight")
        .and_then(|t| t.shape.first().copied())
        .unwrap_or(64);
    // Every published Whisper has 64-wide heads; the file's own num_heads wins when present.
    let enc_heads = heads("encoder/num_heads").unwrap_or(d / 64);
    let dec_heads = heads("decoder/num_heads").unwrap_or(d / 64);
    let config = infer_config(&bin, &tensors, |t| &t.shape, enc_heads, dec_heads)?;
    let tokenizer = WhisperTokenizer::from_dir(&dir, config.vocab_size)?;
    let cfg_path = dir.join("config.json");
    let generation = if cfg_path.is_file() {
        let v = read_json(&cfg_path)?;
        generation_from_json(&cfg_path, &v, ["suppress_ids", "suppress_ids_begin"])?
    } else {
        default_generation(&tokenizer)?
    };
    checkpoint_from_tensors(
        config,
        generation,
        tokenizer,
        tensors,
        "ctranslate2",
        path.to_path_buf(),
    )
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text)
        .map_err(|e| ModelError::bad_model(path, format!("invalid JSON: {e}")))
}

fn id_list(path: &Path, v: &serde_json::Value, key: &str) -> Result<Vec<u32>> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        ModelError::bad_model(path, format!("`{key}` holds a non-id value {x}"))
                    })
            })
            .collect(),
        Some(other) => Err(ModelError::bad_model(
            path,
            format!("`{key}` is not a list: {other}"),
        )),
    }
}

/// Generation settings from a CTranslate2 config.json (`suppress_ids`, `suppress_ids_begin`) or
/// an HF generation_config.json (`suppress_tokens`, `begin_suppress_tokens`); both carry
/// `alignment_heads` as [layer, head] pairs.
fn generation_from_json(
    path: &Path,
    v: &serde_json::Value,
    keys: [&str; 2],
) -> Result<WhisperGeneration> {
    let mut alignment_heads = Vec::new();
    if let Some(a) = v.get("alignment_heads").and_then(|x| x.as_array()) {
        for pair in a {
            let p = pair
                .as_array()
                .filter(|p| p.len() == 2)
                .and_then(|p| Some((p[0].as_u64()? as usize, p[1].as_u64()? as usize)));
            alignment_heads.push(p.ok_or_else(|| {
                ModelError::bad_model(path, format!("alignment head {pair} is not [layer, head]"))
            })?);
        }
    }
    Ok(WhisperGeneration {
        suppress_tokens: id_list(path, v, keys[0])?,
        begin_suppress_tokens: id_list(path, v, keys[1])?,
        alignment_heads,
    })
}

/// OpenAI's settings where the checkpoint carries none (ggml): suppress the non-speech symbol
/// and control tokens, suppress blank and end-of-text at the first step. No alignment heads are
/// known.
pub fn default_generation(tok: &WhisperTokenizer) -> Result<WhisperGeneration> {
    let sp = tok.special();
    let mut suppress: BTreeSet<u32> = non_speech_tokens(tok)?.into_iter().collect();
    // OpenAI's decoder also never samples the control tokens; CTranslate2's converter bakes the
    // same union into config.json.
    suppress.extend([
        sp.translate,
        sp.transcribe,
        sp.sot,
        sp.sot_prev,
        sp.sot_lm,
        sp.no_speech,
    ]);
    Ok(WhisperGeneration {
        suppress_tokens: suppress.into_iter().collect(),
        begin_suppress_tokens: {
            let mut b = tok.encode(" ")?;
            b.push(tok.eot());
            b
        },
        alignment_heads: Vec::new(),
    })
}

/// OpenAI's `Tokenizer.non_speech_tokens`: symbols that are never speech, found by encoding them.
pub fn non_speech_tokens(tok: &WhisperTokenizer) -> Result<Vec<u32>> {
    let mut symbols: Vec<String> = "\"#()*+/:;<=>@[\\]^_`{|}~「」『』"
        .chars()
        .map(String::from)
        .collect();
    symbols.extend(
        "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪"
            .split(' ')
            .map(String::from),
    );
    let misc: Vec<String> = "♩♪♫♬♭♮♯".chars().map(String::from).collect();
    let mut result = BTreeSet::new();
    for s in [" -", " '"] {
        if let Some(&t) = tok.encode(s)?.first() {
            result.insert(t);
        }
    }
    for s in symbols.iter().chain(&misc) {
        let is_misc = misc.contains(s);
        for text in [s.clone(), format!(" {s}")] {
            let ids = tok.encode(&text)?;
            if ids.len() == 1 || (is_misc && !ids.is_empty()) {
                result.insert(ids[0]);
            }
        }
    }
    Ok(result.into_iter().collect())
}
