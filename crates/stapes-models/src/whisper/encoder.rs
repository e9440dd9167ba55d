//! Whisper's audio encoder: two convolutions, learned/sinusoid positions, pre-LN transformer blocks.

use super::model::{attn_params, Linear, Norm, Tensors};
use crate::Result;
use stapes_core::{Activation, Backend, Conv1dParams, DeviceTensor, Lane};

/// Layer-norm epsilon of every Whisper norm (PyTorch's default).
pub(crate) const LN_EPS: f32 = 1e-5;

pub(crate) struct EncoderLayer<B: Backend> {
    pub attn_ln: Norm<B>,
    pub attn: EncoderAttn<B>,
    pub mlp_ln: Norm<B>,
    pub fc1: Linear<B>,
    pub fc2: Linear<B>,
}

/// The encoder's self-attention: q, k and v stacked into one `(3d, d)` projection (one GEMM
/// over the layer-normed input instead of three; k's third of the bias is zero, as Whisper's
/// k_proj has none), read in place by [`Backend::attention_packed`]. The decoder keeps
/// separate projections (`model::Attn`): its cross-attention k/v read another input.
pub(crate) struct EncoderAttn<B: Backend> {
    pub qkv: Qkv<B>,
    pub o: Linear<B>,
}

pub(crate) enum Qkv<B: Backend> {
    /// `(3d, d)`: rows q | k | v.
    Stacked(Linear<B>),
    /// q, k, v apart, residual adds as separate ops: the previous form, kept for A/B timing
    /// (`STAPES_WHISPER_ENC_FUSED=0`, or `STAPES_WHISPER_FUSED=0` for both Whisper stacks, at
    /// load).
    Split([Linear<B>; 3]),
}

/// Whether the encoder loads stacked q/k/v, adds residuals inside GEMMs and runs fc1 with its
/// GELU as one `linear_act` (the default).
fn fused() -> bool {
    // the encoder's own switch first; STAPES_WHISPER_FUSED switches encoder and decoder
    std::env::var("STAPES_WHISPER_ENC_FUSED")
        .or_else(|_| std::env::var("STAPES_WHISPER_FUSED"))
        .map_or(true, |v| v.trim() != "0")
}

impl<B: Backend> EncoderAttn<B> {
    pub fn load(b: &B, t: &Tensors<'_>, prefix: &str, lane: Lane, fused: bool) -> Result<Self> {
        let names: Vec<String> = ["q_proj", "k_proj", "v_proj"]
            .iter()
            .map(|p| format!("{prefix}.{p}"))
            .collect();
        let o = Linear::load(b, t, &format!("{prefix}.out_proj"), lane)?;
        if !fused {
            let [q, k, v] = [0, 1, 2].map(|i| Linear::load(b, t, &names[i], lane));
            return Ok(Self {
                qkv: Qkv::Split([q?, k?, v?]),
                o,
            });
        }
        let weights: Vec<String> = names.iter().map(|n| format!("{n}.weight")).collect();
        let mut parts = Vec::with_capacity(3);
        for (n, w) in names.iter().zip(&weights) {
            parts.push((
                format!("{n}.bias"),
                t.shape(w)?.first().copied().unwrap_or(0),
            ));
        }
        Ok(Self {
            qkv: Qkv::Stacked(Linear {
                w: t.stacked_weight(b, &weights, lane)?,
                b: Some(t.stacked_bias(b, &parts)?),
            }),
            o,
        })
    }

    /// `x + out_proj(attention(ln(x)))` for `x (B, T, d)`: the residual `x` is added by the
    /// output projection.
    pub fn forward(&self, b: &B, ln: &Norm<B>, x: &B::Tensor, heads: usize) -> Result<B::Tensor> {
        let p = attn_params(x, heads, None, false);
        match &self.qkv {
            // (B, T, 3d) q|k|v and the (B, T, d) attention output between
            Qkv::Stacked(qkv) => ln.attention_add(b, x, qkv, &p, &self.o),
            Qkv::Split([q, k, v]) => {
                let h = ln.forward(b, x)?;
                let (q, k, v) = (q.forward(b, &h)?, k.forward(b, &h)?, v.forward(b, &h)?);
                let a = b.attention(&q, &k, &v, &p)?;
                Ok(b.add(x, &self.o.forward(b, &a)?)?)
            }
        }
    }
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
        Self::load_with(b, t, n_layers, heads, lane, fused())
    }

    /// `fused`: stacked q/k/v and residuals added by the GEMMs (else the previous form).
    pub fn load_with(
        b: &B,
        t: &Tensors<'_>,
        n_layers: usize,
        heads: usize,
        lane: Lane,
        fused: bool,
    ) -> Result<Self> {
        let p = "model.encoder";
        // (C_out, C_in, K) flattened to the GEMM weight (C_out, C_in·K) the op contract wants
        let conv = |name: &str| t.weight_of_rank(b, &format!("{p}.{name}.weight"), 3, lane);
        let positions = t.tensor(b, &format!("{p}.embed_positions.weight"))?;
        let mut layers = Vec::with_capacity(n_layers);
        for l in 0..n_layers {
            let q = format!("{p}.layers.{l}");
            layers.push(EncoderLayer {
                attn_ln: Norm::load(b, t, &format!("{q}.self_attn_layer_norm"))?,
                attn: EncoderAttn::load(b, t, &format!("{q}.self_attn"), lane, fused)?,
                mlp_ln: Norm::load(b, t, &format!("{q}.final_layer_norm"))?,
                fc1: Linear::load(b, t, &format!("{q}.fc1"), lane)?,
                fc2: Linear::load(b, t, &format!("{q}.fc2"), lane)?,
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
        let x = b.conv1d_act(
            mel,
            &self.conv1_w,
            Some(&self.conv1_b),
            k3(1),
            Activation::Gelu,
        )?; // (B, 3000, d)
        let x = b.conv1d_act(
            &x,
            &self.conv2_w,
            Some(&self.conv2_b),
            k3(2),
            Activation::Gelu,
        )?; // (B, 1500, d)
        let mut x = b.add(&x, &self.positions)?;
        for layer in &self.layers {
            x = layer.attn.forward(b, &layer.attn_ln, &x, self.heads)?;
            x = match layer.attn.qkv {
                // x + fc2(gelu(fc1(ln(x)))), the (B, T, 4d) hidden between
                Qkv::Stacked(_) => {
                    layer
                        .mlp_ln
                        .mlp_add(b, &x, &layer.fc1, Activation::Gelu, &layer.fc2)?
                }
                Qkv::Split(_) => {
                    let h = layer.mlp_ln.forward(b, &x)?;
                    let f = layer.fc1.forward(b, &h)?; // (B, T, 4d)
                    let f = b.activation(&f, Activation::Gelu)?;
                    b.add(&x, &layer.fc2.forward(b, &f)?)?
                }
            };
        }
        self.ln_post.forward(b, &x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stapes_core::reference::ReferenceBackend;
    use stapes_core::HostTensor;
    use std::collections::BTreeMap;
    use std::path::Path;

    /// Random weights of a small Whisper encoder (d 8, 2 heads, 2 layers, 4 mels, 6 positions)
    /// under the canonical names; k_proj without a bias, as Whisper has it.
    fn weights() -> BTreeMap<String, HostTensor> {
        let (d, mels, ctx) = (8, 4, 6);
        let mut m = BTreeMap::new();
        let mut seed = 1;
        let mut put = |name: String, shape: Vec<usize>, scale: f32| {
            seed += 1;
            m.insert(name, HostTensor::random(shape, seed, scale));
        };
        let p = "model.encoder";
        put(format!("{p}.conv1.weight"), vec![d, mels, 3], 0.5);
        put(format!("{p}.conv1.bias"), vec![d], 0.1);
        put(format!("{p}.conv2.weight"), vec![d, d, 3], 0.3);
        put(format!("{p}.conv2.bias"), vec![d], 0.1);
        put(format!("{p}.embed_positions.weight"), vec![ctx, d], 0.5);
        put(format!("{p}.layer_norm.weight"), vec![d], 1.0);
        put(format!("{p}.layer_norm.bias"), vec![d], 0.1);
        for l in 0..2 {
            let q = format!("{p}.layers.{l}");
            for ln in ["self_attn_layer_norm", "final_layer_norm"] {
                put(format!("{q}.{ln}.weight"), vec![d], 1.0);
                put(format!("{q}.{ln}.bias"), vec![d], 0.1);
            }
            for proj in ["q_proj", "k_proj", "v_proj", "out_proj"] {
                put(format!("{q}.self_attn.{proj}.weight"), vec![d, d], 0.4);
                if proj != "k_proj" {
                    put(format!("{q}.self_attn.{proj}.bias"), vec![d], 0.1);
                }
            }
            put(format!("{q}.fc1.weight"), vec![4 * d, d], 0.4);
            put(format!("{q}.fc1.bias"), vec![4 * d], 0.1);
            put(format!("{q}.fc2.weight"), vec![d, 4 * d], 0.2);
            put(format!("{q}.fc2.bias"), vec![d], 0.1);
        }
        m
    }

    /// The stacked q/k/v GEMM with `attention_packed` and the residuals through `linear_add`
    /// compute exactly what three projections, `attention` and separate adds compute: on the
    /// reference backend every output element is the same dot product, so the bits must match,
    /// in the exact lane and in q8 (quantized row by row, so stacking moves no value).
    #[test]
    fn stacked_qkv_and_linear_add_equal_the_split_form() {
        let map = weights();
        let b = ReferenceBackend::new();
        let t = Tensors {
            map: &map,
            stored: None,
            path: Path::new("synthetic"),
            lanes: None,
        };
        let mel = b
            .upload(&HostTensor::random(vec![2, 12, 4], 99, 1.0))
            .expect("mel");
        for lane in [Lane::F32, Lane::Q8] {
            let run = |fused: bool| {
                let e = Encoder::load_with(&b, &t, 2, 2, lane, fused).expect("load");
                assert!(matches!(
                    (&e.layers[0].attn.qkv, fused),
                    (Qkv::Stacked(_), true) | (Qkv::Split(_), false)
                ));
                b.download(&e.forward(&b, &mel).expect("forward"))
                    .expect("download")
            };
            let (stacked, split) = (run(true), run(false));
            assert_eq!(stacked.shape, vec![2, 6, 8]);
            assert_eq!(
                stacked.data, split.data,
                "{lane}: stacked differs from split"
            );
            // and the weights matter: another k_proj changes the output
            let mut other = map.clone();
            other.insert(
                "model.encoder.layers.1.self_attn.k_proj.weight".into(),
                HostTensor::random(vec![8, 8], 1234, 0.4),
            );
            let t2 = Tensors { map: &other, ..t };
            let e = Encoder::load_with(&b, &t2, 2, 2, lane, true).expect("load");
            let changed = b.download(&e.forward(&b, &mel).expect("fwd")).expect("dl");
            assert_ne!(changed.data, stacked.data, "{lane}: k_proj ignored");
        }
    }
}
