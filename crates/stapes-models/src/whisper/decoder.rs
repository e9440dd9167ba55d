//! Whisper's text decoder: token + learned positions, pre-LN blocks with causal self-attention over
//! a preallocated KV cache and cross-attention over the encoded window, logits against the tied
//! token embedding.

use super::config::WhisperConfig;
use super::encoder::LN_EPS;
use super::model::{attn_params, Attn, Linear, Mlp, Norm, Tensors};
use crate::{ModelError, Result};
use stapes_core::select::{SelectRequest, Selected};
use stapes_core::{
    Activation, Backend, DeviceTensor, HostTensor, Lane, LinearFusion, NormRef, StepParams,
};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// Free buffers kept per decoder; more than this many of one kind are simply dropped.
const MAX_FREE_SLOTS: usize = 8;

/// A layer norm's parameters, fused into the projection that follows it
/// ([`Backend::norm_linear`]).
struct LnParams<B: Backend> {
    gamma: B::Tensor,
    beta: Option<B::Tensor>,
}

impl<B: Backend> LnParams<B> {
    fn load(b: &B, t: &Tensors<'_>, prefix: &str) -> Result<Self> {
        Ok(Self {
            gamma: t.tensor(b, &format!("{prefix}.weight"))?,
            beta: t.opt_tensor(b, &format!("{prefix}.bias"))?,
        })
    }

    fn r(&self) -> NormRef<'_, B::Tensor> {
        NormRef {
            gamma: &self.gamma,
            beta: self.beta.as_ref(),
            eps: LN_EPS,
        }
    }
}

/// One pre-LN decoder block.
pub(crate) struct DecoderLayer<B: Backend> {
    /// The encoder attention's projections; k and v read the encoded window (`cross_kv`).
    cross: Attn<B>,
    blocks: Blocks<B>,
}

/// The rest of a block, in one of two forms chosen at load.
enum Blocks<B: Backend> {
    /// The default. Each step runs a few rows through these projections, so every layer norm
    /// rides in the projection after it and every bias, GELU and residual in the projection's
    /// epilogue ([`Backend::norm_linear`]): on a GPU home one kernel each.
    Fused {
        self_ln: LnParams<B>,
        /// (3d, d): q | k | v stacked (one GEMV per step), bias (3d) with zeros for k.
        self_qkv: Linear<B>,
        self_o: Linear<B>,
        cross_ln: LnParams<B>,
        mlp_ln: LnParams<B>,
        fc1: Linear<B>,
        fc2: Linear<B>,
    },
    /// Norms, projections, GELU and residual adds as separate ops: the previous form, kept for
    /// same-binary A/B timing (`STAPES_WHISPER_FUSED=0` at load, as for the encoder).
    Split {
        self_ln: Norm<B>,
        self_attn: Attn<B>,
        cross_ln: Norm<B>,
        mlp_ln: Norm<B>,
        mlp: Mlp<B>,
    },
}

/// Whether the decoder loads the fused form (the default; see [`Blocks`]).
fn fused_form() -> bool {
    std::env::var("STAPES_WHISPER_FUSED").map_or(true, |v| v.trim() != "0")
}

/// `bias` and `residual` around a plain projection.
fn fused<'a, B: Backend>(
    l: &'a Linear<B>,
    norm: Option<&'a LnParams<B>>,
    act: Option<Activation>,
    residual: Option<&'a B::Tensor>,
) -> LinearFusion<'a, B::Tensor> {
    LinearFusion {
        norm: norm.map(|n| n.r()),
        bias: l.b.as_ref(),
        act,
        residual,
    }
}

/// The self-attention projection `(3d, d)` with q, k, v stacked in that order.
fn load_qkv<B: Backend>(b: &B, t: &Tensors<'_>, prefix: &str, lane: Lane) -> Result<Linear<B>> {
    let names: Vec<String> = ["q_proj", "k_proj", "v_proj"]
        .iter()
        .map(|p| format!("{prefix}.{p}"))
        .collect();
    let weights: Vec<String> = names.iter().map(|n| format!("{n}.weight")).collect();
    let mut parts = Vec::with_capacity(3);
    for (n, w) in names.iter().zip(&weights) {
        let rows = t.shape(w)?.first().copied().unwrap_or(0);
        parts.push((format!("{n}.bias"), rows));
    }
    Ok(Linear {
        w: t.stacked_weight(b, &weights, lane)?,
        b: Some(t.stacked_bias(b, &parts)?),
    })
}

pub(crate) struct Decoder<B: Backend> {
    /// (V, d): the lookup table of the input embedding, made only where the home cannot give
    /// `embed_w`'s rows back exactly (`Backend::weight_rows`) or a step chain needs the table.
    embed: std::sync::OnceLock<B::Tensor>,
    /// The same matrix as the tied output projection `(V, d)`, in the lane.
    embed_w: B::Weight,
    /// (n_text_ctx, d)
    positions: B::Tensor,
    layers: Vec<DecoderLayer<B>>,
    ln: Norm<B>,
    /// The same final norm's parameters, for the logits projection it is fused into.
    ln_fused: LnParams<B>,
    /// The blocks are [`Blocks::Fused`] (and the final norm rides in the logits projection).
    fused: bool,
    heads: usize,
    d: usize,
    n_ctx: usize,
    vocab: usize,
    id: u64,
    /// Cache buffers that outlive a window, so a step chain captured once keeps finding its
    /// inputs at the same addresses.
    slots: Arc<Mutex<Slots<B>>>,
    /// Per-token steps through [`Decoder::step_logits`]'s chain: 0 = where the home captures
    /// chains (the default), 1 = always, 2 = never.
    device_steps: AtomicU8,
    /// [`Decoder::select_step_ahead`] queues the next step: 0 = unless `STAPES_DECODE_AHEAD=0`
    /// (the default), 1 = always, 2 = never.
    ahead: AtomicU8,
}

/// Self-attention caches of `batch` sequences, per layer `(batch, n_text_ctx, d)`, and the step
/// tensor `(1, 1, 1 + batch)` ([`StepParams`]) that a step chain reads.
struct SelfSlot<B: Backend> {
    id: u64,
    batch: usize,
    k: Vec<B::Tensor>,
    v: Vec<B::Tensor>,
    step: Option<B::Tensor>,
}

/// A copy of one window's cross K/V, per layer `(1, n_audio_ctx, d)`, at addresses a step chain
/// can keep reading from window to window.
struct CrossSlot<B: Backend> {
    id: u64,
    k: Vec<B::Tensor>,
    v: Vec<B::Tensor>,
}

struct Slots<B: Backend> {
    selfs: Vec<SelfSlot<B>>,
    cross: Vec<CrossSlot<B>>,
    /// Decoder states alive now.
    live: usize,
    /// Two states were alive at once (threads decoding side by side, e.g. batched
    /// transcription): the CUDA home's graph capture records every launch on its one stream,
    /// so a capture must not overlap another thread's work; the step chain stays off from then on.
    concurrent: bool,
}

fn lock<B: Backend>(m: &Mutex<Slots<B>>) -> std::sync::MutexGuard<'_, Slots<B>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<B: Backend> Slots<B> {
    fn give_back_self(&mut self, s: SelfSlot<B>) {
        if self.selfs.len() < MAX_FREE_SLOTS {
            self.selfs.push(s);
        }
    }
}

/// Cross-attention K/V of one encoded window, per layer `(1, n_audio_ctx, d)`: computed once per
/// window and shared by language detection, every temperature, every beam and the alignment.
pub struct CrossKv<B: Backend> {
    k: Vec<B::Tensor>,
    v: Vec<B::Tensor>,
}

/// Per-sequence decoding state: the self-attention caches of `batch` sequences over one window.
/// Its buffers come from (and return to, on drop) its decoder's free list.
pub struct DecoderState<'a, B: Backend> {
    batch: usize,
    len: usize,
    slot_id: u64,
    /// Per layer `(batch, n_text_ctx, d)`, rows `0..len` valid (later rows hold stale values
    /// that nothing reads).
    self_k: Vec<B::Tensor>,
    self_v: Vec<B::Tensor>,
    /// `(1, 1, 1 + batch)`, the step chain's parameters.
    step: Option<B::Tensor>,
    cross: &'a CrossKv<B>,
    /// The window's cross K/V copied where the step chain reads it (on the first step).
    cross_slot: Option<CrossSlot<B>>,
    /// A step already queued behind the last selection, fed its ids on the device
    /// ([`Decoder::select_step_ahead`]); `len` counts it.
    ahead: Option<Ahead<B::Tensor>>,
    slots: Arc<Mutex<Slots<B>>>,
}

/// The ids a queued step was fed and the logits it writes.
struct Ahead<T> {
    ids: Vec<u32>,
    logits: T,
}

impl<B: Backend> DecoderState<'_, B> {
    /// Forget a step queued ahead (its position is written again by whatever runs next).
    fn drop_ahead(&mut self) {
        if self.ahead.take().is_some() {
            self.len -= 1;
        }
    }

    /// Swap in another self slot (another batch size); returns the one it held.
    fn swap_slot(&mut self, s: SelfSlot<B>) -> SelfSlot<B> {
        let old = SelfSlot {
            id: self.slot_id,
            batch: self.batch,
            k: std::mem::replace(&mut self.self_k, s.k),
            v: std::mem::replace(&mut self.self_v, s.v),
            step: std::mem::replace(&mut self.step, s.step),
        };
        self.slot_id = s.id;
        self.batch = s.batch;
        old
    }
}

impl<B: Backend> Drop for DecoderState<'_, B> {
    fn drop(&mut self) {
        let own = SelfSlot {
            id: self.slot_id,
            batch: self.batch,
            k: std::mem::take(&mut self.self_k),
            v: std::mem::take(&mut self.self_v),
            step: self.step.take(),
        };
        let mut slots = lock(&self.slots);
        slots.live = slots.live.saturating_sub(1);
        slots.give_back_self(own);
        if let Some(c) = self.cross_slot.take() {
            if slots.cross.len() < MAX_FREE_SLOTS {
                slots.cross.push(c);
            }
        }
    }
}

/// Where a forward pass takes its self-attention parameters from.
enum At<'s, T> {
    /// Host values: the cache offset (rows already there).
    Host { offset: usize },
    /// A [`StepParams`] tensor on the device.
    Step(&'s T),
}

// by hand: a derive would ask for `T: Copy`
impl<T> Clone for At<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for At<'_, T> {}

impl<B: Backend> DecoderState<'_, B> {
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// Tokens already fed (the position of the next one).
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Whether a step is queued ahead, fed the last selection's ids on the device
    /// ([`Decoder::select_step_ahead`]).
    pub fn queued_ahead(&self) -> bool {
        self.ahead.is_some()
    }
}

/// The default of [`Decoder::set_ahead`]: on unless `STAPES_DECODE_AHEAD=0` (read once; the
/// A/B switch for timing).
fn ahead_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("STAPES_DECODE_AHEAD").is_ok_and(|v| v.trim() == "0"))
}

impl<B: Backend> Decoder<B> {
    pub fn load(b: &B, t: &Tensors<'_>, cfg: &WhisperConfig, lane: Lane) -> Result<Self> {
        let p = "model.decoder";
        let embed_name = format!("{p}.embed_tokens.weight");
        let embed_shape = t.shape(&embed_name)?;
        if embed_shape != [cfg.vocab_size, cfg.d_model] {
            return Err(t.bad(
                &embed_name,
                &format!(
                    "expected ({}, {}), got {:?}",
                    cfg.vocab_size, cfg.d_model, embed_shape
                ),
            ));
        }
        let fused = fused_form();
        let mut layers = Vec::with_capacity(cfg.decoder_layers);
        for l in 0..cfg.decoder_layers {
            let q = format!("{p}.layers.{l}");
            let (self_ln, cross_ln, mlp_ln) = (
                format!("{q}.self_attn_layer_norm"),
                format!("{q}.encoder_attn_layer_norm"),
                format!("{q}.final_layer_norm"),
            );
            let blocks = if fused {
                Blocks::Fused {
                    self_ln: LnParams::load(b, t, &self_ln)?,
                    self_qkv: load_qkv(b, t, &format!("{q}.self_attn"), lane)?,
                    self_o: Linear::load(b, t, &format!("{q}.self_attn.out_proj"), lane)?,
                    cross_ln: LnParams::load(b, t, &cross_ln)?,
                    mlp_ln: LnParams::load(b, t, &mlp_ln)?,
                    fc1: Linear::load(b, t, &format!("{q}.fc1"), lane)?,
                    fc2: Linear::load(b, t, &format!("{q}.fc2"), lane)?,
                }
            } else {
                Blocks::Split {
                    self_ln: Norm::load(b, t, &self_ln)?,
                    self_attn: Attn::load(b, t, &format!("{q}.self_attn"), lane)?,
                    cross_ln: Norm::load(b, t, &cross_ln)?,
                    mlp_ln: Norm::load(b, t, &mlp_ln)?,
                    mlp: Mlp::load(b, t, &q, lane)?,
                }
            };
            layers.push(DecoderLayer {
                cross: Attn::load(b, t, &format!("{q}.encoder_attn"), lane)?,
                blocks,
            });
        }
        let positions = t.tensor(b, &format!("{p}.embed_positions.weight"))?;
        let embed_w = t.weight(b, &embed_name, lane)?;
        let embed = std::sync::OnceLock::new();
        if b.weight_rows(&embed_w, &[0])?.is_none() {
            let _ = embed.set(t.tensor(b, &embed_name)?);
        }
        Ok(Self {
            embed,
            embed_w,
            n_ctx: positions.shape()[0],
            positions,
            layers,
            ln: Norm::load(b, t, &format!("{p}.layer_norm"))?,
            ln_fused: LnParams::load(b, t, &format!("{p}.layer_norm"))?,
            fused,
            heads: cfg.decoder_heads,
            d: cfg.d_model,
            vocab: cfg.vocab_size,
            id: crate::next_chain_id(),
            slots: Arc::new(Mutex::new(Slots {
                selfs: Vec::new(),
                cross: Vec::new(),
                live: 0,
                concurrent: false,
            })),
            device_steps: AtomicU8::new(0),
            ahead: AtomicU8::new(0),
        })
    }

    /// Whether [`Self::select_step_ahead`] may queue the next step: `None` = yes unless
    /// `STAPES_DECODE_AHEAD=0` (the default), `Some(on)` = forced (tests compare both).
    pub fn set_ahead(&self, on: Option<bool>) {
        let v = match on {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
        self.ahead.store(v, Ordering::Relaxed);
    }

    /// The setting of [`Self::set_ahead`], resolved.
    pub fn ahead_enabled(&self) -> bool {
        match self.ahead.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => ahead_on(),
        }
    }

    /// Whether [`Self::step_logits`] runs the step chain (device-side parameters, captured and
    /// replayed) or the host-parameter forward pass: `None` = the chain where the home captures
    /// chains (the default; elsewhere it would only add copies), `Some(on)` = forced.
    pub fn set_device_steps(&self, on: Option<bool>) {
        let v = match on {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
        self.device_steps.store(v, Ordering::Relaxed);
    }

    /// Threads are about to decode side by side (batched transcription). Marked before any of
    /// them makes a state: the first thread's step capture would otherwise race the others'
    /// launches on the home's one stream.
    pub(crate) fn expect_concurrent(&self) {
        lock(&self.slots).concurrent = true;
    }

    /// The setting of [`Self::set_device_steps`].
    pub fn device_steps_setting(&self) -> Option<bool> {
        match self.device_steps.load(Ordering::Relaxed) {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        }
    }

    /// Whether steps on `b` run the step chain: by default where `b` captures chains and this
    /// decoder has never had two states alive at once (see `Slots::concurrent`).
    pub fn device_steps(&self, b: &B) -> bool {
        self.device_steps_setting()
            .unwrap_or_else(|| b.captures_chains() && !lock(&self.slots).concurrent)
    }

    /// Self caches for `batch` sequences: a free slot of that batch, else fresh zeroed ones.
    fn lease_self(&self, b: &B, batch: usize) -> Result<SelfSlot<B>> {
        {
            let mut slots = lock(&self.slots);
            if let Some(i) = slots.selfs.iter().position(|s| s.batch == batch) {
                return Ok(slots.selfs.swap_remove(i));
            }
        }
        let zeros = HostTensor::zeros(vec![batch, self.n_ctx, self.d]);
        let mut s = SelfSlot {
            id: crate::next_chain_id(),
            batch,
            k: Vec::with_capacity(self.layers.len()),
            v: Vec::with_capacity(self.layers.len()),
            step: None,
        };
        for _ in &self.layers {
            s.k.push(b.upload(&zeros)?);
            s.v.push(b.upload(&zeros)?);
        }
        Ok(s)
    }

    /// A cross slot holding a copy of `cross`.
    fn lease_cross(&self, b: &B, cross: &CrossKv<B>) -> Result<CrossSlot<B>> {
        let shape =
            cross.k.first().map(|t| t.shape().to_vec()).ok_or_else(|| {
                ModelError::BadInput("cross K/V of a decoder without layers".into())
            })?;
        let found = {
            let mut slots = lock(&self.slots);
            slots
                .cross
                .iter()
                .position(|s| s.k.first().map(|t| t.shape()) == Some(&shape[..]))
                .map(|i| slots.cross.swap_remove(i))
        };
        let mut slot = match found {
            Some(s) => s,
            None => {
                let zeros = HostTensor::zeros(shape.clone());
                let mut s = CrossSlot {
                    id: crate::next_chain_id(),
                    k: Vec::with_capacity(self.layers.len()),
                    v: Vec::with_capacity(self.layers.len()),
                };
                // the cross K/V's storage (compact_copy), so the copies below keep it
                for _ in &self.layers {
                    s.k.push(b.compact_copy(&b.upload(&zeros)?)?);
                    s.v.push(b.compact_copy(&b.upload(&zeros)?)?);
                }
                s
            }
        };
        for (dst, src) in slot.k.iter_mut().zip(&cross.k) {
            b.write_rows(dst, src, 0)?; // (1, n_audio_ctx, d)
        }
        for (dst, src) in slot.v.iter_mut().zip(&cross.v) {
            b.write_rows(dst, src, 0)?;
        }
        Ok(slot)
    }

    /// Embedding rows of `ids` from the stored tied weight, `(len(ids), d)`.
    fn embed_rows(&self, b: &B, ids: &[u32]) -> Result<B::Tensor> {
        let declined = || stapes_core::Error::Decline {
            op: "weight_rows",
            backend: b.name(),
            reason: "the embedding rows it gave at load".into(),
        };
        Ok(b.weight_rows(&self.embed_w, ids)?.ok_or_else(declined)?)
    }

    /// The `(V, d)` embedding table, made from the stored weight on first use where load
    /// did not keep one.
    fn table(&self, b: &B) -> Result<&B::Tensor> {
        if self.embed.get().is_none() {
            let all: Vec<u32> = (0..self.vocab as u32).collect();
            let _ = self.embed.set(self.embed_rows(b, &all)?);
        }
        Ok(self
            .embed
            .get()
            .ok_or_else(|| stapes_core::Error::Decline {
                op: "weight_rows",
                backend: b.name(),
                reason: "the embedding table".into(),
            })?)
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Cross K/V of `encoded (1, n_audio_ctx, d)` for every layer.
    pub fn cross_kv(&self, b: &B, encoded: &B::Tensor) -> Result<CrossKv<B>> {
        let s = encoded.shape();
        if s.len() != 3 || s[0] != 1 || s[2] != self.d {
            return Err(ModelError::BadInput(format!(
                "encoded window must be (1, T, {}), got {s:?}",
                self.d
            )));
        }
        let mut kv = CrossKv {
            k: Vec::with_capacity(self.layers.len()),
            v: Vec::with_capacity(self.layers.len()),
        };
        // in the home's compact storage (f16 where the home has it): every decoder step reads
        // all of them
        for layer in &self.layers {
            let (k, v) = (&layer.cross.k, &layer.cross.v);
            kv.k.push(b.linear_compact(encoded, &k.w, k.b.as_ref())?); // (1, 1500, d)
            kv.v.push(b.linear_compact(encoded, &v.w, v.b.as_ref())?);
        }
        Ok(kv)
    }

    /// Fresh self-attention caches for `batch` sequences over a window's cross K/V.
    pub fn new_state<'a>(
        &self,
        b: &B,
        cross: &'a CrossKv<B>,
        batch: usize,
    ) -> Result<DecoderState<'a, B>> {
        if batch == 0 {
            return Err(ModelError::BadInput("decoder state for 0 sequences".into()));
        }
        let s = self.lease_self(b, batch)?;
        {
            let mut slots = lock(&self.slots);
            slots.live += 1;
            slots.concurrent |= slots.live > 1;
        }
        Ok(DecoderState {
            batch,
            len: 0,
            slot_id: s.id,
            self_k: s.k,
            self_v: s.v,
            step: s.step,
            cross,
            cross_slot: None,
            ahead: None,
            slots: self.slots.clone(),
        })
    }

    /// Reorder (and possibly resize) the batch: sequence `i` of the result continues sequence
    /// `idx[i]` (beam search; expanding one prompt into several candidates).
    pub fn reorder(&self, b: &B, st: &mut DecoderState<'_, B>, idx: &[usize]) -> Result<()> {
        if idx.iter().any(|&i| i >= st.batch) {
            return Err(ModelError::BadInput(format!(
                "reorder index out of range (batch {})",
                st.batch
            )));
        }
        if idx.len() == st.batch && idx.iter().enumerate().all(|(i, &j)| i == j) {
            return Ok(());
        }
        st.drop_ahead();
        // Another batch size moves into that size's buffers, so its step chain finds them.
        let mut fresh = if idx.len() != st.batch {
            Some(self.lease_self(b, idx.len())?)
        } else {
            None
        };
        if st.len > 0 {
            for l in 0..st.self_k.len() {
                for keys in [true, false] {
                    let cache = if keys {
                        &mut st.self_k[l]
                    } else {
                        &mut st.self_v[l]
                    };
                    // Only the filled rows move: the copy grows with the sequence, not with
                    // n_text_ctx.
                    let rows = b.slice(cache, 1, 0, st.len)?; // (batch, len, d)
                    let rows = b.gather_batch(&rows, idx)?; // (idx, len, d)
                    let dst = match &mut fresh {
                        Some(f) if keys => &mut f.k[l],
                        Some(f) => &mut f.v[l],
                        None => cache,
                    };
                    b.write_rows(dst, &rows, 0)?;
                }
            }
        }
        if let Some(f) = fresh {
            let old = st.swap_slot(f);
            lock(&self.slots).give_back_self(old);
        }
        Ok(())
    }

    /// `tokens (batch·n)` at positions `len .. len+n` → final hidden states `(batch, n, d)`.
    pub fn forward(
        &self,
        b: &B,
        st: &mut DecoderState<'_, B>,
        tokens: &[u32],
        n: usize,
    ) -> Result<B::Tensor> {
        let (x, _) = self.forward_inner(b, st, tokens, n, &[])?;
        self.ln.forward(b, &x)
    }

    /// Like [`Self::forward`], also returning the cross-attention probabilities
    /// `(batch, H, n, n_audio_ctx)` of the decoder layers listed in `probs_of` (word alignment).
    pub fn forward_with_probs(
        &self,
        b: &B,
        st: &mut DecoderState<'_, B>,
        tokens: &[u32],
        n: usize,
        probs_of: &[usize],
    ) -> Result<(B::Tensor, Vec<B::Tensor>)> {
        let (x, probs) = self.forward_inner(b, st, tokens, n, probs_of)?;
        Ok((self.ln.forward(b, &x)?, probs))
    }

    fn check_tokens(&self, st: &DecoderState<'_, B>, tokens: &[u32], n: usize) -> Result<()> {
        let batch = st.batch;
        if n == 0 || tokens.len() != batch * n {
            return Err(ModelError::BadInput(format!(
                "{} tokens for a batch of {batch} × {n}",
                tokens.len()
            )));
        }
        if st.len + n > self.n_ctx {
            return Err(ModelError::BadInput(format!(
                "decoder context exceeded: {} + {n} > {} positions",
                st.len, self.n_ctx
            )));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= self.vocab) {
            return Err(ModelError::BadInput(format!(
                "token id {t} outside the vocabulary ({})",
                self.vocab
            )));
        }
        Ok(())
    }

    /// The blocks over `tokens`: the residual stream `(batch, n, d)` before the final norm.
    fn forward_inner(
        &self,
        b: &B,
        st: &mut DecoderState<'_, B>,
        tokens: &[u32],
        n: usize,
        probs_of: &[usize],
    ) -> Result<(B::Tensor, Vec<B::Tensor>)> {
        st.drop_ahead();
        self.check_tokens(st, tokens, n)?;
        let batch = st.batch;
        let offset = st.len;
        let x = match self.embed.get() {
            Some(table) => b.gather_rows(table, tokens)?, // (batch·n, d)
            None => self.embed_rows(b, tokens)?,
        };
        let x = b.reshape(&x, &[batch, n, self.d])?; // (batch, n, d)
        let pos = b.slice(&self.positions, 0, offset, n)?; // (n, d)
        let x = b.add(&x, &pos)?;
        let cross = st.cross;
        let (x, probs) = self.layers_forward(
            b,
            x,
            (&mut st.self_k, &mut st.self_v),
            (&cross.k, &cross.v),
            At::Host { offset },
            probs_of,
        )?;
        st.len += n;
        Ok((x, probs))
    }

    /// The decoder blocks over `x (batch, n, d)`: the new K/V rows go into the self caches at
    /// `at`, self-attention covers the cache up to them, cross-attention the window's K/V.
    fn layers_forward(
        &self,
        b: &B,
        mut x: B::Tensor,
        (self_k, self_v): (&mut [B::Tensor], &mut [B::Tensor]),
        (cross_k, cross_v): (&[B::Tensor], &[B::Tensor]),
        at: At<'_, B::Tensor>,
        probs_of: &[usize],
    ) -> Result<(B::Tensor, Vec<B::Tensor>)> {
        let (batch, n) = (x.shape()[0], x.shape()[1]);
        let mut probs = Vec::with_capacity(probs_of.len());
        for (l, layer) in self.layers.iter().enumerate() {
            let (self_k, self_v) = (&mut self_k[l], &mut self_v[l]);
            x = match &layer.blocks {
                Blocks::Fused { .. } => self.block_fused(b, layer, x, (self_k, self_v), at)?,
                Blocks::Split { .. } => self.block_split(b, layer, x, (self_k, self_v), at)?,
            };
            // cross-attention: every query row of every sequence attends the same window, so the
            // batch folds into the time axis and one K/V copy serves all sequences
            let q = match &layer.blocks {
                Blocks::Fused { cross_ln, .. } => {
                    let f = fused(&layer.cross.q, Some(cross_ln), None, None);
                    b.norm_linear(&x, &layer.cross.q.w, &f)?
                }
                Blocks::Split { cross_ln, .. } => {
                    layer.cross.q.forward(b, &cross_ln.forward(b, &x)?)?
                }
            }; // (batch, n, d)
            let q = b.reshape(&q, &[1, batch * n, self.d])?; // (1, batch·n, d)
            let p = attn_params(&q, self.heads, None, false);
            let a = b.attention_decode(&q, &cross_k[l], &cross_v[l], &p)?; // (1, batch·n, d)
            if probs_of.contains(&l) {
                let pr = b.attention_probs(&q, &cross_k[l], &p)?; // (1, H, batch·n, Tk)
                probs.push(pr);
            }
            let a = b.reshape(&a, &[batch, n, self.d])?;
            x = match &layer.blocks {
                Blocks::Fused {
                    mlp_ln, fc1, fc2, ..
                } => {
                    let f = fused(&layer.cross.o, None, None, Some(&x));
                    let x = b.norm_linear(&a, &layer.cross.o.w, &f)?;
                    let f = fused(fc1, Some(mlp_ln), Some(Activation::Gelu), None);
                    let h = b.norm_linear(&x, &fc1.w, &f)?; // (batch, n, 4d)
                    let f = fused(fc2, None, None, Some(&x));
                    b.norm_linear(&h, &fc2.w, &f)?
                }
                Blocks::Split { mlp_ln, mlp, .. } => {
                    let x = b.add(&x, &layer.cross.o.forward(b, &a)?)?;
                    let h = mlp_ln.forward(b, &x)?;
                    b.add(&x, &mlp.forward(b, &h)?)?
                }
            };
        }
        Ok((x, probs))
    }

    /// Causal self-attention of the fused form over `x (batch, n, d)`, its residual added.
    fn block_fused(
        &self,
        b: &B,
        layer: &DecoderLayer<B>,
        x: B::Tensor,
        (self_k, self_v): (&mut B::Tensor, &mut B::Tensor),
        at: At<'_, B::Tensor>,
    ) -> Result<B::Tensor> {
        let Blocks::Fused {
            self_ln,
            self_qkv,
            self_o,
            ..
        } = &layer.blocks
        else {
            return Err(ModelError::BadInput(
                "a split block in the fused path".into(),
            ));
        };
        let n = x.shape()[1];
        let f = fused(self_qkv, Some(self_ln), None, None);
        let a = match at {
            At::Host { offset } => {
                let qkv = b.norm_linear(&x, &self_qkv.w, &f)?; // (batch, n, 3d)
                let d = self.d;
                let q = b.slice(&qkv, 2, 0, d)?;
                b.write_rows(self_k, &b.slice(&qkv, 2, d, d)?, offset)?;
                b.write_rows(self_v, &b.slice(&qkv, 2, 2 * d, d)?, offset)?;
                let p = attn_params(&q, self.heads, Some(offset + n), true);
                b.attention(&q, self_k, self_v, &p)?
            }
            At::Step(step) => {
                let qkv = b.qkv_step(&x, &self_qkv.w, &f, (&mut *self_k, &mut *self_v), step)?;
                let p = attn_params(&x, self.heads, None, true);
                b.attention_step_packed(&qkv, self_k, self_v, &p, step)? // (batch, 1, d)
            }
        };
        let f = fused(self_o, None, None, Some(&x));
        Ok(b.norm_linear(&a, &self_o.w, &f)?)
    }

    /// The same in the split form (norm, three projections, attention, projection, add).
    fn block_split(
        &self,
        b: &B,
        layer: &DecoderLayer<B>,
        x: B::Tensor,
        (self_k, self_v): (&mut B::Tensor, &mut B::Tensor),
        at: At<'_, B::Tensor>,
    ) -> Result<B::Tensor> {
        let Blocks::Split {
            self_ln, self_attn, ..
        } = &layer.blocks
        else {
            return Err(ModelError::BadInput(
                "a fused block in the split path".into(),
            ));
        };
        let n = x.shape()[1];
        let h = self_ln.forward(b, &x)?;
        let q = self_attn.q.forward(b, &h)?; // (batch, n, d)
        let k = self_attn.k.forward(b, &h)?;
        let v = self_attn.v.forward(b, &h)?;
        let a = match at {
            At::Host { offset } => {
                b.write_rows(self_k, &k, offset)?;
                b.write_rows(self_v, &v, offset)?;
                let p = attn_params(&q, self.heads, Some(offset + n), true);
                b.attention(&q, self_k, self_v, &p)?
            }
            At::Step(step) => {
                b.write_rows_step(self_k, &k, step)?;
                b.write_rows_step(self_v, &v, step)?;
                let p = attn_params(&q, self.heads, None, true);
                b.attention_step(&q, self_k, self_v, &p, step)?
            }
        };
        Ok(b.add(&x, &self_attn.o.forward(b, &a)?)?)
    }

    /// One decoding step of every sequence: `tokens (batch)` at position `len` → the logits
    /// `(batch, V)` on the host. With device steps on, the ids and the position go into the
    /// state's step tensor and the whole step (embedding to logits) runs as one chain per
    /// (decoder, batch, window shape), which a GPU home captures once and replays for every
    /// step of every window; otherwise the host-parameter forward pass runs. Both compute the
    /// same ops on the same values.
    pub fn step_logits(
        &self,
        b: &B,
        st: &mut DecoderState<'_, B>,
        tokens: &[u32],
    ) -> Result<HostTensor> {
        let batch = st.batch;
        let l = b.download_step(&self.step_logits_device(b, st, tokens)?)?; // (batch, 1, V)
        Ok(l.reshape(vec![batch, self.vocab])?)
    }

    /// [`Self::step_logits`] without the download: the logits `(batch, 1, V)` where the step
    /// ran, for a caller that chooses tokens there (`Backend::select_tokens`). Read them before
    /// the next step: a replayed chain writes its output in place.
    pub fn step_logits_device(
        &self,
        b: &B,
        st: &mut DecoderState<'_, B>,
        tokens: &[u32],
    ) -> Result<B::Tensor> {
        match st.ahead.take() {
            // queued behind the last selection with these very ids: same position, same values
            Some(a) if a.ids == tokens => return Ok(a.logits),
            Some(_) => st.len -= 1,
            None => {}
        }
        self.check_tokens(st, tokens, 1)?;
        if !self.device_steps(b) {
            let (x, _) = self.forward_inner(b, st, tokens, 1, &[])?; // (batch, 1, d)
            return self.logits_of_stream(b, &x); // (batch, 1, V)
        }
        if st.cross_slot.is_none() {
            st.cross_slot = Some(self.lease_cross(b, st.cross)?);
        }
        let params = StepParams {
            position: st.len,
            ids: tokens.to_vec(),
        }
        .to_host()?;
        match &mut st.step {
            // refreshed in place: the chain recorded this tensor's storage
            Some(t) => b.write_host(t, &params)?,
            None => st.step = Some(b.upload(&params)?),
        }
        self.step_chain(b, st)
    }

    /// Choose each row's tokens from `logits`, the last step's `(batch, 1, V)`, by `req`, and
    /// with `more` (another step will follow) and where it can — [`Self::set_ahead`] on, the
    /// step chain in use, one candidate a row — queue that next step behind the selection with the
    /// chosen ids written into its parameters on the device
    /// ([`Backend::select_tokens_feed`]): the device then does not wait for the host between
    /// steps. [`Self::step_logits_device`] with the same ids returns the queued step's logits;
    /// other ids, [`Self::reorder`] or a forward pass drop it and write its position again.
    pub fn select_step_ahead(
        &self,
        b: &B,
        st: &mut DecoderState<'_, B>,
        logits: &B::Tensor,
        req: &SelectRequest<'_>,
        more: bool,
    ) -> Result<Selected> {
        let can = more
            && self.ahead_enabled()
            && req.k == 1
            && st.ahead.is_none()
            && st.len < self.n_ctx
            && st.cross_slot.is_some()
            && self.device_steps(b);
        let Some(step) = st.step.as_mut().filter(|_| can) else {
            return Ok(b.select_tokens(logits, req)?);
        };
        let pending = b.select_tokens_feed(logits, req, step, st.len)?;
        let next = self.step_chain(b, st);
        let sel = pending.wait();
        // the answer is waited for whether or not the queued step failed
        let next = next?;
        let sel = sel.inspect_err(|_| st.len -= 1)?;
        st.ahead = Some(Ahead {
            ids: sel.best_ids(st.batch),
            logits: next,
        });
        Ok(sel)
    }

    /// Replay (or record) the step chain on the parameters already in the state's step tensor.
    fn step_chain(&self, b: &B, st: &mut DecoderState<'_, B>) -> Result<B::Tensor> {
        let batch = st.batch;
        let (Some(step), Some(cross)) = (&st.step, &st.cross_slot) else {
            return Err(ModelError::BadInput("decoder step buffers missing".into()));
        };
        let key = format!(
            "whisper-step/dec{}/self{}/cross{}/b{batch}",
            self.id, st.slot_id, cross.id
        );
        let (self_k, self_v) = (&mut st.self_k, &mut st.self_v);
        let logits = crate::chain_one(b, &key, "whisper decoder step", &mut |b| {
            let x = b.embed_step(self.table(b)?, &self.positions, step)?; // (batch, 1, d)
            let (x, _) = self.layers_forward(
                b,
                x,
                (self_k, self_v),
                (&cross.k, &cross.v),
                At::Step(step),
                &[],
            )?;
            self.logits_of_stream(b, &x) // (batch, 1, V)
        })?;
        st.len += 1;
        Ok(logits)
    }

    /// Logits of the residual stream before the final norm `(.., d)` → `(.., V)`: the norm
    /// rides in the logits projection.
    fn logits_of_stream(&self, b: &B, x: &B::Tensor) -> Result<B::Tensor> {
        if !self.fused {
            return self.logits(b, &self.ln.forward(b, x)?);
        }
        let f = LinearFusion {
            norm: Some(self.ln_fused.r()),
            ..Default::default()
        };
        Ok(b.norm_linear(x, &self.embed_w, &f)?)
    }

    /// Logits of hidden states `(.., d)` → `(.., V)`.
    pub fn logits(&self, b: &B, hidden: &B::Tensor) -> Result<B::Tensor> {
        Ok(b.linear(hidden, &self.embed_w, None)?)
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::WhisperConfig;
    use super::super::model::Whisper;
    use super::super::weights::synthetic_checkpoint;
    use stapes_core::{Backend, HostTensor, Lane};
    use stapes_cpu::CpuBackend;

    /// The step chain (parameters read from the step tensor by the default `*_step` ops) and
    /// the host-parameter pass are the same ops on the same values: equal logits, step by
    /// step, across a batch change (a reorder into another slot) and a second window that
    /// reuses the first window's buffers.
    #[test]
    fn device_steps_equal_host_steps_across_reorders_and_windows() {
        let cfg = WhisperConfig::published("whisper-tiny").expect("shape");
        let ck = synthetic_checkpoint(&cfg, 5).expect("synthetic");
        let m = Whisper::new(CpuBackend::new(1).expect("cpu"), &ck, Lane::F32).expect("model");
        let b = m.backend();
        let sot = m.tokenizer.sot();
        for window in 0..2u64 {
            let enc = HostTensor::random(vec![1, cfg.n_audio_ctx, cfg.d_model], 40 + window, 1.0);
            let cross = m.cross_kv(&b.upload(&enc).expect("up")).expect("cross");
            let mut got = Vec::new();
            for device in [false, true] {
                m.set_device_steps(Some(device));
                let mut st = m.decoder_state(&cross, 1).expect("state");
                let mut rows = Vec::new();
                rows.push(m.decode_step(&mut st, &[sot]).expect("step 0").data);
                m.decoder.reorder(b, &mut st, &[0, 0, 0]).expect("expand");
                rows.push(m.decode_step(&mut st, &[11, 12, 13]).expect("step 1").data);
                m.decoder.reorder(b, &mut st, &[2, 0, 1]).expect("permute");
                rows.push(m.decode_step(&mut st, &[21, 22, 23]).expect("step 2").data);
                m.decoder.reorder(b, &mut st, &[1, 2]).expect("shrink");
                rows.push(m.decode_step(&mut st, &[31, 32]).expect("step 3").data);
                assert_eq!(st.len(), 4);
                got.push(rows);
            }
            for (s, (h, d)) in got[0].iter().zip(&got[1]).enumerate() {
                assert_eq!(h.len(), d.len());
                let same = h.iter().zip(d).all(|(a, c)| a.to_bits() == c.to_bits());
                assert!(same, "window {window} step {s}: device-step logits differ");
            }
        }
        m.set_device_steps(None);
    }
}
