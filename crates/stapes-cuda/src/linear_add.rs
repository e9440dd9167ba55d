//! `linear`, `linear_add` (`x · Wᵀ + b + r`) and `linear_act` (`act(x · Wᵀ + b)`) on the CUDA
//! home. The residual goes into the GEMM itself: cuBLASLt with C = r and beta = 1 for f16
//! weights, the i32 → f16/f32 scaling epilogue for q8 weights; decoder-sized GEMVs (≤ 8 rows)
//! add it in one pass after the GEMV. q8's activation goes into its scaling epilogue too.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use stapes_core::{Activation, Counters, DeviceTensor, Error, Result};

use super::{
    act_code, grid_1d, round_up, CudaBackend, CudaTensor, CudaWeight, Dtype, PrepKind, WeightData,
    GEMV_MAX_M,
};
use crate::gemm::{EpiAct, LtKind};
use crate::pool::Block;

/// 0: not read yet, 1 off, 2 on.
static GELU_EPI: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether the erf GELU after an f16 tensor-core GEMM runs as cuBLASLt's GELU epilogue (its
/// tanh form) instead of a separate pass. On by default (H200, stop 14: turbo encode 5.61 ->
/// 5.42 ms f16, 5.73 -> 5.27 q8, 16 windows 78.9 -> 73.3; real tiny.en greedy ids still equal
/// the CPU f32 lane's); `STAPES_CUDA_GELU_EPILOGUE=0` keeps the exact erf pass, as does
/// [`CudaBackend::set_gelu_epilogue`]`(false)`.
fn gelu_epilogue_on() -> bool {
    match GELU_EPI.load(Ordering::Relaxed) {
        0 => {
            let on = !std::env::var("STAPES_CUDA_GELU_EPILOGUE").is_ok_and(|v| v.trim() == "0");
            GELU_EPI.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        v => v == 2,
    }
}

/// The activation cuBLASLt applies in a GEMM's epilogue for `act`, or `EpiAct::None` where it
/// runs as a separate pass.
pub(super) fn epilogue_act(act: Activation) -> EpiAct {
    match act {
        Activation::GeluTanh => EpiAct::Gelu,
        Activation::Gelu if gelu_epilogue_on() => EpiAct::Gelu,
        Activation::Relu => EpiAct::Relu,
        _ => EpiAct::None,
    }
}

impl CudaBackend {
    /// Turn the GELU epilogue on or off for every backend of this process (same-binary A/B
    /// runs and tests; the default comes from `STAPES_CUDA_GELU_EPILOGUE`).
    #[doc(hidden)]
    pub fn set_gelu_epilogue(&self, on: bool) {
        GELU_EPI.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    }
}

impl CudaBackend {
    /// `x (.., K) · Wᵀ + bias (+ r)`, `r` exactly the output's shape (no broadcast: a residual
    /// stream has one value per output element).
    pub(super) fn linear_with(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        r: Option<&CudaTensor>,
    ) -> Result<CudaTensor> {
        Ok(self
            .linear_epi(x, w, bias, r, EpiAct::None, self.out_dt())?
            .0)
    }

    /// [`Backend::linear_compact`]: with f16 compact storage on (`STAPES_CUDA_CROSS_F16`), the
    /// GEMM writes f16 itself — the f16-output cuBLASLt kind the encoder chains use, so a
    /// transcription loads one cuBLASLt kernel family fewer at start-up (41–65 ms on the
    /// H200, stop 19 profiles), and no conversion pass follows each projection.
    pub(super) fn linear_compact_f16(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
    ) -> Result<CudaTensor> {
        if !crate::step::cross_f16_on() {
            return self.linear_with(x, w, bias, None);
        }
        Ok(self
            .linear_epi(x, w, bias, None, EpiAct::None, Dtype::F16)?
            .0)
    }

    /// [`Self::linear_with`] into an output of type `out_dt`, asking for activation `act` in the
    /// GEMM's epilogue (cuBLASLt's GELU is the tanh form); the flag says whether the output has
    /// it (only f16 tensor-core GEMMs without a residual do; elsewhere the caller runs the
    /// activation).
    fn linear_epi(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        r: Option<&CudaTensor>,
        act: EpiAct,
        out_dt: Dtype,
    ) -> Result<(CudaTensor, bool)> {
        let op = if r.is_some() { "linear_add" } else { "linear" };
        let k = *x.shape.last().unwrap_or(&0);
        if k != w.k || x.shape.is_empty() {
            return Err(Error::shape(
                op,
                format!("x {:?} with W ({}, {})", x.shape, w.n, w.k),
            ));
        }
        if let Some(b) = bias {
            if b.numel() != w.n {
                return Err(Error::shape(
                    op,
                    format!("bias {:?} for N = {}", b.shape, w.n),
                ));
            }
        }
        let m = x.numel() / k.max(1);
        let mut shape = x.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = w.n;
        if let Some(r) = r {
            if r.shape() != shape.as_slice() {
                return Err(Error::shape(
                    op,
                    format!(
                        "residual {:?} for output {shape:?}: it must have the output's shape",
                        r.shape()
                    ),
                ));
            }
        }
        let out = self.alloc(&shape, out_dt)?;
        if m == 0 || w.n == 0 {
            // nothing to apply the activation to: done either way
            return Ok((out, act != EpiAct::None));
        }
        let bias32 = self.param(bias)?;
        let bp = self.opt(bias32.as_ref());
        let on_f16 = matches!(w.data, WeightData::F16(_)) || self.q8_runs_f16(w, m);
        let bp16 = match bias {
            Some(b)
                if on_f16
                    && self.bias16_on.load(Ordering::Relaxed)
                    && out.dtype == Dtype::F16
                    && m > GEMV_MAX_M =>
            {
                self.param16(b)?
            }
            _ => 0,
        };
        // the GEMM reads the residual in the output's type (cuBLASLt wants C's type = D's)
        let r = r.map(|r| self.as_dtype(r, out.dtype)).transpose()?;
        let rp = self.opt(r.as_ref());
        let done = self.linear_raw(
            out.buf.ptr,
            out.dtype,
            &x.buf,
            x.dtype,
            m,
            w,
            bp,
            bp16,
            rp,
            act,
        )?;
        Ok((out, done))
    }

    /// `x · Wᵀ + b` with `act` asked of the GEMM's epilogue ([`Self::linear_epi`]): the output
    /// and whether it has `act` (else the caller runs it).
    pub(super) fn linear_epi_act(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        act: Activation,
    ) -> Result<(CudaTensor, bool)> {
        self.linear_epi(x, w, bias, None, epilogue_act(act), self.out_dt())
    }

    /// `y += resid` over `len` elements of type `dt` (no-op for `resid = 0`): the residual of
    /// the paths whose GEMM cannot take it.
    pub(super) fn add_in_place(&self, y: u64, resid: u64, len: usize, dt: Dtype) -> Result<()> {
        if resid == 0 || len == 0 {
            return Ok(());
        }
        let n = len as i64;
        let (opcode, bits) = (0i32, dt.bit() * 0b111);
        self.launch(
            "binary",
            grid_1d(len),
            (256, 1, 1),
            0,
            args![y, y, resid, n, n, opcode, bits],
        )
    }
}

impl CudaBackend {
    /// The q8 library path up to the int32 result: `x (m, k)` quantized per row (or the
    /// prepared quantization of the same tensor reused), then cuBLASLt int8 against `w8`
    /// `(n_pad, k_pad)`. Returns the accumulators `(m_pad, n_pad)` i32 and the row scales.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn q8_accumulate(
        &self,
        xb: &Arc<Block>,
        x: u64,
        x_dt: Dtype,
        m: usize,
        k: usize,
        w8: u64,
        n_pad: usize,
        k_pad: usize,
    ) -> Result<(Arc<Block>, Arc<Block>)> {
        let m_pad = round_up(m, 16);
        let (q, sx) = self.q8_quantize(xb, x, x_dt, m, k, k_pad)?;
        let acc = self.pool.alloc(m_pad * n_pad * 4)?;
        let tune = !self.capturing.load(Ordering::Relaxed);
        // SAFETY: shapes padded to multiples of 16 as the plan requires; buffers sized above.
        unsafe {
            self.lt.matmul(
                &self.stream,
                LtKind::I8,
                acc.ptr,
                w8,
                q.ptr,
                0,
                self.lt_ws.ptr,
                n_pad,
                m_pad,
                k_pad,
                tune,
            )?
        };
        Ok((acc, sx))
    }

    /// `act(x · Wᵀ + b)` as a linear and an activation pass, or one cuBLASLt GEMM with the
    /// activation in its epilogue: ReLU (max(·, 0) commutes with the rounding to the output type),
    /// always for `GeluTanh` (the epilogue's own form), and for the erf `Gelu` where
    /// [`gelu_epilogue_on`]. The tanh form stands in for erf there as in whisper.cpp's
    /// GELU: |Δ| ≤ 4.8e-4 (at x ≈ 2.7, a quarter of an f16 step of the value), within the GPU
    /// lanes' `Op::Linear` rows (tests/linear_add.rs holds it to them).
    fn linear_then_act(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        act: Activation,
    ) -> Result<CudaTensor> {
        let (y, done) = self.linear_epi(x, w, bias, None, epilogue_act(act), self.out_dt())?;
        if done {
            return Ok(y);
        }
        // in place on the GEMM's fresh output: no second buffer, and the values stay in the
        // cache lines the GEMM just wrote (H200, stop 31: 16 parakeet clips −0.03 ms)
        self.activation_in_place(&y, act, w.lane())?;
        Ok(y)
    }

    /// `act(x · Wᵀ + b)`. q8 weights at > 8 rows on int8 (q8_mix.rs): the int8 GEMM, then one
    /// kernel that scales, adds the bias, applies `act`, writes the output and quantizes it per
    /// row for the next q8 GEMM, which finds that quantization prepared (the MLP's fc2 skips its
    /// quantize pass). Everything else: [`Self::linear_then_act`].
    pub(super) fn linear_act_fused(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        act: Activation,
    ) -> Result<CudaTensor> {
        let k = *x.shape.last().unwrap_or(&0);
        let m = x.numel() / k.max(1);
        let WeightData::Q8 {
            w8,
            scales,
            n_pad,
            k_pad,
        } = &w.data
        else {
            return self.linear_then_act(x, w, bias, act);
        };
        if m <= GEMV_MAX_M
            || k != w.k
            || bias.is_some_and(|b| b.numel() != w.n)
            || self.q8_runs_f16(w, m)
        {
            // small M (GEMV), the f16 copy's shapes (q8_mix.rs) or a shape error that
            // `linear` reports
            return self.linear_then_act(x, w, bias, act);
        }
        let n = w.n;
        let mut shape = x.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = n;
        let out = self.alloc(&shape, self.out_dt())?;
        if n == 0 {
            return Ok(out);
        }
        let bias32 = self.param(bias)?;
        let bp = self.opt(bias32.as_ref());
        let (xp, wp, sp) = (self.t(x), self.p(w8), self.p(scales));
        if let Some(cap) = self.i8gemm() {
            // our int8 GEMM writes act(…) only; the next q8 GEMM quantizes this output as it
            // reads it (from the values rounded to the output type: see i8gemm.rs)
            let (q, sx) = self.q8_quantize(&x.buf, xp, x.dtype, m, k, *k_pad)?;
            let epi = super::i8gemm::Epilogue::Act(act_code(act));
            let (y, ydt) = (out.buf.ptr, out.dtype);
            self.i8gemm_launch(cap, y, ydt, q.ptr, sx.ptr, wp, sp, bp, m, n, *k_pad, epi)?;
            Counters::bump(&self.counters.gemm_q8);
            return Ok(out);
        }
        let (acc, sx) = self.q8_accumulate(&x.buf, xp, x.dtype, m, k, wp, *n_pad, *k_pad)?;
        // the next GEMM's input layout: K = this n, padded as its weight's k_pad will be
        let (m_pad, nk_pad) = (round_up(m, 16), round_up(n, 16));
        let q = self.pool.alloc(m_pad * nk_pad)?;
        let sq = self.pool.alloc(m_pad * 4)?;
        let (y, qp, sqp, accp, sxp) = (out.buf.ptr, q.ptr, sq.ptr, acc.ptr, sx.ptr);
        let (mi, ni, ldc, kp, a, dt) = (
            m as i32,
            n as i32,
            *n_pad as i32,
            nk_pad as i32,
            act_code(act),
            out.bit(),
        );
        self.launch(
            "dequant_act_quant",
            (m_pad as u32, 1, 1),
            (256, 1, 1),
            0,
            args![y, qp, sqp, accp, sxp, sp, bp, mi, ni, ldc, kp, a, dt],
        )?;
        Counters::bump(&self.counters.gemm_q8);
        self.remember(&out.buf, m, n, PrepKind::I8 { k_pad: nk_pad }, vec![q, sq]);
        Ok(out)
    }
}
