//! Silero VAD v6 over the op contract: STFT magnitude (the export's strided conv with its fixed
//! basis, or the same windowed DFT by host FFT — see `frontend.rs`), four conv + ReLU encoder
//! blocks, one LSTM cell, ReLU → 1×1 conv → sigmoid.
//!
//! Per 32 ms window at 16 kHz: model input = 64 context samples ++ 512 new samples, reflect-padded
//! by 64 on the right (640), STFT (filter 256, hop 128) → 4 frames × 129 bins, encoder strides
//! 1, 2, 2, 1 → one 128-vector, LSTM(128) → probability. At 8 kHz every length halves
//! (context 32, window 256, filter 128, 65 bins); the encoder, LSTM and head keep their widths.
//!
//! The encoder of a window depends only on its samples (the context is just the previous samples
//! of the signal), so offline runs encode a block of windows as one batch and only the LSTM walks
//! the windows one by one.

use super::config::{VadRate, HIDDEN};
use super::frontend::StftFrontEnd;
use super::weights::{BranchWeights, ENCODER_KERNEL, ENCODER_STRIDES};
use crate::error::Result;
use stapes_core::{Activation, Backend, Conv1dParams, DeviceTensor, HostTensor, Lane};

/// `rms_norm`'s epsilon in the magnitude (see [`Branch::stft_conv`]): far below any non-zero
/// `(re² + im²)/2` of 16-bit audio (≥ ~1e-12), so it changes nothing but 0/0.
const MAG_EPS: f32 = 1e-30;

/// One rate branch's weights on a backend.
pub struct Branch<B: Backend> {
    pub rate: VadRate,
    /// `(2F, K)`, real/imaginary rows interleaved.
    stft: B::Weight,
    /// The same STFT by host FFT, when the basis is a windowed DFT (see `frontend.rs`).
    host_stft: Option<StftFrontEnd>,
    /// Whether runs take `host_stft` (when present) or the conv over the backend.
    pub use_host_stft: bool,
    /// `(2)`: `1/√2` twice (the rms_norm gain of the magnitude trick).
    pair_gain: B::Tensor,
    /// `(1, 2)`: ones (sums each re/im pair).
    pair_sum: B::Weight,
    /// `(C_out, C_in·3)` and `(C_out)` per block.
    encoder: Vec<(B::Weight, B::Tensor)>,
    w_ih: B::Weight,
    w_hh: B::Weight,
    /// `(4H, 2H)`: row r is `W_ih[r] ++ W_hh[r]`, for single-window steps.
    w_cat: B::Weight,
    /// `(4H)` = b_ih + b_hh.
    lstm_bias: B::Tensor,
    /// `(1, H)` and `(1)`.
    head_w: B::Weight,
    head_b: B::Tensor,
}

impl<B: Backend> Branch<B> {
    pub fn upload(be: &B, w: &BranchWeights, lane: Lane) -> Result<Self> {
        let half = std::f32::consts::FRAC_1_SQRT_2;
        let mut encoder = Vec::with_capacity(w.encoder.len());
        for (cw, cb) in &w.encoder {
            encoder.push((be.weight(cw, lane)?, be.upload(cb)?));
        }
        Ok(Branch {
            rate: w.rate,
            // The STFT basis and the pair sum stay exact: they are fixed transforms, not learned
            // GEMMs, and a lane that rounds them would shift every probability.
            stft: be.weight(&w.stft_basis, best_exact_lane(be, lane))?,
            host_stft: StftFrontEnd::from_basis(w.rate, &w.stft_basis),
            use_host_stft: true,
            pair_gain: be.upload(&HostTensor::new(vec![2], vec![half, half])?)?,
            pair_sum: be.weight(
                &HostTensor::new(vec![1, 2], vec![1.0, 1.0])?,
                best_exact_lane(be, lane),
            )?,
            encoder,
            w_ih: be.weight(&w.w_ih, lane)?,
            w_hh: be.weight(&w.w_hh, lane)?,
            w_cat: be.weight(&concat_rows(&w.w_ih, &w.w_hh)?, lane)?,
            lstm_bias: be.upload(&w.lstm_bias)?,
            head_w: be.weight(&w.head_w, lane)?,
            head_b: be.upload(&w.head_b)?,
        })
    }

    /// STFT magnitude on the backend: model inputs `frames (n, ctx + win + ctx, 1)`, already
    /// reflect-padded → `(n, 4, F)`.
    pub fn stft_conv(&self, be: &B, frames: &B::Tensor) -> Result<B::Tensor> {
        let n = dim0(frames, "silero stft_conv")?;
        let k = self.rate.filter_length();
        let bins = k / 2 + 1;
        let p = Conv1dParams {
            kernel: k,
            stride: k / 2,
            padding: 0,
        };
        let spec = be.conv1d(frames, &self.stft, None, p)?; // (n, 4, 2F), re/im interleaved
        let t = spec.shape()[1];
        // The contract has no sqrt; |z| comes from rms_norm over each (re, im) pair:
        // r = z / sqrt((re² + im²)/2) · (1/√2)  ⇒  re·r₀ + im·r₁ = sqrt(re² + im²).
        let pairs = be.reshape(&spec, &[n, t, bins, 2])?; // (n, 4, F, 2)
        let r = be.rms_norm(&pairs, &self.pair_gain, MAG_EPS)?;
        let prod = be.mul(&pairs, &r)?;
        let mag = be.linear(&prod, &self.pair_sum, None)?; // (n, 4, F, 1)
        Ok(be.reshape(&mag, &[n, t, bins])?)
    }

    /// The encoder after the STFT: `mag (n, 4, F)` → `(n, H)`.
    pub fn encode_spectrum(&self, be: &B, mag: &B::Tensor) -> Result<B::Tensor> {
        let n = dim0(mag, "silero encode")?;
        let mut x: Option<B::Tensor> = None;
        for ((w, b), stride) in self.encoder.iter().zip(ENCODER_STRIDES) {
            let p = Conv1dParams {
                kernel: ENCODER_KERNEL,
                stride,
                padding: 1,
            };
            let y = be.conv1d(x.as_ref().unwrap_or(mag), w, Some(b), p)?;
            x = Some(be.activation(&y, Activation::Relu)?);
        }
        let x = x.ok_or_else(|| stapes_core::Error::shape("silero encode", "no encoder blocks"))?;
        // (n, 1, H) after strides 1·2·2·1 on 4 frames
        let frames_out = x.shape()[1];
        if frames_out != 1 {
            return Err(stapes_core::Error::shape(
                "silero encode",
                format!("encoder left {frames_out} frames, expected 1"),
            )
            .into());
        }
        Ok(be.reshape(&x, &[n, HIDDEN])?)
    }

    /// Model inputs of `n` windows on the host, `(n, ctx + win + ctx)` row-major and already
    /// reflect-padded → encoder output `(n, H)`, by the host FFT or the backend conv.
    pub fn encode(&self, be: &B, frames: &[f32], n: usize) -> Result<B::Tensor> {
        let width = 2 * self.rate.context() + self.rate.window();
        if frames.len() != n * width {
            return Err(stapes_core::Error::shape(
                "silero encode",
                format!("{} samples for {n} windows of {width}", frames.len()),
            )
            .into());
        }
        match (&self.host_stft, self.use_host_stft) {
            (Some(fe), true) => {
                let mag = be.upload(&fe.magnitudes(frames, n, width)?)?; // (n, 4, F)
                self.encode_spectrum(be, &mag)
            }
            _ => {
                let x = be.upload(&HostTensor::new(vec![n, width, 1], frames.to_vec())?)?;
                self.encode_spectrum(be, &self.stft_conv(be, &x)?)
            }
        }
    }

    /// Whether this branch can take the host FFT path.
    pub fn has_host_stft(&self) -> bool {
        self.host_stft.is_some()
    }

    /// The LSTM over encoder outputs `enc (n, H)` from state `(h, c)`; returns every step's
    /// `h` as `(n, H)` and leaves `(h, c)` after the last step.
    ///
    /// The input projection `enc·W_ihᵀ + b` does not depend on the recurrence, so it runs as one
    /// GEMM for the block and each step's slice of it becomes the bias of the step's only GEMV,
    /// `h·W_hhᵀ`. (`lstm_cell` would issue two GEMVs per step; on the CPU home each small GEMV
    /// costs ~5 µs of dispatch, more than its arithmetic.)
    pub fn walk(
        &self,
        be: &B,
        enc: &B::Tensor,
        h: &mut B::Tensor,
        c: &mut B::Tensor,
    ) -> Result<B::Tensor> {
        let n = dim0(enc, "silero lstm")?;
        if n == 1 {
            // A single window (streaming): one GEMV over [x, h] instead of two.
            let xh = be.concat(&[enc, &*h], 1)?; // (1, 2H)
            let gates = be.linear(&xh, &self.w_cat, Some(&self.lstm_bias))?; // (1, 4H)
            let (h2, c2) = lstm_gates(be, &gates, c)?;
            *c = c2;
            let out = be.reshape(&h2, &[1, HIDDEN])?;
            *h = h2;
            return Ok(out);
        }
        let g4 = 4 * HIDDEN;
        // Flat, so that each step's slice is directly a (4H) bias.
        let gx = be.linear(enc, &self.w_ih, Some(&self.lstm_bias))?; // (n, 4H)
        let gx = be.reshape(&gx, &[n * g4])?;
        // Outputs are gathered with one concat at the end: per-step copies into a preallocated
        // buffer would add two ops to every step.
        let mut outs: Vec<B::Tensor> = Vec::with_capacity(n); // n × (1, H)
        for i in 0..n {
            let gx_i = be.slice(&gx, 0, i * g4, g4)?; // (4H)
            let prev = outs.last().unwrap_or(&*h);
            let gates = be.linear(prev, &self.w_hh, Some(&gx_i))?; // (1, 4H)
            let (h2, c2) = lstm_gates(be, &gates, c)?;
            outs.push(h2);
            *c = c2;
        }
        let hs = {
            let refs: Vec<&B::Tensor> = outs.iter().collect();
            be.concat(&refs, 0)? // (n, H)
        };
        if let Some(last) = outs.pop() {
            *h = last;
        }
        Ok(hs)
    }

    /// Speech probability of each LSTM output: `hs (n, H)` → `(n, 1)`.
    pub fn head(&self, be: &B, hs: &B::Tensor) -> Result<B::Tensor> {
        let x = be.activation(hs, Activation::Relu)?;
        let logit = be.linear(&x, &self.head_w, Some(&self.head_b))?;
        Ok(be.activation(&logit, Activation::Sigmoid)?)
    }

    /// Encode, walk and score `n` windows from the given state; returns the probabilities and
    /// leaves `(h, c)` at the state after the last window.
    pub fn run_block(
        &self,
        be: &B,
        frames: &[f32],
        n: usize,
        h: &mut B::Tensor,
        c: &mut B::Tensor,
    ) -> Result<Vec<f32>> {
        let enc = self.encode(be, frames, n)?; // (n, H)
        let hs = self.walk(be, &enc, h, c)?; // (n, H)
        let p = be.download(&self.head(be, &hs)?)?;
        Ok(p.data)
    }
}

/// The LSTM cell after its GEMMs (PyTorch gate order i, f, g, o): `gates (1, 4H)`, `c (1, H)`
/// → `(h', c')` with `c' = σ(f)·c + σ(i)·tanh(g)`, `h' = σ(o)·tanh(c')`.
fn lstm_gates<B: Backend>(
    be: &B,
    gates: &B::Tensor,
    c: &B::Tensor,
) -> Result<(B::Tensor, B::Tensor)> {
    let gate = |k: usize, act: Activation| -> Result<B::Tensor> {
        Ok(be.activation(&be.slice(gates, 1, k * HIDDEN, HIDDEN)?, act)?)
    };
    let i = gate(0, Activation::Sigmoid)?;
    let f = gate(1, Activation::Sigmoid)?;
    let g = gate(2, Activation::Tanh)?;
    let o = gate(3, Activation::Sigmoid)?;
    let c2 = be.add(&be.mul(&f, c)?, &be.mul(&i, &g)?)?;
    let h2 = be.mul(&o, &be.activation(&c2, Activation::Tanh)?)?;
    Ok((h2, c2))
}

/// `(N, K1)` and `(N, K2)` → `(N, K1 + K2)`.
fn concat_rows(a: &HostTensor, b: &HostTensor) -> Result<HostTensor> {
    let (ka, kb) = (a.last_dim(), b.last_dim());
    let rows = a.rows();
    let mut data = Vec::with_capacity(rows * (ka + kb));
    for (ra, rb) in a.data.chunks(ka.max(1)).zip(b.data.chunks(kb.max(1))) {
        data.extend_from_slice(ra);
        data.extend_from_slice(rb);
    }
    Ok(HostTensor::new(vec![rows, ka + kb], data)?)
}

/// Leading dimension, or a shape error for a scalar.
fn dim0<T: DeviceTensor>(t: &T, op: &'static str) -> Result<usize> {
    Ok(t.shape()
        .first()
        .copied()
        .ok_or_else(|| stapes_core::Error::shape(op, "scalar tensor"))?)
}

/// Fixed transforms keep f32 where the home has it, else the lane asked for.
fn best_exact_lane<B: Backend>(be: &B, lane: Lane) -> Lane {
    if be.supports_lane(Lane::F32) {
        Lane::F32
    } else if be.supports_lane(Lane::F16) {
        Lane::F16
    } else {
        lane
    }
}

/// Build the reflect-padded model inputs of windows `first .. first + n` of `samples` at
/// `rate`, as `(n, ctx + win + ctx)` row-major: the previous `ctx` samples (zeros before the
/// start), `win` new samples (zeros past the end), then the reflection of the last `ctx` of those
/// (PyTorch `reflect` excludes the edge sample).
///
/// The reflection is built here, on the host, while the frames are assembled anyway: the
/// contract has no pad op and a slice + concat chain per window would cost more than the copy.
pub fn frames_for(samples: &[f32], rate: VadRate, first: usize, n: usize, out: &mut Vec<f32>) {
    let (win, ctx) = (rate.window(), rate.context());
    let len = ctx + win + ctx;
    out.clear();
    out.resize(n * len, 0.0);
    for (j, row) in out.chunks_exact_mut(len).enumerate() {
        let start = (first + j) * win;
        // context: samples[start - ctx .. start], zeros where that is before the signal
        for (i, v) in row[..ctx].iter_mut().enumerate() {
            let pos = start + i;
            if pos >= ctx {
                *v = samples.get(pos - ctx).copied().unwrap_or(0.0);
            }
        }
        let avail = samples.len().saturating_sub(start).min(win);
        if avail > 0 {
            row[ctx..ctx + avail].copy_from_slice(&samples[start..start + avail]);
        }
        reflect_tail(row, ctx + win, ctx);
    }
}

/// `row[..body]` is the model input; write its right reflection into `row[body .. body + pad]`.
pub fn reflect_tail(row: &mut [f32], body: usize, pad: usize) {
    for j in 0..pad {
        row[body + j] = row[body - 2 - j];
    }
}
