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
/// weight of type `T` under its canonical name. Validated the same way whatever `T` is.
#[derive(Clone)]
pub struct WhisperFiles<T> {
    pub config: WhisperConfig,
    pub generation: WhisperGeneration,
    pub tokenizer: WhisperTokenizer,
    pub tensors: BTreeMap<String, T>,
    /// Container the weights came from: "ctranslate2", "ggml", "safetensors", "synthetic".
    pub format: &'static str,
    pub path: PathBuf,
}

/// Every weight as f32.
pub type WhisperCheckpoint = WhisperFiles<HostTensor>;

/// Every weight as its file stores it (f16 views of the memory map, …): what
/// [`super::Whisper::from_weights`] builds a model from without an f32 copy of the whole
/// checkpoint first.
pub type WhisperWeights = WhisperFiles<RawTensor>;

/// Names and counts only: the values are hundreds of megabytes.
impl<T> std::fmt::Debug for WhisperFiles<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhisperFiles")
            .field("format", &self.format)
            .field("path", &self.path)
            .field("config", &self.config)
            .field("generation", &self.generation)
            .field("tokenizer", &self.tokenizer)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl WhisperCheckpoint {
    /// A tensor by canonical name (an error naming it when absent).
    pub fn tensor(&self, name: &str) -> Result<&HostTensor> {
        self.tensors
            .get(name)
            .ok_or_else(|| ModelError::bad_tensor(&self.path, name, "missing"))
    }
}

impl WhisperWeights {
    /// Every tensor widened to f32 (on up to 4 threads).
    pub fn into_checkpoint(self) -> Result<WhisperCheckpoint> {
        let items: Vec<(String, RawTensor)> = self.tensors.into_iter().collect();
        let path = &self.path;
        let wide = map_parallel(&items, |(name, t)| to_host(path, name, t));
        let mut tensors = BTreeMap::new();
        for ((name, _), t) in items.iter().zip(wide) {
            tensors.insert(name.clone(), t?);
        }
        Ok(WhisperCheckpoint {
            config: self.config,
            generation: self.generation,
            tokenizer: self.tokenizer,
            tensors,
            format: self.format,
            path: self.path,
        })
    }
}

impl WhisperWeights {
    /// A widened checkpoint's tensors, moved over without a copy.
    pub fn from_checkpoint(ck: WhisperCheckpoint) -> Result<Self> {
        let mut tensors = BTreeMap::new();
        for (name, t) in ck.tensors {
            let raw = RawTensor::from_f32_vec(t.shape, t.data)
                .map_err(|e| ModelError::bad_tensor(&ck.path, &name, e))?;
            tensors.insert(name, raw);
        }
        Ok(Self {
            config: ck.config,
            generation: ck.generation,
            tokenizer: ck.tokenizer,
            tensors,
            format: ck.format,
            path: ck.path,
        })
    }
}

/// [`load_checkpoint`] for inference: CTranslate2 weights stay as stored ([`load_ct2_stored`]);
/// the other containers are widened as `load_checkpoint` does and moved over.
pub fn load_weights(path: &Path) -> Result<WhisperWeights> {
    match stapes_formats::sniff(path)? {
        Format::Ct2 => load_ct2_stored(path),
        _ => WhisperWeights::from_checkpoint(load_checkpoint(path)?),
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
    tensors: BTreeMap<String, HostTensor>,
    format: &'static str,
    path: PathBuf,
) -> Result<WhisperCheckpoint> {
    validate(
        &config,
        &generation,
        &tokenizer,
        &tensors,
        |t| &t.shape,
        |t| first_non_finite(&t.data),
        &path,
    )?;
    Ok(WhisperCheckpoint {
        config,
        generation,
        tokenizer,
        tensors,
        format,
        path,
    })
}

/// The checks of [`checkpoint_from_tensors`] over any tensor type: `non_finite` gives the index
/// of a tensor's first NaN/±Inf (scanned on up to 4 threads).
fn validate<T: Sync>(
    config: &WhisperConfig,
    generation: &WhisperGeneration,
    tokenizer: &WhisperTokenizer,
    tensors: &BTreeMap<String, T>,
    shape_of: impl Fn(&T) -> &[usize],
    non_finite: impl Fn(&T) -> Option<usize> + Sync,
    path: &Path,
) -> Result<()> {
    let expected = expected_shapes(config);
    let names: BTreeSet<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    let unknown: Vec<&String> = tensors
        .keys()
        .filter(|k| !names.contains(k.as_str()))
        .collect();
    if !unknown.is_empty() {
        let list: Vec<&str> = unknown.iter().take(8).map(|s| s.as_str()).collect();
        return Err(ModelError::bad_model(
            path,
            format!(
                "{} unknown tensor(s) for a Whisper model: {}",
                unknown.len(),
                list.join(", ")
            ),
        ));
    }
    let mut present = Vec::with_capacity(expected.len());
    for (name, shape) in &expected {
        let t = tensors
            .get(name)
            .ok_or_else(|| ModelError::bad_tensor(path, name, "missing"))?;
        if shape_of(t) != shape.as_slice() {
            return Err(ModelError::bad_tensor(
                path,
                name,
                format!("shape {:?}, expected {shape:?}", shape_of(t)),
            ));
        }
        present.push((name, t));
    }
    let scans = map_parallel(&present, |(_, t)| non_finite(t));
    if let Some(((name, _), i)) = present
        .iter()
        .zip(scans)
        .find_map(|(p, i)| i.map(|i| (p, i)))
    {
        return Err(ModelError::bad_tensor(
            path,
            name.as_str(),
            format!("non-finite value at element {i}"),
        ));
    }
    if tokenizer.vocab_size() != config.vocab_size {
        return Err(ModelError::bad_model(
            path,
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
                path,
                format!("suppressed token {id} is outside the vocabulary"),
            ));
        }
    }
    for &(layer, head) in &generation.alignment_heads {
        if layer >= config.decoder_layers || head >= config.decoder_heads {
            return Err(ModelError::bad_model(
                path,
                format!("alignment head ({layer}, {head}) does not exist"),
            ));
        }
    }
    Ok(())
}

/// [`first_non_finite`] of a stored tensor, read in its own type: f16/bf16 by their exponent
/// bits (a NaN or ±Inf widens to one), block types widened.
fn stored_non_finite(t: &RawTensor) -> Option<usize> {
    // Counted per chunk without branches first (vectorises); the index is looked for on a hit.
    let halves = |exp: u16| {
        let is_bad = |c: &[u8]| u16::from_le_bytes([c[0], c[1]]) & exp == exp;
        t.bytes().chunks(8192).enumerate().find_map(|(i, chunk)| {
            let bad: u32 = chunk.chunks_exact(2).map(|c| u32::from(is_bad(c))).sum();
            (bad > 0)
                .then(|| chunk.chunks_exact(2).position(is_bad))
                .flatten()
                .map(|j| i * 4096 + j)
        })
    };
    match t.dtype {
        DType::F16 => halves(0x7c00),
        DType::BF16 => halves(0x7f80),
        DType::F32 => t.bytes().chunks_exact(4).position(|c| {
            u32::from_le_bytes([c[0], c[1], c[2], c[3]]) & 0x7f80_0000 == 0x7f80_0000
        }),
        _ => first_non_finite(&t.to_f32()),
    }
}

/// Index of the first NaN/±Inf. Counts them per chunk first (a branch-free pass that
/// vectorises over the 150–300 MB of a checkpoint) and looks for the index only on a hit.
fn first_non_finite(data: &[f32]) -> Option<usize> {
    const EXP: u32 = 0x7f80_0000;
    data.chunks(4096).enumerate().find_map(|(c, chunk)| {
        let bad = chunk
            .iter()
            .map(|v| u32::from(v.to_bits() & EXP == EXP))
            .sum::<u32>();
        (bad > 0)
            .then(|| chunk.iter().position(|v| !v.is_finite()))
            .flatten()
            .map(|i| c * 4096 + i)
    })
}

/// Loads a Whisper checkpoint from any supported container (sniffed from content): a
/// CTranslate2 directory or its `model.bin`, an HF transformers directory, a whisper.cpp file.
pub fn load_checkpoint(path: &Path) -> Result<WhisperCheckpoint> {
    match stapes_formats::sniff(path)? {
        Format::Ct2 => load_ct2(path),
        // A directory sniffed as ggml holds a whisper.cpp file named model.bin.
        Format::Ggml if path.is_dir() => load_ggml(&path.join("model.bin")),
        Format::Ggml => load_ggml(path),
        Format::Safetensors => load_hf(path),
        other => Err(ModelError::bad_model(
            path,
            format!("{other} files do not hold a Whisper model this engine reads"),
        )),
    }
}

fn to_host(path: &Path, name: &str, t: &RawTensor) -> Result<HostTensor> {
    float_only(path, name, t)?;
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

/// A CTranslate2 variable as stored, except int8/int16 weights, which are dequantized to f32
/// (`weight` + per-row `weight_scale`: w = q / scale).
fn ct2_value(f: &ct2::Ct2File, name: &str) -> Result<RawTensor> {
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
        return RawTensor::from_f32_vec(t.shape.clone(), data)
            .map_err(|e| ModelError::bad_tensor(&f.path, name, e));
    }
    float_only(&f.path, name, t)?;
    Ok(t.clone())
}

/// Rejects stored tensors that are not floating point (or a ggml block type, which dequantizes
/// to f32): a Whisper weight never is.
fn float_only(path: &Path, name: &str, t: &RawTensor) -> Result<()> {
    match t.dtype {
        DType::F32 | DType::F16 | DType::BF16 => Ok(()),
        q if q.is_quantized() => Ok(()),
        other => Err(ModelError::bad_tensor(
            path,
            name,
            format!("dtype {other} is not a float type"),
        )),
    }
}

/// The canonical tensors one CTranslate2 variable becomes (none for a `_scale` companion,
/// several for a fused QKV / KV matrix), as stored: a fused matrix is cut into views of the
/// same memory map.
fn ct2_entries(
    f: &ct2::Ct2File,
    bin: &Path,
    name: &str,
    t: &RawTensor,
) -> Result<Vec<(String, RawTensor)>> {
    let mut out = Vec::new();
    if name.ends_with("_scale") && f.variables.contains_key(name.trim_end_matches("_scale")) {
        return Ok(out);
    }
    let (pattern, layer) = match layer_pattern(name, '/') {
        Some((p, n)) => (p, Some(n)),
        None => (name.to_string(), None),
    };
    let subst = |s: &str| match layer {
        Some(n) => s.replace("{}", &n.to_string()),
        None => s.to_string(),
    };
    if let Some((_, canon)) = CT2_TABLE.iter().find(|(c, _)| *c == pattern) {
        out.push((subst(canon), ct2_value(f, name)?));
        return Ok(out);
    }
    let fused = CT2_FUSED.iter().find(|(c, _)| {
        pattern
            .strip_prefix(*c)
            .is_some_and(|rest| rest == "/weight" || rest == "/bias")
    });
    let Some((_, parts)) = fused else {
        return Err(ModelError::bad_tensor(
            bin,
            name,
            "unknown tensor for a Whisper model",
        ));
    };
    let is_bias = pattern.ends_with("/bias");
    let rows = t.shape.first().copied().unwrap_or(0);
    if rows % parts.len() != 0
        || (is_bias && t.shape.len() != 1)
        || (!is_bias && t.shape.len() != 2)
    {
        return Err(ModelError::bad_tensor(
            bin,
            name,
            format!(
                "shape {:?} cannot be split into {} parts",
                t.shape,
                parts.len()
            ),
        ));
    }
    let n = rows / parts.len();
    // Integer weights are dequantized whole (their scales are per row of the fused matrix).
    let whole = ct2_value(f, name)?;
    for (k, (canon, has_bias)) in parts.iter().enumerate() {
        let part = whole
            .rows(k * n, (k + 1) * n)
            .map_err(|e| ModelError::bad_tensor(bin, name, e))?;
        if is_bias {
            if !has_bias {
                // Whisper's key projections have no bias; the zeros CTranslate2 stores must
                // stay zeros or the file is not what it claims.
                if part.to_f32().iter().any(|&x| x != 0.0) {
                    return Err(ModelError::bad_tensor(
                        bin,
                        name,
                        "the key part of the fused bias is not zero",
                    ));
                }
                continue;
            }
            out.push((format!("{}.bias", subst(canon)), part));
        } else {
            out.push((format!("{}.weight", subst(canon)), part));
        }
    }
    Ok(out)
}

/// `f` over `items` on up to 4 threads (interleaved, so the large tensors of consecutive layers
/// spread), results in item order. Widening a checkpoint is page-fault bound and scales with
/// threads; one tensor after another left the second core idle during load.
fn map_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min(4)
        .min(items.len());
    if threads < 2 {
        return items.iter().map(f).collect();
    }
    let f = &f;
    let mut parts: Vec<Vec<(usize, R)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                s.spawn(move || {
                    (w..items.len())
                        .step_by(threads)
                        .map(|i| (i, f(&items[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut all: Vec<(usize, R)> = parts.iter_mut().flat_map(std::mem::take).collect();
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, r)| r).collect()
}

/// Loads a CTranslate2 Whisper model: a directory with `model.bin`, `config.json` and a
/// vocabulary, or the `model.bin` itself (the rest is looked for beside it).
pub fn load_ct2(path: &Path) -> Result<WhisperCheckpoint> {
    load_ct2_stored(path)?.into_checkpoint()
}

/// [`load_ct2`] with the weights left as the file stores them (views of its memory map).
pub fn load_ct2_stored(path: &Path) -> Result<WhisperWeights> {
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
        tensors.extend(ct2_entries(&f, &bin, name, t)?);
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
    validate(
        &config,
        &generation,
        &tokenizer,
        &tensors,
        |t| &t.shape,
        stored_non_finite,
        path,
    )?;
    Ok(WhisperWeights {
        config,
        generation,
        tokenizer,
        tensors,
        format: "ctranslate2",
        path: path.to_path_buf(),
    })
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

/// OpenAI's published cross-attention alignment heads (decoder layer, head) for the released
/// models, recognised by shape; for files that carry none (ggml). Large v1 and v2 share a shape
/// and are not told apart.
pub fn published_alignment_heads(c: &WhisperConfig) -> Option<Vec<(usize, usize)>> {
    let multilingual = c.vocab_size >= 51865;
    let heads: &[(usize, usize)] =
        match (c.d_model, c.encoder_layers, c.decoder_layers, multilingual) {
            (384, 4, 4, false) => &[
                (1, 0),
                (2, 0),
                (2, 5),
                (3, 0),
                (3, 1),
                (3, 2),
                (3, 3),
                (3, 4),
            ],
            (384, 4, 4, true) => &[(2, 2), (3, 0), (3, 2), (3, 3), (3, 4), (3, 5)],
            (512, 6, 6, false) => &[(3, 3), (4, 7), (5, 1), (5, 5), (5, 7)],
            (512, 6, 6, true) => &[
                (3, 1),
                (4, 2),
                (4, 3),
                (4, 7),
                (5, 1),
                (5, 2),
                (5, 4),
                (5, 6),
            ],
            (768, 12, 12, false) => &[
                (6, 6),
                (7, 0),
                (7, 3),
                (7, 8),
                (8, 2),
                (8, 5),
                (8, 7),
                (9, 0),
                (9, 4),
                (9, 8),
                (9, 10),
                (10, 0),
                (10, 1),
                (10, 2),
                (10, 3),
                (10, 6),
                (10, 11),
                (11, 2),
                (11, 4),
            ],
            (768, 12, 12, true) => &[
                (5, 3),
                (5, 9),
                (8, 0),
                (8, 4),
                (8, 7),
                (8, 8),
                (9, 0),
                (9, 7),
                (9, 9),
                (10, 5),
            ],
            (1024, 24, 24, false) => &[
                (11, 4),
                (14, 1),
                (14, 12),
                (14, 14),
                (15, 4),
                (16, 0),
                (16, 4),
                (16, 9),
                (17, 12),
                (17, 14),
                (18, 7),
                (18, 10),
                (18, 15),
                (20, 0),
                (20, 3),
                (20, 9),
                (20, 14),
                (21, 12),
            ],
            (1024, 24, 24, true) => &[(13, 15), (15, 4), (15, 15), (16, 1), (20, 0), (23, 4)],
            (1280, 32, 32, true) if c.vocab_size == 51866 => &[
                (7, 0),
                (10, 17),
                (12, 18),
                (13, 12),
                (16, 1),
                (17, 14),
                (19, 11),
                (21, 4),
                (24, 1),
                (25, 6),
            ],
            (1280, 32, 4, true) => &[(2, 4), (2, 11), (3, 3), (3, 6), (3, 11), (3, 14)],
            _ => return None,
        };
    Some(heads.to_vec())
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

// ---------------------------------------------------------------------------------------------
// OpenAI names (whisper.cpp ggml files, OpenAI's PyTorch checkpoints)

/// canonical ↔ OpenAI name; `{}` is the layer index.
const OPENAI_TABLE: &[(&str, &str)] = &[
    ("model.encoder.conv1.weight", "encoder.conv1.weight"),
    ("model.encoder.conv1.bias", "encoder.conv1.bias"),
    ("model.encoder.conv2.weight", "encoder.conv2.weight"),
    ("model.encoder.conv2.bias", "encoder.conv2.bias"),
    (
        "model.encoder.embed_positions.weight",
        "encoder.positional_embedding",
    ),
    ("model.encoder.layer_norm.weight", "encoder.ln_post.weight"),
    ("model.encoder.layer_norm.bias", "encoder.ln_post.bias"),
    (
        "model.decoder.embed_tokens.weight",
        "decoder.token_embedding.weight",
    ),
    (
        "model.decoder.embed_positions.weight",
        "decoder.positional_embedding",
    ),
    ("model.decoder.layer_norm.weight", "decoder.ln.weight"),
    ("model.decoder.layer_norm.bias", "decoder.ln.bias"),
    (
        "model.encoder.layers.{}.self_attn.q_proj.weight",
        "encoder.blocks.{}.attn.query.weight",
    ),
    (
        "model.encoder.layers.{}.self_attn.q_proj.bias",
        "encoder.blocks.{}.attn.query.bias",
    ),
    (
        "model.encoder.layers.{}.self_attn.k_proj.weight",
        "encoder.blocks.{}.attn.key.weight",
    ),
    (
        "model.encoder.layers.{}.self_attn.v_proj.weight",
        "encoder.blocks.{}.attn.value.weight",
    ),
    (
        "model.encoder.layers.{}.self_attn.v_proj.bias",
        "encoder.blocks.{}.attn.value.bias",
    ),
    (
        "model.encoder.layers.{}.self_attn.out_proj.weight",
        "encoder.blocks.{}.attn.out.weight",
    ),
    (
        "model.encoder.layers.{}.self_attn.out_proj.bias",
        "encoder.blocks.{}.attn.out.bias",
    ),
    (
        "model.encoder.layers.{}.self_attn_layer_norm.weight",
        "encoder.blocks.{}.attn_ln.weight",
    ),
    (
        "model.encoder.layers.{}.self_attn_layer_norm.bias",
        "encoder.blocks.{}.attn_ln.bias",
    ),
    (
        "model.encoder.layers.{}.fc1.weight",
        "encoder.blocks.{}.mlp.0.weight",
    ),
    (
        "model.encoder.layers.{}.fc1.bias",
        "encoder.blocks.{}.mlp.0.bias",
    ),
    (
        "model.encoder.layers.{}.fc2.weight",
        "encoder.blocks.{}.mlp.2.weight",
    ),
    (
        "model.encoder.layers.{}.fc2.bias",
        "encoder.blocks.{}.mlp.2.bias",
    ),
    (
        "model.encoder.layers.{}.final_layer_norm.weight",
        "encoder.blocks.{}.mlp_ln.weight",
    ),
    (
        "model.encoder.layers.{}.final_layer_norm.bias",
        "encoder.blocks.{}.mlp_ln.bias",
    ),
    (
        "model.decoder.layers.{}.self_attn.q_proj.weight",
        "decoder.blocks.{}.attn.query.weight",
    ),
    (
        "model.decoder.layers.{}.self_attn.q_proj.bias",
        "decoder.blocks.{}.attn.query.bias",
    ),
    (
        "model.decoder.layers.{}.self_attn.k_proj.weight",
        "decoder.blocks.{}.attn.key.weight",
    ),
    (
        "model.decoder.layers.{}.self_attn.v_proj.weight",
        "decoder.blocks.{}.attn.value.weight",
    ),
    (
        "model.decoder.layers.{}.self_attn.v_proj.bias",
        "decoder.blocks.{}.attn.value.bias",
    ),
    (
        "model.decoder.layers.{}.self_attn.out_proj.weight",
        "decoder.blocks.{}.attn.out.weight",
    ),
    (
        "model.decoder.layers.{}.self_attn.out_proj.bias",
        "decoder.blocks.{}.attn.out.bias",
    ),
    (
        "model.decoder.layers.{}.self_attn_layer_norm.weight",
        "decoder.blocks.{}.attn_ln.weight",
    ),
    (
        "model.decoder.layers.{}.self_attn_layer_norm.bias",
        "decoder.blocks.{}.attn_ln.bias",
    ),
    (
        "model.decoder.layers.{}.encoder_attn.q_proj.weight",
        "decoder.blocks.{}.cross_attn.query.weight",
    ),
    (
        "model.decoder.layers.{}.encoder_attn.q_proj.bias",
        "decoder.blocks.{}.cross_attn.query.bias",
    ),
    (
        "model.decoder.layers.{}.encoder_attn.k_proj.weight",
        "decoder.blocks.{}.cross_attn.key.weight",
    ),
    (
        "model.decoder.layers.{}.encoder_attn.v_proj.weight",
        "decoder.blocks.{}.cross_attn.value.weight",
    ),
    (
        "model.decoder.layers.{}.encoder_attn.v_proj.bias",
        "decoder.blocks.{}.cross_attn.value.bias",
    ),
    (
        "model.decoder.layers.{}.encoder_attn.out_proj.weight",
        "decoder.blocks.{}.cross_attn.out.weight",
    ),
    (
        "model.decoder.layers.{}.encoder_attn.out_proj.bias",
        "decoder.blocks.{}.cross_attn.out.bias",
    ),
    (
        "model.decoder.layers.{}.encoder_attn_layer_norm.weight",
        "decoder.blocks.{}.cross_attn_ln.weight",
    ),
    (
        "model.decoder.layers.{}.encoder_attn_layer_norm.bias",
        "decoder.blocks.{}.cross_attn_ln.bias",
    ),
    (
        "model.decoder.layers.{}.fc1.weight",
        "decoder.blocks.{}.mlp.0.weight",
    ),
    (
        "model.decoder.layers.{}.fc1.bias",
        "decoder.blocks.{}.mlp.0.bias",
    ),
    (
        "model.decoder.layers.{}.fc2.weight",
        "decoder.blocks.{}.mlp.2.weight",
    ),
    (
        "model.decoder.layers.{}.fc2.bias",
        "decoder.blocks.{}.mlp.2.bias",
    ),
    (
        "model.decoder.layers.{}.final_layer_norm.weight",
        "decoder.blocks.{}.mlp_ln.weight",
    ),
    (
        "model.decoder.layers.{}.final_layer_norm.bias",
        "decoder.blocks.{}.mlp_ln.bias",
    ),
];

/// Replaces the first all-digit segment of a dotted name with `{}` (the layer index).
fn dotted_pattern(name: &str) -> (String, Option<usize>) {
    let mut found = None;
    let parts: Vec<String> = name
        .split('.')
        .map(|p| match p.parse::<usize>() {
            Ok(n) if found.is_none() && !p.is_empty() => {
                found = Some(n);
                "{}".to_string()
            }
            _ => p.to_string(),
        })
        .collect();
    (parts.join("."), found)
}

fn translate(name: &str, table: &[(&str, &str)], to_openai: bool) -> Option<String> {
    let (pattern, layer) = dotted_pattern(name);
    let (from, to) = table
        .iter()
        .find(|(c, o)| (if to_openai { *c } else { *o }) == pattern)
        .map(|&(c, o)| if to_openai { (c, o) } else { (o, c) })?;
    let _ = from;
    Some(match layer {
        Some(n) => to.replacen("{}", &n.to_string(), 1),
        None => to.to_string(),
    })
}

/// OpenAI / whisper.cpp name of a canonical tensor.
pub fn openai_name(canonical: &str) -> Option<String> {
    translate(canonical, OPENAI_TABLE, true)
}

/// Canonical name of an OpenAI / whisper.cpp tensor.
pub fn canonical_from_openai(name: &str) -> Option<String> {
    translate(name, OPENAI_TABLE, false)
}

fn positive(path: &Path, what: &str, v: i32) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| ModelError::bad_model(path, format!("hparam {what} = {v}")))
}

/// Loads a whisper.cpp ggml file (f32, f16 or q8_0 tensors).
pub fn load_ggml(path: &Path) -> Result<WhisperCheckpoint> {
    let f = stapes_formats::ggml::read(path)?;
    let mut tensors = BTreeMap::new();
    for (name, t) in &f.tensors {
        let canon = canonical_from_openai(name).ok_or_else(|| {
            ModelError::bad_tensor(path, name, "unknown tensor for a Whisper model")
        })?;
        let mut h = to_host(path, name, t)?;
        // whisper.cpp stores the conv biases as (d, 1) columns.
        let conv_bias = canon.ends_with("conv1.bias") || canon.ends_with("conv2.bias");
        if conv_bias && h.shape.len() == 2 && h.shape[1] == 1 {
            h.shape.truncate(1);
        }
        tensors.insert(canon, h);
    }
    let hp = &f.hparams;
    let config = infer_config(
        path,
        &tensors,
        |t| &t.shape,
        positive(path, "n_audio_head", hp.n_audio_head)?,
        positive(path, "n_text_head", hp.n_text_head)?,
    )?;
    let declared = [
        ("n_vocab", hp.n_vocab, config.vocab_size),
        ("n_audio_ctx", hp.n_audio_ctx, config.n_audio_ctx),
        ("n_audio_state", hp.n_audio_state, config.d_model),
        ("n_audio_layer", hp.n_audio_layer, config.encoder_layers),
        ("n_text_ctx", hp.n_text_ctx, config.n_text_ctx),
        ("n_text_state", hp.n_text_state, config.d_model),
        ("n_text_layer", hp.n_text_layer, config.decoder_layers),
        ("n_mels", hp.n_mels, config.n_mels),
    ];
    for (what, declared, found) in declared {
        if positive(path, what, declared)? != found {
            return Err(ModelError::bad_model(
                path,
                format!("hparam {what} = {declared} but the tensors say {found}"),
            ));
        }
    }
    let tokenizer = WhisperTokenizer::from_ggml_vocab(path, &f.vocab, config.vocab_size)?;
    let mut generation = default_generation(&tokenizer)?;
    generation.alignment_heads = published_alignment_heads(&config).unwrap_or_default();
    checkpoint_from_tensors(
        config,
        generation,
        tokenizer,
        tensors,
        "ggml",
        path.to_path_buf(),
    )
}

// ---------------------------------------------------------------------------------------------
// HF transformers directories (canonical names already)

fn cfg_usize(path: &Path, v: &serde_json::Value, key: &str) -> Result<usize> {
    v.get(key)
        .and_then(|x| x.as_u64())
        .and_then(|x| usize::try_from(x).ok())
        .ok_or_else(|| ModelError::bad_model(path, format!("config.json has no integer `{key}`")))
}

/// Loads an HF `WhisperForConditionalGeneration` directory (config.json + model.safetensors or
/// shards; tokenizer and generation_config.json where present).
pub fn load_hf(path: &Path) -> Result<WhisperCheckpoint> {
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let st = if path.is_dir() {
        stapes_formats::safetensors_dir::read_dir(path)?
    } else {
        stapes_formats::safetensors_dir::read_file(path)?
    };
    let cfg_path = dir.join("config.json");
    let cfg = read_json(&cfg_path)?;
    if let Some(mt) = cfg.get("model_type").and_then(|x| x.as_str()) {
        if mt != "whisper" {
            return Err(ModelError::bad_model(
                &cfg_path,
                format!("model_type `{mt}` is not whisper"),
            ));
        }
    }
    let mut tensors = BTreeMap::new();
    let mut proj_out = None;
    for (name, t) in &st.tensors {
        // Checkpoints saved from the bare WhisperModel lack the `model.` prefix.
        let canon = if name.starts_with("encoder.") || name.starts_with("decoder.") {
            format!("model.{name}")
        } else {
            name.clone()
        };
        if canon == "proj_out.weight" {
            proj_out = Some(to_host(&st.path, name, t)?);
            continue;
        }
        tensors.insert(canon, to_host(&st.path, name, t)?);
    }
    let config = infer_config(
        &st.path,
        &tensors,
        |t| &t.shape,
        cfg_usize(&cfg_path, &cfg, "encoder_attention_heads")?,
        cfg_usize(&cfg_path, &cfg, "decoder_attention_heads")?,
    )?;
    let declared = [
        ("d_model", config.d_model),
        ("encoder_layers", config.encoder_layers),
        ("decoder_layers", config.decoder_layers),
        ("encoder_ffn_dim", config.encoder_ffn),
        ("decoder_ffn_dim", config.decoder_ffn),
        ("num_mel_bins", config.n_mels),
        ("max_source_positions", config.n_audio_ctx),
        ("max_target_positions", config.n_text_ctx),
        ("vocab_size", config.vocab_size),
    ];
    for (key, found) in declared {
        let v = cfg_usize(&cfg_path, &cfg, key)?;
        if v != found {
            return Err(ModelError::bad_model(
                &cfg_path,
                format!("`{key}` = {v} but the tensors say {found}"),
            ));
        }
    }
    if let Some(p) = proj_out {
        // Whisper ties the output projection to the token embeddings.
        let emb = tensors.get("model.decoder.embed_tokens.weight");
        if emb.map(|e| e != &p).unwrap_or(true) {
            return Err(ModelError::bad_tensor(
                &st.path,
                "proj_out.weight",
                "differs from the tied model.decoder.embed_tokens.weight",
            ));
        }
    }
    let tokenizer = match WhisperTokenizer::from_dir(&dir, config.vocab_size) {
        Ok(t) => t,
        Err(e) if !has_tokenizer_files(&dir) => {
            tracing::warn!("{}: no tokenizer files ({e}); ids only", dir.display());
            WhisperTokenizer::placeholder(config.vocab_size)?
        }
        Err(e) => return Err(e),
    };
    let gen_path = dir.join("generation_config.json");
    let generation = if gen_path.is_file() {
        generation_from_json(
            &gen_path,
            &read_json(&gen_path)?,
            ["suppress_tokens", "begin_suppress_tokens"],
        )?
    } else {
        generation_from_json(
            &cfg_path,
            &cfg,
            ["suppress_tokens", "begin_suppress_tokens"],
        )?
    };
    checkpoint_from_tensors(
        config,
        generation,
        tokenizer,
        tensors,
        "safetensors",
        path.to_path_buf(),
    )
}

fn has_tokenizer_files(dir: &Path) -> bool {
    ["vocabulary.txt", "tokenizer.json", "vocab.json"]
        .iter()
        .any(|f| dir.join(f).is_file())
}

// ---------------------------------------------------------------------------------------------
// Synthetic checkpoints (random weights of a published shape) and writers.

/// A checkpoint of `config`'s shape with deterministic random weights (layer norms at 1 / 0),
/// for speed measurements where the real weights are not at hand. The tokenizer has Whisper's
/// special-token layout but placeholder text tokens.
pub fn synthetic_checkpoint(config: &WhisperConfig, seed: u64) -> Result<WhisperCheckpoint> {
    let mut tensors = BTreeMap::new();
    for (i, (name, shape)) in expected_shapes(config).into_iter().enumerate() {
        let is_norm = name.contains("layer_norm");
        let t = if is_norm && name.ends_with(".weight") {
            HostTensor {
                data: vec![1.0; shape.iter().product()],
                shape,
            }
        } else if is_norm {
            HostTensor::zeros(shape)
        } else {
            let fan_in = if shape.len() > 1 {
                shape[1..].iter().product::<usize>()
            } else {
                config.d_model
            };
            HostTensor::random(
                shape,
                seed.wrapping_add(i as u64),
                1.0 / (fan_in as f32).sqrt(),
            )
        };
        tensors.insert(name, t);
    }
    let tokenizer = WhisperTokenizer::placeholder(config.vocab_size)?;
    let generation = WhisperGeneration {
        begin_suppress_tokens: vec![tokenizer.eot()],
        ..Default::default()
    };
    checkpoint_from_tensors(
        config.clone(),
        generation,
        tokenizer,
        tensors,
        "synthetic",
        PathBuf::from("synthetic"),
    )
}

/// Storage of the matrices when writing a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightType {
    F32,
    F16,
    /// ggml Q8_0 (ggml output only; 2-D matrices, the rest stays f16/f32 as whisper.cpp expects).
    Q8_0,
}

fn raw(
    path: &Path,
    name: &str,
    t: &HostTensor,
    shape: Vec<usize>,
    ty: WeightType,
) -> Result<RawTensor> {
    let r = match ty {
        WeightType::F32 => RawTensor::from_f32(shape, &t.data),
        WeightType::F16 => {
            let h: Vec<half::f16> = t.data.iter().map(|&v| half::f16::from_f32(v)).collect();
            RawTensor::from_f16(shape, &h)
        }
        WeightType::Q8_0 => stapes_formats::tensor::quantize_q8_0(&t.data)
            .ok_or_else(|| "not whole q8_0 blocks".to_string())
            .and_then(|b| RawTensor::from_bytes(DType::Q8_0, shape, b)),
    };
    r.map_err(|e| ModelError::bad_tensor(path, name, e))
}

/// Writes a checkpoint as a whisper.cpp ggml file (`ty`: F16 like whisper.cpp's converter, F32,
/// or Q8_0). whisper.cpp wants biases, norms and position tables in f32 and the convolutions in
/// f16 unless the whole file is f32.
pub fn write_ggml(ck: &WhisperCheckpoint, out: &Path, ty: WeightType) -> Result<()> {
    let c = &ck.config;
    let i32_of = |v: usize, what: &str| {
        i32::try_from(v).map_err(|_| {
            ModelError::bad_model(out, format!("{what} = {v} does not fit ggml's i32"))
        })
    };
    let hparams = stapes_formats::ggml::GgmlHparams {
        n_vocab: i32_of(c.vocab_size, "n_vocab")?,
        n_audio_ctx: i32_of(c.n_audio_ctx, "n_audio_ctx")?,
        n_audio_state: i32_of(c.d_model, "d_model")?,
        n_audio_head: i32_of(c.encoder_heads, "encoder_heads")?,
        n_audio_layer: i32_of(c.encoder_layers, "encoder_layers")?,
        n_text_ctx: i32_of(c.n_text_ctx, "n_text_ctx")?,
        n_text_state: i32_of(c.d_model, "d_model")?,
        n_text_head: i32_of(c.decoder_heads, "decoder_heads")?,
        n_text_layer: i32_of(c.decoder_layers, "decoder_layers")?,
        n_mels: i32_of(c.n_mels, "n_mels")?,
        ftype: stapes_formats::ggml::ftype_for(match ty {
            WeightType::F32 => DType::F32,
            WeightType::F16 => DType::F16,
            WeightType::Q8_0 => DType::Q8_0,
        })
        .unwrap_or(1),
    };
    if c.encoder_ffn != 4 * c.d_model
        || c.decoder_ffn != 4 * c.d_model
        || c.encoder_heads != c.decoder_heads
    {
        return Err(ModelError::bad_model(
            out,
            "whisper.cpp needs FFN width 4·d_model and equal head counts",
        ));
    }
    let mel_filters = stapes_formats::ggml::MelFilters {
        n_mel: c.n_mels,
        n_fft: stapes_audio::features::whisper::N_FREQ,
        data: stapes_audio::features::whisper::filterbank(c.n_mels),
    };
    // Like whisper.cpp's converters: the regular tokens only, as raw bytes; whisper.cpp derives
    // the control tokens from n_vocab.
    let vocab: Vec<Vec<u8>> = (0..ck.tokenizer.eot())
        .map(|i| ck.tokenizer.token_bytes(i).unwrap_or_default().to_vec())
        .collect();
    let mut tensors = Vec::new();
    for (canon, t) in &ck.tensors {
        let name = openai_name(canon)
            .ok_or_else(|| ModelError::bad_tensor(out, canon, "no whisper.cpp name"))?;
        let conv_bias = canon.ends_with("conv1.bias") || canon.ends_with("conv2.bias");
        // whisper.cpp wants the conv biases as (d, 1) columns.
        let shape = match (conv_bias, t.shape.as_slice()) {
            (true, &[d]) => vec![d, 1],
            (true, other) => {
                return Err(ModelError::bad_tensor(
                    out,
                    canon,
                    format!("shape {other:?} is not a bias"),
                ))
            }
            _ => t.shape.clone(),
        };
        let positional = canon.ends_with("embed_positions.weight");
        let tty = if t.shape.len() < 2 || positional || ty == WeightType::F32 {
            WeightType::F32
        } else if t.shape.len() == 3 || ty == WeightType::F16 {
            WeightType::F16
        } else {
            WeightType::Q8_0
        };
        tensors.push((name.clone(), raw(out, &name, t, shape, tty)?));
    }
    let file = stapes_formats::ggml::GgmlFile {
        path: out.to_path_buf(),
        hparams,
        mel_filters,
        vocab,
        tensors,
    };
    stapes_formats::ggml::write(out, &file)?;
    Ok(())
}

/// Writes a checkpoint as an HF transformers directory: config.json, generation_config.json,
/// model.safetensors (matrices and vectors in `ty`, F32 or F16), preprocessor_config.json and the
/// tokenizer (tokenizer.json copied from a source that has one, plus vocab.json and
/// added_tokens.json).
pub fn write_hf(ck: &WhisperCheckpoint, out: &Path, ty: WeightType) -> Result<()> {
    if ty == WeightType::Q8_0 {
        return Err(ModelError::bad_model(
            out,
            "safetensors output is f32 or f16",
        ));
    }
    std::fs::create_dir_all(out).map_err(|source| ModelError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    let c = &ck.config;
    let tok = &ck.tokenizer;
    let sp = tok.special();
    let dtype = if ty == WeightType::F16 {
        "float16"
    } else {
        "float32"
    };
    let config = serde_json::json!({
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        "activation_function": "gelu",
        "d_model": c.d_model,
        "encoder_layers": c.encoder_layers,
        "encoder_attention_heads": c.encoder_heads,
        "encoder_ffn_dim": c.encoder_ffn,
        "decoder_layers": c.decoder_layers,
        "decoder_attention_heads": c.decoder_heads,
        "decoder_ffn_dim": c.decoder_ffn,
        "num_hidden_layers": c.encoder_layers,
        "num_mel_bins": c.n_mels,
        "max_source_positions": c.n_audio_ctx,
        "max_target_positions": c.n_text_ctx,
        "vocab_size": c.vocab_size,
        "scale_embedding": false,
        "tie_word_embeddings": true,
        "use_cache": true,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "init_std": 0.02,
        "bos_token_id": sp.eot,
        "eos_token_id": sp.eot,
        "pad_token_id": sp.eot,
        "decoder_start_token_id": sp.sot,
        "begin_suppress_tokens": ck.generation.begin_suppress_tokens,
        "suppress_tokens": ck.generation.suppress_tokens,
        "torch_dtype": dtype,
    });
    let lang_to_id: serde_json::Map<String, serde_json::Value> = tok
        .languages()
        .iter()
        .map(|(code, id)| (format!("<|{code}|>"), serde_json::json!(id)))
        .collect();
    let generation = serde_json::json!({
        "alignment_heads": ck.generation.alignment_heads.iter().map(|&(l, h)| [l, h]).collect::<Vec<_>>(),
        "begin_suppress_tokens": ck.generation.begin_suppress_tokens,
        "suppress_tokens": ck.generation.suppress_tokens,
        "bos_token_id": sp.eot,
        "eos_token_id": sp.eot,
        "pad_token_id": sp.eot,
        "decoder_start_token_id": sp.sot,
        "no_timestamps_token_id": sp.no_timestamps,
        "prev_sot_token_id": sp.sot_prev,
        "is_multilingual": tok.is_multilingual(),
        "lang_to_id": lang_to_id,
        "task_to_id": {"transcribe": sp.transcribe, "translate": sp.translate},
        "max_initial_timestamp_index": 50,
        "max_length": c.n_text_ctx,
        "return_timestamps": false,
    });
    let preprocessor = serde_json::json!({
        "feature_extractor_type": "WhisperFeatureExtractor",
        "processor_class": "WhisperProcessor",
        "feature_size": c.n_mels,
        "sampling_rate": 16000,
        "hop_length": 160,
        "n_fft": 400,
        "chunk_length": 30,
        "n_samples": 480000,
        "nb_max_frames": 3000,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": false,
    });
    let write_json = |name: &str, v: &serde_json::Value| -> Result<()> {
        let p = out.join(name);
        let text = serde_json::to_string_pretty(v)
            .map_err(|e| ModelError::bad_model(&p, e.to_string()))?;
        std::fs::write(&p, text + "\n").map_err(|source| ModelError::Io {
            path: p.clone(),
            source,
        })
    };
    write_json("config.json", &config)?;
    write_json("generation_config.json", &generation)?;
    write_json("preprocessor_config.json", &preprocessor)?;
    let mut vocab = serde_json::Map::new();
    let mut added = serde_json::Map::new();
    for id in 0..tok.vocab_size() as u32 {
        let s = tok.token_str(id).unwrap_or_default().to_string();
        if id < sp.eot {
            vocab.entry(s).or_insert(serde_json::json!(id));
        } else {
            added.entry(s).or_insert(serde_json::json!(id));
        }
    }
    write_json("vocab.json", &serde_json::Value::Object(vocab))?;
    write_json("added_tokens.json", &serde_json::Value::Object(added))?;
    let src_dir = if ck.path.is_dir() {
        ck.path.clone()
    } else {
        ck.path.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let tj = src_dir.join("tokenizer.json");
    if tj.is_file() && src_dir != out {
        std::fs::copy(&tj, out.join("tokenizer.json")).map_err(|source| ModelError::Io {
            path: tj.clone(),
            source,
        })?;
    }
    let mut tensors = BTreeMap::new();
    for (name, t) in &ck.tensors {
        tensors.insert(name.clone(), raw(out, name, t, t.shape.clone(), ty)?);
    }
    let meta: BTreeMap<String, String> = [("format".to_string(), "pt".to_string())].into();
    stapes_formats::safetensors_dir::write_dir(out, &tensors, &meta, None)?;
    Ok(())
}

/// Writes a CTranslate2 directory (model.bin with fused QKV / cross KV, config.json,
/// vocabulary.txt; tokenizer.json copied where the source has one).
pub fn write_ct2(ck: &WhisperCheckpoint, out: &Path, ty: WeightType) -> Result<()> {
    if ty == WeightType::Q8_0 {
        return Err(ModelError::bad_model(
            out,
            "CTranslate2 output is f32 or f16",
        ));
    }
    std::fs::create_dir_all(out).map_err(|source| ModelError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    let bin = out.join("model.bin");
    let c = &ck.config;
    let mut vars: BTreeMap<String, RawTensor> = BTreeMap::new();
    let get = |name: &str| ck.tensor(name);
    let scalar_i16 = |v: i16| {
        RawTensor::from_bytes(DType::I16, vec![], v.to_le_bytes().to_vec())
            .map_err(|e| ModelError::bad_model(&bin, e))
    };
    let scalar_i8 = |v: i8| {
        RawTensor::from_bytes(DType::I8, vec![], vec![v as u8])
            .map_err(|e| ModelError::bad_model(&bin, e))
    };
    for (ct2_pat, canon_pat) in CT2_TABLE {
        let layers = if ct2_pat.contains("{}") {
            if ct2_pat.starts_with("encoder") {
                c.encoder_layers
            } else {
                c.decoder_layers
            }
        } else {
            1
        };
        for n in 0..layers {
            let (cn, kn) = (
                ct2_pat.replace("{}", &n.to_string()),
                canon_pat.replace("{}", &n.to_string()),
            );
            let t = get(&kn)?;
            vars.insert(cn.clone(), raw(&bin, &cn, t, t.shape.clone(), ty)?);
        }
    }
    for (ct2_pat, parts) in CT2_FUSED {
        let layers = if ct2_pat.starts_with("encoder") {
            c.encoder_layers
        } else {
            c.decoder_layers
        };
        for n in 0..layers {
            let base = ct2_pat.replace("{}", &n.to_string());
            let (mut w, mut b) = (Vec::new(), Vec::new());
            for (canon, has_bias) in parts.iter() {
                let canon = canon.replace("{}", &n.to_string());
                w.extend_from_slice(&get(&format!("{canon}.weight"))?.data);
                if *has_bias {
                    b.extend_from_slice(&get(&format!("{canon}.bias"))?.data);
                } else {
                    b.extend(std::iter::repeat_n(0.0, c.d_model));
                }
            }
            let rows = parts.len() * c.d_model;
            let wt = HostTensor {
                shape: vec![rows, c.d_model],
                data: w,
            };
            let bt = HostTensor {
                shape: vec![rows],
                data: b,
            };
            vars.insert(
                format!("{base}/weight"),
                raw(&bin, &base, &wt, wt.shape.clone(), ty)?,
            );
            vars.insert(
                format!("{base}/bias"),
                raw(&bin, &base, &bt, bt.shape.clone(), ty)?,
            );
        }
    }
    let heads = |h: usize| {
        i16::try_from(h).map_err(|_| ModelError::bad_model(&bin, "head count too large"))
    };
    vars.insert(
        "encoder/num_heads".into(),
        scalar_i16(heads(c.encoder_heads)?)?,
    );
    vars.insert(
        "decoder/num_heads".into(),
        scalar_i16(heads(c.decoder_heads)?)?,
    );
    // CTranslate2 Transformer flags as its Whisper converter sets them (GELU = 3, pre-norm).
    vars.insert("decoder/activation".into(), scalar_i8(3)?);
    vars.insert("decoder/pre_norm".into(), scalar_i8(1)?);
    vars.insert("decoder/alibi".into(), scalar_i8(0)?);
    vars.insert("decoder/scale_embeddings".into(), scalar_i8(0)?);
    vars.insert("decoder/start_from_zero_embedding".into(), scalar_i8(0)?);
    vars.insert("decoder/alignment_layer".into(), scalar_i16(-1)?);
    vars.insert("decoder/alignment_heads".into(), scalar_i16(1)?);
    let aliases: BTreeMap<String, String> = [(
        "decoder/projection/weight".to_string(),
        "decoder/embeddings/weight".to_string(),
    )]
    .into();
    stapes_formats::ct2::write(&bin, "WhisperSpec", 3, &vars, &aliases)?;
    let tok = &ck.tokenizer;
    let config = serde_json::json!({
        "alignment_heads": ck.generation.alignment_heads.iter().map(|&(l, h)| [l, h]).collect::<Vec<_>>(),
        "lang_ids": tok.languages().iter().map(|&(_, id)| id).collect::<Vec<_>>(),
        "suppress_ids": ck.generation.suppress_tokens,
        "suppress_ids_begin": ck.generation.begin_suppress_tokens,
    });
    let p = out.join("config.json");
    std::fs::write(
        &p,
        serde_json::to_string_pretty(&config).unwrap_or_default() + "\n",
    )
    .map_err(|source| ModelError::Io {
        path: p.clone(),
        source,
    })?;
    let mut vocab = String::new();
    for id in 0..tok.vocab_size() as u32 {
        vocab.push_str(tok.token_str(id).unwrap_or_default());
        vocab.push('\n');
    }
    let p = out.join("vocabulary.txt");
    std::fs::write(&p, vocab).map_err(|source| ModelError::Io {
        path: p.clone(),
        source,
    })?;
    let src_dir = if ck.path.is_dir() {
        ck.path.clone()
    } else {
        ck.path.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let tj = src_dir.join("tokenizer.json");
    if tj.is_file() && src_dir != out {
        std::fs::copy(&tj, out.join("tokenizer.json")).map_err(|source| ModelError::Io {
            path: tj.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Converts a Whisper checkpoint in any readable format to `to` (ggml file, HF directory or
/// CTranslate2 directory), keeping f16 weights f16 (f16 → f32 → f16 is exact).
pub fn convert(input: &Path, output: &Path, to: Format) -> Result<()> {
    convert_with(input, output, to, WeightType::F16)
}

/// [`convert`] with an explicit weight type.
pub fn convert_with(input: &Path, output: &Path, to: Format, ty: WeightType) -> Result<()> {
    let ck = load_checkpoint(input)?;
    match to {
        Format::Ggml => write_ggml(&ck, output, ty),
        Format::Safetensors => write_hf(&ck, output, ty),
        Format::Ct2 => write_ct2(&ck, output, ty),
        other => Err(ModelError::bad_model(
            output,
            format!("cannot write Whisper as {other}"),
        )),
    }
}

#[cfg(test)]
mod finite_tests {
    #[test]
    fn first_non_finite_finds_the_first_across_chunks() {
        let mut v = vec![1.5f32; 10_000];
        assert_eq!(super::first_non_finite(&v), None);
        v[9_000] = f32::NAN;
        v[4_101] = f32::NEG_INFINITY;
        assert_eq!(super::first_non_finite(&v), Some(4_101));
        v[0] = f32::INFINITY;
        assert_eq!(super::first_non_finite(&v), Some(0));
        assert_eq!(
            super::first_non_finite(&[f32::MAX, f32::MIN, 0.0, -0.0]),
            None
        );
    }
}
