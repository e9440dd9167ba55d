//! Whisper's audio encoder: two convolutions, learned/sinusoid positions, pre-LN transformer blocks.

use super::model::{Attn, Mlp, Norm, Tensors};
use crate::Result;
use stapes_core::{Activation, Backend, Conv1dParams, DeviceTensor, Lane};

/// Layer-norm epsilon of every Whisper norm (PyTorch's default).
pub(crate) const LN_EPS: f32 = 1e-5;

pub(crate) struct EncoderLayer<B: Backend> {
    pub attn_ln: Norm<B>,
    pub attn: Attn<B>,
    pub mlp_ln: Norm<B>,
    pub mlp: Mlp<B>,
}

pub(crate) struct Encoder<B: Backend> {
    conv1_w: B::Weight,
    conv1_b: B::Tensor,
    conv2_w: B::Weight,
    conv2_b: B::Tensor,
    /// (n_audio_ctx, d)
    positions: B::Tensor,
    layers: Vec<EncoderLayer<B>>,
    ln_post: Norm<B>,
    heads: usize,
    /// Mel frames one window holds (2 × n_audio_ctx: conv2 has stride 2).
    pub n_frames: usize,
}

impl<B: Backend> Encoder<B> {
    pub fn load(b: &B, t: &Tensors<'_>, n_layers: usize, heads: usize, lane: Lane) -> Result<Self> {
        let p = "model.encoder";
        // (C_out, C_in, K) flattened to the GEMM weight (C_out, C_in·K) the op contract wants
        let conv = |name: &str| t.weight_of_rank(b, &format!("{p}.{name}.weight"), 3, lane);
        let positions = t.tensor(b, &format!("{p}.embed_positions.weight"))?;
        let mut layers = Vec::with_capacity(n_layers);
        for l in 0..n_layers {
            let q = format!("{p}.layers.{l}");
            layers.push(EncoderLayer {
                attn_ln: Norm::load(b, t, &format!("{q}.self_attn_layer_norm"))?,
                attn: Attn::load(b, t, &format!("{q}.self_attn"), lane)?,
                mlp_ln: Norm::load(b, t, &format!("{q}.final_layer_norm"))?,
                mlp: Mlp::load(b, t, &q, lane)?,
            });
        }
        Ok(Self {
            conv1_w: conv("conv1")?,
            conv1_b: t.tensor(b, &format!("{p}.conv1.bias"))?,
            conv2_w: conv("conv2")?,
            conv2_b: t.tensor(b, &format!("{p}.conv2.bias"))?,
            n_frames: 2 * positions.shape()[0],
            positions,
            layers,
            ln_post: Norm::load(b, t, &format!("{p}.layer_norm"))?,
            heads,
        })
    }

    /// `mel (B, n_frames, n_mels)` → `(B, n_audio_ctx, d)`.
    pub fn forward(&self, b: &B, mel: &B::Tensor) -> Result<B::Tensor> {
        let k3 = |stride| Conv1dParams {
            kernel: 3,
            stride,
            padding: 1,
        };
        let x = b.conv1d(mel, &self.conv1_w, Some(&self.conv1_b), k3(1))?; // (B, 3000, d)
        let x = b.activation(&x, Activation::Gelu)?;
        let x = b.conv1d(&x, &self.conv2_w, Some(&self.conv2_b), k3(2))?; // (B, 1500, d)
        let x = b.activation(&x, Activation::Gelu)?;
        let mut x = b.add(&x, &self.positions)?;
        for layer in &self.layers {
            let h = layer.attn_ln.forward(b, &x)?;
            let a = layer.attn.self_attention(b, &h, self.heads)?;
            x = b.add(&x, &a)?;
            let h = layer.mlp_ln.forward(b, &x)?;
            x = b.add(&x, &layer.mlp.forward(b, &h)?)?;
        }
        self.ln_post.forward(b, &x)
    }
}
