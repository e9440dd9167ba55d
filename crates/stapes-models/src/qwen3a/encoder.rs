//! The Qwen3-ASR audio tower (transformers' `Qwen3ASREncoder`) and its projector into the text
//! model.
//!
//! Mel frames are cut into chunks of `2·n_window` (100 frames, 1 s); each chunk goes through
//! three stride-2 conv2d on its own (13 tokens a full chunk) and gets the sinusoid positions
//! `0..13` of its own. Only the tokens of a chunk's valid frames are kept; they then run through
//! pre-norm transformer layers whose attention is cut into windows of `window_tokens` (104
//! tokens, 8 s): a token attends only to the tokens of its window.

use super::config::AudioConfig;
use super::weights::{audio_layer, AUDIO, PROJECTOR};
use crate::fastconformer::encoder::{Linear, Tensors};
use crate::{ModelError, Result};
use stapes_core::{Activation, AttnParams, Backend, Conv2dParams, DeviceTensor, HostTensor, Lane};

/// PyTorch's `nn.LayerNorm` default, which every norm of the tower uses.
const NORM_EPS: f32 = 1e-5;

struct Norm<B: Backend> {
    g: B::Tensor,
    b: B::Tensor,
}

impl<B: Backend> Norm<B> {
    fn load(be: &B, t: &Tensors<'_>, p: &str) -> Result<Self> {
        Ok(Self {
            g: t.tensor(be, &format!("{p}.weight"))?,
            b: t.tensor(be, &format!("{p}.bias"))?,
        })
    }
    fn run(&self, be: &B, x: &B::Tensor) -> Result<B::Tensor> {
        Ok(be.layer_norm(x, &self.g, Some(&self.b), NORM_EPS)?)
    }
}

struct Layer<B: Backend> {
    ln_attn: Norm<B>,
    /// q | k | v as one GEMM.
    qkv: Linear<B>,
    out: Linear<B>,
    ln_ffn: Norm<B>,
    fc1: Linear<B>,
    fc2: Linear<B>,
}

pub struct AudioTower<B: Backend> {
    pub cfg: AudioConfig,
    /// `(C, C_in, 3, 3)` kernels and `(C)` biases of the three stride-2 convolutions.
    convs: Vec<(B::Tensor, B::Tensor)>,
    /// `(d, C·bins)`, no bias.
    conv_out: Linear<B>,
    /// `(tokens of a full chunk, d)`: the sinusoids each chunk starts again from.
    positions: B::Tensor,
    layers: Vec<Layer<B>>,
    ln_post: Norm<B>,
    proj1: Linear<B>,
    proj2: Linear<B>,
}

/// Whisper's sinusoids (transformers' `SinusoidsPositionEmbedding`): `[sin | cos]` of
/// `t · exp(−i·ln(10000)/(C/2 − 1))`, computed in f32 as PyTorch does.
pub fn sinusoids(length: usize, channels: usize) -> HostTensor {
    let half = channels / 2;
    let inc = (10000f64.ln() / (half.max(2) - 1) as f64) as f32;
    let inv: Vec<f32> = (0..half).map(|i| (-inc * i as f32).exp()).collect();
    let mut data = vec![0f32; length * channels];
    for (t, row) in data.chunks_exact_mut(channels).enumerate() {
        for (i, &f) in inv.iter().enumerate() {
            let a = t as f32 * f;
            row[i] = a.sin();
            row[half + i] = a.cos();
        }
    }
    HostTensor {
        shape: vec![length, channels],
        data,
    }
}

impl<B: Backend> AudioTower<B> {
    pub(crate) fn load(be: &B, t: &Tensors<'_>, cfg: &AudioConfig, lane: Lane) -> Result<Self> {
        let convs = (1..=3)
            .map(|i| {
                Ok((
                    t.tensor(be, &format!("{AUDIO}.conv2d{i}.weight"))?,
                    t.tensor(be, &format!("{AUDIO}.conv2d{i}.bias"))?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let p = audio_layer(i);
                let a = format!("{p}.self_attn");
                Ok(Layer {
                    ln_attn: Norm::load(be, t, &format!("{p}.self_attn_layer_norm"))?,
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
                    out: Linear::load(be, t, &format!("{a}.out_proj"), lane)?,
                    ln_ffn: Norm::load(be, t, &format!("{p}.final_layer_norm"))?,
                    fc1: Linear::load(be, t, &format!("{p}.fc1"), lane)?,
                    fc2: Linear::load(be, t, &format!("{p}.fc2"), lane)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let chunk_tokens = AudioConfig::chunk_tokens(cfg.chunk_frames());
        Ok(Self {
            cfg: cfg.clone(),
            convs,
            conv_out: Linear::load(be, t, &format!("{AUDIO}.conv_out"), lane)?,
            positions: be.upload(&sinusoids(chunk_tokens, cfg.d_model))?,
            layers,
            ln_post: Norm::load(be, t, &format!("{AUDIO}.ln_post"))?,
            proj1: Linear::load(be, t, &format!("{PROJECTOR}.linear_1"), lane)?,
            proj2: Linear::load(be, t, &format!("{PROJECTOR}.linear_2"), lane)?,
        })
    }

    /// The conv stem's input: chunks `(n_chunks, 1, n_mels, chunk)` of `features (T, n_mels)`
    /// (frames-major), only the chunks that hold one of the `valid` frames, frames past `T` zero
    /// (as transformers pads the mel axis).
    pub fn chunks(&self, features: &HostTensor, valid: usize) -> Result<HostTensor> {
        let (mels, c) = (self.cfg.n_mels, self.cfg.chunk_frames());
        let s = &features.shape;
        if s.len() != 2 || s[1] != mels {
            return Err(ModelError::BadInput(format!(
                "features {s:?}, expected (T, {mels})"
            )));
        }
        if valid == 0 || valid > s[0] {
            return Err(ModelError::BadInput(format!(
                "{valid} valid frames of {} feature frames",
                s[0]
            )));
        }
        let n = valid.div_ceil(c);
        let mut data = vec![0f32; n * mels * c];
        for (f, row) in features.data.chunks_exact(mels).take(n * c).enumerate() {
            let (chunk, j) = (f / c, f % c);
            for (m, &v) in row.iter().enumerate() {
                data[(chunk * mels + m) * c + j] = v;
            }
        }
        Ok(HostTensor::new(vec![n, 1, mels, c], data)?)
    }

    /// The tower's output `(1, N, d)` after `ln_post` for `features (T, n_mels)` of which the
    /// first `valid` frames are audio: `N = cfg.tokens(valid)`.
    pub fn forward(&self, be: &B, features: &HostTensor, valid: usize) -> Result<B::Tensor> {
        let x = be.upload(&self.chunks(features, valid)?)?;
        self.forward_chunks(be, &x, valid)
    }

    /// [`AudioTower::forward`] from the chunks `(n, 1, n_mels, chunk)` already on the device
    /// ([`AudioTower::chunks`]).
    pub fn forward_chunks(&self, be: &B, x: &B::Tensor, valid: usize) -> Result<B::Tensor> {
        let cfg = &self.cfg;
        let s = x.shape();
        if s.len() != 4 || s[0] != valid.div_ceil(cfg.chunk_frames()) || valid == 0 {
            return Err(ModelError::BadInput(format!(
                "chunks {s:?} do not hold {valid} valid frames"
            )));
        }
        let n_chunks = s[0];
        let conv = Conv2dParams {
            kernel: (3, 3),
            stride: (2, 2),
            padding: (1, 1),
            groups: 1,
        };
        let mut h: Option<B::Tensor> = None;
        for (w, b) in &self.convs {
            let y = be.conv2d(h.as_ref().unwrap_or(x), w, Some(b), conv)?;
            h = Some(be.activation(&y, Activation::Gelu)?);
        }
        let h = h.as_ref().unwrap_or(x);
        // (n, C, bins, t) → (n, t, C·bins): a token reads every channel's bins, channel-major
        let s = h.shape().to_vec();
        let h = be.reshape(h, &[s[0], s[1] * s[2], s[3]])?;
        let h = be.transpose_last2(&h)?;
        let h = be.linear(&h, &self.conv_out.w, None)?; // (n, t, d)
        let h = be.add(&h, &self.positions)?;
        let t_chunk = s[3];
        let last = AudioConfig::chunk_tokens(valid - (n_chunks - 1) * cfg.chunk_frames());
        let n_tokens = (n_chunks - 1) * t_chunk + last;
        debug_assert_eq!(n_tokens, cfg.tokens(valid));
        let h = be.reshape(&h, &[1, n_chunks * t_chunk, cfg.d_model])?;
        let mut h = be.slice(&h, 1, 0, n_tokens)?; // (1, N, d)
        let p = AttnParams {
            n_heads: cfg.n_heads,
            scale: (cfg.head_dim() as f32).powf(-0.5),
            kv_len: None,
            causal: false,
        };
        for l in &self.layers {
            let qkv = be.linear(&l.ln_attn.run(be, &h)?, &l.qkv.w, l.qkv.b.as_ref())?;
            let a = self.windowed_attention(be, &qkv, &p)?;
            h = be.linear_add(&a, &l.out.w, l.out.b.as_ref(), &h)?;
            let f = l.ln_ffn.run(be, &h)?;
            h = be.mlp_add(
                &f,
                &l.fc1.w,
                l.fc1.b.as_ref(),
                Activation::Gelu,
                &l.fc2.w,
                l.fc2.b.as_ref(),
                &h,
            )?;
        }
        self.ln_post.run(be, &h)
    }

    /// Self-attention of `qkv (1, N, 3d)` within windows of `window_tokens` rows: the whole
    /// windows as one batch, the rest as another.
    fn windowed_attention(&self, be: &B, qkv: &B::Tensor, p: &AttnParams) -> Result<B::Tensor> {
        let (n, c3) = (qkv.shape()[1], qkv.shape()[2]);
        let w = self.cfg.window_tokens();
        let (full, rest) = (n / w, n % w);
        let mut parts = Vec::with_capacity(2);
        if full > 0 {
            let x = be.slice(qkv, 1, 0, full * w)?;
            let x = be.reshape(&x, &[full, w, c3])?;
            let a = be.attention_packed(&x, p)?;
            parts.push(be.reshape(&a, &[1, full * w, c3 / 3])?);
        }
        if rest > 0 {
            let x = be.slice(qkv, 1, full * w, rest)?;
            parts.push(be.attention_packed(&x, p)?);
        }
        match parts.len() {
            1 => Ok(parts.pop().expect("one part")),
            _ => Ok(be.concat(&parts.iter().collect::<Vec<_>>(), 1)?),
        }
    }

    /// The projector: `(1, N, d)` tower output → `(1, N, text hidden)` audio embeddings.
    pub fn project(&self, be: &B, tower: &B::Tensor) -> Result<B::Tensor> {
        let h = be.linear_act(
            tower,
            &self.proj1.w,
            self.proj1.b.as_ref(),
            Activation::Gelu,
        )?;
        Ok(be.linear(&h, &self.proj2.w, self.proj2.b.as_ref())?)
    }
}
