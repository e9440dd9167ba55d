//! The q8 lane's large GEMMs: the int8 tensor cores, or the f16 tensor cores on an f16 copy of
//! the q8 weight's values.
//!
//! cuBLASLt's int8 path (quantize the activation, IMMA to i32, a scaling epilogue pass) loses to
//! its f16 GEMM on the encoder shapes on the H200 (i8gemm round 5 in the perf ledger: turbo
//! q|k|v 0.0307 vs 0.0233 ms, fc1 0.0352 vs 0.0305, out 0.0137 vs 0.0100) and wins only where K
//! is long (turbo fc2, K 5120: 0.0233 vs 0.0286). Whole encoders (ledger, stop 13 call 1): every
//! large q8 GEMM on f16 is fastest for one window or clip (turbo 5.67 ms vs 5.96 with fc2 on
//! int8 and 6.77 all-int8); the long-K rule wins only for 16 windows (76.4 vs 80.4 ms), and a
//! rule that looked at M would make a batched window differ from the same window alone. So by
//! default a q8 weight multiplying more than [`GEMV_MAX_M`] rows runs as f16: its values are the
//! lane's (int8 × row scale, rounded once more to f16, 2⁻¹¹ relative, far inside the int8
//! step) and the activation is not quantized, so such a GEMM is at least as accurate as the int8
//! one. The f16 copy is made on the device at the weight's first such use and kept beside the
//! int8 rows, which the decoder-step GEMVs keep reading: those matrices take 3 bytes a value
//! instead of 1 (ARCHITECTURE, "The CUDA home").
//!
//! On a device with e4m3 tensor cores (sm_89+) the default goes one step further: a large q8
//! GEMM with an f16 output runs on FP8 over an e4m3 copy of the weight (fp8.rs), and the f16
//! copy stays the form for the rest (f32 outputs, shapes cuBLASLt's FP8 kernels refuse, the
//! split-K norms of conformer.rs).
//!
//! `STAPES_CUDA_Q8_MIX=0` keeps every q8 GEMM on int8, `shape` puts K ≥ [`INT8_MIN_K`] on int8
//! and the rest on f16, `f16` every large q8 GEMM on f16; unset or `fp8`: FP8 where it can run,
//! else f16.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use stapes_core::Result;

use super::{grid_1d, CudaBackend, CudaWeight, WeightData, GEMV_MAX_M};
use crate::pool::Block;

/// Under [`Q8Mix::Shape`], from this K on a q8 GEMM stays on the int8 tensor cores.
pub(crate) const INT8_MIN_K: usize = 4096;

/// 0 unset (read the variable), 1 int8 only, 2 the K rule, 3 f16 for every large GEMM, 4 FP8
/// where it runs, else f16.
static MODE: AtomicU8 = AtomicU8::new(0);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Q8Mix {
    /// Every q8 GEMM on int8 (the form before the mix).
    Int8,
    /// int8 from [`INT8_MIN_K`] on, f16 below.
    Shape,
    /// Every q8 GEMM above the GEMV size on f16.
    F16,
    /// FP8 for the large q8 GEMMs with f16 outputs where the device has e4m3 tensor cores, the
    /// f16 copy for the rest (the default).
    Fp8,
}

fn code(mix: Q8Mix) -> u8 {
    match mix {
        Q8Mix::Int8 => 1,
        Q8Mix::Shape => 2,
        Q8Mix::F16 => 3,
        Q8Mix::Fp8 => 4,
    }
}

fn mode() -> Q8Mix {
    match MODE.load(Ordering::Relaxed) {
        1 => Q8Mix::Int8,
        2 => Q8Mix::Shape,
        3 => Q8Mix::F16,
        4 => Q8Mix::Fp8,
        _ => {
            let mix = match std::env::var("STAPES_CUDA_Q8_MIX")
                .as_deref()
                .map(str::trim)
            {
                Ok("0") => Q8Mix::Int8,
                Ok("shape") => Q8Mix::Shape,
                Ok("f16") => Q8Mix::F16,
                _ => Q8Mix::Fp8,
            };
            MODE.store(code(mix), Ordering::Relaxed);
            mix
        }
    }
}

/// Whether a q8 GEMM of `m` rows against a `(n, k)` weight runs on the f16 copy.
fn picks_f16(m: usize, k: usize) -> bool {
    m > GEMV_MAX_M
        && match mode() {
            Q8Mix::Int8 => false,
            Q8Mix::Shape => k < INT8_MIN_K,
            Q8Mix::F16 | Q8Mix::Fp8 => true,
        }
}

/// Whether a q8 GEMM of `m` rows goes to FP8 first (where the device and the shape allow).
pub(crate) fn picks_fp8(m: usize) -> bool {
    m > GEMV_MAX_M && mode() == Q8Mix::Fp8
}

impl CudaBackend {
    /// Set the q8 GEMM rule for every backend of this process (same-binary A/B runs and tests;
    /// the default comes from `STAPES_CUDA_Q8_MIX`). Weights keep the f16 copies already made.
    #[doc(hidden)]
    pub fn set_q8_mix(&self, mix: Q8Mix) {
        MODE.store(code(mix), Ordering::Relaxed);
    }

    /// Whether `w` times `m` rows will run as an f16 GEMM (q8 weights only), without making the
    /// copy: the fused norms use it to skip quantizing an input nobody will read as int8.
    pub(crate) fn q8_runs_f16(&self, w: &CudaWeight, m: usize) -> bool {
        matches!(w.data, WeightData::Q8 { .. }) && picks_f16(m, w.k)
    }

    /// The f16 copy of q8 weight `w` when its GEMM over `m` rows runs on f16 (made here at the
    /// first such call), `None` for the int8 path. Inside a capture a missing copy cannot be
    /// made (that would record the conversion into the graph): the GEMM stays int8 and the
    /// decline is counted. Chains run eagerly before their capture, so this only happens to a
    /// weight first used inside one.
    pub(crate) fn q8_f16_weight(&self, w: &CudaWeight, m: usize) -> Result<Option<Arc<Block>>> {
        let WeightData::Q8 {
            w8, scales, k_pad, ..
        } = &w.data
        else {
            return Ok(None);
        };
        if !picks_f16(m, w.k) {
            return Ok(None);
        }
        let mut copy = w.f16_copy.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = copy.as_ref() {
            return Ok(Some(b.clone()));
        }
        if self.capturing.load(Ordering::Relaxed) {
            let why = "q8 linear: no f16 copy of the weight inside a capture (int8 GEMM)";
            if self.counters.decline(why) {
                tracing::debug!("{why}: ({}, {})", w.n, w.k);
            }
            return Ok(None);
        }
        let (n, k) = (w.n, w.k);
        let b = self.pool.alloc(n.max(1) * k.max(1) * 2)?;
        let (yp, wp, sp) = (b.ptr, self.p(w8), self.p(scales));
        let (ni, ki, kp) = (n as i32, k as i32, *k_pad as i32);
        self.launch(
            "dequant_w8_f16",
            grid_1d(n * k),
            (256, 1, 1),
            0,
            args![yp, wp, sp, ni, ki, kp],
        )?;
        *copy = Some(b.clone());
        Ok(Some(b))
    }
}
