//! `CudaBackend`: the op contract on one GPU.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cublas::CudaBlas;
use cudarc::driver::{result, sys, CudaContext, CudaStream, DriverError};
use half::f16;
use half::slice::HalfFloatSliceExt;
use stapes_core::lane::Q8_BLOCK;
use stapes_core::{
    Activation, AttnParams, Backend, Conv1dParams, Conv2dParams, Counters, DeviceTensor, Error,
    HostTensor, Lane, Result, WeightData as CoreWeightData, WeightView,
};

use crate::gemm::{self, EpiAct, Lt, LtKind};
use crate::graph::Graphs;
use crate::kernels::Kernels;
use crate::pool::{Block, Pool};
use crate::{loader, CudaError};

/// Decoder-step GEMMs (at most this many rows) use the GEMV kernels instead of the libraries.
const GEMV_MAX_M: usize = 8;
/// cuBLAS / cuBLASLt workspaces, so neither allocates inside a graph capture.
pub(crate) const WORKSPACE_BYTES: usize = 32 << 20;

/// Element type of an activation on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Dtype {
    F32,
    F16,
}

/// Widest row of `layer_norm_rows16_gb` (norm.cu: 5 chunks of 8 halves a lane).
const LN16_GB_MAX_N: usize = 1280;
/// Columns an `im2col_1d` thread writes where they divide the row (`IM2COL_PER` in
/// kernels/conv.cu); the launch sizes its grid by them.
const IM2COL_PER: usize = 4;
/// Channels × taps a 2-D convolution's output reads at least before it runs as im2col + GEMM
/// (a stem's first conv from one channel, 9 taps, stays direct).
const CONV2D_GEMM_MIN_K: usize = 64;

impl Dtype {
    pub(crate) fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 => 2,
        }
    }

    /// 1 for f16: the kernels' `dt` bits (common.cuh).
    fn bit(self) -> i32 {
        (self == Dtype::F16) as i32
    }
}

/// An activation on the device, f32 or f16: contiguous, row-major, starting at its block.
///
/// The dtype rule: inside an encoder [`Backend::chain`] (key's first `/`-segment ending in
/// `encoder`) with f16 activations on (the default, see [`CudaBackend::set_f16_activations`])
/// every op writes f16; everywhere else (eager ops, decoder-step chains) ops write f32.
/// Copies (`slice`, `concat`, `transpose_last2`, gathers, `reshape`) keep their input's type,
/// `write_rows` the destination's. Every op reads either type and computes in f32; norms and
/// softmaxes accumulate in f32. Parameters (biases, norm weights, conv kernels, masks) are read
/// as f32 (an f16 one is widened first). `upload` makes f32, `download` always returns f32.
#[derive(Clone)]
pub struct CudaTensor {
    pub(crate) buf: Arc<Block>,
    shape: Vec<usize>,
    pub(crate) dtype: Dtype,
}

impl DeviceTensor for CudaTensor {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
}

impl std::fmt::Debug for CudaTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaTensor{:?}{:?}@{:#x}",
            self.shape, self.dtype, self.buf.ptr
        )
    }
}

impl CudaTensor {
    /// The device address (for tests of address stability and for graph inputs).
    pub fn device_ptr(&self) -> u64 {
        self.buf.ptr
    }

    /// True when the elements are f16 (see the dtype rule on [`CudaTensor`]).
    pub fn is_f16(&self) -> bool {
        self.dtype == Dtype::F16
    }

    fn bit(&self) -> i32 {
        self.dtype.bit()
    }
}

pub(crate) enum WeightData {
    /// (n, k) f16, row-major.
    F16(Arc<Block>),
    /// (n_pad, k_pad) int8 with one f32 scale per output row; padding is zero.
    Q8 {
        w8: Arc<Block>,
        scales: Arc<Block>,
        n_pad: usize,
        k_pad: usize,
    },
}

/// A GEMM weight `(N, K)` stored in a lane.
///
/// q8 on this home: the lane's values (32-blocks with f16 scales, `lane::round_trip`) are
/// re-laid at load as int8 with one scale per output row, so the int8 tensor cores (one scale
/// per row/column) can take them; activations are quantized per row on the fly. This adds the
/// per-row requantization error on top of the lane's; the accuracy tests bound the total.
pub struct CudaWeight {
    n: usize,
    k: usize,
    lane: Lane,
    pub(crate) data: WeightData,
    /// q8: the lane's values as `(n, k)` f16 for the GEMM shapes that run on the f16 tensor
    /// cores, made at the first such use (q8_mix.rs).
    pub(crate) f16_copy: Mutex<Option<Arc<Block>>>,
    /// q8: the e4m3 copy and its scale for the GEMMs that run on FP8 (fp8.rs), made at the
    /// first such use.
    pub(crate) fp8_copy: Mutex<Option<Arc<fp8::Fp8Weight>>>,
}

impl CudaWeight {
    pub fn lane(&self) -> Lane {
        self.lane
    }
}

/// `f(row index, row of a, row of b)` over the rows of `a` (`a_len` elements each) and `b`
/// (`b_len` each; 0 = no `b`), on up to 8 threads when there is enough work (start-up: the
/// embedding tables of the larger models are 50–250 M values).
fn par_rows<A: Send, B: Send>(
    a: &mut [A],
    b: &mut [B],
    a_len: usize,
    b_len: usize,
    f: impl Fn(usize, &mut [A], &mut [B]) + Sync,
) {
    if a_len == 0 || a.is_empty() {
        return;
    }
    let rows = a.len() / a_len;
    let threads = if a.len() < (1 << 20) {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
    };
    let per = rows.div_ceil(threads.max(1));
    let run = |first: usize, a: &mut [A], b: &mut [B]| {
        for (i, ra) in a.chunks_mut(a_len).enumerate() {
            let rb = if b_len == 0 {
                &mut [][..]
            } else {
                &mut b[i * b_len..(i + 1) * b_len]
            };
            f(first + i, ra, rb);
        }
    };
    if threads <= 1 {
        return run(0, a, b);
    }
    std::thread::scope(|s| {
        let mut b_rest = b;
        for (c, ca) in a.chunks_mut(per * a_len).enumerate() {
            let take = if b_len == 0 {
                0
            } else {
                ca.len() / a_len * b_len
            };
            let (cb, rest) = std::mem::take(&mut b_rest).split_at_mut(take);
            b_rest = rest;
            let run = &run;
            s.spawn(move || run(c * per, ca, cb));
        }
    });
}

fn round_up(x: usize, m: usize) -> usize {
    x.div_ceil(m) * m
}

/// Grid for a grid-stride element-wise kernel with 256 threads per block.
fn grid_1d(n: usize) -> (u32, u32, u32) {
    (n.div_ceil(256).clamp(1, 132 * 32) as u32, 1, 1)
}

/// The grid of an element-wise kernel over `n` values that takes them 4 at a time when `wide`
/// (kernels/elementwise.cu): a thread an access, so no block is launched only to find nothing
/// left (one parakeet clip's SiLU pass: 560 blocks instead of 2240).
fn grid_1d_x4(n: usize, wide: bool) -> (u32, u32, u32) {
    grid_1d(if wide { n / 4 } else { n })
}

/// A GEMM input converted once (to f16, or quantized to int8 + row scales) and reused by the
/// following linears that read the same tensor: q, k and v all read one layer-normed activation.
/// Tensors are immutable once written except through `write_rows`, `write_host` and graph
/// replays, which all forget the entry; holding `src` keeps its block from being recycled.
struct Prep {
    src: Arc<Block>,
    m: usize,
    k: usize,
    kind: PrepKind,
    bufs: Vec<Arc<Block>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PrepKind {
    F16,
    I8 { k_pad: usize },
    Fp8,
}

/// f32 bias block address -> (that block, its f16 copy).
type BiasCache = std::collections::HashMap<u64, (Arc<Block>, Arc<Block>)>;

/// Pointer to a kernel argument, as `cuLaunchKernel` wants it.
macro_rules! args {
    ($($a:expr),* $(,)?) => { &mut [$(&$a as *const _ as *mut c_void),*] };
}

#[path = "conformer.rs"]
mod conformer;
// `impl CudaBackend` for `linear`, `linear_add` and `linear_act` (a child module, after `args!`:
// it uses this module's internals and the macro)
#[path = "linear_add.rs"]
mod linear_add;
// the q8 lane's own int8 tensor-core GEMM with the scaling epilogue in registers (i8gemm.rs)
#[path = "i8gemm.rs"]
mod i8gemm;
// TMA descriptions and the dynamic shared-memory opt-in of the Hopper kernels (tma.rs)
#[path = "tma.rs"]
mod tma;
// head size 64 attention (`flash64_*`) and `attention_packed`; a child module like `linear_add`
#[path = "attention.rs"]
mod attention;
// the q8 lane's GEMMs by shape: int8 or the f16 tensor cores on an f16 copy (q8_mix.rs)
#[path = "q8_mix.rs"]
mod q8_mix;
pub use q8_mix::Q8Mix;
// the q8 lane's large GEMMs on the e4m3 tensor cores (fp8.rs)
#[path = "fp8.rs"]
mod fp8;

/// The op contract on one GPU. All work goes to one stream, in call order; ops may be called
/// from any thread (the context is made current as needed), but a graph capture records every
/// launch on that stream, so nothing else may use the backend while [`CudaBackend::capture`] /
/// [`CudaBackend::run_graph`] is capturing.
pub struct CudaBackend {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    kernels: Kernels,
    blas: Mutex<CudaBlas>,
    lt: Lt,
    _blas_ws: Arc<Block>,
    lt_ws: Arc<Block>,
    pub(crate) pool: Arc<Pool>,
    counters: Counters,
    pub(crate) capturing: AtomicBool,
    /// Blocks read by ops during a capture: kept alive as long as the graph.
    pub(crate) capture_keep: Mutex<Vec<Arc<Block>>>,
    pub(crate) graphs: Graphs,
    prep: Mutex<Option<Prep>>,
    /// Which d = 64 attention kernel runs (0 plain, 1 register-capped for 4 blocks per SM, the
    /// default: 7% faster on the H200); see `set_attention_variant`.
    fa_variant: std::sync::atomic::AtomicU8,
    /// Chains keep activations in f16 (`set_f16_activations`).
    f16_chains: AtomicBool,
    /// Inside such a chain now: ops write f16.
    f16_scope: AtomicBool,
    /// f16-output GEMMs take an f16 copy of their bias into cuBLASLt's epilogue (on by default:
    /// the H200 has no plan for an f16 output with an f32 bias; `STAPES_CUDA_BIAS16=0` turns it off).
    bias16_on: AtomicBool,
    /// Many-channel 2-D convolutions in f16 chains as im2col + a tensor-core GEMM (on unless
    /// `STAPES_CUDA_CONV2D_GEMM=0`; off, the direct kernel).
    conv2d_gemm: AtomicBool,
    bias16: Mutex<BiasCache>,
    /// K slices of `linear_add_norms`' split form, 0 or 1 for the composed form (conformer.rs).
    split_ln: std::sync::atomic::AtomicUsize,
    split_ln_runs: std::sync::atomic::AtomicU64,
    /// The smallest K the split form takes.
    split_ln_min_k: std::sync::atomic::AtomicUsize,
    /// Whether `linear_add_norms`' split form runs q8 weights on e4m3 operands (conformer.rs).
    split_fp8: AtomicBool,
    /// The few-row FP8 GEMM (fp8.rs `f8wg`): 0 off, 1 the form picked by shape, 2 + i form i.
    f8wg: std::sync::atomic::AtomicUsize,
    f8wg_runs: std::sync::atomic::AtomicU64,
    /// The e4m3 copy of a q8 weight made last (its address): its conversion may be the kernel
    /// just ahead of the next GEMM, which then must not read it before its PDL wait (fp8.rs).
    fp8_made: std::sync::atomic::AtomicU64,
    /// Whether the few-row FP8 GEMM takes `linear_add_norms`' K slices (fp8.rs `f8wg_split`).
    f8wg_split: AtomicBool,
    /// How a SiLU after cuBLASLt's FP8 GEMM reaches the next FP8 GEMM where only that GEMM
    /// reads it (fp8.rs `lt_act_e4m3`): 0 through an f16 hidden, 1 e4m3 with a table, 2 e4m3
    /// computed; and the launches that took an e4m3 form.
    hidden_e4m3: std::sync::atomic::AtomicU8,
    hidden_e4m3_runs: std::sync::atomic::AtomicU64,
    /// Whether the fused rel-attention writes e4m3 for an output projection on FP8
    /// (conformer.rs `rel_attention_fused`).
    rel_e4m3: AtomicBool,
    /// Whether the fused rel-attention skips a partial last key tile's products past the
    /// sequence (conformer.rs `rel_tail_default`).
    rel_tail: AtomicBool,
    /// Whether the plain rel-attention for heads of 128 stages its whole (b, h) where it fits,
    /// and the launches that did (conformer.rs `rel_staged_default`).
    rel_staged: AtomicBool,
    rel_staged_runs: std::sync::atomic::AtomicU64,
    /// `glu_dw_act`'s output frames a block, as `GDW_ROWS << code`, or by shape (conformer.rs).
    gdw_rows: std::sync::atomic::AtomicU8,
    /// `fc_sub_stem`'s output frames a block: 1, 2 or 4, or 0 by shape (conformer.rs).
    stem_frames: std::sync::atomic::AtomicU8,
    /// Whether `feeding_add_norms`' pass writes e4m3 only where its linear runs on FP8
    /// (conformer.rs `feeding_add_norms_fused`), and the calls that did.
    e4m3_only: AtomicBool,
    e4m3_only_runs: std::sync::atomic::AtomicU64,
    /// Whether `feeding_add_norms` leaves its last norm in e4m3 only where `Feeds::only`
    /// allows it (conformer.rs `norms_feeding_fp8`), and the norms that did.
    norm_e4m3_only: AtomicBool,
    norm_e4m3_only_runs: std::sync::atomic::AtomicU64,
    /// An op took the address of a block whose values were never written ([`Block::elided`]):
    /// the next launch or download fails instead of computing on them.
    read_elided: AtomicBool,
    /// Functions of this backend's modules (by `CUfunction` address) whose dynamic
    /// shared-memory limit was raised, with the limit (`allow_dyn_smem`). Kept per backend: a
    /// module loaded by a later backend may reuse a dropped one's function addresses.
    pub(crate) smem_raised: Mutex<Vec<(usize, usize)>>,
    arch: &'static str,
    name: String,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBackend({}, {})", self.name, self.arch)
    }
}

impl CudaBackend {
    /// Open device `ordinal`. A machine without a driver, libraries or that device gets an `Err`
    /// saying which; cudarc's panics on missing symbols are caught.
    pub fn new(ordinal: usize) -> std::result::Result<Self, CudaError> {
        loader::ensure_all()?;
        match std::panic::catch_unwind(|| Self::open(ordinal)) {
            Ok(r) => r,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                Err(CudaError::Library(format!(
                    "cudarc panicked while opening the device: {msg}"
                )))
            }
        }
    }

    fn open(ordinal: usize) -> std::result::Result<Self, CudaError> {
        let count = CudaContext::device_count().map_err(|e| CudaError::NoDevice {
            ordinal,
            detail: format!("{e:?}"),
        })?;
        if ordinal >= count.max(0) as usize {
            return Err(CudaError::NoDevice {
                ordinal,
                detail: format!("{count} device(s) present"),
            });
        }
        // start-up phases are spans (stapes::profile records them; free when nobody listens)
        let span_ctx = tracing::info_span!("cuda.context").entered();
        let ctx = CudaContext::new(ordinal).map_err(|e| CudaError::driver("cuCtxCreate", e))?;
        // All work is ordered on one stream by us; cudarc's per-slice events would also break capture.
        // SAFETY: called before any allocation in this context.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| CudaError::driver("cuStreamCreate", e))?;
        let (maj, min) = ctx
            .compute_capability()
            .map_err(|e| CudaError::driver("compute capability", e))?;
        // the attention kernel's mma.sync m16n8k16 needs sm_80
        if maj < 8 {
            return Err(CudaError::NoDevice {
                ordinal,
                detail: format!("compute capability {maj}.{min} < 8.0"),
            });
        }
        let arch: &'static str = Box::leak(format!("compute_{maj}{min}").into_boxed_str());
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        drop(span_ctx);
        let kernels = Kernels::load(&ctx, arch)?;
        let pool = Pool::new(ctx.clone());
        let span_blas = tracing::info_span!("cuda.cublas").entered();
        let blas = CudaBlas::new(stream.clone())
            .map_err(|e| CudaError::Blas(format!("create handle: {e:?}")))?;
        let blas_ws = pool.alloc(WORKSPACE_BYTES)?;
        // SAFETY: the workspace outlives the handle (both owned by the backend).
        unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(
                *blas.handle(),
                blas_ws.ptr as *mut c_void,
                WORKSPACE_BYTES,
            )
        }
        .result()
        .map_err(|e| CudaError::Blas(format!("set workspace: {e:?}")))?;
        let lt_ws = pool.alloc(WORKSPACE_BYTES)?;
        let lt = Lt::new(WORKSPACE_BYTES, &Lt::device_tag(&name, arch))?;
        drop(span_blas);
        let graphs_on = std::env::var("STAPES_CUDA_GRAPHS")
            .map(|v| v.trim() != "0")
            .unwrap_or(true);
        Ok(Self {
            ctx,
            stream,
            kernels,
            blas: Mutex::new(blas),
            lt,
            _blas_ws: blas_ws,
            lt_ws,
            pool,
            counters: Counters::default(),
            capturing: AtomicBool::new(false),
            capture_keep: Mutex::new(Vec::new()),
            graphs: Graphs::new(graphs_on),
            prep: Mutex::new(None),
            fa_variant: std::sync::atomic::AtomicU8::new(1),
            f16_chains: AtomicBool::new(
                std::env::var("STAPES_CUDA_F16_ACT")
                    .map(|v| v.trim() != "0")
                    .unwrap_or(true),
            ),
            f16_scope: AtomicBool::new(false),
            bias16_on: AtomicBool::new(
                std::env::var("STAPES_CUDA_BIAS16")
                    .map(|v| v.trim() != "0")
                    .unwrap_or(true),
            ),
            bias16: Mutex::new(BiasCache::new()),
            conv2d_gemm: AtomicBool::new(
                std::env::var("STAPES_CUDA_CONV2D_GEMM")
                    .map(|v| v.trim() != "0")
                    .unwrap_or(true),
            ),
            split_ln: std::sync::atomic::AtomicUsize::new(conformer::split_ln_default()),
            split_ln_runs: std::sync::atomic::AtomicU64::new(0),
            split_ln_min_k: std::sync::atomic::AtomicUsize::new(conformer::split_ln_min_k_default()),
            split_fp8: AtomicBool::new(conformer::split_fp8_default()),
            f8wg: std::sync::atomic::AtomicUsize::new(fp8::f8wg_default()),
            f8wg_runs: std::sync::atomic::AtomicU64::new(0),
            fp8_made: std::sync::atomic::AtomicU64::new(0),
            f8wg_split: AtomicBool::new(fp8::f8wg_split_default()),
            hidden_e4m3: std::sync::atomic::AtomicU8::new(fp8::hidden_e4m3_default()),
            hidden_e4m3_runs: std::sync::atomic::AtomicU64::new(0),
            rel_e4m3: AtomicBool::new(conformer::rel_e4m3_default()),
            rel_tail: AtomicBool::new(conformer::rel_tail_default()),
            rel_staged: AtomicBool::new(conformer::rel_staged_default()),
            rel_staged_runs: std::sync::atomic::AtomicU64::new(0),
            gdw_rows: std::sync::atomic::AtomicU8::new(conformer::gdw_rows_default()),
            stem_frames: std::sync::atomic::AtomicU8::new(conformer::stem_frames_default()),
            e4m3_only: AtomicBool::new(conformer::e4m3_only_default()),
            e4m3_only_runs: std::sync::atomic::AtomicU64::new(0),
            norm_e4m3_only: AtomicBool::new(conformer::norm_e4m3_only_default()),
            norm_e4m3_only_runs: std::sync::atomic::AtomicU64::new(0),
            read_elided: AtomicBool::new(false),
            smem_raised: Mutex::new(Vec::new()),
            arch,
            name,
        })
    }

    /// Keep activations in f16 between the ops of encoder chains (keys whose first `/`-segment
    /// ends in `encoder`; other chains stay f32) (on by default;
    /// `STAPES_CUDA_F16_ACT=0` starts with it off). Off, chains run with f32 activations as
    /// eager ops do: the reference mode of the exactness tests. Graphs are keyed by the mode.
    pub fn set_f16_activations(&self, on: bool) {
        self.f16_chains.store(on, Ordering::SeqCst);
    }

    pub fn f16_activations(&self) -> bool {
        self.f16_chains.load(Ordering::SeqCst)
    }

    /// f16-output GEMMs hand cuBLASLt an f16 copy of their bias (on at open unless
    /// `STAPES_CUDA_BIAS16=0`).
    #[doc(hidden)]
    pub fn set_bias_f16(&self, on: bool) {
        self.bias16_on.store(on, Ordering::SeqCst);
    }

    /// Run many-channel 2-D convolutions in f16 chains as im2col + a tensor-core GEMM (the
    /// default) or with the direct kernel, for the tests that compare the two.
    #[doc(hidden)]
    pub fn set_conv2d_gemm(&self, on: bool) {
        self.conv2d_gemm.store(on, Ordering::SeqCst);
    }

    /// The type ops write now (the dtype rule on [`CudaTensor`]).
    fn out_dt(&self) -> Dtype {
        if self.f16_scope.load(Ordering::Relaxed) {
            Dtype::F16
        } else {
            Dtype::F32
        }
    }

    /// Device name and NVRTC target, e.g. ("NVIDIA H200", "compute_90").
    pub fn device_info(&self) -> (&str, &'static str) {
        (&self.name, self.arch)
    }

    /// (bytes reserved from the driver, bytes in live tensors and weights).
    pub fn memory_usage(&self) -> (usize, usize) {
        self.pool.usage()
    }

    /// High-water marks since the last [`CudaBackend::reset_memory_peak`] (or since open):
    /// (bytes reserved from the driver, bytes in live tensors and weights).
    pub fn memory_peak(&self) -> (usize, usize) {
        self.pool.peak()
    }

    /// Restart the high-water marks at the current usage.
    pub fn reset_memory_peak(&self) {
        self.pool.reset_peak()
    }

    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("bind context", e).into())
    }

    /// The first `n` elements of `blk` on the host, the stream synchronized.
    fn read_back<T: cudarc::driver::DeviceRepr + Copy>(
        &self,
        blk: &Block,
        zero: T,
        n: usize,
    ) -> Result<Vec<T>> {
        self.mark_read(blk);
        self.check_elided("download")?;
        let mut data = vec![zero; n];
        if n > 0 {
            // SAFETY: callers pass a block holding at least n elements of T; the stream is
            // synchronized before `data` is read.
            unsafe { self.copy_dtoh(&mut data, blk.ptr) }
                .map_err(|e| CudaError::driver("memcpy DtoH", e))?;
        }
        self.stream
            .synchronize()
            .map_err(|e| CudaError::driver("stream synchronize", e))?;
        Ok(data)
    }

    /// Address of a block an op reads; during a capture the block is kept for the graph.
    pub(crate) fn p(&self, b: &Arc<Block>) -> u64 {
        self.mark_read(b);
        if self.capturing.load(Ordering::Relaxed) {
            self.capture_keep
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(b.clone());
        }
        b.ptr
    }

    /// Records a read of `b`'s values, for [`Self::check_elided`].
    fn mark_read(&self, b: &Block) {
        if b.elided() {
            self.read_elided.store(true, Ordering::Relaxed);
        }
    }

    /// Fails where an op since the last check took the address of an elided block (a norm's
    /// result left as its FP8 GEMM's e4m3 rows only): its f16 values are not there to read.
    pub(crate) fn check_elided(&self, op: &str) -> Result<()> {
        // every launch asks: a plain load, the swap only once a read was marked
        let marked = self.read_elided.load(Ordering::Relaxed)
            && self.read_elided.swap(false, Ordering::Relaxed);
        match marked {
            false => Ok(()),
            true => Err(Error::Device(format!(
                "{op}: an input is a norm's result kept only as its FP8 GEMM's e4m3 rows \
                 (Feeds::only); its f16 values were never written"
            ))),
        }
    }

    fn t(&self, t: &CudaTensor) -> u64 {
        self.p(&t.buf)
    }

    fn opt(&self, t: Option<&CudaTensor>) -> u64 {
        t.map(|t| self.t(t)).unwrap_or(0)
    }

    fn alloc(&self, shape: &[usize], dtype: Dtype) -> Result<CudaTensor> {
        let n: usize = shape.iter().product();
        Ok(CudaTensor {
            buf: self.pool.alloc(n.max(1) * dtype.size())?,
            shape: shape.to_vec(),
            dtype,
        })
    }

    fn alloc_f32(&self, shape: &[usize]) -> Result<CudaTensor> {
        self.alloc(shape, Dtype::F32)
    }

    /// `t` as `dtype`: the same tensor when it already is, else a converted copy.
    pub(crate) fn as_dtype(&self, t: &CudaTensor, dtype: Dtype) -> Result<CudaTensor> {
        if t.dtype == dtype {
            return Ok(t.clone());
        }
        let out = self.alloc(&t.shape, dtype)?;
        let n = t.numel();
        self.copy2d(out.buf.ptr, dtype, self.t(t), t.dtype, 1, n, n, n)?;
        Ok(out)
    }

    /// A parameter read as f32 by the kernels (bias, norm weight, conv kernel, mask).
    fn param(&self, t: Option<&CudaTensor>) -> Result<Option<CudaTensor>> {
        t.map(|t| self.as_dtype(t, Dtype::F32)).transpose()
    }

    /// Inside an encoder chain with f16 activations now.
    pub(crate) fn in_f16_chain(&self) -> bool {
        self.f16_scope.load(Ordering::Relaxed)
    }

    pub(crate) fn launch(
        &self,
        name: &'static str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        smem: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.check_elided(name)?;
        // ops may come from any thread; the context must be current on this one
        self.bind()?;
        let f = self.kernels.get(name)?;
        // SAFETY: every kernel's parameter list matches the `args!` built at its call site
        // (pointers as u64, `int` as i32, `long long` as i64, `float` as f32).
        unsafe {
            // [pdl] PDL-safe kernels on sm_90+ may start before the kernel ahead finishes
            if self.pdl_for(name) {
                crate::pdl::launch(
                    f.cu_function(),
                    grid,
                    block,
                    smem,
                    self.stream.cu_stream(),
                    params,
                )
            } else {
                result::launch_kernel(
                    f.cu_function(),
                    grid,
                    block,
                    smem,
                    self.stream.cu_stream(),
                    params,
                )
            }
        }
        .map_err(|e| CudaError::Driver {
            what: name,
            detail: format!("{e:?}"),
        })?;
        if !self.capturing.load(Ordering::Relaxed) {
            Counters::bump(&self.counters.ops);
        }
        Ok(())
    }

    /// Streaming multiprocessors of the device, read once (the backend drives one device; 132,
    /// the H200's, where the query fails: only grid shapes depend on it).
    pub(crate) fn sm_count(&self) -> usize {
        static SMS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *SMS.get_or_init(|| {
            use cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as A;
            self.context()
                .attribute(A)
                .map_or(132, |n| n.max(1) as usize)
        })
    }

    /// Dynamic shared memory a block may opt into on this device, read once (227 KiB, the
    /// H100's and H200's, where the query fails).
    pub(crate) fn smem_optin(&self) -> usize {
        static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *BYTES.get_or_init(|| {
            use cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN as A;
            self.context()
                .attribute(A)
                .map_or(232_448, |n| n.max(0) as usize)
        })
    }

    /// Blocks of kernel `name` resident on one SM at `threads` a block and `smem` bytes of
    /// dynamic shared memory (the driver's occupancy answer, kept per shape; 1 where it has
    /// none), for grids sized to one wave.
    pub(crate) fn resident_blocks(
        &self,
        name: &'static str,
        threads: u32,
        smem: u32,
    ) -> Result<usize> {
        type Key = (&'static str, u32, u32);
        static SEEN: Mutex<Vec<(Key, usize)>> = Mutex::new(Vec::new());
        let key = (name, threads, smem);
        let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&(_, n)) = seen.iter().find(|(k, _)| *k == key) {
            return Ok(n);
        }
        self.bind()?;
        let f = self.kernels.get(name)?;
        // SAFETY: `f` is a loaded function of this context
        let n = unsafe {
            result::occupancy::max_active_block_per_multiprocessor(
                f.cu_function(),
                threads as i32,
                smem as usize,
            )
        }
        .map_or(1, |n| n.max(1) as usize);
        seen.push((key, n));
        Ok(n)
    }

    fn no_capture(&self, op: &'static str) -> Result<()> {
        if self.capturing.load(Ordering::Relaxed) {
            return Err(self.decline(op, "host transfer inside a graph capture".into()));
        }
        Ok(())
    }

    /// Overwrite a tensor's contents from the host (same element count), e.g. a graph's input
    /// before [`CudaBackend::run_graph`] replays it.
    pub fn write_host(&self, dst: &mut CudaTensor, src: &HostTensor) -> Result<()> {
        self.no_capture("write_host")?;
        self.forget_prep();
        if dst.numel() != src.len() {
            return Err(Error::shape(
                "write_host",
                format!("{:?} <- {:?}", dst.shape, src.shape),
            ));
        }
        self.bind()?;
        if dst.dtype == Dtype::F16 {
            // staged through f32 so the rounding is the kernels' (round to nearest even)
            let stage = self.alloc_f32(&dst.shape)?;
            // SAFETY: as below, into the f32 staging block.
            unsafe { self.copy_htod(stage.buf.ptr, &src.data) }
                .map_err(|e| CudaError::driver("memcpy HtoD", e))?;
            let n = src.len();
            return self.copy2d(
                dst.buf.ptr,
                Dtype::F16,
                stage.buf.ptr,
                Dtype::F32,
                1,
                n,
                n,
                n,
            );
        }
        // SAFETY: the block holds at least numel f32; the source is pageable host memory, which
        // the driver stages before returning.
        unsafe { self.copy_htod(dst.buf.ptr, &src.data) }
            .map_err(|e| CudaError::driver("memcpy HtoD", e))?;
        Ok(())
    }

    /// `y = act(x)` over `x`'s elements into `y` of type `y_dt` (`y` may be `x` itself: each
    /// thread reads its values before it writes them). `fast`: SiLU and sigmoid on the MUFU exp
    /// and reciprocal (~1e-6 relative, under the f16 rounding of a q8 weight's output), the form
    /// the q8 lane's fused passes (act_e4m3, f8wg's epilogue) run, so they and this pass agree
    /// bit for bit; the f16 lane keeps the exact form (its ids must equal CPU f32's).
    fn act_launch(
        &self,
        y: u64,
        y_dt: Dtype,
        x: &CudaTensor,
        act: Activation,
        fast: bool,
    ) -> Result<()> {
        let n = x.numel();
        if n == 0 {
            return Ok(());
        }
        let (xp, ni, a) = (self.t(x), n as i64, act_code(act));
        let dt = y_dt.bit() | (x.bit() << 1) | (i32::from(fast) << 2);
        let grid = grid_1d_x4(n, n.is_multiple_of(4));
        self.launch("act", grid, (256, 1, 1), 0, args![y, xp, ni, a, dt])
    }

    /// `x = act(x)` where nothing else holds `x` (a GEMM's fresh output): no second buffer, so
    /// the values stay in the cache lines the GEMM just wrote.
    /// `lane`: the weight's whose output `x` is (`act_launch`'s fast form for a q8 weight's f16
    /// output).
    pub(crate) fn activation_in_place(
        &self,
        x: &CudaTensor,
        act: Activation,
        lane: Lane,
    ) -> Result<()> {
        let fast = lane == Lane::Q8 && x.dtype == Dtype::F16;
        self.act_launch(x.buf.ptr, x.dtype, x, act, fast)
    }

    fn elementwise_out(&self, x: &CudaTensor) -> Result<CudaTensor> {
        self.alloc(&x.shape, self.out_dt())
    }

    /// Strided 2-D copy in elements (`rows` runs of `cols`, leading dimensions `dst_ld` and
    /// `src_ld`), converting when the types differ.
    #[allow(clippy::too_many_arguments)]
    fn copy2d(
        &self,
        dst: u64,
        dst_dt: Dtype,
        src: u64,
        src_dt: Dtype,
        rows: usize,
        cols: usize,
        dst_ld: usize,
        src_ld: usize,
    ) -> Result<()> {
        if rows * cols == 0 {
            return Ok(());
        }
        let grid = |units: usize| {
            (
                units.div_ceil(256).min(1024) as u32,
                rows.min(65535) as u32,
                1,
            )
        };
        let (r, c, dl, sl) = (rows as i64, cols as i64, dst_ld as i64, src_ld as i64);
        if dst_dt != src_dt {
            let dt = dst_dt.bit() | (src_dt.bit() << 1);
            return self.launch(
                "convert2d",
                grid(cols),
                (256, 1, 1),
                0,
                args![dst, src, r, c, dl, sl, dt],
            );
        }
        // raw bits in the widest unit every count and address allows
        let es = dst_dt.size();
        let (cb, dlb, slb) = (cols * es, dst_ld * es, src_ld * es);
        if (cb | dlb | slb).is_multiple_of(16) && (dst | src).is_multiple_of(16) {
            let (c16, dl16, sl16) = ((cb / 16) as i64, (dlb / 16) as i64, (slb / 16) as i64);
            return self.launch(
                "copy2d_b128",
                grid(cb / 16),
                (256, 1, 1),
                0,
                args![dst, src, r, c16, dl16, sl16],
            );
        }
        let name = if es == 4 { "copy2d_b32" } else { "copy2d_b16" };
        self.launch(
            name,
            grid(cols),
            (256, 1, 1),
            0,
            args![dst, src, r, c, dl, sl],
        )
    }

    /// `src` copied into device memory at `dst` on the stream (pageable memory: the driver has
    /// taken it when this returns). Every host copy onto the stream goes through this or
    /// [`CudaBackend::copy_dtoh`], which count it as work that is not ours for linked PDL
    /// ([`crate::pdl::foreign`]).
    ///
    /// # Safety
    /// `dst` holds at least `src.len()` elements of `T`.
    pub(crate) unsafe fn copy_htod<T>(&self, dst: u64, src: &[T]) -> Result<(), DriverError> {
        crate::pdl::foreign();
        result::memcpy_htod_async(dst, src, self.stream.cu_stream())
    }

    /// Device memory at `src` copied into `dst` on the stream (complete once the stream is
    /// synchronized); see [`CudaBackend::copy_htod`].
    ///
    /// # Safety
    /// `src` holds at least `dst.len()` elements of `T`, and `dst` is not read before the
    /// stream is synchronized.
    pub(crate) unsafe fn copy_dtoh<T>(&self, dst: &mut [T], src: u64) -> Result<(), DriverError> {
        crate::pdl::foreign();
        result::memcpy_dtoh_async(dst, src, self.stream.cu_stream())
    }

    fn dtod(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.bind()?;
        crate::pdl::foreign();
        // SAFETY: both ranges lie inside live blocks (checked by the callers' shape logic).
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }
            .map_err(|e| CudaError::driver("memcpy DtoD", e))?;
        Ok(())
    }

    /// Linear into `y` (of type `y_dt`): `y (m, n) = x (m, k) · Wᵀ + b (+ resid)`, `x` of type
    /// `x_dt`, the bias f32, `resid` 0 or an (m, n) residual of type `y_dt` not aliasing `y`
    /// (`linear_add.rs`). Scratch buffers go back to the pool when they drop at the end of this
    /// call, before the GPU has run the work: safe, because whoever gets them next queues after
    /// it on the same stream.
    #[allow(clippy::too_many_arguments)]
    fn linear_raw(
        &self,
        y: u64,
        y_dt: Dtype,
        xb: &Arc<Block>,
        x_dt: Dtype,
        m: usize,
        w: &CudaWeight,
        bias: u64,
        bias16: u64,
        resid: u64,
        act: EpiAct,
    ) -> Result<bool> {
        let mut act_done = false;
        // x's address only where a path reads its values (an elided input's FP8 GEMM reads
        // its prepared e4m3 rows alone)
        let x = || self.p(xb);
        let (n, k) = (w.n, w.k);
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let dt = y_dt.bit() | (x_dt.bit() << 1);
        match &w.data {
            WeightData::F16(wb) => {
                let wp = self.p(wb);
                if m <= GEMV_MAX_M {
                    let grid = (n.div_ceil(8) as u32, 1, 1);
                    self.launch(
                        "gemv_f16",
                        grid,
                        (256, 1, 1),
                        0,
                        args![y, x(), wp, bias, mi, ni, ki, dt],
                    )?;
                    self.add_in_place(y, resid, m * n, y_dt)?;
                } else {
                    act_done =
                        self.f16_gemm(y, y_dt, xb, x_dt, m, n, k, wp, bias, bias16, resid, act)?;
                }
                Counters::bump(&self.counters.gemm_f16);
            }
            WeightData::Q8 {
                w8,
                scales,
                n_pad,
                k_pad,
            } => {
                let (wp, sp) = (self.p(w8), self.p(scales));
                let kp = *k_pad as i32;
                if m <= GEMV_MAX_M {
                    let grid = (n.div_ceil(8) as u32, 1, 1);
                    self.launch(
                        "gemv_i8",
                        grid,
                        (256, 1, 1),
                        0,
                        args![y, x(), wp, sp, bias, mi, ni, ki, kp, dt],
                    )?;
                    self.add_in_place(y, resid, m * n, y_dt)?;
                } else if let Some(done) = match self.q8_fp8_weight(w, m, y_dt)? {
                    // FP8 needs the bias in f16 (an f32 one takes the f16 copy's path)
                    Some(f) if bias == 0 || bias16 != 0 => {
                        self.fp8_linear(y, xb, x_dt, m, n, k, &f, bias16, resid, act)?
                    }
                    _ => None,
                } {
                    act_done = done;
                    Counters::bump(&self.counters.gemm_q8_fp8);
                } else if let Some(wh) = self.q8_f16_weight(w, m)? {
                    // the f16 tensor cores on the lane's values where they beat int8 (q8_mix.rs)
                    let wp = self.p(&wh);
                    act_done =
                        self.f16_gemm(y, y_dt, xb, x_dt, m, n, k, wp, bias, bias16, resid, act)?;
                    Counters::bump(&self.counters.gemm_q8_f16);
                } else if self.i8gemm_linear(
                    y,
                    y_dt,
                    xb,
                    x(),
                    x_dt,
                    m,
                    n,
                    k,
                    wp,
                    sp,
                    *k_pad,
                    bias,
                    resid,
                )? {
                    // our int8 GEMM, epilogue in registers (i8gemm.rs, STAPES_CUDA_I8GEMM)
                } else {
                    let (acc, sx) = self.q8_accumulate(xb, x(), x_dt, m, k, wp, *n_pad, *k_pad)?;
                    let (sxp, accp) = (sx.ptr, acc.ptr);
                    let (ldc, ydt) = (*n_pad as i32, y_dt.bit());
                    let grid = (n.div_ceil(1024).clamp(1, 64) as u32, m.min(65535) as u32, 1);
                    if resid == 0 {
                        self.launch(
                            "dequant_epilogue",
                            grid,
                            (256, 1, 1),
                            0,
                            args![y, accp, sxp, sp, bias, mi, ni, ldc, ydt],
                        )?;
                    } else {
                        self.launch(
                            "dequant_epilogue_add",
                            grid,
                            (256, 1, 1),
                            0,
                            args![y, accp, sxp, sp, bias, resid, mi, ni, ldc, ydt],
                        )?;
                    }
                }
                Counters::bump(&self.counters.gemm_q8);
            }
        }
        Ok(act_done)
    }

    /// `y = x · Wᵀ + bias (+ resid)` on the f16 tensor cores for `m` > [`GEMV_MAX_M`] rows, `w`
    /// the `(n, k)` f16 weight at `wp` (an f16-lane weight or a q8 weight's f16 copy).
    #[allow(clippy::too_many_arguments)]
    fn f16_gemm(
        &self,
        y: u64,
        y_dt: Dtype,
        xb: &Arc<Block>,
        x_dt: Dtype,
        m: usize,
        n: usize,
        k: usize,
        wp: u64,
        bias: u64,
        bias16: u64,
        resid: u64,
        act: EpiAct,
    ) -> Result<bool> {
        let x = self.p(xb);
        let ni = n as i32;
        let y16 = y_dt == Dtype::F16;
        // f16 activations go to the tensor cores as they are; f32 ones are cast once
        let xh = match (x_dt, self.prepared(xb, m, k, PrepKind::F16)) {
            (Dtype::F16, _) => xb.clone(),
            (Dtype::F32, Some(b)) => b[0].clone(),
            (Dtype::F32, None) => {
                let xh = self.pool.alloc(m * k * 2)?;
                let (nn, xhp) = ((m * k) as i64, xh.ptr);
                self.launch(
                    "cast_f32_f16",
                    grid_1d(m * k),
                    (256, 1, 1),
                    0,
                    args![xhp, x, nn],
                )?;
                self.remember(xb, m, k, PrepKind::F16, vec![xh.clone()]);
                xh
            }
        };
        let xhp = xh.ptr;
        let tune = !self.capturing.load(Ordering::Relaxed);
        // an f16 copy of the bias when there is one (`STAPES_CUDA_BIAS16`, on by default)
        let (kind, lt_bias) = match (y16, bias16) {
            (true, 0) => (LtKind::F16Out16, bias),
            (true, b16) => (LtKind::F16Out16BiasF16, b16),
            (false, _) => (LtKind::F16, bias),
        };
        // SAFETY: y holds m·n of y_dt, xh m·k f16, w n·k f16, bias n f32 (or 0), all on this stream.
        let fused = unsafe {
            self.lt.matmul_c(
                &self.stream,
                kind,
                y,
                wp,
                xhp,
                lt_bias,
                resid,
                self.lt_ws.ptr,
                n,
                m,
                k,
                tune,
                if resid == 0 { act } else { EpiAct::None },
            )
        };
        if fused.is_ok() {
            return Ok(act != EpiAct::None && resid == 0);
        }
        if let Err(e) = fused {
            // shapes cuBLASLt has no kernel for (odd leading dimensions): plain GemmEx
            // and a separate bias pass, counted so a slow path on a hot shape shows
            let why =
                format!("linear: no cuBLASLt {kind:?} plan for {m}x{k}x{n} (GemmEx + bias pass)");
            if self.counters.decline(&why) {
                tracing::debug!("{why}: {e}");
            }
            let blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: as above.
            unsafe { gemm::f16_linear(*blas.handle(), y, y16, xhp, wp, m, n, k)? };
            drop(blas);
            if bias != 0 {
                let (rows, ydt) = (m as i64, y_dt.bit());
                self.launch(
                    "bias_rows",
                    grid_1d(m * n),
                    (256, 1, 1),
                    0,
                    args![y, bias, rows, ni, ydt],
                )?;
            }
            self.add_in_place(y, resid, m * n, y_dt)?;
        }
        Ok(false)
    }

    /// `conv2d` into `out (b, co, ho, wo)` f16 as im2col columns `(b, k, ho·wo)` and one batched
    /// tensor-core GEMM with the kernel's cached f16 copy as the shared `(co, k)` operand, then
    /// the bias per channel. The columns cost `k·ho·wo` f16 a batch entry (Qwen3-ASR's second
    /// conv, 11 chunks: 11 × 4320 × 800 × 2 B = 76 MB from the arena).
    fn conv2d_im2col(
        &self,
        out: &CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        p: Conv2dParams,
        k: usize,
    ) -> Result<()> {
        let (b, ci, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
        let (co, ho, wo) = (out.shape[1], out.shape[2], out.shape[3]);
        let pos = ho * wo;
        let cols = self.alloc(&[b, k, pos], Dtype::F16)?;
        let dt = cols.bit() | (x.bit() << 1);
        let v: [i32; 12] = [
            b,
            ci,
            h,
            wd,
            p.kernel.0,
            p.kernel.1,
            p.stride.0,
            p.stride.1,
            p.padding.0,
            p.padding.1,
            ho,
            wo,
        ]
        .map(|u| u as i32);
        let (cp, xp) = (cols.buf.ptr, self.t(x));
        self.launch(
            "im2col_2d",
            grid_1d(b * k * pos),
            (256, 1, 1),
            0,
            args![
                cp, xp, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11],
                dt
            ],
        )?;
        let w16 = self.param16(w)?;
        let blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: out holds b·co·pos f16, cols b·k·pos f16, w16 co·k f16; all on this stream.
        unsafe { gemm::conv_gemm(*blas.handle(), out.buf.ptr, true, cp, w16, b, co, pos, k)? };
        drop(blas);
        if !self.capturing.load(Ordering::Relaxed) {
            Counters::bump(&self.counters.ops);
            Counters::bump(&self.counters.gemm_f16);
        }
        if let Some(bias) = self.param(bias)? {
            let (y, bp, n) = (out.buf.ptr, self.t(&bias), (b * co * pos) as i64);
            let (c, q, ydt) = (co as i32, pos as i32, out.bit());
            self.launch(
                "bias_channels",
                grid_1d(b * co * pos),
                (256, 1, 1),
                0,
                args![y, bp, n, c, q, ydt],
            )?;
        }
        Ok(())
    }

    /// `conv1d` (then `act`) as im2col and one GEMM.
    fn conv1d_gemm(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        p: Conv1dParams,
        act: Option<Activation>,
    ) -> Result<CudaTensor> {
        Self::check_rank("conv1d", x, 3)?;
        let (b, t, c) = (x.shape[0], x.shape[1], x.shape[2]);
        if p.kernel == 0 || p.stride == 0 || w.k != c * p.kernel {
            return Err(Error::shape(
                "conv1d",
                format!("x {:?}, W ({}, {}), {p:?}", x.shape, w.n, w.k),
            ));
        }
        if t + 2 * p.padding < p.kernel {
            return Err(Error::shape(
                "conv1d",
                format!("T {t} shorter than kernel {}", p.kernel),
            ));
        }
        let t_out = (t + 2 * p.padding - p.kernel) / p.stride + 1;
        // the columns are written in the type the GEMM reads best: f16 in f16 chains
        let cols = self.alloc(&[b * t_out, c * p.kernel], self.out_dt())?;
        let n = b * t_out * c * p.kernel;
        if n > 0 {
            let (cp, xp) = (cols.buf.ptr, self.t(x));
            let dt = cols.bit() | (x.bit() << 1);
            let (bi, ti, ci, kw, si, pi, to) = (
                b as i32,
                t as i32,
                c as i32,
                p.kernel as i32,
                p.stride as i32,
                p.padding as i32,
                t_out as i32,
            );
            let rows = u32::try_from(b * t_out)
                .map_err(|_| Error::shape("conv1d", "output rows over the grid limit"))?;
            let per = if (c * p.kernel).is_multiple_of(IM2COL_PER) {
                IM2COL_PER
            } else {
                1
            };
            self.launch(
                "im2col_1d",
                (rows, (c * p.kernel).div_ceil(per * 128) as u32, 1),
                (128, 1, 1),
                0,
                args![cp, xp, bi, ti, ci, kw, si, pi, to, dt],
            )?;
        }
        // (B·T_out, C_in·K) · Wᵀ: the activation in the GEMM's epilogue where it can be
        let y = match act {
            Some(a) => self.linear_act(&cols, w, bias, a)?,
            None => self.linear(&cols, w, bias)?,
        };
        self.reshape(&y, &[b, t_out, w.n])
    }

    /// A parameter as f16 (a bias for cuBLASLt's f16 epilogues, a conv kernel for its GEMM): an
    /// f16 one as it is, an f32 one through its cached copy ([`CudaBackend::param_f16`]).
    fn param16(&self, b: &CudaTensor) -> Result<u64> {
        match b.dtype {
            Dtype::F16 => Ok(self.t(b)),
            Dtype::F32 => self.param_f16(b),
        }
    }

    /// The f16 copy of an f32 parameter, made once per parameter and kept (with the f32 block, so
    /// its address cannot be reused by another tensor while the entry lives): biases for
    /// cuBLASLt's f16-output epilogue, which has no plan for an f32 bias on the H200, and the
    /// kernels of 2-D convolutions on the tensor cores.
    fn param_f16(&self, b: &CudaTensor) -> Result<u64> {
        let mut cache = self.bias16.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, h)) = cache.get(&b.buf.ptr) {
            let h = h.clone();
            drop(cache);
            return Ok(self.p(&h));
        }
        let n = b.numel();
        let h = self.pool.alloc(n.max(1) * 2)?;
        self.copy2d(h.ptr, Dtype::F16, self.t(b), Dtype::F32, 1, n, n, n)?;
        cache.insert(b.buf.ptr, (b.buf.clone(), h.clone()));
        drop(cache);
        Ok(self.p(&h))
    }

    /// Select the d = 64 fused-attention kernel variant (0 plain, 1 register-capped), for the
    /// benchmark; results are the same function, timings differ.
    #[doc(hidden)]
    pub fn set_attention_variant(&self, v: u8) {
        self.fa_variant.store(v.min(1), Ordering::Relaxed);
    }

    /// One phase of the q8 library path alone, for the benchmark's breakdown: 0 quantize the
    /// activations, 1 the cuBLASLt int8 GEMM, 2 the scaling epilogue, 3 the int8 GEMM through
    /// cublasGemmEx instead. Scratch contents are meaningless.
    #[doc(hidden)]
    pub fn q8_phase(&self, x: &CudaTensor, w: &CudaWeight, phase: u8) -> Result<()> {
        let WeightData::Q8 {
            w8,
            scales,
            n_pad,
            k_pad,
        } = &w.data
        else {
            return Err(Error::shape("q8_phase", "not a q8 weight"));
        };
        let (n, k) = (w.n, w.k);
        let m = x.numel() / k.max(1);
        let m_pad = round_up(m, 16);
        let q = self.pool.alloc(m_pad * k_pad)?;
        let sx = self.pool.alloc(m_pad * 4)?;
        let acc = self.pool.alloc(m_pad * n_pad * 4)?;
        let y = self.pool.alloc(m * n * 4)?;
        let (qp, sxp, accp, yp, xp, wp, sp) =
            (q.ptr, sx.ptr, acc.ptr, y.ptr, x.buf.ptr, w8.ptr, scales.ptr);
        let (mi, ni, ki, kp, ldc, z) = (
            m as i32,
            n as i32,
            k as i32,
            *k_pad as i32,
            *n_pad as i32,
            0u64,
        );
        let (xdt, ydt) = (x.bit() << 1, 0i32);
        match phase {
            0 => self.launch(
                "quantize_rows_i8",
                ((m_pad / 8) as u32, 1, 1),
                (256, 1, 1),
                0,
                args![qp, sxp, xp, mi, ki, kp, xdt],
            ),
            // SAFETY: buffers sized above for the padded shapes.
            1 => unsafe {
                self.lt.matmul(
                    &self.stream,
                    LtKind::I8,
                    accp,
                    wp,
                    qp,
                    0,
                    self.lt_ws.ptr,
                    *n_pad,
                    m_pad,
                    *k_pad,
                    true,
                )
            }
            .map_err(Into::into),
            2 => self.launch(
                "dequant_epilogue",
                (n.div_ceil(1024).clamp(1, 64) as u32, m.min(65535) as u32, 1),
                (256, 1, 1),
                0,
                args![yp, accp, sxp, sp, z, mi, ni, ldc, ydt],
            ),
            _ => {
                let blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
                // SAFETY: as above.
                unsafe { gemm::i8_gemm_ex(*blas.handle(), accp, wp, qp, *n_pad, m_pad, *k_pad) }
                    .map_err(Into::into)
            }
        }
    }

    fn prepared(
        &self,
        src: &Arc<Block>,
        m: usize,
        k: usize,
        kind: PrepKind,
    ) -> Option<Vec<Arc<Block>>> {
        let g = self.prep.lock().unwrap_or_else(|p| p.into_inner());
        g.as_ref()
            .filter(|p| Arc::ptr_eq(&p.src, src) && p.m == m && p.k == k && p.kind == kind)
            .map(|p| p.bufs.clone())
    }

    fn remember(
        &self,
        src: &Arc<Block>,
        m: usize,
        k: usize,
        kind: PrepKind,
        bufs: Vec<Arc<Block>>,
    ) {
        *self.prep.lock().unwrap_or_else(|p| p.into_inner()) = Some(Prep {
            src: src.clone(),
            m,
            k,
            kind,
            bufs,
        });
    }

    /// Some tensor's contents may have changed in place: drop the prepared GEMM input.
    pub(crate) fn forget_prep(&self) {
        *self.prep.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn decline(&self, op: &'static str, reason: String) -> Error {
        if self.counters.decline(&format!("{op}: {reason}")) {
            tracing::info!("cuda declined {op}: {reason}");
        }
        Error::Decline {
            op,
            backend: "cuda",
            reason,
        }
    }

    fn check_rank(op: &'static str, t: &CudaTensor, rank: usize) -> Result<()> {
        if t.shape.len() != rank {
            return Err(Error::shape(
                op,
                format!("expected rank {rank}, got {:?}", t.shape),
            ));
        }
        Ok(())
    }

    fn attention_impl(
        &self,
        q: &CudaTensor,
        k: &CudaTensor,
        v: Option<&CudaTensor>,
        p: &AttnParams,
        probs: bool,
    ) -> Result<CudaTensor> {
        let op = if probs {
            "attention_probs"
        } else {
            "attention"
        };
        Self::check_rank(op, q, 3)?;
        Self::check_rank(op, k, 3)?;
        let (b, tq, hd) = (q.shape[0], q.shape[1], q.shape[2]);
        let tk = k.shape[1];
        if k.shape[0] != b || k.shape[2] != hd || p.n_heads == 0 || hd % p.n_heads != 0 {
            return Err(Error::shape(
                op,
                format!("q {:?} k {:?} heads {}", q.shape, k.shape, p.n_heads),
            ));
        }
        if let Some(v) = v {
            if v.shape != k.shape {
                return Err(
                    self.decline(op, format!("v {:?} differs from k {:?}", v.shape, k.shape))
                );
            }
        }
        let kv_len = p.kv_len.unwrap_or(tk);
        if kv_len > tk || (p.causal && kv_len < tq) {
            return Err(Error::shape(
                op,
                format!("kv_len {kv_len} with Tk {tk}, Tq {tq}, causal {}", p.causal),
            ));
        }
        let h = p.n_heads;
        let d = hd / h;
        let (tqi, tki, hi, di, kvi, ci) = (
            tq as i32,
            tk as i32,
            h as i32,
            d as i32,
            kv_len as i32,
            p.causal as i32,
        );
        let scale = p.scale;
        if probs {
            // the row kernel reads q and k as one type; the probabilities are always f32
            let k = self.as_dtype(k, q.dtype)?;
            let (qp, kp, dt) = (self.t(q), self.t(&k), q.bit() << 1);
            let out = self.alloc_f32(&[b, h, tq, kv_len])?;
            let (rows_threads, smem) = row_kernel_launch(kv_len, d);
            if smem > 48 * 1024 {
                return Err(
                    self.decline(op, format!("kv_len {kv_len} too long for the row kernel"))
                );
            }
            let (op_, z) = (out.buf.ptr, 0u64);
            if b * tq * h > 0 {
                self.launch(
                    "attn_rows",
                    (tq as u32, h as u32, b as u32),
                    (rows_threads, 1, 1),
                    smem,
                    args![z, op_, qp, kp, z, tqi, tki, hi, di, kvi, scale, ci, dt],
                )?;
            }
            return Ok(out);
        }
        let Some(v) = v else {
            return Err(Error::shape(op, "no v"));
        };
        let all_f32 = !(q.is_f16() || k.is_f16() || v.is_f16()) && self.out_dt() == Dtype::F32;
        if tq == 1 && all_f32 && crate::step::one_row_attention_fits(d, kv_len) {
            // a decoder step with its parameters on the host: the step graph's kernel code
            let out = self.alloc_f32(&q.shape)?;
            let (o, qp, kp, vp) = (out.buf.ptr, self.t(q), self.t(k), self.t(v));
            if b * h > 0 {
                self.launch(
                    "attn_one_f32",
                    (1, h as u32, b as u32),
                    (128, 1, 1),
                    0,
                    args![o, qp, kp, vp, tki, hi, di, kvi, scale],
                )?;
            }
            return Ok(out);
        }
        if let Some(out) = self.attention64(q, k, v, p)? {
            return Ok(out);
        }
        let out = self.alloc(&q.shape, self.out_dt())?;
        let o = out.buf.ptr;
        if b * tq * h == 0 {
            return Ok(out);
        }
        let flash = match d {
            64 if self.fa_variant.load(Ordering::Relaxed) == 1 => Some("flash_attn_d64_b4"),
            64 => Some("flash_attn_d64"),
            128 => Some("flash_attn_d128"),
            _ => None,
        };
        if let (Some(kname), true) = (flash, tq >= 16) {
            let grid = (tq.div_ceil(64) as u32, h as u32, b as u32);
            // K/V in f16 (as they come in f16 chains, else cast once), so the kernel's tiles need
            // no conversion and half the bytes
            let k16 = self.as_dtype(k, Dtype::F16)?;
            let v16 = self.as_dtype(v, Dtype::F16)?;
            let (qp, kp, vp) = (self.t(q), self.t(&k16), self.t(&v16));
            let dt = out.bit() | (q.bit() << 1);
            self.launch(
                kname,
                grid,
                (128, 1, 1),
                0,
                args![o, qp, kp, vp, tqi, tki, hi, kvi, scale, ci, dt],
            )?;
        } else {
            let (rows_threads, smem) = row_kernel_launch(kv_len, d);
            if smem > 48 * 1024 {
                return Err(self.decline(op, format!("head size {d} with kv_len {kv_len}")));
            }
            let k = self.as_dtype(k, q.dtype)?;
            let v = self.as_dtype(v, q.dtype)?;
            let (qp, kp, vp) = (self.t(q), self.t(&k), self.t(&v));
            let (z, dt) = (0u64, out.bit() | (q.bit() << 1));
            self.launch(
                "attn_rows",
                (tq as u32, h as u32, b as u32),
                (rows_threads, 1, 1),
                smem,
                args![o, z, qp, kp, vp, tqi, tki, hi, di, kvi, scale, ci, dt],
            )?;
        }
        Ok(out)
    }

    fn binary(
        &self,
        a: &CudaTensor,
        b: &CudaTensor,
        opcode: i32,
        op: &'static str,
    ) -> Result<CudaTensor> {
        let nb = b.numel();
        let suffix = b.shape.len() <= a.shape.len()
            && a.shape[a.shape.len() - b.shape.len()..] == b.shape[..];
        if !suffix || (nb == 0 && a.numel() != 0) {
            return Err(Error::shape(
                op,
                format!(
                    "{:?} with {:?}: b must equal a or be a suffix of it",
                    a.shape, b.shape
                ),
            ));
        }
        let out = self.elementwise_out(a)?;
        let n = a.numel();
        if n == 0 {
            return Ok(out);
        }
        let (y, ap, bp, ni, nbi) = (out.buf.ptr, self.t(a), self.t(b), n as i64, nb as i64);
        let dt = out.bit() | (a.bit() << 1) | (b.bit() << 2);
        self.launch(
            "binary",
            grid_1d_x4(n, n.is_multiple_of(4) && nb.is_multiple_of(4)),
            (256, 1, 1),
            0,
            args![y, ap, bp, ni, nbi, opcode, dt],
        )?;
        Ok(out)
    }

    /// `heads`: dir 0 splits `x` into `out`, dir 1 merges.
    #[allow(clippy::too_many_arguments)]
    fn heads(
        &self,
        out: &CudaTensor,
        x: &CudaTensor,
        bias: Option<&CudaTensor>,
        t: usize,
        heads: usize,
        dh: usize,
        dir: i32,
    ) -> Result<()> {
        let n = x.numel();
        if n == 0 {
            return Ok(());
        }
        let bias = self.param(bias)?;
        let (y, xp, bp) = (out.buf.ptr, self.t(x), self.opt(bias.as_ref()));
        let (ti, hi, di, ni) = (t as i32, heads as i32, dh as i32, n as i64);
        let dt = out.bit() | (x.bit() << 1);
        self.launch(
            "heads",
            grid_1d(n),
            (256, 1, 1),
            0,
            args![y, xp, bp, ti, hi, di, ni, dir, dt],
        )
    }

    fn rowwise(&self, x: &CudaTensor, name: &'static str, log: i32) -> Result<CudaTensor> {
        let out = self.elementwise_out(x)?;
        let n = *x.shape.last().unwrap_or(&1);
        let rows = x.numel() / n.max(1);
        if rows * n == 0 {
            return Ok(out);
        }
        let (y, xp, ni) = (out.buf.ptr, self.t(x), n as i32);
        let dt = out.bit() | (x.bit() << 1);
        self.launch(
            name,
            (rows as u32, 1, 1),
            (256, 1, 1),
            0,
            args![y, xp, ni, log, dt],
        )?;
        Ok(out)
    }
}

/// Chains that keep activations in f16: encoders, i.e. keys whose first `/`-segment ends in
/// `encoder` ("whisper-encoder/b1/f16", "parakeet-encoder/…"). Every other chain (decoder
/// steps, whose ids are compared with CPU f32 and whose step kernels take f32) keeps f32.
fn f16_chain_key(key: &str) -> bool {
    key.split('/')
        .next()
        .is_some_and(|s| s.ends_with("encoder"))
}

/// Threads and dynamic shared memory for `attn_rows`: decoder steps give it only
/// heads × batch blocks, so long key ranges get 512 threads per block to keep the SMs busy.
fn row_kernel_launch(kv_len: usize, d: usize) -> (u32, u32) {
    let threads = if kv_len >= 512 { 512 } else { 128 };
    let smem = (d.div_ceil(4) * 4 + (threads / 32) * d + kv_len) * 4;
    (threads as u32, smem as u32)
}

fn act_code(a: Activation) -> i32 {
    match a {
        Activation::Gelu => 0,
        Activation::GeluTanh => 1,
        Activation::Silu => 2,
        Activation::Relu => 3,
        Activation::Sigmoid => 4,
        Activation::Tanh => 5,
    }
}

/// `y.round().clamp(-127.0, 127.0)` (ties away from zero; NaN gives 0) as a float, in operations
/// the compiler vectorizes: the baseline x86-64 target has no rounding instruction, so
/// `f32::round` is a libm call per value — most of the q8 weight re-layout's cost at load.
/// Adding and subtracting 1.5·2²³ rounds |y| ≤ 128 to the nearest integer, ties to even; a tie
/// that went down to the even integer is then moved up (|y| − that integer is exact).
#[inline(always)]
fn round_q8(y: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    let a = if y.is_nan() { 0.0 } else { y.abs().min(128.0) };
    let e = (a + MAGIC) - MAGIC;
    let r = if a - e >= 0.5 { e + 1.0 } else { e }.min(127.0);
    if y < 0.0 {
        -r
    } else {
        r
    }
}

/// The int8 code of a [`round_q8`] result (an integer in ±127).
#[inline(always)]
fn code(r: f32) -> i8 {
    debug_assert!(r.abs() <= 127.0);
    // SAFETY: round_q8 returns an integer in [-127, 127], never NaN, so the conversion is in
    // range (a plain truncating conversion the compiler vectorizes; `as` saturates value by value)
    (unsafe { r.to_int_unchecked::<i32>() }) as i8
}

/// One 32-value block of the lane (`stapes_core::lane::quantize_row_q8`): codes into `q` (a
/// short last block is zero-padded, as the lane pads it), returns (scale = amax/127, max |code|).
#[inline(always)]
fn q8_block(x: &[f32; Q8_BLOCK], q: &mut [f32; Q8_BLOCK]) -> (f32, f32) {
    let mut acc = [0f32; 8];
    for c in x.chunks_exact(8) {
        for (m, v) in acc.iter_mut().zip(c) {
            *m = m.max(v.abs());
        }
    }
    // max is exact, so the order of the lanes' reduction cannot change it
    let amax = acc.iter().fold(0f32, |m, &v| m.max(v));
    let scale = amax / 127.0;
    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    for (d, v) in q.iter_mut().zip(x) {
        *d = round_q8(v * inv);
    }
    let mut qmax = [0f32; 8];
    for c in q.chunks_exact(8) {
        for (m, v) in qmax.iter_mut().zip(c) {
            *m = m.max(v.abs());
        }
    }
    (scale, qmax.iter().fold(0f32, |m, &v| m.max(v)))
}

/// One row of a q8 weight in this home's layout: the lane's values first (32-blocks, `scale =
/// amax/127` stored as f16, round to nearest, ±127: `stapes_core::lane::round_trip`), then one
/// scale per row over those values (returned; `dst` gets the int8 codes). The same bits as that
/// composition (`q8_row_matches_the_lane_composition`), without its libm rounding: the block
/// codes and scales wait in two row buffers between the block pass and the row pass.
fn q8_row(row: &[f32], dst: &mut [i8]) -> f32 {
    let nb = row.len().div_ceil(Q8_BLOCK);
    let mut scales = vec![0f32; nb];
    let mut codes = vec![0f32; nb * Q8_BLOCK];
    let mut amax_row = 0f32;
    for ((x, q), s16) in row
        .chunks(Q8_BLOCK)
        .zip(codes.chunks_exact_mut(Q8_BLOCK))
        .zip(scales.iter_mut())
    {
        let q: &mut [f32; Q8_BLOCK] = q.try_into().expect("a block of codes");
        let (scale, qmax) = match <&[f32; Q8_BLOCK]>::try_from(x) {
            Ok(x) => q8_block(x, q),
            Err(_) => {
                let mut xb = [0f32; Q8_BLOCK];
                xb[..x.len()].copy_from_slice(x);
                q8_block(&xb, q)
            }
        };
        *s16 = f16::from_f32(scale).to_f32();
        // |code·s| rounds monotonically in |code| (s ≥ 0): the block's largest value is qmax·s
        amax_row = amax_row.max(qmax * *s16);
    }
    let inv = if amax_row > 0.0 {
        127.0 / amax_row
    } else {
        0.0
    };
    for ((d, q), &s) in dst
        .chunks_mut(Q8_BLOCK)
        .zip(codes.chunks_exact(Q8_BLOCK))
        .zip(scales.iter())
    {
        for (d, &c) in d.iter_mut().zip(q) {
            *d = code(round_q8(c * s * inv));
        }
    }
    amax_row / 127.0
}

impl CudaBackend {
    /// [`Backend::weight`] and [`Backend::weight_from`]: `(n, k)` values into `lane`'s device
    /// layout. An f16 checkpoint in the f16 lane is copied byte for byte, with no f32 copy of
    /// the matrix between (the same halves as widening then rounding back: that round trip is
    /// exact for every finite value, and the loader refuses non-finite weights).
    fn store_weight(&self, w: &WeightView<'_>, lane: Lane) -> Result<CudaWeight> {
        self.no_capture("weight")?;
        self.bind()?;
        // the view's fields are public: hold them to WeightView::new's check again
        let w = WeightView::new(w.n, w.k, w.data)?;
        let (n, k) = (w.n, w.k);
        let _w = tracing::info_span!("cuda.weight", %lane, n, k).entered();
        let convert = tracing::info_span!("cuda.weight.convert").entered();
        let data = match lane {
            Lane::F32 => {
                return Err(Error::LaneUnavailable {
                    lane,
                    backend: "cuda",
                })
            }
            Lane::F16 => {
                let halves;
                let bytes: &[u8] = match w.data {
                    CoreWeightData::F16Le(b) => b,
                    CoreWeightData::F32(v) => {
                        let mut h = vec![f16::ZERO; n * k];
                        // the slice conversion uses F16C where the CPU has it (same rounding
                        // as f16::from_f32, ~10x faster than value by value)
                        par_rows::<f16, u8>(&mut h, &mut [], k, 0, |r, row, _| {
                            row.convert_from_f32_slice(&v[r * k..(r + 1) * k]);
                        });
                        halves = h;
                        bytemuck::cast_slice(&halves)
                    }
                };
                drop(convert);
                let _c = tracing::info_span!("cuda.weight.copy").entered();
                let b = self.pool.alloc(n * k * 2)?;
                if !bytes.is_empty() {
                    // SAFETY: the block holds n·k halves = bytes.len() bytes.
                    unsafe { self.copy_htod(b.ptr, bytes) }
                        .map_err(|e| CudaError::driver("memcpy HtoD", e))?;
                }
                WeightData::F16(b)
            }
            Lane::Q8 => {
                let (n_pad, k_pad) = (round_up(n.max(1), 16), round_up(k.max(1), 16));
                let mut w8 = vec![0i8; n_pad * k_pad];
                let mut scales = vec![0f32; n_pad];
                // rows past n stay zero padding
                par_rows(
                    &mut w8[..n * k_pad],
                    &mut scales[..n],
                    k_pad,
                    1,
                    |r, dst, scale| {
                        let mut wide = Vec::new();
                        scale[0] = q8_row(w.row(r, &mut wide), &mut dst[..k]);
                    },
                );
                drop(convert);
                let _c = tracing::info_span!("cuda.weight.copy").entered();
                let wb = self.pool.alloc(n_pad * k_pad)?;
                let sb = self.pool.alloc(n_pad * 4)?;
                // SAFETY: the blocks hold n_pad·k_pad bytes and n_pad f32.
                unsafe {
                    self.copy_htod(wb.ptr, &w8)
                        .map_err(|e| CudaError::driver("memcpy HtoD", e))?;
                    self.copy_htod(sb.ptr, &scales)
                        .map_err(|e| CudaError::driver("memcpy HtoD", e))?;
                }
                WeightData::Q8 {
                    w8: wb,
                    scales: sb,
                    n_pad,
                    k_pad,
                }
            }
        };
        // the host vectors above (and a borrowed memory map) may go at return: make sure the
        // copies are done
        self.stream
            .synchronize()
            .map_err(|e| CudaError::driver("stream synchronize", e))?;
        Ok(CudaWeight {
            n,
            k,
            lane,
            data,
            f16_copy: Mutex::new(None),
            fp8_copy: Mutex::new(None),
        })
    }
}

impl CudaBackend {
    /// [`Backend::layer_norm`]; `y8` (0 = none, else `rows · n` bytes): the f16 16-byte form
    /// also writes the result as e4m3 there (the FP8 GEMM's input, fp8.rs). Returns the result
    /// and whether `y8` was written (the other forms do not). `store16` false: where `y8` is
    /// written the f16 result is not (its values are then undefined), for a caller whose only
    /// reader of the norm is the FP8 GEMM; the forms that do not write `y8` write it anyway.
    pub(crate) fn layer_norm_y8(
        &self,
        x: &CudaTensor,
        gamma: &CudaTensor,
        beta: Option<&CudaTensor>,
        eps: f32,
        y8: u64,
        store16: bool,
    ) -> Result<(CudaTensor, bool)> {
        let n = *x.shape.last().unwrap_or(&0);
        if gamma.numel() != n || beta.is_some_and(|b| b.numel() != n) {
            return Err(Error::shape(
                "layer_norm",
                format!("x {:?} gamma {:?}", x.shape, gamma.shape),
            ));
        }
        let out = self.elementwise_out(x)?;
        let rows = x.numel() / n.max(1);
        if rows * n == 0 {
            return Ok((out, false));
        }
        let (gamma, beta) = (self.as_dtype(gamma, Dtype::F32)?, self.param(beta)?);
        let (y, xp, gp, bp, ni, hb) = (
            out.buf.ptr,
            self.t(x),
            self.t(&gamma),
            self.opt(beta.as_ref()),
            n as i32,
            beta.is_some() as i32,
        );
        let dt = out.bit() | (x.bit() << 1);
        // f16 rows in and out, whole 16-byte chunks: the 16-byte form
        if dt == 3 && n.is_multiple_of(8) && n <= 2048 && (y | xp).is_multiple_of(16) {
            let (ri, blocks) = (rows as i32, rows.div_ceil(4));
            // the e4m3 rows only (the f16 result's one reader is the FP8 GEMM)
            let y = if y8 != 0 && !store16 { 0 } else { y };
            // the form with gamma/beta loaded beside the row where its grid is one wave
            let gb = n <= LN16_GB_MAX_N
                && blocks
                    <= self.resident_blocks("layer_norm_rows16_gb", 128, 0)? * self.sm_count();
            self.launch(
                if gb {
                    "layer_norm_rows16_gb"
                } else {
                    "layer_norm_rows16"
                },
                (blocks as u32, 1, 1),
                (128, 1, 1),
                0,
                args![y, xp, gp, bp, ri, ni, eps, hb, y8],
            )?;
            return Ok((out, y8 != 0));
        } else if n.is_multiple_of(4) && n <= 2048 {
            let ri = rows as i32;
            self.launch(
                "layer_norm_rows",
                (rows.div_ceil(4) as u32, 1, 1),
                (128, 1, 1),
                0,
                args![y, xp, gp, bp, ri, ni, eps, hb, dt],
            )?;
        } else {
            self.launch(
                "layer_norm",
                (rows as u32, 1, 1),
                (256, 1, 1),
                0,
                args![y, xp, gp, bp, ni, eps, hb, dt],
            )?;
        }
        Ok((out, false))
    }
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Weight = CudaWeight;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn supports_lane(&self, lane: Lane) -> bool {
        matches!(lane, Lane::F16 | Lane::Q8)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn upload(&self, t: &HostTensor) -> Result<CudaTensor> {
        self.no_capture("upload")?;
        self.bind()?;
        let mut out = self.alloc_f32(&t.shape)?;
        if !t.data.is_empty() {
            self.write_host(&mut out, t)?;
        }
        Ok(out)
    }

    fn download(&self, t: &CudaTensor) -> Result<HostTensor> {
        self.no_capture("download")?;
        self.bind()?;
        let n = t.numel();
        let data = match t.dtype {
            Dtype::F32 => self.read_back(&t.buf, 0f32, n)?,
            Dtype::F16 => self
                .read_back(&t.buf, f16::ZERO, n)?
                .iter()
                .map(|h| h.to_f32())
                .collect(),
        };
        HostTensor::new(t.shape.clone(), data)
    }

    fn weight(&self, w: &HostTensor, lane: Lane) -> Result<CudaWeight> {
        // (N, ..) flattens to (N, K): conv kernels arrive as (C_out, C_in, K)
        if w.rank() < 2 {
            return Err(Error::shape(
                "weight",
                format!("expected (N, K), got {:?}", w.shape),
            ));
        }
        let (n, k) = (w.shape[0], w.shape[1..].iter().product::<usize>());
        self.store_weight(&WeightView::new(n, k, CoreWeightData::F32(&w.data))?, lane)
    }

    fn weight_from(&self, w: &WeightView<'_>, lane: Lane) -> Result<CudaWeight> {
        self.store_weight(w, lane)
    }

    fn weight_shape(&self, w: &CudaWeight) -> (usize, usize) {
        (w.n, w.k)
    }

    fn reshape(&self, t: &CudaTensor, shape: &[usize]) -> Result<CudaTensor> {
        let n: usize = shape.iter().product();
        if n != t.numel() {
            return Err(Error::shape(
                "reshape",
                format!("{:?} -> {shape:?}", t.shape),
            ));
        }
        Ok(CudaTensor {
            buf: t.buf.clone(),
            shape: shape.to_vec(),
            dtype: t.dtype,
        })
    }

    fn transpose_last2(&self, t: &CudaTensor) -> Result<CudaTensor> {
        let r = t.shape.len();
        if r < 2 {
            return Err(Error::shape("transpose_last2", format!("rank {r}")));
        }
        let (a, b) = (t.shape[r - 2], t.shape[r - 1]);
        let batch: usize = t.shape[..r - 2].iter().product();
        let mut shape = t.shape.clone();
        shape.swap(r - 2, r - 1);
        let out = self.alloc(&shape, t.dtype)?;
        if t.numel() == 0 {
            return Ok(out);
        }
        let (y, x, ai, bi) = (out.buf.ptr, self.t(t), a as i32, b as i32);
        let grid = (b.div_ceil(32) as u32, a.div_ceil(32) as u32, batch as u32);
        let name = match t.dtype {
            Dtype::F32 => "transpose_b32",
            Dtype::F16 => "transpose_b16",
        };
        self.launch(name, grid, (32, 8, 1), 0, args![y, x, ai, bi])?;
        Ok(out)
    }

    fn slice(&self, t: &CudaTensor, dim: usize, start: usize, len: usize) -> Result<CudaTensor> {
        stapes_core::shapes::check_slice(&t.shape, dim, start, len)?;
        let outer: usize = t.shape[..dim].iter().product();
        let inner: usize = t.shape[dim + 1..].iter().product();
        let mut shape = t.shape.clone();
        shape[dim] = len;
        let out = self.alloc(&shape, t.dtype)?;
        let src = self.t(t) + (start * inner * t.dtype.size()) as u64;
        self.copy2d(
            out.buf.ptr,
            t.dtype,
            src,
            t.dtype,
            outer,
            len * inner,
            len * inner,
            t.shape[dim] * inner,
        )?;
        Ok(out)
    }

    fn concat(&self, ts: &[&CudaTensor], dim: usize) -> Result<CudaTensor> {
        let shapes: Vec<&[usize]> = ts.iter().map(|t| &t.shape[..]).collect();
        let shape = stapes_core::shapes::concat_shape(&shapes, dim)?;
        let (outer, total, inner) = stapes_core::shapes::around(&shape, dim);
        let first = ts[0];
        // one type in, that type out; mixed inputs meet in the type ops write now
        let dt = if ts.iter().all(|t| t.dtype == first.dtype) {
            first.dtype
        } else {
            self.out_dt()
        };
        let out = self.alloc(&shape, dt)?;
        let mut off = 0;
        for t in ts {
            let w = t.shape[dim] * inner;
            let src = self.t(t);
            self.copy2d(
                out.buf.ptr + (off * dt.size()) as u64,
                dt,
                src,
                t.dtype,
                outer,
                w,
                total * inner,
                w,
            )?;
            off += w;
        }
        Ok(out)
    }

    fn write_rows(&self, dst: &mut CudaTensor, src: &CudaTensor, offset: usize) -> Result<()> {
        let (b, t, c, n) = stapes_core::shapes::write_rows_dims(&*dst, src, offset)?;
        self.forget_prep();
        let d = self.t(dst) + (offset * c * dst.dtype.size()) as u64;
        let s = self.t(src);
        self.copy2d(d, dst.dtype, s, src.dtype, b, n * c, t * c, n * c)
    }

    fn gather_batch(&self, t: &CudaTensor, idx: &[usize]) -> Result<CudaTensor> {
        let b = *t
            .shape
            .first()
            .ok_or_else(|| Error::shape("gather_batch", "rank 0"))?;
        if let Some(bad) = idx.iter().find(|&&i| i >= b) {
            return Err(Error::shape(
                "gather_batch",
                format!("index {bad} of batch {b}"),
            ));
        }
        let slab = t.numel() / b.max(1);
        let mut shape = t.shape.clone();
        shape[0] = idx.len();
        let out = self.alloc(&shape, t.dtype)?;
        let src = self.t(t);
        let es = t.dtype.size();
        for (o, &i) in idx.iter().enumerate() {
            self.dtod(
                out.buf.ptr + (o * slab * es) as u64,
                src + (i * slab * es) as u64,
                slab * es,
            )?;
        }
        Ok(out)
    }

    fn gather_rows(&self, table: &CudaTensor, ids: &[u32]) -> Result<CudaTensor> {
        Self::check_rank("gather_rows", table, 2)?;
        let (v, d) = (table.shape[0], table.shape[1]);
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= v) {
            return Err(Error::shape("gather_rows", format!("id {bad} of {v} rows")));
        }
        let out = self.alloc(&[ids.len(), d], table.dtype)?;
        let src = self.t(table);
        let es = table.dtype.size();
        // row copies, not an id upload: capturable, and the ids are few (decoder prompts)
        for (o, &i) in ids.iter().enumerate() {
            self.dtod(
                out.buf.ptr + (o * d * es) as u64,
                src + (i as usize * d * es) as u64,
                d * es,
            )?;
        }
        Ok(out)
    }

    fn linear(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
    ) -> Result<CudaTensor> {
        self.linear_with(x, w, bias, None)
    }

    fn linear_add(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        r: &CudaTensor,
    ) -> Result<CudaTensor> {
        self.linear_with(x, w, bias, Some(r))
    }

    fn linear_act(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        act: Activation,
    ) -> Result<CudaTensor> {
        self.linear_act_fused(x, w, bias, act)
    }

    fn linear_act_feeding(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        act: Activation,
        next: &CudaWeight,
    ) -> Result<CudaTensor> {
        if let Some((y, _)) = self.linear_act_e4m3(x, w, bias, act, next, true)? {
            return Ok(y);
        }
        self.linear_act_fused(x, w, bias, act)
    }

    fn mlp_add(
        &self,
        x: &CudaTensor,
        w1: &CudaWeight,
        b1: Option<&CudaTensor>,
        act: Activation,
        w2: &CudaWeight,
        b2: Option<&CudaTensor>,
        r: &CudaTensor,
    ) -> Result<CudaTensor> {
        let epi = linear_add::epilogue_act(act);
        if let Some(y) = self.mlp_add_fp8(x, w1, b1, epi, w2, b2, r)? {
            return Ok(y);
        }
        let h = self.linear_act(x, w1, b1, act)?;
        self.linear_add(&h, w2, b2, r)
    }

    fn layer_norm_linear(
        &self,
        x: &CudaTensor,
        gamma: &CudaTensor,
        beta: Option<&CudaTensor>,
        eps: f32,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
    ) -> Result<CudaTensor> {
        if let Some(y) = self.layer_norm_linear_fp8(x, gamma, beta, eps, w, bias)? {
            return Ok(y);
        }
        let h = self.layer_norm_feeding(x, gamma, beta, eps, w)?;
        self.linear(&h, w, bias)
    }

    fn layer_norm_attention_add(
        &self,
        x: &CudaTensor,
        gamma: &CudaTensor,
        beta: Option<&CudaTensor>,
        eps: f32,
        w_qkv: &CudaWeight,
        b_qkv: Option<&CudaTensor>,
        p: &AttnParams,
        wo: &CudaWeight,
        bo: Option<&CudaTensor>,
    ) -> Result<CudaTensor> {
        if let Some(y) =
            self.layer_norm_attention_add_fp8(x, gamma, beta, eps, w_qkv, b_qkv, p, wo, bo)?
        {
            return Ok(y);
        }
        // elsewhere too (the f16 lane) the whole warpgroup attention adds the bias itself
        if let Some(bias) = b_qkv.filter(|b| {
            b.numel() == w_qkv.n
                && x.dtype == Dtype::F16
                && self.out_dt() == Dtype::F16
                && self.attention_takes_qkv_bias(x, w_qkv, p)
        }) {
            let qkv = self.layer_norm_linear(x, gamma, beta, eps, w_qkv, None)?;
            let a = self.attention_packed_impl(&qkv, p, 0, false, Some(bias))?.0;
            return self.linear_add(&a, wo, bo, x);
        }
        let qkv = self.layer_norm_linear(x, gamma, beta, eps, w_qkv, b_qkv)?;
        self.attention_packed_add(&qkv, p, wo, bo, x)
    }

    fn layer_norm_mlp_add(
        &self,
        x: &CudaTensor,
        gamma: &CudaTensor,
        beta: Option<&CudaTensor>,
        eps: f32,
        w1: &CudaWeight,
        b1: Option<&CudaTensor>,
        act: Activation,
        w2: &CudaWeight,
        b2: Option<&CudaTensor>,
    ) -> Result<CudaTensor> {
        if let Some(y) = self.layer_norm_mlp_add_fp8(x, gamma, beta, eps, w1, b1, act, w2, b2)? {
            return Ok(y);
        }
        let h = self.layer_norm_feeding(x, gamma, beta, eps, w1)?;
        self.mlp_add(&h, w1, b1, act, w2, b2, x)
    }

    fn rotary_half(
        &self,
        x: &CudaTensor,
        cos: &CudaTensor,
        sin: &CudaTensor,
        head_dim: usize,
    ) -> Result<CudaTensor> {
        stapes_core::shapes::rotary_half_dims(x, cos, sin, head_dim)?;
        if sin.bit() != cos.bit() {
            // the kernel reads both as one type; the encoders upload both as f32
            return Err(Error::shape(
                "rotary_half",
                format!(
                    "cos {:?} and sin {:?} of different types",
                    cos.dtype, sin.dtype
                ),
            ));
        }
        let out = self.elementwise_out(x)?;
        let (n, nc) = (x.numel(), cos.numel());
        if n == 0 {
            return Ok(out);
        }
        let (y, xp, cp, sp) = (out.buf.ptr, self.t(x), self.t(cos), self.t(sin));
        let (ni, nci, dh) = (n as i64, nc as i64, head_dim as i32);
        let dt = out.bit() | (x.bit() << 1) | (cos.bit() << 2);
        self.launch(
            "rotary_half",
            grid_1d_x4(n, false),
            (256, 1, 1),
            0,
            args![y, xp, cp, sp, ni, nci, dh, dt],
        )?;
        Ok(out)
    }

    fn glu_depthwise_act(
        &self,
        x: &CudaTensor,
        keep: Option<&CudaTensor>,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        act: Activation,
    ) -> Result<CudaTensor> {
        Ok(self
            .glu_depthwise_act_fused(x, keep, w, bias, act, None, true)?
            .0)
    }

    fn glu_depthwise_act_feeding(
        &self,
        x: &CudaTensor,
        keep: Option<&CudaTensor>,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        act: Activation,
        next: &CudaWeight,
    ) -> Result<CudaTensor> {
        Ok(self
            .glu_depthwise_act_fused(x, keep, w, bias, act, Some(next), true)?
            .0)
    }

    fn rel_attention_inputs(
        &self,
        qkv: &CudaTensor,
        pos: &CudaTensor,
        heads: usize,
        bias_u: &CudaTensor,
        bias_v: &CudaTensor,
    ) -> Result<stapes_core::backend::RelAttnInputs<CudaTensor>> {
        self.rel_attention_inputs_fused(qkv, pos, heads, bias_u, bias_v)
    }

    fn rel_attention(
        &self,
        qkv: &CudaTensor,
        pos: &CudaTensor,
        bias_u: &CudaTensor,
        bias_v: &CudaTensor,
        keep: Option<&CudaTensor>,
        p: &stapes_core::backend::RelAttnParams,
    ) -> Result<CudaTensor> {
        Ok(self
            .rel_attention_fused(qkv, pos, bias_u, bias_v, keep, p, None, true)?
            .0)
    }

    fn rel_attention_feeding(
        &self,
        qkv: &CudaTensor,
        pos: &CudaTensor,
        bias_u: &CudaTensor,
        bias_v: &CudaTensor,
        keep: Option<&CudaTensor>,
        p: &stapes_core::backend::RelAttnParams,
        next: &CudaWeight,
    ) -> Result<CudaTensor> {
        Ok(self
            .rel_attention_fused(qkv, pos, bias_u, bias_v, keep, p, Some(next), true)?
            .0)
    }

    fn feeding_add_norms(
        &self,
        pass: stapes_core::backend::Feeding<'_, CudaTensor, CudaWeight>,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        r: &CudaTensor,
        norms: &[(&CudaTensor, Option<&CudaTensor>)],
        eps: f32,
        next: Option<stapes_core::backend::Feeds<'_, CudaWeight>>,
    ) -> Result<(CudaTensor, Vec<CudaTensor>)> {
        self.feeding_add_norms_fused(pass, w, bias, r, norms, eps, next)
    }

    // constants of encoder chains, layer norms feeding the next GEMM [fcenc2: conformer.rs]
    fn encoder_constant(&self, x: CudaTensor) -> Result<CudaTensor> {
        self.encoder_constant_k(x)
    }

    fn layer_norm_pair(
        &self,
        x: &CudaTensor,
        norms: [(&CudaTensor, Option<&CudaTensor>); 2],
        eps: f32,
        next: Option<&CudaWeight>,
    ) -> Result<(CudaTensor, CudaTensor)> {
        self.layer_norm_pair_fused(x, norms, eps, next, true)
    }

    fn linear_add_norms(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        r: &CudaTensor,
        norms: &[(&CudaTensor, Option<&CudaTensor>)],
        eps: f32,
        next: Option<&CudaWeight>,
    ) -> Result<(CudaTensor, Vec<CudaTensor>)> {
        self.linear_add_norms_fused(x, w, bias, r, norms, eps, next)
    }

    fn layer_norm_feeding(
        &self,
        x: &CudaTensor,
        gamma: &CudaTensor,
        beta: Option<&CudaTensor>,
        eps: f32,
        next: &CudaWeight,
    ) -> Result<CudaTensor> {
        self.layer_norm_feeding_fused(x, gamma, beta, eps, next, true)
    }

    // subsampling channel-last [fcenc2: conformer.rs]
    fn subsample_stem(
        &self,
        x: &CudaTensor,
        keep0: Option<&CudaTensor>,
        w0: &CudaTensor,
        b0: &CudaTensor,
        keep1: Option<&CudaTensor>,
        w1: &CudaTensor,
        b1: &CudaTensor,
        p: &stapes_core::backend::StridingParams,
    ) -> Result<CudaTensor> {
        self.subsample_stem_fused(x, keep0, w0, b0, keep1, w1, b1, p)
    }

    fn depthwise_conv2d_cl(
        &self,
        x: &CudaTensor,
        keep: Option<&CudaTensor>,
        relu_input: bool,
        w: &CudaTensor,
        bias: &CudaTensor,
        p: &stapes_core::backend::StridingParams,
    ) -> Result<CudaTensor> {
        self.depthwise_conv2d_cl_fused(x, keep, relu_input, w, bias, p)
    }

    fn matmul(&self, a: &CudaTensor, b: &CudaTensor, trans_b: bool) -> Result<CudaTensor> {
        let r = a.shape.len();
        let bad = || {
            Error::shape(
                "matmul",
                format!("a {:?} b {:?} trans_b {trans_b}", a.shape, b.shape),
            )
        };
        if r < 2
            || !(b.shape.len() == r && a.shape[..r - 2] == b.shape[..r - 2] || b.shape.len() == 2)
        {
            return Err(bad());
        }
        let (m, k) = (a.shape[r - 2], a.shape[r - 1]);
        let batch: usize = a.shape[..r - 2].iter().product();
        let rb = b.shape.len();
        let (b0, b1) = (b.shape[rb - 2], b.shape[rb - 1]);
        let bb = if rb == r { batch } else { 1 };
        let (kb, n) = if trans_b { (b1, b0) } else { (b0, b1) };
        if kb != k {
            return Err(bad());
        }
        let mut oshape = a.shape.clone();
        oshape[r - 1] = n;
        self.bind()?;
        let odt = self.out_dt();
        let out = self.alloc(&oshape, odt)?;
        if batch * m * n == 0 {
            return Ok(out);
        }
        if k == 0 {
            // SAFETY: the block holds batch·m·n elements of odt.
            unsafe {
                crate::pdl::foreign();
                result::memset_d8_async(
                    out.buf.ptr,
                    0,
                    batch * m * n * odt.size(),
                    self.stream.cu_stream(),
                )
            }
            .map_err(|e| CudaError::driver("memset", e))?;
            return Ok(out);
        }
        let stride_b = if bb == 1 && batch > 1 {
            0
        } else {
            (n * k) as i64
        };
        // f16 chains: f16 operands on the tensor cores; otherwise exact f32 math
        let (a, b) = (self.as_dtype(a, odt)?, self.as_dtype(b, odt)?);
        let (ap, bp) = (self.t(&a), self.t(&b));
        let h = odt == Dtype::F16;
        let blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: sizes checked above; all buffers on this stream.
        unsafe {
            gemm::batched_matmul(
                *blas.handle(),
                out.buf.ptr,
                h,
                h,
                ap,
                bp,
                batch,
                m,
                n,
                k,
                trans_b,
                stride_b,
            )?
        };
        if !self.capturing.load(Ordering::Relaxed) {
            Counters::bump(&self.counters.ops);
        }
        Ok(out)
    }

    fn conv1d(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        p: Conv1dParams,
    ) -> Result<CudaTensor> {
        self.conv1d_gemm(x, w, bias, p, None)
    }

    fn conv1d_act(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        p: Conv1dParams,
        act: Activation,
    ) -> Result<CudaTensor> {
        self.conv1d_gemm(x, w, bias, p, Some(act))
    }

    fn depthwise_conv1d(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        stride: usize,
        padding: usize,
    ) -> Result<CudaTensor> {
        let (b, t, c, kw, t_out) =
            stapes_core::shapes::depthwise_dims(x, w, bias, stride, padding)?;
        let out = self.alloc(&[b, t_out, c], self.out_dt())?;
        let n = b * t_out * c;
        if n > 0 {
            let (w, bias) = (self.as_dtype(w, Dtype::F32)?, self.param(bias)?);
            let (y, xp, wp, bp) = (out.buf.ptr, self.t(x), self.t(&w), self.opt(bias.as_ref()));
            let dt = out.bit() | (x.bit() << 1);
            let (bi, ti, ci, ki, si, pi, to) = (
                b as i32,
                t as i32,
                c as i32,
                kw as i32,
                stride as i32,
                padding as i32,
                t_out as i32,
            );
            self.launch(
                "depthwise_conv1d",
                grid_1d(n),
                (256, 1, 1),
                0,
                args![y, xp, wp, bp, bi, ti, ci, ki, si, pi, to, dt],
            )?;
        }
        Ok(out)
    }

    fn conv2d(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        p: Conv2dParams,
    ) -> Result<CudaTensor> {
        let stapes_core::shapes::Conv2dDims {
            b,
            cin: ci,
            h,
            w: wd,
            cout: co,
            kh,
            kw,
            ho,
            wo,
            ..
        } = stapes_core::shapes::conv2d_dims(x, w, bias, p)?;
        let g = p.groups;
        let out = self.alloc(&[b, co, ho, wo], self.out_dt())?;
        let n = b * co * ho * wo;
        let k = ci / g * kh * kw;
        if n > 0
            && g == 1
            && k >= CONV2D_GEMM_MIN_K
            && out.dtype == Dtype::F16
            && self.conv2d_gemm.load(Ordering::Relaxed)
        {
            self.conv2d_im2col(&out, x, w, bias, p, k)?;
        } else if n > 0 {
            let (w, bias) = (self.as_dtype(w, Dtype::F32)?, self.param(bias)?);
            let (y, xp, wp, bp) = (out.buf.ptr, self.t(x), self.t(&w), self.opt(bias.as_ref()));
            let dt = out.bit() | (x.bit() << 1);
            let v: [i32; 15] = [
                b,
                ci,
                h,
                wd,
                co,
                kh,
                kw,
                p.stride.0,
                p.stride.1,
                p.padding.0,
                p.padding.1,
                g,
                ho,
                wo,
                0,
            ]
            .map(|u| u as i32);
            self.launch(
                "conv2d_direct",
                grid_1d(n),
                (256, 1, 1),
                0,
                args![
                    y, xp, wp, bp, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9],
                    v[10], v[11], v[12], v[13], dt
                ],
            )?;
        }
        Ok(out)
    }

    fn attention(
        &self,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        p: &AttnParams,
    ) -> Result<CudaTensor> {
        self.attention_impl(q, k, Some(v), p, false)
    }

    fn attention_probs(
        &self,
        q: &CudaTensor,
        k: &CudaTensor,
        p: &AttnParams,
    ) -> Result<CudaTensor> {
        self.attention_impl(q, k, None, p, true)
    }

    fn attention_packed(&self, qkv: &CudaTensor, p: &AttnParams) -> Result<CudaTensor> {
        Ok(self.attention_packed_impl(qkv, p, 0, false, None)?.0)
    }

    fn attention_packed_add(
        &self,
        qkv: &CudaTensor,
        p: &AttnParams,
        wo: &CudaWeight,
        bo: Option<&CudaTensor>,
        r: &CudaTensor,
    ) -> Result<CudaTensor> {
        self.attention_packed_add_fp8(qkv, None, p, wo, bo, r)
    }

    fn layer_norm(
        &self,
        x: &CudaTensor,
        gamma: &CudaTensor,
        beta: Option<&CudaTensor>,
        eps: f32,
    ) -> Result<CudaTensor> {
        Ok(self.layer_norm_y8(x, gamma, beta, eps, 0, true)?.0)
    }

    fn rms_norm(&self, x: &CudaTensor, gamma: &CudaTensor, eps: f32) -> Result<CudaTensor> {
        let n = *x.shape.last().unwrap_or(&0);
        if gamma.numel() != n {
            return Err(Error::shape(
                "rms_norm",
                format!("x {:?} gamma {:?}", x.shape, gamma.shape),
            ));
        }
        let out = self.elementwise_out(x)?;
        let rows = x.numel() / n.max(1);
        if rows * n == 0 {
            return Ok(out);
        }
        let gamma = self.as_dtype(gamma, Dtype::F32)?;
        let (y, xp, gp, ni) = (out.buf.ptr, self.t(x), self.t(&gamma), n as i32);
        let dt = out.bit() | (x.bit() << 1);
        self.launch(
            "rms_norm",
            (rows as u32, 1, 1),
            (256, 1, 1),
            0,
            args![y, xp, gp, ni, eps, dt],
        )?;
        Ok(out)
    }

    fn activation(&self, x: &CudaTensor, act: Activation) -> Result<CudaTensor> {
        let out = self.elementwise_out(x)?;
        self.act_launch(out.buf.ptr, out.dtype, x, act, false)?;
        Ok(out)
    }

    fn glu(&self, x: &CudaTensor) -> Result<CudaTensor> {
        let c = *x.shape.last().unwrap_or(&0);
        if !c.is_multiple_of(2) || x.shape.is_empty() {
            return Err(Error::shape(
                "glu",
                format!("odd last dim in {:?}", x.shape),
            ));
        }
        let mut shape = x.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = c / 2;
        let out = self.alloc(&shape, self.out_dt())?;
        let rows = x.numel() / c.max(1);
        if rows * c > 0 {
            let (y, xp, r, h) = (out.buf.ptr, self.t(x), rows as i64, (c / 2) as i32);
            let dt = out.bit() | (x.bit() << 1);
            self.launch(
                "glu",
                grid_1d(rows * c / 2),
                (256, 1, 1),
                0,
                args![y, xp, r, h, dt],
            )?;
        }
        Ok(out)
    }

    fn softmax(&self, x: &CudaTensor) -> Result<CudaTensor> {
        self.rowwise(x, "softmax", 0)
    }

    fn log_softmax(&self, x: &CudaTensor) -> Result<CudaTensor> {
        self.rowwise(x, "softmax", 1)
    }

    fn add(&self, a: &CudaTensor, b: &CudaTensor) -> Result<CudaTensor> {
        self.binary(a, b, 0, "add")
    }

    fn mul(&self, a: &CudaTensor, b: &CudaTensor) -> Result<CudaTensor> {
        self.binary(a, b, 1, "mul")
    }

    fn affine(&self, x: &CudaTensor, s: f32, t: f32) -> Result<CudaTensor> {
        let out = self.elementwise_out(x)?;
        let n = x.numel();
        if n > 0 {
            let (y, xp, ni) = (out.buf.ptr, self.t(x), n as i64);
            let dt = out.bit() | (x.bit() << 1);
            self.launch(
                "affine",
                grid_1d_x4(n, n.is_multiple_of(4)),
                (256, 1, 1),
                0,
                args![y, xp, ni, s, t, dt],
            )?;
        }
        Ok(out)
    }

    fn split_heads(
        &self,
        x: &CudaTensor,
        heads: usize,
        bias: Option<&CudaTensor>,
    ) -> Result<CudaTensor> {
        let (bs, t, c) = stapes_core::backend::heads_dims(&x.shape, heads)?;
        if let Some(bb) = bias {
            if bb.numel() != c {
                return Err(Error::shape(
                    "split_heads",
                    format!("bias {:?} for {c} channels", bb.shape),
                ));
            }
        }
        let out = self.alloc(&[bs * heads, t, c / heads], self.out_dt())?;
        self.heads(&out, x, bias, t, heads, c / heads, 0)?;
        Ok(out)
    }

    fn merge_heads(&self, x: &CudaTensor, batch: usize) -> Result<CudaTensor> {
        let (bh, t, dh) = stapes_core::backend::merged_dims(&x.shape, batch)?;
        let heads = bh / batch;
        let out = self.alloc(&[batch, t, heads * dh], self.out_dt())?;
        self.heads(&out, x, None, t, heads, dh, 1)?;
        Ok(out)
    }

    fn rel_shift_softmax(
        &self,
        ac: &CudaTensor,
        bd: &CudaTensor,
        keep: Option<&CudaTensor>,
        scale: f32,
    ) -> Result<CudaTensor> {
        let (bh, c, t) = stapes_core::backend::rel_shift_dims(&ac.shape, &bd.shape)?;
        let rows_per_batch = match keep {
            Some(k) => {
                let (b, s) = stapes_core::backend::mask_dims(&ac.shape, &k.shape, 1)?;
                if s != t {
                    return Err(Error::shape(
                        "rel_shift_softmax",
                        format!("keep {:?} for {t} keys", k.shape),
                    ));
                }
                bh / b
            }
            None => bh,
        };
        let out = self.alloc(&[bh, c, t], self.out_dt())?;
        let (bd, keep) = (self.as_dtype(bd, ac.dtype)?, self.param(keep)?);
        let (y, ap, dp, kp) = (
            out.buf.ptr,
            self.t(ac),
            self.t(&bd),
            self.opt(keep.as_ref()),
        );
        let (ci, ti, ri) = (c as i32, t as i32, rows_per_batch.max(1) as i32);
        let dt = out.bit() | (ac.bit() << 1);
        let rows = (bh * c) as i64;
        if t <= 1024 {
            // one warp per row (norm.cu)
            self.launch(
                "rel_shift_softmax_rows",
                ((bh * c).div_ceil(8) as u32, 1, 1),
                (256, 1, 1),
                0,
                args![y, ap, dp, kp, rows, ci, ti, ri, scale, dt],
            )?;
        } else {
            // long rows (minutes of audio): a block per row
            self.launch(
                "rel_shift_softmax",
                ((bh * c) as u32, 1, 1),
                (256, 1, 1),
                0,
                args![y, ap, dp, kp, ci, ti, ri, scale, dt],
            )?;
        }
        Ok(out)
    }

    fn mask_fill(
        &self,
        x: &CudaTensor,
        keep: &CudaTensor,
        inner: usize,
        fill: f32,
    ) -> Result<CudaTensor> {
        let (bs, s) = stapes_core::backend::mask_dims(&x.shape, &keep.shape, inner)?;
        let out = self.elementwise_out(x)?;
        let n = x.numel();
        let keep = self.as_dtype(keep, Dtype::F32)?;
        let (y, xp, kp) = (out.buf.ptr, self.t(x), self.t(&keep));
        let (ni, per, si, ii) = (n as i64, (n / bs) as i64, s as i32, inner as i32);
        let dt = out.bit() | (x.bit() << 1);
        self.launch(
            "mask_fill",
            grid_1d(n),
            (256, 1, 1),
            0,
            args![y, xp, kp, ni, per, si, ii, fill, dt],
        )?;
        Ok(out)
    }

    fn argmax(&self, x: &CudaTensor) -> Result<Vec<u32>> {
        self.no_capture("argmax")?;
        let n = *x.shape.last().unwrap_or(&1);
        let rows = x.numel() / n.max(1);
        if rows == 0 || n == 0 {
            return Ok(vec![0; rows]);
        }
        let ids = self.pool.alloc(rows * 4)?;
        let (ip, xp, ni, dt) = (ids.ptr, self.t(x), n as i32, x.bit() << 1);
        self.launch(
            "argmax",
            (rows as u32, 1, 1),
            (256, 1, 1),
            0,
            args![ip, xp, ni, dt],
        )?;
        // the block holds `rows` u32
        self.read_back(&ids, 0u32, rows)
    }

    // decoder steps with device-side parameters: kernels in step.rs
    fn captures_chains(&self) -> bool {
        self.graphs_enabled()
    }

    fn embed_step(
        &self,
        table: &CudaTensor,
        positions: &CudaTensor,
        step: &CudaTensor,
    ) -> Result<CudaTensor> {
        crate::step::embed(self, table, positions, step, &|s| self.alloc_f32(s))
    }

    fn write_rows_step(
        &self,
        dst: &mut CudaTensor,
        src: &CudaTensor,
        step: &CudaTensor,
    ) -> Result<()> {
        crate::step::write_rows(self, dst, src, step)
    }

    fn attention_step(
        &self,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        p: &AttnParams,
        step: &CudaTensor,
    ) -> Result<CudaTensor> {
        crate::step::attention(self, q, k, v, p, step, &|s| self.alloc_f32(s))
    }

    // fused decoder-step projections and attention: kernels in step.rs
    fn norm_linear(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        f: &stapes_core::LinearFusion<'_, CudaTensor>,
    ) -> Result<CudaTensor> {
        crate::step::norm_linear_op(self, x, w, f, &|s| self.alloc_f32(s))
    }

    fn qkv_step(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        f: &stapes_core::LinearFusion<'_, CudaTensor>,
        kv: (&mut CudaTensor, &mut CudaTensor),
        step: &CudaTensor,
    ) -> Result<CudaTensor> {
        crate::step::qkv_step_op(self, x, w, f, kv, step, &|s| self.alloc_f32(s))
    }

    fn attention_step_packed(
        &self,
        qkv: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        p: &AttnParams,
        step: &CudaTensor,
    ) -> Result<CudaTensor> {
        crate::step::attention_packed(self, qkv, k, v, p, step, &|s| self.alloc_f32(s))
    }

    fn download_step(&self, t: &CudaTensor) -> Result<HostTensor> {
        crate::step::download_pinned(self, t)?.map_or_else(|| self.download(t), Ok)
    }

    // token selection: crate::select
    fn select_tokens(
        &self,
        logits: &CudaTensor,
        req: &stapes_core::select::SelectRequest<'_>,
    ) -> Result<stapes_core::select::Selected> {
        self.select_tokens_k(logits, req)
    }

    fn select_tokens_feed<'a>(
        &'a self,
        logits: &CudaTensor,
        req: &stapes_core::select::SelectRequest<'_>,
        feed: &mut CudaTensor,
        position: usize,
    ) -> Result<stapes_core::select::PendingSelect<'a>> {
        self.select_tokens_feed_k(logits, req, feed, position)
    }

    fn selects_on_device(&self) -> bool {
        crate::select::select_on()
    }

    fn write_host(&self, dst: &mut CudaTensor, src: &HostTensor) -> Result<()> {
        if !crate::step::write_host(self, dst, src)? {
            self.write_rows(dst, &self.upload(src)?, 0)?;
        }
        Ok(())
    }

    fn attention_decode(
        &self,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        p: &AttnParams,
    ) -> Result<CudaTensor> {
        match crate::step::attention_split(self, q, k, v, p, &|s| self.alloc_f32(s))? {
            Some(out) => Ok(out),
            None => self.attention(q, k, v, p),
        }
    }

    // [pdl] f16 copies of read-mostly activations (cross K/V), STAPES_CUDA_CROSS_F16: step.rs
    fn compact_copy(&self, t: &CudaTensor) -> Result<CudaTensor> {
        crate::step::compact_copy(self, t)
    }

    fn linear_compact(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
    ) -> Result<CudaTensor> {
        self.linear_compact_f16(x, w, bias)
    }

    // transducer label loop with its state on the device: kernels in transducer.rs
    fn transducer_frames(&self, x: &CudaTensor, state: &CudaTensor) -> Result<CudaTensor> {
        self.transducer_frames_k(x, state, &|s| self.alloc_f32(s))
    }

    fn transducer_advance(
        &self,
        state: &mut CudaTensor,
        logits: &CudaTensor,
        rule: &stapes_core::transducer::TransducerRule,
        log: &mut CudaTensor,
        slot: usize,
    ) -> Result<()> {
        self.transducer_advance_k(state, logits, rule, log, slot)
    }

    fn transducer_embed(&self, table: &CudaTensor, state: &CudaTensor) -> Result<CudaTensor> {
        self.transducer_embed_k(table, state, &|s| self.alloc_f32(s))
    }

    fn transducer_keep(
        &self,
        dst: &mut CudaTensor,
        src: &CudaTensor,
        state: &CudaTensor,
    ) -> Result<()> {
        self.transducer_keep_k(dst, src, state)
    }

    fn lstm_cell(
        &self,
        x: &CudaTensor,
        h: &CudaTensor,
        c: &CudaTensor,
        w_ih: &CudaWeight,
        w_hh: &CudaWeight,
        bias: Option<&CudaTensor>,
    ) -> Result<(CudaTensor, CudaTensor)> {
        self.lstm_cell_k(x, h, c, w_ih, w_hh, bias, &|s| self.alloc(s, self.out_dt()))
    }

    fn transducer_joint_input(
        &self,
        x: &CudaTensor,
        state: &CudaTensor,
        pred: &CudaTensor,
        act: Activation,
    ) -> Result<CudaTensor> {
        self.transducer_joint_input_k(x, state, pred, act_code(act), &|s| self.alloc_f32(s))
    }

    fn transducer_lstm(
        &self,
        x: &CudaTensor,
        h: &mut CudaTensor,
        c: &mut CudaTensor,
        w_ih: &CudaWeight,
        w_hh: &CudaWeight,
        bias: Option<&CudaTensor>,
        state: &CudaTensor,
    ) -> Result<()> {
        self.transducer_lstm_k(x, h, c, w_ih, w_hh, bias, state, &|s| {
            self.alloc(s, self.out_dt())
        })
    }

    fn transducer_linear(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
    ) -> Result<CudaTensor> {
        self.transducer_linear_k(x, w, bias, &|s| self.alloc(s, self.out_dt()))
    }

    fn chain(
        &self,
        key: &str,
        f: &mut dyn FnMut(&Self) -> Result<Vec<Self::Tensor>>,
    ) -> Result<Vec<Self::Tensor>> {
        let on = self.f16_chains.load(Ordering::SeqCst) && f16_chain_key(key);
        // the graph of a chain depends on the mode it ran in
        let key = if on {
            format!("{key}|act16")
        } else {
            key.to_string()
        };
        let prev = self.f16_scope.swap(on, Ordering::SeqCst);
        let r = self.chain_graph(&key, f);
        self.f16_scope.store(prev, Ordering::SeqCst);
        r
    }

    fn synchronize(&self) -> Result<()> {
        self.no_capture("synchronize")?;
        self.stream
            .synchronize()
            .map_err(|e| CudaError::driver("stream synchronize", e).into())
    }
}

/// Raw stream handle for timing tools (CUDA events) in benches.
impl CudaBackend {
    pub fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The one stream every op is queued on (for CUDA-event timing).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

#[cfg(test)]
mod tests {
    use super::{code, par_rows, q8_row, round_q8};

    /// What the q8 re-layout means: the lane's round trip, then one int8 scale per row.
    fn q8_row_reference(row: &[f32]) -> (Vec<i8>, f32) {
        let v = stapes_core::lane::round_trip(stapes_core::Lane::Q8, row);
        let amax = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
        let q = v
            .iter()
            .map(|x| (x * inv).round().clamp(-127.0, 127.0) as i8)
            .collect();
        (q, amax / 127.0)
    }

    #[test]
    fn round_q8_is_round_then_clamp() {
        let mut ys: Vec<f32> = (-600..=600).map(|i| i as f32 * 0.25).collect();
        for base in [0.5f32, 1.5, 2.5, 126.5, 127.5, 128.5] {
            for y in [base, -base] {
                ys.extend([
                    y,
                    f32::from_bits(y.to_bits() - 1),
                    f32::from_bits(y.to_bits() + 1),
                ]);
            }
        }
        ys.extend([
            0.0,
            -0.0,
            0.49999997,
            -0.49999997,
            1e-40,
            3e9,
            -3e9,
            f32::MAX,
            f32::MIN,
        ]);
        ys.extend(
            (0..1u32 << 16).map(|i| f32::from_bits(i.wrapping_mul(0x9E37_79B9) & 0xC37F_FFFF)),
        );
        for y in ys {
            let want = y.round().clamp(-127.0, 127.0);
            let want = if want.is_nan() { 0.0 } else { want };
            // the sign of a zero may differ; the codes and every later product's value do not
            assert!(round_q8(y) == want, "{y:e}: {} vs {want}", round_q8(y));
            assert_eq!(code(round_q8(y)), want as i8, "{y:e}");
        }
    }

    #[test]
    fn q8_row_matches_the_lane_composition() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        for &k in &[
            1usize, 5, 31, 32, 33, 100, 385, 1280, 5120, 8192, 8200, 9000,
        ] {
            for &mag in &[1e-38f32, 1e-6, 0.02, 1.0, 3e4] {
                let mut row: Vec<f32> = (0..k).map(|_| next() * mag).collect();
                if k > 40 {
                    row[3] = 0.0;
                    row[k / 2] *= 50.0; // one large value sets the row scale
                    row[32..40].iter_mut().for_each(|v| *v = 0.0);
                }
                let (want, want_scale) = q8_row_reference(&row);
                let mut got = vec![0i8; k];
                let scale = q8_row(&row, &mut got);
                assert_eq!(got, want, "k {k} magnitude {mag:e}");
                assert_eq!(
                    scale.to_bits(),
                    want_scale.to_bits(),
                    "k {k} magnitude {mag:e}"
                );
            }
        }
        let mut zeros = vec![5i8; 64];
        assert_eq!(q8_row(&[0.0; 64], &mut zeros), 0.0);
        assert!(zeros.iter().all(|&q| q == 0));
    }

    // The weight path's slice conversion (F16C where present) rounds exactly as f16::from_f32:
    // ties to even, subnormal halves, overflow to infinity, on a sweep of f32 bit patterns.
    #[test]
    fn slice_f16_conversion_matches_scalar() {
        use half::f16;
        use half::slice::HalfFloatSliceExt;
        let mut src: Vec<f32> = (0..1u32 << 20)
            .map(|i| f32::from_bits(i.wrapping_mul(0x9E37_79B9) & 0xFF7F_FFFF))
            .collect();
        src.extend([
            0.5 * 2f32.powi(-24),
            65504.0,
            65520.0,
            1.0 + 2f32.powi(-11),
            -0.0,
        ]);
        let mut got = vec![f16::ZERO; src.len()];
        got.convert_from_f32_slice(&src);
        for (g, &v) in got.iter().zip(&src) {
            assert_eq!(g.to_bits(), f16::from_f32(v).to_bits(), "{v:e}");
        }
    }

    // The threaded conversion visits every row once with its own index, whatever the split.
    #[test]
    fn par_rows_matches_one_thread() {
        for (rows, len) in [(3usize, 5usize), (1 << 12, 257), ((1 << 20) / 64 + 7, 64)] {
            let mut a = vec![0u32; rows * len];
            let mut b = vec![0u32; rows];
            par_rows(&mut a, &mut b, len, 1, |r, ra, rb| {
                for (j, x) in ra.iter_mut().enumerate() {
                    *x = (r * len + j) as u32;
                }
                rb[0] = r as u32 + 1;
            });
            assert!(
                a.iter().enumerate().all(|(i, &x)| x == i as u32),
                "{rows}x{len}"
            );
            assert!(b.iter().enumerate().all(|(i, &x)| x == i as u32 + 1));
            let mut c = vec![0u8; rows * len];
            par_rows::<u8, u8>(&mut c, &mut [], len, 0, |_, rc, _| rc.fill(1));
            assert!(c.iter().all(|&x| x == 1));
        }
    }
}
