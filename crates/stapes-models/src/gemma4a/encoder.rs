//! The Gemma 4 audio tower (transformers' `Gemma4AudioModel`, a USM-style conformer).
//!
//! Features go through two stride-2 conv2d, each followed by a layer norm over channels and a
//! ReLU (4× fewer frames), and a linear into the model width. Each conformer layer is a half-step
//! feed-forward, chunked local self-attention, a causal light conv and a second half-step
//! feed-forward, every sub-block clamped and RMS-normed as transformers does. Attention runs in
//! blocks of `chunk` queries over a context of `chunk + past + right` keys, with relative
//! position terms (a sinusoid table through `relative_k_proj`, Transformer-XL's shift), logits
//! soft-capped by `cap·tanh(x/cap)` and masked by a sliding window and the valid tokens. Scores
//! are `(H·blocks, chunk, context)`: memory stays linear in the tokens.

use super::config::{conv_out, Gemma4AudioConfig, Layout};
use super::weights::{layer, tower_prefix, CLIP_BOUNDS, FULL_EMBED};
use crate::fastconformer::encoder::Tensors;
use crate::{ModelError, Result};
use stapes_core::{Activation, Backend, Conv2dParams, DeviceTensor, HostTensor, Lane};

/// `Gemma4RMSNorm`'s default epsilon, which the norms built without the config's use.
const NORM_EPS: f32 = 1e-6;

const SUBSAMPLE: Conv2dParams = Conv2dParams {
    kernel: (3, 3),
    stride: (2, 2),
    padding: (1, 1),
    groups: 1,
};

/// The device inputs of one pass besides the weights ([`AudioTower::prepare`]).
pub struct Inputs<B: Backend> {
    /// `(1, T, n_mels)`, the frames past the valid ones zero.
    pub features: B::Tensor,
    /// Tokens of the output that come from valid frames.
    pub valid_tokens: usize,
    /// `(1, T1)` 0/1 over the first conv's frames, where some are past the valid ones.
    keep1: Option<B::Tensor>,
    /// `(1, blocks·chunk·context)`, [`AudioTower::attention_keep`].
    keep: B::Tensor,
    /// Zero rows: the queries' tail to whole blocks, the keys' front and back context.
    q_pad: Option<B::Tensor>,
    front: Option<B::Tensor>,
    back: Option<B::Tensor>,
    /// `(H·blocks, chunk, context + 1 − positions)` zeros of the relative shift.
    rel_pad: B::Tensor,
}

/// `clamp(x, lo, hi)` from ReLUs: `x − relu(x − hi) + relu(lo − x)`. Values inside the bounds
/// come out bit-exact (both ReLUs are exactly 0), which `lo + relu(x − lo)` would not give
/// for bounds far from x. An infinite side costs nothing.
fn clamp<B: Backend>(be: &B, x: B::Tensor, lo: f32, hi: f32) -> Result<B::Tensor> {
    let mut y = x;
    if hi.is_finite() {
        let over = be.activation(&be.affine(&y, 1.0, -hi)?, Activation::Relu)?;
        y = be.add(&y, &be.affine(&over, -1.0, 0.0)?)?;
    }
    if lo.is_finite() {
        let under = be.activation(&be.affine(&y, -1.0, lo)?, Activation::Relu)?;
        y = be.add(&y, &under)?;
    }
    Ok(y)
}

/// `Gemma4ClippableLinear`: no bias; input and output clamped to the checkpoint's bounds.
struct ClipLinear<B: Backend> {
    w: B::Weight,
    input: (f32, f32),
    output: (f32, f32),
}

impl<B: Backend> ClipLinear<B> {
    fn load(be: &B, t: &Tensors<'_>, p: &str, clipped: bool, lane: Lane) -> Result<Self> {
        let open = (f32::NEG_INFINITY, f32::INFINITY);
        let (mut input, mut output) = (open, open);
        if clipped {
            let mut v = [0f32; 4];
            for (slot, b) in v.iter_mut().zip(CLIP_BOUNDS) {
                let name = format!("{p}.{b}");
                *slot = t.get(&name)?.data.first().copied().ok_or_else(|| {
                    ModelError::bad_tensor(t.path, &name, "a clip bound holds no value")
                })?;
            }
            (input, output) = ((v[0], v[1]), (v[2], v[3]));
        }
        Ok(Self {
            w: t.weight(be, &format!("{p}.linear.weight"), lane)?,
            input,
            output,
        })
    }

    fn run(&self, be: &B, x: B::Tensor) -> Result<B::Tensor> {
        let x = clamp(be, x, self.input.0, self.input.1)?;
        let y = be.linear(&x, &self.w, None)?;
        clamp(be, y, self.output.0, self.output.1)
    }
}

struct FeedForward<B: Backend> {
    pre: B::Tensor,
    up: ClipLinear<B>,
    down: ClipLinear<B>,
    /// The post norm's gain times `residual_weight`.
    post: B::Tensor,
}

struct Attention<B: Backend> {
    q: ClipLinear<B>,
    k: ClipLinear<B>,
    v: ClipLinear<B>,
    post: ClipLinear<B>,
    /// `(H·Dh)`: `Dh^-½/ln 2 · softplus(per_dim_scale)` for every head.
    q_scale: B::Tensor,
    /// `(H, P, Dh)`: the relative sinusoids through `relative_k_proj`, row `r` distance `P−1−r`.
    rel_k: B::Tensor,
}

struct LightConv<B: Backend> {
    pre: B::Tensor,
    start: ClipLinear<B>,
    /// `(C, K)` causal depthwise kernel.
    dw: B::Tensor,
    norm: B::Tensor,
    end: ClipLinear<B>,
}

struct Layer<B: Backend> {
    ff1: FeedForward<B>,
    norm_pre_attn: B::Tensor,
    attn: Attention<B>,
    norm_post_attn: B::Tensor,
    lconv: LightConv<B>,
    ff2: FeedForward<B>,
    norm_out: B::Tensor,
}

pub struct AudioTower<B: Backend> {
    pub cfg: Gemma4AudioConfig,
    /// `(C0, 1, 3, 3)` and `(C1, C0, 3, 3)` kernels, no bias.
    convs: [B::Tensor; 2],
    /// `(C)` gains of the layer norms after each conv (no bias).
    conv_norms: [B::Tensor; 2],
    /// `(d, F2·C1)`, no bias; a token's inputs are frequency-major, channel-minor.
    input_proj: B::Weight,
    layers: Vec<Layer<B>>,
    /// `(output_dims, d)` + bias.
    output_proj: (B::Weight, B::Tensor),
    /// `embed_audio` of a whole checkpoint: `(text hidden, output_dims)`, and ones for its
    /// scale-free RMS norm.
    embed: Option<(B::Weight, B::Tensor)>,
}

/// The relative sinusoids `(P, d)`: `[sin | cos]` of `pos · exp(−i·ln(10⁴)/max(d/2 − 1, 1))`
/// for `pos = P−1 … 0`, as `Gemma4AudioRelPositionalEncoding` builds them.
pub fn rel_positions(n_positions: usize, d: usize) -> HostTensor {
    let half = d / 2;
    let inc = 10000f64.ln() / (half.max(2) - 1) as f64;
    let inv: Vec<f32> = (0..half)
        .map(|i| (-(inc as f32) * i as f32).exp())
        .collect();
    let mut data = vec![0f32; n_positions * d];
    for (r, row) in data.chunks_exact_mut(d).enumerate() {
        let pos = (n_positions - 1 - r) as f32;
        for (i, &f) in inv.iter().enumerate() {
            let a = pos * f;
            row[i] = a.sin();
            row[half + i] = a.cos();
        }
    }
    HostTensor {
        shape: vec![n_positions, d],
        data,
    }
}

fn softplus(x: f64) -> f64 {
    // PyTorch's softplus switches to the identity above 20
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

impl<B: Backend> AudioTower<B> {
    pub(crate) fn load(
        be: &B,
        t: &Tensors<'_>,
        cfg: &Gemma4AudioConfig,
        lane: Lane,
    ) -> Result<Self> {
        let p = tower_prefix(cfg);
        let sub = format!("{p}subsample_conv_projection");
        let clipped = cfg.clipped_linears;
        let (h, dh) = (cfg.n_heads, cfg.head_dim());
        let ff = |l: &str, which: &str| -> Result<FeedForward<B>> {
            let f = format!("{l}.{which}");
            let post = t.get(&format!("{f}.post_layer_norm.weight"))?;
            let post = HostTensor::new(
                post.shape.clone(),
                post.data.iter().map(|g| g * cfg.residual_weight).collect(),
            )?;
            Ok(FeedForward {
                pre: t.tensor(be, &format!("{f}.pre_layer_norm.weight"))?,
                up: ClipLinear::load(be, t, &format!("{f}.ffw_layer_1"), clipped, lane)?,
                down: ClipLinear::load(be, t, &format!("{f}.ffw_layer_2"), clipped, lane)?,
                post: be.upload(&post)?,
            })
        };
        let positions = rel_positions(cfg.n_positions(), cfg.hidden);
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let l = layer(cfg, i);
            let a = format!("{l}.self_attn");
            let pds = t.get(&format!("{a}.per_dim_scale"))?;
            let base = (dh as f64).powf(-0.5) / std::f64::consts::LN_2;
            let scale: Vec<f32> = (0..h)
                .flat_map(|_| pds.data.iter().map(|&s| (base * softplus(s as f64)) as f32))
                .collect();
            // relative keys: (P, d) sinusoids · Wᵀ, regrouped per head as (H, P, Dh)
            let w = t.get(&format!("{a}.relative_k_proj.weight"))?; // (H·Dh, d)
            let (np, d) = (cfg.n_positions(), cfg.hidden);
            let mut rel = vec![0f32; h * np * dh];
            for r in 0..np {
                let x = &positions.data[r * d..(r + 1) * d];
                for (o, row) in w.data.chunks_exact(d).enumerate() {
                    let s: f64 = x.iter().zip(row).map(|(a, b)| *a as f64 * *b as f64).sum();
                    rel[((o / dh) * np + r) * dh + o % dh] = s as f32;
                }
            }
            let dw = t.get(&format!("{l}.lconv1d.depthwise_conv1d.weight"))?;
            let dw = dw.clone().reshape(vec![d, cfg.conv_kernel])?;
            layers.push(Layer {
                ff1: ff(&l, "feed_forward1")?,
                norm_pre_attn: t.tensor(be, &format!("{l}.norm_pre_attn.weight"))?,
                attn: Attention {
                    q: ClipLinear::load(be, t, &format!("{a}.q_proj"), clipped, lane)?,
                    k: ClipLinear::load(be, t, &format!("{a}.k_proj"), clipped, lane)?,
                    v: ClipLinear::load(be, t, &format!("{a}.v_proj"), clipped, lane)?,
                    post: ClipLinear::load(be, t, &format!("{a}.post"), clipped, lane)?,
                    q_scale: be.upload(&HostTensor::new(vec![h * dh], scale)?)?,
                    rel_k: be.upload(&HostTensor::new(vec![h, np, dh], rel)?)?,
                },
                norm_post_attn: t.tensor(be, &format!("{l}.norm_post_attn.weight"))?,
                lconv: LightConv {
                    pre: t.tensor(be, &format!("{l}.lconv1d.pre_layer_norm.weight"))?,
                    start: ClipLinear::load(
                        be,
                        t,
                        &format!("{l}.lconv1d.linear_start"),
                        clipped,
                        lane,
                    )?,
                    dw: be.upload(&dw)?,
                    norm: t.tensor(be, &format!("{l}.lconv1d.conv_norm.weight"))?,
                    end: ClipLinear::load(
                        be,
                        t,
                        &format!("{l}.lconv1d.linear_end"),
                        clipped,
                        lane,
                    )?,
                },
                ff2: ff(&l, "feed_forward2")?,
                norm_out: t.tensor(be, &format!("{l}.norm_out.weight"))?,
            });
        }
        let embed = match cfg.layout {
            Layout::Tower => None,
            Layout::Full { .. } => Some((
                t.weight(
                    be,
                    &format!("{FULL_EMBED}embedding_projection.weight"),
                    lane,
                )?,
                be.upload(&HostTensor {
                    shape: vec![cfg.output_dims],
                    data: vec![1.0; cfg.output_dims],
                })?,
            )),
        };
        Ok(Self {
            cfg: cfg.clone(),
            convs: [
                t.tensor(be, &format!("{sub}.layer0.conv.weight"))?,
                t.tensor(be, &format!("{sub}.layer1.conv.weight"))?,
            ],
            conv_norms: [
                t.tensor(be, &format!("{sub}.layer0.norm.weight"))?,
                t.tensor(be, &format!("{sub}.layer1.norm.weight"))?,
            ],
            input_proj: t.weight(be, &format!("{sub}.input_proj_linear.weight"), lane)?,
            layers,
            output_proj: (
                t.weight(be, &format!("{p}output_proj.weight"), lane)?,
                t.tensor(be, &format!("{p}output_proj.bias"))?,
            ),
            embed,
        })
    }

    /// The tower's output `(1, T2, output_dims)` for `features (T, n_mels)` of which the first
    /// `valid` frames are audio, every token transformers returns (the tail past the valid ones
    /// included), and how many of the tokens are valid.
    pub fn forward(
        &self,
        be: &B,
        features: &HostTensor,
        valid: usize,
    ) -> Result<(B::Tensor, usize)> {
        let s = &features.shape;
        if s.len() != 2 || s[1] != self.cfg.n_mels {
            return Err(ModelError::BadInput(format!(
                "features {s:?}, expected (T, {})",
                self.cfg.n_mels
            )));
        }
        let mut inputs = self.prepare(be, s[0], valid)?;
        self.write_features(be, &mut inputs.features, features, valid)?;
        Ok((self.forward_prepared(be, &inputs)?, inputs.valid_tokens))
    }

    /// Every device tensor a pass over `t` feature frames of which `valid` are audio reads
    /// besides the weights: the masks and zero blocks its shapes fix, and a `(1, t, n_mels)`
    /// features tensor to fill with [`AudioTower::write_features`]. A captured chain reads them
    /// by address, so a chain's copy lives as long as the chain.
    pub fn prepare(&self, be: &B, t: usize, valid: usize) -> Result<Inputs<B>> {
        let cfg = &self.cfg;
        if valid == 0 || valid > t {
            return Err(ModelError::BadInput(format!(
                "{valid} valid frames of {t} feature frames"
            )));
        }
        let d = cfg.hidden;
        let t1 = conv_out(t);
        let valid1 = valid.div_ceil(2);
        let keep1 = match valid1 < t1 {
            true => {
                let keep: Vec<f32> = (0..t1).map(|i| (i < valid1) as u8 as f32).collect();
                Some(be.upload(&HostTensor::new(vec![1, t1], keep)?)?)
            }
            false => None,
        };
        let t2 = conv_out(t1);
        let valid_tokens = valid1.div_ceil(2);
        let (c, ctx, past) = (cfg.chunk, cfg.context(), cfg.past());
        let nb = t2.div_ceil(c);
        let m = ctx.div_ceil(c);
        let zeros = |rows: usize| -> Result<Option<B::Tensor>> {
            match rows {
                0 => Ok(None),
                _ => Ok(Some(be.upload(&HostTensor::zeros(vec![1, rows, d]))?)),
            }
        };
        let np = cfg.n_positions();
        Ok(Inputs {
            features: be.upload(&HostTensor::zeros(vec![1, t, cfg.n_mels]))?,
            valid_tokens,
            keep1,
            keep: be.upload(&self.attention_keep(t2, valid_tokens))?,
            q_pad: zeros(nb * c - t2)?,
            front: zeros(past)?,
            back: zeros((nb + m) * c - past - t2)?,
            rel_pad: be.upload(&HostTensor::zeros(vec![cfg.n_heads * nb, c, ctx + 1 - np]))?,
        })
    }

    /// Writes `features (T, n_mels)` into a prepared `(1, T, n_mels)` tensor, the frames past
    /// the `valid` ones zeroed (as transformers masks them before the first conv).
    pub fn write_features(
        &self,
        be: &B,
        dst: &mut B::Tensor,
        features: &HostTensor,
        valid: usize,
    ) -> Result<()> {
        let s = &features.shape;
        let m = self.cfg.n_mels;
        if s.len() != 2 || s[1] != m || dst.shape() != [1, s[0], m] {
            return Err(ModelError::BadInput(format!(
                "features {s:?} for a pass prepared for {:?}",
                dst.shape()
            )));
        }
        let mut data = features.data.clone();
        data[valid.min(s[0]) * m..].fill(0.0);
        Ok(be.write_host(dst, &HostTensor::new(vec![1, s[0], m], data)?)?)
    }

    /// The tower's output `(1, T2, output_dims)` from prepared inputs: device work only, so it
    /// can run as a captured chain.
    pub fn forward_prepared(&self, be: &B, inputs: &Inputs<B>) -> Result<B::Tensor> {
        let mut h = self.subsample(be, inputs)?; // (1, T2, d)
        for l in &self.layers {
            h = self.layer(be, l, h, inputs)?;
        }
        let (w, b) = &self.output_proj;
        Ok(be.linear(&h, w, Some(b))?)
    }

    /// `embed_audio` of a whole checkpoint: `(1, N, output_dims)` → `(1, N, text hidden)`;
    /// `None` for a tower saved alone.
    pub fn embed(&self, be: &B, x: &B::Tensor) -> Result<Option<B::Tensor>> {
        match &self.embed {
            None => Ok(None),
            Some((w, ones)) => {
                let n = be.rms_norm(x, ones, self.cfg.rms_eps)?;
                Ok(Some(be.linear(&n, w, None)?))
            }
        }
    }

    /// The subsampling: `(1, T2, d)`. Frames past the valid ones are zeroed before each conv, as
    /// transformers masks them.
    fn subsample(&self, be: &B, inputs: &Inputs<B>) -> Result<B::Tensor> {
        let cfg = &self.cfg;
        let s = inputs.features.shape().to_vec(); // (1, T, n_mels)
        let x = be.reshape(&inputs.features, &[1, 1, s[1], s[2]])?;
        let norm_relu = |x: &B::Tensor, g: &B::Tensor| -> Result<B::Tensor> {
            // (1, C, T', F') → (1, T'·F', C): the norm runs over channels
            let s = x.shape().to_vec();
            let y = be.reshape(x, &[1, s[1], s[2] * s[3]])?;
            let y = be.transpose_last2(&y)?;
            let y = be.layer_norm(&y, g, None, cfg.rms_eps)?;
            Ok(be.activation(&y, Activation::Relu)?)
        };
        let y = be.conv2d(&x, &self.convs[0], None, SUBSAMPLE)?; // (1, C0, T1, F1)
        let s1 = y.shape().to_vec();
        let y = norm_relu(&y, &self.conv_norms[0])?; // (1, T1·F1, C0)
        let y = be.transpose_last2(&y)?;
        let mut y = be.reshape(&y, &s1)?;
        if let Some(keep) = &inputs.keep1 {
            y = be.mask_fill(&y, keep, s1[3], 0.0)?;
        }
        let y = be.conv2d(&y, &self.convs[1], None, SUBSAMPLE)?; // (1, C1, T2, F2)
        let s2 = y.shape().to_vec();
        let y = norm_relu(&y, &self.conv_norms[1])?; // (1, T2·F2, C1)
        let y = be.reshape(&y, &[1, s2[2], s2[3] * s2[1]])?;
        debug_assert_eq!(s2[2], conv_out(conv_out(s[1])));
        Ok(be.linear(&y, &self.input_proj, None)?)
    }

    /// `(1, blocks·chunk·context)` of 0/1: which context slot each query row of each block may
    /// read. Query `q = b·chunk + i` and key `k = b·chunk − past + j` are kept where
    /// `0 ≤ q − k < context_left − 1` or `0 < k − q < context_right` (transformers' sliding
    /// mask), `k` is a valid token, and `q` is a token at all.
    fn attention_keep(&self, t: usize, valid: usize) -> HostTensor {
        let cfg = &self.cfg;
        let (c, ctx, past) = (cfg.chunk, cfg.context(), cfg.past() as i64);
        let nb = t.div_ceil(c);
        let left = cfg.context_left as i64 - 1;
        let right = cfg.context_right as i64;
        let mut keep = vec![0f32; nb * c * ctx];
        for b in 0..nb {
            for i in 0..c {
                let q = (b * c + i) as i64;
                if q >= t as i64 {
                    continue;
                }
                for j in 0..ctx {
                    let k = (b * c + j) as i64 - past;
                    let dist = q - k;
                    let window = (dist >= 0 && dist < left) || (dist < 0 && -dist < right);
                    if window && k >= 0 && k < valid as i64 {
                        keep[(b * c + i) * ctx + j] = 1.0;
                    }
                }
            }
        }
        HostTensor {
            shape: vec![1, nb * c * ctx],
            data: keep,
        }
    }

    fn layer(&self, be: &B, l: &Layer<B>, x: B::Tensor, inputs: &Inputs<B>) -> Result<B::Tensor> {
        let (g, eps) = (self.cfg.grad_clip, self.cfg.rms_eps);
        let x = self.feed_forward(be, &l.ff1, x)?;
        let h = clamp(be, be.reshape(&x, x.shape())?, -g, g)?;
        let h = be.rms_norm(&h, &l.norm_pre_attn, NORM_EPS)?;
        let a = self.attention(be, &l.attn, &h, inputs)?;
        let a = clamp(be, a, -g, g)?;
        let a = be.rms_norm(&a, &l.norm_post_attn, NORM_EPS)?;
        let x = be.add(&a, &x)?;
        // the light conv: GLU, causal depthwise conv (K−1 zeros in front), clamp, norm, act
        let c = &l.lconv;
        let h = be.rms_norm(&x, &c.pre, eps)?;
        let h = be.glu(&c.start.run(be, h)?)?; // (1, T, d)
        let t = h.shape()[1];
        let k = self.cfg.conv_kernel;
        let h = be.depthwise_conv1d(&h, &c.dw, None, 1, k - 1)?; // (1, T + K − 1, d)
        let h = be.slice(&h, 1, 0, t)?;
        let h = clamp(be, h, -g, g)?;
        let h = be.rms_norm(&h, &c.norm, eps)?;
        let h = be.activation(&h, self.cfg.act)?;
        let h = c.end.run(be, h)?;
        let x = be.add(&h, &x)?;
        let x = self.feed_forward(be, &l.ff2, x)?;
        let x = clamp(be, x, -g, g)?;
        Ok(be.rms_norm(&x, &l.norm_out, NORM_EPS)?)
    }

    fn feed_forward(&self, be: &B, f: &FeedForward<B>, x: B::Tensor) -> Result<B::Tensor> {
        let g = self.cfg.grad_clip;
        let h = clamp(be, be.reshape(&x, x.shape())?, -g, g)?;
        let h = be.rms_norm(&h, &f.pre, NORM_EPS)?;
        let h = f.up.run(be, h)?;
        let h = be.activation(&h, self.cfg.act)?;
        let h = f.down.run(be, h)?;
        let h = clamp(be, h, -g, g)?;
        let h = be.rms_norm(&h, &f.post, NORM_EPS)?;
        Ok(be.add(&h, &x)?)
    }

    /// Chunked local attention of `x (1, T, d)`: queries in blocks of `chunk` rows, each block
    /// against its `context` keys (zero rows outside the sequence, as transformers pads them).
    fn attention(
        &self,
        be: &B,
        a: &Attention<B>,
        x: &B::Tensor,
        inputs: &Inputs<B>,
    ) -> Result<B::Tensor> {
        let cfg = &self.cfg;
        let t = x.shape()[1];
        let (h, dh) = (cfg.n_heads, cfg.head_dim());
        let (c, ctx) = (cfg.chunk, cfg.context());
        let nb = t.div_ceil(c);
        let m = ctx.div_ceil(c);
        let q = a.q.run(be, be.reshape(x, x.shape())?)?;
        let q = be.mul(&q, &a.q_scale)?;
        let k = a.k.run(be, be.reshape(x, x.shape())?)?;
        let k = be.affine(&k, (1.0 + std::f64::consts::E).log2() as f32, 0.0)?;
        let v = a.v.run(be, be.reshape(x, x.shape())?)?;
        let q = match &inputs.q_pad {
            None => q,
            Some(pad) => be.concat(&[&q, pad], 1)?,
        };
        let qh = be.split_heads(&q, h, None)?; // (H, nb·C, Dh)
        let qb = be.reshape(&qh, &[h * nb, c, dh])?;
        // keys of block b: padded rows b·C .. b·C + context, from m shifted block views
        let context = |x: &B::Tensor| -> Result<B::Tensor> {
            let parts: Vec<&B::Tensor> = [inputs.front.as_ref(), Some(x), inputs.back.as_ref()]
                .into_iter()
                .flatten()
                .collect();
            let padded = be.concat(&parts, 1)?; // (1, (nb+m)·C, d)
            let heads = be.split_heads(&padded, h, None)?; // (H, (nb+m)·C, Dh)
            let views = (0..m)
                .map(|j| {
                    let v = be.slice(&heads, 1, j * c, nb * c)?;
                    Ok(be.reshape(&v, &[h, nb, c * dh])?)
                })
                .collect::<Result<Vec<_>>>()?;
            let y = be.concat(&views.iter().collect::<Vec<_>>(), 2)?; // (H, nb, m·C·Dh)
            let y = be.reshape(&y, &[h * nb, m * c, dh])?;
            Ok(match m * c - ctx {
                0 => y,
                _ => be.slice(&y, 1, 0, ctx)?,
            })
        };
        let (kc, vc) = (context(&k)?, context(&v)?); // (H·nb, ctx, Dh)
        let ac = be.matmul(&qb, &kc, true)?; // (H·nb, C, ctx)

        // relative terms: row i of a block takes distance i + past − j at slot j, through the
        // shift transformers does (pad to ctx+1 columns, refold, drop the tail)
        let np = cfg.n_positions();
        let bd = be.matmul(&qh, &a.rel_k, true)?; // (H, nb·C, P)
        let bd = be.reshape(&bd, &[h * nb, c, np])?;
        let bd = be.concat(&[&bd, &inputs.rel_pad], 2)?; // (H·nb, C, ctx+1)
        let bd = be.reshape(&bd, &[h * nb, c * (ctx + 1)])?;
        let bd = be.slice(&bd, 1, 0, c * ctx)?;
        let bd = be.reshape(&bd, &[h * nb, c, ctx])?;
        let cap = cfg.logit_cap;
        let logits = be.add(&ac, &bd)?;
        let logits = be.activation(&be.affine(&logits, 1.0 / cap, 0.0)?, Activation::Tanh)?;
        let logits = be.affine(&logits, cap, 0.0)?;
        let logits = be.mask_fill(&logits, &inputs.keep, 1, cfg.invalid_logit)?;
        let probs = be.softmax(&logits)?;
        let o = be.matmul(&probs, &vc, false)?; // (H·nb, C, Dh)
        let o = be.reshape(&o, &[h, nb * c, dh])?;
        let o = be.merge_heads(&o, 1)?; // (1, nb·C, d)
        let o = match nb * c - t {
            0 => o,
            _ => be.slice(&o, 1, 0, t)?,
        };
        a.post.run(be, o)
    }
}
