//! Whisper's text decoder: token + learned positions, pre-LN blocks with causal self-attention over
//! a preallocated KV cache and cross-attention over the encoded window, logits against the tied
//! token embedding.

use super::config::WhisperConfig;
use super::model::{attn_params, Attn, Linear, Mlp, Norm, Tensors};
use crate::{ModelError, Result};
use stapes_core::{Backend, DeviceTensor, HostTensor, Lane};

pub(crate) struct DecoderLayer<B: Backend> {
    self_ln: Norm<B>,
    self_attn: Attn<B>,
    cross_ln: Norm<B>,
    cross_q: Linear<B>,
    cross_k: Linear<B>,
    cross_v: Linear<B>,
    cross_o: Linear<B>,
    mlp_ln: Norm<B>,
    mlp: Mlp<B>,
}

pub(crate) struct Decoder<B: Backend> {
    /// (V, d): the lookup table of the input embedding.
    embed: B::Tensor,
    /// The same matrix as the tied output projection `(V, d)`, in the lane.
    embed_w: B::Weight,
    /// (n_text_ctx, d)
    positions: B::Tensor,
    layers: Vec<DecoderLayer<B>>,
    ln: Norm<B>,
    heads: usize,
    d: usize,
    n_ctx: usize,
    vocab: usize,
}

/// Cross-attention K/V of one encoded window, per layer `(1, n_audio_ctx, d)`: computed once per
/// window and shared by language detection, every temperature, every beam and the alignment.
pub struct CrossKv<B: Backend> {
    k: Vec<B::Tensor>,
    v: Vec<B::Tensor>,
}

/// Per-sequence decoding state: the self-attention caches of `batch` sequences over one window.
pub struct DecoderState<'a, B: Backend> {
    batch: usize,
    len: usize,
    /// Per layer `(batch, n_text_ctx, d)`, rows `0..len` valid.
    self_k: Vec<B::Tensor>,
    self_v: Vec<B::Tensor>,
    cross: &'a CrossKv<B>,
}

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
}

impl<B: Backend> Decoder<B> {
    pub fn load(b: &B, t: &Tensors<'_>, cfg: &WhisperConfig, lane: Lane) -> Result<Self> {
        let p = "model.decoder";
        let embed_name = format!("{p}.embed_tokens.weight");
        let embed_host = t.get(&embed_name)?;
        if embed_host.shape != [cfg.vocab_size, cfg.d_model] {
            return Err(t.bad(
                &embed_name,
                &format!(
                    "expected ({}, {}), got {:?}",
                    cfg.vocab_size, cfg.d_model, embed_host.shape
                ),
            ));
        }
        let mut layers = Vec::with_capacity(cfg.decoder_layers);
        for l in 0..cfg.decoder_layers {
            let q = format!("{p}.layers.{l}");
            layers.push(DecoderLayer {
                self_ln: Norm::load(b, t, &format!("{q}.self_attn_layer_norm"))?,
                self_attn: Attn::load(b, t, &format!("{q}.self_attn"), lane)?,
                cross_ln: Norm::load(b, t, &format!("{q}.encoder_attn_layer_norm"))?,
                cross_q: Linear::load(b, t, &format!("{q}.encoder_attn.q_proj"), lane)?,
                cross_k: Linear::load(b, t, &format!("{q}.encoder_attn.k_proj"), lane)?,
                cross_v: Linear::load(b, t, &format!("{q}.encoder_attn.v_proj"), lane)?,
                cross_o: Linear::load(b, t, &format!("{q}.encoder_attn.out_proj"), lane)?,
                mlp_ln: Norm::load(b, t, &format!("{q}.final_layer_norm"))?,
                mlp: Mlp::load(b, t, &q, lane)?,
            });
        }
        let positions = t.tensor(b, &format!("{p}.embed_positions.weight"))?;
        Ok(Self {
            embed: b.upload(embed_host)?,
            embed_w: t.weight(b, &embed_name, lane)?,
            n_ctx: positions.shape()[0],
            positions,
            layers,
            ln: Norm::load(b, t, &format!("{p}.layer_norm"))?,
            heads: cfg.decoder_heads,
            d: cfg.d_model,
            vocab: cfg.vocab_size,
        })
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
        for layer in &self.layers {
            kv.k.push(layer.cross_k.forward(b, encoded)?); // (1, 1500, d)
            kv.v.push(layer.cross_v.forward(b, encoded)?);
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
        let mut st = DecoderState {
            batch,
            len: 0,
            self_k: Vec::with_capacity(self.layers.len()),
            self_v: Vec::with_capacity(self.layers.len()),
            cross,
        };
        let zeros = HostTensor::zeros(vec![batch, self.n_ctx, self.d]);
        for _ in &self.layers {
            st.self_k.push(b.upload(&zeros)?);
            st.self_v.push(b.upload(&zeros)?);
        }
        Ok(st)
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
        let fresh = idx.len() != st.batch;
        let zeros = if fresh {
            Some(HostTensor::zeros(vec![idx.len(), self.n_ctx, self.d]))
        } else {
            None
        };
        for cache in st.self_k.iter_mut().chain(st.self_v.iter_mut()) {
            // Only the filled rows move: the copy grows with the sequence, not with n_text_ctx.
            let live = if st.len > 0 {
                let rows = b.slice(cache, 1, 0, st.len)?; // (batch, len, d)
                Some(b.gather_batch(&rows, idx)?) // (idx, len, d)
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
        st.batch = idx.len();
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
        self.forward_inner(b, st, tokens, n, &[]).map(|(x, _)| x)
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
        self.forward_inner(b, st, tokens, n, probs_of)
    }

    fn forward_inner(
        &self,
        b: &B,
        st: &mut DecoderState<'_, B>,
        tokens: &[u32],
        n: usize,
        probs_of: &[usize],
    ) -> Result<(B::Tensor, Vec<B::Tensor>)> {
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
        let offset = st.len;
        let x = b.gather_rows(&self.embed, tokens)?; // (batch·n, d)
        let x = b.reshape(&x, &[batch, n, self.d])?; // (batch, n, d)
        let pos = b.slice(&self.positions, 0, offset, n)?; // (n, d)
        let mut x = b.add(&x, &pos)?;
        let mut probs = Vec::with_capacity(probs_of.len());
        for (l, layer) in self.layers.iter().enumerate() {
            // causal self-attention over the cache
            let h = layer.self_ln.forward(b, &x)?;
            let q = layer.self_attn.q.forward(b, &h)?; // (batch, n, d)
            let k = layer.self_attn.k.forward(b, &h)?;
            let v = layer.self_attn.v.forward(b, &h)?;
            b.write_rows(&mut st.self_k[l], &k, offset)?;
            b.write_rows(&mut st.self_v[l], &v, offset)?;
            let p = attn_params(&q, self.heads, Some(offset + n), true);
            let a = b.attention(&q, &st.self_k[l], &st.self_v[l], &p)?;
            x = b.add(&x, &layer.self_attn.o.forward(b, &a)?)?;

            // cross-attention: every query row of every sequence attends the same window, so the
            // batch folds into the time axis and one K/V copy serves all sequences
            let h = layer.cross_ln.forward(b, &x)?;
            let q = layer.cross_q.forward(b, &h)?; // (batch, n, d)
            let q = b.reshape(&q, &[1, batch * n, self.d])?; // (1, batch·n, d)
            let p = attn_params(&q, self.heads, None, false);
            let a = b.attention(&q, &st.cross.k[l], &st.cross.v[l], &p)?; // (1, batch·n, d)
            if probs_of.contains(&l) {
                let pr = b.attention_probs(&q, &st.cross.k[l], &p)?; // (1, H, batch·n, Tk)
                probs.push(pr);
            }
            let a = b.reshape(&a, &[batch, n, self.d])?;
            x = b.add(&x, &layer.cross_o.forward(b, &a)?)?;

            let h = layer.mlp_ln.forward(b, &x)?;
            x = b.add(&x, &layer.mlp.forward(b, &h)?)?;
        }
        st.len += n;
        Ok((self.ln.forward(b, &x)?, probs))
    }

    /// Logits of hidden states `(.., d)` → `(.., V)`.
    pub fn logits(&self, b: &B, hidden: &B::Tensor) -> Result<B::Tensor> {
        Ok(b.linear(hidden, &self.embed_w, None)?)
    }
}
