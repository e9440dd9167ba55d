//! FastConformer block ops as single kernels (`kernels/conformer.cu`):
//! `Backend::glu_depthwise_act` (the conv module between its pointwise convs: four launches of
//! the composed default become one) and `Backend::rel_attention_inputs` (the Transformer-XL
//! inputs from one stacked q|k|v GEMM: four head splits, three slices and a copy of the
//! position heads per batch entry become one).

use std::ffi::c_void;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use stapes_core::backend::{
    depthwise_conv2d_cl_composed, depthwise_conv2d_cl_dims, feeding_composed, glu_depthwise_dims,
    norms_after_composed, rel_attention_composed, rel_attention_dims, subsample_stem_composed,
    subsample_stem_dims, Feeding, Feeds, RelAttnInputs, RelAttnParams, StridingParams,
};
use stapes_core::{Activation, Backend, DeviceTensor, Error, Result};

use super::{
    act_code, grid_1d, round_up, CudaBackend, CudaTensor, CudaWeight, Dtype, PrepKind, WeightData,
    GEMV_MAX_M,
};

/// The fewest output frames (the backend's `gdw_rows` doubles them once or twice) × channels per
/// block of `glu_dw_act` (`GDW_ROWS`, `GDW_CH` in the kernel), and its thread rows (`GDW_NY`: the
/// kernel hands each thread rows / GDW_NY outputs).
const GDW_ROWS: usize = 16;
const GDW_CH: usize = 64;
const GDW_NY: usize = 4;
/// Kernels longer than this take the composed path: the block's shared memory holds
/// `(rows + K − 1) · GDW_CH` floats (K = 255: 69 KB would exceed the 48 KB default; past it the
/// launch takes fewer rows a block).
const GDW_MAX_K: usize = 128;

/// Channels per block of `fc_sub_stem` and `fc_dw_cl`, one a thread (`SUB_CH` in the kernels).
const SUB_CH: usize = 128;
/// Thread rows of an `fc_dw_cl` block, each a run of output columns (`DW_FG` in the kernel).
const DW_FG: u32 = 4;
/// Channel octets (one a thread) and output-column rows of an `fc_dw_cl_h8` block (`DW8_OCT`,
/// `DW8_FY` in the kernel).
const DW8_OCT: usize = 16;
const DW8_FY: u32 = 16;
/// Static plus dynamic shared memory a block may use without opting in to more.
const SMEM_DEFAULT: usize = 48 * 1024;

/// `subsample_stem` and `depthwise_conv2d_cl` as the fused kernels (the default: parakeet
/// encode 3.18 -> 3.05 ms on the H200, stop 15); `STAPES_CUDA_FC_SUB=0` composes them (conv2d,
/// ReLU, masks, transposes).
fn sub_fused_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_FC_SUB").map_or(true, |v| v.trim() != "0"))
}

/// The subsampling kernels exist for NeMo's dw_striding form only (kernel 3, stride 2, padding
/// 1); every other form, or `STAPES_CUDA_FC_SUB=0`, takes the composed path.
fn sub_fused_for(p: &StridingParams) -> bool {
    sub_fused_on() && (p.kernel, p.stride, p.padding) == (3, 2, 1)
}

/// `STAPES_CUDA_REL_ATTN_KS`: `1` = `rel_attention` always as the split-keys kernel
/// (`rel_attn_ks_*`: 16 queries per block, 16-key tiles dealt over its warps), `auto` or unset (the
/// default) = where the batch's blocks of the plain kernel would not fill the SMs, `0` = never.
/// H200: one parakeet clip 3.18 -> 3.04 ms and canary 4.11 -> 3.89 split (stop 15); 16 parakeet
/// clips 9.2–9.3 -> 8.8 ms plain (stop 22, call 3), hence the batch in the rule. A clip's
/// attention rows then differ in the last bits between a batch and alone, as its GEMMs already
/// do (cuBLASLt's choice depends on the row count).
fn rel_attn_split_mode() -> u8 {
    static MODE: OnceLock<u8> = OnceLock::new();
    *MODE.get_or_init(|| {
        match std::env::var("STAPES_CUDA_REL_ATTN_KS")
            .as_deref()
            .map(str::trim)
        {
            Ok("1") => 1,
            Ok("0") => 0,
            _ => 2,
        }
    })
}

/// The `rel_attention` form forced for this process ([`CudaBackend::force_rel_attn_form`]):
/// `REL_FORM_AUTO` = by shape, 0 = split keys, 1..=9 = the plain kernel with that many warps.
static REL_FORM: AtomicU8 = AtomicU8::new(REL_FORM_AUTO);
const REL_FORM_AUTO: u8 = u8::MAX;
/// Warps a block of the plain kernel may have (16 queries each): `rel_attn_d128` is built for
/// 288 threads (`__maxnreg__(168)`), `rel_attn_d64` for 128 (`__launch_bounds__(128)`).
const REL_MAX_WARPS: u32 = 9;
const REL_MAX_WARPS_D64: u32 = 4;

/// The plain kernel's most warps a block for heads of `dh`.
fn rel_max_warps(dh: usize) -> u32 {
    if dh == 64 {
        REL_MAX_WARPS_D64
    } else {
        REL_MAX_WARPS
    }
}

/// `STAPES_CUDA_REL_WARPS=N`: the plain kernel's warps a block (1..=9, at most 4 for heads of
/// 64) instead of the choice by shape, for comparisons.
fn rel_warps_env() -> Option<u32> {
    static ENV: OnceLock<Option<u32>> = OnceLock::new();
    *ENV.get_or_init(|| {
        crate::env_usize("STAPES_CUDA_REL_WARPS")
            .filter(|w| (1..=REL_MAX_WARPS as usize).contains(w))
            .map(|w| w as u32)
    })
}
/// Warps a block of the split-keys kernel may have (`__launch_bounds__(288)` in the kernel: 160
/// registers; 9 warps' shared memory is 182 KiB): one a 16-key tile of a 140-frame clip. H200,
/// one parakeet clip: 8 warps against 4, 16.8 -> 15.3 µs a launch under ncu, encode 2.47-2.53 ->
/// 2.45-2.46 ms (stop 24); 9 against 8 within the encode's spread, ncu 14.8 -> 13.9 µs (stop 30).
const REL_KS_MAX_WARPS: usize = 9;
/// Keys a split-keys warp takes at a time (`RK_BK` in the kernel).
const REL_KS_KEYS: usize = 16;
/// Dynamic shared memory a split-keys warp uses for heads of 64 / 128 (`rk_warp_bytes` in the
/// kernel: its K and V tiles, score scratch and position rows).
const REL_KS_WARP_BYTES: [usize; 2] = [11520, 19712];
/// Dynamic shared memory of a split-keys block's (q+u) and (q+v) operands, before the warps'
/// (`rk_q_bytes` in the kernel).
const REL_KS_Q_BYTES: [usize; 2] = [4608, 8704];
/// Keys a tile of the plain kernel (`RA_BK`).
const REL_PLAIN_KEYS: usize = 32;
/// Position rows a warp of the plain kernel reads a tile (`RA_PW`): its score scratch's width.
const REL_PLAIN_POS_ROWS: usize = 48;

/// Warps a block of the split-keys kernel, forced ([`CudaBackend::force_rel_ks_warps`]; 0 = by
/// shape: a warp a 16-key tile, up to [`REL_KS_MAX_WARPS`]).
static REL_KS_WARPS: AtomicU8 = AtomicU8::new(0);

/// The split-keys kernel's warps a block: forced, else `STAPES_CUDA_REL_KS_WARPS=N` (1..=9, for
/// comparisons), else by shape.
fn rel_ks_warps(t: usize) -> usize {
    static ENV: OnceLock<Option<usize>> = OnceLock::new();
    let env = *ENV.get_or_init(|| {
        crate::env_usize("STAPES_CUDA_REL_KS_WARPS").filter(|w| (1..=REL_KS_MAX_WARPS).contains(w))
    });
    match REL_KS_WARPS.load(Ordering::Relaxed) {
        0 => env.unwrap_or_else(|| t.div_ceil(REL_KS_KEYS).clamp(1, REL_KS_MAX_WARPS)),
        w => usize::from(w),
    }
}

/// Dynamic shared memory of a fused rel-attention launch of `warps` warps (`rk_warp_bytes` and
/// `ra_smem_bytes` in the kernel): the split-keys form's per-warp tiles, scratch and position
/// rows; the plain form's per-warp (q+v) rows and score scratch, two stages of its K and V
/// tiles, and its ring of position rows (a tile's 16 rows a warp and `REL_PLAIN_KEYS`, and the
/// next tile's `REL_PLAIN_KEYS` new ones).
fn rel_attn_smem(split: bool, warps: u32, dh: usize) -> u32 {
    let w = warps as usize;
    let bytes = if split {
        let d128 = usize::from(dh == 128);
        REL_KS_Q_BYTES[d128] + w * REL_KS_WARP_BYTES[d128]
    } else {
        let row = (dh + 8) * 2;
        w * rel_plain_warp_bytes(dh)
            + 4 * REL_PLAIN_KEYS * row
            + (16 * w + 2 * REL_PLAIN_KEYS) * row
    };
    bytes as u32
}

/// The plain forms' shared memory a warp (`ra_warp_bytes` in the kernel): its (q+v) rows and its
/// score scratch.
fn rel_plain_warp_bytes(dh: usize) -> usize {
    16 * (dh + 8) * 2 + 16 * (REL_PLAIN_POS_ROWS + 1) * 4
}

/// Dynamic shared memory of the staged rel-attention (`rel_attn_s_d128`, `ra_staged_bytes` in
/// the kernel) for `t` frames and `warps` warps: the per-warp rows and scratch of the ring form,
/// the (b, h)'s K and V rows (`t` up to a multiple of 16) and the position rows its warps' tiles
/// read (the last tile's skips counted).
fn rel_staged_smem(t: usize, warps: u32) -> usize {
    let (w, row) = (warps as usize, (128 + 8) * 2);
    let k0_last = (t.max(1) - 1) / REL_PLAIN_KEYS * REL_PLAIN_KEYS;
    let pos_rows = 16 * (w - 1) + k0_last + 16 * (15 + t - k0_last).div_ceil(16);
    w * rel_plain_warp_bytes(128) + (2 * t.div_ceil(16) * 16 + pos_rows) * row
}

/// `STAPES_CUDA_REL_STAGED=1`: the fused rel-attention's plain form for heads of 128 stages the
/// whole (b, h) where it fits in shared memory (`rel_attn_s_d128`, kernels/conformer.cu says why
/// it may pay) instead of its ring of key tiles. Off by default until a GPU run measures it
/// (`rel_attention_forms_agree` checks its bits against the ring form's).
pub(super) fn rel_staged_default() -> bool {
    std::env::var("STAPES_CUDA_REL_STAGED").is_ok_and(|v| v.trim() == "1")
}

/// `layer_norm_pair` as one kernel (`ln_fused`, the default: parakeet encode 3.18 -> 3.10 ms on
/// the H200, stop 15); `STAPES_CUDA_LN_PAIR=0`: two `layer_norm` launches.
fn ln_pair_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_LN_PAIR").map_or(true, |v| v.trim() != "0"))
}

/// `STAPES_CUDA_LN_Q8=1`: a layer norm feeding a q8 linear (`layer_norm_feeding`, the second
/// result of `layer_norm_pair`) writes that linear's int8 input and row scales in the same kernel,
/// so the linear skips its quantize launch; `0` or unset: off (it ran on the H200 in stop 15 and
/// did not pay: parakeet q8 2.87 vs 2.84 ms, canary 3.63 vs 3.61, its quantize launch being
/// gone only where a q8 GEMM runs int8, which the q8 lane's f16 copy rarely does).
fn ln_q8_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_LN_Q8").is_ok_and(|v| v.trim() == "1"))
}

/// A frame mask the fused kernels read: `keep (B, T)` or `(B, T, 1)`.
fn check_keep(op: &'static str, keep: Option<&CudaTensor>, bs: usize, t: usize) -> Result<()> {
    match keep.map(|k| k.shape()) {
        Some(ks) if !(ks == [bs, t] || ks == [bs, t, 1]) => Err(Error::shape(
            op,
            format!("keep {ks:?} for a batch of {bs} × {t} frames"),
        )),
        _ => Ok(()),
    }
}

/// `STAPES_CUDA_REL_ATTN=0` runs `rel_attention` composed (rel_attention_inputs, cuBLAS score
/// products, rel_shift_softmax, merge_heads) instead of the fused kernel: for comparisons.
fn rel_attn_fused_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_REL_ATTN").map_or(true, |v| v.trim() != "0"))
}

impl CudaBackend {
    /// One kernel (`rel_attn_d64` / `rel_attn_d128`, or their split-keys forms for small grids)
    /// for heads of 64 or 128 (f32 inputs cast to f16 first); other head sizes take the composed
    /// default. Where `next` (the output projection) reads the result on FP8, the kernel also
    /// writes it as e4m3, remembered as that linear's prepared input; `store16` false (that
    /// linear is the result's only reader: `feeding_add_norms`) then leaves the f16 result
    /// unwritten. The flag returned says the f16 result was left unwritten.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rel_attention_fused(
        &self,
        qkv: &CudaTensor,
        pos: &CudaTensor,
        bias_u: &CudaTensor,
        bias_v: &CudaTensor,
        keep: Option<&CudaTensor>,
        p: &RelAttnParams,
        next: Option<&CudaWeight>,
        store16: bool,
    ) -> Result<(CudaTensor, bool)> {
        const OP: &str = "rel_attention";
        let (bs, t, c, np) = rel_attention_dims(&qkv.shape, &pos.shape, p.heads)?;
        let dh = c / p.heads;
        // plain: 16 queries a warp, 1-4 warps of one (b, h) per block; split-keys: 16 a block
        let forced = REL_FORM.load(Ordering::Relaxed);
        let split = match (forced, rel_attn_split_mode()) {
            (REL_FORM_AUTO, 1) => true,
            (REL_FORM_AUTO, 2) => bs * t.div_ceil(64) * p.heads < self.sm_count(),
            (f, _) => f == 0,
        };
        // `_t`: a partial last key tile skips its dead products (the same bits); the split-keys
        // form has no such entry (kernels/conformer.cu says why)
        let tail = self.rel_tail.load(Ordering::Relaxed);
        let kernel = match (dh, split, tail) {
            (64, false, false) => "rel_attn_d64",
            (128, false, false) => "rel_attn_d128",
            (64, false, true) => "rel_attn_t_d64",
            (128, false, true) => "rel_attn_t_d128",
            (64, true, _) => "rel_attn_ks_d64",
            (128, true, _) => "rel_attn_ks_d128",
            _ => "",
        };
        // the plain kernel offsets position rows in 32 bits
        let pos_fits = np.checked_mul(c).is_some_and(|n| n <= i32::MAX as usize);
        if kernel.is_empty() || np + 1 != 2 * t || !pos_fits || !rel_attn_fused_on() {
            return Ok((
                rel_attention_composed(self, qkv, pos, bias_u, bias_v, keep, p)?,
                false,
            ));
        }
        for (name, bb) in [("bias_u", bias_u), ("bias_v", bias_v)] {
            if bb.numel() != c {
                return Err(Error::shape(
                    OP,
                    format!("{name} {:?} for {c} channels", bb.shape()),
                ));
            }
        }
        check_keep(OP, keep, bs, t)?;
        let out = self.alloc(&[bs, t, c], self.out_dt())?;
        if out.numel() == 0 {
            return Ok((out, false));
        }
        // f32 activations (eager passes, e.g. inputs too long for a chain) meet the tensor cores
        // in f16, as the `attention` op's K and V do: one cast each
        let qkv16 = self.as_dtype(qkv, Dtype::F16)?;
        let pos16 = self.as_dtype(pos, Dtype::F16)?;
        let (bu, bv) = (
            self.as_dtype(bias_u, Dtype::F32)?,
            self.as_dtype(bias_v, Dtype::F32)?,
        );
        let keep32 = self.param(keep)?;
        let (y, xp, pp, bup, bvp, kp) = (
            out.buf.ptr,
            self.t(&qkv16),
            self.t(&pos16),
            self.t(&bu),
            self.t(&bv),
            self.opt(keep32.as_ref()),
        );
        let (ti, hi, scale, dt) = (t as i32, p.heads as i32, p.scale, out.bit());
        let warps = match (split, forced, rel_warps_env()) {
            // a warp a tile of keys: the block's time is its longest chain of tiles
            (true, _, _) => rel_ks_warps(t) as u32,
            (false, REL_FORM_AUTO, Some(w)) => w.min(rel_max_warps(dh)),
            (false, REL_FORM_AUTO, None) => self.rel_attn_warps(kernel, bs, t, p.heads, dh)?,
            (false, w, _) => u32::from(w).min(rel_max_warps(dh)),
        };
        let mut smem = rel_attn_smem(split, warps, dh);
        // the staged form where the (b, h) fits and a SM holds as many of its blocks as of the
        // ring form's (the warps are the ring form's pick): the tail's skips and the same bits
        let staged = rel_staged_smem(t, warps);
        let fits = |k: &'static str, bytes: usize| -> Result<usize> {
            self.allow_dyn_smem(k, bytes)?;
            self.resident_blocks(k, 32 * warps, bytes as u32)
        };
        let kernel = if kernel == "rel_attn_t_d128"
            && self.rel_staged.load(Ordering::Relaxed)
            && staged <= self.smem_optin()
            && fits("rel_attn_s_d128", staged)? >= fits(kernel, smem as usize)?
        {
            smem = staged as u32;
            self.rel_staged_runs.fetch_add(1, Ordering::SeqCst);
            "rel_attn_s_d128"
        } else {
            kernel
        };
        self.allow_dyn_smem(kernel, smem as usize)?;
        // queries of one (b, h) per block: 16 a warp, or 16 in all in the split-keys form
        let rows = if split { 16 } else { 16 * warps as usize };
        let grid = (t.div_ceil(rows) as u32, p.heads as u32, bs as u32);
        // an FP8 GEMM next: the stored values also as its e4m3 input (fp8.rs)
        let m = bs * t;
        let y8 = match next {
            Some(nw)
                if out.dtype == Dtype::F16
                    && self.rel_e4m3.load(Ordering::Relaxed)
                    && self.feeds_fp8(nw, m, c) =>
            {
                Some(self.pool.alloc(m * c)?)
            }
            _ => None,
        };
        let y8p = y8.as_ref().map_or(0, |b| self.p(b));
        let only8 = y8.is_some() && !store16;
        let y = if only8 { 0 } else { y };
        self.launch(
            kernel,
            grid,
            (32 * warps, 1, 1),
            smem,
            args![y, y8p, xp, pp, bup, bvp, kp, ti, hi, scale, dt],
        )?;
        if let Some(y8) = y8 {
            self.remember(&out.buf, m, c, PrepKind::Fp8, vec![y8]);
        }
        Ok((out, only8))
    }

    /// Warps a block of the plain rel-attention kernel: each warp owns 16 queries and walks
    /// every key, so blocks of 1-9 warps do the same work a row and give the same bits; the
    /// choice is by the fewest waves of blocks (the driver's occupancy answer, among the sizes
    /// whose shared memory the device allows), then the fewest padded query rows, then the most
    /// warps (K/V tiles and position rows shared). 16 parakeet clips (T = 140, 8 heads): 9
    /// warps, a block a (clip, head) and 128 blocks in one wave, where 3 warps (two blocks a SM
    /// by shared memory) made two waves of 384.
    fn rel_attn_warps(
        &self,
        kernel: &'static str,
        bs: usize,
        t: usize,
        heads: usize,
        dh: usize,
    ) -> Result<u32> {
        let mut best = (usize::MAX, usize::MAX, 1);
        for w in (1..=rel_max_warps(dh)).rev() {
            let rows = 16 * w as usize;
            let blocks = bs * heads * t.div_ceil(rows);
            let smem = rel_attn_smem(false, w, dh);
            if smem as usize > self.smem_optin() {
                continue;
            }
            self.allow_dyn_smem(kernel, smem as usize)?;
            let slots = self.resident_blocks(kernel, 32 * w, smem)? * self.sm_count();
            let key = (blocks.div_ceil(slots), t.div_ceil(rows) * rows);
            if key < (best.0, best.1) {
                best = (key.0, key.1, w);
            }
        }
        Ok(best.2)
    }

    /// `glu_dw_act`'s output frames a block from now on: 16, 32 or 64, or 0 to choose by shape
    /// (tests and A/B runs; every output is the same sum in each form; the default comes from
    /// `STAPES_CUDA_GDW_ROWS`).
    #[doc(hidden)]
    pub fn set_gdw_rows(&self, rows: usize) -> Result<()> {
        let code = match rows {
            0 => Some(GDW_BY_SHAPE),
            _ => gdw_rows_code(rows),
        };
        let code = code.ok_or_else(|| {
            Error::shape(
                "set_gdw_rows",
                format!("{rows} frames a block; 16, 32 or 64 allowed, or 0 (by shape)"),
            )
        })?;
        self.gdw_rows.store(code, Ordering::SeqCst);
        Ok(())
    }

    /// `fc_sub_stem`'s output frames a block from now on: 1, 2 or 4, or 0 to choose by shape
    /// (tests and A/B runs; every output is the same sum in each form; the starting value comes
    /// from `STAPES_CUDA_STEM_FRAMES`).
    #[doc(hidden)]
    pub fn set_stem_frames(&self, frames: usize) -> Result<()> {
        if frames != 0 && !STEM_FRAMES.contains(&frames) {
            return Err(Error::shape(
                "set_stem_frames",
                format!("{frames} frames a block; 0 (by shape), 1, 2 or 4 allowed"),
            ));
        }
        self.stem_frames.store(frames as u8, Ordering::SeqCst);
        Ok(())
    }

    /// Whether the fused rel-attention's plain form skips a partial last key tile's dead products
    /// from now on (tests and A/B runs; the bits are the same either way); returns the setting it
    /// replaced.
    #[doc(hidden)]
    pub fn set_rel_tail(&self, on: bool) -> bool {
        self.rel_tail.swap(on, Ordering::SeqCst)
    }

    /// Whether the fused rel-attention's plain form for heads of 128 stages the whole (b, h) where
    /// it fits (`rel_attn_s_d128`) from now on (tests and A/B runs; the same bits either way);
    /// returns the setting it replaced.
    #[doc(hidden)]
    pub fn set_rel_staged(&self, on: bool) -> bool {
        self.rel_staged.swap(on, Ordering::SeqCst)
    }

    /// Launches of the staged rel-attention (tests prove it ran).
    #[doc(hidden)]
    pub fn rel_staged_runs(&self) -> u64 {
        self.rel_staged_runs.load(Ordering::SeqCst)
    }

    /// Whether the fused rel-attention writes e4m3 for an output projection on FP8 from now on
    /// (tests and A/B runs; the default comes from `STAPES_CUDA_REL_ATTN_E4M3`).
    #[doc(hidden)]
    pub fn set_rel_attn_e4m3(&self, on: bool) {
        self.rel_e4m3.store(on, Ordering::SeqCst);
    }

    /// Force the form of every later fused `rel_attention` in this process (benchmarks and
    /// tests): `None` picks by shape (the default), `Some(0)` the split-keys kernel, `Some(w)`
    /// for w in 1..=9 the plain kernel with w warps a block (at most 4 for heads of 64).
    #[doc(hidden)]
    pub fn force_rel_attn_form(&self, form: Option<u32>) -> Result<()> {
        let v = match form {
            None => REL_FORM_AUTO,
            Some(w) if w <= REL_MAX_WARPS => w as u8,
            Some(w) => {
                return Err(Error::shape(
                    "force_rel_attn_form",
                    format!("{w} warps; 0 (split keys) ..={REL_MAX_WARPS} allowed"),
                ))
            }
        };
        REL_FORM.store(v, Ordering::Relaxed);
        Ok(())
    }

    /// Force the split-keys kernel's warps a block for every later fused `rel_attention` in this
    /// process (tests): `None` by shape (the default), `Some(w)` for w in 1..=9.
    #[doc(hidden)]
    pub fn force_rel_ks_warps(&self, warps: Option<u32>) -> Result<()> {
        let v = match warps {
            None => 0,
            Some(w) if (1..=REL_KS_MAX_WARPS as u32).contains(&w) => w as u8,
            Some(w) => {
                return Err(Error::shape(
                    "force_rel_ks_warps",
                    format!("{w} warps; 1..={REL_KS_MAX_WARPS} allowed"),
                ))
            }
        };
        REL_KS_WARPS.store(v, Ordering::Relaxed);
        Ok(())
    }

    /// GLU, keep mask, depthwise conv and activation in one kernel; where `next`'s linear reads
    /// the result on FP8 it is also written as e4m3 (remembered as that linear's prepared input),
    /// and `store16` false leaves the f16 result unwritten (the flag returned says so), as in
    /// [`CudaBackend::rel_attention_fused`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn glu_depthwise_act_fused(
        &self,
        x: &CudaTensor,
        keep: Option<&CudaTensor>,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        act: Activation,
        next: Option<&CudaWeight>,
        store16: bool,
    ) -> Result<(CudaTensor, bool)> {
        const OP: &str = "glu_depthwise_act";
        let (bs, t, c, kw) = glu_depthwise_dims(&x.shape, &w.shape)?;
        if let Some(b) = bias {
            if b.numel() != c {
                return Err(Error::shape(
                    OP,
                    format!("bias {:?} for {c} channels", b.shape()),
                ));
            }
        }
        check_keep(OP, keep, bs, t)?;
        if kw > GDW_MAX_K {
            // rare (conformers use K ≤ 31): the four separate ops
            let mut h = self.glu(x)?;
            if let Some(k) = keep {
                h = self.mask_fill(&h, k, c, 0.0)?;
            }
            let h = self.depthwise_conv1d(&h, w, bias, 1, (kw - 1) / 2)?;
            return Ok((self.activation(&h, act)?, false));
        }
        let pad = (kw - 1) / 2;
        let t_out = t + 2 * pad + 1 - kw;
        let out = self.alloc(&[bs, t_out, c], self.out_dt())?;
        if out.numel() == 0 {
            return Ok((out, false));
        }
        let w32 = self.as_dtype(w, Dtype::F32)?;
        let (bias32, keep32) = (self.param(bias)?, self.param(keep)?);
        let (y, xp, kp, wp, bp) = (
            out.buf.ptr,
            self.t(x),
            self.opt(keep32.as_ref()),
            self.t(&w32),
            self.opt(bias32.as_ref()),
        );
        let (ti, ci, ki, pi, toi, a) = (
            t as i32,
            c as i32,
            kw as i32,
            pad as i32,
            t_out as i32,
            act_code(act),
        );
        // blocks of GDW_ROWS output frames times 2^code (the same sums in any form)
        let mut code = match self.gdw_rows.load(Ordering::Relaxed) {
            GDW_BY_SHAPE => gdw_code_by_shape(bs, t_out, c, self.sm_count()),
            forced => forced.min(GDW_MAX_CODE),
        };
        while code > 0 && ((GDW_ROWS << code) + kw - 1) * GDW_CH * 4 > 48 * 1024 {
            code -= 1;
        }
        let rows_blk = GDW_ROWS << code;
        let dt = out.bit() | (x.bit() << 1);
        // an FP8 GEMM next: the outputs also as its e4m3 input (fp8.rs)
        let m = bs * t_out;
        let y8 = match next {
            Some(nw) if out.dtype == Dtype::F16 && self.feeds_fp8(nw, m, c) => {
                Some(self.pool.alloc(m * c)?)
            }
            _ => None,
        };
        let y8p = y8.as_ref().map_or(0, |b| self.p(b));
        let grid = (
            t_out.div_ceil(rows_blk) as u32,
            c.div_ceil(GDW_CH) as u32,
            bs as u32,
        );
        let smem = ((rows_blk + kw - 1) * GDW_CH * 4) as u32;
        let only8 = y8.is_some() && !store16;
        let y = if only8 { 0 } else { y };
        self.launch(
            GDW_ENTRIES[usize::from(code)],
            grid,
            ((GDW_CH * GDW_NY) as u32, 1, 1),
            smem,
            args![y, xp, kp, wp, bp, ti, ci, ki, pi, toi, a, dt, y8p],
        )?;
        if let Some(y8) = y8 {
            self.remember(&out.buf, m, c, PrepKind::Fp8, vec![y8]);
        }
        Ok((out, only8))
    }

    pub(super) fn rel_attention_inputs_fused(
        &self,
        qkv: &CudaTensor,
        pos: &CudaTensor,
        heads: usize,
        bias_u: &CudaTensor,
        bias_v: &CudaTensor,
    ) -> Result<RelAttnInputs<CudaTensor>> {
        let (bs, t, c, np) = rel_attention_dims(&qkv.shape, &pos.shape, heads)?;
        for (name, bb) in [("bias_u", bias_u), ("bias_v", bias_v)] {
            if bb.numel() != c {
                return Err(Error::shape(
                    "rel_attention_inputs",
                    format!("{name} {:?} for {c} channels", bb.shape()),
                ));
            }
        }
        let dh = c / heads;
        let odt = self.out_dt();
        let heads_of = |rows: usize| self.alloc(&[bs * heads, rows, dh], odt);
        let out = RelAttnInputs {
            qu: heads_of(t)?,
            qv: heads_of(t)?,
            k: heads_of(t)?,
            v: heads_of(t)?,
            p: heads_of(np)?,
        };
        let n = bs * t * 3 * c + bs * np * c;
        if n == 0 {
            return Ok(out);
        }
        let (bu, bv) = (
            self.as_dtype(bias_u, Dtype::F32)?,
            self.as_dtype(bias_v, Dtype::F32)?,
        );
        let (qu, qv, k, v, p) = (
            out.qu.buf.ptr,
            out.qv.buf.ptr,
            out.k.buf.ptr,
            out.v.buf.ptr,
            out.p.buf.ptr,
        );
        let (xp, pp, bup, bvp) = (self.t(qkv), self.t(pos), self.t(&bu), self.t(&bv));
        let (bi, ti, hi, di, ni) = (bs as i32, t as i32, heads as i32, dh as i32, np as i32);
        let dt = odt.bit() | (qkv.bit() << 1) | (pos.bit() << 2);
        self.launch(
            "rel_attn_inputs",
            grid_1d(n),
            (256, 1, 1),
            0,
            args![qu, qv, k, v, p, xp, pp, bup, bvp, bi, ti, hi, di, ni, dt],
        )?;
        Ok(out)
    }
}

impl CudaBackend {
    /// `fc_sub_stem`: conv0, ReLU, mask and the first depthwise conv in one kernel, for NeMo's
    /// kernel 3, stride 2, padding 1; other forms, and inputs whose 7 staged rows do not fit the
    /// default shared memory, take the composed default.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn subsample_stem_fused(
        &self,
        x: &CudaTensor,
        keep0: Option<&CudaTensor>,
        w0: &CudaTensor,
        b0: &CudaTensor,
        keep1: Option<&CudaTensor>,
        w1: &CudaTensor,
        b1: &CudaTensor,
        p: &StridingParams,
    ) -> Result<CudaTensor> {
        const OP: &str = "subsample_stem";
        let (bs, t, f, c, t2, f2) =
            subsample_stem_dims(&x.shape, &w0.shape, &b0.shape, &w1.shape, &b1.shape, p)?;
        let (t1, f1) = (p.out_len(t), p.out_len(f));
        // a block's frames (fewer where its staged rows would not fit), and its 4 · frames + 3
        // input rows of 4 · F2 + 4 padded columns (the kernel's W)
        let stem_smem = |frames: usize| (4 * frames + 3) * (4 * f2 + 4) * 4;
        let mut frames = match self.stem_frames.load(Ordering::Relaxed) {
            0 => stem_frames_by_shape(bs, t2, c, self.sm_count()),
            f => usize::from(f),
        };
        while frames > 1 && stem_smem(frames) > SMEM_DEFAULT {
            frames /= 2;
        }
        let smem = stem_smem(frames);
        if !sub_fused_for(p) || smem > SMEM_DEFAULT {
            return subsample_stem_composed(self, x, keep0, w0, b0, keep1, w1, b1, p);
        }
        check_keep(OP, keep0, bs, t)?;
        check_keep(OP, keep1, bs, t1)?;
        let out = self.alloc(&[bs, t2, f2, c], self.out_dt())?;
        if out.numel() == 0 {
            return Ok(out);
        }
        let (w0, b0, w1, b1) = (
            self.as_dtype(w0, Dtype::F32)?,
            self.as_dtype(b0, Dtype::F32)?,
            self.as_dtype(w1, Dtype::F32)?,
            self.as_dtype(b1, Dtype::F32)?,
        );
        let (k0, k1) = (self.param(keep0)?, self.param(keep1)?);
        let (y, xp, k0p, w0p, b0p, k1p, w1p, b1p) = (
            out.buf.ptr,
            self.t(x),
            self.opt(k0.as_ref()),
            self.t(&w0),
            self.t(&b0),
            self.opt(k1.as_ref()),
            self.t(&w1),
            self.t(&b1),
        );
        let [ti, fi, ci, t1i, f1i, t2i, f2i] = [t, f, c, t1, f1, t2, f2].map(|v| v as i32);
        let dt = out.bit() | (x.bit() << 1);
        let kernel = match frames {
            4 => "fc_sub_stem4",
            2 => "fc_sub_stem2",
            _ => "fc_sub_stem",
        };
        self.launch(
            kernel,
            (
                t2.div_ceil(frames) as u32,
                c.div_ceil(SUB_CH) as u32,
                bs as u32,
            ),
            (SUB_CH as u32, 1, 1),
            smem as u32,
            args![y, xp, k0p, w0p, b0p, k1p, w1p, b1p, ti, fi, ci, t1i, f1i, t2i, f2i, dt],
        )?;
        Ok(out)
    }

    /// `fc_dw_cl`: a channel-last depthwise conv, the input's ReLU and mask applied as it reads,
    /// for kernel 3, stride 2, padding 1; other forms take the composed default.
    pub(super) fn depthwise_conv2d_cl_fused(
        &self,
        x: &CudaTensor,
        keep: Option<&CudaTensor>,
        relu_input: bool,
        w: &CudaTensor,
        bias: &CudaTensor,
        p: &StridingParams,
    ) -> Result<CudaTensor> {
        const OP: &str = "depthwise_conv2d_cl";
        let (bs, t, f, c, t2, f2) = depthwise_conv2d_cl_dims(&x.shape, &w.shape, &bias.shape, p)?;
        if !sub_fused_for(p) {
            return depthwise_conv2d_cl_composed(self, x, keep, relu_input, w, bias, p);
        }
        check_keep(OP, keep, bs, t)?;
        let out = self.alloc(&[bs, t2, f2, c], self.out_dt())?;
        if out.numel() == 0 {
            return Ok(out);
        }
        let (w, bias, keep) = (
            self.as_dtype(w, Dtype::F32)?,
            self.as_dtype(bias, Dtype::F32)?,
            self.param(keep)?,
        );
        let (y, xp, kp, wp, bp) = (
            out.buf.ptr,
            self.t(x),
            self.opt(keep.as_ref()),
            self.t(&w),
            self.t(&bias),
        );
        let [ti, fi, ci, t2i, f2i] = [t, f, c, t2, f2].map(|v| v as i32);
        let (relu, dt) = (relu_input as i32, out.bit() | (x.bit() << 1));
        // f16 inputs in whole 8-channel groups: 16-byte loads, 8 channels a thread
        let (name, grid, block) = match x.dtype == Dtype::F16 && c % 8 == 0 {
            true => (
                "fc_dw_cl_h8",
                (t2 as u32, c.div_ceil(8 * DW8_OCT) as u32, bs as u32),
                (DW8_OCT as u32, DW8_FY, 1),
            ),
            false => (
                "fc_dw_cl",
                (t2 as u32, c.div_ceil(SUB_CH) as u32, bs as u32),
                (SUB_CH as u32, DW_FG, 1),
            ),
        };
        self.launch(
            name,
            grid,
            block,
            0,
            args![y, xp, kp, wp, bp, ti, fi, ci, t2i, f2i, relu, dt],
        )?;
        Ok(out)
    }
}

impl CudaBackend {
    /// The int8 row length of the quantized form `ln_fused` writes for the linear of weight
    /// `next` over `rows × d`, where that linear quantizes its input (q8 weight, not a GEMV)
    /// and `STAPES_CUDA_LN_Q8` is on.
    fn ln_q8_target(&self, next: Option<&CudaWeight>, rows: usize, d: usize) -> Option<usize> {
        let w = next?;
        match &w.data {
            WeightData::Q8 { k_pad, .. }
                if w.k == d && rows > GEMV_MAX_M && ln_q8_on() && !self.q8_runs_f16(w, rows) =>
            {
                Some(*k_pad)
            }
            _ => None,
        }
    }

    /// The gains (f32) and biases (f32 where given) of `norms`, as the norm kernels read them.
    #[allow(clippy::type_complexity)]
    fn norm_params(
        &self,
        norms: &[(&CudaTensor, Option<&CudaTensor>)],
    ) -> Result<(Vec<CudaTensor>, Vec<Option<CudaTensor>>)> {
        let mut gs = Vec::with_capacity(norms.len());
        let mut bs = Vec::with_capacity(norms.len());
        for (g, b) in norms {
            gs.push(self.as_dtype(g, Dtype::F32)?);
            bs.push(self.param(*b)?);
        }
        Ok((gs, bs))
    }

    /// `ln_fused` over `x (.., d)`: one norm, or two in a row (`norms.len() == 2`), the last
    /// result also quantized for a q8 linear when `k_pad` is given (remembered as that linear's
    /// prepared input). Returns the norms' results.
    fn ln_launch(
        &self,
        x: &CudaTensor,
        norms: &[(&CudaTensor, Option<&CudaTensor>)],
        eps: f32,
        k_pad: Option<usize>,
        e4m3_last: bool,
        store16_last: bool,
    ) -> Result<Vec<CudaTensor>> {
        const OP: &str = "layer_norm_pair";
        let d = x.shape.last().copied().unwrap_or(0);
        for (g, b) in norms {
            if g.numel() != d || b.is_some_and(|b| b.numel() != d) {
                return Err(Error::shape(
                    OP,
                    format!(
                        "gamma {:?}, beta {:?} for rows of {d}",
                        g.shape(),
                        b.map(|b| b.shape().to_vec())
                    ),
                ));
            }
        }
        let outs = norms
            .iter()
            .map(|_| self.alloc(&x.shape, self.out_dt()))
            .collect::<Result<Vec<_>>>()?;
        let rows = x.numel() / d.max(1);
        if rows == 0 {
            return Ok(outs);
        }
        let (gs, bs) = self.norm_params(norms)?;
        let m_pad = round_up(rows, 16);
        let quant = match k_pad {
            Some(kp) => Some((
                self.pool.alloc(m_pad * kp)?,
                self.pool.alloc(m_pad * 4)?,
                kp,
            )),
            None => None,
        };
        let last = norms.len() - 1;
        let (yp, zp) = (outs[0].buf.ptr, outs[last].buf.ptr);
        let (qp, sqp, kp) = quant
            .as_ref()
            .map_or((0, 0, 0), |(q, s, k)| (q.ptr, s.ptr, *k));
        let (xp, g1p, b1p, g2p, b2p) = (
            self.t(x),
            self.t(&gs[0]),
            self.opt(bs[0].as_ref()),
            self.t(&gs[last]),
            self.opt(bs[last].as_ref()),
        );
        let [mi, di, kpi] = [rows, d, kp].map(|v| v as i32);
        let (pair, dt) = (last as i32, outs[0].bit() | (x.bit() << 1));
        // f16 rows in and out in whole 16-byte chunks, both results, no quantized form: a warp a
        // row, the row in registers (ln_fused stages it in shared memory, a block a row)
        if quant.is_none() && pair == 1 && dt == 3 && d.is_multiple_of(8) && d <= 2048 {
            let (y, z) = (outs[0].buf.ptr, outs[1].buf.ptr);
            if (y | z | xp).is_multiple_of(16) {
                let z8 = match e4m3_last {
                    true => Some(self.pool.alloc(rows * d)?),
                    false => None,
                };
                let z8p = z8.as_ref().map_or(0, |b| self.p(b));
                // z's e4m3 rows alone where its FP8 GEMM is its only reader
                let elide = z8.is_some() && !store16_last;
                let z = if elide { 0 } else { z };
                self.launch(
                    "ln_pair_rows16",
                    (rows.div_ceil(4) as u32, 1, 1),
                    (128, 1, 1),
                    0,
                    args![y, z, xp, g1p, b1p, g2p, b2p, mi, di, eps, z8p],
                )?;
                if let Some(z8) = z8 {
                    self.remember(&outs[1].buf, rows, d, PrepKind::Fp8, vec![z8]);
                }
                if elide {
                    outs[1].buf.set_elided();
                }
                return Ok(outs);
            }
        }
        let grid = if quant.is_some() { m_pad } else { rows };
        self.launch(
            "ln_fused",
            (grid as u32, 1, 1),
            (256, 1, 1),
            (d * 4) as u32,
            args![yp, zp, qp, sqp, xp, g1p, b1p, g2p, b2p, mi, di, kpi, eps, pair, dt],
        )?;
        if let Some((q, sq, kp)) = quant {
            self.remember(
                &outs[last].buf,
                rows,
                d,
                PrepKind::I8 { k_pad: kp },
                vec![q, sq],
            );
        }
        Ok(outs)
    }

    /// Rows too wide for the kernel's shared-memory row (then the ops run separately).
    fn ln_too_wide(d: usize) -> bool {
        d == 0 || d * 4 > SMEM_DEFAULT - 1024
    }

    /// [`Backend::layer_norm_pair`]; `store16` false: where z's e4m3 form is written, z's f16
    /// values are not (its FP8 GEMM is its only reader) and its block is marked elided.
    pub(super) fn layer_norm_pair_fused(
        &self,
        x: &CudaTensor,
        norms: [(&CudaTensor, Option<&CudaTensor>); 2],
        eps: f32,
        next: Option<&CudaWeight>,
        store16: bool,
    ) -> Result<(CudaTensor, CudaTensor)> {
        let d = x.shape.last().copied().unwrap_or(0);
        if !ln_pair_on() || Self::ln_too_wide(d) {
            let y = self.layer_norm(x, norms[0].0, norms[0].1, eps)?;
            let z = match next {
                Some(w) => {
                    self.layer_norm_feeding_fused(&y, norms[1].0, norms[1].1, eps, w, store16)?
                }
                None => self.layer_norm(&y, norms[1].0, norms[1].1, eps)?,
            };
            return Ok((y, z));
        }
        let rows = x.numel() / d;
        let k_pad = self.ln_q8_target(next, rows, d);
        // an FP8 GEMM next: z's e4m3 form comes out of the pair's pass (as layer_norm_feeding's)
        let e4m3 = next.is_some_and(|w| self.norm_feeds_fp8(x, w, rows, d));
        let mut outs = self.ln_launch(x, &norms, eps, k_pad, e4m3, store16)?;
        let z = outs.pop();
        match (outs.pop(), z) {
            (Some(y), Some(z)) => Ok((y, z)),
            _ => Err(Error::shape("layer_norm_pair", "two results expected")),
        }
    }

    /// Whether a norm over `x`'s `rows` of `d` writes the e4m3 input of `next`'s linear beside
    /// its f16 result: f16 rows and that linear on FP8 from an f16 chain.
    fn norm_feeds_fp8(&self, x: &CudaTensor, next: &CudaWeight, rows: usize, d: usize) -> bool {
        next.k == d && x.dtype == Dtype::F16 && self.fp8_chain_linear(next, rows, None)
    }

    /// [`Backend::layer_norm_feeding`]; `store16` false: where the e4m3 form is written, the
    /// f16 values are not (`next`'s FP8 GEMM is the result's only reader; fp8.rs
    /// `layer_norm_e4m3`).
    pub(super) fn layer_norm_feeding_fused(
        &self,
        x: &CudaTensor,
        gamma: &CudaTensor,
        beta: Option<&CudaTensor>,
        eps: f32,
        next: &CudaWeight,
        store16: bool,
    ) -> Result<CudaTensor> {
        let d = x.shape.last().copied().unwrap_or(0);
        let rows = x.numel() / d.max(1);
        // an FP8 GEMM next: the norm writes its e4m3 input beside the f16 result (fp8.rs)
        if self.norm_feeds_fp8(x, next, rows, d) {
            return Ok(self.layer_norm_e4m3(x, gamma, beta, eps, store16)?.0);
        }
        let k_pad = match Self::ln_too_wide(d) {
            true => None,
            false => self.ln_q8_target(Some(next), rows, d),
        };
        match k_pad {
            Some(kp) => self
                .ln_launch(x, &[(gamma, beta)], eps, Some(kp), false, true)?
                .pop()
                .ok_or_else(|| Error::shape("layer_norm_feeding", "one result expected")),
            None => self.layer_norm(x, gamma, beta, eps),
        }
    }
}

impl CudaBackend {
    /// f16 where encoder chains keep f16 activations (what their kernels read), else as is.
    pub(super) fn encoder_constant_k(&self, x: CudaTensor) -> Result<CudaTensor> {
        match x.dtype {
            Dtype::F32 if self.f16_activations() => self.as_dtype(&x, Dtype::F16),
            _ => Ok(x),
        }
    }
}

/// `STAPES_CUDA_SPLIT_LN`: K slices (2 or 4, the default) of `linear_add_norms`' own split-K
/// form (else always the composed form, cuBLASLt's GEMM — with its own split-K reduction where it
/// picks one — and the norm kernel); the backend's starting value. H200, stop 29 call 3, fc2
/// only: one parakeet clip 2.40–2.44 ms composed, 2.20–2.22 in 2 slices, 2.15–2.18 in 4.
pub(super) fn split_ln_default() -> usize {
    crate::env_usize("STAPES_CUDA_SPLIT_LN").map_or(4, |s| s.min(8))
}

/// `STAPES_CUDA_REL_ATTN_E4M3`: `1` the fused rel-attention also writes its result as e4m3
/// where its output projection reads it on FP8 (`rel_attention_feeding`), `0` f16 only (the
/// projection's split form then runs on f16 operands); the backend's starting value.
pub(super) fn rel_e4m3_default() -> bool {
    std::env::var("STAPES_CUDA_REL_ATTN_E4M3").map_or(true, |v| v.trim() != "0")
}

/// `STAPES_CUDA_REL_TAIL=0`: the fused rel-attention's last partial key tile computes every
/// product; by default the plain form (`rel_attn_t_*`; the split-keys form has no such entry)
/// skips those only keys past the sequence would read (16 parakeet clips,
/// T = 140: the fifth tile of 32 has 12 keys, and a warp's 560 MMAs fall to 512). The skipped
/// scores are -inf and their V rows zero-filled, so the output's bits are the same
/// (`rel_attention_forms_agree`). H100, stop 59, 16 parakeet q8 clips alternating (ms): calls
/// 2–3, off 5.300–5.336, on 5.284–5.329; call 4, with 2 stem frames a block, off 5.282–5.312,
/// on 5.268–5.291.
pub(super) fn rel_tail_default() -> bool {
    std::env::var("STAPES_CUDA_REL_TAIL").map_or(true, |v| v.trim() != "0")
}

/// `glu_dw_act`'s output frames a block as the code the kernel takes (`GDW_ROWS << code`):
/// `STAPES_CUDA_GDW_ROWS` = 16, 32 or 64 forces one; unset, [`GDW_BY_SHAPE`].
pub(super) fn gdw_rows_default() -> u8 {
    crate::env_usize("STAPES_CUDA_GDW_ROWS")
        .and_then(gdw_rows_code)
        .unwrap_or(GDW_BY_SHAPE)
}

/// `glu_dw_act`'s entries by code: blocks of `GDW_ROWS << code` output frames.
const GDW_ENTRIES: [&str; 3] = ["glu_dw_act", "glu_dw_act32", "glu_dw_act64"];

/// The largest code with an entry in [`GDW_ENTRIES`].
const GDW_MAX_CODE: u8 = GDW_ENTRIES.len() as u8 - 1;

/// The backend's `gdw_rows` value that chooses by shape ([`gdw_code_by_shape`]).
const GDW_BY_SHAPE: u8 = u8::MAX;

/// Blocks a SM that a kernel's form with more frames a block (`glu_dw_act`'s 32, the stem's 2)
/// must still give for it to be chosen by shape: on a smaller grid the idle SMs cost more than
/// the longer blocks save.
const LONG_BLOCKS_MIN_PER_SM: usize = 4;

/// Whether a grid of `blocks` still gives each of `sms` SMs [`LONG_BLOCKS_MIN_PER_SM`] blocks.
fn long_blocks_fill(blocks: usize, sms: usize) -> bool {
    blocks >= LONG_BLOCKS_MIN_PER_SM * sms
}

/// `glu_dw_act`'s code by shape: 32 frames a block (code 1) where that grid still fills the SMs
/// ([`long_blocks_fill`]), else 16 (code 0). Fewer, longer blocks pay the staging
/// barrier (what the kernel waits on, stop 57) fewer times, which pays where the grid is many
/// waves: H100, stop 58 call 1, 16 parakeet q8 clips (1280 blocks at 32) alternating, 16 frames
/// 5.214–5.217 ms, 32 frames 5.154–5.174. One clip's 32-frame grid is 80 blocks for 132 SMs:
/// stop 60's ncu (H100) read its launch at 8.9 µs against 5.8 at 16 frames (144 blocks), ~75 µs
/// of a parakeet encode.
fn gdw_code_by_shape(bs: usize, t_out: usize, c: usize, sms: usize) -> u8 {
    let blocks32 = bs * t_out.div_ceil(2 * GDW_ROWS) * c.div_ceil(GDW_CH);
    u8::from(long_blocks_fill(blocks32, sms))
}

/// The kernel's code for blocks of `rows` output frames (`GDW_ROWS << code`), where it has one.
fn gdw_rows_code(rows: usize) -> Option<u8> {
    (0..=GDW_MAX_CODE).find(|&code| GDW_ROWS << code == rows)
}

/// The output frames a block `fc_sub_stem` is built for (its entries `fc_sub_stem`,
/// `fc_sub_stem2`, `fc_sub_stem4`).
const STEM_FRAMES: [usize; 3] = [1, 2, 4];

/// `fc_sub_stem`'s output frames a block: `STAPES_CUDA_STEM_FRAMES` = 1, 2 or 4 forces one; unset
/// (0) chooses by shape ([`stem_frames_by_shape`]). More frames a block compute each shared conv0
/// row once (63 FFMAs an output at 1, 54 at 2, 49.5 at 4) in the kernel that led 16 parakeet
/// clips' stem (~205 µs, issue-bound, stop 52).
pub(super) fn stem_frames_default() -> u8 {
    crate::env_usize("STAPES_CUDA_STEM_FRAMES")
        .filter(|f| STEM_FRAMES.contains(f))
        .unwrap_or(0) as u8
}

/// `fc_sub_stem`'s frames a block by shape: 2 where the 2-frame grid still fills the SMs
/// ([`long_blocks_fill`]), else 1.
/// H100, stop 59 calls 2–3, parakeet q8 alternating (ms): 16 clips (2208 blocks at 2 frames),
/// 1 frame 5.300–5.336, 2 frames 5.271–5.303, 4 frames 5.274–5.327; one clip (138 blocks at
/// 2 frames), 1.497–1.500 at 1, 1.497–1.505 at 2, 1.510–1.513 at 4.
fn stem_frames_by_shape(bs: usize, t2: usize, c: usize, sms: usize) -> usize {
    let blocks2 = bs * t2.div_ceil(2) * c.div_ceil(SUB_CH);
    if long_blocks_fill(blocks2, sms) {
        2
    } else {
        1
    }
}

/// `STAPES_CUDA_E4M3_ONLY=0`: `feeding_add_norms`' pass writes its f16 result too where its
/// linear reads only the e4m3 copy; the backend's starting value, default on. H100, stop 49
/// call 4 (an ablation dropping those f16 stores): 16 parakeet q8 clips 6.14–6.21 → 5.90 ms.
pub(super) fn e4m3_only_default() -> bool {
    std::env::var("STAPES_CUDA_E4M3_ONLY").map_or(true, |v| v.trim() != "0")
}

/// `STAPES_CUDA_NORM_E4M3_ONLY=0`: `feeding_add_norms`' last norm writes its f16 result too
/// where its only reader, the next linear, reads just the e4m3 copy (`Feeds::only`); the
/// backend's starting value, default on. H200, stop 53 call 3, alternating: 16 parakeet q8
/// clips 5.596–5.607 ms off, 5.537–5.579 on.
pub(super) fn norm_e4m3_only_default() -> bool {
    std::env::var("STAPES_CUDA_NORM_E4M3_ONLY").map_or(true, |v| v.trim() != "0")
}

/// `STAPES_CUDA_SPLIT_FP8=0`: `linear_add_norms`' split form keeps f16 operands (the q8 weight's
/// f16 copy) for q8 weights; the backend's starting value, default on. H100, stop 43 calls 2 and
/// 4, alternating, one q8 clip: parakeet 1.798–1.835 ms on f16 operands, 1.775–1.803 on e4m3;
/// canary 2.378–2.413, 2.336–2.356 (fc2's slices under ncu 8.0 → 6.5–6.8 µs).
pub(super) fn split_fp8_default() -> bool {
    std::env::var("STAPES_CUDA_SPLIT_FP8").map_or(true, |v| v.trim() != "0")
}

/// `STAPES_CUDA_SPLIT_LN_MIN_K`: the smallest K `linear_add_norms` splits; the backend's starting
/// value. Default 1024: at d = 1024 that takes the attention's output projection and the conv
/// module's second pointwise conv besides the feed-forwards' second GEMM (H200, stop 29 call 4,
/// one parakeet clip on the device: composed 2.40–2.46 ms, fc2 only (2048) 2.16–2.22, all three
/// 2.03–2.06; canary 3.17–3.23, 2.84–2.89, 2.68–2.71).
pub(super) fn split_ln_min_k_default() -> usize {
    crate::env_usize("STAPES_CUDA_SPLIT_LN_MIN_K").unwrap_or(1024)
}

/// Rows up to which `linear_add_norms` splits K: a few clips' frames, whose output tiles leave
/// most SMs idle without a split (parakeet's 140 rows: cuBLASLt splits fc2 there itself).
const SPLIT_LN_MAX_M: usize = 512;
/// Widest row of `splitk_add_ln16` (a block a row, 8 values a thread, 1024 threads).
const SPLIT_LN_MAX_N: usize = 8 * 1024;

impl CudaBackend {
    /// K slices of `linear_add_norms`' split form from now on (2 or 4; anything else composes),
    /// for A/B runs and tests; the default comes from `STAPES_CUDA_SPLIT_LN`.
    #[doc(hidden)]
    pub fn set_split_ln(&self, slices: usize) {
        self.split_ln.store(slices.min(8), Ordering::SeqCst);
    }

    /// The smallest K `linear_add_norms` splits from now on (A/B runs and tests; the default
    /// comes from `STAPES_CUDA_SPLIT_LN_MIN_K`).
    #[doc(hidden)]
    pub fn set_split_ln_min_k(&self, k: usize) {
        self.split_ln_min_k.store(k, Ordering::SeqCst);
    }

    /// The smallest K `linear_add_norms` splits now.
    #[doc(hidden)]
    pub fn split_ln_min_k(&self) -> usize {
        self.split_ln_min_k.load(Ordering::SeqCst)
    }

    /// Whether a tensor of `m` rows of `k` written now in an f16 chain is read next by
    /// `next`'s linear on FP8 from its e4m3 form ([`Backend::linear_add_norms`] included: its
    /// split form reads f16), so the writer may leave that form prepared.
    pub(super) fn feeds_fp8(&self, next: &CudaWeight, m: usize, k: usize) -> bool {
        super::fp8::feed_e4m3_on()
            && next.k == k
            && self.out_dt() == Dtype::F16
            && self.fp8_chain_linear(next, m, None)
            && (!self.split_ln_shape(m, next.n, next.k) || self.split_reads_e4m3(next, m))
    }

    /// Whether `linear_add_norms`' split form over `m` rows of q8 weight `w` reads e4m3
    /// operands (where its input's writer leaves them): the switch, slices of whole 16-byte
    /// rows, and the weight's GEMM on FP8 at all.
    pub(super) fn split_reads_e4m3(&self, w: &CudaWeight, m: usize) -> bool {
        let splits = self.split_ln.load(Ordering::Relaxed).max(1);
        self.split_fp8.load(Ordering::Relaxed)
            && (w.k / splits).is_multiple_of(16)
            && self.fp8_chain_linear(w, m, None)
    }

    /// Whether `linear_add_norms`' split form runs q8 weights on e4m3 operands from now on
    /// (tests and A/B runs; the default comes from `STAPES_CUDA_SPLIT_FP8`).
    #[doc(hidden)]
    pub fn set_split_fp8(&self, on: bool) {
        self.split_fp8.store(on, Ordering::SeqCst);
    }

    /// Whether `linear_add_norms` over `m` rows of a `(n, k)` weight has the split form's
    /// shape (its other conditions are on the operands' types).
    pub(super) fn split_ln_shape(&self, m: usize, n: usize, k: usize) -> bool {
        let splits = self.split_ln.load(Ordering::Relaxed);
        (splits == 2 || splits == 4)
            && m > GEMV_MAX_M
            && m <= SPLIT_LN_MAX_M
            && k >= self.split_ln_min_k()
            && k.is_multiple_of(splits * 8)
            && n.is_multiple_of(8)
            && n <= SPLIT_LN_MAX_N
    }

    /// Whether `feeding_add_norms`' pass writes e4m3 only where it can from now on (tests and
    /// A/B runs; the default comes from `STAPES_CUDA_E4M3_ONLY`).
    #[doc(hidden)]
    pub fn set_e4m3_only(&self, on: bool) {
        self.e4m3_only.store(on, Ordering::SeqCst);
    }

    /// Whether `feeding_add_norms` leaves its last norm in e4m3 only where `Feeds::only` allows
    /// it from now on (tests and A/B runs; the default comes from `STAPES_CUDA_NORM_E4M3_ONLY`).
    #[doc(hidden)]
    pub fn set_norm_e4m3_only(&self, on: bool) {
        self.norm_e4m3_only.store(on, Ordering::SeqCst);
    }

    /// Norms of `feeding_add_norms` that wrote e4m3 only (tests prove it ran).
    #[doc(hidden)]
    pub fn norm_e4m3_only_runs(&self) -> u64 {
        self.norm_e4m3_only_runs.load(Ordering::SeqCst)
    }

    /// Calls of `feeding_add_norms` whose pass wrote e4m3 only (tests prove it ran).
    #[doc(hidden)]
    pub fn e4m3_only_runs(&self) -> u64 {
        self.e4m3_only_runs.load(Ordering::SeqCst)
    }

    /// [`Backend::feeding_add_norms`]: where `w`'s linear over the pass's `m` rows runs on FP8
    /// in `linear_add_norms`' composed form (the split form reads f16), the pass writes only
    /// the e4m3 copy that GEMM reads, and the f16 result, which never leaves this op, stays
    /// unwritten. The GEMM, its epilogue and the norms are the composed form's, so the results
    /// are its bits. Where the FP8 plan is missing after all, the pass runs again with its f16
    /// result and the op composes. On that FP8 path, where `next` is the last norm's only
    /// reader and reads it on FP8, that norm writes only its e4m3 rows too
    /// ([`CudaBackend::norms_feeding_fp8`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn feeding_add_norms_fused(
        &self,
        pass: Feeding<'_, CudaTensor, CudaWeight>,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        r: &CudaTensor,
        norms: &[(&CudaTensor, Option<&CudaTensor>)],
        eps: f32,
        feeds: Option<Feeds<'_, CudaWeight>>,
    ) -> Result<(CudaTensor, Vec<CudaTensor>)> {
        let next = feeds.map(|f| f.w);
        let m = r.numel() / w.n.max(1);
        let applies = self.e4m3_only.load(Ordering::Relaxed)
            && r.dtype == Dtype::F16
            && r.shape.last() == Some(&w.n)
            && !self.split_ln_shape(m, w.n, w.k)
            && self.fp8_chain_linear(w, m, bias);
        let (h, only8) = match applies {
            true => self.feeding_pass(pass, w, false)?,
            false => (feeding_composed(self, pass, w)?, false),
        };
        if !only8 {
            return self.linear_add_norms(&h, w, bias, r, norms, eps, next);
        }
        // the GEMM must find the e4m3 rows prepared: it would convert the unwritten f16 ones
        let found = h.shape.last() == Some(&w.k)
            && h.numel() / w.k.max(1) == m
            && self.prepared(&h.buf, m, w.k, PrepKind::Fp8).is_some();
        let out = self.alloc(&r.shape, Dtype::F16)?;
        if found && self.fp8_linear_prepared(&out, &h, w, bias, self.t(r))? {
            self.e4m3_only_runs.fetch_add(1, Ordering::Relaxed);
            let outs = self.norms_feeding_fp8(&out, norms, eps, feeds)?;
            return Ok((out, outs));
        }
        // no FP8 plan after all (or not the rows it wrote): the pass again, with its f16 result
        let h = feeding_composed(self, pass, w)?;
        self.linear_add_norms(&h, w, bias, r, norms, eps, next)
    }

    /// `feeding_add_norms`' pass with `store16` (false: e4m3 only where the pass writes it),
    /// and whether its f16 result was left unwritten.
    fn feeding_pass(
        &self,
        pass: Feeding<'_, CudaTensor, CudaWeight>,
        next: &CudaWeight,
        store16: bool,
    ) -> Result<(CudaTensor, bool)> {
        match pass {
            Feeding::LinearAct { x, w, bias, act } => {
                match self.linear_act_e4m3(x, w, bias, act, next, store16)? {
                    Some(r) => Ok(r),
                    // what `linear_act_feeding` runs where that form declines
                    None => Ok((self.linear_act_fused(x, w, bias, act)?, false)),
                }
            }
            Feeding::GluDepthwiseAct {
                x,
                keep,
                w,
                bias,
                act,
            } => self.glu_depthwise_act_fused(x, keep, w, bias, act, Some(next), store16),
            Feeding::RelAttention {
                qkv,
                pos,
                bias_u,
                bias_v,
                keep,
                p,
            } => self.rel_attention_fused(qkv, pos, bias_u, bias_v, keep, &p, Some(next), store16),
        }
    }

    /// The norms after `feeding_add_norms`' FP8 GEMM over `s`: the composed form's, except
    /// that where `feeds` is the last result's only reader ([`Feeds::only`]) and its linear
    /// runs on FP8, the last norm writes only that linear's e4m3 rows (the bytes `quant_fp8`
    /// would make of the f16 result) and its block is marked elided: any other read of it
    /// fails. Stop 49's ablation put those f16 stores at ~0.08 ms of 16 parakeet clips.
    fn norms_feeding_fp8(
        &self,
        s: &CudaTensor,
        norms: &[(&CudaTensor, Option<&CudaTensor>)],
        eps: f32,
        feeds: Option<Feeds<'_, CudaWeight>>,
    ) -> Result<Vec<CudaTensor>> {
        let next = feeds.map(|f| f.w);
        let only = feeds.is_some_and(|f| f.only) && self.norm_e4m3_only.load(Ordering::Relaxed);
        let outs = match (norms, next) {
            ([(g, b)], Some(nw)) if only => {
                vec![self.layer_norm_feeding_fused(s, g, *b, eps, nw, false)?]
            }
            ([n1, n2], Some(_)) if only => {
                let (y, z) = self.layer_norm_pair_fused(s, [*n1, *n2], eps, next, false)?;
                vec![y, z]
            }
            _ => return norms_after_composed(self, s, norms, eps, next),
        };
        if outs.last().is_some_and(|z| z.buf.elided()) {
            self.norm_e4m3_only_runs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(outs)
    }

    /// Calls of `linear_add_norms` that took the split form (tests prove it ran).
    #[doc(hidden)]
    pub fn split_ln_runs(&self) -> u64 {
        self.split_ln_runs.load(Ordering::SeqCst)
    }

    /// [`Backend::linear_add_norms`]: in an f16 chain, over at most [`SPLIT_LN_MAX_M`] rows and
    /// K ≥ [`CudaBackend::split_ln_min_k`], the GEMM's K slices as one strided-batched cuBLAS
    /// GEMM into f32 partial products, then `splitk_add_ln16` sums them with the bias and
    /// residual and runs the norms in the same pass: two launches where the composed form has
    /// cuBLASLt's split GEMM, its reduction and the norm kernel. The sum differs from the
    /// composed one in the order of its f32 additions only. Anything else composes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn linear_add_norms_fused(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        r: &CudaTensor,
        norms: &[(&CudaTensor, Option<&CudaTensor>)],
        eps: f32,
        next: Option<&CudaWeight>,
    ) -> Result<(CudaTensor, Vec<CudaTensor>)> {
        let compose = || {
            stapes_core::backend::linear_add_norms_composed(self, x, w, bias, r, norms, eps, next)
        };
        let splits = self.split_ln.load(Ordering::Relaxed);
        let (n, k) = (w.n, w.k);
        let m = x.numel() / k.max(1);
        let mut shape = x.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = n;
        let shapes_ok = x.shape.last() == Some(&k)
            && r.shape == shape
            && bias.is_none_or(|b| b.numel() == n)
            && norms
                .iter()
                .all(|(g, b)| g.numel() == n && b.is_none_or(|b| b.numel() == n));
        if !self.split_ln_shape(m, n, k)
            || !shapes_ok
            || !(1..=2).contains(&norms.len())
            || x.dtype != Dtype::F16
            || r.dtype != Dtype::F16
            || self.out_dt() != Dtype::F16
            || self.ln_q8_target(next, m, n).is_some()
        {
            return compose();
        }
        // e4m3 operands where the input's writer left them (feeds_fp8 asked the same rule)
        let x8 = match self.split_reads_e4m3(w, m) {
            true => self
                .prepared(&x.buf, m, k, PrepKind::Fp8)
                .and_then(|b| b.first().cloned()),
            false => None,
        };
        let fp8 = match x8 {
            Some(x8) => self.q8_fp8_weight(w, m, Dtype::F16)?.map(|f| (f, x8)),
            None => None,
        };
        let s = self.alloc(&shape, Dtype::F16)?;
        let outs = norms
            .iter()
            .map(|_| self.alloc(&shape, Dtype::F16))
            .collect::<Result<Vec<_>>>()?;
        let (gs, bs) = self.norm_params(norms)?;
        let bias32 = self.param(bias)?;
        let partials = self.pool.alloc(splits * m * n * 4)?;
        let (xp, rp, pp) = (self.t(x), self.t(r), partials.ptr);
        let last = norms.len() - 1;
        let (yp, z1, z2) = (
            s.buf.ptr,
            outs[0].buf.ptr,
            if last == 1 { outs[1].buf.ptr } else { 0 },
        );
        if (xp | rp | pp | yp | z1 | z2) % 16 != 0 {
            return compose();
        }
        // the e4m3 form where it applies (the few-row GEMM's slices, else cuBLASLt's strided
        // batch); where neither runs (cuBLASLt's missing plan is remembered, so a capture takes
        // what the eager pass took) the f16 form does
        let mut fp8_ran = false;
        if let Some((f, x8)) = &fp8 {
            let x8p = self.p(x8);
            let tune = !self.capturing.load(Ordering::Relaxed);
            // SAFETY: x8 (m, k) and w (n, k) e4m3, the scale one f32, partials (splits, m, n)
            // f32, all live; k / splits is a multiple of 16 (split_reads_e4m3).
            fp8_ran = self.f8wg_split(pp, x8, f, m, n, k, splits)?
                || x8p.is_multiple_of(16)
                    && unsafe {
                        self.lt
                            .split_k_fp8(
                                &self.stream,
                                pp,
                                f.w.ptr,
                                f.scale.ptr,
                                x8p,
                                self.lt_ws.ptr,
                                m,
                                n,
                                k,
                                splits as u8,
                                tune,
                            )
                            .is_ok()
                    };
        }
        if !fp8_ran {
            let wb = match &w.data {
                WeightData::F16(b) => b.clone(),
                WeightData::Q8 { .. } => match self.q8_f16_weight(w, m)? {
                    Some(h) => h,
                    None => return compose(),
                },
            };
            let wp = self.p(&wb);
            if !wp.is_multiple_of(16) {
                return compose();
            }
            let blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: x (m, k) and w (n, k) f16, partials (splits, m, n) f32, all live; k is a
            // multiple of splits.
            unsafe { crate::gemm::split_k_partials(*blas.handle(), pp, xp, wp, m, n, k, splits)? };
        }
        let (g1, b1) = (self.t(&gs[0]), self.opt(bs[0].as_ref()));
        let (g2, b2) = (self.t(&gs[last]), self.opt(bs[last].as_ref()));
        let bp = self.opt(bias32.as_ref());
        let [mi, ni, si] = [m, n, splits].map(|v| v as i32);
        let threads = (n / 8).div_ceil(32) * 32;
        // an FP8 GEMM next: the last norm also written as its e4m3 input (fp8.rs)
        let z8 = match next {
            Some(nw) if nw.k == n && self.q8_runs_fp8(nw, m, Dtype::F16) => {
                Some(self.pool.alloc(m * n)?)
            }
            _ => None,
        };
        let z8p = z8.as_ref().map_or(0, |b| self.p(b));
        self.launch(
            "splitk_add_ln16",
            (m as u32, 1, 1),
            (threads as u32, 1, 1),
            0,
            args![yp, z1, z2, pp, si, bp, rp, g1, b1, g2, b2, mi, ni, eps, z8p],
        )?;
        if let Some(z8) = z8 {
            self.remember(&outs[last].buf, m, n, PrepKind::Fp8, vec![z8]);
        }
        let counter = match (&w.data, fp8_ran) {
            (WeightData::F16(_), _) => &self.counters.gemm_f16,
            (WeightData::Q8 { .. }, false) => &self.counters.gemm_q8_f16,
            (WeightData::Q8 { .. }, true) => {
                stapes_core::Counters::bump(&self.counters.gemm_q8);
                &self.counters.gemm_q8_fp8
            }
        };
        stapes_core::Counters::bump(counter);
        self.split_ln_runs.fetch_add(1, Ordering::Relaxed);
        Ok((s, outs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `STAPES_CUDA_GDW_ROWS` and `set_gdw_rows` take 16, 32 or 64 frames, nothing else.
    #[test]
    fn gdw_rows_codes_are_the_kernels_shifts() {
        assert_eq!(gdw_rows_code(16), Some(0));
        assert_eq!(gdw_rows_code(32), Some(1));
        assert_eq!(gdw_rows_code(64), Some(2));
        for rows in [0, 8, 48, 128] {
            assert_eq!(gdw_rows_code(rows), None, "{rows} frames");
        }
        // each code launches an entry the conformer kernel file builds
        let file = crate::kernels::FILES
            .iter()
            .find(|f| f.name == "conformer")
            .expect("the conformer kernel file");
        for name in GDW_ENTRIES {
            assert!(file.entries.contains(&name), "{name} not built");
            assert!(
                file.source.contains(&format!("GDW_ENTRY({name},")),
                "{name}'s entry"
            );
        }
    }

    /// `glu_dw_act`'s frames a block by shape on a 132-SM card: 16 parakeet clips (T 140, 1024
    /// channels: 1280 blocks at 32 frames) on 32, one clip (80) on 16; the bound is 4 blocks a SM.
    #[test]
    fn gdw_code_by_shape_follows_the_measured_shapes() {
        assert_eq!(gdw_code_by_shape(16, 140, 1024, 132), 1);
        assert_eq!(gdw_code_by_shape(1, 140, 1024, 132), 0);
        // ceil(t / 32) · 16 · bs blocks against 4 · 132 = 528
        assert_eq!(gdw_code_by_shape(7, 150, 1024, 132), 1);
        assert_eq!(gdw_code_by_shape(6, 150, 1024, 132), 0);
    }

    /// The stem's frames a block by shape on a 132-SM card (H100, H200): the measured shapes
    /// (stop 59) land where the A/B put them, 16 parakeet clips (1100 frames → 138 output
    /// frames, 256 channels) on 2 and one clip on 1; the bound is 4 blocks a SM at 2 frames.
    #[test]
    fn stem_frames_by_shape_follows_the_measured_shapes() {
        assert_eq!(stem_frames_by_shape(16, 138, 256, 132), 2);
        assert_eq!(stem_frames_by_shape(1, 138, 256, 132), 1);
        // 2 · ceil(t2 / 2) · bs blocks against 4 · 132 = 528
        assert_eq!(stem_frames_by_shape(4, 132, 256, 132), 2);
        assert_eq!(stem_frames_by_shape(4, 130, 256, 132), 1);
    }

    /// The host's shared-memory sizes are the kernel's (`static_assert`s on `ra_smem_bytes`,
    /// `rk_warp_bytes` and `rk_q_bytes` in kernels/conformer.cu give the same figures).
    #[test]
    fn rel_attn_smem_matches_the_kernel() {
        assert_eq!(rel_attn_smem(false, 3, 128), 87_744);
        assert_eq!(rel_attn_smem(false, 4, 64), 58_624);
        assert_eq!(rel_attn_smem(true, 1, 128), 8704 + 19712);
        assert_eq!(rel_attn_smem(true, 2, 64), 4608 + 2 * 11520);
        // a block a clip and head of 16 parakeet clips fits the H100's and H200's 227 KiB
        assert!(rel_attn_smem(false, REL_MAX_WARPS, 128) <= 232_448);
        // the staged form (`ra_staged_bytes`'s static_assert): 16 clips of 140 frames fit too
        assert_eq!(rel_staged_smem(140, 9), 224_064);
        assert!(rel_staged_smem(140, REL_MAX_WARPS) <= 232_448);
    }
}
