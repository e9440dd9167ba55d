//! The GigaAM Conformer encoder: strided conv subsampling (4×), then conformer blocks (macaron
//! half-step feed-forwards, self-attention with rotary or relative positions, conv module),
//! each closed by a layer norm. No scaling of the input, no final norm.
//!
//! Rotary attention is GigaAM's own: the rotation is applied to the normed block input *before*
//! the q and k projections (`q = W_q·rot(h)`, `k = W_k·rot(h)`, `v = W_v·h`), with the
//! frequency base `pos_emb_max_len` (5000), not after them as in most rotary models.

use super::config::{AttentionKind, ConvNorm, EncoderConfig, Subsampling};
use super::weights::{subsampling_conv, LayerNames, SUB_OUT};
use crate::fastconformer::encoder::{
    fold_batch_norm, last, rel_positions, FeedForward, Linear, Norm, Tensors,
};
use crate::{ModelError, Result};
use stapes_core::backend::{Feeds, RelAttnParams};
use stapes_core::{
    Activation, AttnParams, Backend, Conv1dParams, Conv2dParams, DeviceTensor, HostTensor, Lane,
};

/// PyTorch's LayerNorm / BatchNorm default epsilon, which every GigaAM norm uses.
const NORM_EPS: f32 = 1e-5;

/// Query rows per block of the composed relative-position attention.
const REL_QUERY_BLOCK: usize = 256;

enum Attention<B: Backend> {
    Rotary {
        /// q and k stacked: both read the rotated input.
        qk: Linear<B>,
        v: Linear<B>,
    },
    RelPos {
        /// q, k and v stacked: `(B, T, 3·d)` laid out `q | k | v`.
        qkv: Linear<B>,
        /// `linear_pos`: projects the sinusoid positions, no bias.
        pos: B::Weight,
        bias_u: B::Tensor,
        bias_v: B::Tensor,
    },
}

enum ConvNormLayer<B: Backend> {
    /// Folded into the depthwise kernel and bias at load.
    Folded,
    Layer(Norm<B>),
}

struct ConvModule<B: Backend> {
    pw1: Linear<B>,
    /// Depthwise kernel `(C, K)` and bias (with a batch norm folded in).
    dw_w: B::Tensor,
    dw_b: B::Tensor,
    norm: ConvNormLayer<B>,
    pw2: Linear<B>,
}

struct Block<B: Backend> {
    norm_ff1: Norm<B>,
    ff1: FeedForward<B>,
    norm_att: Norm<B>,
    attn: Attention<B>,
    out: Linear<B>,
    norm_conv: Norm<B>,
    conv: ConvModule<B>,
    norm_ff2: Norm<B>,
    ff2: FeedForward<B>,
    norm_out: Norm<B>,
}

pub(crate) struct Encoder<B: Backend> {
    pub(crate) cfg: EncoderConfig,
    /// Strided convs: conv1d weights `(d, C_in·K)` as GEMM weights; conv2d kernels as tensors.
    sub_conv1d: Vec<(B::Weight, B::Tensor)>,
    sub_conv2d: Vec<(B::Tensor, B::Tensor)>,
    /// conv2d subsampling's linear, input columns permuted from `[c][f]` to `[f][c]`.
    sub_out: Option<Linear<B>>,
    blocks: Vec<Block<B>>,
}

impl<B: Backend> Encoder<B> {
    pub fn load(b: &B, t: &Tensors<'_>, cfg: &EncoderConfig, lane: Lane) -> Result<Self> {
        // The subsampling convs feed every later layer: a q8 model keeps them in f16.
        let sub_lane = if lane == Lane::Q8 { Lane::F16 } else { lane };
        let mut sub_conv1d = Vec::new();
        let mut sub_conv2d = Vec::new();
        for i in 0..cfg.subsampling_layers() {
            let conv = subsampling_conv(i);
            let bias = t.tensor(b, &format!("{conv}.bias"))?;
            match cfg.subsampling {
                Subsampling::Conv1d => {
                    sub_conv1d.push((t.weight(b, &format!("{conv}.weight"), sub_lane)?, bias))
                }
                Subsampling::Conv2d => {
                    sub_conv2d.push((t.tensor(b, &format!("{conv}.weight"))?, bias))
                }
            }
        }
        let sub_out = match cfg.subsampling {
            Subsampling::Conv1d => None,
            Subsampling::Conv2d => {
                // GigaAM flattens each frame channel-major (c·F' + f); the forward pass keeps
                // channels last, so the linear's columns are permuted to f·C + c here.
                let w = t.get(&format!("{SUB_OUT}.weight"))?;
                let (rows, cols) = (w.shape[0], w.shape[1]);
                let (ch, nf) = (cfg.d_model, cfg.subsampled_mels());
                let mut perm = vec![0f32; w.len()];
                for r in 0..rows {
                    for c in 0..ch {
                        for f in 0..nf {
                            perm[r * cols + f * ch + c] = w.data[r * cols + c * nf + f];
                        }
                    }
                }
                Some(Linear {
                    w: b.weight(&HostTensor::new(vec![rows, cols], perm)?, lane)?,
                    b: t.opt_tensor(b, &format!("{SUB_OUT}.bias"))?,
                })
            }
        };
        let blocks = (0..cfg.n_layers)
            .map(|l| Block::load(b, t, &LayerNames::new(l), cfg, lane))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            cfg: cfg.clone(),
            sub_conv1d,
            sub_conv2d,
            sub_out,
            blocks,
        })
    }

    /// The position tables one pass over `t` encoder frames reads: rotary `cos`, `sin (T, d)`,
    /// or the relative-position sinusoids `(1, 2T−1, d)`.
    pub fn positions(&self, b: &B, t: usize) -> Result<Positions<B>> {
        Ok(match self.cfg.attention {
            AttentionKind::Rotary => {
                let (cos, sin) = rotary_tables(t, &self.cfg);
                Positions::Rotary {
                    cos: b.upload(&cos)?,
                    sin: b.upload(&sin)?,
                }
            }
            AttentionKind::RelPos => {
                Positions::RelPos(b.upload(&rel_positions(t, self.cfg.d_model))?)
            }
        })
    }

    /// `features (1, T, n_mels)` → `(1, T', d)`, `T' = cfg.output_frames(T)`.
    pub fn forward(&self, b: &B, features: &B::Tensor) -> Result<B::Tensor> {
        let t = self.input_frames(features)?;
        let pos = self.positions(b, self.cfg.output_frames(t))?;
        self.forward_prepared(b, features, &pos)
    }

    /// The masks of a batch whose clip `i` holds `feature_frames[i]` of `t` padded feature frames.
    pub fn padding(&self, b: &B, feature_frames: &[usize], t: usize) -> Result<Padding<B>> {
        let mut lens = feature_frames.to_vec();
        let mut t = t;
        let mut sub = Vec::new();
        for _ in 0..self.cfg.subsampling_layers() {
            t = self.cfg.conv_out(t);
            lens.iter_mut().for_each(|l| *l = self.cfg.conv_out(*l));
            let keep: Vec<f32> = lens
                .iter()
                .flat_map(|&l| (0..t).map(move |j| if j < l { 1.0 } else { 0.0 }))
                .collect();
            sub.push(b.upload(&HostTensor::new(vec![lens.len(), t], keep)?)?);
        }
        Ok(Padding { sub, frames: lens })
    }

    /// The frames of `features (B, T, n_mels)`, or the error naming its wrong shape.
    fn input_frames(&self, features: &B::Tensor) -> Result<usize> {
        match features.shape() {
            &[_, t, f] if f == self.cfg.feat_in => Ok(t),
            s => Err(ModelError::BadInput(format!(
                "encoder input {s:?}, expected (B, T, {})",
                self.cfg.feat_in
            ))),
        }
    }

    /// [`Encoder::forward`] with the position tables made beforehand ([`Encoder::positions`]
    /// for `cfg.output_frames(T)`): only device ops, so a home may capture it.
    pub fn forward_prepared(
        &self,
        b: &B,
        features: &B::Tensor,
        pos: &Positions<B>,
    ) -> Result<B::Tensor> {
        self.forward_padded(b, features, pos, None)
    }

    /// [`Encoder::forward_prepared`] over a padded batch (`features` zero past each clip) with
    /// its [`Encoder::padding`]; `None`: every sequence is whole.
    pub fn forward_padded(
        &self,
        b: &B,
        features: &B::Tensor,
        pos: &Positions<B>,
        pad: Option<&Padding<B>>,
    ) -> Result<B::Tensor> {
        self.input_frames(features)?;
        let x = self.subsample(b, features, pad)?; // (B, T', d)
        let mut x = x;
        let mut h = None;
        for (l, blk) in self.blocks.iter().enumerate() {
            let next = self.blocks.get(l + 1);
            (x, h) = blk.forward(b, &x, h.take(), pos, &self.cfg, next, pad)?;
        }
        Ok(x)
    }

    fn subsample(
        &self,
        b: &B,
        features: &B::Tensor,
        pad: Option<&Padding<B>>,
    ) -> Result<B::Tensor> {
        // a clip's frames past its end become the zeros its convolution pads with alone
        let mask = |x: B::Tensor, l: usize, inner: usize| -> Result<B::Tensor> {
            match pad.and_then(|p| p.sub.get(l)) {
                Some(keep) => Ok(b.mask_fill(&x, keep, inner, 0.0)?),
                None => Ok(x),
            }
        };
        let k = self.cfg.subs_kernel_size;
        let padding = (k - 1) / 2;
        match self.cfg.subsampling {
            Subsampling::Conv1d => {
                let p = Conv1dParams {
                    kernel: k,
                    stride: 2,
                    padding,
                };
                let mut convs = self.sub_conv1d.iter();
                let Some((w0, b0)) = convs.next() else {
                    return Err(ModelError::BadInput(
                        "conv1d subsampling without convs".into(),
                    ));
                };
                let d = self.cfg.d_model;
                let mut x = b.conv1d_act(features, w0, Some(b0), p, Activation::Relu)?; // (B, T_1, d)
                x = mask(x, 0, d)?;
                for (l, (w, bias)) in convs.enumerate() {
                    x = b.conv1d_act(&x, w, Some(bias), p, Activation::Relu)?; // (B, T_l, d)
                    x = mask(x, l + 1, d)?;
                }
                Ok(x)
            }
            Subsampling::Conv2d => {
                let s = features.shape().to_vec(); // (B, T, F)
                let mut x = b.reshape(features, &[s[0], 1, s[1], s[2]])?;
                let p = Conv2dParams {
                    kernel: (k, k),
                    stride: (2, 2),
                    padding: (padding, padding),
                    groups: 1,
                };
                for (l, (w, bias)) in self.sub_conv2d.iter().enumerate() {
                    x = b.conv2d(&x, w, Some(bias), p)?;
                    x = b.activation(&x, Activation::Relu)?; // (B, C, T_l, F_l)
                    let f = x.shape().get(3).copied().unwrap_or(0);
                    x = mask(x, l, f)?;
                }
                let xs = x.shape().to_vec();
                let x = b.reshape(&x, &[xs[0], xs[1], xs[2] * xs[3]])?;
                let x = b.transpose_last2(&x)?; // (B, T'·F', C)
                let x = b.reshape(&x, &[xs[0], xs[2], xs[3] * xs[1]])?;
                let out = self.sub_out.as_ref().ok_or_else(|| {
                    ModelError::BadInput("conv2d subsampling without its linear".into())
                })?;
                out.forward(b, &x)
            }
        }
    }
}

/// What the attention layers of one pass read for positions.
pub(crate) enum Positions<B: Backend> {
    Rotary { cos: B::Tensor, sin: B::Tensor },
    RelPos(B::Tensor),
}

/// A padded batch of clips: which frames are a clip's own after each subsampling conv (`keep`,
/// 0/1 `(B, T_l)`; the last one is the encoder's frames) and each clip's encoder frames. Frames
/// past a clip are zeroed before every convolution that reads them and are never keys of its
/// attention, so each clip's frames come out as they do alone (where the GEMMs round alike).
pub(crate) struct Padding<B: Backend> {
    sub: Vec<B::Tensor>,
    frames: Vec<usize>,
}

impl<B: Backend> Padding<B> {
    /// Each clip's encoder frames.
    pub fn frames(&self) -> &[usize] {
        &self.frames
    }

    /// The encoder frames' mask `(B, T')`.
    fn keep(&self) -> Result<&B::Tensor> {
        self.sub
            .last()
            .ok_or_else(|| ModelError::BadInput("a padded batch without subsampling".into()))
    }
}

/// Rotary `cos`, `sin` over `t` positions, `(t, d)`: per head `Dh` angles `pos·θ_j`,
/// `θ_j = base^(−2j/Dh)` for the first half, repeated for the second; computed in f32 as the
/// reference does (`base` is `pos_emb_max_len`).
pub(crate) fn rotary_tables(t: usize, cfg: &EncoderConfig) -> (HostTensor, HostTensor) {
    let dh = cfg.head_dim();
    let half = dh / 2;
    let base = cfg.pos_emb_max_len as f32;
    let inv_freq: Vec<f32> = (0..half)
        .map(|j| 1.0 / base.powf((2 * j) as f32 / dh as f32))
        .collect();
    let d = cfg.d_model;
    let (mut cos, mut sin) = (Vec::with_capacity(t * d), Vec::with_capacity(t * d));
    let (mut c_half, mut s_half) = (vec![0f32; half], vec![0f32; half]);
    for p in 0..t {
        // one position's angles, then the same values for both halves of every head
        for (j, f) in inv_freq.iter().enumerate() {
            let a = p as f32 * f;
            c_half[j] = a.cos();
            s_half[j] = a.sin();
        }
        for _ in 0..2 * cfg.n_heads {
            cos.extend_from_slice(&c_half);
            sin.extend_from_slice(&s_half);
        }
    }
    (
        HostTensor {
            shape: vec![t, d],
            data: cos,
        },
        HostTensor {
            shape: vec![t, d],
            data: sin,
        },
    )
}

impl<B: Backend> Attention<B> {
    fn load(
        b: &B,
        t: &Tensors<'_>,
        n: &LayerNames,
        cfg: &EncoderConfig,
        lane: Lane,
    ) -> Result<Self> {
        Ok(match cfg.attention {
            AttentionKind::Rotary => Attention::Rotary {
                qk: Linear::load_stacked(b, t, &[n.attn("q"), n.attn("k")], lane)?,
                v: Linear::load(b, t, &n.attn("v"), lane)?,
            },
            AttentionKind::RelPos => Attention::RelPos {
                qkv: Linear::load_stacked(b, t, &[n.attn("q"), n.attn("k"), n.attn("v")], lane)?,
                pos: t.weight(b, &format!("{}.weight", n.attn("pos")), lane)?,
                bias_u: t.flat_tensor(b, &n.attn_bias("pos_bias_u"))?,
                bias_v: t.flat_tensor(b, &n.attn_bias("pos_bias_v"))?,
            },
        })
    }

    /// The linear that reads the normed block input as it is (rotary: `v`, since q and k read
    /// the rotated input), so the norm may write that linear's input form beside it.
    fn normed_reader(&self) -> &B::Weight {
        match self {
            Attention::Rotary { v, .. } => &v.w,
            Attention::RelPos { qkv, .. } => &qkv.w,
        }
    }

    /// Self-attention over the normed `h (B, T, d)`, heads merged, before the output projection.
    fn forward(
        &self,
        b: &B,
        h: &B::Tensor,
        pos: &Positions<B>,
        cfg: &EncoderConfig,
        pad: Option<&Padding<B>>,
    ) -> Result<B::Tensor> {
        let heads = cfg.n_heads;
        let scale = 1.0 / (cfg.head_dim() as f32).sqrt();
        match (self, pos) {
            (Attention::Rotary { qk, v }, Positions::Rotary { cos, sin }) => {
                let hr = b.rotary_half(h, cos, sin, cfg.head_dim())?;
                let qk = qk.forward(b, &hr)?; // (B, T, 2d)
                let v = v.forward(b, h)?;
                // the packed q|k|v layout, which a GPU home's attention reads in place
                let qkv = b.concat(&[&qk, &v], 2)?; // (B, T, 3d)
                let p = AttnParams {
                    n_heads: heads,
                    scale,
                    kv_len: None,
                    causal: false,
                };
                let t = qkv.shape().get(1).copied().unwrap_or(0);
                match pad.map(|p| &p.frames) {
                    // a shorter clip of a batch attends to its own frames only
                    Some(frames) if frames.iter().any(|&f| f != t) => {
                        let outs = frames
                            .iter()
                            .enumerate()
                            .map(|(i, &f)| {
                                let one = b.slice(&qkv, 0, i, 1)?;
                                let p = AttnParams {
                                    kv_len: Some(f),
                                    ..p
                                };
                                b.attention_packed(&one, &p)
                            })
                            .collect::<stapes_core::Result<Vec<_>>>()?;
                        let outs: Vec<&B::Tensor> = outs.iter().collect();
                        Ok(b.concat(&outs, 0)?)
                    }
                    _ => Ok(b.attention_packed(&qkv, &p)?),
                }
            }
            (
                Attention::RelPos {
                    qkv,
                    pos: w_pos,
                    bias_u,
                    bias_v,
                },
                Positions::RelPos(sinusoids),
            ) => {
                let qkv = qkv.forward(b, h)?; // (B, T, 3d)
                let p = b.linear(sinusoids, w_pos, None)?; // (1, 2T−1, d)
                let params = RelAttnParams {
                    heads,
                    scale,
                    query_block: REL_QUERY_BLOCK,
                };
                let keep = pad.map(Padding::keep).transpose()?;
                Ok(b.rel_attention(&qkv, &p, bias_u, bias_v, keep, &params)?)
            }
            _ => Err(ModelError::BadInput(
                "attention layer and position tables of different kinds".into(),
            )),
        }
    }
}

impl<B: Backend> ConvModule<B> {
    fn load(
        b: &B,
        t: &Tensors<'_>,
        n: &LayerNames,
        cfg: &EncoderConfig,
        lane: Lane,
    ) -> Result<Self> {
        let dw = t.get(&format!("{}.weight", n.conv("depthwise_conv")))?; // (C, 1, K)
        let dwb = t.get(&format!("{}.bias", n.conv("depthwise_conv")))?;
        let c = dw.shape[0];
        let kk = dw.len() / c.max(1);
        let norm_name = n.conv("batch_norm");
        let (w, bias, norm) = match cfg.conv_norm {
            ConvNorm::BatchNorm => {
                let bn = |s: &str| t.get(&format!("{norm_name}.{s}"));
                let (gamma, beta, mean, var) = (
                    bn("weight")?,
                    bn("bias")?,
                    bn("running_mean")?,
                    bn("running_var")?,
                );
                let (w, bias) = fold_batch_norm(dw, Some(dwb), [gamma, beta, mean, var]);
                (w, bias, ConvNormLayer::Folded)
            }
            ConvNorm::LayerNorm => (
                dw.data.clone(),
                dwb.data.clone(),
                ConvNormLayer::Layer(Norm::load(b, t, &norm_name)?),
            ),
        };
        Ok(Self {
            pw1: Linear::load(b, t, &n.conv("pointwise_conv1"), lane)?,
            dw_w: b.upload(&HostTensor::new(vec![c, kk], w)?)?,
            dw_b: b.upload(&HostTensor::new(vec![c], bias)?)?,
            norm,
            pw2: Linear::load(b, t, &n.conv("pointwise_conv2"), lane)?,
        })
    }

    /// Over the normed `h (B, T, d)`, landing on the residual stream `x`, then `norms`; `keep`
    /// `(B, T)`: the frames of each clip of a padded batch (the rest are zeroed before the
    /// depthwise conv).
    fn forward_norms(
        &self,
        b: &B,
        h: &B::Tensor,
        x: &B::Tensor,
        norms: &[(&B::Tensor, Option<&B::Tensor>)],
        next: Option<&B::Weight>,
        keep: Option<&B::Tensor>,
    ) -> Result<(B::Tensor, Vec<B::Tensor>)> {
        let h = self.pw1.forward(b, h)?; // (B, T, 2C)
        let pw2 = &self.pw2;
        let h = match &self.norm {
            ConvNormLayer::Folded => b.glu_depthwise_act_feeding(
                &h,
                keep,
                &self.dw_w,
                Some(&self.dw_b),
                Activation::Silu,
                &pw2.w,
            )?,
            ConvNormLayer::Layer(norm) => {
                let (c, k) = (self.dw_w.shape()[0], self.dw_w.shape()[1]);
                let mut g = b.glu(&h)?; // (B, T, C)
                if let Some(keep) = keep {
                    g = b.mask_fill(&g, keep, c, 0.0)?;
                }
                let g = b.depthwise_conv1d(&g, &self.dw_w, Some(&self.dw_b), 1, (k - 1) / 2)?;
                let g = b.layer_norm(&g, &norm.gamma, Some(&norm.beta), NORM_EPS)?;
                b.activation(&g, Activation::Silu)?
            }
        };
        Ok(b.linear_add_norms(&h, &pw2.w, pw2.b.as_ref(), x, norms, NORM_EPS, next)?)
    }
}

impl<B: Backend> Block<B> {
    fn load(
        b: &B,
        t: &Tensors<'_>,
        n: &LayerNames,
        cfg: &EncoderConfig,
        lane: Lane,
    ) -> Result<Self> {
        Ok(Self {
            norm_ff1: Norm::load(b, t, &n.norm("feed_forward1"))?,
            ff1: FeedForward::load_half_step(b, t, &n.ff(1, 1), &n.ff(1, 2), lane)?,
            norm_att: Norm::load(b, t, &n.norm("self_att"))?,
            attn: Attention::load(b, t, n, cfg, lane)?,
            out: Linear::load(b, t, &n.attn("out"), lane)?,
            norm_conv: Norm::load(b, t, &n.norm("conv"))?,
            conv: ConvModule::load(b, t, n, cfg, lane)?,
            norm_ff2: Norm::load(b, t, &n.norm("feed_forward2"))?,
            ff2: FeedForward::load_half_step(b, t, &n.ff(2, 1), &n.ff(2, 2), lane)?,
            norm_out: Norm::load(b, t, &n.norm("out"))?,
        })
    }

    /// Over the residual stream `x`, with `h = norm_ff1(x)` when the previous block made it;
    /// returns the block's output and, given the next block, its first norm of that output.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        b: &B,
        x: &B::Tensor,
        h: Option<B::Tensor>,
        pos: &Positions<B>,
        cfg: &EncoderConfig,
        next: Option<&Block<B>>,
        pad: Option<&Padding<B>>,
    ) -> Result<(B::Tensor, Option<B::Tensor>)> {
        let keep = pad.map(Padding::keep).transpose()?;
        let h = match h {
            Some(h) => h,
            None => self.norm_ff1.feeding(b, x, &self.ff1.l1.w)?,
        };
        let silu = Activation::Silu;
        let (x, mut hs) = self.ff1.forward_norms(
            b,
            &h,
            silu,
            x,
            &[self.norm_att.params()],
            // rotary attention also reads h outside the linear (its rotated q|k input)
            Some(Feeds {
                w: self.attn.normed_reader(),
                only: false,
            }),
        )?;
        let h = last(&mut hs)?;
        let a = self.attn.forward(b, &h, pos, cfg, pad)?;
        let o = &self.out;
        let (x, mut hs) = b.linear_add_norms(
            &a,
            &o.w,
            o.b.as_ref(),
            &x,
            &[self.norm_conv.params()],
            NORM_EPS,
            Some(&self.conv.pw1.w),
        )?;
        let h = last(&mut hs)?;
        let (x, mut hs) = self.conv.forward_norms(
            b,
            &h,
            &x,
            &[self.norm_ff2.params()],
            Some(&self.ff2.l1.w),
            keep,
        )?;
        let h = last(&mut hs)?;
        match next {
            Some(n) => {
                let norms = [self.norm_out.params(), n.norm_ff1.params()];
                let (_, mut yz) = self.ff2.forward_norms(
                    b,
                    &h,
                    silu,
                    &x,
                    &norms,
                    Some(Feeds {
                        w: &n.ff1.l1.w,
                        only: true,
                    }),
                )?;
                let z = last(&mut yz)?;
                Ok((last(&mut yz)?, Some(z)))
            }
            None => {
                let (_, mut y) =
                    self.ff2
                        .forward_norms(b, &h, silu, &x, &[self.norm_out.params()], None)?;
                Ok((last(&mut y)?, None))
            }
        }
    }
}
