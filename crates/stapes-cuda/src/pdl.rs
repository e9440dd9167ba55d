//! Programmatic dependent launch (PDL, Hopper sm_90+): a kernel launched with
//! `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` may start while the kernel ahead of it
//! on the stream is still running; it blocks in `griddepcontrol.wait` (`PDL_WAIT` in
//! kernels/common.cuh) until that grid has completed and its writes are visible. What it gains is
//! the launch latency and the previous grid's tail: the next kernel's blocks are resident and
//! may already stream their weights (the decoder-step GEMVs) when the wait returns. Stream
//! capture turns the attribute into programmatic graph edges (CUDA 12.3+), so replays keep it.
//!
//! Only kernels in [`PDL_SAFE`] get the attribute. Each of them runs `PDL_WAIT()` in every thread
//! before any global read of data earlier work produced, before any global write (the kernel
//! ahead may still read what it would overwrite) and before any return, so every grid completes
//! only after the grids it depends on (the chain of waits is what makes the ordering transitive).
//! Kernels not listed (cuBLASLt's, other files' until they adopt the macros) launch as before;
//! a listed kernel after them still waits for them correctly.
//!
//! Where it applies ([`PdlMode`]): by default ([`PdlMode::Linked`]) in decoder steps, label loops
//! and eager work, and inside encoder chains (f16 activations) wherever the work just ahead on
//! the stream is one of our PDL-safe kernels. On the H200 (ledger, stop 13 call 1) it took
//! decoding steps from 0.251 to 0.233 ms (tiny), 0.419 to 0.403 (base), 0.514 to 0.478
//! (canary-1b-flash), while turning it on for every launch inside encoders, whose cuBLASLt GEMMs
//! break the chain of PDL-safe kernels, made them slower (turbo 5.66 to 5.75 ms, parakeet 3.12 to
//! 3.21). Linking only our own kernels (ledger, stop 46 call 1, H100) took one q8 clip from 1.80
//! to 1.55 ms (parakeet), 2.37 to 2.06 (canary), 1.55 to 1.50 (GigaAM), and left turbo, 16 clips
//! and the f16 lane even. `STAPES_CUDA_PDL=0` turns it off, `1` (or `all`) on for every launch,
//! `steps` outside encoder chains only, `linked` the default. Below sm_90 it is always off (the
//! device helpers compile to nothing there).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use cudarc::driver::{sys, DriverError};

use crate::backend::CudaBackend;

/// Which launches carry the attribute.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PdlMode {
    Off,
    /// Outside encoder chains.
    Steps,
    /// Every launch of a [`PDL_SAFE`] kernel.
    All,
    /// As `Steps`, and inside encoder chains where the work just ahead on the stream is a
    /// PDL-safe kernel of ours (not a cuBLAS(Lt) GEMM, a copy or a fill: [`foreign`]). The default.
    Linked,
}

/// The mode when `STAPES_CUDA_PDL` is unset.
pub const DEFAULT_MODE: PdlMode = PdlMode::Linked;

/// Kernels that follow the PDL rules above (sorted, for the binary search at each launch).
/// Adding a name here is a promise about the kernel's code: `PDL_WAIT()` / `PDL_ENTER()` ahead of
/// its first read of produced data and its first write. tests/pdl.rs checks that each name is a
/// kernel entry whose sm_90 PTX holds `griddepcontrol.wait`.
pub const PDL_SAFE: &[&str] = &[
    "act",
    "act8_e4m3",
    "act_e4m3",
    "affine",
    "argmax",
    "attn_combine_f32",
    "attn_one_f32",
    "attn_rows",
    "attn_split_f32",
    "attn_split_kv16",
    "attn_step_f32",
    "attn_step_packed_f32",
    "bias_channels",
    "bias_rows",
    "binary",
    "cast_f32_f16",
    "conv2d_direct",
    "convert2d",
    "copy2d_b128",
    "copy2d_b16",
    "copy2d_b32",
    "depthwise_conv1d",
    "dequant_act_quant",
    "dequant_epilogue",
    "dequant_epilogue_add",
    "embed_step_f32",
    "f8wg_n144s6",
    "f8wg_n72s8",
    "fc_dw_cl",
    "fc_dw_cl_h8",
    "fc_sub_stem",
    "fc_sub_stem2",
    "fc_sub_stem4",
    "flash64_combine",
    "flash64_w4m1s2",
    "flash64_w4m1s3",
    "flash64_w4m2s2",
    "flash64_w4m2s3",
    "flash64_w8m1s2",
    "flash64_w8m1s3",
    "flash64_w8m2s2",
    "flash64_w8m2s3",
    "flash64s_w4m2s2",
    "flash_attn_d128",
    "flash_attn_d64",
    "flash_attn_d64_b4",
    "gemv_f16",
    "gemv_i8",
    "glu",
    "glu_dw_act",
    "glu_dw_act32",
    "glu_dw_act64",
    "heads",
    "im2col_1d",
    "im2col_2d",
    "layer_norm",
    "layer_norm_rows",
    "layer_norm_rows16",
    "layer_norm_rows16_gb",
    "ln_fused",
    "ln_pair_rows16",
    "mask_fill",
    "quantize_rows_i8",
    "rel_attn_d128",
    "rel_attn_d64",
    "rel_attn_inputs",
    "rel_attn_ks_d128",
    "rel_attn_ks_d64",
    "rel_attn_s_d128",
    "rel_attn_t_d128",
    "rel_attn_t_d64",
    "rel_shift_softmax",
    "rel_shift_softmax_rows",
    "rms_norm",
    "rotary_half",
    "softmax",
    "splitk_add_ln16",
    "step_gemv_1",
    "step_gemv_1_c1",
    "step_gemv_2",
    "step_gemv_2_c1",
    "step_gemv_4",
    "step_gemv_4_c1",
    "step_gemv_8",
    "step_gemv_8_c1",
    "transpose_b16",
    "transpose_b32",
    "write_rows_step_f32",
];

/// Whether `name` is in [`PDL_SAFE`].
pub fn is_safe(name: &str) -> bool {
    PDL_SAFE.binary_search(&name).is_ok()
}

/// 0: not read yet, 1: all, 2: off, 3: steps, 4: linked.
static MODE: AtomicU8 = AtomicU8::new(0);

fn code(m: PdlMode) -> u8 {
    match m {
        PdlMode::All => 1,
        PdlMode::Off => 2,
        PdlMode::Steps => 3,
        PdlMode::Linked => 4,
    }
}

/// Work issued on the stream that is not a kernel launch of ours, counted where it is issued
/// (gemm.rs's cuBLAS and cuBLASLt calls, the backend's copies and fills).
static FOREIGN: AtomicU64 = AtomicU64::new(0);

/// The last launch of ours: `FOREIGN`'s count then, times 2, plus 1 where it was PDL-safe.
static PREV: AtomicU64 = AtomicU64::new(0);

/// Count work on the stream that is not one of our kernels (see [`PdlMode::Linked`]).
pub(crate) fn foreign() {
    FOREIGN.fetch_add(1, Ordering::Relaxed);
}

/// Record a launch (`safe`: of a PDL-safe kernel) and say whether the work just ahead of it was
/// a PDL-safe kernel of ours. Only `linked` records launches, and the counters are process-wide:
/// right after a switch into `linked`, or with several streams at once, the answer is a guess,
/// which costs speed only (a PDL-safe kernel waits correctly after anything).
fn follows_safe(safe: bool) -> bool {
    let now = FOREIGN.load(Ordering::Relaxed) << 1;
    PREV.swap(now | u64::from(safe), Ordering::Relaxed) == now | 1
}

/// The last [`set_mode`], else `STAPES_CUDA_PDL`, else [`DEFAULT_MODE`].
pub fn mode() -> PdlMode {
    match MODE.load(Ordering::Relaxed) {
        1 => PdlMode::All,
        2 => PdlMode::Off,
        3 => PdlMode::Steps,
        4 => PdlMode::Linked,
        _ => {
            let m = match std::env::var("STAPES_CUDA_PDL").as_deref().map(str::trim) {
                Ok("0") | Ok("off") => PdlMode::Off,
                Ok("steps") => PdlMode::Steps,
                Ok("linked") => PdlMode::Linked,
                Ok(v) if !v.is_empty() => PdlMode::All,
                _ => DEFAULT_MODE,
            };
            MODE.store(code(m), Ordering::Relaxed);
            m
        }
    }
}

/// Set the mode for the process from the next launch on (same-binary A/B runs and tests).
/// Graphs captured before keep the edges they were captured with.
pub fn set_mode(m: PdlMode) {
    MODE.store(code(m), Ordering::SeqCst);
}

/// [`set_mode`] with [`PdlMode::All`] or [`PdlMode::Off`].
pub fn set_enabled(on: bool) {
    set_mode(if on { PdlMode::All } else { PdlMode::Off });
}

/// `compute_XY` with XY ≥ 90: the device runs `griddepcontrol`.
fn arch_has_pdl(arch: &str) -> bool {
    arch.strip_prefix("compute_")
        .and_then(|v| v.parse::<u32>().ok())
        .is_some_and(|v| v >= 90)
}

impl CudaBackend {
    /// Whether a launch of `name` now carries the PDL attribute.
    pub(crate) fn pdl_for(&self, name: &str) -> bool {
        let safe = is_safe(name);
        let here = match mode() {
            PdlMode::Off => false,
            PdlMode::Steps => !self.in_f16_chain(),
            // every launch records itself while linked, whatever the answer
            PdlMode::Linked => follows_safe(safe) || !self.in_f16_chain(),
            PdlMode::All => true,
        };
        here && safe && arch_has_pdl(self.device_info().1)
    }

    /// Whether this device runs PDL-safe kernels with programmatic dependent launch now
    /// (in the default mode outside encoder chains, and inside them between our own kernels).
    pub fn pdl_active(&self) -> bool {
        mode() != PdlMode::Off && arch_has_pdl(self.device_info().1)
    }
}

/// `cuLaunchKernelEx` with programmatic stream serialization allowed.
///
/// # Safety
/// As `cuLaunchKernel`: `params` matches the kernel's parameter list, `f` and `stream` are live
/// in the current context.
pub(crate) unsafe fn launch(
    f: sys::CUfunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> Result<(), DriverError> {
    // SAFETY: a zeroed union is a valid value of every member; the one the id names is set below.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: smem,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: `config` and `attr` outlive the call; the rest is the caller's promise.
    unsafe { sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()) }.result()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_is_sorted_and_unique() {
        assert!(PDL_SAFE.windows(2).all(|w| w[0] < w[1]));
        assert!(is_safe("step_gemv_1") && !is_safe("i8gemm_bm128"));
    }

    #[test]
    fn arch_gate() {
        assert!(arch_has_pdl("compute_90") && arch_has_pdl("compute_100"));
        assert!(!arch_has_pdl("compute_89") && !arch_has_pdl("sm_90") && !arch_has_pdl(""));
    }
}
