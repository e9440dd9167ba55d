//! The FastConformer encoder: 8× depthwise-striding conv subsampling, then conformer blocks
//! (macaron half-step feed-forwards, Transformer-XL relative-position self-attention, conv
//! module), each closed by a layer norm.

use super::config::{conv_out, EncoderConfig};
use super::weights::{subsampling_conv, LayerNames, SUB_CONV0, SUB_LINEAR};
use crate::{ModelError, Result};
use stapes_core::backend::{Feeding, Feeds, RelAttnParams, StridingParams};
use stapes_core::{Activation, Backend, Conv2dParams, DeviceTensor, HostTensor, Lane};
use std::collections::BTreeMap;
use std::path::Path;

/// PyTorch's LayerNorm / BatchNorm default epsilon, which every Parakeet norm uses.
const NORM_EPS: f32 = 1e-5;

/// Largest `layers × (2T'−1) × d` of position projections [`Encoder::prepare`] keeps per pass
/// (64 MiB in f16): every chain bucket up to `CHAIN_MAX_FRAMES` of a 24- or 32-layer
/// d = 1024 model fits; longer (eager) passes project per layer as they go.
const POS_ONCE_MAX_ELEMS: usize = 32 << 20;

/// `STAPES_FC_POS_ONCE=0` at load: every layer projects the position sinusoids inside the pass
/// (one GEMM per layer per pass) instead of once in [`Encoder::prepare`]; for comparisons.
fn pos_once_default() -> bool {
    std::env::var("STAPES_FC_POS_ONCE").map_or(true, |v| v.trim() != "0")
}

/// Named host tensors of one checkpoint, with errors that name the file and the tensor.
pub(crate) struct Tensors<'a> {
    pub map: &'a BTreeMap<String, HostTensor>,
    pub path: &'a Path,
}

impl<'a> Tensors<'a> {
    pub fn get(&self, name: &str) -> Result<&'a HostTensor> {
        self.map
            .get(name)
            .ok_or_else(|| ModelError::bad_tensor(self.path, name, "missing"))
    }
    pub fn tensor<B: Backend>(&self, b: &B, name: &str) -> Result<B::Tensor> {
        Ok(b.upload(self.get(name)?)?)
    }
    /// A tensor uploaded as one flat row of its values (`(H, Dh)` attention biases → `(H·Dh)`).
    pub fn flat_tensor<B: Backend>(&self, b: &B, name: &str) -> Result<B::Tensor> {
        let h = self.get(name)?;
        Ok(b.upload(&h.clone().reshape(vec![h.len()])?)?)
    }
    pub fn opt_tensor<B: Backend>(&self, b: &B, name: &str) -> Result<Option<B::Tensor>> {
        self.map
            .get(name)
            .map(|t| b.upload(t))
            .transpose()
            .map_err(Into::into)
    }
    /// A GEMM weight; conv kernels `(N, K, 1)` are flattened to `(N, K)`.
    pub fn weight<B: Backend>(&self, b: &B, name: &str, lane: Lane) -> Result<B::Weight> {
        let w = self.get(name)?;
        let n = w.shape.first().copied().unwrap_or(0);
        let k = w.len() / n.max(1);
        let flat = w.clone().reshape(vec![n, k])?;
        Ok(b.weight(&flat, lane)?)
    }
}

pub(crate) struct Linear<B: Backend> {
    pub w: B::Weight,
    pub b: Option<B::Tensor>,
}

impl<B: Backend> Linear<B> {
    pub fn load(b: &B, t: &Tensors<'_>, prefix: &str, lane: Lane) -> Result<Self> {
        Ok(Self {
            w: t.weight(b, &format!("{prefix}.weight"), lane)?,
            b: t.opt_tensor(b, &format!("{prefix}.bias"))?,
        })
    }
    /// Weight and bias multiplied by `s` at load; with `s` a power of two this is exact in
    /// every lane (f16 exponents, q8 block scales) and equals scaling the output.
    pub fn load_scaled(b: &B, t: &Tensors<'_>, prefix: &str, lane: Lane, s: f32) -> Result<Self> {
        let w = t.get(&format!("{prefix}.weight"))?;
        let n = w.shape.first().copied().unwrap_or(0);
        let k = w.len() / n.max(1);
        let scaled = HostTensor::new(vec![n, k], w.data.iter().map(|v| v * s).collect())?;
        let bias = match t.map.get(&format!("{prefix}.bias")) {
            Some(bt) => Some(b.upload(&HostTensor::new(
                bt.shape.clone(),
                bt.data.iter().map(|v| v * s).collect(),
            )?)?),
            None => None,
        };
        Ok(Self {
            w: b.weight(&scaled, lane)?,
            b: bias,
        })
    }

    /// The linears `prefixes` as one GEMM: their weights stacked along the output rows (and
    /// their biases, zeros for one without), so the output is their outputs side by side. Each
    /// output row keeps its own weights in every lane (q8 blocks run along K, within a row).
    pub fn load_stacked(b: &B, t: &Tensors<'_>, prefixes: &[String], lane: Lane) -> Result<Self> {
        let (mut rows, mut k, mut data) = (0, None, Vec::new());
        let mut parts = Vec::with_capacity(prefixes.len());
        for prefix in prefixes {
            let name = format!("{prefix}.weight");
            let w = t.get(&name)?;
            let n = w.shape.first().copied().unwrap_or(0);
            let kk = w.len() / n.max(1);
            if *k.get_or_insert(kk) != kk {
                return Err(ModelError::bad_tensor(
                    t.path,
                    name,
                    format!(
                        "{kk} inputs, unlike the {} of the linears stacked with it",
                        k.unwrap_or(0)
                    ),
                ));
            }
            data.extend_from_slice(&w.data);
            rows += n;
            parts.push((n, t.map.get(&format!("{prefix}.bias"))));
        }
        let bias = if parts.iter().any(|(_, bt)| bt.is_some()) {
            let mut v = Vec::with_capacity(rows);
            for (n, bt) in &parts {
                match bt {
                    Some(bt) if bt.len() == *n => v.extend_from_slice(&bt.data),
                    Some(bt) => {
                        return Err(ModelError::bad_tensor(
                            t.path,
                            "bias of a stacked linear",
                            format!("{:?} for {n} outputs", bt.shape),
                        ))
                    }
                    None => v.extend(std::iter::repeat_n(0.0, *n)),
                }
            }
            Some(b.upload(&HostTensor::new(vec![rows], v)?)?)
        } else {
            None
        };
        Ok(Self {
            w: b.weight(&HostTensor::new(vec![rows, k.unwrap_or(0)], data)?, lane)?,
            b: bias,
        })
    }

    pub fn forward(&self, be: &B, x: &B::Tensor) -> Result<B::Tensor> {
        Ok(be.linear(x, &self.w, self.b.as_ref())?)
    }
}

pub(crate) struct Norm<B: Backend> {
    pub gamma: B::Tensor,
    pub beta: B::Tensor,
}

impl<B: Backend> Norm<B> {
    pub fn load(b: &B, t: &Tensors<'_>, prefix: &str) -> Result<Self> {
        Ok(Self {
            gamma: t.tensor(b, &format!("{prefix}.weight"))?,
            beta: t.tensor(b, &format!("{prefix}.bias"))?,
        })
    }
    /// The norm whose result is the input of the linear of weight `next`.
    pub fn feeding(&self, b: &B, x: &B::Tensor, next: &B::Weight) -> Result<B::Tensor> {
        Ok(b.layer_norm_feeding(x, &self.gamma, Some(&self.beta), NORM_EPS, next)?)
    }
    pub fn params(&self) -> (&B::Tensor, Option<&B::Tensor>) {
        (&self.gamma, Some(&self.beta))
    }
}

pub(crate) struct FeedForward<B: Backend> {
    pub l1: Linear<B>,
    /// The macaron ½ folded in (a power of two: exact in every lane).
    pub l2: Linear<B>,
}

struct RelAttention<B: Backend> {
    /// q, k and v stacked: one GEMM writes `(B, T, 3·d)` laid out `q | k | v`.
    qkv: Linear<B>,
    o: Linear<B>,
    /// `W_{k,R}` of Transformer-XL: projects the sinusoid positions, no bias.
    pos: B::Weight,
    /// Content and position biases `u`, `v`, flattened `(H·Dh)`.
    bias_u: B::Tensor,
    bias_v: B::Tensor,
}

struct ConvModule<B: Backend> {
    pw1: Linear<B>,
    /// Depthwise kernel `(C, K)` and bias with the batch norm folded in.
    dw_w: B::Tensor,
    dw_b: B::Tensor,
    pw2: Linear<B>,
}

struct Block<B: Backend> {
    norm_ff1: Norm<B>,
    ff1: FeedForward<B>,
    norm_att: Norm<B>,
    attn: RelAttention<B>,
    norm_conv: Norm<B>,
    conv: ConvModule<B>,
    norm_ff2: Norm<B>,
    ff2: FeedForward<B>,
    norm_out: Norm<B>,
}

/// A further strided subsampling stage: depthwise `(C, 1, k, k)` then pointwise `(C, C, 1, 1)`,
/// the pointwise one run as a GEMM over `(B, T·F, C)` (a direct 1×1 conv of 256 channels is the
/// slowest op of a batched pass otherwise).
struct Stage<B: Backend> {
    dw_w: B::Tensor,
    dw_b: B::Tensor,
    pw: Linear<B>,
}

pub(crate) struct Encoder<B: Backend> {
    pub(crate) cfg: EncoderConfig,
    conv0_w: B::Tensor,
    conv0_b: B::Tensor,
    stages: Vec<Stage<B>>,
    /// Input columns permuted from `[c][f]` to `[f][c]` (see `load`).
    sub_linear: Linear<B>,
    blocks: Vec<Block<B>>,
    pub chunking: Chunking,
    /// Project the position sinusoids for every layer in [`Encoder::prepare`] where they fit
    /// [`POS_ONCE_MAX_ELEMS`]: they do not depend on the input, so a captured chain replays
    /// without those GEMMs (on every home, so eager and captured passes compute them alike).
    pub(crate) pos_once: bool,
    /// `scale_input`'s `sqrt(d)` is folded into `sub_linear` (done when it is a power of two:
    /// then exact in every lane, the same bits as scaling the output).
    scale_folded: bool,
}

/// How long inputs are cut so memory stays bounded; results do not depend on it (each chunk
/// sees the context it needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunking {
    /// Feature frames per subsampling chunk (rounded down to a multiple of the subsampling
    /// factor); each chunk runs with a two-output-frame halo on each side.
    pub subsampling_frames: usize,
    /// Query rows per attention block: score matrices are `(B·H, rows, T')`.
    pub attention_queries: usize,
}

impl Default for Chunking {
    fn default() -> Self {
        Self {
            subsampling_frames: 4096,
            attention_queries: 256,
        }
    }
}

impl<B: Backend> Encoder<B> {
    pub fn load(b: &B, t: &Tensors<'_>, cfg: &EncoderConfig, lane: Lane) -> Result<Self> {
        let mut stages = Vec::new();
        for i in 1..cfg.subsampling_layers() {
            let (dw, pw) = subsampling_conv(i);
            stages.push(Stage {
                dw_w: t.tensor(b, &format!("{dw}.weight"))?,
                dw_b: t.tensor(b, &format!("{dw}.bias"))?,
                // Two small GEMMs at the front of the network: q8 rounding here would feed
                // every later layer, so a q8 model keeps them in f16.
                pw: Linear::load(b, t, &pw, if lane == Lane::Q8 { Lane::F16 } else { lane })?,
            });
        }
        // transformers flattens the subsampled (C, F) per frame channel-major; permuting the
        // linear's input columns to frequency-major lets the forward pass flatten with a single
        // transpose of (B, C, T·F).
        let lw = t.get(&format!("{SUB_LINEAR}.weight"))?;
        let (ch, nf) = (cfg.subsampling_channels, cfg.subsampled_mels());
        let (rows, cols) = (lw.shape[0], lw.shape[1]);
        if cols != ch * nf {
            return Err(ModelError::bad_tensor(
                t.path,
                format!("{SUB_LINEAR}.weight"),
                format!("{cols} inputs, expected {ch} channels × {nf} mel bins"),
            ));
        }
        let mut perm = vec![0f32; lw.len()];
        for r in 0..rows {
            for c in 0..ch {
                for f in 0..nf {
                    perm[r * cols + f * ch + c] = lw.data[r * cols + c * nf + f];
                }
            }
        }
        let xs = (cfg.hidden_size as f32).sqrt();
        let scale_folded = cfg.scale_input && xs.fract() == 0.0 && (xs as u32).is_power_of_two();
        let bias = t.map.get(&format!("{SUB_LINEAR}.bias"));
        let sub_linear = if scale_folded {
            perm.iter_mut().for_each(|v| *v *= xs);
            Linear {
                w: b.weight(&HostTensor::new(vec![rows, cols], perm)?, lane)?,
                b: bias
                    .map(|bt| {
                        let data = bt.data.iter().map(|v| v * xs).collect();
                        b.upload(&HostTensor::new(bt.shape.clone(), data)?)
                    })
                    .transpose()?,
            }
        } else {
            Linear {
                w: b.weight(&HostTensor::new(vec![rows, cols], perm)?, lane)?,
                b: bias.map(|bt| b.upload(bt)).transpose()?,
            }
        };
        let mut blocks = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            blocks.push(Block::load(b, t, &LayerNames::new(l), lane)?);
        }
        Ok(Self {
            cfg: cfg.clone(),
            conv0_w: t.tensor(b, &format!("{SUB_CONV0}.weight"))?,
            conv0_b: t.tensor(b, &format!("{SUB_CONV0}.bias"))?,
            stages,
            sub_linear,
            blocks,
            chunking: Chunking::default(),
            pos_once: pos_once_default(),
            scale_folded,
        })
    }

    /// The device tensors a pass over `(batch, t_in)` feature frames reads besides the features,
    /// made here because a captured chain may not upload. `lengths` (feature frames per
    /// sequence, each ≤ `t_in`) adds the padding masks; `None` means every sequence is full.
    pub fn prepare(
        &self,
        b: &B,
        batch: usize,
        t_in: usize,
        lengths: Option<&[usize]>,
    ) -> Result<Prepared<B>> {
        let t = self.cfg.output_frames(t_in);
        let chunk = self.chunking.attention_queries.clamp(1, t.max(1));
        let masks = lengths
            .map(|lens| self.masks(b, batch, t_in, lens))
            .transpose()?;
        let pos = b.upload(&rel_positions(t, self.cfg.hidden_size))?;
        let elems = self.blocks.len() * (2 * t).saturating_sub(1) * self.cfg.hidden_size;
        let pos_proj = if self.pos_once && elems <= POS_ONCE_MAX_ELEMS {
            let proj = self
                .blocks
                .iter()
                .map(|blk| Ok(b.encoder_constant(b.linear(&pos, &blk.attn.pos, None)?)?))
                .collect::<Result<Vec<_>>>()?;
            Some(proj)
        } else {
            None
        };
        Ok(Prepared {
            pos,
            pos_proj,
            chunk,
            masks,
            batch,
            t_in,
        })
    }

    /// Keep masks of a padded `(batch, t_in)` pass: `lens` feature frames per sequence.
    pub fn masks(&self, b: &B, batch: usize, t_in: usize, lens: &[usize]) -> Result<Masks<B>> {
        if lens.len() != batch || lens.iter().any(|&l| l > t_in || l == 0) {
            return Err(ModelError::BadInput(format!(
                "lengths {lens:?} for a batch of {batch} × {t_in} frames"
            )));
        }
        let (k, st) = (self.cfg.subsampling_kernel, self.cfg.subsampling_stride);
        // Layer l's keep mask (B, T_l, 1): 1 where the frame lies inside its sequence.
        let keep = |full: usize, lens: &[usize]| -> Result<B::Tensor> {
            let data = lens
                .iter()
                .flat_map(|&l| (0..full).map(move |i| if i < l { 1.0 } else { 0.0 }))
                .collect();
            Ok(b.upload(&HostTensor::new(vec![batch, full, 1], data)?)?)
        };
        let mut sub = Vec::new();
        let (mut full, mut lens) = (t_in, lens.to_vec());
        for _ in 0..self.cfg.subsampling_layers() {
            sub.push(keep(full, &lens)?);
            full = conv_out(full, k, st);
            lens.iter_mut().for_each(|l| *l = conv_out(*l, k, st));
        }
        Ok(Masks {
            sub,
            frames: keep(full, &lens)?,
        })
    }

    /// `features (B, T, n_mels)` → `(B, T_out, d)`, `T_out = cfg.output_frames(T)`, with `prep`
    /// from [`Encoder::prepare`] for the same `(B, T)`. Only device ops: a home may capture it.
    /// With masks, each sequence's frames equal its own unpadded pass (padding is zeroed before
    /// every conv that mixes frames and excluded from attention keys); frames past a sequence's
    /// length are unspecified.
    pub fn forward_prepared(
        &self,
        b: &B,
        features: &B::Tensor,
        prep: &Prepared<B>,
    ) -> Result<B::Tensor> {
        let s = features.shape();
        if s.len() != 3 || s[0] != prep.batch || s[1] != prep.t_in {
            return Err(ModelError::BadInput(format!(
                "encoder input {s:?} does not match its prepared ({}, {}) pass",
                prep.batch, prep.t_in
            )));
        }
        let x = self.subsample(b, features, prep.masks.as_ref())?; // (B, T', d)
        let x = if self.cfg.scale_input && !self.scale_folded {
            b.affine(&x, (self.cfg.hidden_size as f32).sqrt(), 0.0)?
        } else {
            x
        };
        let mut x = x;
        // norm_ff1(x) of the next block, made together with this block's closing norm
        let mut h = None;
        for (l, blk) in self.blocks.iter().enumerate() {
            let ctx = AttnCtx {
                chunk: prep.chunk,
                heads: self.cfg.num_heads,
                scale: 1.0 / (self.cfg.head_dim() as f32).sqrt(),
                pos: &prep.pos,
                pos_proj: prep.pos_proj.as_ref().and_then(|p| p.get(l)),
                keep: prep.masks.as_ref().map(|m| &m.frames),
            };
            let next = self.blocks.get(l + 1);
            (x, h) = blk.forward(b, &x, h.take(), &ctx, self.cfg.activation, next)?;
        }
        Ok(x)
    }

    /// `(B, T, n_mels)` → `(B, T', d)`, in time chunks when T is long: the first strided conv's
    /// output alone is `C × T/2 × F/2` values.
    fn subsample(
        &self,
        b: &B,
        features: &B::Tensor,
        masks: Option<&Masks<B>>,
    ) -> Result<B::Tensor> {
        let f = self.cfg.subsampling_factor.max(1);
        let t = features.shape()[1];
        let chunk = (self.chunking.subsampling_frames / f).max(1) * f;
        if t <= chunk + 4 * f {
            return self.subsample_block(b, features, masks.map(|m| m.sub.as_slice()));
        }
        // Output frame k reads input frames 8k-7 … 8k+7 (k=3, stride 2, three layers), so a
        // two-output-frame halo on each side makes every kept frame exact; chunk starts stay
        // multiples of the factor so local and global output indices line up (and layer l's
        // local frame i is global frame lo/2^l + i, which is how the masks are cut).
        let halo = 2 * f;
        let total = self.cfg.output_frames(t);
        let mut parts = Vec::new();
        for s0 in (0..t).step_by(chunk) {
            let e = (s0 + chunk).min(t);
            let lo = s0.saturating_sub(halo);
            let hi = (e + halo).min(t);
            let keep = match masks {
                None => None,
                Some(m) => {
                    let mut v = Vec::with_capacity(m.sub.len());
                    let (mut start, mut len) = (lo, hi - lo);
                    for k in &m.sub {
                        v.push(b.slice(k, 1, start, len)?);
                        start /= self.cfg.subsampling_stride.max(1);
                        len = conv_out(
                            len,
                            self.cfg.subsampling_kernel,
                            self.cfg.subsampling_stride,
                        );
                    }
                    Some(v)
                }
            };
            let y =
                self.subsample_block(b, &b.slice(features, 1, lo, hi - lo)?, keep.as_deref())?;
            let first = s0 / f;
            let last = if e == t { total } else { e / f };
            parts.push(b.slice(&y, 1, first - lo / f, last - first)?);
        }
        Ok(b.concat(&parts.iter().collect::<Vec<_>>(), 1)?)
    }

    /// `keep[l]` `(B, T_l)` masks the input of strided conv `l` (zero padding past each
    /// sequence, as its own pass would see).
    fn subsample_block(
        &self,
        b: &B,
        features: &B::Tensor,
        keep: Option<&[B::Tensor]>,
    ) -> Result<B::Tensor> {
        let bs = features.shape()[0];
        let p = StridingParams {
            kernel: self.cfg.subsampling_kernel,
            stride: self.cfg.subsampling_stride,
            padding: (self.cfg.subsampling_kernel - 1) / 2,
        };
        let keep_of = |l: usize| keep.and_then(|k| k.get(l));
        let Some(first) = self.stages.first() else {
            // a single strided conv (factor 2): conv, ReLU, flattened per frame
            let s = features.shape().to_vec();
            let mut x = b.reshape(features, &[s[0], 1, s[1], s[2]])?;
            if let Some(k) = keep_of(0) {
                x = b.mask_fill(&x, k, s[2], 0.0)?;
            }
            let conv = Conv2dParams {
                kernel: (p.kernel, p.kernel),
                stride: (p.stride, p.stride),
                padding: (p.padding, p.padding),
                groups: 1,
            };
            let x = b.conv2d(&x, &self.conv0_w, Some(&self.conv0_b), conv)?;
            let x = b.activation(&x, Activation::Relu)?; // (B, C, T', F')
            let xs = x.shape().to_vec();
            let x = b.reshape(&x, &[xs[0], xs[1], xs[2] * xs[3]])?;
            let x = b.transpose_last2(&x)?; // (B, T'·F', C)
            let x = b.reshape(&x, &[xs[0], xs[2], xs[3] * xs[1]])?;
            return self.sub_linear.forward(b, &x);
        };
        // Channel-last throughout, (B, T_l, F_l, C): the pointwise convs are GEMMs over
        // (B, T_l·F_l, C) and the permuted `sub_linear` reads each frame frequency-major.
        // conv0 → ReLU → mask → stage 0's depthwise conv
        let mut x = b.subsample_stem(
            features,
            keep_of(0),
            &self.conv0_w,
            &self.conv0_b,
            keep_of(1),
            &first.dw_w,
            &first.dw_b,
            &p,
        )?;
        let last = self.stages.len() - 1;
        for (i, st) in self.stages.iter().enumerate() {
            if i > 0 {
                // the previous stage's ReLU is applied as this conv reads its input
                x = b.depthwise_conv2d_cl(&x, keep_of(i + 1), true, &st.dw_w, &st.dw_b, &p)?;
            }
            let s = x.shape().to_vec(); // (B, T_l, F_l, C)
            let x2 = b.reshape(&x, &[s[0], s[1] * s[2], s[3]])?;
            // the last stage's ReLU (before `sub_linear`) where the home fuses it into the GEMM
            let y = if i == last {
                b.linear_act(&x2, &st.pw.w, st.pw.b.as_ref(), Activation::Relu)?
            } else {
                st.pw.forward(b, &x2)?
            };
            x = b.reshape(&y, &s)?;
        }
        let s = x.shape().to_vec();
        let y = b.reshape(&x, &[bs, s[1], s[2] * s[3]])?;
        self.sub_linear.forward(b, &y)
    }
}

/// Sinusoid embeddings of the relative positions `T-1, T-2, …, -(T-1)`, sin and cos interleaved
/// per frequency (transformers' `ParakeetEncoderRelPositionalEncoding`): `(1, 2T-1, d)`.
pub(crate) fn rel_positions(t: usize, d: usize) -> HostTensor {
    let n = 2 * t - 1;
    let half = d / 2;
    // Computed in f32 as the reference does, so the sin/cos arguments round the same way.
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| 1.0 / 10000f32.powf((2 * i) as f32 / d as f32))
        .collect();
    let mut data = Vec::with_capacity(n * d);
    for k in 0..n {
        let p = (t as f32 - 1.0) - k as f32;
        for f in &inv_freq {
            let a = p * f;
            data.push(a.sin());
            data.push(a.cos());
        }
    }
    HostTensor {
        shape: vec![1, n, d],
        data,
    }
}

/// Device tensors of one encoder pass (see [`Encoder::prepare`]).
pub(crate) struct Prepared<B: Backend> {
    /// Relative-position sinusoids `(1, 2T'-1, d)`.
    pos: B::Tensor,
    /// Per layer, `pos` through that layer's `W_{k,R}` `(1, 2T'-1, d)`, when made up front.
    pos_proj: Option<Vec<B::Tensor>>,
    /// Query rows per attention block.
    chunk: usize,
    masks: Option<Masks<B>>,
    batch: usize,
    t_in: usize,
}

impl<B: Backend> Prepared<B> {
    /// Rewrite the masks in place (same shapes), so a captured chain that reads them sees new
    /// lengths on its next replay.
    pub fn refresh_masks(&mut self, b: &B, fresh: &Masks<B>) -> Result<()> {
        if let Some(m) = self.masks.as_mut() {
            for (dst, src) in m.sub.iter_mut().zip(&fresh.sub) {
                b.write_rows(dst, src, 0)?;
            }
            b.write_rows(&mut m.frames, &fresh.frames, 0)?;
        }
        Ok(())
    }
}

/// Keep masks (1 inside a sequence, 0 in its padding) of a padded batch.
pub(crate) struct Masks<B: Backend> {
    /// Per strided conv: its input frames `(B, T_l, 1)`, `T_0` the feature frames.
    sub: Vec<B::Tensor>,
    /// Encoder frames `(B, T', 1)`.
    frames: B::Tensor,
}

/// What every attention layer of one forward pass shares.
struct AttnCtx<'a, B: Backend> {
    /// Query rows per block where the home composes the attention.
    chunk: usize,
    heads: usize,
    scale: f32,
    pos: &'a B::Tensor,
    /// This layer's projection of `pos`, when [`Encoder::prepare`] made it.
    pos_proj: Option<&'a B::Tensor>,
    /// `(B, T')` key mask of a padded batch.
    keep: Option<&'a B::Tensor>,
}

impl<B: Backend> RelAttention<B> {
    fn load(b: &B, t: &Tensors<'_>, n: &LayerNames, lane: Lane) -> Result<Self> {
        Ok(Self {
            qkv: Linear::load_stacked(b, t, &[n.attn("q"), n.attn("k"), n.attn("v")], lane)?,
            o: Linear::load(b, t, &n.attn("o"), lane)?,
            pos: t.weight(b, &format!("{}.weight", n.attn("relative_k")), lane)?,
            bias_u: t.flat_tensor(b, &n.attn_bias("bias_u"))?,
            bias_v: t.flat_tensor(b, &n.attn_bias("bias_v"))?,
        })
    }

    /// Transformer-XL attention: scores = ((q+u)·kᵀ + shift((q+v)·pᵀ))·scale, over `h (B, T, d)`,
    /// its output projection landing on the residual stream `x`, then `norms` of the result (the
    /// last feeding the linear of weight `next`): `(x', norms' results)`.
    fn forward_norms(
        &self,
        b: &B,
        h: &B::Tensor,
        cx: &AttnCtx<'_, B>,
        x: &B::Tensor,
        norms: &[(&B::Tensor, Option<&B::Tensor>)],
        next: Option<Feeds<'_, B::Weight>>,
    ) -> Result<(B::Tensor, Vec<B::Tensor>)> {
        let qkv = self.qkv.forward(b, h)?; // (B, T, 3d)
        let projected;
        let p = match cx.pos_proj {
            Some(p) => p,
            None => {
                projected = b.linear(cx.pos, &self.pos, None)?;
                &projected
            }
        }; // (1, 2T-1, d)
        let params = RelAttnParams {
            heads: cx.heads,
            scale: cx.scale,
            query_block: cx.chunk,
        };
        let pass = Feeding::RelAttention {
            qkv: &qkv,
            pos: p,
            bias_u: &self.bias_u,
            bias_v: &self.bias_v,
            keep: cx.keep,
            p: params,
        };
        let o = &self.o;
        Ok(b.feeding_add_norms(pass, &o.w, o.b.as_ref(), x, norms, NORM_EPS, next)?)
        // (B, T, d)
    }
}

/// A depthwise kernel `(C, 1, K)` and its optional bias with an inference batch norm
/// (`[weight, bias, running_mean, running_var]`, eps 1e-5) folded in: the norm is a per-channel
/// affine map. Returns the kernel `(C·K)` and bias `(C)`.
pub(crate) fn fold_batch_norm(
    dw: &HostTensor,
    dw_bias: Option<&HostTensor>,
    [gamma, beta, mean, var]: [&HostTensor; 4],
) -> (Vec<f32>, Vec<f32>) {
    let c = dw.shape.first().copied().unwrap_or(0);
    let kk = dw.len() / c.max(1);
    let mut w = vec![0f32; c * kk];
    let mut bias = vec![0f32; c];
    for ch in 0..c {
        let s = gamma.data[ch] as f64 / (var.data[ch] as f64 + NORM_EPS as f64).sqrt();
        for j in 0..kk {
            w[ch * kk + j] = (dw.data[ch * kk + j] as f64 * s) as f32;
        }
        let b0 = dw_bias.map_or(0.0, |bb| bb.data[ch] as f64);
        bias[ch] = ((b0 - mean.data[ch] as f64) * s + beta.data[ch] as f64) as f32;
    }
    (w, bias)
}

impl<B: Backend> ConvModule<B> {
    fn load(b: &B, t: &Tensors<'_>, n: &LayerNames, lane: Lane) -> Result<Self> {
        let dw = t.get(&format!("{}.weight", n.conv("depthwise_conv")))?; // (C, 1, K)
        let c = dw.shape[0];
        let kk = dw.len() / c.max(1);
        let dw_bias = t.map.get(&format!("{}.bias", n.conv("depthwise_conv")));
        let bn = |s: &str| t.get(&format!("{}.{s}", n.conv("norm")));
        let (gamma, beta, mean, var) = (
            bn("weight")?,
            bn("bias")?,
            bn("running_mean")?,
            bn("running_var")?,
        );
        let (w, bias) = fold_batch_norm(dw, dw_bias, [gamma, beta, mean, var]);
        Ok(Self {
            pw1: Linear::load(b, t, &n.conv("pointwise_conv1"), lane)?,
            dw_w: b.upload(&HostTensor::new(vec![c, kk], w)?)?,
            dw_b: b.upload(&HostTensor::new(vec![c], bias)?)?,
            pw2: Linear::load(b, t, &n.conv("pointwise_conv2"), lane)?,
        })
    }

    /// Over the normed `h (B, T, d)`, landing on the residual stream `x`, then `norms` of the
    /// result (the last feeding the linear of weight `next`): `(x', norms' results)`.
    #[allow(clippy::too_many_arguments)]
    fn forward_norms(
        &self,
        b: &B,
        h: &B::Tensor,
        act: Activation,
        keep: Option<&B::Tensor>,
        x: &B::Tensor,
        norms: &[(&B::Tensor, Option<&B::Tensor>)],
        next: Option<Feeds<'_, B::Weight>>,
    ) -> Result<(B::Tensor, Vec<B::Tensor>)> {
        let h = self.pw1.forward(b, h)?; // (B, T, 2C)
                                         // GLU, zeros past each sequence (as its own pass sees), depthwise conv, activation
        let pass = Feeding::GluDepthwiseAct {
            x: &h,
            keep,
            w: &self.dw_w,
            bias: Some(&self.dw_b),
            act,
        }; // (B, T, C)
        let pw2 = &self.pw2;
        Ok(b.feeding_add_norms(pass, &pw2.w, pw2.b.as_ref(), x, norms, NORM_EPS, next)?)
    }
}

impl<B: Backend> FeedForward<B> {
    fn load(b: &B, t: &Tensors<'_>, n: &LayerNames, which: usize, lane: Lane) -> Result<Self> {
        Self::load_half_step(b, t, &n.ff(which, 1), &n.ff(which, 2), lane)
    }

    /// A macaron half-step feed-forward from its two linears' prefixes.
    pub fn load_half_step(b: &B, t: &Tensors<'_>, l1: &str, l2: &str, lane: Lane) -> Result<Self> {
        Ok(Self {
            l1: Linear::load(b, t, l1, lane)?,
            l2: Linear::load_scaled(b, t, l2, lane, 0.5)?,
        })
    }
    /// Over the normed `h (B, T, d)`, landing on the residual stream `x`, followed by `norms`
    /// of the result (the next sub-block's, or the block's closing norm and the next block's
    /// first), the last feeding the linear of weight `next`: `(x', norms' results)`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_norms(
        &self,
        b: &B,
        h: &B::Tensor,
        act: Activation,
        x: &B::Tensor,
        norms: &[(&B::Tensor, Option<&B::Tensor>)],
        next: Option<Feeds<'_, B::Weight>>,
    ) -> Result<(B::Tensor, Vec<B::Tensor>)> {
        // the activation in l1's epilogue where the home fuses it, and l2's input form beside
        let pass = Feeding::LinearAct {
            x: h,
            w: &self.l1.w,
            bias: self.l1.b.as_ref(),
            act,
        };
        let l2 = &self.l2;
        Ok(b.feeding_add_norms(pass, &l2.w, l2.b.as_ref(), x, norms, NORM_EPS, next)?)
    }
}

/// `w` as the sole reader of a sub-block's last norm: [`Block::forward`] hands that result to
/// the next sub-block's first linear and to nothing else.
fn only<W>(w: &W) -> Option<Feeds<'_, W>> {
    Some(Feeds { w, only: true })
}

/// The last of a fused op's results (`linear_add_norms` returns one per norm).
pub(crate) fn last<T>(v: &mut Vec<T>) -> Result<T> {
    v.pop().ok_or_else(|| {
        ModelError::BadInput("linear_add_norms returned fewer results than norms".into())
    })
}

impl<B: Backend> Block<B> {
    fn load(b: &B, t: &Tensors<'_>, n: &LayerNames, lane: Lane) -> Result<Self> {
        Ok(Self {
            norm_ff1: Norm::load(b, t, &n.norm("feed_forward1"))?,
            ff1: FeedForward::load(b, t, n, 1, lane)?,
            norm_att: Norm::load(b, t, &n.norm("self_att"))?,
            attn: RelAttention::load(b, t, n, lane)?,
            norm_conv: Norm::load(b, t, &n.norm("conv"))?,
            conv: ConvModule::load(b, t, n, lane)?,
            norm_ff2: Norm::load(b, t, &n.norm("feed_forward2"))?,
            ff2: FeedForward::load(b, t, n, 2, lane)?,
            norm_out: Norm::load(b, t, &n.norm("out"))?,
        })
    }

    /// Over the residual stream `x`, with `h = norm_ff1(x)` when the previous block made it;
    /// returns the block's output and, given the next block's first norm, that norm of it.
    fn forward(
        &self,
        b: &B,
        x: &B::Tensor,
        h: Option<B::Tensor>,
        cx: &AttnCtx<'_, B>,
        act: Activation,
        next: Option<&Block<B>>,
    ) -> Result<(B::Tensor, Option<B::Tensor>)> {
        // Macaron: each feed-forward contributes half a step (the ½ is folded into its output
        // projection at load). Every sub-block's last GEMM adds the residual stream itself.
        let h = match h {
            Some(h) => h,
            None => self.norm_ff1.feeding(b, x, &self.ff1.l1.w)?,
        };
        let norm_att = [self.norm_att.params()];
        let (x, mut hs) =
            self.ff1
                .forward_norms(b, &h, act, x, &norm_att, only(&self.attn.qkv.w))?;
        let h = last(&mut hs)?;
        let norm_conv = [self.norm_conv.params()];
        let (x, mut hs) =
            self.attn
                .forward_norms(b, &h, cx, &x, &norm_conv, only(&self.conv.pw1.w))?;
        let h = last(&mut hs)?;
        let norm_ff2 = [self.norm_ff2.params()];
        let (x, mut hs) =
            self.conv
                .forward_norms(b, &h, act, cx.keep, &x, &norm_ff2, only(&self.ff2.l1.w))?;
        let h = last(&mut hs)?;
        match next {
            Some(n) => {
                let norms = [self.norm_out.params(), n.norm_ff1.params()];
                let next_w = only(&n.ff1.l1.w);
                let (_, mut yz) = self.ff2.forward_norms(b, &h, act, &x, &norms, next_w)?;
                let z = last(&mut yz)?;
                Ok((last(&mut yz)?, Some(z)))
            }
            None => {
                let norms = [self.norm_out.params()];
                let (_, mut y) = self.ff2.forward_norms(b, &h, act, &x, &norms, None)?;
                Ok((last(&mut y)?, None))
            }
        }
    }
}
