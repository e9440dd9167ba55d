//! NeMo `.nemo` archives: a tar (optionally gzip-compressed) holding `model_config.yaml` and
//! `model_weights.ckpt` (a `torch.save`d state dict). The config is read with a small YAML
//! subset reader (what OmegaConf writes: block mappings and sequences, flow sequences of
//! scalars, quoted and plain scalars); the weights with [`crate::pickle`]; NeMo's names are mapped
//! to the canonical transformers names here (the inverse of transformers' `convert_nemo_to_hf`).

use super::canary::{CanaryCheckpoint, CanaryConfig};
use super::canary_prompt::{CanaryTokenizer, PromptFormat};
use super::config::{EncoderConfig, HeadConfig, ParakeetConfig, TransducerConfig};
use super::weights::{validate, ParakeetCheckpoint};
use crate::pickle::read_state_dict;
use crate::{ModelError, Result};
use serde_json::{Map, Number, Value};
use stapes_core::{Activation, HostTensor};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// Files of a tar archive by base name (directories dropped, `./` prefixes ignored).
fn tar_files(b: &[u8]) -> std::result::Result<BTreeMap<String, &[u8]>, String> {
    let mut out = BTreeMap::new();
    let mut p = 0usize;
    let mut long_name: Option<String> = None;
    while p + 512 <= b.len() {
        let h = &b[p..p + 512];
        if h.iter().all(|&c| c == 0) {
            break;
        }
        let field = |a: usize, n: usize| {
            let s = &h[a..a + n];
            let end = s.iter().position(|&c| c == 0).unwrap_or(n);
            String::from_utf8_lossy(&s[..end]).to_string()
        };
        let size_field = field(124, 12);
        let size = usize::from_str_radix(size_field.trim(), 8)
            .map_err(|_| format!("bad tar size field `{size_field}`"))?;
        let kind = h[156];
        let mut name = field(0, 100);
        if &h[257..262] == b"ustar" {
            let prefix = field(345, 155);
            if !prefix.is_empty() {
                name = format!("{prefix}/{name}");
            }
        }
        let start = p + 512;
        let data = b
            .get(start..start + size)
            .ok_or_else(|| format!("tar entry `{name}` runs past the end"))?;
        match kind {
            b'L' => long_name = Some(String::from_utf8_lossy(data).trim_end_matches('\0').into()),
            b'0' | 0 | b'7' => {
                let full = long_name.take().unwrap_or(name);
                let base = full.rsplit('/').next().unwrap_or(&full).to_string();
                // Borrowed: a real checkpoint is gigabytes; no second copy.
                out.insert(base, data);
            }
            _ => long_name = None,
        }
        p = start + size.div_ceil(512) * 512;
    }
    Ok(out)
}

// ---- YAML subset ----

fn yaml_scalar(s: &str) -> Value {
    let s = s.trim();
    if let Some(q) = s.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')) {
        return Value::String(q.replace("''", "'"));
    }
    if let Some(q) = s.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        return Value::String(q.replace("\\\"", "\"").replace("\\\\", "\\"));
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        if inner.trim().is_empty() {
            return Value::Array(Vec::new());
        }
        return Value::Array(inner.split(',').map(yaml_scalar).collect());
    }
    match s {
        "" | "null" | "~" | "None" => return Value::Null,
        "true" | "True" => return Value::Bool(true),
        "false" | "False" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(i) = s.parse::<i64>() {
        return Value::Number(i.into());
    }
    if let Some(n) = s.parse::<f64>().ok().and_then(Number::from_f64) {
        return Value::Number(n);
    }
    Value::String(s.to_string())
}

/// Drops a trailing `# comment` that is outside quotes.
fn strip_comment(line: &str) -> &str {
    let (mut sq, mut dq) = (false, false);
    let bytes = line.as_bytes();
    for (i, &c) in bytes.iter().enumerate() {
        match c {
            b'\'' if !dq => sq = !sq,
            b'"' if !sq => dq = !dq,
            b'#' if !sq && !dq && (i == 0 || bytes[i - 1] == b' ') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// `key: rest` split at the first `: ` (or a trailing `:`) outside quotes.
fn split_key(s: &str) -> Option<(String, &str)> {
    let (mut sq, mut dq) = (false, false);
    let b = s.as_bytes();
    for i in 0..b.len() {
        match b[i] {
            b'\'' if !dq => sq = !sq,
            b'"' if !sq => dq = !dq,
            b':' if !sq && !dq && (i + 1 == b.len() || b[i + 1] == b' ') => {
                let key = match yaml_scalar(&s[..i]) {
                    Value::String(k) => k,
                    other => other.to_string(),
                };
                return Some((key, &s[i + 1..]));
            }
            _ => {}
        }
    }
    None
}

struct Yaml<'a> {
    /// (indent, content) of every non-blank line.
    lines: Vec<(usize, &'a str)>,
    pos: usize,
}

impl Yaml<'_> {
    fn parse_block(&mut self, indent: usize) -> std::result::Result<Value, String> {
        let Some(&(ind, first)) = self.lines.get(self.pos) else {
            return Ok(Value::Null);
        };
        if ind < indent {
            return Ok(Value::Null);
        }
        if first.starts_with("- ") || first == "-" {
            let mut items = Vec::new();
            while let Some(&(i, l)) = self.lines.get(self.pos) {
                if i != ind || !(l.starts_with("- ") || l == "-") {
                    break;
                }
                let rest = l[1..].trim_start();
                if rest.is_empty() {
                    self.pos += 1;
                    items.push(self.parse_block(ind + 1)?);
                } else if split_key(rest).is_some() && !rest.starts_with(['\'', '"', '[']) {
                    // "- key: value" starts a mapping whose keys sit two columns in.
                    let col = ind + (l.len() - rest.len());
                    self.lines[self.pos] = (col, rest);
                    items.push(self.parse_block(col)?);
                } else {
                    self.pos += 1;
                    items.push(yaml_scalar(rest));
                }
            }
            return Ok(Value::Array(items));
        }
        let mut map = Map::new();
        while let Some(&(i, l)) = self.lines.get(self.pos) {
            if i < ind {
                break;
            }
            if i > ind {
                return Err(format!("unexpected indentation at `{l}`"));
            }
            let (key, rest) =
                split_key(l).ok_or_else(|| format!("expected `key: value`, got `{l}`"))?;
            self.pos += 1;
            let rest = rest.trim();
            let value = if rest.is_empty() {
                match self.lines.get(self.pos) {
                    // A sequence may sit at the key's own indentation.
                    Some(&(ni, nl)) if ni > ind || (ni == ind && nl.starts_with('-')) => {
                        self.parse_block(ni)?
                    }
                    _ => Value::Null,
                }
            } else if rest.starts_with('&')
                || rest.starts_with('*')
                || rest.starts_with('|')
                || rest.starts_with('>')
            {
                return Err(format!(
                    "YAML feature not supported (anchors, block scalars) at `{l}`"
                ));
            } else {
                yaml_scalar(rest)
            };
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

/// Parses the YAML subset NeMo configs use into JSON values.
pub fn parse_yaml(text: &str) -> std::result::Result<Value, String> {
    let lines = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("---"))
        .map(|l| strip_comment(l).trim_end())
        .filter(|l| !l.trim().is_empty())
        .map(|l| (l.len() - l.trim_start().len(), l.trim_start()))
        .collect();
    Yaml { lines, pos: 0 }.parse_block(0)
}

// ---- SentencePiece ----

fn varint(b: &[u8], p: &mut usize) -> std::result::Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let c = *b.get(*p).ok_or("truncated protobuf varint")?;
        *p += 1;
        v |= ((c & 0x7f) as u64) << shift;
        if c & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("protobuf varint too long".into())
}

/// One protobuf field: its number, its bytes (length-delimited / fixed) and its varint value.
type ProtoField<'a> = (u64, &'a [u8], u64);

/// Fields of one protobuf message.
pub(crate) fn proto_fields(b: &[u8]) -> std::result::Result<Vec<ProtoField<'_>>, String> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < b.len() {
        let key = varint(b, &mut p)?;
        let (field, wire) = (key >> 3, key & 7);
        let (span, val): (&[u8], u64) = match wire {
            0 => (&[], varint(b, &mut p)?),
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                let s = b.get(p..p + n).ok_or("truncated protobuf field")?;
                p += n;
                (s, 0)
            }
            2 => {
                let n = varint(b, &mut p)? as usize;
                let s = b
                    .get(p..p.checked_add(n).ok_or("protobuf length overflows")?)
                    .ok_or("truncated protobuf bytes")?;
                p += n;
                (s, 0)
            }
            w => return Err(format!("protobuf wire type {w} is not supported")),
        };
        out.push((field, span, val));
    }
    Ok(out)
}

/// A SentencePiece `ModelProto` (`tokenizer.model`) as a `tokenizer.json` for the tokenizers
/// crate: its pieces as a Unigram vocabulary with the `▁` word-boundary decoder; unknown and
/// control pieces (`<unk>`, `<s>`, `</s>`) become special tokens so decoding skips them.
pub fn sentencepiece_to_tokenizer_json(model: &[u8]) -> std::result::Result<String, String> {
    let mut pieces = Vec::new();
    for (field, span, _) in proto_fields(model)? {
        if field != 1 {
            continue; // trainer / normalizer specs
        }
        let (mut piece, mut score, mut kind) = (String::new(), 0f32, 1u64);
        for (f, s, v) in proto_fields(span)? {
            match f {
                1 => piece = String::from_utf8_lossy(s).to_string(),
                2 if s.len() == 4 => score = f32::from_le_bytes([s[0], s[1], s[2], s[3]]),
                3 => kind = v,
                _ => {}
            }
        }
        pieces.push((piece, score, kind));
    }
    unigram_json(&pieces)
}

/// The same for bare pieces in id order (whisper.cpp's Parakeet files keep only those): scores
/// 0, `<unk>` the unknown piece, `<s>`, `</s>` and `<pad>` control pieces, as SentencePiece
/// marks them.
pub fn pieces_to_tokenizer_json(pieces: &[String]) -> std::result::Result<String, String> {
    let pieces: Vec<(String, f32, u64)> = pieces
        .iter()
        .map(|p| {
            let kind = match p.as_str() {
                "<unk>" => 2,
                "<s>" | "</s>" | "<pad>" => 3,
                _ => 1,
            };
            (p.clone(), 0.0, kind)
        })
        .collect();
    unigram_json(&pieces)
}

/// (piece, score, SentencePiece type: 1 normal, 2 unknown, 3 control) in id order → a
/// tokenizer.json with a Unigram model and the Metaspace pre-tokenizer and decoder.
fn unigram_json(pieces: &[(String, f32, u64)]) -> std::result::Result<String, String> {
    let mut vocab = Vec::new();
    let mut added = Vec::new();
    let mut unk = 0usize;
    for (id, (piece, score, kind)) in pieces.iter().enumerate() {
        if *kind == 2 {
            unk = id;
        }
        if *kind == 2 || *kind == 3 {
            added.push(
                serde_json::json!({"id": id, "content": piece, "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": false, "special": true}),
            );
        }
        vocab.push(serde_json::json!([piece, score]));
    }
    if vocab.is_empty() {
        return Err("no pieces in the SentencePiece model".into());
    }
    let meta = serde_json::json!({"type": "Metaspace", "replacement": "\u{2581}",
        "prepend_scheme": "always", "split": true});
    Ok(serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": meta, "post_processor": null, "decoder": meta,
        "model": {"type": "Unigram", "unk_id": unk, "vocab": vocab, "byte_fallback": false}
    })
    .to_string())
}

// ---- config and names ----

fn get<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

fn num(v: &Value, path: &str, default: usize) -> usize {
    get(v, path)
        .and_then(Value::as_u64)
        .map_or(default, |x| x as usize)
}

/// NeMo name → transformers name (None for buffers the model does not use).
pub fn canonical_name(nemo: &str) -> Option<String> {
    if nemo.starts_with("preprocessor.") || nemo.starts_with("encoder.pos_enc.") {
        return None;
    }
    let mut k = nemo.to_string();
    let rules: [(&str, &str); 11] = [
        ("encoder.pre_encode.conv.", "encoder.subsampling.layers."),
        ("encoder.pre_encode.out.", "encoder.subsampling.linear."),
        (".conv.batch_norm.", ".conv.norm."),
        (".self_attn.linear_q.", ".self_attn.q_proj."),
        (".self_attn.linear_k.", ".self_attn.k_proj."),
        (".self_attn.linear_v.", ".self_attn.v_proj."),
        (".self_attn.linear_out.", ".self_attn.o_proj."),
        (".self_attn.linear_pos.", ".self_attn.relative_k_proj."),
        (".self_attn.pos_bias_u", ".self_attn.bias_u"),
        (".self_attn.pos_bias_v", ".self_attn.bias_v"),
        ("decoder.decoder_layers.0.", "ctc_head."),
    ];
    for (a, b) in rules {
        k = k.replace(a, b);
    }
    for (a, b) in [
        ("decoder.prediction.embed.", "decoder.embedding."),
        ("decoder.prediction.dec_rnn.lstm.", "decoder.lstm."),
        ("joint.enc.", "encoder_projector."),
        ("joint.pred.", "decoder.decoder_projector."),
        ("joint.joint_net.2.", "joint.head."),
    ] {
        if let Some(rest) = k.strip_prefix(a) {
            k = format!("{b}{rest}");
        }
    }
    Some(k)
}

/// Builds the config from `model_config.yaml` and the (canonically named) tensors, whose shapes
/// settle what the YAML leaves implicit (vocabulary sizes).
/// The encoder block of `model_config.yaml`.
fn encoder_config(cfg: &Value, path: &Path) -> Result<EncoderConfig> {
    let bad = |d: String| ModelError::bad_model(path, d);
    let e = get(cfg, "encoder").ok_or_else(|| bad("model_config.yaml has no `encoder`".into()))?;
    let sub = get(e, "subsampling")
        .and_then(Value::as_str)
        .unwrap_or("dw_striding");
    if sub != "dw_striding" {
        return Err(bad(format!(
            "encoder.subsampling `{sub}` is not supported (dw_striding only)"
        )));
    }
    let att = get(e, "self_attention_model")
        .and_then(Value::as_str)
        .unwrap_or("rel_pos");
    if att != "rel_pos" {
        return Err(bad(format!(
            "encoder.self_attention_model `{att}` is not supported (rel_pos only)"
        )));
    }
    let d = num(e, "d_model", 0);
    let bias = get(e, "use_bias").and_then(Value::as_bool).unwrap_or(true);
    let ff = get(e, "ff_expansion_factor")
        .and_then(Value::as_f64)
        .unwrap_or(4.0);
    Ok(EncoderConfig {
        hidden_size: d,
        num_layers: num(e, "n_layers", 0),
        num_heads: num(e, "n_heads", 8),
        intermediate_size: (d as f64 * ff).round() as usize,
        activation: Activation::Silu,
        attention_bias: bias,
        convolution_bias: bias,
        conv_kernel_size: num(e, "conv_kernel_size", 9),
        subsampling_factor: num(e, "subsampling_factor", 8),
        subsampling_channels: num(e, "subsampling_conv_channels", 256),
        subsampling_kernel: num(e, "subsampling_conv_kernel_size", 3),
        subsampling_stride: 2,
        num_mel_bins: num(e, "feat_in", num(cfg, "preprocessor.features", 80)),
        scale_input: get(e, "xscaling").and_then(Value::as_bool).unwrap_or(true),
    })
}

fn config_from(
    cfg: &Value,
    tensors: &BTreeMap<String, HostTensor>,
    path: &Path,
) -> Result<ParakeetConfig> {
    let bad = |d: String| ModelError::bad_model(path, d);
    let encoder = encoder_config(cfg, path)?;
    let rows = |name: &str| tensors.get(name).and_then(|t| t.shape.first().copied());
    let (vocab_size, head) = if let Some(v) = rows("ctc_head.weight") {
        (
            v,
            HeadConfig::Ctc {
                blank: v.saturating_sub(1) as u32,
            },
        )
    } else {
        let v = rows("decoder.embedding.weight").ok_or_else(|| {
            bad("neither a CTC decoder nor a prediction network in the weights".into())
        })?;
        let durations: Vec<usize> = get(cfg, "model_defaults.tdt_durations")
            .or_else(|| get(cfg, "decoding.durations"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_u64)
                    .map(|x| x as usize)
                    .collect()
            })
            .unwrap_or_default();
        let act = match get(cfg, "joint.jointnet.activation").and_then(Value::as_str) {
            None | Some("relu") => Activation::Relu,
            Some("tanh") => Activation::Tanh,
            Some("sigmoid") => Activation::Sigmoid,
            Some(other) => return Err(bad(format!("joint activation `{other}` is not supported"))),
        };
        let blank = v.saturating_sub(1) as u32;
        (
            v,
            HeadConfig::Transducer(TransducerConfig {
                blank,
                start_token: blank,
                decoder_hidden_size: num(cfg, "decoder.prednet.pred_hidden", 640),
                num_decoder_layers: num(cfg, "decoder.prednet.pred_rnn_layers", 2),
                joint_activation: act,
                max_symbols_per_step: num(cfg, "decoding.greedy.max_symbols", 10).max(1),
                durations,
            }),
        )
    };
    let c = ParakeetConfig {
        encoder,
        vocab_size,
        head,
    };
    c.validate().map_err(bad)?;
    Ok(c)
}

/// The archive's bytes (gzip undone).
fn read_archive(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).map_err(|e| ModelError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| ModelError::bad_model(path, format!("gzip: {e}")))?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

/// `model_config.yaml` of an archive, parsed, and its text.
fn archive_config(files: &BTreeMap<String, &[u8]>, path: &Path) -> Result<(Value, String)> {
    let yaml = files
        .get("model_config.yaml")
        .ok_or_else(|| ModelError::bad_model(path, "no model_config.yaml in the archive"))?;
    let text = String::from_utf8_lossy(yaml).to_string();
    let cfg = parse_yaml(&text)
        .map_err(|e| ModelError::bad_model(path, format!("model_config.yaml: {e}")))?;
    Ok((cfg, text))
}

fn archive_state_dict(
    files: &BTreeMap<String, &[u8]>,
    path: &Path,
) -> Result<Vec<(String, HostTensor)>> {
    let ckpt = files
        .get("model_weights.ckpt")
        .ok_or_else(|| ModelError::bad_model(path, "no model_weights.ckpt in the archive"))?;
    Ok(read_state_dict(ckpt)
        .map_err(|e| ModelError::bad_model(path, format!("model_weights.ckpt: {e}")))?
        .into_iter()
        .collect())
}

/// A `.nemo` of either kind.
pub enum NemoModel {
    Parakeet(ParakeetCheckpoint),
    Canary(CanaryCheckpoint),
}

/// Loads a `.nemo` archive of a Parakeet (CTC / RNNT / TDT) or Canary (AED, a
/// `transf_decoder` in its config) model.
pub fn load_nemo_any(path: &Path) -> Result<NemoModel> {
    let bytes = read_archive(path)?;
    let files = tar_files(&bytes).map_err(|e| ModelError::bad_model(path, e))?;
    let (cfg, text) = archive_config(&files, path)?;
    if get(&cfg, "transf_decoder").is_some() {
        Ok(NemoModel::Canary(canary_from_archive(
            &files, &cfg, &text, path,
        )?))
    } else {
        Ok(NemoModel::Parakeet(parakeet_from_archive(
            &files, &cfg, path,
        )?))
    }
}

/// Loads a `.nemo` archive (tar or tar.gz) of a Canary model.
pub fn load_canary_nemo(path: &Path) -> Result<CanaryCheckpoint> {
    match load_nemo_any(path)? {
        NemoModel::Canary(c) => Ok(c),
        NemoModel::Parakeet(_) => Err(ModelError::bad_model(
            path,
            "a Parakeet (transducer / CTC) archive, not a Canary one (no transf_decoder)",
        )),
    }
}

/// Loads a `.nemo` archive (tar or tar.gz) of a Parakeet CTC / RNNT / TDT model.
pub fn load_nemo(path: &Path) -> Result<ParakeetCheckpoint> {
    match load_nemo_any(path)? {
        NemoModel::Parakeet(c) => Ok(c),
        NemoModel::Canary(_) => Err(ModelError::bad_model(
            path,
            "a Canary (AED) archive: load it with fastconformer::Canary",
        )),
    }
}

fn parakeet_from_archive(
    files: &BTreeMap<String, &[u8]>,
    cfg: &Value,
    path: &Path,
) -> Result<ParakeetCheckpoint> {
    let cfg = cfg.clone();
    let nemo_tensors = archive_state_dict(files, path)?;
    let mut tensors = BTreeMap::new();
    for (k, v) in nemo_tensors {
        if let Some(name) = canonical_name(&k) {
            tensors.insert(name, v);
        }
    }
    let config = config_from(&cfg, &tensors, path)?;
    validate(&config, &tensors, path)?;
    // `tokenizer.model_path: nemo:<hash>_tokenizer.model` names the archive member.
    let tok_name = get(&cfg, "tokenizer.model_path")
        .and_then(Value::as_str)
        .map(|s| {
            s.trim_start_matches("nemo:")
                .rsplit('/')
                .next()
                .unwrap_or(s)
                .to_string()
        });
    let tok = tok_name.as_ref().and_then(|n| files.get(n)).or_else(|| {
        files
            .iter()
            .find(|(n, _)| n.ends_with("tokenizer.model"))
            .map(|(_, v)| v)
    });
    let tokenizer_json = tok
        .map(|b| sentencepiece_to_tokenizer_json(b))
        .transpose()
        .map_err(|e| ModelError::bad_model(path, format!("tokenizer.model: {e}")))?;
    Ok(ParakeetCheckpoint {
        config,
        tensors,
        path: path.to_path_buf(),
        tokenizer_file: None,
        tokenizer_json,
        source: "nemo",
    })
}

// ---- Canary ----

/// NeMo Canary name → canonical (transformers) name; `None` for buffers recomputed at load.
pub fn canary_canonical_name(nemo: &str) -> Option<String> {
    if nemo.starts_with("encoder.") || nemo.starts_with("preprocessor.") {
        return canonical_name(nemo);
    }
    if nemo.ends_with("position_embedding.pos_enc") {
        return None;
    }
    if let Some(rest) = nemo.strip_prefix("log_softmax.mlp.layer0.") {
        return Some(format!("proj_out.{rest}"));
    }
    if nemo.starts_with("encoder_decoder_proj.") {
        return Some(nemo.to_string());
    }
    let mut k = nemo.to_string();
    for (a, b) in [
        (
            "transf_decoder._embedding.token_embedding.",
            "decoder.embed_tokens.",
        ),
        (
            "transf_decoder._embedding.layer_norm.",
            "decoder.embedding_layernorm.",
        ),
        ("transf_decoder._decoder.final_layer_norm.", "decoder.norm."),
        ("transf_decoder._decoder.layers.", "decoder.layers."),
    ] {
        if let Some(rest) = k.strip_prefix(a) {
            k = format!("{b}{rest}");
        }
    }
    for (a, b) in [
        (".layer_norm_1.", ".input_layernorm."),
        (".layer_norm_2.", ".post_attention_layernorm."),
        (".layer_norm_3.", ".final_layernorm."),
        (".first_sub_layer.", ".self_attn."),
        (".second_sub_layer.", ".encoder_attn."),
        (".third_sub_layer.dense_in.", ".mlp.fc1."),
        (".third_sub_layer.dense_out.", ".mlp.fc2."),
        (".query_net.", ".q_proj."),
        (".key_net.", ".k_proj."),
        (".value_net.", ".v_proj."),
        (".out_projection.", ".o_proj."),
    ] {
        k = k.replace(a, b);
    }
    Some(k)
}

/// Keys of the mapping at `path` in the order the YAML text lists them (the JSON map sorts
/// them; NeMo's aggregate tokenizer numbers ids in the listed order).
fn yaml_keys_in_order(text: &str, path: &[&str]) -> Vec<String> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = strip_comment(line).trim_end();
        let body = line.trim_start();
        if body.is_empty() || body.starts_with('-') {
            continue;
        }
        let indent = line.len() - body.len();
        let Some((key, _)) = split_key(body) else {
            continue;
        };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        if stack.len() == path.len() && stack.iter().zip(path).all(|((_, k), p)| k == p) {
            out.push(key.clone());
        }
        stack.push((indent, key));
    }
    out
}

/// The archive member a `nemo:<name>` path names.
fn member<'a>(files: &BTreeMap<String, &'a [u8]>, model_path: &str) -> Option<&'a [u8]> {
    let base = model_path
        .trim_start_matches("nemo:")
        .rsplit('/')
        .next()
        .unwrap_or(model_path);
    files.get(base).copied()
}

fn canary_tokenizer(
    files: &BTreeMap<String, &[u8]>,
    cfg: &Value,
    text: &str,
    path: &Path,
) -> Result<Option<CanaryTokenizer>> {
    let Some(t) = get(cfg, "tokenizer") else {
        return Ok(None);
    };
    let missing = |what: String| {
        ModelError::bad_model(
            path,
            format!("tokenizer {what}: its SentencePiece model is not in the archive"),
        )
    };
    if t.get("type").and_then(Value::as_str) == Some("agg") {
        let langs = get(t, "langs").ok_or_else(|| {
            ModelError::bad_model(path, "aggregate tokenizer without `tokenizer.langs`")
        })?;
        let mut models = Vec::new();
        for lang in yaml_keys_in_order(text, &["tokenizer", "langs"]) {
            let mp = get(langs, &lang)
                .and_then(|l| l.get("model_path"))
                .and_then(Value::as_str)
                .ok_or_else(|| missing(format!("`{lang}` (no model_path)")))?;
            let bytes = member(files, mp).ok_or_else(|| missing(format!("`{lang}` ({mp})")))?;
            models.push((lang, bytes));
        }
        if models.is_empty() {
            return Err(ModelError::bad_model(
                path,
                "aggregate tokenizer with no languages",
            ));
        }
        let refs: Vec<(&str, &[u8])> = models.iter().map(|(l, b)| (l.as_str(), *b)).collect();
        return Ok(Some(CanaryTokenizer::from_sentencepiece(path, &refs)?));
    }
    let Some(mp) = t.get("model_path").and_then(Value::as_str) else {
        return Ok(None);
    };
    let bytes = member(files, mp).ok_or_else(|| missing(format!("({mp})")))?;
    Ok(Some(CanaryTokenizer::from_sentencepiece(
        path,
        &[("tokenizer", bytes)],
    )?))
}

fn canary_from_archive(
    files: &BTreeMap<String, &[u8]>,
    cfg: &Value,
    text: &str,
    path: &Path,
) -> Result<CanaryCheckpoint> {
    let bad = |d: String| ModelError::bad_model(path, d);
    if num(cfg, "transf_encoder.num_layers", 0) > 0 {
        return Err(bad(
            "a Transformer encoder between the FastConformer and the decoder (transf_encoder) is not supported".into(),
        ));
    }
    let dc = get(cfg, "transf_decoder.config_dict")
        .ok_or_else(|| bad("no `transf_decoder.config_dict` in model_config.yaml".into()))?;
    if dc.get("pre_ln").and_then(Value::as_bool) == Some(false) {
        return Err(bad("a post-LN transf_decoder is not supported".into()));
    }
    if num(cfg, "head.num_layers", 1) != 1 {
        return Err(bad(format!(
            "an output head of {} layers (one linear layer expected)",
            num(cfg, "head.num_layers", 1)
        )));
    }
    let mut tensors = BTreeMap::new();
    for (k, v) in archive_state_dict(files, path)? {
        if let Some(name) = canary_canonical_name(&k) {
            if name.starts_with("transf_") {
                return Err(ModelError::bad_tensor(
                    path,
                    &k,
                    "a tensor of a module this Canary reader does not know",
                ));
            }
            tensors.insert(name, v);
        }
    }
    let encoder = encoder_config(cfg, path)?;
    let hidden = num(dc, "hidden_size", 0);
    let heads = num(dc, "num_attention_heads", 0);
    let vocab = tensors
        .get("decoder.embed_tokens.weight")
        .and_then(|t| t.shape.first().copied())
        .ok_or_else(|| bad("no decoder token embedding in the weights".into()))?;
    let act = match dc.get("hidden_act").and_then(Value::as_str) {
        None | Some("relu") => Activation::Relu,
        Some("gelu") => Activation::Gelu,
        Some(other) => return Err(bad(format!("transf_decoder activation `{other}`"))),
    };
    if hidden == 0 || heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(bad(format!(
            "transf_decoder hidden_size {hidden} / num_attention_heads {heads}"
        )));
    }
    let tokenizer = canary_tokenizer(files, cfg, text, path)?;
    let (eos, start) = match &tokenizer {
        Some(t) => (
            t.eos()?,
            t.token_id("<|startofcontext|>")
                .or_else(|| t.token_id("<|startoftranscript|>"))
                .unwrap_or(7),
        ),
        None => (3, 7),
    };
    let config = CanaryConfig {
        encoder,
        vocab_size: vocab,
        hidden_size: hidden,
        num_layers: num(dc, "num_layers", 0),
        num_heads: heads,
        head_dim: hidden / heads,
        intermediate_size: num(dc, "inner_size", 4 * hidden),
        activation: act,
        max_positions: num(dc, "max_sequence_length", 512),
        eos,
        decoder_start: start,
    };
    // The encoder checks are the Parakeet ones.
    ParakeetConfig {
        encoder: config.encoder.clone(),
        vocab_size: vocab,
        head: HeadConfig::Ctc { blank: 0 },
    }
    .validate()
    .map_err(bad)?;
    let prompt_format = match get(cfg, "prompt_format").and_then(Value::as_str) {
        None => None,
        Some("canary2") => Some(PromptFormat::Canary2),
        Some("canary") => Some(PromptFormat::Canary),
        Some(other) => return Err(bad(format!("prompt_format `{other}` is not a Canary one"))),
    };
    for (name, shape) in config.expected_shapes() {
        if name == "proj_out.weight" && !tensors.contains_key(&name) {
            continue; // tied to the embedding
        }
        match tensors.get(&name) {
            None => return Err(ModelError::bad_tensor(path, &name, "missing")),
            Some(t) if t.shape != shape => {
                return Err(ModelError::bad_tensor(
                    path,
                    &name,
                    format!("shape {:?}, expected {shape:?}", t.shape),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(CanaryCheckpoint {
        config,
        tensors,
        path: path.to_path_buf(),
        tokenizer,
        prompt_format,
        source: "nemo",
    })
}
