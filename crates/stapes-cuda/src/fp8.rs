//! The q8 lane's large GEMMs on the e4m3 (FP8) tensor cores.
//!
//! Hopper runs e4m3 × e4m3 at twice the f16 rate, and cuBLASLt's FP8 kernels reach it at the
//! encoder shapes where its int8 kernels do not (H200, stop 34's probe, µs a GEMM, f16 / e4m3 /
//! int8: turbo q|k|v 21.5 / 13.3 / 28.6, fc1 30.5 / 18.4 / 36.7, fc2 28.6 / 16.5 / 46.4; 16
//! windows' fc1 431 / 263 / 619). So where the q8 lane's f16 copy (q8_mix.rs) made q8 as fast as
//! f16 and no faster, this form makes it the faster lane, as design.md asks of it.
//!
//! What it computes: the weight's q8 values (the per-row int8 re-lay, backend.rs `weight`)
//! divided by one scale `sw = amax / 448`, rounded once to e4m3 (3 mantissa bits: ≤ 2⁻⁴ of a
//! value, rms ~2.6 % on Gaussian data); the activation rounded to e4m3 as it is (scale 1,
//! saturating at ±448 — LayerNorm outputs, GELU/SiLU outputs and attention outputs of the
//! families here sit far inside it); products accumulated by the tensor cores, times `sw`, plus
//! the f16 bias (and residual) in cuBLASLt's epilogue, one rounding to f16. The error is the two
//! e4m3 roundings, ~3.7 % rms of an output against 0.6 % for the int8 form: the tolerance table's
//! `cuda-f16act` q8 rows and the FastConformer q8 family bar hold it (tests/fp8.rs, and the
//! family tests cuda_whisper, cuda_parakeet, cuda_canary).
//!
//! Over a few hundred rows on sm_90, the GEMMs without a residual run on our own `f8wg_*`
//! (kernels/i8gemm.cu, below): the same products on e4m3 warpgroup MMA, with SiLU and the next
//! GEMM's e4m3 input written by its epilogue, which cuBLASLt's cannot do.
//!
//! `STAPES_CUDA_Q8_MIX=f16` turns it off (q8_mix.rs). A device without e4m3 (below sm_89) never
//! takes it: the kernels compile empty there and [`CudaBackend::fp8_capable`] is false.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use stapes_core::{DeviceTensor, Result};

use super::{grid_1d, CudaBackend, CudaWeight, Dtype, PrepKind, WeightData};
use crate::pool::Block;

/// Conversion passes [`CudaBackend::fp8_input`] launched (a GEMM input no norm wrote in e4m3).
static PASSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `STAPES_CUDA_FEED_E4M3=0`: the `*_feeding` ops of the FastConformer's activation pass and
/// conv module write f16 only, and their FP8 GEMMs convert (same-binary A/B runs).
pub(crate) fn feed_e4m3_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_FEED_E4M3").map_or(true, |v| v.trim() != "0"))
}

/// The few-row FP8 GEMM's forms (kernels/i8gemm.cu `f8wg_*`): entry, rows of x a block (the
/// wgmma N), ring stages of 128 bytes of K.
const F8WG_FORMS: [(&str, usize, usize); 2] = [("f8wg_n72s8", 72, 8), ("f8wg_n144s6", 144, 6)];

/// Rows up to which the few-row FP8 GEMM takes a linear: a few clips' frames, where
/// cuBLASLt's fixed cost and the separate activation pass are most of the time.
const F8WG_MAX_M: usize = 512;

/// [`F8WG_MAX_M`], or `STAPES_CUDA_F8WG_MAX_M` (A/B runs past it: with a forced form,
/// `STAPES_CUDA_F8WG=n144s6`, 16 clips' plain GEMMs and fc1 run on it).
fn f8wg_max_m() -> usize {
    static M: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *M.get_or_init(|| crate::env_usize("STAPES_CUDA_F8WG_MAX_M").unwrap_or(F8WG_MAX_M))
}

/// `STAPES_CUDA_F8WG`: `1` (or unset) the few-row GEMM (`f8wg`) where it applies, its form
/// picked by shape; `0` cuBLASLt for every FP8 GEMM; a form's name (`n144s6`) forces that form.
/// The backend's starting value. H100, stop 44 call 4, one q8 clip on the device, alternating:
/// parakeet 1.775–1.782 ms off, 1.714–1.721 on; canary 2.351–2.361, 2.267.
pub(super) fn f8wg_default() -> usize {
    std::env::var("STAPES_CUDA_F8WG").map_or(1, |v| f8wg_mode(&v))
}

fn f8wg_mode(v: &str) -> usize {
    let v = v.trim();
    if v == "1" {
        return 1;
    }
    F8WG_FORMS
        .iter()
        .position(|f| f.0.strip_prefix("f8wg_") == Some(v))
        .map_or(0, |i| 2 + i)
}

/// `STAPES_CUDA_F8WG_PLAIN=0`: the few-row GEMM takes only linears with an activation pass
/// (fc1 and its SiLU), cuBLASLt the plain ones (q|k|v, pw1).
fn f8wg_plain_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_F8WG_PLAIN").map_or(true, |v| v.trim() != "0"))
}

/// `STAPES_CUDA_F8WG_SPLIT`: `0` keeps `linear_add_norms`' K slices on FP8 in cuBLASLt's
/// strided batch, `1` gives them to the few-row GEMM where it applies; the backend's starting
/// value.
pub(super) fn f8wg_split_default() -> bool {
    std::env::var("STAPES_CUDA_F8WG_SPLIT").map_or(true, |v| v.trim() != "0")
}

/// `STAPES_CUDA_HIDDEN_E4M3`: how a SiLU after cuBLASLt's FP8 GEMM reaches the next FP8 GEMM
/// where that GEMM is the hidden's only reader (`feeding_add_norms`, past the few-row GEMM's
/// rows): `lut` (or unset) the GEMM writes the pre-activation as e4m3 and `act8_e4m3` maps its
/// bytes through a table; `math` the same, each byte computed; `0` the GEMM writes the hidden
/// in f16 and `act_e4m3` reads it. The e4m3 forms round the pre-activation to e4m3 before the
/// SiLU (its rounding after it stays): fc2's output error against the exact MLP goes from
/// 0.032 to 0.037 (tests/fp8.rs, H100 stop 57), and the fixtures' encoder past 512 rows holds
/// the family bar either way (tests/cuda_parakeet.rs). H100, stop 57 call 1, 16 parakeet q8
/// clips, alternating: `0` 5.526 / 5.528 / 5.526 ms, `lut` 5.198 / 5.170 / 5.173, `math`
/// 5.417 / 5.412 / 5.383 (ncu, one block: fc1 22.5 → 20.3 µs, the SiLU pass 12.3 → 7.2 µs).
/// The backend's starting value.
pub(super) fn hidden_e4m3_default() -> u8 {
    std::env::var("STAPES_CUDA_HIDDEN_E4M3").map_or(1, |v| hidden_e4m3_mode(&v))
}

fn hidden_e4m3_mode(v: &str) -> u8 {
    match v.trim() {
        "0" | "f16" | "off" => 0,
        "math" | "2" => 2,
        _ => 1,
    }
}

/// A q8 weight re-laid for the FP8 GEMM: `(n, k)` e4m3 and the f32 it is multiplied by.
pub(crate) struct Fp8Weight {
    pub w: Arc<Block>,
    pub scale: Arc<Block>,
}

impl CudaBackend {
    /// How a SiLU after cuBLASLt's FP8 GEMM reaches the next FP8 GEMM from now on: `"0"`
    /// through an f16 hidden, `"lut"` or `"math"` an e4m3 pre-activation mapped by
    /// `act8_e4m3` (tests and A/B runs; the default comes from `STAPES_CUDA_HIDDEN_E4M3`).
    #[doc(hidden)]
    pub fn set_hidden_e4m3(&self, mode: &str) {
        self.hidden_e4m3
            .store(hidden_e4m3_mode(mode), Ordering::SeqCst);
    }

    /// Launches of `act8_e4m3` (tests prove the e4m3 hidden ran).
    #[doc(hidden)]
    pub fn hidden_e4m3_runs(&self) -> u64 {
        self.hidden_e4m3_runs.load(Ordering::SeqCst)
    }

    /// How many e4m3 conversion passes this process has launched (tests: a norm that writes the
    /// GEMM's input saves one).
    #[doc(hidden)]
    pub fn fp8_input_passes(&self) -> u64 {
        PASSES.load(Ordering::Relaxed)
    }

    /// Whether the device has e4m3 tensor cores (compute capability 8.9 and later).
    pub fn fp8_capable(&self) -> bool {
        self.arch
            .strip_prefix("compute_")
            .and_then(|v| v.parse::<u32>().ok())
            .is_some_and(|v| v >= 89)
    }

    /// Whether the GEMM of q8 weight `w` over `m` rows with output `y_dt` runs on FP8, without
    /// making the copy (the norms use it to write the e4m3 input beside their result).
    pub(crate) fn q8_runs_fp8(&self, w: &CudaWeight, m: usize, y_dt: Dtype) -> bool {
        matches!(w.data, WeightData::Q8 { .. })
            && y_dt == Dtype::F16
            && super::q8_mix::picks_fp8(m)
            && self.fp8_capable()
            && w.k.is_multiple_of(16)
            && w.n.is_multiple_of(16)
    }

    /// The e4m3 copy of q8 weight `w` when its GEMM over `m` rows runs on FP8 (made here at
    /// the first such call), `None` where it does not: f32 output, not a q8 weight, the q8
    /// rule (q8_mix.rs), the device, or a shape cuBLASLt's FP8 kernels cannot take (K and N
    /// multiples of 16). Inside a capture a missing copy cannot be made (that would record the
    /// conversion into the graph): the GEMM takes the next form and the decline is counted.
    pub(crate) fn q8_fp8_weight(
        &self,
        w: &CudaWeight,
        m: usize,
        y_dt: Dtype,
    ) -> Result<Option<Arc<Fp8Weight>>> {
        let WeightData::Q8 {
            w8, scales, k_pad, ..
        } = &w.data
        else {
            return Ok(None);
        };
        if !self.q8_runs_fp8(w, m, y_dt) {
            return Ok(None);
        }
        let mut copy = w.fp8_copy.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = copy.as_ref() {
            return Ok(Some(f.clone()));
        }
        if self.capturing.load(Ordering::Relaxed) {
            let why = "q8 linear: no e4m3 copy of the weight inside a capture (f16 copy)";
            if self.counters.decline(why) {
                tracing::debug!("{why}: ({}, {})", w.n, w.k);
            }
            return Ok(None);
        }
        let (n, k) = (w.n, w.k);
        let wb = self.pool.alloc(n * k)?;
        let sb = self.pool.alloc(4)?;
        let (yp, sp, qp, rp) = (wb.ptr, sb.ptr, self.p(w8), self.p(scales));
        let (ni, ki, kp) = (n as i32, k as i32, *k_pad as i32);
        self.launch(
            "fp8_weight_scale",
            (1, 1, 1),
            (1024, 1, 1),
            0,
            args![sp, rp, ni],
        )?;
        self.launch(
            "w8_to_fp8",
            grid_1d(n * k / 2),
            (256, 1, 1),
            0,
            args![yp, qp, rp, sp, ni, ki, kp],
        )?;
        self.fp8_made.store(yp, Ordering::Relaxed);
        let f = Arc::new(Fp8Weight { w: wb, scale: sb });
        *copy = Some(f.clone());
        Ok(Some(f))
    }

    /// `x (m, k)` (f16 or f32) as e4m3 for an FP8 GEMM: the prepared conversion of the same
    /// tensor, else converted now and remembered for the next GEMM that reads it.
    pub(crate) fn fp8_input(
        &self,
        xb: &Arc<Block>,
        x_dt: Dtype,
        m: usize,
        k: usize,
    ) -> Result<Arc<Block>> {
        if let Some(b) = self.prepared(xb, m, k, PrepKind::Fp8) {
            return Ok(b[0].clone());
        }
        let count = m * k;
        let q = self.pool.alloc(count.max(1))?;
        let (qp, xp) = (self.p(&q), self.p(xb));
        let wide = count.is_multiple_of(8) && (qp | xp).is_multiple_of(16);
        let (n, dt, wi) = (count as i64, x_dt.bit() << 1, wide as i32);
        let grid = grid_1d(if wide { count / 8 } else { count });
        self.launch("quant_fp8", grid, (256, 1, 1), 0, args![qp, xp, n, dt, wi])?;
        PASSES.fetch_add(1, Ordering::Relaxed);
        self.remember(xb, m, k, PrepKind::Fp8, vec![q.clone()]);
        Ok(q)
    }

    /// `y (m, n) f16 = x · Wᵀ + bias16 (+ resid)` (then `act` where cuBLASLt applies it) on
    /// FP8 for a q8 weight whose e4m3 copy is `f`. `Ok(None)`: cuBLASLt has no FP8 plan here
    /// (counted), the caller takes the f16 copy; else whether `act` was applied.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fp8_linear(
        &self,
        y: u64,
        xb: &Arc<Block>,
        x_dt: Dtype,
        m: usize,
        n: usize,
        k: usize,
        f: &Fp8Weight,
        bias16: u64,
        resid: u64,
        act: super::EpiAct,
    ) -> Result<Option<bool>> {
        let xq = self.fp8_input(xb, x_dt, m, k)?;
        if resid == 0
            && act == super::EpiAct::None
            && f8wg_plain_on()
            && self.f8wg_launch(y, 0, 0, &xq, f, bias16, m, n, k, 1, -1)?
        {
            return Ok(Some(false));
        }
        let tune = !self.capturing.load(Ordering::Relaxed);
        let act = if resid == 0 { act } else { super::EpiAct::None };
        // SAFETY: y (m, n) f16, x (m, k) and w (n, k) e4m3, bias16 n f16 (or 0), resid (m, n)
        // f16 (or 0), the scale one f32: all live on this stream.
        let ran = unsafe {
            self.lt.matmul_fp8(
                &self.stream,
                false,
                y,
                f.w.ptr,
                f.scale.ptr,
                self.p(&xq),
                bias16,
                resid,
                self.lt_ws.ptr,
                n,
                m,
                k,
                tune,
                act,
            )
        };
        match ran {
            Ok(()) => Ok(Some(act != super::EpiAct::None)),
            Err(e) => {
                let why = format!("linear: no cuBLASLt FP8 plan for {m}x{k}x{n} (f16 copy)");
                if self.counters.decline(&why) {
                    tracing::debug!("{why}: {e}");
                }
                Ok(None)
            }
        }
    }

    /// Whether the linear of q8 weight `w` over `m` rows of `x (m, w.k)` f16 with `bias` runs on
    /// FP8 from an f16 chain: [`CudaBackend::q8_runs_fp8`], and the bias in f16 as its epilogue
    /// takes it. The fused forms below check it before they leave an f16 result unwritten.
    pub(crate) fn fp8_chain_linear(
        &self,
        w: &CudaWeight,
        m: usize,
        bias: Option<&super::CudaTensor>,
    ) -> bool {
        self.out_dt() == Dtype::F16
            && self.q8_runs_fp8(w, m, Dtype::F16)
            && bias.is_none_or(|b| b.numel() == w.n && self.bias16_on.load(Ordering::Relaxed))
    }

    /// `LN(x)` for an FP8 GEMM to read: where the 16-byte form runs it also writes the rows as
    /// e4m3, remembered as that GEMM's prepared input (then `store16` false leaves the f16 rows
    /// unwritten). Returns the result and whether the e4m3 rows were written.
    pub(crate) fn layer_norm_e4m3(
        &self,
        x: &super::CudaTensor,
        gamma: &super::CudaTensor,
        beta: Option<&super::CudaTensor>,
        eps: f32,
        store16: bool,
    ) -> Result<(super::CudaTensor, bool)> {
        let d = x.shape.last().copied().unwrap_or(0);
        let rows = x.numel() / d.max(1);
        let y8 = self.pool.alloc((rows * d).max(1))?;
        let (h, wrote) = self.layer_norm_y8(x, gamma, beta, eps, self.p(&y8), store16)?;
        if wrote {
            self.remember(&h.buf, rows, d, PrepKind::Fp8, vec![y8]);
            if !store16 {
                h.buf.set_elided();
            }
        }
        Ok((h, wrote))
    }

    /// `y = x · Wᵀ + bias (+ resid)` for an `x` whose e4m3 form is prepared and whose f16
    /// values may be unwritten: the FP8 GEMM or nothing. False where it declined (nothing ran).
    pub(crate) fn fp8_linear_prepared(
        &self,
        y: &super::CudaTensor,
        x: &super::CudaTensor,
        w: &CudaWeight,
        bias: Option<&super::CudaTensor>,
        resid: u64,
    ) -> Result<bool> {
        let m = x.numel() / w.k.max(1);
        let Some(f) = self.q8_fp8_weight(w, m, Dtype::F16)? else {
            return Ok(false);
        };
        let b16 = bias.map_or(Ok(0), |b| self.param16(b))?;
        let epi = super::EpiAct::None;
        let ran = self.fp8_linear(self.t(y), &x.buf, x.dtype, m, w.n, w.k, &f, b16, resid, epi)?;
        if ran.is_some() {
            stapes_core::Counters::bump(&self.counters.gemm_q8);
            stapes_core::Counters::bump(&self.counters.gemm_q8_fp8);
        }
        Ok(ran.is_some())
    }
}

impl CudaBackend {
    /// [`Backend::linear_act_feeding`] where the activation is a pass of its own (cuBLASLt has
    /// no epilogue for it: SiLU) and `next`'s linear reads the result on FP8: the pass also
    /// writes the result as e4m3, remembered as that linear's prepared input, so the linear
    /// runs no conversion pass. The f16 result is written as well (same bits as
    /// `linear_act`), so any reader, and a linear that falls back to f16, sees it whole.
    /// `Ok(None)`: not this form, nothing ran. The split form of `linear_add_norms`
    /// (conformer.rs) reads f16, so its shapes take the plain form. `store16` false (the
    /// result's only reader is `next`'s FP8 GEMM: `feeding_add_norms`) leaves the f16 result
    /// unwritten where the pass runs; the flag returned says it did.
    pub(crate) fn linear_act_e4m3(
        &self,
        x: &super::CudaTensor,
        w: &CudaWeight,
        bias: Option<&super::CudaTensor>,
        act: stapes_core::Activation,
        next: &CudaWeight,
        store16: bool,
    ) -> Result<Option<(super::CudaTensor, bool)>> {
        let k = *x.shape.last().unwrap_or(&0);
        let m = x.numel() / k.max(1);
        let n = w.n;
        if super::linear_add::epilogue_act(act) != super::EpiAct::None
            || k != w.k
            || !(m * n).is_multiple_of(8)
            || !self.feeds_fp8(next, m, n)
        {
            return Ok(None);
        }
        if let Some(y) = self.f8wg_act(x, w, bias, act, m)? {
            return Ok(Some((y, false)));
        }
        if !store16 {
            if let Some(y) = self.lt_act_e4m3(x, w, bias, act, m)? {
                return Ok(Some((y, true)));
            }
        }
        // (no epilogue has this activation: the GEMM leaves it to the pass)
        let (y, _) = self.linear_epi_act(x, w, bias, act)?;
        let y8 = self.pool.alloc((m * n).max(1))?;
        let (yp, y8p) = (self.t(&y), self.p(&y8));
        if y.dtype != Dtype::F16 || (yp | y8p) % 16 != 0 {
            self.activation_in_place(&y, act, w.lane())?;
            return Ok(Some((y, false)));
        }
        let (count, a) = ((m * n) as i64, super::act_code(act));
        let y16 = if store16 { yp } else { 0 };
        self.launch(
            "act_e4m3",
            grid_1d(m * n / 8),
            (256, 1, 1),
            0,
            args![y16, yp, y8p, count, a],
        )?;
        self.remember(&y.buf, m, n, PrepKind::Fp8, vec![y8]);
        Ok(Some((y, !store16)))
    }

    /// Whether [`CudaBackend::mlp_add_fp8`] takes these operands (its checks before any copy
    /// of a weight or launch).
    #[allow(clippy::too_many_arguments)]
    fn mlp_fp8_applies(
        &self,
        x: &super::CudaTensor,
        w1: &CudaWeight,
        b1: Option<&super::CudaTensor>,
        act: super::EpiAct,
        w2: &CudaWeight,
        b2: Option<&super::CudaTensor>,
        r: &super::CudaTensor,
    ) -> bool {
        let k = *x.shape.last().unwrap_or(&0);
        let m = x.numel() / k.max(1);
        let mut shape = x.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = w2.n;
        act != super::EpiAct::None
            && x.dtype == Dtype::F16
            && k == w1.k
            && w2.k == w1.n
            && r.shape == shape
            && b1.is_none_or(|b| b.numel() == w1.n)
            && b2.is_none_or(|b| b.numel() == w2.n)
            && self.bias16_on.load(Ordering::Relaxed)
            && self.fp8_chain_linear(w1, m, b1)
            && self.fp8_chain_linear(w2, m, b2)
    }

    /// [`Backend::mlp_add`] with both GEMMs on FP8 (q8 weights, an f16 chain, an activation
    /// cuBLASLt's epilogue applies): fc1 writes the hidden straight to e4m3 with its bias and
    /// activation in the epilogue, fc2 reads it and adds its bias and the residual. The hidden
    /// is never written as f16, and fc2 needs no conversion pass. `Ok(None)` where this form
    /// does not apply (the caller composes the two ops).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mlp_add_fp8(
        &self,
        x: &super::CudaTensor,
        w1: &CudaWeight,
        b1: Option<&super::CudaTensor>,
        act: super::EpiAct,
        w2: &CudaWeight,
        b2: Option<&super::CudaTensor>,
        r: &super::CudaTensor,
    ) -> Result<Option<super::CudaTensor>> {
        if !self.mlp_fp8_applies(x, w1, b1, act, w2, b2, r) {
            return Ok(None);
        }
        let k = *x.shape.last().unwrap_or(&0);
        let m = x.numel() / k.max(1);
        let (n1, n2) = (w1.n, w2.n);
        let mut shape = x.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = n2;
        let (Some(f1), Some(f2)) = (
            self.q8_fp8_weight(w1, m, Dtype::F16)?,
            self.q8_fp8_weight(w2, m, Dtype::F16)?,
        ) else {
            return Ok(None);
        };
        let bias16 = |b: Option<&super::CudaTensor>| b.map_or(Ok(0), |b| self.param16(b));
        let (bp1, bp2) = (bias16(b1)?, bias16(b2)?);
        let r16 = self.as_dtype(r, Dtype::F16)?;
        let xq = self.fp8_input(&x.buf, x.dtype, m, k)?;
        let hidden = self.pool.alloc((m * n1).max(1))?;
        let out = self.alloc(&shape, Dtype::F16)?;
        let tune = !self.capturing.load(Ordering::Relaxed);
        let (hp, yp, rp) = (self.p(&hidden), self.t(&out), self.t(&r16));
        if !self.lt_fp8_e4m3_out("mlp", hp, &f1, &xq, bp1, n1, m, k, act)? {
            return Ok(None);
        }
        // SAFETY: hidden (m, n1) e4m3, w2 (n2, n1) e4m3 with its scale, out and r16 (m, n2)
        // f16, bias f16 or 0: all live on this stream.
        unsafe {
            self.lt.matmul_fp8(
                &self.stream,
                false,
                yp,
                f2.w.ptr,
                f2.scale.ptr,
                hp,
                bp2,
                rp,
                self.lt_ws.ptr,
                n2,
                m,
                n1,
                tune,
                super::EpiAct::None,
            )?
        };
        for _ in 0..2 {
            stapes_core::Counters::bump(&self.counters.gemm_q8);
            stapes_core::Counters::bump(&self.counters.gemm_q8_fp8);
        }
        Ok(Some(out))
    }
}

impl CudaBackend {
    /// Whether the attention of `w_qkv`'s projection of `x (B, T, d)` adds a q|k|v bias itself
    /// ([`CudaBackend::attention_adds_qkv_bias`]).
    pub(crate) fn attention_takes_qkv_bias(
        &self,
        x: &super::CudaTensor,
        w_qkv: &CudaWeight,
        p: &stapes_core::AttnParams,
    ) -> bool {
        match x.shape.as_slice() {
            [_, t, d] if *d == w_qkv.k && w_qkv.n.is_multiple_of(3) => {
                self.attention_adds_qkv_bias(*t, w_qkv.n / 3, p)
            }
            _ => false,
        }
    }

    /// [`Backend::attention_packed_add`]: where the output projection runs on FP8, the
    /// attention writes its result as e4m3 only (the warpgroup form; other forms write f16 and
    /// leave the conversion to the GEMM), which the projection then reads without a
    /// conversion pass. The attention's f16 result is never needed there.
    /// `bias`: the q|k|v projection's, which it left out (`attention_packed_impl` adds it).
    pub(crate) fn attention_packed_add_fp8(
        &self,
        qkv: &super::CudaTensor,
        bias: Option<&super::CudaTensor>,
        p: &stapes_core::AttnParams,
        wo: &CudaWeight,
        bo: Option<&super::CudaTensor>,
        r: &super::CudaTensor,
    ) -> Result<super::CudaTensor> {
        use stapes_core::Backend;
        let s = &qkv.shape;
        let (c, m) = match s.as_slice() {
            [b, t, c3] => (c3 / 3, b * t),
            _ => (0, 0),
        };
        let fp8 = c > 0
            && wo.k == c
            && r.dtype == Dtype::F16
            && r.numel() == m * wo.n
            && self.fp8_chain_linear(wo, m, bo);
        let plain = |be: &Self| be.attention_packed_impl(qkv, p, 0, false, bias);
        if !fp8 {
            return self.linear_add(&plain(self)?.0, wo, bo, r);
        }
        let o8 = self.pool.alloc(m * c)?;
        let (a, wrote) = self.attention_packed_impl(qkv, p, self.p(&o8), true, bias)?;
        if !wrote {
            // a form that writes f16 only: `a` is whole
            return self.linear_add(&a, wo, bo, r);
        }
        self.remember(&a.buf, m, c, PrepKind::Fp8, vec![o8]);
        let mut shape = r.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = wo.n;
        let out = self.alloc(&shape, Dtype::F16)?;
        if self.fp8_linear_prepared(&out, &a, wo, bo, self.t(r))? {
            return Ok(out);
        }
        // no FP8 plan after all: the attention again, with its f16 result
        self.linear_add(&plain(self)?.0, wo, bo, r)
    }

    /// [`Backend::layer_norm_attention_add`] where the q|k|v and output projections run on
    /// FP8: the norm in e4m3 only, q|k|v without its bias, which the attention adds
    /// ([`CudaBackend::attention_packed_impl`]), the attention in e4m3 only for the output
    /// projection (`Ok(None)`: not this form, nothing ran).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn layer_norm_attention_add_fp8(
        &self,
        x: &super::CudaTensor,
        gamma: &super::CudaTensor,
        beta: Option<&super::CudaTensor>,
        eps: f32,
        w_qkv: &CudaWeight,
        b_qkv: Option<&super::CudaTensor>,
        p: &stapes_core::AttnParams,
        wo: &CudaWeight,
        bo: Option<&super::CudaTensor>,
    ) -> Result<Option<super::CudaTensor>> {
        let rows = x.numel() / w_qkv.k.max(1);
        if !w_qkv.n.is_multiple_of(3)
            || wo.k != w_qkv.n / 3
            || b_qkv.is_some_and(|b| b.numel() != w_qkv.n)
            || !self.fp8_chain_linear(wo, rows, bo)
            || (b_qkv.is_some() && !self.attention_takes_qkv_bias(x, w_qkv, p))
        {
            // (the composed ops keep the bias in the GEMM: a separate add would cost a pass)
            return Ok(None);
        }
        let Some(qkv) = self.layer_norm_linear_fp8(x, gamma, beta, eps, w_qkv, None)? else {
            return Ok(None);
        };
        Ok(Some(
            self.attention_packed_add_fp8(&qkv, b_qkv, p, wo, bo, x)?,
        ))
    }

    /// [`Backend::layer_norm_linear`] where the linear runs on FP8: the norm writes its rows
    /// as e4m3 only and the GEMM reads them (`Ok(None)`: not this form, nothing ran).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn layer_norm_linear_fp8(
        &self,
        x: &super::CudaTensor,
        gamma: &super::CudaTensor,
        beta: Option<&super::CudaTensor>,
        eps: f32,
        w: &CudaWeight,
        bias: Option<&super::CudaTensor>,
    ) -> Result<Option<super::CudaTensor>> {
        use stapes_core::Backend;
        let d = x.shape.last().copied().unwrap_or(0);
        let rows = x.numel() / d.max(1);
        if x.dtype != Dtype::F16 || w.k != d || !self.fp8_chain_linear(w, rows, bias) {
            return Ok(None);
        }
        let (h, wrote) = self.layer_norm_e4m3(x, gamma, beta, eps, false)?;
        if !wrote {
            return Ok(Some(self.linear(&h, w, bias)?));
        }
        let mut shape = x.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = w.n;
        let out = self.alloc(&shape, Dtype::F16)?;
        if self.fp8_linear_prepared(&out, &h, w, bias, 0)? {
            return Ok(Some(out));
        }
        let h = self.layer_norm_y8(x, gamma, beta, eps, 0, true)?.0;
        Ok(Some(self.linear(&h, w, bias)?))
    }

    /// [`Backend::layer_norm_mlp_add`] where the MLP runs on FP8 ([`CudaBackend::mlp_add_fp8`]):
    /// the norm writes its rows as e4m3 only (`Ok(None)`: not this form, nothing ran).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn layer_norm_mlp_add_fp8(
        &self,
        x: &super::CudaTensor,
        gamma: &super::CudaTensor,
        beta: Option<&super::CudaTensor>,
        eps: f32,
        w1: &CudaWeight,
        b1: Option<&super::CudaTensor>,
        act: stapes_core::Activation,
        w2: &CudaWeight,
        b2: Option<&super::CudaTensor>,
    ) -> Result<Option<super::CudaTensor>> {
        use stapes_core::Backend;
        let epi = super::linear_add::epilogue_act(act);
        if !self.mlp_fp8_applies(x, w1, b1, epi, w2, b2, x) {
            return Ok(None);
        }
        let (h, wrote) = self.layer_norm_e4m3(x, gamma, beta, eps, false)?;
        if !wrote {
            return Ok(Some(self.mlp_add(&h, w1, b1, act, w2, b2, x)?));
        }
        // `None`: no FP8 plan after all, and `h` unwritten: the caller composes from the start
        self.mlp_add_fp8(&h, w1, b1, epi, w2, b2, x)
    }
}

impl CudaBackend {
    /// How the few-row FP8 GEMM is used from now on: `"0"` not at all, `"1"` where it applies
    /// with the form picked by shape, a form's name (`"n144s6"`) that form (tests and A/B runs;
    /// the default comes from `STAPES_CUDA_F8WG`).
    #[doc(hidden)]
    pub fn set_f8wg(&self, mode: &str) {
        self.f8wg.store(f8wg_mode(mode), Ordering::SeqCst);
    }

    /// Whether the few-row FP8 GEMM takes `linear_add_norms`' K slices from now on (tests and
    /// A/B runs; the default comes from `STAPES_CUDA_F8WG_SPLIT`).
    #[doc(hidden)]
    pub fn set_f8wg_split(&self, on: bool) {
        self.f8wg_split.store(on, Ordering::SeqCst);
    }

    /// Launches of the few-row FP8 GEMM (tests prove it ran).
    #[doc(hidden)]
    pub fn f8wg_runs(&self) -> u64 {
        self.f8wg_runs.load(Ordering::SeqCst)
    }

    /// The few-row GEMM's form for `m` rows of an `(n, k)` weight in `splits` K slices: entry,
    /// rows a block, stages; `None` where it does not apply (it needs sm_90's warpgroup MMA:
    /// i8gemm.cu is built for compute_90a there and its entries are empty elsewhere). By shape:
    /// 72 rows a block, and a grid of at most one block a SM.
    fn f8wg_form(
        &self,
        m: usize,
        n: usize,
        k: usize,
        splits: usize,
    ) -> Option<(&'static str, usize, usize)> {
        let mode = self.f8wg.load(Ordering::Relaxed);
        if mode == 0
            || self.arch != "compute_90"
            || m == 0
            || m > f8wg_max_m()
            || splits == 0
            || k == 0
            || !k.is_multiple_of(128 * splits)
            || !n.is_multiple_of(64)
        {
            return None;
        }
        let form = F8WG_FORMS.get(mode.saturating_sub(2)).copied()?;
        // by shape only grids of one wave (a block a SM: its ring takes ~140 KiB), the shapes
        // it was measured on; forced forms take any grid (tests)
        let blocks = (n / 64) * m.div_ceil(form.1) * splits;
        (mode >= 2 || blocks <= self.sm_count()).then_some(form)
    }

    /// `y (m, n) f16 = act(x · Wᵀ · sw + bias16)` (act an `act_apply` code, -1 none) on the
    /// few-row FP8 GEMM, and where `y8` is not 0 the stored values as e4m3; or, where `part` is
    /// not 0, the products of K slice z times sw into `part (splits, m, n)` f32 (no bias, no
    /// activation). False where it does not apply (nothing ran).
    #[allow(clippy::too_many_arguments)]
    fn f8wg_launch(
        &self,
        y: u64,
        y8: u64,
        part: u64,
        xq: &Arc<Block>,
        f: &Fp8Weight,
        bias16: u64,
        m: usize,
        n: usize,
        k: usize,
        splits: usize,
        act: i32,
    ) -> Result<bool> {
        let Some((name, nt, stages)) = self.f8wg_form(m, n, k, splits) else {
            return Ok(false);
        };
        // TMA wants 16-byte aligned bases; y and part leave in 16-byte pieces
        if !(xq.ptr | f.w.ptr | y | y8 | part).is_multiple_of(16) {
            return Ok(false);
        }
        let tw = super::i8gemm::tma_map(f.w.ptr, n, k, 64)?;
        let tx = super::i8gemm::tma_map(xq.ptr, m, k, nt as u32)?;
        let smem = stages * (64 + nt) * 128 + 1024 + 256;
        self.allow_dyn_smem(name, smem)?;
        let grid = ((n / 64) as u32, m.div_ceil(nt) as u32, splits as u32);
        let ks = k / splits;
        // the weight streams before the PDL wait unless the kernel ahead may be its conversion
        let early = (self.fp8_made.swap(0, Ordering::Relaxed) != f.w.ptr) as i32;
        let (mi, ni, ki, sp) = (m as i32, n as i32, ks as i32, f.scale.ptr);
        self.launch(
            name,
            grid,
            (160, 1, 1),
            smem as u32,
            args![tw, tx, y, y8, part, sp, bias16, mi, ni, ki, act, early],
        )?;
        self.f8wg_runs.fetch_add(1, Ordering::SeqCst);
        Ok(true)
    }

    /// `linear_add_norms`' K slices on the few-row FP8 GEMM: `part (splits, m, n)` f32 = the
    /// products of each slice of `x8 (m, k)` e4m3 and the weight's e4m3 copy, times its scale
    /// (what cuBLASLt's strided batch leaves for `splitk_add_ln16`). False where it does not
    /// apply (nothing ran).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn f8wg_split(
        &self,
        part: u64,
        x8: &Arc<Block>,
        f: &Fp8Weight,
        m: usize,
        n: usize,
        k: usize,
        splits: usize,
    ) -> Result<bool> {
        if !self.f8wg_split.load(Ordering::Relaxed) || part == 0 {
            return Ok(false);
        }
        self.f8wg_launch(0, 0, part, x8, f, 0, m, n, k, splits, -1)
    }

    /// `h8 (m, n)` e4m3 = `act(x8 · Wᵀ · scale + bias16)` on cuBLASLt's FP8 GEMM with an e4m3
    /// output, for `x8 (m, k)` e4m3 and the weight's e4m3 copy `f`. False where cuBLASLt has no
    /// such plan (the decline counted under `op`): nothing ran.
    #[allow(clippy::too_many_arguments)]
    fn lt_fp8_e4m3_out(
        &self,
        op: &str,
        h8: u64,
        f: &Fp8Weight,
        x8: &Arc<Block>,
        bias16: u64,
        n: usize,
        m: usize,
        k: usize,
        act: super::EpiAct,
    ) -> Result<bool> {
        let tune = !self.capturing.load(Ordering::Relaxed);
        // SAFETY: h8 (m, n) e4m3, x8 (m, k) and w (n, k) e4m3 with its scale, bias16 n f16 (or
        // 0): all live on this stream.
        let ran = unsafe {
            self.lt.matmul_fp8(
                &self.stream,
                true,
                h8,
                f.w.ptr,
                f.scale.ptr,
                self.p(x8),
                bias16,
                0,
                self.lt_ws.ptr,
                n,
                m,
                k,
                tune,
                act,
            )
        };
        if let Err(e) = ran {
            let why = format!("{op}: no cuBLASLt FP8 plan with an e4m3 output for {m}x{k}x{n}");
            if self.counters.decline(&why) {
                tracing::debug!("{why}: {e}");
            }
            return Ok(false);
        }
        Ok(true)
    }

    /// [`CudaBackend::linear_act_e4m3`] for a result whose only reader is the next FP8 GEMM,
    /// on cuBLASLt: its epilogue writes the pre-activation (bias added) as e4m3, and
    /// `act8_e4m3` maps those bytes in place to the e4m3 of the activation, the next GEMM's
    /// prepared input. The f16 result is never written: half the GEMM's output bytes and a pass
    /// that reads 1 byte a value where `act_e4m3` reads 2. `Ok(None)`: switched off, not this
    /// form, or no cuBLASLt plan (counted); nothing ran.
    fn lt_act_e4m3(
        &self,
        x: &super::CudaTensor,
        w: &CudaWeight,
        bias: Option<&super::CudaTensor>,
        act: stapes_core::Activation,
        m: usize,
    ) -> Result<Option<super::CudaTensor>> {
        let (n, k) = (w.n, w.k);
        let mode = self.hidden_e4m3.load(Ordering::Relaxed);
        if mode == 0 || !(m * n).is_multiple_of(16) || !self.fp8_chain_linear(w, m, bias) {
            return Ok(None);
        }
        let Some(f) = self.q8_fp8_weight(w, m, Dtype::F16)? else {
            return Ok(None);
        };
        let b16 = bias.map_or(Ok(0), |b| self.param16(b))?;
        let xq = self.fp8_input(&x.buf, x.dtype, m, k)?;
        let h8 = self.pool.alloc((m * n).max(1))?;
        let hp = self.p(&h8);
        if !hp.is_multiple_of(16) {
            return Ok(None);
        }
        if !self.lt_fp8_e4m3_out("linear", hp, &f, &xq, b16, n, m, k, super::EpiAct::None)? {
            return Ok(None);
        }
        let (count, a, lut) = ((m * n) as i64, super::act_code(act), (mode == 1) as i32);
        // one resident wave (kernels/fp8.cu says why)
        let wave = self.resident_blocks("act8_e4m3", 256, 0)? * self.sm_count();
        let (blocks, ..) = grid_1d(m * n / 16);
        self.launch(
            "act8_e4m3",
            (blocks.min(wave as u32), 1, 1),
            (256, 1, 1),
            0,
            args![hp, hp, count, a, lut],
        )?;
        self.hidden_e4m3_runs.fetch_add(1, Ordering::SeqCst);
        stapes_core::Counters::bump(&self.counters.gemm_q8);
        stapes_core::Counters::bump(&self.counters.gemm_q8_fp8);
        let mut shape = x.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = n;
        let y = self.alloc(&shape, Dtype::F16)?;
        // never written: any read but the next GEMM's (through the prepared rows) is an error
        y.buf.set_elided();
        self.remember(&y.buf, m, n, PrepKind::Fp8, vec![h8]);
        Ok(Some(y))
    }

    /// [`CudaBackend::linear_act_e4m3`] on the few-row FP8 GEMM: the activation in its
    /// epilogue, the f16 result and its e4m3 bytes written by the GEMM itself (no pass after
    /// it). `Ok(None)`: not this form, nothing ran.
    fn f8wg_act(
        &self,
        x: &super::CudaTensor,
        w: &CudaWeight,
        bias: Option<&super::CudaTensor>,
        act: stapes_core::Activation,
        m: usize,
    ) -> Result<Option<super::CudaTensor>> {
        let (n, k) = (w.n, w.k);
        // the kernel's epilogue has SiLU (and no activation) compiled in
        if act != stapes_core::Activation::Silu
            || self.f8wg_form(m, n, k, 1).is_none()
            || !self.fp8_chain_linear(w, m, bias)
        {
            return Ok(None);
        }
        let Some(f) = self.q8_fp8_weight(w, m, Dtype::F16)? else {
            return Ok(None);
        };
        let b16 = bias.map_or(Ok(0), |b| self.param16(b))?;
        let xq = self.fp8_input(&x.buf, x.dtype, m, k)?;
        let mut shape = x.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = n;
        let y = self.alloc(&shape, Dtype::F16)?;
        let y8 = self.pool.alloc((m * n).max(1))?;
        let code = super::act_code(act);
        if !self.f8wg_launch(self.t(&y), self.p(&y8), 0, &xq, &f, b16, m, n, k, 1, code)? {
            return Ok(None);
        }
        stapes_core::Counters::bump(&self.counters.gemm_q8);
        stapes_core::Counters::bump(&self.counters.gemm_q8_fp8);
        self.remember(&y.buf, m, n, PrepKind::Fp8, vec![y8]);
        Ok(Some(y))
    }
}
