//! Qwen3-ASR's text model (transformers' `Qwen3Model` + `lm_head`): RMS norms, grouped-query
//! self-attention with a per-head RMS norm on q and k before rotary positions (rotate-half form,
//! base `rope_theta`), SwiGLU feed-forwards; the logits projection tied to the token embedding
//! unless the checkpoint has its own.
//!
//! The K/V cache holds every query head's rows (a key/value head's rows written once for each
//! query head that reads it), preallocated for the whole decode and written in place.

use super::config::TextConfig;
use super::weights::{text_layer, LM_HEAD, TEXT};
use crate::fastconformer::encoder::{Linear, Tensors};
use crate::Result;
use stapes_core::{Activation, AttnParams, Backend, DeviceTensor, HostTensor, Lane, StepParams};

/// Where a pass writes its K/V rows and how far its attention reads: from a host position, or
/// from a step tensor's (a captured chain, [`TextModel::step_chained`]).
#[derive(Clone, Copy)]
enum At<'a, B: Backend> {
    Host(usize),
    Step(&'a B::Tensor),
}

/// What a decoder step chain reads by address: a K/V cache, the step's input row and
/// [`StepParams`] tensor `(1, 1, 2)` (position, 0), and the rotary tables of every position of
/// the cache (cos and sin of the query heads, then of the key heads, `(rows, heads·Dh)`).
pub struct StepSlot<B: Backend> {
    pub cache: KvCache<B>,
    /// `(1, 1, hidden)`: the step's token embedding.
    x: B::Tensor,
    step: B::Tensor,
    rotary: [B::Tensor; 4],
    /// `(1, H·Dh)` and `(1, KV·Dh)` zeros: the one-row tables that make `embed_step` a gather
    /// of the rotary rows at the step's position.
    zero_q: B::Tensor,
    zero_k: B::Tensor,
}

struct Layer<B: Backend> {
    ln_attn: B::Tensor,
    /// q | k | v as one GEMM: `(H + 2·KV)·Dh` outputs.
    qkv: Linear<B>,
    o: Linear<B>,
    q_norm: B::Tensor,
    k_norm: B::Tensor,
    ln_mlp: B::Tensor,
    /// gate | up as one GEMM: `2·I` outputs.
    gate_up: Linear<B>,
    down: Linear<B>,
}

pub struct TextModel<B: Backend> {
    pub cfg: TextConfig,
    /// `(V, hidden)` in the lane: the logits projection when tied, and the embedding rows where
    /// the home can give them back (`Backend::weight_rows`).
    embed_w: B::Weight,
    /// `(V, hidden)` f32 lookup table, kept only where the home cannot give rows back.
    embed: Option<B::Tensor>,
    lm_head: Option<B::Weight>,
    layers: Vec<Layer<B>>,
    norm: B::Tensor,
}

/// Self-attention K/V rows of every layer, `(1, capacity, H·Dh)` each.
pub struct KvCache<B: Backend> {
    k: Vec<B::Tensor>,
    v: Vec<B::Tensor>,
    /// Rows written so far.
    pub len: usize,
    pub capacity: usize,
}

impl<B: Backend> TextModel<B> {
    pub(crate) fn load(be: &B, t: &Tensors<'_>, cfg: &TextConfig, lane: Lane) -> Result<Self> {
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let p = text_layer(i);
                let a = format!("{p}.self_attn");
                Ok(Layer {
                    ln_attn: t.tensor(be, &format!("{p}.input_layernorm.weight"))?,
                    qkv: Linear::load_stacked(
                        be,
                        t,
                        &[
                            format!("{a}.q_proj"),
                            format!("{a}.k_proj"),
                            format!("{a}.v_proj"),
                        ],
                        lane,
                    )?,
                    o: Linear::load(be, t, &format!("{a}.o_proj"), lane)?,
                    q_norm: t.tensor(be, &format!("{a}.q_norm.weight"))?,
                    k_norm: t.tensor(be, &format!("{a}.k_norm.weight"))?,
                    ln_mlp: t.tensor(be, &format!("{p}.post_attention_layernorm.weight"))?,
                    gate_up: Linear::load_stacked(
                        be,
                        t,
                        &[format!("{p}.mlp.gate_proj"), format!("{p}.mlp.up_proj")],
                        lane,
                    )?,
                    down: Linear::load(be, t, &format!("{p}.mlp.down_proj"), lane)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embed_name = format!("{TEXT}.embed_tokens.weight");
        let embed_w = t.weight(be, &embed_name, lane)?;
        let embed = match be.weight_rows(&embed_w, &[0])? {
            Some(_) => None,
            None => Some(t.tensor(be, &embed_name)?),
        };
        let lm_head = match cfg.tie_embeddings {
            true => None,
            false => Some(t.weight(be, LM_HEAD, lane)?),
        };
        Ok(Self {
            cfg: cfg.clone(),
            embed_w,
            embed,
            lm_head,
            layers,
            norm: t.tensor(be, &format!("{TEXT}.norm.weight"))?,
        })
    }

    /// Token embeddings `(1, n, hidden)` of `ids`.
    pub fn embed(&self, be: &B, ids: &[u32]) -> Result<B::Tensor> {
        let rows = match &self.embed {
            Some(table) => be.gather_rows(table, ids)?,
            None => {
                be.weight_rows(&self.embed_w, ids)?
                    .ok_or_else(|| stapes_core::Error::Decline {
                        op: "weight_rows",
                        backend: be.name(),
                        reason: "the embedding rows it gave at load".into(),
                    })?
            }
        };
        Ok(be.reshape(&rows, &[1, ids.len(), self.cfg.hidden])?)
    }

    /// Moves `cache` into tensors of `capacity` rows (its rows kept), so a decode allocates
    /// for the tokens it writes rather than for its limit.
    pub fn grow(&self, be: &B, cache: &mut KvCache<B>, capacity: usize) -> Result<()> {
        if capacity <= cache.capacity {
            return Ok(());
        }
        *cache = self.copy_cache(be, cache, capacity)?;
        Ok(())
    }

    /// A cache of `capacity` positions holding `cache`'s rows.
    pub fn copy_cache(&self, be: &B, cache: &KvCache<B>, capacity: usize) -> Result<KvCache<B>> {
        let mut bigger = self.cache(be, capacity.max(cache.len))?;
        if cache.len > 0 {
            for (dst, src) in bigger.k.iter_mut().zip(&cache.k) {
                be.write_rows(dst, &be.slice(src, 1, 0, cache.len)?, 0)?;
            }
            for (dst, src) in bigger.v.iter_mut().zip(&cache.v) {
                be.write_rows(dst, &be.slice(src, 1, 0, cache.len)?, 0)?;
            }
        }
        bigger.len = cache.len;
        Ok(bigger)
    }

    pub fn cache(&self, be: &B, capacity: usize) -> Result<KvCache<B>> {
        let width = self.cfg.n_heads * self.cfg.head_dim;
        let zeros = || be.upload(&HostTensor::zeros(vec![1, capacity, width]));
        let k = (0..self.layers.len())
            .map(|_| zeros())
            .collect::<stapes_core::Result<_>>()?;
        let v = (0..self.layers.len())
            .map(|_| zeros())
            .collect::<stapes_core::Result<_>>()?;
        Ok(KvCache {
            k,
            v,
            len: 0,
            capacity,
        })
    }

    /// Rotary `cos`, `sin` for positions `start .. start+n` over `heads` heads, `(n, heads·Dh)`,
    /// in f32 as transformers computes them (`inv_freq = 1/θ^(2i/Dh)`, angle `p·inv_freq`).
    fn rotary(
        &self,
        be: &B,
        start: usize,
        n: usize,
        heads: usize,
    ) -> Result<(B::Tensor, B::Tensor)> {
        let dh = self.cfg.head_dim;
        let half = dh / 2;
        let theta = self.cfg.rope_theta as f32;
        let inv: Vec<f32> = (0..half)
            .map(|i| 1.0 / theta.powf((2 * i) as f32 / dh as f32))
            .collect();
        let width = heads * dh;
        let (mut cos, mut sin) = (vec![0f32; n * width], vec![0f32; n * width]);
        for r in 0..n {
            let p = (start + r) as f32;
            for (i, &f) in inv.iter().enumerate() {
                let (s, c) = (p * f).sin_cos();
                for h in 0..heads {
                    for j in [h * dh + i, h * dh + half + i] {
                        cos[r * width + j] = c;
                        sin[r * width + j] = s;
                    }
                }
            }
        }
        Ok((
            be.upload(&HostTensor::new(vec![n, width], cos)?)?,
            be.upload(&HostTensor::new(vec![n, width], sin)?)?,
        ))
    }

    /// Runs `x (1, n, hidden)` at positions `cache.len ..` through every layer, appending their
    /// K/V to `cache`; returns the final-normed hidden states `(1, n, hidden)`.
    pub fn forward(&self, be: &B, x: &B::Tensor, cache: &mut KvCache<B>) -> Result<B::Tensor> {
        let cfg = &self.cfg;
        let n = x.shape()[1];
        let start = cache.len;
        if start + n > cache.capacity {
            return Err(crate::ModelError::BadInput(format!(
                "{} positions do not fit the {}-position cache",
                start + n,
                cache.capacity
            )));
        }
        let (h, kv) = (cfg.n_heads, cfg.n_kv_heads);
        let (cos_q, sin_q) = self.rotary(be, start, n, h)?;
        let (cos_k, sin_k) = self.rotary(be, start, n, kv)?;
        let rot = [&cos_q, &sin_q, &cos_k, &sin_k];
        let y = self.layers_forward(be, x, cache, rot, At::Host(start))?;
        cache.len = start + n;
        Ok(be.rms_norm(&y, &self.norm, cfg.rms_eps)?)
    }

    /// The layers over `x (1, n, hidden)` at `at`'s position with the rotary rows `rot` (cos and
    /// sin of the query heads, then of the key heads), appending to `cache`; the residual
    /// stream out, before the final norm.
    fn layers_forward(
        &self,
        be: &B,
        x: &B::Tensor,
        cache: &mut KvCache<B>,
        rot: [&B::Tensor; 4],
        at: At<'_, B>,
    ) -> Result<B::Tensor> {
        let cfg = &self.cfg;
        let n = x.shape()[1];
        let (h, kv, dh) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
        let p = AttnParams {
            n_heads: h,
            scale: (dh as f32).powf(-0.5),
            kv_len: match at {
                At::Host(start) => Some(start + n),
                At::Step(_) => None,
            },
            causal: true,
        };
        let mut cur: Option<B::Tensor> = None;
        for (i, l) in self.layers.iter().enumerate() {
            let x = cur.as_ref().unwrap_or(x);
            let hn = be.rms_norm(x, &l.ln_attn, cfg.rms_eps)?;
            let qkv = be.linear(&hn, &l.qkv.w, l.qkv.b.as_ref())?; // (1, n, (H+2KV)·Dh)
            let q = be.slice(&qkv, 2, 0, h * dh)?;
            let k = be.slice(&qkv, 2, h * dh, kv * dh)?;
            let v = be.slice(&qkv, 2, (h + kv) * dh, kv * dh)?;
            let q = self.head_norm(be, &q, &l.q_norm, h, n)?;
            let k = self.head_norm(be, &k, &l.k_norm, kv, n)?;
            let q = be.rotary_half(&q, rot[0], rot[1], dh)?;
            let k = be.rotary_half(&k, rot[2], rot[3], dh)?;
            let (k, v) = (self.repeat_kv(be, &k, n)?, self.repeat_kv(be, &v, n)?);
            let a = match at {
                At::Host(start) => {
                    be.write_rows(&mut cache.k[i], &k, start)?;
                    be.write_rows(&mut cache.v[i], &v, start)?;
                    be.attention(&q, &cache.k[i], &cache.v[i], &p)?
                }
                At::Step(step) => {
                    be.write_rows_step(&mut cache.k[i], &k, step)?;
                    be.write_rows_step(&mut cache.v[i], &v, step)?;
                    be.attention_step(&q, &cache.k[i], &cache.v[i], &p, step)?
                }
            };
            let x = be.linear_add(&a, &l.o.w, l.o.b.as_ref(), x)?;
            let hn = be.rms_norm(&x, &l.ln_mlp, cfg.rms_eps)?;
            let gu = be.linear(&hn, &l.gate_up.w, None)?; // (1, n, 2I)
            let gate = be.slice(&gu, 2, 0, cfg.intermediate)?;
            let up = be.slice(&gu, 2, cfg.intermediate, cfg.intermediate)?;
            let act = be.mul(&be.activation(&gate, Activation::Silu)?, &up)?;
            cur = Some(be.linear_add(&act, &l.down.w, None, &x)?);
        }
        Ok(match cur {
            Some(y) => y,
            None => be.reshape(x, x.shape())?,
        })
    }

    /// The buffers of the decoder step chain for a cache of `rows` positions
    /// ([`TextModel::step_chained`]).
    pub fn step_slot(&self, be: &B, rows: usize) -> Result<StepSlot<B>> {
        let (h, kv, dh) = (self.cfg.n_heads, self.cfg.n_kv_heads, self.cfg.head_dim);
        let (cos_q, sin_q) = self.rotary(be, 0, rows, h)?;
        let (cos_k, sin_k) = self.rotary(be, 0, rows, kv)?;
        let step = StepParams {
            position: 0,
            ids: vec![0],
        };
        Ok(StepSlot {
            cache: self.cache(be, rows)?,
            x: be.upload(&HostTensor::zeros(vec![1, 1, self.cfg.hidden]))?,
            step: be.upload(&step.to_host()?)?,
            rotary: [cos_q, sin_q, cos_k, sin_k],
            zero_q: be.upload(&HostTensor::zeros(vec![1, h * dh]))?,
            zero_k: be.upload(&HostTensor::zeros(vec![1, kv * dh]))?,
        })
    }

    /// One decoder step of token `id` at position `slot.cache.len`, run as the backend's chain
    /// `key` (captured and replayed where the home captures): its logits `(1, 1, V)`, which the
    /// next replay overwrites. The position lives in the slot's step tensor, so one chain serves
    /// every step of the slot's cache.
    pub fn step_chained(
        &self,
        be: &B,
        slot: &mut StepSlot<B>,
        id: u32,
        key: &str,
    ) -> Result<B::Tensor> {
        let pos = slot.cache.len;
        if pos >= slot.cache.capacity {
            return Err(crate::ModelError::BadInput(format!(
                "position {pos} is past the step chain's {}-position cache",
                slot.cache.capacity
            )));
        }
        be.write_rows(&mut slot.x, &self.embed(be, &[id])?, 0)?;
        let step = StepParams {
            position: pos,
            ids: vec![0],
        };
        be.write_host(&mut slot.step, &step.to_host()?)?;
        let StepSlot {
            cache,
            x,
            step,
            rotary,
            zero_q,
            zero_k,
        } = slot;
        let logits = crate::chain_one(be, key, "qwen3a decoder step", &mut |be| {
            // the step's rotary rows: row `pos` of each table, gathered on the device (a zero
            // one-row "token table" at id 0 plus the position's row of the table)
            let row = |zero: &B::Tensor, table: &B::Tensor| -> Result<B::Tensor> {
                let r = be.embed_step(zero, table, step)?; // (1, 1, W)
                Ok(be.reshape(&r, &[1, r.shape()[2]])?)
            };
            let rot = [
                row(zero_q, &rotary[0])?,
                row(zero_q, &rotary[1])?,
                row(zero_k, &rotary[2])?,
                row(zero_k, &rotary[3])?,
            ];
            let rot = [&rot[0], &rot[1], &rot[2], &rot[3]];
            let y = self.layers_forward(be, x, cache, rot, At::Step(step))?;
            let y = be.rms_norm(&y, &self.norm, self.cfg.rms_eps)?;
            self.logits(be, &y)
        })?;
        slot.cache.len = pos + 1;
        Ok(logits)
    }

    fn head_norm(
        &self,
        be: &B,
        x: &B::Tensor,
        g: &B::Tensor,
        heads: usize,
        n: usize,
    ) -> Result<B::Tensor> {
        let dh = self.cfg.head_dim;
        let y = be.rms_norm(&be.reshape(x, &[n * heads, dh])?, g, self.cfg.rms_eps)?;
        Ok(be.reshape(&y, &[1, n, heads * dh])?)
    }

    /// `(1, n, KV·Dh)` → `(1, n, H·Dh)`: key/value head `j` serves query heads
    /// `j·rep .. (j+1)·rep` (transformers' `repeat_kv`).
    fn repeat_kv(&self, be: &B, x: &B::Tensor, n: usize) -> Result<B::Tensor> {
        let (h, kv, dh) = (self.cfg.n_heads, self.cfg.n_kv_heads, self.cfg.head_dim);
        if h == kv {
            return Ok(be.reshape(x, &[1, n, h * dh])?);
        }
        let x4 = be.reshape(x, &[n, kv, 1, dh])?;
        let copies: Vec<&B::Tensor> = std::iter::repeat_n(&x4, h / kv).collect();
        let y = be.concat(&copies, 2)?; // (n, KV, rep, Dh)
        Ok(be.reshape(&y, &[1, n, h * dh])?)
    }

    /// Logits `(rows, V)` of the final-normed hidden states `(rows, hidden)` or `(1, rows, hidden)`.
    pub fn logits(&self, be: &B, hidden: &B::Tensor) -> Result<B::Tensor> {
        let w = self.lm_head.as_ref().unwrap_or(&self.embed_w);
        Ok(be.linear(hidden, w, None)?)
    }
}
