//! Our own int8 tensor-core GEMM for the q8 lane (`kernels/i8gemm.cu`): the activations'
//! per-row int8 quantization (as before), then one kernel that runs `mma.sync` m16n8k32 over
//! the int8 activations and the re-laid int8 weight and applies the scaling epilogue (row scale
//! × column scale, bias, residual or activation) to the int32 accumulators in registers. It
//! replaces cuBLASLt int8 → i32 in memory → `dequant_epilogue*` / `dequant_act_quant`, whose
//! i32 round trip and extra launch cost more than int8 saved (ledger, "CUDA home: encoder GEMM
//! epilogues").
//!
//! Same outputs as the library path: int32 sums are exact either way and the epilogue uses the
//! same float operations in the same order (see the .cu header), so `linear` / `linear_add` are
//! bit-identical. `linear_act` differs in one place: the library path quantizes the next GEMM's
//! input from the f32 activation values, this path writes the output only and the next GEMM
//! quantizes it as it reads it, i.e. from the values rounded to the output type (identical with
//! f32 activations; with f16 activations the int8 codes can move by one step).
//!
//! On sm_90 the default forms are `tma_n128s6` and `tma_p128s3x2` (by grid): wgmma fed by TMA
//! (410-870 TOP/s at the encoder shapes on the H200, stop 14, against 300-400 for mma.sync;
//! 576-687 with the second at the large grids, stop 20), still below cuBLASLt's f16 but at
//! K = 5120 and 16 windows' fc1, which is why the q8 lane's GEMMs run on its f16 copy by default
//! (q8_mix.rs).
//!
//! Switch: `STAPES_CUDA_I8GEMM=1` turns it on (off by default);
//! `STAPES_CUDA_I8GEMM_TILE=bm64_k64s3|bm128_k64s3|bm64_k128s4|bm128_k128s3|bm128_k64s3_w64`
//! (each also with `_se`: the epilogue staged through shared memory), `bm32_k64s4`,
//! `bm128_n256_k64s3_se`, `bm128_n256_k128s3_se`, `tma_n128s6`, `tma_n256s4` or `tma_p128s3x2`
//! forces a tile variant (default by shape: [`variant_for_tma`] on sm_90, else
//! [`variant_for_mma`]).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use stapes_core::Result;

use super::{round_up, CudaBackend, Dtype, PrepKind};
use crate::pool::Block;

/// 0: not read yet, 1 off, 2 on.
static SWITCH: AtomicU8 = AtomicU8::new(0);
/// 0: by shape, else 1 + the forced index into [`VARIANTS`]; 255: not read yet.
static VARIANT: AtomicU8 = AtomicU8::new(255);

/// The kernel's compiled forms: (entry point, block rows, block columns, K bytes per stage,
/// stages, threads); `_w64`: 2 x 2 warps of 64 columns (else 2 x 4 of 32; `_n256`: 2 x 4 of
/// 64); `_se`: the epilogue staged through shared memory for row-wide stores. All give the same
/// bits (the int32 sums are exact and the epilogue is per element). `tma_*`: the warpgroup-MMA kernel fed by TMA (sm_90a; a producer warpgroup and 2 of 64
/// rows, 384 threads), only where [`I8Gemm::wg`] holds.
const VARIANTS: [(&str, usize, usize, usize, usize, u32); 16] = [
    ("i8gemm_bm64_k64s3", 64, 128, 64, 3, 256),
    ("i8gemm_bm128_k64s3", 128, 128, 64, 3, 256),
    ("i8gemm_bm64_k128s4", 64, 128, 128, 4, 256),
    ("i8gemm_bm128_k128s3", 128, 128, 128, 3, 256),
    ("i8gemm_bm128_k64s3_w64", 128, 128, 64, 3, 128),
    ("i8gemm_bm64_k64s3_se", 64, 128, 64, 3, 256),
    ("i8gemm_bm128_k64s3_se", 128, 128, 64, 3, 256),
    ("i8gemm_bm64_k128s4_se", 64, 128, 128, 4, 256),
    ("i8gemm_bm128_k128s3_se", 128, 128, 128, 3, 256),
    ("i8gemm_bm128_k64s3_w64_se", 128, 128, 64, 3, 128),
    ("i8gemm_bm32_k64s4", 32, 128, 64, 4, 256),
    ("i8gemm_bm128_n256_k64s3_se", 128, 256, 64, 3, 256),
    ("i8gemm_bm128_n256_k128s3_se", 128, 256, 128, 3, 256),
    ("i8gemm_tma_n128s6", 128, 128, 128, 6, 384),
    ("i8gemm_tma_n256s4", 128, 256, 128, 4, 384),
    ("i8gemm_tma_p128s3x2", 128, 128, 128, 3, 288),
];

/// The first `tma_*` entry of [`VARIANTS`].
const FIRST_TMA: usize = 13;

/// Names for `STAPES_CUDA_I8GEMM_TILE` and the benchmark: the entry point without `i8gemm_`.
fn variant_names() -> Vec<&'static str> {
    VARIANTS
        .iter()
        .map(|v| v.0.trim_start_matches("i8gemm_"))
        .collect()
}

fn switch_on() -> bool {
    match SWITCH.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var("STAPES_CUDA_I8GEMM").is_ok_and(|v| v.trim() == "1");
            SWITCH.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        v => v == 2,
    }
}

fn forced_variant() -> u8 {
    match VARIANT.load(Ordering::Relaxed) {
        255 => {
            let want = std::env::var("STAPES_CUDA_I8GEMM_TILE").unwrap_or_default();
            let v = variant_names()
                .iter()
                .position(|n| *n == want.trim())
                .map_or(0, |i| i as u8 + 1);
            VARIANT.store(v, Ordering::Relaxed);
            v
        }
        v => v,
    }
}

/// Launches of the kernel in this process (tests check the path was really taken).
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// What the kernel does with `acc · sx · sw (+ bias)` (its `mode` argument).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Epilogue {
    /// `+ bias`, written as is.
    Scale,
    /// `+ bias + resid`, `resid` (m, n) of the output's type.
    Add(u64),
    /// `act(… + bias)`, the activation code of `act_code`.
    Act(i32),
}

/// The capability: the kernel needs `mma.sync` m16n8k32 s8 and `cp.async` (sm_80+); its `tma_*`
/// forms need `wgmma` and TMA (sm_90, whose i8gemm.cu is compiled for compute_90a: kernels.rs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct I8Gemm {
    wg: bool,
}

impl I8Gemm {
    /// `arch` as NVRTC names it (`compute_90`); `None` below sm_80.
    fn new(arch: &str) -> Option<Self> {
        let v: u32 = arch.strip_prefix("compute_")?.parse().ok()?;
        (v >= 80).then_some(Self { wg: v == 90 })
    }
}

/// The variant for a shape: the TMA-fed warpgroup kernel where the device has it; else, from the H200
/// round-5 bench (ledger, "CUDA home: our int8 GEMM"), 128 x 128 blocks with 128 K bytes a
/// stage where they fill the 132 SMs once, else 64-row blocks. A forced `tma_*` variant on a
/// device without it takes the shape rule.
fn variant_for(cap: I8Gemm, m: usize, n: usize) -> usize {
    match forced_variant() {
        v if v as usize > FIRST_TMA && !cap.wg => variant_for_mma(m, n),
        0 if cap.wg => variant_for_tma(m, n),
        0 => variant_for_mma(m, n),
        v => (v as usize - 1).min(VARIANTS.len() - 1),
    }
}

/// The TMA form by grid (H200, stop 20 call 1): two resident blocks of three stages
/// (`tma_p128s3x2`) where the 128 x 128 tiles are more than one wave, else one block of six
/// (`tma_n128s6`), whose deeper ring wins when every tile is resident at once.
fn variant_for_tma(m: usize, n: usize) -> usize {
    if m.div_ceil(128) * n.div_ceil(128) > 132 {
        FIRST_TMA + 2
    } else {
        FIRST_TMA
    }
}

fn variant_for_mma(m: usize, n: usize) -> usize {
    if m.div_ceil(128) * n.div_ceil(128) >= 132 {
        8 // bm128_k128s3_se
    } else {
        7 // bm64_k128s4_se
    }
}

/// The TMA description of an 8-bit operand `(rows, k_pad)` (int8 here, e4m3 for fp8.rs's
/// `f8wg`), row-major at `ptr`: boxes of 128 bytes of K by `box_rows` rows (the kernels' stage
/// tiles).
pub(super) fn tma_map(
    ptr: u64,
    rows: usize,
    k_pad: usize,
    box_rows: u32,
) -> Result<cudarc::driver::sys::CUtensorMap> {
    use cudarc::driver::sys::CUtensorMapDataType as T;
    super::tma::tiled_map(
        T::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        ptr,
        &[k_pad as u64, rows as u64],
        &[k_pad as u64],
        &[128, box_rows],
    )
}

impl CudaBackend {
    /// Our int8 GEMM where it can run and is switched on.
    pub(crate) fn i8gemm(&self) -> Option<I8Gemm> {
        if !switch_on() {
            return None;
        }
        I8Gemm::new(self.arch)
    }

    /// Turn the int8 GEMM on or off for every backend of this process (same-binary A/B runs and
    /// tests; the default comes from `STAPES_CUDA_I8GEMM`).
    #[doc(hidden)]
    pub fn set_i8gemm(&self, on: bool) {
        SWITCH.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    }

    /// How many times this process launched the int8 GEMM kernel (for tests).
    #[doc(hidden)]
    pub fn i8gemm_launches(&self) -> u64 {
        LAUNCHES.load(Ordering::Relaxed)
    }

    /// The kernel's tile variants, by the names `STAPES_CUDA_I8GEMM_TILE` takes.
    #[doc(hidden)]
    pub fn i8gemm_variants(&self) -> Vec<&'static str> {
        variant_names()
    }

    /// Force a kernel variant (1 + its index in [`CudaBackend::i8gemm_variants`]; 0: by shape),
    /// for the benchmark and tests.
    #[doc(hidden)]
    pub fn set_i8gemm_variant(&self, v: u8) {
        let v = if (v as usize) <= VARIANTS.len() { v } else { 0 };
        VARIANT.store(v, Ordering::Relaxed);
    }

    /// `x (m, k)` quantized per row to int8 `(m_pad, k_pad)` with f32 row scales `(m_pad)`, or
    /// the prepared quantization of the same tensor reused.
    pub(super) fn q8_quantize(
        &self,
        xb: &Arc<Block>,
        x: u64,
        x_dt: Dtype,
        m: usize,
        k: usize,
        k_pad: usize,
    ) -> Result<(Arc<Block>, Arc<Block>)> {
        let m_pad = round_up(m, 16);
        let kind = PrepKind::I8 { k_pad };
        if let Some(b) = self.prepared(xb, m, k, kind) {
            return Ok((b[0].clone(), b[1].clone()));
        }
        let q = self.pool.alloc(m_pad * k_pad)?;
        let sx = self.pool.alloc(m_pad * 4)?;
        let (qp, sxp, xdt) = (q.ptr, sx.ptr, x_dt.bit() << 1);
        let (mi, ki, kp) = (m as i32, k as i32, k_pad as i32);
        self.launch(
            "quantize_rows_i8",
            ((m_pad / 8) as u32, 1, 1),
            (256, 1, 1),
            0,
            args![qp, sxp, x, mi, ki, kp, xdt],
        )?;
        self.remember(xb, m, k, kind, vec![q.clone(), sx.clone()]);
        Ok((q, sx))
    }

    /// `y (m, n) = epilogue(q (m, k_pad) · w8 (n, k_pad)ᵀ · sx[row] · sw[col])` in one launch.
    /// `q`, `w8` int8 with zero padding up to `k_pad` (a multiple of 16); `sx` (≥ m) and `sw`
    /// (≥ n) f32; `bias` (n) f32 or 0; `y` (m, n) of `y_dt`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn i8gemm_launch(
        &self,
        cap: I8Gemm,
        y: u64,
        y_dt: Dtype,
        q: u64,
        sx: u64,
        w8: u64,
        sw: u64,
        bias: u64,
        m: usize,
        n: usize,
        k_pad: usize,
        epi: Epilogue,
    ) -> Result<()> {
        if m == 0 || n == 0 {
            return Ok(());
        }
        let (mode, resid, act) = match epi {
            Epilogue::Scale => (0i32, 0u64, 0i32),
            Epilogue::Add(r) => (1, r, 0),
            Epilogue::Act(a) => (2, 0, a),
        };
        let vi = variant_for(cap, m, n);
        let (name, bm, bn, bk, stages, threads) = VARIANTS[vi];
        // the TMA forms align their stages to 1 KiB themselves and keep 2 x stages mbarriers
        // after them
        let smem = stages * (bm + bn) * bk + if vi >= FIRST_TMA { 1024 + 256 } else { 0 };
        self.allow_dyn_smem(name, smem)?;
        let smem = smem as u32;
        let grid = (n.div_ceil(bn) as u32, m.div_ceil(bm) as u32, 1);
        let (mi, ni, kp, dt) = (m as i32, n as i32, k_pad as i32, y_dt.bit());
        if vi >= FIRST_TMA {
            let ta = tma_map(q, m, k_pad, bm as u32)?;
            let tb = tma_map(w8, n, k_pad, bn as u32)?;
            self.launch(
                name,
                grid,
                (threads, 1, 1),
                smem,
                args![ta, tb, y, sx, sw, bias, resid, mi, ni, kp, mode, act, dt],
            )?;
            LAUNCHES.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.launch(
            name,
            grid,
            (threads, 1, 1),
            smem,
            args![y, q, w8, sx, sw, bias, resid, mi, ni, kp, mode, act, dt],
        )?;
        LAUNCHES.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The q8 `linear` / `linear_add` at more than GEMV rows through [`CudaBackend::i8gemm_launch`]
    /// when it is on; `Ok(false)`: not taken, the caller runs the library path.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn i8gemm_linear(
        &self,
        y: u64,
        y_dt: Dtype,
        xb: &Arc<Block>,
        x: u64,
        x_dt: Dtype,
        m: usize,
        n: usize,
        k: usize,
        w8: u64,
        sw: u64,
        k_pad: usize,
        bias: u64,
        resid: u64,
    ) -> Result<bool> {
        let Some(cap) = self.i8gemm() else {
            return Ok(false);
        };
        let (q, sx) = self.q8_quantize(xb, x, x_dt, m, k, k_pad)?;
        let epi = if resid == 0 {
            Epilogue::Scale
        } else {
            Epilogue::Add(resid)
        };
        self.i8gemm_launch(cap, y, y_dt, q.ptr, sx.ptr, w8, sw, bias, m, n, k_pad, epi)?;
        Ok(true)
    }
}
