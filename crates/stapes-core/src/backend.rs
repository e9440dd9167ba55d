//! The op contract. Every family is a plain sequence of these calls; every home implements them.
//!
//! Conventions (all homes):
//! - Activations have f32 semantics and are row-major; the last dimension is contiguous.
//! - Sequence tensors are channel-last: `(B, T, C)`. 1-D convolutions take and return `(B, T, C)`;
//!   2-D convolutions use PyTorch's `(B, C, H, W)`.
//! - A GEMM weight ([`Backend::Weight`]) is `(N, K)` (out, in) and stored in a [`Lane`];
//!   `linear` computes `x · Wᵀ + b` over the last dimension of `x`.
//! - Broadcasting in `add`/`mul`: `b`'s shape must equal `a`'s or be a suffix of it.
//! - A home may decline an op it cannot do for a shape or lane with [`Error::Decline`].

use crate::{counters::Counters, HostTensor, Lane, Result, WeightView};

/// What every backend tensor can tell about itself without a device round trip.
pub trait DeviceTensor: Send + Sync {
    fn shape(&self) -> &[usize];
    fn numel(&self) -> usize {
        self.shape().iter().product()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    /// GELU with the exact erf.
    Gelu,
    /// GELU, tanh approximation.
    GeluTanh,
    Silu,
    Relu,
    Sigmoid,
    Tanh,
}

/// 1-D convolution over `(B, T, C_in)` with a GEMM weight `(C_out, C_in·K)` laid out
/// `[c_out][c_in][k]` (PyTorch's `(C_out, C_in, K)` flattened).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv1dParams {
    pub kernel: usize,
    pub stride: usize,
    /// Zero padding on each side, in frames.
    pub padding: usize,
}

/// 2-D convolution over `(B, C_in, H, W)` with a weight tensor `(C_out, C_in/groups, kh, kw)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dParams {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub groups: usize,
}

/// Scaled dot-product attention over `(B, T, H·Dh)` tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnParams {
    pub n_heads: usize,
    /// Multiplies q·kᵀ (usually `1/sqrt(Dh)`).
    pub scale: f32,
    /// Only the first `kv_len` rows of k/v are attended (a preallocated KV cache); `None` = all.
    pub kv_len: Option<usize>,
    /// Query i (of Tq) sees keys `0 ..= kv_len - Tq + i`.
    pub causal: bool,
}

/// The op contract. `Tensor`s are activations and small parameters; `Weight`s are GEMM operands
/// stored in a lane.
pub trait Backend: Send + Sync {
    type Tensor: DeviceTensor;
    type Weight: Send + Sync;

    /// Short name for logs and errors ("reference", "cpu", "cuda").
    fn name(&self) -> &'static str;
    fn supports_lane(&self, lane: Lane) -> bool;
    /// [`Backend::supports_lane`] as the error every family's loader returns before it stores a
    /// weight: the lane and this home named.
    fn require_lane(&self, lane: Lane) -> Result<()> {
        if self.supports_lane(lane) {
            Ok(())
        } else {
            Err(crate::Error::LaneUnavailable {
                lane,
                backend: self.name(),
            })
        }
    }
    fn counters(&self) -> &Counters;

    // ---- transfer and layout ----
    fn upload(&self, t: &HostTensor) -> Result<Self::Tensor>;
    fn download(&self, t: &Self::Tensor) -> Result<HostTensor>;
    /// Store a `(N, K)` matrix (or a conv kernel flattened to that) in `lane`.
    fn weight(&self, w: &HostTensor, lane: Lane) -> Result<Self::Weight>;
    /// [`Backend::weight`] from the values as the checkpoint stores them (f16 bytes in a memory
    /// map, …): the same weight as `weight` of the widened `(N, K)` matrix. The default widens
    /// this one matrix and calls `weight`; a home overrides it to skip that copy.
    fn weight_from(&self, w: &WeightView<'_>, lane: Lane) -> Result<Self::Weight> {
        self.weight(&w.to_host(), lane)
    }
    /// [`Backend::upload`] of a tensor the caller no longer needs: a host home may take the
    /// buffer over instead of copying it (the embedding table at load).
    fn upload_owned(&self, t: HostTensor) -> Result<Self::Tensor> {
        self.upload(&t)
    }
    /// Rows `ids` of a stored weight `(N, K)` as an `(len(ids), K)` tensor holding exactly the
    /// values the weight was built from, or `None` where the home cannot give those back (a
    /// rounding lane, a device layout). Lets a token embedding that is also the tied logits
    /// projection be kept once. The default: `None`.
    fn weight_rows(&self, _w: &Self::Weight, _ids: &[u32]) -> Result<Option<Self::Tensor>> {
        Ok(None)
    }
    /// `(N, K)` of a stored weight.
    fn weight_shape(&self, w: &Self::Weight) -> (usize, usize);
    /// Same data, new shape (element count must match).
    fn reshape(&self, t: &Self::Tensor, shape: &[usize]) -> Result<Self::Tensor>;
    /// Swap the last two dimensions: `(.., A, B) -> (.., B, A)`.
    fn transpose_last2(&self, t: &Self::Tensor) -> Result<Self::Tensor>;
    /// `len` entries starting at `start` along `dim`.
    fn slice(&self, t: &Self::Tensor, dim: usize, start: usize, len: usize)
        -> Result<Self::Tensor>;
    fn concat(&self, ts: &[&Self::Tensor], dim: usize) -> Result<Self::Tensor>;
    /// Write `src (B, n, C)` into `dst (B, T, C)` at rows `offset .. offset+n` (KV caches).
    fn write_rows(&self, dst: &mut Self::Tensor, src: &Self::Tensor, offset: usize) -> Result<()>;
    /// Select entries of dim 0 (beam reordering): `(B, ..) -> (len(idx), ..)`.
    fn gather_batch(&self, t: &Self::Tensor, idx: &[usize]) -> Result<Self::Tensor>;
    /// Embedding lookup: `table (V, D)`, `ids (n)` -> `(n, D)`.
    fn gather_rows(&self, table: &Self::Tensor, ids: &[u32]) -> Result<Self::Tensor>;

    // ---- GEMM family ----
    /// `x (.., K) · Wᵀ + b -> (.., N)`.
    fn linear(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Tensor>,
    ) -> Result<Self::Tensor>;
    /// Batched `a (B, M, K) · b (B, K, N)`, or `· bᵀ` with `b (B, N, K)` when `trans_b`.
    fn matmul(&self, a: &Self::Tensor, b: &Self::Tensor, trans_b: bool) -> Result<Self::Tensor>;
    /// `x (B, T, C_in) -> (B, T_out, C_out)`.
    fn conv1d(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Tensor>,
        p: Conv1dParams,
    ) -> Result<Self::Tensor>;
    /// Depthwise 1-D convolution over `(B, T, C)` with `w (C, K)`; output `(B, T_out, C)`.
    fn depthwise_conv1d(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
        stride: usize,
        padding: usize,
    ) -> Result<Self::Tensor>;
    /// `x (B, C_in, H, W) -> (B, C_out, H_out, W_out)`.
    fn conv2d(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
        p: Conv2dParams,
    ) -> Result<Self::Tensor>;
    /// Attention over `q (B, Tq, H·Dh)`, `k, v (B, Tk, H·Dh)`; output `(B, Tq, H·Dh)`.
    fn attention(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        p: &AttnParams,
    ) -> Result<Self::Tensor>;
    /// The softmax probabilities of that attention, `(B, H, Tq, kv_len)` (alignment / DTW).
    fn attention_probs(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        p: &AttnParams,
    ) -> Result<Self::Tensor>;

    // ---- normalisation and element-wise ----
    /// Over the last dimension: `(x − mean)/sqrt(var + eps)·γ + β`.
    fn layer_norm(
        &self,
        x: &Self::Tensor,
        gamma: &Self::Tensor,
        beta: Option<&Self::Tensor>,
        eps: f32,
    ) -> Result<Self::Tensor>;
    /// Over the last dimension: `x / sqrt(mean(x²) + eps)·γ`.
    fn rms_norm(&self, x: &Self::Tensor, gamma: &Self::Tensor, eps: f32) -> Result<Self::Tensor>;
    fn activation(&self, x: &Self::Tensor, act: Activation) -> Result<Self::Tensor>;
    /// GLU over the last dimension: first half · sigmoid(second half).
    fn glu(&self, x: &Self::Tensor) -> Result<Self::Tensor>;
    fn softmax(&self, x: &Self::Tensor) -> Result<Self::Tensor>;
    fn log_softmax(&self, x: &Self::Tensor) -> Result<Self::Tensor>;
    fn add(&self, a: &Self::Tensor, b: &Self::Tensor) -> Result<Self::Tensor>;
    fn mul(&self, a: &Self::Tensor, b: &Self::Tensor) -> Result<Self::Tensor>;
    /// `x·s + t`.
    fn affine(&self, x: &Self::Tensor, s: f32, t: f32) -> Result<Self::Tensor>;

    /// Row-wise argmax over the last dimension (only ids come back from a device).
    fn argmax(&self, x: &Self::Tensor) -> Result<Vec<u32>> {
        let h = self.download(x)?;
        let n = h.last_dim();
        Ok(h.data
            .chunks(n.max(1))
            .map(|r| {
                let mut best = 0;
                for (i, v) in r.iter().enumerate() {
                    if *v > r[best] {
                        best = i;
                    }
                }
                best as u32
            })
            .collect())
    }

    /// Padding of batched sequences: `x` viewed as `(B, R, S, inner)` and `keep (B, S)` (or
    /// `(B, S, 1)`, which `write_rows` can refresh) of 0/1;
    /// entries whose `keep` is 0 become `fill`, the rest are copied exactly. The lengths live on
    /// the device, so one captured chain serves any lengths of its shape bucket. The default
    /// runs on the host (fine for host homes; a device home overrides it).
    fn mask_fill(
        &self,
        x: &Self::Tensor,
        keep: &Self::Tensor,
        inner: usize,
        fill: f32,
    ) -> Result<Self::Tensor> {
        let (bs, s) = mask_dims(x.shape(), keep.shape(), inner)?;
        let mut h = self.download(x)?;
        let k = self.download(keep)?;
        let per_batch = h.data.len() / bs.max(1);
        for (bi, chunk) in h.data.chunks_mut(per_batch.max(1)).enumerate() {
            for (j, v) in chunk.iter_mut().enumerate() {
                if k.data[bi * s + (j / inner) % s] == 0.0 {
                    *v = fill;
                }
            }
        }
        self.upload(&h)
    }

    /// Attention heads as batches: `x (B, T, H·Dh)` plus an optional `bias (H·Dh)` →
    /// `(B·H, T, Dh)`, batch-major (`b·H + h`). The default composes other ops.
    fn split_heads(
        &self,
        x: &Self::Tensor,
        heads: usize,
        bias: Option<&Self::Tensor>,
    ) -> Result<Self::Tensor> {
        let (bs, t, c) = heads_dims(x.shape(), heads)?;
        let biased = plus_bias(self, x, bias)?;
        let x = biased.as_ref().unwrap_or(x);
        let x = self.transpose_last2(x)?; // (B, H·Dh, T)
        let x = self.reshape(&x, &[bs * heads, c / heads, t])?;
        self.transpose_last2(&x)
    }

    /// The inverse of [`Backend::split_heads`]: `(B·H, T, Dh)` → `(B, T, H·Dh)`.
    fn merge_heads(&self, x: &Self::Tensor, batch: usize) -> Result<Self::Tensor> {
        let (bh, t, dh) = merged_dims(x.shape(), batch)?;
        let x = self.transpose_last2(x)?; // (B·H, Dh, T)
        let x = self.reshape(&x, &[batch, bh / batch * dh, t])?;
        self.transpose_last2(&x)
    }

    /// Transformer-XL attention probabilities from its two score terms over a block of `C` query
    /// rows: `ac (B·H, C, T)` (content) and `bd (B·H, C, T+C-1)` (against the relative positions
    /// those rows need, nearest-first as sliced by the caller). Row `i` takes `bd` columns
    /// `C-1-i ..= C-2-i+T` (the shift), then `softmax((ac + shifted)·scale)` over the keys, with
    /// keys whose `keep (B, T)` (or `(B, T, 1)`) is 0 left out. The default composes other ops.
    fn rel_shift_softmax(
        &self,
        ac: &Self::Tensor,
        bd: &Self::Tensor,
        keep: Option<&Self::Tensor>,
        scale: f32,
    ) -> Result<Self::Tensor> {
        let (bh, c, t) = rel_shift_dims(ac.shape(), bd.shape())?;
        // Pad one zero column in front, view as (T+C, C), drop the first row, view back as
        // (C, T+C-1) and keep T columns: row i then starts at column C-1-i.
        let zero = self.upload(&HostTensor::zeros(vec![bh, c, 1]))?;
        let x = self.concat(&[&zero, bd], 2)?; // (BH, C, T+C)
        let x = self.reshape(&x, &[bh, t + c, c])?;
        let x = self.slice(&x, 1, 1, t + c - 1)?;
        let x = self.reshape(&x, &[bh, c, t + c - 1])?;
        let x = self.slice(&x, 2, 0, t)?; // (BH, C, T)
        let mut scores = self.affine(&self.add(ac, &x)?, scale, 0.0)?;
        if let Some(k) = keep {
            scores = self.mask_fill(&scores, k, 1, f32::NEG_INFINITY)?;
        }
        self.softmax(&scores)
    }

    /// One LSTM step (PyTorch gate order i, f, g, o): `x (B, I)`, `h, c (B, H)`, `w_ih (4H, I)`,
    /// `w_hh (4H, H)`, `bias (4H)` = b_ih + b_hh. Returns `(h', c')`.
    fn lstm_cell(
        &self,
        x: &Self::Tensor,
        h: &Self::Tensor,
        c: &Self::Tensor,
        w_ih: &Self::Weight,
        w_hh: &Self::Weight,
        bias: Option<&Self::Tensor>,
    ) -> Result<(Self::Tensor, Self::Tensor)> {
        let gates = self.add(&self.linear(x, w_ih, bias)?, &self.linear(h, w_hh, None)?)?;
        let hid = *h.shape().last().unwrap_or(&0);
        let last = gates.shape().len() - 1;
        let i = self.activation(&self.slice(&gates, last, 0, hid)?, Activation::Sigmoid)?;
        let f = self.activation(&self.slice(&gates, last, hid, hid)?, Activation::Sigmoid)?;
        let g = self.activation(&self.slice(&gates, last, 2 * hid, hid)?, Activation::Tanh)?;
        let o = self.activation(
            &self.slice(&gates, last, 3 * hid, hid)?,
            Activation::Sigmoid,
        )?;
        let c2 = self.add(&self.mul(&f, c)?, &self.mul(&i, &g)?)?;
        let h2 = self.mul(&o, &self.activation(&c2, Activation::Tanh)?)?;
        Ok((h2, c2))
    }

    // ---- fused forms of op sequences (a home fuses them where it pays) ----

    /// `x · Wᵀ + b + r`: a linear whose output lands on a residual stream `r` (same shape as the
    /// output). A GPU home adds `r` in the GEMM's epilogue instead of a separate pass. The default
    /// composes `linear` and `add`.
    fn linear_add(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Tensor>,
        r: &Self::Tensor,
    ) -> Result<Self::Tensor> {
        let y = self.linear(x, w, bias)?;
        self.add(&y, r)
    }

    /// Self-attention over one packed projection `qkv (B, T, 3·H·Dh)`, laid out `q | k | v` along
    /// the last dimension (one GEMM with the three weights stacked); output `(B, T, H·Dh)`. A GPU
    /// home reads q, k and v in place. The default slices them apart and calls `attention`.
    fn attention_packed(&self, qkv: &Self::Tensor, p: &AttnParams) -> Result<Self::Tensor> {
        let s = qkv.shape();
        let last = s.len().saturating_sub(1);
        let c3 = s.get(last).copied().unwrap_or(0);
        if s.len() != 3 || c3 == 0 || c3 % 3 != 0 {
            return Err(crate::Error::shape(
                "attention_packed",
                format!("{s:?} is not (B, T, 3·H·Dh)"),
            ));
        }
        let c = c3 / 3;
        let q = self.slice(qkv, last, 0, c)?;
        let k = self.slice(qkv, last, c, c)?;
        let v = self.slice(qkv, last, 2 * c, c)?;
        self.attention(&q, &k, &v, p)
    }

    /// `r + attention_packed(qkv, p) · Woᵀ + bo`: self-attention and its output projection,
    /// added to the residual `r (B, T, N)`. A home may keep the attention's result in the
    /// projection's input form as well (the CUDA home's q8 lane writes it in e4m3 for its FP8
    /// GEMM beside the f16 result). The default composes [`Backend::attention_packed`] and
    /// [`Backend::linear_add`].
    fn attention_packed_add(
        &self,
        qkv: &Self::Tensor,
        p: &AttnParams,
        wo: &Self::Weight,
        bo: Option<&Self::Tensor>,
        r: &Self::Tensor,
    ) -> Result<Self::Tensor> {
        let a = self.attention_packed(qkv, p)?;
        self.linear_add(&a, wo, bo, r)
    }

    /// `act(x · Wᵀ + b)`: a linear followed by its activation (an MLP's first projection). A GPU
    /// home applies `act` in the GEMM's epilogue (and may prepare the output for the next GEMM
    /// there). The default composes `linear` and `activation`.
    fn linear_act(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Tensor>,
        act: Activation,
    ) -> Result<Self::Tensor> {
        let y = self.linear(x, w, bias)?;
        self.activation(&y, act)
    }

    /// `r + act(x · W1ᵀ + b1) · W2ᵀ + b2`: a transformer MLP and the residual it is added to;
    /// `x (.., d)`, `W1 (n1, d)`, `W2 (d, n1)`, `r` shaped as the output. A home may keep the
    /// hidden `(.., n1)` in a form of its own between the two GEMMs (the CUDA home's q8 lane
    /// keeps it in e4m3 for its FP8 GEMMs and never writes it as f16). The default composes
    /// [`Backend::linear_act`] and [`Backend::linear_add`].
    #[allow(clippy::too_many_arguments)]
    fn mlp_add(
        &self,
        x: &Self::Tensor,
        w1: &Self::Weight,
        b1: Option<&Self::Tensor>,
        act: Activation,
        w2: &Self::Weight,
        b2: Option<&Self::Tensor>,
        r: &Self::Tensor,
    ) -> Result<Self::Tensor> {
        let h = self.linear_act(x, w1, b1, act)?;
        self.linear_add(&h, w2, b2, r)
    }

    /// `LN(x; gamma, beta) · Wᵀ + bias`: a pre-norm and the linear that reads it. The normed
    /// tensor is never returned, so a home may keep it only in the GEMM's input form (the CUDA
    /// home's q8 lane writes it as e4m3 for its FP8 GEMM and never as f16). The default
    /// composes [`Backend::layer_norm_feeding`] and [`Backend::linear`].
    #[allow(clippy::too_many_arguments)]
    fn layer_norm_linear(
        &self,
        x: &Self::Tensor,
        gamma: &Self::Tensor,
        beta: Option<&Self::Tensor>,
        eps: f32,
        w: &Self::Weight,
        bias: Option<&Self::Tensor>,
    ) -> Result<Self::Tensor> {
        let h = self.layer_norm_feeding(x, gamma, beta, eps, w)?;
        self.linear(&h, w, bias)
    }

    /// `x + attention_packed_add`'s attention of `LN(x; gamma, beta) · Wqkvᵀ + bqkv`: a pre-norm
    /// self-attention sub-block, the residual being the norm's own input. Neither the normed
    /// tensor nor q|k|v is returned, so a home may fold the q|k|v bias into the attention (the
    /// CUDA home's warpgroup kernel adds q's to Q as it loads it and v's to its output, and drops
    /// k's, which the softmax cancels). The default composes [`Backend::layer_norm_linear`] and
    /// [`Backend::attention_packed_add`].
    #[allow(clippy::too_many_arguments)]
    fn layer_norm_attention_add(
        &self,
        x: &Self::Tensor,
        gamma: &Self::Tensor,
        beta: Option<&Self::Tensor>,
        eps: f32,
        w_qkv: &Self::Weight,
        b_qkv: Option<&Self::Tensor>,
        p: &AttnParams,
        wo: &Self::Weight,
        bo: Option<&Self::Tensor>,
    ) -> Result<Self::Tensor> {
        let qkv = self.layer_norm_linear(x, gamma, beta, eps, w_qkv, b_qkv)?;
        self.attention_packed_add(&qkv, p, wo, bo, x)
    }

    /// `x + mlp_add`'s MLP of `LN(x; gamma, beta)`: a pre-norm transformer's feed-forward
    /// sub-block, the residual being the norm's own input. As in
    /// [`Backend::layer_norm_linear`], the normed tensor is never returned. The default
    /// composes [`Backend::layer_norm_feeding`] and [`Backend::mlp_add`].
    #[allow(clippy::too_many_arguments)]
    fn layer_norm_mlp_add(
        &self,
        x: &Self::Tensor,
        gamma: &Self::Tensor,
        beta: Option<&Self::Tensor>,
        eps: f32,
        w1: &Self::Weight,
        b1: Option<&Self::Tensor>,
        act: Activation,
        w2: &Self::Weight,
        b2: Option<&Self::Tensor>,
    ) -> Result<Self::Tensor> {
        let h = self.layer_norm_feeding(x, gamma, beta, eps, w1)?;
        self.mlp_add(&h, w1, b1, act, w2, b2, x)
    }

    /// `act(conv1d(x))`: a convolution followed by its activation (Whisper's stem). A home
    /// whose `conv1d` is a GEMM applies `act` in its epilogue, as in `linear_act`. The default
    /// composes `conv1d` and `activation`.
    fn conv1d_act(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Tensor>,
        p: Conv1dParams,
        act: Activation,
    ) -> Result<Self::Tensor> {
        let y = self.conv1d(x, w, bias, p)?;
        self.activation(&y, act)
    }

    /// Rotary position embedding in its rotate-half form (GPT-NeoX, GigaAM): `x (B, T, H·Dh)`,
    /// `cos`, `sin (T, H·Dh)` (per head `Dh` angles whose two halves are equal) →
    /// `x·cos + rot(x)·sin`, `rot` being `[−x₂, x₁]` over each head's halves. The default
    /// composes slices, `concat`, `mul` and `add`.
    fn rotary_half(
        &self,
        x: &Self::Tensor,
        cos: &Self::Tensor,
        sin: &Self::Tensor,
        head_dim: usize,
    ) -> Result<Self::Tensor> {
        crate::shapes::rotary_half_dims(x, cos, sin, head_dim)?;
        let s = x.shape().to_vec();
        let n: usize = s.iter().product();
        let half = head_dim / 2;
        let v = self.reshape(x, &[n / head_dim, 2, half])?; // (B·T·H, 2, Dh/2)
        let x1 = self.slice(&v, 1, 0, 1)?;
        let x2 = self.slice(&v, 1, 1, 1)?;
        let neg = self.affine(&x2, -1.0, 0.0)?;
        let rot = self.reshape(&self.concat(&[&neg, &x1], 1)?, &s)?;
        let a = self.mul(x, cos)?;
        let b = self.mul(&rot, sin)?;
        self.add(&a, &b)
    }

    // ---- FastConformer blocks (fused where a home pays for it) ----

    /// The conformer conv module between its two pointwise convs: `x (B, T, 2C)` → GLU over the
    /// last dimension → frames whose `keep (B, T)` (or `(B, T, 1)`) is 0 set to zero (a padded
    /// batch: the depthwise conv must see zeros past each sequence) → depthwise conv `w (C, K)`
    /// plus `bias (C)` (a batch norm folded in), stride 1, ⌊(K−1)/2⌋ zero frames on each side
    /// → `act`. Output `(B, T + 2·⌊(K−1)/2⌋ − K + 1, C)`: `(B, T, C)` for odd K. The default
    /// composes `glu`, `mask_fill`, `depthwise_conv1d` and `activation`.
    fn glu_depthwise_act(
        &self,
        x: &Self::Tensor,
        keep: Option<&Self::Tensor>,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
        act: Activation,
    ) -> Result<Self::Tensor> {
        let kw = glu_depthwise_dims(x.shape(), w.shape())?.3;
        let mut h = self.glu(x)?; // (B, T, C)
        if let Some(k) = keep {
            let c = w.shape()[0];
            h = self.mask_fill(&h, k, c, 0.0)?;
        }
        let h = self.depthwise_conv1d(&h, w, bias, 1, (kw - 1) / 2)?;
        self.activation(&h, act)
    }

    /// The inputs of Transformer-XL attention from one stacked projection `qkv (B, T, 3·H·Dh)`
    /// (`q | k | v` along the last dimension) and the projected relative positions
    /// `pos (1, P, H·Dh)`: `qu = q + u` and `qv = q + v_bias` (`bias_u`, `bias_v` of `(H·Dh)`),
    /// `k`, `v`, each `(B·H, T, Dh)` batch-major as [`Backend::split_heads`] lays them out, and
    /// `p (B·H, P, Dh)`, the positions' heads repeated for every batch entry. The default
    /// slices and calls `split_heads` and `concat`.
    fn rel_attention_inputs(
        &self,
        qkv: &Self::Tensor,
        pos: &Self::Tensor,
        heads: usize,
        bias_u: &Self::Tensor,
        bias_v: &Self::Tensor,
    ) -> Result<RelAttnInputs<Self::Tensor>> {
        let (bs, _t, c, _p) = rel_attention_dims(qkv.shape(), pos.shape(), heads)?;
        let q = self.slice(qkv, 2, 0, c)?;
        let k = self.slice(qkv, 2, c, c)?;
        let v = self.slice(qkv, 2, 2 * c, c)?;
        let p = self.split_heads(pos, heads, None)?; // (H, P, Dh)
        let p = if bs > 1 {
            self.concat(&vec![&p; bs], 0)?
        } else {
            p
        };
        Ok(RelAttnInputs {
            qu: self.split_heads(&q, heads, Some(bias_u))?,
            qv: self.split_heads(&q, heads, Some(bias_v))?,
            k: self.split_heads(&k, heads, None)?,
            v: self.split_heads(&v, heads, None)?,
            p,
        })
    }

    /// Transformer-XL self-attention over one stacked projection, heads merged: `qkv (B, T, 3·C)`
    /// (`q | k | v`, C = H·Dh), `pos (1, 2T−1, C)` the projected relative positions (row k is
    /// distance T−1−k, as [`Backend::rel_shift_softmax`] reads them), `bias_u`, `bias_v (C)`,
    /// `keep (B, T)` or `(B, T, 1)` (keys whose entry is 0 are left out). Output `(B, T, C)`:
    /// per head `softmax(((q+u)·kᵀ + shift((q+v)·posᵀ))·scale)·v`. A GPU home runs it as one
    /// kernel with no score matrix in memory; the default is [`rel_attention_composed`].
    fn rel_attention(
        &self,
        qkv: &Self::Tensor,
        pos: &Self::Tensor,
        bias_u: &Self::Tensor,
        bias_v: &Self::Tensor,
        keep: Option<&Self::Tensor>,
        p: &RelAttnParams,
    ) -> Result<Self::Tensor> {
        rel_attention_composed(self, qkv, pos, bias_u, bias_v, keep, p)
    }

    /// [`Backend::rel_attention`] whose result is the input of the linear of weight `next` (the
    /// output projection; as [`Backend::linear_act_feeding`]). The default is `rel_attention`.
    #[allow(clippy::too_many_arguments)]
    fn rel_attention_feeding(
        &self,
        qkv: &Self::Tensor,
        pos: &Self::Tensor,
        bias_u: &Self::Tensor,
        bias_v: &Self::Tensor,
        keep: Option<&Self::Tensor>,
        p: &RelAttnParams,
        next: &Self::Weight,
    ) -> Result<Self::Tensor> {
        let _ = next;
        self.rel_attention(qkv, pos, bias_u, bias_v, keep, p)
    }

    // ---- FastConformer subsampling, channel-last (section owned by helper fcenc2) ----

    /// The first two convs of depthwise-striding subsampling: `x (B, T, F)` (features, one
    /// input channel) with frames whose `keep0 (B, T)` is 0 set to zero → conv `w0 (C, 1, k, k)`
    /// with bias `b0 (C)` → ReLU → frames whose `keep1 (B, T1)` is 0 set to zero → depthwise
    /// conv `w1 (C, 1, k, k)` with bias `b1 (C)`; both with `p`'s stride and zero padding on T
    /// and F. Output channel-last `(B, T2, F2, C)`. A GPU home runs it as one kernel that never stores the
    /// `(B, C, T1, F1)` map between the convs; the default is [`subsample_stem_composed`].
    #[allow(clippy::too_many_arguments)]
    fn subsample_stem(
        &self,
        x: &Self::Tensor,
        keep0: Option<&Self::Tensor>,
        w0: &Self::Tensor,
        b0: &Self::Tensor,
        keep1: Option<&Self::Tensor>,
        w1: &Self::Tensor,
        b1: &Self::Tensor,
        p: &StridingParams,
    ) -> Result<Self::Tensor> {
        subsample_stem_composed(self, x, keep0, w0, b0, keep1, w1, b1, p)
    }

    /// A depthwise conv `w (C, 1, k, k)` + `bias (C)` over channel-last `x (B, T, F, C)`, with
    /// `p`'s stride and zero padding on T and F; its input is `relu(x)` when `relu_input`, with
    /// frames whose `keep (B, T)` is 0 set to zero. Output `(B, T', F', C)`. The default is
    /// [`depthwise_conv2d_cl_composed`] (transposes around `conv2d`).
    fn depthwise_conv2d_cl(
        &self,
        x: &Self::Tensor,
        keep: Option<&Self::Tensor>,
        relu_input: bool,
        w: &Self::Tensor,
        bias: &Self::Tensor,
        p: &StridingParams,
    ) -> Result<Self::Tensor> {
        depthwise_conv2d_cl_composed(self, x, keep, relu_input, w, bias, p)
    }

    /// Two layer norms in a row over the last dimension, both results: `y = LN(x; γ₁, β₁)` and
    /// `z = LN(y; γ₂, β₂)`, the same `eps` (a conformer block's closing norm and the next block's
    /// first); `z` feeds the linear of weight `next` when given (see
    /// [`Backend::layer_norm_feeding`]). The default is two [`Backend::layer_norm`] calls.
    fn layer_norm_pair(
        &self,
        x: &Self::Tensor,
        norms: [(&Self::Tensor, Option<&Self::Tensor>); 2],
        eps: f32,
        next: Option<&Self::Weight>,
    ) -> Result<(Self::Tensor, Self::Tensor)> {
        let _ = next;
        let y = self.layer_norm(x, norms[0].0, norms[0].1, eps)?;
        let z = self.layer_norm(&y, norms[1].0, norms[1].1, eps)?;
        Ok((y, z))
    }

    /// A linear landing on a residual stream and the layer norms that follow it:
    /// `s = x · Wᵀ + b + r` and, for one norm, `LN(s; γ₁, β₁)`, for two,
    /// [`Backend::layer_norm_pair`]'s results over `s`. Returns `(s, norms' results)`; `next` is
    /// the linear the last norm feeds (see [`Backend::layer_norm_feeding`]). A GPU home may sum a
    /// split-K GEMM's partial products in the norms' own pass (CUDA: one launch fewer than
    /// cuBLASLt's split-K reduction and a separate norm). The default composes
    /// [`Backend::linear_add`] and the norm ops.
    #[allow(clippy::too_many_arguments)]
    fn linear_add_norms(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Tensor>,
        r: &Self::Tensor,
        norms: &[(&Self::Tensor, Option<&Self::Tensor>)],
        eps: f32,
        next: Option<&Self::Weight>,
    ) -> Result<(Self::Tensor, Vec<Self::Tensor>)> {
        linear_add_norms_composed(self, x, w, bias, r, norms, eps, next)
    }

    /// A pass whose result only the linear of weight `w` reads, then that linear landing on the
    /// residual stream `r` and the norms after it, as [`Backend::linear_add_norms`]. The pass's
    /// result never leaves the op, so a GPU home may write only the form that linear reads
    /// (CUDA: the e4m3 copy of an FP8 GEMM, without the f16 one). `next` names the linear the
    /// last norm's result feeds; where [`Feeds::only`] says nothing else reads that result, a
    /// GPU home may leave it in that linear's form alone too. The default runs the pass's
    /// `_feeding` op, then `linear_add_norms`.
    #[allow(clippy::too_many_arguments)]
    fn feeding_add_norms(
        &self,
        pass: Feeding<'_, Self::Tensor, Self::Weight>,
        w: &Self::Weight,
        bias: Option<&Self::Tensor>,
        r: &Self::Tensor,
        norms: &[(&Self::Tensor, Option<&Self::Tensor>)],
        eps: f32,
        next: Option<Feeds<'_, Self::Weight>>,
    ) -> Result<(Self::Tensor, Vec<Self::Tensor>)> {
        let h = feeding_composed(self, pass, w)?;
        self.linear_add_norms(&h, w, bias, r, norms, eps, next.map(|f| f.w))
    }

    /// A tensor made before an encoder chain and read by every pass of it (a shape bucket's
    /// constants), in the form the chain's ops read it (CUDA: f16 where encoder chains keep
    /// f16 activations; their kernels would otherwise convert it on every pass). The same
    /// values to that form's precision. The default returns it unchanged.
    fn encoder_constant(&self, x: Self::Tensor) -> Result<Self::Tensor> {
        Ok(x)
    }

    /// [`Backend::layer_norm`] whose result is the input of the linear of weight `next` (its
    /// next reader): a home may write that linear's input form in the same pass (CUDA: a q8
    /// weight's per-row int8 quantization, which the linear then finds prepared). The result
    /// is the same tensor either way. The default is `layer_norm`.
    fn layer_norm_feeding(
        &self,
        x: &Self::Tensor,
        gamma: &Self::Tensor,
        beta: Option<&Self::Tensor>,
        eps: f32,
        next: &Self::Weight,
    ) -> Result<Self::Tensor> {
        let _ = next;
        self.layer_norm(x, gamma, beta, eps)
    }

    /// [`Backend::linear_act`] whose result is the input of the linear of weight `next` (its
    /// next reader): a home may write that linear's input form in the same pass (CUDA: the
    /// e4m3 copy an FP8 GEMM reads, which it then finds prepared). The result is the same
    /// tensor either way. The default is `linear_act`.
    fn linear_act_feeding(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Tensor>,
        act: Activation,
        next: &Self::Weight,
    ) -> Result<Self::Tensor> {
        let _ = next;
        self.linear_act(x, w, bias, act)
    }

    /// [`Backend::glu_depthwise_act`] whose result is the input of the linear of weight `next`
    /// (as [`Backend::linear_act_feeding`]). The default is `glu_depthwise_act`.
    fn glu_depthwise_act_feeding(
        &self,
        x: &Self::Tensor,
        keep: Option<&Self::Tensor>,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
        act: Activation,
        next: &Self::Weight,
    ) -> Result<Self::Tensor> {
        let _ = next;
        self.glu_depthwise_act(x, keep, w, bias, act)
    }

    // ---- decoder steps with their parameters on the device ----
    //
    // A per-token decoder step differs from the previous one only in its token ids and its
    // position. Reading both from a small device tensor (see [`StepParams`]) instead of taking
    // them as host values lets one captured chain serve every step. The defaults read that
    // tensor back and call the host-parameter op, so a host home computes exactly what the
    // host-parameter path computes.

    /// Token embedding plus learned position of one step: `table (V, D)`, `positions (P, D)`,
    /// `step` as [`StepParams`] with `B` ids → `(B, 1, D)` = `table[id_b] + positions[pos]`.
    fn embed_step(
        &self,
        table: &Self::Tensor,
        positions: &Self::Tensor,
        step: &Self::Tensor,
    ) -> Result<Self::Tensor> {
        let sp = StepParams::read(self, step)?;
        let d = *table.shape().last().unwrap_or(&0);
        let x = self.gather_rows(table, &sp.ids)?; // (B, D)
        let x = self.reshape(&x, &[sp.ids.len(), 1, d])?; // (B, 1, D)
        let pos = self.slice(positions, 0, sp.position, 1)?; // (1, D)
        self.add(&x, &pos)
    }

    /// [`Backend::write_rows`] at the step's position: `src (B, n, C)` into `dst (B, T, C)`
    /// at rows `pos .. pos+n` (appending to a KV cache).
    fn write_rows_step(
        &self,
        dst: &mut Self::Tensor,
        src: &Self::Tensor,
        step: &Self::Tensor,
    ) -> Result<()> {
        let sp = StepParams::read(self, step)?;
        self.write_rows(dst, src, sp.position)
    }

    /// Causal [`Backend::attention`] of the step's queries `q (B, Tq, H·Dh)` over the first
    /// `pos + Tq` rows of a KV cache `k, v (B, T, H·Dh)`; `p.kv_len` and `p.causal` are
    /// ignored (the length comes from `step`, the step is always causal).
    fn attention_step(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        p: &AttnParams,
        step: &Self::Tensor,
    ) -> Result<Self::Tensor> {
        let sp = StepParams::read(self, step)?;
        let tq = q.shape().get(1).copied().unwrap_or(0);
        let p = AttnParams {
            kv_len: Some(sp.position + tq),
            causal: true,
            ..*p
        };
        self.attention(q, k, v, &p)
    }

    /// [`Backend::attention`] of a few query rows (decoder steps) over a long K/V (the
    /// cross-attention over an encoded window). Equal to `attention` up to the order of the f32
    /// sums: a device home splits the keys across blocks, since one block per (row, head) would
    /// leave most of a GPU idle. The default calls `attention`.
    fn attention_decode(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        p: &AttnParams,
    ) -> Result<Self::Tensor> {
        self.attention(q, k, v, p)
    }

    // ---- fused decoder-step forms (section owned by the Whisper decoder step) ----
    //
    // A decoder step runs a few rows (batch·beams) through many small projections; a device
    // home does each of these in one kernel (norm, GEMV and epilogue) instead of three or four.

    /// `act(norm(x) · Wᵀ + bias) + residual` over the last dimension of `x (.., K)`, every part
    /// optional ([`LinearFusion`]). The default composes `layer_norm`, `linear`, `activation`
    /// and `add` ([`norm_linear_composed`]).
    fn norm_linear(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        f: &LinearFusion<'_, Self::Tensor>,
    ) -> Result<Self::Tensor> {
        norm_linear_composed(self, x, w, f)
    }

    /// The stacked self-attention projection of a decoder step: `qkv = norm_linear(x, w, f)`
    /// of `x (B, 1, d)` with `w (3C, d)` laid out `q | k | v`, returned `(B, 1, 3C)`, its k and
    /// v parts also written into the caches `k_cache, v_cache (B, T, C)` at the step's position
    /// (a device home does that in the GEMV's epilogue). The default composes `norm_linear`,
    /// `slice` and `write_rows_step`.
    fn qkv_step(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        f: &LinearFusion<'_, Self::Tensor>,
        kv: (&mut Self::Tensor, &mut Self::Tensor),
        step: &Self::Tensor,
    ) -> Result<Self::Tensor> {
        qkv_step_composed(self, x, w, f, kv, step)
    }

    /// [`Backend::download`] of a decoder step's output (its logits, once per token): a device
    /// home stages it through pinned host memory. The default calls `download`.
    fn download_step(&self, t: &Self::Tensor) -> Result<HostTensor> {
        self.download(t)
    }

    /// Overwrite `dst` with `src` of the same shape from the host (a step tensor refreshed in
    /// place for a captured chain): a device home copies straight into `dst`. The default
    /// uploads `src` and calls `write_rows`.
    fn write_host(&self, dst: &mut Self::Tensor, src: &HostTensor) -> Result<()> {
        if dst.shape() != src.shape.as_slice() {
            return Err(crate::Error::shape(
                "write_host",
                format!(
                    "{:?} into {:?}: want the same shape",
                    src.shape,
                    dst.shape()
                ),
            ));
        }
        self.write_rows(dst, &self.upload(src)?, 0)
    }

    /// [`Backend::attention_step`] of the q part of a packed `qkv (B, Tq, 3C)` over the caches
    /// `k, v (B, T, C)` (already holding the step's rows, see [`Backend::qkv_step`]). The
    /// default slices q out and calls `attention_step`.
    fn attention_step_packed(
        &self,
        qkv: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        p: &AttnParams,
        step: &Self::Tensor,
    ) -> Result<Self::Tensor> {
        let c = packed_width("attention_step_packed", qkv.shape())?;
        let q = self.slice(qkv, 2, 0, c)?;
        self.attention_step(&q, k, v, p, step)
    }

    // ---- transducer label looping with its state on the device (see `crate::transducer`) ----
    //
    // Each clip's frame index, last label and step count live in a `(1, B, STATE_FIELDS)` state
    // tensor, so one captured chain runs a greedy RNNT/TDT step of every clip of a batch. The
    // defaults read the state back and compose other ops (what a host home runs); a device home
    // overrides them with kernels.

    /// Each clip's encoder frame at its state's frame index: `x (B, T, C)` → `(B, 1, C)`. A
    /// finished clip's index is clamped to its last row (the step is discarded).
    fn transducer_frames(&self, x: &Self::Tensor, state: &Self::Tensor) -> Result<Self::Tensor> {
        let bs = crate::transducer::state_batch("transducer_frames", state.shape())?;
        let xs = x.shape();
        if xs.len() != 3 || xs[0] != bs || xs[1] == 0 {
            return Err(crate::Error::shape(
                "transducer_frames",
                format!("x {xs:?} for a batch of {bs}: want (B, T ≥ 1, C)"),
            ));
        }
        let st = self.download(state)?;
        let mut rows = Vec::with_capacity(bs);
        for (b, row) in st.data.chunks(crate::transducer::STATE_FIELDS).enumerate() {
            let t = (row[crate::transducer::field::FRAME].max(0.0) as usize).min(xs[1] - 1);
            rows.push(self.slice(&self.slice(x, 0, b, 1)?, 1, t, 1)?);
        }
        let refs: Vec<&Self::Tensor> = rows.iter().collect();
        self.concat(&refs, 0)
    }

    /// One greedy step of every clip: `logits (B, 1, rule.width())` decide each clip's token
    /// (and TDT duration) by `rule` ([`crate::transducer::TransducerRule::advance`]); `state` is
    /// updated in place and the step's records written to `log (B, K, RECORD_FIELDS)` at slot
    /// `slot`.
    fn transducer_advance(
        &self,
        state: &mut Self::Tensor,
        logits: &Self::Tensor,
        rule: &crate::transducer::TransducerRule,
        log: &mut Self::Tensor,
        slot: usize,
    ) -> Result<()> {
        use crate::transducer::{loop_dims, RECORD_FIELDS, STATE_FIELDS};
        let (bs, k) = loop_dims(state.shape(), log.shape())?;
        let w = rule.width();
        if logits.numel() != bs * w || slot >= k {
            return Err(crate::Error::shape(
                "transducer_advance",
                format!(
                    "logits {:?} for {bs} clips × {w}, slot {slot} of {k}",
                    logits.shape()
                ),
            ));
        }
        rule.check()?;
        let mut st = self.download(state)?;
        let l = self.download(logits)?;
        let mut recs = Vec::with_capacity(bs * RECORD_FIELDS);
        for (row, lg) in st.data.chunks_mut(STATE_FIELDS).zip(l.data.chunks(w)) {
            recs.extend(rule.advance(row, lg));
        }
        self.write_rows(state, &self.upload(&st)?, 0)?;
        let recs = self.upload(&HostTensor::new(vec![bs, 1, RECORD_FIELDS], recs)?)?;
        self.write_rows(log, &recs, slot)
    }

    /// The prediction network's input: row `state`'s token of `table (V, D)` per clip →
    /// `(B, 1, D)` (a token out of range gives row 0; only emitting clips keep the result).
    fn transducer_embed(&self, table: &Self::Tensor, state: &Self::Tensor) -> Result<Self::Tensor> {
        let bs = crate::transducer::state_batch("transducer_embed", state.shape())?;
        let ts = table.shape();
        if ts.len() != 2 || ts[0] == 0 {
            return Err(crate::Error::shape(
                "transducer_embed",
                format!("table {ts:?}: want (V ≥ 1, D)"),
            ));
        }
        let st = self.download(state)?;
        let ids: Vec<u32> = st
            .data
            .chunks(crate::transducer::STATE_FIELDS)
            .map(|r| {
                let t = r[crate::transducer::field::TOKEN];
                if t >= 0.0 && (t as usize) < ts[0] {
                    t as u32
                } else {
                    0
                }
            })
            .collect();
        let x = self.gather_rows(table, &ids)?;
        self.reshape(&x, &[bs, 1, ts[1]])
    }

    /// The joint network's input: `act(x[b, frame_b] + pred[b])` for `x (B, T, J)` and the
    /// prediction network's output `pred (B, 1, J)` → `(B, 1, J)`. The default composes
    /// `transducer_frames`, `add` and `activation`.
    fn transducer_joint_input(
        &self,
        x: &Self::Tensor,
        state: &Self::Tensor,
        pred: &Self::Tensor,
        act: Activation,
    ) -> Result<Self::Tensor> {
        let e = self.transducer_frames(x, state)?;
        self.activation(&self.add(&e, pred)?, act)
    }

    /// One prediction-network LSTM layer where it advances: `lstm_cell(x, h, c, ..)` written
    /// into `h`, `c (B, n, H)` for the clips whose last step emitted a label; the other clips
    /// keep theirs. The default composes `lstm_cell` and `transducer_keep`.
    #[allow(clippy::too_many_arguments)]
    fn transducer_lstm(
        &self,
        x: &Self::Tensor,
        h: &mut Self::Tensor,
        c: &mut Self::Tensor,
        w_ih: &Self::Weight,
        w_hh: &Self::Weight,
        bias: Option<&Self::Tensor>,
        state: &Self::Tensor,
    ) -> Result<()> {
        let (h2, c2) = self.lstm_cell(x, h, c, w_ih, w_hh, bias)?;
        self.transducer_keep(h, &h2, state)?;
        self.transducer_keep(c, &c2, state)
    }

    /// `dst (B, n, C)` takes `src`'s rows of the clips whose last step emitted a label (the
    /// prediction network's state advances only there); the other clips keep theirs.
    fn transducer_keep(
        &self,
        dst: &mut Self::Tensor,
        src: &Self::Tensor,
        state: &Self::Tensor,
    ) -> Result<()> {
        let bs = crate::transducer::state_batch("transducer_keep", state.shape())?;
        let ds = dst.shape();
        if ds.len() != 3 || ds[0] != bs || src.shape() != ds {
            return Err(crate::Error::shape(
                "transducer_keep",
                format!(
                    "src {:?} into {ds:?} for a batch of {bs}: want equal (B, n, C)",
                    src.shape()
                ),
            ));
        }
        let st = self.download(state)?;
        let mut d = self.download(dst)?;
        let s = self.download(src)?;
        let per = d.data.len() / bs.max(1);
        for (b, row) in st.data.chunks(crate::transducer::STATE_FIELDS).enumerate() {
            if row[crate::transducer::field::EMITTED] != 0.0 {
                d.data[b * per..(b + 1) * per].copy_from_slice(&s.data[b * per..(b + 1) * per]);
            }
        }
        self.write_rows(dst, &self.upload(&d)?, 0)
    }

    /// The label loop's linear, `x (.., K)` → `(.., N)`: every row comes out exactly as it
    /// would alone, whatever the row count, so a batch of clips makes each clip's decisions as
    /// its single decode does. A home whose `linear` picks its kernel (and rounding) by the row
    /// count overrides this with one form for all counts. The default is `linear`.
    fn transducer_linear(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Tensor>,
    ) -> Result<Self::Tensor> {
        self.linear(x, w, bias)
    }

    // ---- token selection (section owned by device token selection, see `crate::select`) ----

    /// Per row of `logits (.., V)`: the masked log-softmax top-k of [`crate::select`] (the
    /// module doc says exactly what). The default downloads the logits and computes it on the
    /// host ([`crate::select::select_host`], the reference); a device home sends back only the
    /// `k` candidates per row.
    fn select_tokens(
        &self,
        logits: &Self::Tensor,
        req: &crate::select::SelectRequest<'_>,
    ) -> Result<crate::select::Selected> {
        crate::select::select_dims(logits.shape(), req)?;
        crate::select::select_host(&self.download_step(logits)?, req)
    }

    /// [`Backend::select_tokens`] that also writes each row's best candidate into `feed`, a
    /// step tensor `(1, 1, 1 + rows)`, as the [`StepParams`] of the step at `position`. A chain
    /// queued after this call reads its tokens from `feed` without the host in between, and the
    /// selection itself is collected afterwards ([`crate::select::PendingSelect::wait`]). The
    /// default selects at once and writes `feed` from the host.
    fn select_tokens_feed<'a>(
        &'a self,
        logits: &Self::Tensor,
        req: &crate::select::SelectRequest<'_>,
        feed: &mut Self::Tensor,
        position: usize,
    ) -> Result<crate::select::PendingSelect<'a>> {
        let sel = self.select_tokens(logits, req)?;
        let ids = sel.best_ids(req.rows.len());
        self.write_host(feed, &StepParams { position, ids }.to_host()?)?;
        Ok(crate::select::PendingSelect::ready(sel))
    }

    /// Whether [`Backend::select_tokens`] runs on the device here (callers keep their own host
    /// path where it does not: same values, and their host code is tuned for it).
    fn selects_on_device(&self) -> bool {
        false
    }

    /// Whether [`Backend::chain`] records chains and replays them (a GPU home with graphs on).
    /// Callers use it to pick the device-parameter form of a loop only where it pays.
    fn captures_chains(&self) -> bool {
        false
    }

    /// Run `f` as one chain under `key`. A home with graph capture (CUDA) records the chain the
    /// first time and replays it afterwards, so the tensors `f` reads must outlive every replay
    /// and keep their storage (refresh inputs in place with [`Backend::write_rows`] before the
    /// call), and the returned tensors are overwritten by the next replay. `key` names the shape
    /// bucket and lane. The default runs `f` eagerly.
    fn chain(
        &self,
        _key: &str,
        f: &mut dyn FnMut(&Self) -> Result<Vec<Self::Tensor>>,
    ) -> Result<Vec<Self::Tensor>>
    where
        Self: Sized,
    {
        f(self)
    }

    /// Wait until queued work is done (no-op on synchronous homes).
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    // ---- compact storage of read-mostly activations (section owned by helper pdl) ----

    /// `t` in the home's compact storage, for values written once and read many times (a
    /// window's cross-attention K/V, read at every decoder step): a device home may keep them
    /// as f16, half the bytes per read. Ops read the result as `t`'s values rounded to that
    /// storage. The default is `t` itself (a `reshape` to its own shape).
    fn compact_copy(&self, t: &Self::Tensor) -> Result<Self::Tensor> {
        self.reshape(t, t.shape())
    }

    /// `compact_copy(linear(x, w, bias))`: a projection whose output goes straight to compact
    /// storage (a window's cross-attention K/V). A device home may have the GEMM write that
    /// storage itself, rounding once from its accumulators (+ the bias in that storage's type)
    /// instead of after a full-precision output. The default composes the two.
    fn linear_compact(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        bias: Option<&Self::Tensor>,
    ) -> Result<Self::Tensor> {
        self.compact_copy(&self.linear(x, w, bias)?)
    }
}

/// The parameters of one decoder step, as the `(1, 1, 1 + B)` f32 tensor the `*_step` ops read:
/// the position of the step's first token (the rows already in the KV cache), then one token id
/// per sequence. f32 holds these integers exactly (both stay far below 2^24); the layout fits
/// [`Backend::write_rows`], so a captured chain's step tensor is refreshed in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepParams {
    pub position: usize,
    pub ids: Vec<u32>,
}

impl StepParams {
    /// Largest value the f32 encoding carries exactly.
    const MAX: usize = 1 << 24;

    /// The host tensor `(1, 1, 1 + B)` to upload or write into a step tensor.
    pub fn to_host(&self) -> Result<HostTensor> {
        let too_big =
            self.position >= Self::MAX || self.ids.iter().any(|&i| i as usize >= Self::MAX);
        if too_big || self.ids.is_empty() {
            return Err(crate::Error::shape(
                "step params",
                format!(
                    "position {} with {} ids: want 1+ ids, all values below 2^24",
                    self.position,
                    self.ids.len()
                ),
            ));
        }
        let mut data = Vec::with_capacity(1 + self.ids.len());
        data.push(self.position as f32);
        data.extend(self.ids.iter().map(|&i| i as f32));
        HostTensor::new(vec![1, 1, data.len()], data)
    }

    /// Parse a downloaded step tensor, checking that every entry is a non-negative integer.
    pub fn from_host(h: &HostTensor) -> Result<Self> {
        let bad = |why: &str| crate::Error::shape("step params", format!("{:?}: {why}", h.shape));
        if h.data.len() < 2 {
            return Err(bad("want (1, 1, 1 + B) with B ≥ 1"));
        }
        let mut vals = Vec::with_capacity(h.data.len());
        for &v in &h.data {
            if !(v >= 0.0 && v < Self::MAX as f32 && v.fract() == 0.0) {
                return Err(bad(&format!("entry {v} is not an integer in [0, 2^24)")));
            }
            vals.push(v as usize);
        }
        Ok(Self {
            position: vals[0],
            ids: vals[1..].iter().map(|&v| v as u32).collect(),
        })
    }

    /// Read a step tensor back from `b` (what the default `*_step` ops do).
    pub fn read<B: Backend + ?Sized>(b: &B, step: &B::Tensor) -> Result<Self> {
        Self::from_host(&b.download(step)?)
    }
}

/// `(B, S)` of a [`Backend::mask_fill`] call, checked: `keep` is `(B, S)` or `(B, S, 1)` and `x` holds a whole
/// number of `(R, S, inner)` blocks per batch entry.
pub fn mask_dims(x: &[usize], keep: &[usize], inner: usize) -> Result<(usize, usize)> {
    let bad = || {
        crate::Error::shape(
            "mask_fill",
            format!("x {x:?} with keep {keep:?}, inner {inner}: x must be (B, .., S, inner)"),
        )
    };
    let rank_ok = keep.len() == 2 || (keep.len() == 3 && keep[2] == 1);
    if !rank_ok || inner == 0 {
        return Err(bad());
    }
    let (bs, s) = (keep[0], keep[1]);
    let n: usize = x.iter().product();
    if bs == 0
        || s == 0
        || x.first().is_none_or(|&d| !d.is_multiple_of(bs))
        || !n.is_multiple_of(bs * s * inner)
    {
        return Err(bad());
    }
    Ok((bs, s))
}

/// `(B·H, C, T)` of a [`Backend::rel_shift_softmax`] call, checked.
pub fn rel_shift_dims(ac: &[usize], bd: &[usize]) -> Result<(usize, usize, usize)> {
    let ok = ac.len() == 3
        && bd.len() == 3
        && ac[0] == bd[0]
        && ac[1] == bd[1]
        && ac[1] > 0
        && ac[2] > 0
        && bd[2] == ac[2] + ac[1] - 1;
    if !ok {
        return Err(crate::Error::shape(
            "rel_shift_softmax",
            format!("ac {ac:?} with bd {bd:?}: want (BH, C, T) and (BH, C, T+C-1)"),
        ));
    }
    Ok((ac[0], ac[1], ac[2]))
}

/// `(B, T, H·Dh)` of a [`Backend::split_heads`] input, checked.
pub fn heads_dims(x: &[usize], heads: usize) -> Result<(usize, usize, usize)> {
    if x.len() != 3 || heads == 0 || !x[2].is_multiple_of(heads) {
        return Err(crate::Error::shape(
            "split_heads",
            format!("{x:?} into {heads} heads: want (B, T, H·Dh)"),
        ));
    }
    Ok((x[0], x[1], x[2]))
}

/// `(B·H, T, Dh)` of a [`Backend::merge_heads`] input of a batch of `batch`, checked.
pub fn merged_dims(x: &[usize], batch: usize) -> Result<(usize, usize, usize)> {
    if x.len() != 3 || batch == 0 || !x[0].is_multiple_of(batch) {
        return Err(crate::Error::shape(
            "merge_heads",
            format!("{x:?} into a batch of {batch}"),
        ));
    }
    Ok((x[0], x[1], x[2]))
}

/// `x + bias` (bias broadcast over the last dim) where a bias is given, else `None`: the
/// optional bias step of [`Backend::split_heads`], for every home's form of it
/// (`biased.as_ref().unwrap_or(x)` is the tensor to split).
pub fn plus_bias<B: Backend + ?Sized>(
    b: &B,
    x: &B::Tensor,
    bias: Option<&B::Tensor>,
) -> Result<Option<B::Tensor>> {
    bias.map(|bb| b.add(x, bb)).transpose()
}

/// Layer norm parameters fused into a projection: `(x − mean)/sqrt(var + eps)·γ + β`,
/// `gamma, beta (K)`.
#[derive(Clone, Copy)]
pub struct NormRef<'a, T> {
    pub gamma: &'a T,
    pub beta: Option<&'a T>,
    pub eps: f32,
}

/// What [`Backend::norm_linear`] does around its GEMM: an input layer norm, a bias `(N)`, an
/// activation after the bias, a residual of the output's shape added last.
#[derive(Clone, Copy)]
pub struct LinearFusion<'a, T> {
    pub norm: Option<NormRef<'a, T>>,
    pub bias: Option<&'a T>,
    pub act: Option<Activation>,
    pub residual: Option<&'a T>,
}

impl<T> Default for LinearFusion<'_, T> {
    fn default() -> Self {
        Self {
            norm: None,
            bias: None,
            act: None,
            residual: None,
        }
    }
}

/// [`Backend::norm_linear`] from other ops: what every home's default computes.
pub fn norm_linear_composed<B: Backend + ?Sized>(
    b: &B,
    x: &B::Tensor,
    w: &B::Weight,
    f: &LinearFusion<'_, B::Tensor>,
) -> Result<B::Tensor> {
    let normed = match &f.norm {
        Some(n) => Some(b.layer_norm(x, n.gamma, n.beta, n.eps)?),
        None => None,
    };
    let x = normed.as_ref().unwrap_or(x);
    let mut y = b.linear(x, w, f.bias)?;
    if let Some(a) = f.act {
        y = b.activation(&y, a)?;
    }
    match f.residual {
        Some(r) => {
            if r.shape() != y.shape() {
                return Err(crate::Error::shape(
                    "norm_linear",
                    format!(
                        "residual {:?} for output {:?}: it must have the output's shape",
                        r.shape(),
                        y.shape()
                    ),
                ));
            }
            b.add(&y, r)
        }
        None => Ok(y),
    }
}

/// [`Backend::linear_add_norms`] from other ops: what every home's default computes (and what
/// a home's fused form falls back to).
#[allow(clippy::too_many_arguments)]
pub fn linear_add_norms_composed<B: Backend + ?Sized>(
    b: &B,
    x: &B::Tensor,
    w: &B::Weight,
    bias: Option<&B::Tensor>,
    r: &B::Tensor,
    norms: &[(&B::Tensor, Option<&B::Tensor>)],
    eps: f32,
    next: Option<&B::Weight>,
) -> Result<(B::Tensor, Vec<B::Tensor>)> {
    let s = b.linear_add(x, w, bias, r)?;
    let outs = norms_after_composed(b, &s, norms, eps, next)?;
    Ok((s, outs))
}

/// The norms of [`linear_add_norms_composed`] over its sum `s`.
pub fn norms_after_composed<B: Backend + ?Sized>(
    b: &B,
    s: &B::Tensor,
    norms: &[(&B::Tensor, Option<&B::Tensor>)],
    eps: f32,
    next: Option<&B::Weight>,
) -> Result<Vec<B::Tensor>> {
    Ok(match (norms, next) {
        ([(g, be)], Some(nw)) => vec![b.layer_norm_feeding(s, g, *be, eps, nw)?],
        ([(g, be)], None) => vec![b.layer_norm(s, g, *be, eps)?],
        ([n1, n2], _) => {
            let (y, z) = b.layer_norm_pair(s, [*n1, *n2], eps, next)?;
            vec![y, z]
        }
        _ => {
            return Err(crate::Error::shape(
                "linear_add_norms",
                format!("{} norms: one or two follow the linear", norms.len()),
            ))
        }
    })
}

/// [`Backend::qkv_step`] from other ops: what every home's default computes.
pub fn qkv_step_composed<B: Backend + ?Sized>(
    b: &B,
    x: &B::Tensor,
    w: &B::Weight,
    f: &LinearFusion<'_, B::Tensor>,
    kv: (&mut B::Tensor, &mut B::Tensor),
    step: &B::Tensor,
) -> Result<B::Tensor> {
    let qkv = b.norm_linear(x, w, f)?;
    let c = packed_width("qkv_step", qkv.shape())?;
    let k = b.slice(&qkv, 2, c, c)?;
    let v = b.slice(&qkv, 2, 2 * c, c)?;
    b.write_rows_step(kv.0, &k, step)?;
    b.write_rows_step(kv.1, &v, step)?;
    Ok(qkv)
}

/// `C` of a packed `(B, T, 3C)` projection, checked.
pub fn packed_width(op: &'static str, s: &[usize]) -> Result<usize> {
    match s {
        [_, _, c3] if *c3 > 0 && c3 % 3 == 0 => Ok(c3 / 3),
        _ => Err(crate::Error::shape(op, format!("{s:?} is not (B, T, 3·C)"))),
    }
}

/// The pass of [`Backend::feeding_add_norms`], with its operands: the `_feeding` op it stands for.
#[derive(Debug)]
pub enum Feeding<'a, T, W> {
    /// [`Backend::linear_act_feeding`] `(x, w, bias, act)`.
    LinearAct {
        x: &'a T,
        w: &'a W,
        bias: Option<&'a T>,
        act: Activation,
    },
    /// [`Backend::glu_depthwise_act_feeding`] `(x, keep, w, bias, act)`.
    GluDepthwiseAct {
        x: &'a T,
        keep: Option<&'a T>,
        w: &'a T,
        bias: Option<&'a T>,
        act: Activation,
    },
    /// [`Backend::rel_attention_feeding`] `(qkv, pos, bias_u, bias_v, keep, p)`.
    RelAttention {
        qkv: &'a T,
        pos: &'a T,
        bias_u: &'a T,
        bias_v: &'a T,
        keep: Option<&'a T>,
        p: RelAttnParams,
    },
}

// (by hand: derived, they would ask T and W to be Copy, where only references are copied)
impl<T, W> Clone for Feeding<'_, T, W> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, W> Copy for Feeding<'_, T, W> {}

/// The linear that reads the last result of [`Backend::feeding_add_norms`].
#[derive(Debug)]
pub struct Feeds<'a, W> {
    /// That linear's weight.
    pub w: &'a W,
    /// The caller hands the result to that linear's op and to nothing else (no download, no
    /// other op), so a home may write it only in the form that linear reads (CUDA: the e4m3
    /// rows of an FP8 GEMM). An op that reads it otherwise fails with an error there.
    pub only: bool,
}

// (by hand, as Feeding's)
impl<W> Clone for Feeds<'_, W> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<W> Copy for Feeds<'_, W> {}

/// The pass of [`Backend::feeding_add_norms`] by its `_feeding` op, `next` the linear it feeds.
pub fn feeding_composed<B: Backend + ?Sized>(
    b: &B,
    pass: Feeding<'_, B::Tensor, B::Weight>,
    next: &B::Weight,
) -> Result<B::Tensor> {
    match pass {
        Feeding::LinearAct { x, w, bias, act } => b.linear_act_feeding(x, w, bias, act, next),
        Feeding::GluDepthwiseAct {
            x,
            keep,
            w,
            bias,
            act,
        } => b.glu_depthwise_act_feeding(x, keep, w, bias, act, next),
        Feeding::RelAttention {
            qkv,
            pos,
            bias_u,
            bias_v,
            keep,
            p,
        } => b.rel_attention_feeding(qkv, pos, bias_u, bias_v, keep, &p, next),
    }
}

/// What [`Backend::rel_attention`] needs besides its tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RelAttnParams {
    pub heads: usize,
    /// Multiplies the summed score terms (usually 1/√Dh).
    pub scale: f32,
    /// Query rows per block of [`rel_attention_composed`]: its score matrices are
    /// `(B·H, rows, T)`, so memory stays linear in T.
    pub query_block: usize,
}

/// [`Backend::rel_attention`] from other ops: [`Backend::rel_attention_inputs`], then per block
/// of `p.query_block` query rows the two score products, [`Backend::rel_shift_softmax`] and the
/// product with v, then [`Backend::merge_heads`].
pub fn rel_attention_composed<B: Backend + ?Sized>(
    b: &B,
    qkv: &B::Tensor,
    pos: &B::Tensor,
    bias_u: &B::Tensor,
    bias_v: &B::Tensor,
    keep: Option<&B::Tensor>,
    p: &RelAttnParams,
) -> Result<B::Tensor> {
    let (bs, t, _c, np) = rel_attention_dims(qkv.shape(), pos.shape(), p.heads)?;
    if np + 1 != 2 * t {
        return Err(crate::Error::shape(
            "rel_attention",
            format!("{np} positions for {t} frames: want 2T−1"),
        ));
    }
    let RelAttnInputs {
        qu,
        qv,
        k,
        v,
        p: pp,
    } = b.rel_attention_inputs(qkv, pos, p.heads, bias_u, bias_v)?;
    let chunk = p.query_block.clamp(1, t);
    let mut outs = Vec::new();
    for q0 in (0..t).step_by(chunk) {
        let c = chunk.min(t - q0);
        let sliced;
        let (qu_c, qv_c, p_c) = if c == t {
            (&qu, &qv, &pp) // one block: all rows, all 2T−1 positions
        } else {
            // rows q0..q0+C need distances q0+C−1−(T−1) … q0: positions T−q0−C … 2T−2−q0
            sliced = (
                b.slice(&qu, 1, q0, c)?,
                b.slice(&qv, 1, q0, c)?,
                b.slice(&pp, 1, t - q0 - c, t + c - 1)?,
            );
            (&sliced.0, &sliced.1, &sliced.2)
        };
        let ac = b.matmul(qu_c, &k, true)?; // (BH, C, T)
        let bd = b.matmul(qv_c, p_c, true)?; // (BH, C, T+C−1)
        let probs = b.rel_shift_softmax(&ac, &bd, keep, p.scale)?; // (BH, C, T)
        outs.push(b.matmul(&probs, &v, false)?); // (BH, C, Dh)
    }
    let out = if outs.len() == 1 {
        outs.remove(0)
    } else {
        b.concat(&outs.iter().collect::<Vec<_>>(), 1)?
    };
    b.merge_heads(&out, bs)
}

/// What [`Backend::rel_attention_inputs`] returns: `(B·H, T, Dh)` each, `p (B·H, P, Dh)`.
pub struct RelAttnInputs<T> {
    pub qu: T,
    pub qv: T,
    pub k: T,
    pub v: T,
    pub p: T,
}

/// `(B, T, C, K)` of a [`Backend::glu_depthwise_act`] over `x (B, T, 2C)` with `w (C, K)`,
/// checked (the output must have at least one frame).
pub fn glu_depthwise_dims(x: &[usize], w: &[usize]) -> Result<(usize, usize, usize, usize)> {
    let ok = x.len() == 3 && w.len() == 2 && w[1] > 0 && x[2] == 2 * w[0];
    if !ok || x[1] + 2 * ((w[1] - 1) / 2) < w[1] {
        return Err(crate::Error::shape(
            "glu_depthwise_act",
            format!("x {x:?} with w {w:?}: want x (B, T, 2C), w (C, K), T + 2·⌊(K−1)/2⌋ ≥ K"),
        ));
    }
    Ok((x[0], x[1], w[0], w[1]))
}

/// `(B, T, H·Dh, P)` of a [`Backend::rel_attention_inputs`] over `qkv (B, T, 3·H·Dh)` and
/// `pos (1, P, H·Dh)`, checked.
pub fn rel_attention_dims(
    qkv: &[usize],
    pos: &[usize],
    heads: usize,
) -> Result<(usize, usize, usize, usize)> {
    let c = qkv.get(2).copied().unwrap_or(0) / 3;
    let ok = qkv.len() == 3
        && qkv[2] == 3 * c
        && heads > 0
        && c.is_multiple_of(heads)
        && pos.len() == 3
        && pos[0] == 1
        && pos[2] == c;
    if !ok || c == 0 {
        return Err(crate::Error::shape(
            "rel_attention_inputs",
            format!(
                "qkv {qkv:?}, pos {pos:?}, {heads} heads: want qkv (B, T, 3·H·Dh), pos (1, P, H·Dh)"
            ),
        ));
    }
    Ok((qkv[0], qkv[1], c, pos[1]))
}

// ---- FastConformer subsampling, channel-last (section owned by helper fcenc2) ----

/// Square kernel, stride and zero padding of a subsampling conv (the same on T and F).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StridingParams {
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
}

impl StridingParams {
    /// Output length of `n` frames (0 when the kernel does not fit).
    pub fn out_len(&self, n: usize) -> usize {
        if self.stride == 0 || n + 2 * self.padding < self.kernel {
            return 0;
        }
        (n + 2 * self.padding - self.kernel) / self.stride + 1
    }
    fn conv2d(&self, groups: usize) -> Conv2dParams {
        Conv2dParams {
            kernel: (self.kernel, self.kernel),
            stride: (self.stride, self.stride),
            padding: (self.padding, self.padding),
            groups,
        }
    }
}

/// A `(B, C, H, W)` map as channel-last `(B, H, W, C)`.
fn channel_last<B: Backend + ?Sized>(b: &B, x: &B::Tensor) -> Result<B::Tensor> {
    let s = x.shape().to_vec();
    let y = b.transpose_last2(&b.reshape(x, &[s[0], s[1], s[2] * s[3]])?)?;
    b.reshape(&y, &[s[0], s[2], s[3], s[1]])
}

/// `C` of a depthwise-striding weight `(C, 1, k, k)` and its bias `(C)`, checked.
fn striding_weight(
    op: &'static str,
    w: &[usize],
    bias: &[usize],
    p: &StridingParams,
) -> Result<usize> {
    let c = w.first().copied().unwrap_or(0);
    if w != [c, 1, p.kernel, p.kernel] || bias != [c] || c == 0 || p.stride == 0 {
        return Err(crate::Error::shape(
            op,
            format!("w {w:?}, bias {bias:?} for {p:?}: want w (C, 1, k, k), bias (C)"),
        ));
    }
    Ok(c)
}

/// `(B, T, F, C, T2, F2)` of a [`Backend::subsample_stem`], checked.
pub fn subsample_stem_dims(
    x: &[usize],
    w0: &[usize],
    b0: &[usize],
    w1: &[usize],
    b1: &[usize],
    p: &StridingParams,
) -> Result<(usize, usize, usize, usize, usize, usize)> {
    const OP: &str = "subsample_stem";
    let c = striding_weight(OP, w0, b0, p)?;
    if striding_weight(OP, w1, b1, p)? != c || x.len() != 3 {
        return Err(crate::Error::shape(
            OP,
            format!("x {x:?}, w0 {w0:?}, w1 {w1:?}: want x (B, T, F) and both convs of C channels"),
        ));
    }
    let (t2, f2) = (p.out_len(p.out_len(x[1])), p.out_len(p.out_len(x[2])));
    if t2 == 0 || f2 == 0 {
        return Err(crate::Error::shape(
            OP,
            format!("x {x:?} too short for two {p:?} convs"),
        ));
    }
    Ok((x[0], x[1], x[2], c, t2, f2))
}

/// `(B, T, F, C, T', F')` of a [`Backend::depthwise_conv2d_cl`], checked.
pub fn depthwise_conv2d_cl_dims(
    x: &[usize],
    w: &[usize],
    bias: &[usize],
    p: &StridingParams,
) -> Result<(usize, usize, usize, usize, usize, usize)> {
    const OP: &str = "depthwise_conv2d_cl";
    let c = striding_weight(OP, w, bias, p)?;
    if x.len() != 4 || x[3] != c {
        return Err(crate::Error::shape(
            OP,
            format!("x {x:?} with w {w:?}: want x (B, T, F, C)"),
        ));
    }
    let (t2, f2) = (p.out_len(x[1]), p.out_len(x[2]));
    if t2 == 0 || f2 == 0 {
        return Err(crate::Error::shape(
            OP,
            format!("x {x:?} too short for {p:?}"),
        ));
    }
    Ok((x[0], x[1], x[2], c, t2, f2))
}

/// [`Backend::subsample_stem`] from `mask_fill`, `conv2d`, `activation` and a transpose.
#[allow(clippy::too_many_arguments)]
pub fn subsample_stem_composed<B: Backend + ?Sized>(
    b: &B,
    x: &B::Tensor,
    keep0: Option<&B::Tensor>,
    w0: &B::Tensor,
    b0: &B::Tensor,
    keep1: Option<&B::Tensor>,
    w1: &B::Tensor,
    b1: &B::Tensor,
    p: &StridingParams,
) -> Result<B::Tensor> {
    let (bs, t, f, c, _, _) =
        subsample_stem_dims(x.shape(), w0.shape(), b0.shape(), w1.shape(), b1.shape(), p)?;
    let mut h = b.reshape(x, &[bs, 1, t, f])?; // time is H
    if let Some(k) = keep0 {
        h = b.mask_fill(&h, k, f, 0.0)?;
    }
    let h = b.conv2d(&h, w0, Some(b0), p.conv2d(1))?;
    let mut h = b.activation(&h, Activation::Relu)?; // (B, C, T1, F1)
    if let Some(k) = keep1 {
        let inner = h.shape()[3];
        h = b.mask_fill(&h, k, inner, 0.0)?;
    }
    channel_last(b, &b.conv2d(&h, w1, Some(b1), p.conv2d(c))?)
}

/// [`Backend::depthwise_conv2d_cl`] from transposes around `activation`, `mask_fill` and
/// `conv2d`.
pub fn depthwise_conv2d_cl_composed<B: Backend + ?Sized>(
    b: &B,
    x: &B::Tensor,
    keep: Option<&B::Tensor>,
    relu_input: bool,
    w: &B::Tensor,
    bias: &B::Tensor,
    p: &StridingParams,
) -> Result<B::Tensor> {
    let (bs, t, f, c, _, _) = depthwise_conv2d_cl_dims(x.shape(), w.shape(), bias.shape(), p)?;
    let h = b.transpose_last2(&b.reshape(x, &[bs, t * f, c])?)?;
    let mut h = b.reshape(&h, &[bs, c, t, f])?;
    if relu_input {
        h = b.activation(&h, Activation::Relu)?;
    }
    if let Some(k) = keep {
        h = b.mask_fill(&h, k, f, 0.0)?;
    }
    channel_last(b, &b.conv2d(&h, w, Some(bias), p.conv2d(c))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::ReferenceBackend;

    #[test]
    fn step_params_round_trip_and_refuse_non_integers() {
        let sp = StepParams {
            position: 447,
            ids: vec![50257, 0, 51864],
        };
        let h = sp.to_host().expect("encode");
        assert_eq!(h.shape, vec![1, 1, 4]);
        assert_eq!(StepParams::from_host(&h).expect("decode"), sp);
        for bad in [-1.0f32, 2.5, f32::NAN, 16_777_216.0] {
            let h = HostTensor::new(vec![1, 1, 2], vec![3.0, bad]).expect("t");
            assert!(StepParams::from_host(&h).is_err(), "{bad} accepted");
        }
        let empty = StepParams {
            position: 0,
            ids: vec![],
        };
        assert!(empty.to_host().is_err());
    }

    /// The default `*_step` ops take the position from the step tensor: the same values as the
    /// host-parameter ops at that position, and a different position gives different values.
    #[test]
    fn default_step_ops_use_the_device_position() {
        let b = ReferenceBackend::new();
        let table = b
            .upload(&HostTensor::random(vec![10, 8], 1, 1.0))
            .expect("t");
        let pos = b
            .upload(&HostTensor::random(vec![6, 8], 2, 1.0))
            .expect("p");
        let step_at = |p: usize| {
            let sp = StepParams {
                position: p,
                ids: vec![3, 7],
            };
            b.upload(&sp.to_host().expect("h")).expect("s")
        };
        let want = {
            let x = b.gather_rows(&table, &[3, 7]).expect("g");
            let x = b.reshape(&x, &[2, 1, 8]).expect("r");
            b.add(&x, &b.slice(&pos, 0, 4, 1).expect("s")).expect("a")
        };
        let got = b.embed_step(&table, &pos, &step_at(4)).expect("embed");
        assert_eq!(b.download(&got).expect("d"), b.download(&want).expect("d"));
        let other = b.embed_step(&table, &pos, &step_at(5)).expect("embed");
        assert_ne!(
            b.download(&other).expect("d"),
            b.download(&want).expect("d")
        );

        let mut cache = b.upload(&HostTensor::zeros(vec![2, 6, 8])).expect("c");
        b.write_rows_step(&mut cache, &want, &step_at(4))
            .expect("write");
        let c = b.download(&cache).expect("d");
        let w = b.download(&want).expect("d");
        assert_eq!(&c.data[4 * 8..5 * 8], &w.data[..8]);
        assert_eq!(&c.data[(6 + 4) * 8..(6 + 5) * 8], &w.data[8..]);
        assert!(c.data[..4 * 8].iter().all(|&v| v == 0.0));

        let p = AttnParams {
            n_heads: 2,
            scale: 0.5,
            kv_len: None,
            causal: false,
        };
        let q = b.reshape(&want, &[2, 1, 8]).expect("q");
        let got = b
            .attention_step(&q, &cache, &cache, &p, &step_at(4))
            .expect("attn");
        let host = AttnParams {
            kv_len: Some(5),
            causal: true,
            ..p
        };
        let want = b.attention(&q, &cache, &cache, &host).expect("attn");
        assert_eq!(b.download(&got).expect("d"), b.download(&want).expect("d"));
    }
}
