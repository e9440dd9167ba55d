//! Canary (AED): the FastConformer encoder (plus NeMo's encoder→decoder projection when the
//! widths differ, as in canary-180m-flash) with a pre-LN Transformer decoder (causal
//! self-attention, cross-attention, ReLU MLP, fixed sinusoid positions, output tied to the token
//! embedding), decoded greedily or by beam search after a prompt (transformers'
//! `CanaryForConditionalGeneration`, NeMo's `EncDecMultiTaskModel`).

use super::canary_prompt::{CanaryRequest, CanaryTokenizer, PromptFormat};
use super::config::{
    activation, encoder_from_json, get_usize, EncoderConfig, HeadConfig, ParakeetConfig,
};
use super::encoder::{Encoder, Linear, Tensors};
use super::model::{ChainSlot, ChainedEncoder};
use crate::transcript::{Segment, Transcript};
use crate::{ModelError, Result};
use serde_json::Value;
use stapes_audio::features::nemo::{log_mel, NemoConfig};
use stapes_core::{
    Activation, AttnParams, Backend, DeviceTensor, HostTensor, Lane, LinearFusion, NormRef,
    StepParams,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

const LN_EPS: f32 = 1e-5;

/// Free step buffers kept per model and kind (caches, cross K/V); more are dropped.
const MAX_FREE: usize = 4;

/// `STAPES_CANARY_FUSED_STEPS=1` at load: the step chain runs each layer norm, bias, ReLU and
/// residual inside its projection ([`Backend::norm_linear`]) and the cross-attention as
/// `attention_decode`; off by default (not yet measured on a GPU).
fn fused_steps_from_env() -> bool {
    std::env::var("STAPES_CANARY_FUSED_STEPS").is_ok_and(|v| v.trim() == "1")
}

/// Step chains a model records at most. Each is bound to one (cache, cross K/V) pair of
/// buffers, and a cross copy has the encoded window's length, so windows of many lengths make
/// many chains; past this many, decodes needing a new one run host-parameter steps.
const MAX_STEP_CHAINS: usize = 32;

/// Positions of a step-chain cache. The CUDA home's step attention reads at most 511 cached
/// keys; a decode that goes past this many positions moves into a full-size cache and finishes
/// with host-parameter steps (see `Canary::grow_cache`).
const STEP_CHAIN_POSITIONS: usize = 448;

/// `STAPES_CANARY_DEVICE_STEPS` at load: `0` = host-parameter steps, `1` = the step chain
/// everywhere, unset = the step chain where the home captures chains.
fn device_steps_from_env() -> u8 {
    match std::env::var("STAPES_CANARY_DEVICE_STEPS").map(|v| v.trim().to_string()) {
        Ok(v) if v == "0" => 2,
        Ok(v) if v == "1" => 1,
        _ => 0,
    }
}

/// Longest stretch of audio decoded in one pass (NeMo's chunked AED inference uses 40 s
/// chunks; Canary is trained on utterances up to that). Longer inputs are cut into windows of
/// at most this length, each its own segment (see [`windows`]).
pub const WINDOW_SECONDS: f64 = 40.0;
/// How far (seconds) a window boundary may move from its equal-split place to a quieter moment.
pub const CUT_SEARCH_SECONDS: f64 = 5.0;

/// Window bounds (samples) for a 16 kHz input: as many windows as [`WINDOW_SECONDS`] needs, of
/// near-equal length (no short tail), each boundary moved to the quietest 100 ms within
/// [`CUT_SEARCH_SECONDS`] of its equal-split place, so that a cut falls in a pause rather than
/// through a word; no window is longer than the limit.
pub fn windows(samples: &[f32]) -> Vec<std::ops::Range<usize>> {
    windows_of(samples, WINDOW_SECONDS)
}

/// [`windows`] of at most `window_seconds` each (other one-pass families cut long audio the same
/// way).
pub fn windows_of(samples: &[f32], window_seconds: f64) -> Vec<std::ops::Range<usize>> {
    const FRAME: usize = 1600; // 100 ms
    const STEP: usize = 160; // 10 ms
    let n = samples.len();
    if n == 0 {
        return Vec::new();
    }
    let max_len = ((window_seconds * 16_000.0) as usize).max(1);
    let search = (CUT_SEARCH_SECONDS * 16_000.0) as usize;
    let n_windows = n.div_ceil(max_len).max(1);
    // energy of any span from prefix sums of squares
    let mut sq = Vec::with_capacity(n + 1);
    sq.push(0.0f64);
    for &v in samples {
        let last = sq.last().copied().unwrap_or(0.0);
        sq.push(last + f64::from(v) * f64::from(v));
    }
    let energy = |c: usize| {
        let (a, b) = (c.saturating_sub(FRAME / 2), (c + FRAME / 2).min(n));
        sq[b] - sq[a]
    };
    let mut out = Vec::with_capacity(n_windows);
    let mut pos = 0;
    for w in 0..n_windows {
        let left = n_windows - w;
        if left == 1 {
            out.push(pos..n);
            break;
        }
        let nominal = pos + (n - pos).div_ceil(left);
        // the cut leaves a window of at most max_len here and lets the rest fit in left - 1
        let lo = nominal
            .saturating_sub(search)
            .max(pos + 1)
            .max(n.saturating_sub((left - 1) * max_len));
        let hi = (nominal + search).min(pos + max_len).min(n - 1);
        let mut cut = nominal.clamp(lo.min(hi), hi);
        let mut best = f64::INFINITY;
        let mut c = lo;
        while c <= hi {
            let e = energy(c);
            // the quietest frame; among equals, the one nearest the equal split
            if e < best || (e == best && c.abs_diff(nominal) < cut.abs_diff(nominal)) {
                (best, cut) = (e, c);
            }
            c += STEP;
        }
        out.push(pos..cut);
        pos = cut;
    }
    out
}

#[derive(Clone, Debug, PartialEq)]
pub struct CanaryConfig {
    pub encoder: EncoderConfig,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub head_dim: usize,
    pub intermediate_size: usize,
    pub activation: Activation,
    pub max_positions: usize,
    pub eos: u32,
    pub decoder_start: u32,
}

/// A Canary checkpoint in host memory under the canonical (transformers) names; NeMo's
/// `encoder_decoder_proj.{weight,bias}` where the encoder and decoder widths differ.
pub struct CanaryCheckpoint {
    pub config: CanaryConfig,
    pub tensors: BTreeMap<String, HostTensor>,
    pub path: PathBuf,
    pub tokenizer: Option<CanaryTokenizer>,
    /// The `.nemo`'s `prompt_format`; `None` = from the vocabulary.
    pub prompt_format: Option<PromptFormat>,
    /// "hf" or "nemo".
    pub source: &'static str,
}

impl CanaryConfig {
    /// Parses an HF `config.json` of `model_type: canary`.
    pub fn from_hf_json(v: &Value, path: &Path) -> Result<Self> {
        let bad = |d: String| ModelError::bad_model(path, d);
        if v.get("model_type").and_then(Value::as_str) != Some("canary") {
            return Err(bad(
                "not a Canary config (model_type is not `canary`)".into()
            ));
        }
        let e = v
            .get("encoder_config")
            .ok_or_else(|| bad("no `encoder_config`".into()))?;
        let d = v
            .get("decoder_config")
            .ok_or_else(|| bad("no `decoder_config`".into()))?;
        let hidden = get_usize(d, "hidden_size", 1024, path)?;
        let heads = get_usize(d, "num_attention_heads", 8, path)?;
        let c = Self {
            encoder: encoder_from_json(e, path)?,
            vocab_size: get_usize(v, "vocab_size", 16384, path)?,
            hidden_size: hidden,
            num_layers: get_usize(d, "num_hidden_layers", 8, path)?,
            num_heads: heads,
            head_dim: get_usize(d, "head_dim", 128, path)?,
            intermediate_size: get_usize(d, "intermediate_size", 4096, path)?,
            activation: activation(d, "relu", path)?,
            max_positions: get_usize(d, "max_position_embeddings", 1024, path)?,
            eos: get_usize(v, "eos_token_id", 3, path)? as u32,
            decoder_start: get_usize(v, "decoder_start_token_id", 7, path)? as u32,
        };
        // The encoder checks are the Parakeet ones.
        ParakeetConfig {
            encoder: c.encoder.clone(),
            vocab_size: c.vocab_size,
            head: HeadConfig::Ctc { blank: 0 },
        }
        .validate()
        .map_err(bad)?;
        if c.encoder.hidden_size != hidden {
            return Err(bad(format!(
                "encoder width {} ≠ decoder width {hidden} (no encoder-decoder projection)",
                c.encoder.hidden_size
            )));
        }
        if heads == 0 || c.head_dim == 0 || hidden % 2 != 0 || c.max_positions == 0 {
            return Err(bad(
                "decoder heads, head_dim, an even width and positions must be > 0".into(),
            ));
        }
        Ok(c)
    }
}

impl CanaryConfig {
    /// Names [`Self::published`] knows.
    pub const PUBLISHED: [&'static str; 3] =
        ["canary-1b-v2", "canary-1b-flash", "canary-180m-flash"];

    /// Shapes for `--synthetic` runs.
    /// - `canary-1b-v2`: transformers' `CanaryConfig` default (32 × d1024 encoder on 128 mels
    ///   without input scaling, 8 × d1024 decoder, 8 heads of 128, vocabulary 16384).
    /// - `canary-1b-flash`: 32 × d1024 encoder, 4 × d1024 decoder (model card: 883 M).
    /// - `canary-180m-flash`: 17 × d512 encoder projected to a 4 × d1024 decoder (model card:
    ///   182 M). The flash vocabulary size (aggregate tokenizer) is taken as 5248 here, an
    ///   assumption: it only sizes the output projection.
    pub fn published(name: &str) -> Option<Self> {
        let mut encoder = ParakeetConfig::published("parakeet-tdt-0.6b-v2")?.encoder;
        encoder.num_mel_bins = 128;
        encoder.scale_input = false;
        let (enc_layers, enc_d, dec_layers, vocab) = match name {
            "canary-1b-v2" => (32, 1024, 8, 16384),
            "canary-1b-flash" => (32, 1024, 4, 5248),
            "canary-180m-flash" => (17, 512, 4, 5248),
            _ => return None,
        };
        encoder.num_layers = enc_layers;
        encoder.hidden_size = enc_d;
        encoder.intermediate_size = 4 * enc_d;
        encoder.num_heads = 8;
        Some(Self {
            encoder,
            vocab_size: vocab,
            hidden_size: 1024,
            num_layers: dec_layers,
            num_heads: 8,
            head_dim: 128,
            intermediate_size: 4096,
            activation: Activation::Relu,
            max_positions: 1024,
            eos: 3,
            decoder_start: 7,
        })
    }

    /// Every tensor of the model (decoder names; the encoder's are Parakeet's) with its shape.
    pub fn expected_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let enc = ParakeetConfig {
            encoder: self.encoder.clone(),
            vocab_size: self.vocab_size,
            head: HeadConfig::Ctc { blank: 0 },
        };
        let mut v: Vec<(String, Vec<usize>)> = super::weights::expected_shapes(&enc)
            .into_iter()
            .filter(|(n, _)| !n.starts_with("ctc_head"))
            .collect();
        let (d, hd, ff) = (
            self.hidden_size,
            self.num_heads * self.head_dim,
            self.intermediate_size,
        );
        if self.encoder.hidden_size != d {
            v.push((
                "encoder_decoder_proj.weight".into(),
                vec![d, self.encoder.hidden_size],
            ));
            v.push(("encoder_decoder_proj.bias".into(), vec![d]));
        }
        v.push((
            "decoder.embed_tokens.weight".into(),
            vec![self.vocab_size, d],
        ));
        v.push(("proj_out.weight".into(), vec![self.vocab_size, d]));
        v.push(("proj_out.bias".into(), vec![self.vocab_size]));
        for n in ["decoder.embedding_layernorm", "decoder.norm"] {
            v.push((format!("{n}.weight"), vec![d]));
            v.push((format!("{n}.bias"), vec![d]));
        }
        for l in 0..self.num_layers {
            let p = format!("decoder.layers.{l}");
            for a in ["self_attn", "encoder_attn"] {
                for (w, shape) in [
                    ("q", [hd, d]),
                    ("k", [hd, d]),
                    ("v", [hd, d]),
                    ("o", [d, hd]),
                ] {
                    v.push((format!("{p}.{a}.{w}_proj.weight"), shape.to_vec()));
                    v.push((format!("{p}.{a}.{w}_proj.bias"), vec![shape[0]]));
                }
            }
            for n in [
                "input_layernorm",
                "post_attention_layernorm",
                "final_layernorm",
            ] {
                v.push((format!("{p}.{n}.weight"), vec![d]));
                v.push((format!("{p}.{n}.bias"), vec![d]));
            }
            v.push((format!("{p}.mlp.fc1.weight"), vec![ff, d]));
            v.push((format!("{p}.mlp.fc1.bias"), vec![ff]));
            v.push((format!("{p}.mlp.fc2.weight"), vec![d, ff]));
            v.push((format!("{p}.mlp.fc2.bias"), vec![d]));
        }
        v
    }
}

struct DecoderLayer<B: Backend> {
    ln_self: (B::Tensor, B::Tensor),
    self_attn: [Linear<B>; 4],
    ln_cross: (B::Tensor, B::Tensor),
    cross_attn: [Linear<B>; 4],
    ln_mlp: (B::Tensor, B::Tensor),
    fc1: Linear<B>,
    fc2: Linear<B>,
}

/// Self-attention keys and values, preallocated for the whole decode so a step writes its rows in
/// place (`Backend::write_rows`) instead of growing a tensor: per layer `(rows, cap, H·Dh)`, of
/// which positions `0..len` are filled.
struct KvCache<B: Backend> {
    k: Vec<B::Tensor>,
    v: Vec<B::Tensor>,
    rows: usize,
    cap: usize,
    len: usize,
    /// Names this storage in step-chain keys.
    id: u64,
    /// `(1, 1, 1 + rows)` [`StepParams`] of the step chain, refreshed in place each step.
    step: Option<B::Tensor>,
}

/// A copy of one window's cross K/V, per layer `(1, T', H·Dh)`, at addresses a captured step
/// chain keeps reading from window to window.
struct CrossSlot<B: Backend> {
    id: u64,
    kv: Vec<(B::Tensor, B::Tensor)>,
}

/// Step buffers that outlive a decode, so a chain captured once finds its inputs again.
struct StepPool<B: Backend> {
    caches: Vec<KvCache<B>>,
    cross: Vec<CrossSlot<B>>,
}

impl<B: Backend> KvCache<B> {
    fn new(b: &B, layers: usize, rows: usize, cap: usize, width: usize) -> Result<Self> {
        let zeros = HostTensor::zeros(vec![rows, cap, width]);
        let mut k = Vec::with_capacity(layers);
        let mut v = Vec::with_capacity(layers);
        for _ in 0..layers {
            k.push(b.upload(&zeros)?);
            v.push(b.upload(&zeros)?);
        }
        Ok(Self {
            k,
            v,
            rows,
            cap,
            len: 0,
            id: crate::next_chain_id(),
            step: None,
        })
    }

    /// Row `i` of the result continues row `idx[i]` (beam reordering; expanding the prompt's one
    /// row into the beams). Only the filled positions move.
    fn reorder(&mut self, b: &B, idx: &[usize]) -> Result<()> {
        if idx.len() == self.rows && idx.iter().enumerate().all(|(i, &j)| i == j) {
            return Ok(());
        }
        let width = self.k.first().map_or(0, |t| t.shape()[2]);
        let zeros =
            (idx.len() != self.rows).then(|| HostTensor::zeros(vec![idx.len(), self.cap, width]));
        for cache in self.k.iter_mut().chain(self.v.iter_mut()) {
            let live = if self.len > 0 {
                Some(b.gather_batch(&b.slice(cache, 1, 0, self.len)?, idx)?) // (idx, len, HDh)
            } else {
                None
            };
            if let Some(z) = &zeros {
                *cache = b.upload(z)?;
            }
            if let Some(rows) = live {
                b.write_rows(cache, &rows, 0)?;
            }
        }
        if idx.len() != self.rows {
            // new storage: a chain recorded on the old one must not be replayed on it
            self.id = crate::next_chain_id();
            self.step = None;
        }
        self.rows = idx.len();
        Ok(())
    }
}

/// A Canary model on backend `B`.
pub struct Canary<B: Backend> {
    backend: B,
    pub config: CanaryConfig,
    path: PathBuf,
    encoder: Encoder<B>,
    /// NeMo's `encoder_decoder_proj` (encoder width → decoder width), when they differ.
    enc_proj: Option<Linear<B>>,
    /// `(V, d)` for the input lookup, and the same rows as the tied output projection.
    embed: B::Tensor,
    embed_out: Linear<B>,
    ln_embed: (B::Tensor, B::Tensor),
    layers: Vec<DecoderLayer<B>>,
    ln_final: (B::Tensor, B::Tensor),
    /// NeMo's `FixedPositionalEncoding`, already divided by `sqrt(d)`: `(max_positions, d)`.
    positions: B::Tensor,
    tokenizer: Option<CanaryTokenizer>,
    prompt_format: Option<PromptFormat>,
    lane: Lane,
    /// Encoder chains by shape bucket, as Parakeet's (captured as graphs on the CUDA home).
    chains: Mutex<BTreeMap<String, ChainSlot<B>>>,
    /// Feature frames are padded (and masked) up to a multiple of this before a chain.
    pub graph_bucket: usize,
    /// Names these weights in step-chain keys.
    id: u64,
    /// Per-token steps through [`Self::step_device`]'s chain: 0 = where the home captures
    /// chains, 1 = always, 2 = never (`STAPES_CANARY_DEVICE_STEPS` at load).
    device_steps: AtomicU8,
    pool: Mutex<StepPool<B>>,
    /// Decodes running now; two at once (threads side by side) turn the step chain off for
    /// good, since a capture records every launch on the home's stream.
    live: AtomicUsize,
    concurrent: AtomicBool,
    /// Positions of a step-chain cache ([`STEP_CHAIN_POSITIONS`]; smaller in tests).
    step_positions: usize,
    /// The step chain in its fused form (`STAPES_CANARY_FUSED_STEPS`, [`Self::set_fused_steps`]).
    fused_steps: AtomicBool,
    /// Keys of the step chains recorded so far (at most [`MAX_STEP_CHAINS`]).
    step_chains: Mutex<BTreeSet<String>>,
}

/// Counts a decode as live while it runs (see `Canary::live`).
struct LiveGuard<'a>(&'a AtomicUsize);

impl Drop for LiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A layer norm's `(gamma, beta)` as [`Backend::norm_linear`] takes it.
fn norm_ref<T>(ln: &(T, T)) -> NormRef<'_, T> {
    NormRef {
        gamma: &ln.0,
        beta: Some(&ln.1),
        eps: LN_EPS,
    }
}

/// Sin half then cos half (not interleaved), timescales up to `10000^((C-2)/C)`, `/ sqrt(C)`.
fn fixed_positions(n: usize, c: usize) -> HostTensor {
    let half = c / 2;
    let max_ts = 10000f64.powf((c as f64 - 2.0) / c as f64);
    let inc = max_ts.ln() / (half.saturating_sub(1).max(1)) as f64;
    let inv: Vec<f32> = (0..half)
        .map(|i| (-(inc as f32) * i as f32).exp())
        .collect();
    let scale = 1.0 / (c as f32).sqrt();
    let mut data = Vec::with_capacity(n * c);
    for t in 0..n {
        let args: Vec<f32> = inv.iter().map(|f| t as f32 * f).collect();
        data.extend(args.iter().map(|a| a.sin() * scale));
        data.extend(args.iter().map(|a| a.cos() * scale));
    }
    HostTensor {
        shape: vec![n, c],
        data,
    }
}

/// Log-softmax of one row, in f32 with the max subtracted (as torch computes it).
fn log_softmax_row(r: &[f32]) -> Vec<f32> {
    let m = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let s: f32 = r.iter().map(|v| (v - m).exp()).sum();
    let lse = m + s.ln();
    r.iter().map(|v| v - lse).collect()
}

/// Loads an HF `CanaryForConditionalGeneration` directory or a Canary `.nemo` archive.
pub fn load_canary(path: &Path) -> Result<CanaryCheckpoint> {
    if path.is_dir() || path.file_name().is_some_and(|n| n == "config.json") {
        let dir = if path.is_dir() {
            path
        } else {
            path.parent().unwrap_or(Path::new("."))
        };
        load_canary_hf(dir)
    } else {
        super::nemo::load_canary_nemo(path)
    }
}

/// Reads an HF `CanaryForConditionalGeneration` directory (config.json, safetensors,
/// tokenizer.json when present).
pub fn load_canary_hf(dir: &Path) -> Result<CanaryCheckpoint> {
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| ModelError::Io {
        path: cfg_path.clone(),
        source: e,
    })?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| ModelError::bad_model(&cfg_path, format!("invalid JSON: {e}")))?;
    let config = CanaryConfig::from_hf_json(&v, &cfg_path)?;
    let st = stapes_formats::safetensors_dir::read_dir(dir)?;
    let mut map = BTreeMap::new();
    for (name, raw) in &st.tensors {
        if raw.dtype.is_quantized() || name.ends_with("num_batches_tracked") {
            continue;
        }
        // The encoder's names are Parakeet's under `model.`.
        let key = name.strip_prefix("model.").unwrap_or(name).to_string();
        let t = HostTensor::new(raw.shape.clone(), raw.to_f32())
            .map_err(|e| ModelError::bad_tensor(&st.path, name, e.to_string()))?;
        map.insert(key, t);
    }
    let tok = dir.join("tokenizer.json");
    let tokenizer = if tok.is_file() {
        Some(CanaryTokenizer::from_hf_file(&tok)?)
    } else {
        None
    };
    Ok(CanaryCheckpoint {
        config,
        tensors: map,
        path: st.path.clone(),
        tokenizer,
        prompt_format: None,
        source: "hf",
    })
}

impl<B: Backend> Canary<B> {
    /// Loads an HF `CanaryForConditionalGeneration` directory or a Canary `.nemo` archive.
    pub fn new(backend: B, path: &Path, lane: Lane) -> Result<Self> {
        Self::from_checkpoint(backend, load_canary(path)?, lane)
    }

    pub fn from_checkpoint(backend: B, mut ck: CanaryCheckpoint, lane: Lane) -> Result<Self> {
        backend.require_lane(lane)?;
        // Tied output projection: checkpoints may omit it.
        if !ck.tensors.contains_key("proj_out.weight") {
            if let Some(e) = ck.tensors.get("decoder.embed_tokens.weight").cloned() {
                ck.tensors.insert("proj_out.weight".into(), e);
            }
        }
        if let Some(t) = &ck.tokenizer {
            if t.vocab_size() > ck.config.vocab_size {
                return Err(ModelError::bad_model(
                    &ck.path,
                    format!(
                        "the tokenizer has {} pieces, the model {} outputs",
                        t.vocab_size(),
                        ck.config.vocab_size
                    ),
                ));
            }
        }
        let mut m = Self::from_tensors(backend, ck.config, &ck.tensors, &ck.path, lane)?;
        m.tokenizer = ck.tokenizer;
        m.prompt_format = ck.prompt_format;
        Ok(m)
    }

    pub fn from_tensors(
        backend: B,
        config: CanaryConfig,
        map: &BTreeMap<String, HostTensor>,
        path: &Path,
        lane: Lane,
    ) -> Result<Self> {
        let b = &backend;
        let t = Tensors { map, path };
        let (v, d) = (config.vocab_size, config.hidden_size);
        let check = |name: &str, shape: &[usize]| -> Result<()> {
            let got = &t.get(name)?.shape;
            if got != shape {
                return Err(ModelError::bad_tensor(
                    path,
                    name,
                    format!("shape {got:?}, expected {shape:?}"),
                ));
            }
            Ok(())
        };
        check("decoder.embed_tokens.weight", &[v, d])?;
        check("proj_out.weight", &[v, d])?;
        let ln = |p: &str| -> Result<(B::Tensor, B::Tensor)> {
            check(&format!("{p}.weight"), &[d])?;
            Ok((
                t.tensor(b, &format!("{p}.weight"))?,
                t.tensor(b, &format!("{p}.bias"))?,
            ))
        };
        let attn = |p: &str| -> Result<[Linear<B>; 4]> {
            let hd = config.num_heads * config.head_dim;
            check(&format!("{p}.q_proj.weight"), &[hd, d])?;
            check(&format!("{p}.k_proj.weight"), &[hd, d])?;
            check(&format!("{p}.v_proj.weight"), &[hd, d])?;
            check(&format!("{p}.o_proj.weight"), &[d, hd])?;
            Ok([
                Linear::load(b, &t, &format!("{p}.q_proj"), lane)?,
                Linear::load(b, &t, &format!("{p}.k_proj"), lane)?,
                Linear::load(b, &t, &format!("{p}.v_proj"), lane)?,
                Linear::load(b, &t, &format!("{p}.o_proj"), lane)?,
            ])
        };
        let mut layers = Vec::with_capacity(config.num_layers);
        for l in 0..config.num_layers {
            let p = format!("decoder.layers.{l}");
            check(
                &format!("{p}.mlp.fc1.weight"),
                &[config.intermediate_size, d],
            )?;
            check(
                &format!("{p}.mlp.fc2.weight"),
                &[d, config.intermediate_size],
            )?;
            layers.push(DecoderLayer {
                ln_self: ln(&format!("{p}.input_layernorm"))?,
                self_attn: attn(&format!("{p}.self_attn"))?,
                ln_cross: ln(&format!("{p}.post_attention_layernorm"))?,
                cross_attn: attn(&format!("{p}.encoder_attn"))?,
                ln_mlp: ln(&format!("{p}.final_layernorm"))?,
                fc1: Linear::load(b, &t, &format!("{p}.mlp.fc1"), lane)?,
                fc2: Linear::load(b, &t, &format!("{p}.mlp.fc2"), lane)?,
            });
        }
        let enc_proj = if config.encoder.hidden_size != d {
            check(
                "encoder_decoder_proj.weight",
                &[d, config.encoder.hidden_size],
            )?;
            Some(Linear::load(b, &t, "encoder_decoder_proj", lane)?)
        } else {
            None
        };
        let encoder = Encoder::load(b, &t, &config.encoder, lane)?;
        Ok(Self {
            embed: t.tensor(b, "decoder.embed_tokens.weight")?,
            embed_out: Linear::load(b, &t, "proj_out", lane)?,
            ln_embed: ln("decoder.embedding_layernorm")?,
            ln_final: ln("decoder.norm")?,
            positions: b.upload(&fixed_positions(config.max_positions, d))?,
            layers,
            encoder,
            enc_proj,
            path: path.to_path_buf(),
            config,
            graph_bucket: if backend.name() == "cuda" { 32 } else { 1 },
            backend,
            tokenizer: None,
            prompt_format: None,
            lane,
            chains: Mutex::new(BTreeMap::new()),
            id: crate::next_chain_id(),
            device_steps: AtomicU8::new(device_steps_from_env()),
            pool: Mutex::new(StepPool {
                caches: Vec::new(),
                cross: Vec::new(),
            }),
            live: AtomicUsize::new(0),
            concurrent: AtomicBool::new(false),
            step_positions: STEP_CHAIN_POSITIONS,
            fused_steps: AtomicBool::new(fused_steps_from_env()),
            step_chains: Mutex::new(BTreeSet::new()),
        })
    }

    /// Random weights of `config`'s shapes (speed runs; outputs are meaningless).
    pub fn synthetic(backend: B, config: CanaryConfig, seed: u64, lane: Lane) -> Result<Self> {
        let map = crate::random_weights(config.expected_shapes(), seed, |name| {
            name.ends_with("running_var") || name.contains("norm") && name.ends_with("weight")
        });
        Self::from_tensors(backend, config, &map, Path::new("<synthetic>"), lane)
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn tokenizer(&self) -> Option<&CanaryTokenizer> {
        self.tokenizer.as_ref()
    }

    /// The prompt layout: the `.nemo`'s `prompt_format`, else what the vocabulary supports.
    pub fn prompt_format(&self) -> PromptFormat {
        self.prompt_format
            .or_else(|| self.tokenizer.as_ref().map(|t| t.default_format()))
            .unwrap_or(PromptFormat::Canary2)
    }

    /// The decoder prompt ids for `req` (needs the model's tokenizer).
    pub fn prompt(&self, req: &CanaryRequest) -> Result<Vec<u32>> {
        let tok = self.tokenizer.as_ref().ok_or_else(|| {
            ModelError::bad_model(
                &self.path,
                "no tokenizer beside the weights: the prompt's special tokens cannot be resolved",
            )
        })?;
        tok.prompt(self.prompt_format(), req)
    }

    /// Encodes host features `(T, n_mels)` → `(1, T', d_decoder)` (after the projection).
    pub fn encode_host(&self, features: &HostTensor) -> Result<B::Tensor> {
        let mels = self.config.encoder.num_mel_bins;
        if features.rank() != 2 || features.shape[1] != mels {
            return Err(ModelError::BadInput(format!(
                "features must be (T, {mels}), got {:?}",
                features.shape
            )));
        }
        let b = &self.backend;
        self.encode(&b.reshape(&b.upload(features)?, &[1, features.shape[0], mels])?)
    }

    /// Encodes device features `(1, T, n_mels)` → `(1, T', d_decoder)` (after the projection).
    pub fn encode(&self, x: &B::Tensor) -> Result<B::Tensor> {
        let mels = self.config.encoder.num_mel_bins;
        let shape = x.shape();
        if shape.len() != 3 || shape[0] != 1 || shape[2] != mels {
            return Err(ModelError::BadInput(format!(
                "features must be (1, T, {mels}), got {shape:?}"
            )));
        }
        if self.config.encoder.output_frames(shape[1]) == 0 {
            return Err(ModelError::BadInput("too few feature frames".into()));
        }
        let b = &self.backend;
        let run = ChainedEncoder {
            encoder: &self.encoder,
            chains: &self.chains,
            bucket: self.graph_bucket,
            lane: self.lane,
            name: "canary",
            label: "canary encoder",
        };
        let (enc, _) = run.encode_padded(b, x, None)?;
        match &self.enc_proj {
            Some(p) => p.forward(b, &enc),
            None => Ok(enc),
        }
    }

    /// Text of `ids` (special tokens skipped; empty without a tokenizer).
    pub fn decode_text(&self, ids: &[u32]) -> Result<String> {
        match &self.tokenizer {
            Some(t) => t.decode(ids),
            None => Ok(String::new()),
        }
    }

    /// The most new tokens the decoder's positions allow after `prompt_len` prompt tokens: prompt
    /// and generated ids together fill at most every position, as transformers' `max_length`
    /// (the last id is never fed back, but the reference stops there too).
    pub fn max_new_tokens(&self, prompt_len: usize) -> usize {
        self.config.max_positions.saturating_sub(prompt_len)
    }

    /// Front end, encoder and greedy decoding of 16 kHz mono `samples` after the decoder
    /// `prompt` (Canary's task / language tokens, as ids): one segment over the input whose
    /// tokens are the generated ids without end-of-text.
    pub fn transcribe(
        &self,
        samples: &[f32],
        prompt: &[u32],
        max_new_tokens: usize,
    ) -> Result<Transcript> {
        self.transcribe_ids(samples, prompt, max_new_tokens, 1, &mut |_| {})
    }

    /// Transcribes (or translates, `req.target ≠ req.source`) 16 kHz mono `samples`: the prompt
    /// from the model's tokenizer, greedy (`beam_size` 1) or beam search, up to the decoder's
    /// positions. `req.source == "auto"`: the language is detected from the first window
    /// ([`Self::detect_language`]; English when the model names none), and a `target` of
    /// `"auto"` follows it.
    pub fn transcribe_request(
        &self,
        samples: &[f32],
        req: &CanaryRequest,
        beam_size: usize,
    ) -> Result<Transcript> {
        self.transcribe_request_observed(samples, req, beam_size, &mut |_| {})
    }

    /// [`Self::transcribe_request`], handing each window's segment to `on_segment` as soon as
    /// it is decoded.
    pub fn transcribe_request_observed(
        &self,
        samples: &[f32],
        req: &CanaryRequest,
        beam_size: usize,
        on_segment: &mut dyn FnMut(&Segment),
    ) -> Result<Transcript> {
        let mut req = req.clone();
        if req.source == "auto" {
            let first = &samples[..samples.len().min((WINDOW_SECONDS * 16_000.0) as usize)];
            let fe = NemoConfig::parakeet(self.config.encoder.num_mel_bins);
            let f = log_mel(first, &fe);
            let found = if self.config.encoder.output_frames(f.n_frames) == 0 {
                None
            } else {
                let feats = HostTensor::new(vec![f.n_frames, f.n_bins], f.data)?;
                self.detect_language(&self.encode_host(&feats)?)?
            };
            req.source = found.unwrap_or_else(|| "en".into());
        }
        if req.target == "auto" {
            req.target = req.source.clone();
        }
        let prompt = self.prompt(&req)?;
        let mut t = self.transcribe_ids(
            samples,
            &prompt,
            self.max_new_tokens(prompt.len()),
            beam_size,
            on_segment,
        )?;
        t.language = req.source.clone();
        Ok(t)
    }

    /// The two ids a canary2 model predicts after NeMo's `user_partial` prompt
    /// (`<|startofcontext|><|startoftranscript|>`): the emotion token, then the language
    /// token, greedily. Empty for models without that prompt (canary format) or a tokenizer.
    pub fn language_ids(&self, enc: &B::Tensor) -> Result<Vec<u32>> {
        let Some(tok) = &self.tokenizer else {
            return Ok(Vec::new());
        };
        if self.prompt_format() != PromptFormat::Canary2 {
            return Ok(Vec::new());
        }
        let (Some(ctx), Some(sot)) = (
            tok.token_id("<|startofcontext|>"),
            tok.token_id("<|startoftranscript|>"),
        ) else {
            return Ok(Vec::new());
        };
        self.generate(enc, &[ctx, sot], 2)
    }

    /// The spoken language as the model names it (NeMo's canary2 language identification:
    /// the second of [`Self::language_ids`]), or `None` when that id is not a language token.
    pub fn detect_language(&self, enc: &B::Tensor) -> Result<Option<String>> {
        let ids = self.language_ids(enc)?;
        let (Some(tok), Some(&id)) = (&self.tokenizer, ids.get(1)) else {
            return Ok(None);
        };
        Ok(tok
            .languages()
            .into_iter()
            .find(|code| tok.token_id(&format!("<|{code}|>")) == Some(id)))
    }

    fn transcribe_ids(
        &self,
        samples: &[f32],
        prompt: &[u32],
        max_new_tokens: usize,
        beam_size: usize,
        on_segment: &mut dyn FnMut(&Segment),
    ) -> Result<Transcript> {
        let duration = samples.len() as f64 / 16_000.0;
        let mut t = Transcript {
            duration,
            language_probability: 1.0,
            ..Default::default()
        };
        // Windows of at most WINDOW_SECONDS cut in pauses, each decoded alone.
        for range in windows(samples) {
            let start = range.start as f64 / 16_000.0;
            let end = range.end as f64 / 16_000.0;
            let piece = &samples[range];
            let Some(ids) = self.decode_window(piece, prompt, max_new_tokens, beam_size)? else {
                continue;
            };
            let text = self.decode_text(&ids)?;
            t.segments.push(Segment::plain(
                t.segments.len(),
                start,
                end,
                &text,
                ids,
                None,
            ));
            if let Some(s) = t.segments.last() {
                on_segment(s);
            }
        }
        Ok(t)
    }

    /// Ids (end-of-text dropped) of one window; `None` when it is too short for one encoder
    /// frame.
    fn decode_window(
        &self,
        samples: &[f32],
        prompt: &[u32],
        max_new_tokens: usize,
        beam_size: usize,
    ) -> Result<Option<Vec<u32>>> {
        let fe = NemoConfig::parakeet(self.config.encoder.num_mel_bins);
        let f = log_mel(samples, &fe);
        if self.config.encoder.output_frames(f.n_frames) == 0 {
            return Ok(None);
        }
        let feats = HostTensor::new(vec![f.n_frames, f.n_bins], f.data)?;
        let enc = self.encode_host(&feats)?;
        let mut ids = if beam_size <= 1 {
            self.generate(&enc, prompt, max_new_tokens)?
        } else {
            self.generate_beam(&enc, prompt, max_new_tokens, beam_size, 1.0)?
        };
        if ids.last() == Some(&self.config.eos) {
            ids.pop();
        }
        Ok(Some(ids))
    }

    fn check_prompt(&self, prompt: &[u32]) -> Result<()> {
        let v = self.config.vocab_size;
        if prompt.is_empty() || prompt.iter().any(|&i| i as usize >= v) {
            return Err(ModelError::BadInput(format!(
                "prompt must be non-empty ids below {v}"
            )));
        }
        if prompt.len() > self.config.max_positions {
            return Err(ModelError::BadInput(format!(
                "prompt of {} tokens exceeds the decoder's {} positions",
                prompt.len(),
                self.config.max_positions
            )));
        }
        Ok(())
    }

    /// Cross-attention keys and values, once per layer: `(1, T', H·Dh)` each. Every sequence
    /// (beam) attends the same audio, so one copy serves them all (see [`Self::step`]).
    fn cross_kv(&self, enc: &B::Tensor) -> Result<Vec<(B::Tensor, B::Tensor)>> {
        let b = &self.backend;
        let mut cross = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            cross.push((
                l.cross_attn[1].forward(b, enc)?,
                l.cross_attn[2].forward(b, enc)?,
            ));
        }
        Ok(cross)
    }

    /// A self-attention cache of `rows` sequences for `prompt_len` prompt tokens and up to
    /// `max_new` generated ones; `pooled`: a free one of that size from the step pool when
    /// there is one (its storage is what a captured step chain reads).
    fn new_cache(
        &self,
        rows: usize,
        prompt_len: usize,
        max_new: usize,
        pooled: bool,
    ) -> Result<KvCache<B>> {
        let c = &self.config;
        let mut cap = (prompt_len + max_new).min(c.max_positions).max(1);
        if pooled {
            // one size for every step-chain cache, so any free one serves the next decode
            cap = self.step_positions.min(c.max_positions).max(1);
        }
        self.cache_of(rows, cap, pooled)
    }

    /// Moves `cache` into a new one of `cap` positions (its filled rows copied) when `n` more
    /// tokens do not fit; the old one goes back to the pool.
    fn grow_cache(&self, cache: &mut KvCache<B>, n: usize, cap: usize) -> Result<()> {
        if cache.len + n <= cache.cap || cap <= cache.cap {
            return Ok(());
        }
        let b = &self.backend;
        let mut fresh = self.cache_of(cache.rows, cap, false)?;
        if cache.len > 0 {
            let pairs = fresh.k.iter_mut().zip(&cache.k);
            for (dst, src) in pairs.chain(fresh.v.iter_mut().zip(&cache.v)) {
                b.write_rows(dst, &b.slice(src, 1, 0, cache.len)?, 0)?; // (rows, len, H·Dh)
            }
        }
        fresh.len = cache.len;
        let old = std::mem::replace(cache, fresh);
        self.give_back_cache(old);
        Ok(())
    }

    fn cache_of(&self, rows: usize, cap: usize, pooled: bool) -> Result<KvCache<B>> {
        if pooled {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = pool
                .caches
                .iter()
                .position(|k| k.rows == rows && k.cap == cap)
            {
                let mut k = pool.caches.swap_remove(i);
                k.len = 0;
                return Ok(k);
            }
        }
        let c = &self.config;
        KvCache::new(
            &self.backend,
            self.layers.len(),
            rows,
            cap,
            c.num_heads * c.head_dim,
        )
    }

    fn give_back_cache(&self, k: KvCache<B>) {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if pool.caches.len() < MAX_FREE && k.cap <= self.step_positions {
            pool.caches.push(k);
        }
    }

    /// Row `i` of the cache continues row `idx[i]`. With `pooled` another row count moves into
    /// a pooled cache of that size (the storage its step chain recorded); otherwise as
    /// [`KvCache::reorder`].
    fn reorder_cache(&self, cache: &mut KvCache<B>, idx: &[usize], pooled: bool) -> Result<()> {
        if let Some(&bad) = idx.iter().find(|&&i| i >= cache.rows) {
            return Err(ModelError::BadInput(format!(
                "reorder index {bad} out of range ({} rows)",
                cache.rows
            )));
        }
        if !pooled || idx.len() == cache.rows {
            return cache.reorder(&self.backend, idx);
        }
        let b = &self.backend;
        let mut fresh = self.cache_of(idx.len(), cache.cap, true)?;
        if cache.len > 0 {
            let pairs = fresh.k.iter_mut().zip(&cache.k);
            for (dst, src) in pairs.chain(fresh.v.iter_mut().zip(&cache.v)) {
                let live = b.gather_batch(&b.slice(src, 1, 0, cache.len)?, idx)?; // (idx, len, HDh)
                b.write_rows(dst, &live, 0)?;
            }
        }
        fresh.len = cache.len;
        let old = std::mem::replace(cache, fresh);
        self.give_back_cache(old);
        Ok(())
    }

    /// `cross` copied into a pooled slot of its shape (see [`CrossSlot`]).
    fn lease_cross(&self, cross: &[(B::Tensor, B::Tensor)]) -> Result<CrossSlot<B>> {
        let b = &self.backend;
        let shape = cross.first().map(|(k, _)| k.shape().to_vec());
        let found = {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            pool.cross
                .iter()
                .position(|s| s.kv.first().map(|(k, _)| k.shape().to_vec()) == shape)
                .map(|i| pool.cross.swap_remove(i))
        };
        let mut slot = match found {
            Some(s) => s,
            None => {
                let mut kv = Vec::with_capacity(cross.len());
                for (k, v) in cross {
                    let zk = HostTensor::zeros(k.shape().to_vec());
                    let zv = HostTensor::zeros(v.shape().to_vec());
                    kv.push((b.upload(&zk)?, b.upload(&zv)?));
                }
                CrossSlot {
                    id: crate::next_chain_id(),
                    kv,
                }
            }
        };
        for ((dk, dv), (k, v)) in slot.kv.iter_mut().zip(cross) {
            b.write_rows(dk, k, 0)?; // (1, T', H·Dh)
            b.write_rows(dv, v, 0)?;
        }
        Ok(slot)
    }

    fn give_back_cross(&self, s: CrossSlot<B>) {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if pool.cross.len() < MAX_FREE {
            pool.cross.push(s);
        }
    }

    /// Whether per-token steps run the step chain (device-side parameters, captured and
    /// replayed) or the host-parameter forward pass: `None` = the chain where the home captures
    /// chains (the default), `Some(on)` = forced. Overrides `STAPES_CANARY_DEVICE_STEPS`.
    pub fn set_device_steps(&self, on: Option<bool>) {
        let v = match on {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
        self.device_steps.store(v, Ordering::Relaxed);
    }

    /// The step chain's form: `true` = norms, biases, ReLU and residuals fused into the
    /// projections ([`Backend::norm_linear`]), `false` = the ops of the host-parameter steps.
    /// Overrides `STAPES_CANARY_FUSED_STEPS`.
    pub fn set_fused_steps(&self, on: bool) {
        self.fused_steps.store(on, Ordering::Relaxed);
    }

    /// Whether the next decode runs its per-token steps as the step chain.
    pub fn device_steps(&self) -> bool {
        match self.device_steps.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => self.backend.captures_chains() && !self.concurrent.load(Ordering::SeqCst),
        }
    }

    /// Marks a decode live; a second one alive at once turns the default step chain off.
    fn enter(&self) -> LiveGuard<'_> {
        if self.live.fetch_add(1, Ordering::SeqCst) > 0 {
            self.concurrent.store(true, Ordering::SeqCst);
        }
        LiveGuard(&self.live)
    }

    /// Greedy decoding after `prompt` over `enc (1, T', d)`: at most `max_new_tokens` ids, the
    /// end-of-text id included when it comes (as transformers' `generate` returns them). Self-
    /// attention keys and values are cached, so each step runs one token.
    pub fn generate(
        &self,
        enc: &B::Tensor,
        prompt: &[u32],
        max_new_tokens: usize,
    ) -> Result<Vec<u32>> {
        Ok(self
            .decode_loop(enc, prompt, max_new_tokens, true, false)?
            .0)
    }

    /// [`Self::generate`], also returning every step's logits `(1, 1, V)` as they came back
    /// to the host (to compare the step chain with the host-parameter steps, or a replay with
    /// an eager run).
    pub fn generate_with_logits(
        &self,
        enc: &B::Tensor,
        prompt: &[u32],
        max_new_tokens: usize,
    ) -> Result<(Vec<u32>, Vec<HostTensor>)> {
        let (ids, _, logits) = self.decode_steps(enc, prompt, max_new_tokens, true, true)?;
        Ok((ids, logits))
    }

    /// [`Self::generate`], also returning each step's top-1 − top-2 logit margin (the logits
    /// come back to the host for it), to tell near-ties from errors when lanes differ.
    pub fn generate_with_margins(
        &self,
        enc: &B::Tensor,
        prompt: &[u32],
        max_new_tokens: usize,
    ) -> Result<(Vec<u32>, Vec<f32>)> {
        self.decode_loop(enc, prompt, max_new_tokens, true, true)
    }

    /// The same decoding re-running the whole prefix every step (the slow reference the cached
    /// path is tested against).
    pub fn generate_uncached(
        &self,
        enc: &B::Tensor,
        prompt: &[u32],
        max_new_tokens: usize,
    ) -> Result<Vec<u32>> {
        Ok(self
            .decode_loop(enc, prompt, max_new_tokens, false, false)?
            .0)
    }

    fn decode_loop(
        &self,
        enc: &B::Tensor,
        prompt: &[u32],
        max_new_tokens: usize,
        cached: bool,
        with_margins: bool,
    ) -> Result<(Vec<u32>, Vec<f32>)> {
        let (ids, margins, _) =
            self.decode_steps(enc, prompt, max_new_tokens, cached, with_margins)?;
        Ok((ids, margins))
    }

    /// Greedy decoding; `cached`: one token per step over the KV cache (the step chain after
    /// the prompt where [`Self::device_steps`]), else the whole prefix every step;
    /// `with_logits`: every step's logits come back (margins and logits are returned).
    fn decode_steps(
        &self,
        enc: &B::Tensor,
        prompt: &[u32],
        max_new_tokens: usize,
        cached: bool,
        with_logits: bool,
    ) -> Result<(Vec<u32>, Vec<f32>, Vec<HostTensor>)> {
        let b = &self.backend;
        let c = &self.config;
        self.check_prompt(prompt)?;
        let _live = self.enter();
        let device = cached && self.device_steps();
        let cross = self.cross_kv(enc)?;
        let max_new = max_new_tokens.min(self.max_new_tokens(prompt.len()));
        let slot = if device {
            Some(self.lease_cross(&cross)?)
        } else {
            None
        };
        let full = (prompt.len() + max_new).min(c.max_positions).max(1);
        let mut cache = self.new_cache(1, prompt.len(), max_new, device)?;
        let mut ids: Vec<u32> = prompt.to_vec();
        let (mut out, mut margins, mut all) = (Vec::new(), Vec::new(), Vec::new());
        while out.len() < max_new_tokens && ids.len() <= c.max_positions {
            if cached {
                let n = ids.len() - cache.len;
                self.grow_cache(&mut cache, n, full)?;
            }
            let logits = match (&slot, cached) {
                // the prompt runs as one block with host parameters, each later token alone
                (Some(slot), _) if cache.len > 0 && cache.cap <= self.step_positions => {
                    match self.step_device(&ids[cache.len..], &mut cache, slot)? {
                        Some(l) => l,
                        None => self.step(&ids[cache.len..], 1, &mut cache, &cross)?,
                    }
                }
                (_, true) => self.step(&ids[cache.len..], 1, &mut cache, &cross)?,
                (_, false) => {
                    let mut fresh = self.new_cache(1, ids.len(), 0, false)?;
                    self.step(&ids, 1, &mut fresh, &cross)?
                }
            };
            let next = if with_logits {
                let host = b.download_step(&logits)?;
                let row = host.data.clone();
                all.push(host);
                let (mut top, mut second) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
                let mut best = 0;
                for (i, &x) in row.iter().enumerate() {
                    if x > top {
                        (second, top, best) = (top, x, i);
                    } else if x > second {
                        second = x;
                    }
                }
                margins.push(top - second);
                best as u32
            } else {
                b.argmax(&logits)?.first().copied().unwrap_or(c.eos)
            };
            out.push(next);
            ids.push(next);
            if next == c.eos {
                break;
            }
        }
        if let Some(s) = slot {
            self.give_back_cross(s);
            self.give_back_cache(cache);
        }
        Ok((out, margins, all))
    }

    /// Beam search after `prompt`, as transformers' `generate(num_beams=beam)` does it with its
    /// defaults (`early_stopping=False`): each step keeps the `2·beam` best continuations of
    /// all beams by summed log-probability; those ending in end-of-text (or at the length
    /// limit) among the first `beam` become finished hypotheses scored `sum / len^length_penalty`
    /// (len = generated tokens, end-of-text included), the rest continue; the search stops when
    /// no running beam can beat the worst of `beam` finished ones. Returns the best finished
    /// hypothesis' ids, end-of-text included when it has one.
    pub fn generate_beam(
        &self,
        enc: &B::Tensor,
        prompt: &[u32],
        max_new_tokens: usize,
        beam: usize,
        length_penalty: f32,
    ) -> Result<Vec<u32>> {
        let b = &self.backend;
        let c = &self.config;
        self.check_prompt(prompt)?;
        if beam == 0 {
            return Err(ModelError::BadInput("beam size must be at least 1".into()));
        }
        let max_new = max_new_tokens.min(self.max_new_tokens(prompt.len()));
        if max_new == 0 {
            return Ok(Vec::new());
        }
        let v = c.vocab_size;
        let _live = self.enter();
        let device = self.device_steps();
        let cross = self.cross_kv(enc)?;
        let slot = if device {
            Some(self.lease_cross(&cross)?)
        } else {
            None
        };
        // The prompt runs once, as one row; its cache is then copied into the beams.
        let full = (prompt.len() + max_new).min(c.max_positions).max(1);
        let mut cache = self.new_cache(1, prompt.len(), max_new, device)?;
        // Running beams: generated ids and summed log-probabilities; only the first starts live
        // so the first step does not pick the same token from identical beams.
        let mut running: Vec<(Vec<u32>, f32)> = (0..beam)
            .map(|i| (Vec::new(), if i == 0 { 0.0 } else { -1e9 }))
            .collect();
        let mut finished: Vec<(Vec<u32>, f32)> = Vec::new();
        let mut improvable = true;
        for step in 0..max_new {
            self.grow_cache(&mut cache, if step == 0 { prompt.len() } else { 1 }, full)?;
            let logits = if step == 0 {
                let one = b.download(&self.step(prompt, 1, &mut cache, &cross)?)?;
                self.reorder_cache(&mut cache, &vec![0; beam], device)?;
                one
            } else {
                let tokens: Vec<u32> = running.iter().map(|(s, _)| s[s.len() - 1]).collect();
                match &slot {
                    // the chain's output is overwritten by its next replay: it comes back now
                    Some(slot) if cache.cap <= self.step_positions => {
                        match self.step_device(&tokens, &mut cache, slot)? {
                            Some(l) => b.download_step(&l)?,
                            None => b.download(&self.step(&tokens, beam, &mut cache, &cross)?)?,
                        }
                    }
                    _ => b.download(&self.step(&tokens, beam, &mut cache, &cross)?)?,
                }
            };
            let mut cand: Vec<(f32, usize, u32)> = Vec::with_capacity(beam * v);
            for (i, (_, base)) in running.iter().enumerate() {
                // After the prompt every beam holds the same sequence: one row of logits.
                let row = logits.data.chunks(v).nth(if step == 0 { 0 } else { i });
                let Some(row) = row else {
                    return Err(ModelError::BadInput(format!("no logits for beam {i}")));
                };
                for (tok, lp) in log_softmax_row(row).into_iter().enumerate() {
                    cand.push((lp + base, i, tok as u32));
                }
            }
            let keep = 2 * beam;
            cand.sort_by(|a, b| b.0.total_cmp(&a.0));
            cand.truncate(keep);
            let last = step + 1 == max_new;
            let stops = |tok: u32| tok == c.eos || last;
            // Finished hypotheses: only from the first `beam` candidates.
            if improvable {
                let len = (step + 1) as f32;
                for &(score, i, tok) in cand.iter().take(beam) {
                    if stops(tok) {
                        let mut ids = running[i].0.clone();
                        ids.push(tok);
                        finished.push((ids, score / len.powf(length_penalty)));
                    }
                }
                finished.sort_by(|a, b| b.1.total_cmp(&a.1));
                finished.truncate(beam);
            }
            if cand.iter().all(|&(_, _, tok)| stops(tok)) {
                break;
            }
            // Next running beams: the best continuations that did not stop.
            let mut next: Vec<(f32, usize, u32)> = cand
                .iter()
                .map(|&(s, i, t)| (if stops(t) { s - 1e9 } else { s }, i, t))
                .collect();
            next.sort_by(|a, b| b.0.total_cmp(&a.0));
            next.truncate(beam);
            let origins: Vec<usize> = next.iter().map(|&(_, i, _)| i).collect();
            running = next
                .iter()
                .map(|&(s, i, t)| {
                    let mut ids = running[i].0.clone();
                    ids.push(t);
                    (ids, s)
                })
                .collect();
            self.reorder_cache(&mut cache, &origins, device)?;
            // Can a running beam still beat the worst finished one?
            if finished.len() == beam {
                let best = running[0].1 / ((step + 1) as f32).powf(length_penalty);
                let worst = finished[beam - 1].1;
                improvable = improvable && best > worst;
            }
            if !improvable {
                break;
            }
        }
        if let Some(s) = slot {
            self.give_back_cross(s);
            self.give_back_cache(cache);
        }
        Ok(finished
            .into_iter()
            .next()
            .map(|(ids, _)| ids)
            .unwrap_or_default())
    }

    /// Runs `tokens` (`rows` sequences of equal length, row-major) at the cache's next positions
    /// through the decoder, writing their self-attention keys/values into `cache`; returns the
    /// logits after each row's last token, `(rows, 1, V)`.
    fn step(
        &self,
        tokens: &[u32],
        rows: usize,
        cache: &mut KvCache<B>,
        cross: &[(B::Tensor, B::Tensor)],
    ) -> Result<B::Tensor> {
        let b = &self.backend;
        let c = &self.config;
        let n = tokens.len() / rows.max(1);
        let (d, hd) = (c.hidden_size, c.num_heads * c.head_dim);
        let start = cache.len;
        if n == 0 || n * rows != tokens.len() || rows != cache.rows {
            return Err(ModelError::BadInput(format!(
                "{} tokens for {rows} rows (cache of {} rows)",
                tokens.len(),
                cache.rows
            )));
        }
        if start + n > cache.cap {
            return Err(ModelError::BadInput(format!(
                "decoder positions {start}..{} exceed {} (of {})",
                start + n,
                cache.cap,
                c.max_positions
            )));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
            return Err(ModelError::BadInput(format!(
                "token id {t} outside the vocabulary ({})",
                c.vocab_size
            )));
        }
        let params = |kv_len, causal| AttnParams {
            n_heads: c.num_heads,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            kv_len,
            // Query i of the block sees keys 0 ..= start + i.
            causal,
        };
        let x = b.reshape(&b.gather_rows(&self.embed, tokens)?, &[rows, n, d])?; // (rows, n, d)
        let pos = b.slice(&self.positions, 0, start, n)?; // (n, d): broadcast over the rows
        let x = b.add(&x, &pos)?;
        let mut x = b.layer_norm(&x, &self.ln_embed.0, Some(&self.ln_embed.1), LN_EPS)?;
        let layers = self.layers.iter().zip(cross);
        for (l, (layer, (ck, cv))) in layers.enumerate() {
            let h = b.layer_norm(&x, &layer.ln_self.0, Some(&layer.ln_self.1), LN_EPS)?;
            let [q, k, v, o] = &layer.self_attn;
            b.write_rows(&mut cache.k[l], &k.forward(b, &h)?, start)?;
            b.write_rows(&mut cache.v[l], &v.forward(b, &h)?, start)?;
            let a = b.attention(
                &q.forward(b, &h)?,
                &cache.k[l],
                &cache.v[l],
                &params(Some(start + n), true),
            )?;
            x = b.add(&x, &o.forward(b, &a)?)?;
            let h = b.layer_norm(&x, &layer.ln_cross.0, Some(&layer.ln_cross.1), LN_EPS)?;
            // Every row attends the same audio: the rows fold into the query axis against one
            // copy of the cross keys/values, `(1, rows·n, H·Dh)`.
            let q = b.reshape(&layer.cross_attn[0].forward(b, &h)?, &[1, rows * n, hd])?;
            let a = b.attention(&q, ck, cv, &params(None, false))?;
            let a = b.reshape(&a, &[rows, n, hd])?;
            x = b.add(&x, &layer.cross_attn[3].forward(b, &a)?)?;
            let h = b.layer_norm(&x, &layer.ln_mlp.0, Some(&layer.ln_mlp.1), LN_EPS)?;
            let h = b.activation(&layer.fc1.forward(b, &h)?, c.activation)?;
            x = b.add(&x, &layer.fc2.forward(b, &h)?)?;
        }
        cache.len = start + n;
        let last = b.slice(&x, 1, n - 1, 1)?;
        let last = b.layer_norm(&last, &self.ln_final.0, Some(&self.ln_final.1), LN_EPS)?;
        self.embed_out.forward(b, &last)
    }

    /// One token per row (`tokens`: one id for each of the cache's rows) at the cache's next
    /// position, as [`Self::step`] computes it but with the ids and the position in the cache's
    /// step tensor ([`StepParams`]), so the whole step runs as one chain per (model, cache,
    /// cross slot, rows) that a GPU home captures once and replays for every later token.
    /// Returns the logits `(rows, 1, V)`, which the next replay overwrites; `None` (nothing
    /// run) when this would be a new chain past [`MAX_STEP_CHAINS`].
    fn step_device(
        &self,
        tokens: &[u32],
        cache: &mut KvCache<B>,
        cross: &CrossSlot<B>,
    ) -> Result<Option<B::Tensor>> {
        let b = &self.backend;
        let c = &self.config;
        if tokens.len() != cache.rows {
            return Err(ModelError::BadInput(format!(
                "{} tokens for a step of {} rows",
                tokens.len(),
                cache.rows
            )));
        }
        if cache.len + 1 > cache.cap {
            return Err(ModelError::BadInput(format!(
                "decoder position {} exceeds {} (of {})",
                cache.len, cache.cap, c.max_positions
            )));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
            return Err(ModelError::BadInput(format!(
                "token id {t} outside the vocabulary ({})",
                c.vocab_size
            )));
        }
        let rows = cache.rows;
        let fused = self.fused_steps.load(Ordering::Relaxed);
        let key = format!(
            "canary-step/m{}/kv{}/x{}/b{rows}/{}",
            self.id,
            cache.id,
            cross.id,
            if fused { "fused" } else { "plain" }
        );
        {
            let mut known = self.step_chains.lock().unwrap_or_else(|p| p.into_inner());
            if !known.contains(&key) {
                if known.len() >= MAX_STEP_CHAINS {
                    return Ok(None);
                }
                known.insert(key.clone());
            }
        }
        let params = StepParams {
            position: cache.len,
            ids: tokens.to_vec(),
        }
        .to_host()?; // (1, 1, 1 + rows)
        match &mut cache.step {
            // refreshed in place: the chain recorded this tensor's storage
            Some(t) => b.write_host(t, &params)?,
            None => cache.step = Some(b.upload(&params)?),
        }
        let KvCache { k, v, step, .. } = cache;
        let Some(step) = step.as_ref() else {
            return Err(ModelError::BadInput("decoder step tensor missing".into()));
        };
        let logits = crate::chain_one(b, &key, "canary decoder step", &mut |b| {
            if fused {
                self.step_body_fused(b, rows, (k, v), &cross.kv, step)
            } else {
                self.step_body(b, rows, (k, v), &cross.kv, step)
            }
        })?;
        cache.len += 1;
        Ok(Some(logits))
    }

    /// The ops of one [`Self::step_device`]: those of [`Self::step`] for one token per row,
    /// with the embedding, the cache writes and the causal attention reading `step`.
    fn step_body(
        &self,
        b: &B,
        rows: usize,
        (cache_k, cache_v): (&mut [B::Tensor], &mut [B::Tensor]),
        cross: &[(B::Tensor, B::Tensor)],
        step: &B::Tensor,
    ) -> Result<B::Tensor> {
        let c = &self.config;
        let hd = c.num_heads * c.head_dim;
        let params = |kv_len, causal| AttnParams {
            n_heads: c.num_heads,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            kv_len,
            causal,
        };
        let x = b.embed_step(&self.embed, &self.positions, step)?; // (rows, 1, d)
        let mut x = b.layer_norm(&x, &self.ln_embed.0, Some(&self.ln_embed.1), LN_EPS)?;
        let caches = cache_k.iter_mut().zip(cache_v.iter_mut());
        for ((layer, (ck, cv)), (sk, sv)) in self.layers.iter().zip(cross).zip(caches) {
            let h = b.layer_norm(&x, &layer.ln_self.0, Some(&layer.ln_self.1), LN_EPS)?;
            let [q, k, v, o] = &layer.self_attn;
            b.write_rows_step(sk, &k.forward(b, &h)?, step)?; // (rows, 1, H·Dh)
            b.write_rows_step(sv, &v.forward(b, &h)?, step)?;
            let a = b.attention_step(&q.forward(b, &h)?, sk, sv, &params(None, true), step)?;
            x = b.add(&x, &o.forward(b, &a)?)?;
            let h = b.layer_norm(&x, &layer.ln_cross.0, Some(&layer.ln_cross.1), LN_EPS)?;
            // the rows fold into the query axis against the one copy of the cross K/V
            let q = b.reshape(&layer.cross_attn[0].forward(b, &h)?, &[1, rows, hd])?;
            let a = b.attention(&q, ck, cv, &params(None, false))?;
            let a = b.reshape(&a, &[rows, 1, hd])?;
            x = b.add(&x, &layer.cross_attn[3].forward(b, &a)?)?;
            let h = b.layer_norm(&x, &layer.ln_mlp.0, Some(&layer.ln_mlp.1), LN_EPS)?;
            let h = b.activation(&layer.fc1.forward(b, &h)?, c.activation)?;
            x = b.add(&x, &layer.fc2.forward(b, &h)?)?;
        }
        let x = b.layer_norm(&x, &self.ln_final.0, Some(&self.ln_final.1), LN_EPS)?;
        self.embed_out.forward(b, &x)
    }

    /// [`Self::step_body`] with every layer norm riding in the projection after it and every
    /// bias, ReLU and residual in the projection's epilogue ([`Backend::norm_linear`]; on a GPU
    /// home one kernel each), and the cross-attention as [`Backend::attention_decode`]. The
    /// composed defaults compute exactly the ops of `step_body`.
    fn step_body_fused(
        &self,
        b: &B,
        rows: usize,
        (cache_k, cache_v): (&mut [B::Tensor], &mut [B::Tensor]),
        cross: &[(B::Tensor, B::Tensor)],
        step: &B::Tensor,
    ) -> Result<B::Tensor> {
        let c = &self.config;
        let hd = c.num_heads * c.head_dim;
        let params = |kv_len, causal| AttnParams {
            n_heads: c.num_heads,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            kv_len,
            causal,
        };
        // `l(norm(x)) + residual`, with `act` after the bias
        let lin = |x: &B::Tensor,
                   l: &Linear<B>,
                   ln: Option<&(B::Tensor, B::Tensor)>,
                   act: Option<Activation>,
                   residual: Option<&B::Tensor>|
         -> Result<B::Tensor> {
            let f = LinearFusion {
                norm: ln.map(norm_ref),
                bias: l.b.as_ref(),
                act,
                residual,
            };
            Ok(b.norm_linear(x, &l.w, &f)?)
        };
        let x = b.embed_step(&self.embed, &self.positions, step)?; // (rows, 1, d)
        let mut x = b.layer_norm(&x, &self.ln_embed.0, Some(&self.ln_embed.1), LN_EPS)?;
        let caches = cache_k.iter_mut().zip(cache_v.iter_mut());
        for ((layer, (ck, cv)), (sk, sv)) in self.layers.iter().zip(cross).zip(caches) {
            let [q, k, v, o] = &layer.self_attn;
            let ln = Some(&layer.ln_self);
            b.write_rows_step(sk, &lin(&x, k, ln, None, None)?, step)?; // (rows, 1, H·Dh)
            b.write_rows_step(sv, &lin(&x, v, ln, None, None)?, step)?;
            let q = lin(&x, q, ln, None, None)?;
            let a = b.attention_step(&q, sk, sv, &params(None, true), step)?;
            x = lin(&a, o, None, None, Some(&x))?;
            let q = lin(&x, &layer.cross_attn[0], Some(&layer.ln_cross), None, None)?;
            let q = b.reshape(&q, &[1, rows, hd])?;
            // a few query rows over the whole window: split across the keys on a device home
            let a = b.attention_decode(&q, ck, cv, &params(None, false))?;
            let a = b.reshape(&a, &[rows, 1, hd])?;
            x = lin(&a, &layer.cross_attn[3], None, None, Some(&x))?;
            let h = lin(
                &x,
                &layer.fc1,
                Some(&layer.ln_mlp),
                Some(c.activation),
                None,
            )?;
            x = lin(&h, &layer.fc2, None, None, Some(&x))?;
        }
        lin(&x, &self.embed_out, Some(&self.ln_final), None, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stapes_cpu::CpuBackend;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fastconformer/canary")
    }

    /// The step chain's ops (default `*_step` ops reading the step tensor) compute what the
    /// host-parameter steps compute: the same logits bitwise at every greedy step, the same
    /// beam-4 ids, across reused pooled buffers (a second decode) and a second window shape.
    #[test]
    fn device_steps_equal_host_steps_on_the_cpu() {
        let m = Canary::new(CpuBackend::new(2).expect("cpu"), &fixture(), Lane::F32)
            .expect("canary fixture loads");
        let mels = m.config.encoder.num_mel_bins;
        let prompt = [m.config.decoder_start, 4, 5];
        // a long decode moves from the step chain to host steps at this many positions
        let mut small = Canary::new(CpuBackend::new(2).expect("cpu"), &fixture(), Lane::F32)
            .expect("canary fixture loads");
        small.step_positions = 6;
        for (i, frames) in [(0, 200), (1, 200), (2, 120)] {
            let f = HostTensor::random(vec![frames, mels], 40 + i, 2.0);
            let enc = m.encode_host(&f).expect("encode");
            let mut runs = Vec::new();
            for (device, fused) in [(false, false), (true, false), (true, true)] {
                m.set_device_steps(Some(device));
                m.set_fused_steps(fused);
                assert_eq!(m.device_steps(), device);
                let (ids, logits) = m.generate_with_logits(&enc, &prompt, 12).expect("greedy");
                let beam = m.generate_beam(&enc, &prompt, 12, 4, 1.0).expect("beam");
                runs.push((ids, logits, beam));
            }
            m.set_fused_steps(false);
            let fused = runs.pop().expect("the fused run");
            assert_eq!(runs[0].0, fused.0, "clip {i}: fused greedy ids");
            assert_eq!(runs[0].2, fused.2, "clip {i}: fused beam ids");
            for (s, (a, b)) in runs[0].1.iter().zip(&fused.1).enumerate() {
                assert!(a.data == b.data, "clip {i}: step {s}: fused logits differ");
            }
            small.set_device_steps(Some(true));
            let (ids, logits) = small
                .generate_with_logits(&enc, &prompt, 12)
                .expect("greedy");
            let beam = small
                .generate_beam(&enc, &prompt, 12, 4, 1.0)
                .expect("beam");
            runs.push((ids, logits, beam));
            let (host, dev) = (&runs[0], &runs[1]);
            assert!(
                host.0.len() + prompt.len() > small.step_positions,
                "clip {i}: {:?} does not reach the small step cache's end",
                host.0
            );
            for other in &runs[2..] {
                assert_eq!(host.0, other.0, "clip {i}: greedy ids, growing cache");
                assert_eq!(host.2, other.2, "clip {i}: beam ids, growing cache");
            }
            assert!(
                host.0.len() > 1,
                "clip {i}: {:?} too short to test steps",
                host.0
            );
            assert_eq!(host.0, dev.0, "clip {i}: greedy ids");
            assert_eq!(host.2, dev.2, "clip {i}: beam ids");
            for (s, (a, b)) in host.1.iter().zip(&dev.1).enumerate() {
                assert!(a.data == b.data, "clip {i}: step {s} logits differ");
            }
        }
        // past the chain limit a decode needing a new chain (a new window length) runs host steps
        let full = {
            let mut known = m.step_chains.lock().expect("chain keys");
            assert!(!known.is_empty() && known.len() < MAX_STEP_CHAINS);
            for i in 0..MAX_STEP_CHAINS {
                known.insert(format!("full-{i}"));
            }
            known.len()
        };
        let enc = m
            .encode_host(&HostTensor::random(vec![160, mels], 49, 2.0))
            .expect("encode");
        m.set_device_steps(Some(false));
        let want = m.generate_beam(&enc, &prompt, 12, 4, 1.0).expect("beam");
        m.set_device_steps(Some(true));
        assert_eq!(
            m.generate_beam(&enc, &prompt, 12, 4, 1.0).expect("beam"),
            want
        );
        let known = m.step_chains.lock().expect("chain keys").len();
        assert_eq!(known, full, "a chain was recorded past the limit");
        // the default follows the home: the CPU captures no chains
        m.set_device_steps(None);
        assert!(!m.device_steps());
        let pool = m.pool.lock().expect("pool");
        assert!(!pool.caches.is_empty() && !pool.cross.is_empty());
    }
}
