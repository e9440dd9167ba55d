//! Library GEMMs: cuBLAS GemmEx for f16 (tensor cores, f32 accumulate) and batched f32, and
//! cuBLASLt int8 IMMA for the q8 lane with descriptors, layouts and the chosen algorithm cached
//! per shape (cuBLASLt's heuristic is too slow to run per call).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaStream;

use cudarc::cublas::{self, sys as bsys};
use cudarc::cublaslt::{self, result as ltr, sys as lts};

use crate::CudaError;

fn blas_err(what: &'static str) -> impl Fn(cublas::result::CublasError) -> CudaError {
    move |e| CudaError::Blas(format!("{what}: {e:?}"))
}
fn lt_err(what: &'static str) -> impl Fn(cublaslt::result::CublasError) -> CudaError {
    move |e| CudaError::Blas(format!("{what}: {e:?}"))
}

fn blas_type(f16: bool) -> bsys::cudaDataType_t {
    if f16 {
        bsys::cudaDataType_t::CUDA_R_16F
    } else {
        bsys::cudaDataType_t::CUDA_R_32F
    }
}

/// Row-major `y (m, n) = x (m, k) · w (n, k)ᵀ` with f16 operands and f32 (or, with `y16`, f16)
/// output, f32 accumulation.
/// In cuBLAS's column-major terms that is `yᵀ (n × m) = wᵀᵀ · xᵀ`: TN with lda = ldb = k.
///
/// # Safety
/// Pointers must be valid device buffers of the stated sizes on the handle's stream.
#[allow(clippy::too_many_arguments)]
pub unsafe fn f16_linear(
    handle: bsys::cublasHandle_t,
    y: u64,
    y16: bool,
    x16: u64,
    w16: u64,
    m: usize,
    n: usize,
    k: usize,
) -> Result<(), CudaError> {
    let (alpha, beta) = (1f32, 0f32);
    crate::pdl::foreign();
    cublas::result::gemm_ex(
        handle,
        bsys::cublasOperation_t::CUBLAS_OP_T,
        bsys::cublasOperation_t::CUBLAS_OP_N,
        n as i32,
        m as i32,
        k as i32,
        &alpha as *const f32 as *const c_void,
        w16 as *const c_void,
        bsys::cudaDataType_t::CUDA_R_16F,
        k as i32,
        x16 as *const c_void,
        bsys::cudaDataType_t::CUDA_R_16F,
        k as i32,
        &beta as *const f32 as *const c_void,
        y as *mut c_void,
        blas_type(y16),
        n as i32,
        bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
    )
    .map_err(blas_err("cublasGemmEx f16"))
}

/// Split-K partial products of the row-major `x (m, k) · w (n, k)ᵀ`: plane `s` of `p (splits,
/// m, n)` f32 is `x[:, s·kₛ .. (s+1)·kₛ] · w[:, same]ᵀ`, `kₛ = k / splits`, f16 operands, f32
/// accumulation: one strided-batched GEMM whose batches are the K slices (lda = ldb = k).
///
/// # Safety
/// Pointers must be valid device buffers of the stated sizes on the handle's stream;
/// `k % splits == 0`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn split_k_partials(
    handle: bsys::cublasHandle_t,
    p: u64,
    x16: u64,
    w16: u64,
    m: usize,
    n: usize,
    k: usize,
    splits: usize,
) -> Result<(), CudaError> {
    let (alpha, beta) = (1f32, 0f32);
    let ks = k / splits.max(1);
    crate::pdl::foreign();
    cublas::result::gemm_strided_batched_ex(
        handle,
        bsys::cublasOperation_t::CUBLAS_OP_T,
        bsys::cublasOperation_t::CUBLAS_OP_N,
        n as i32,
        m as i32,
        ks as i32,
        &alpha as *const f32 as *const c_void,
        w16 as *const c_void,
        bsys::cudaDataType_t::CUDA_R_16F,
        k as i32,
        ks as i64,
        x16 as *const c_void,
        bsys::cudaDataType_t::CUDA_R_16F,
        k as i32,
        ks as i64,
        &beta as *const f32 as *const c_void,
        p as *mut c_void,
        bsys::cudaDataType_t::CUDA_R_32F,
        n as i32,
        (m * n) as i64,
        splits as i32,
        bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
    )
    .map_err(blas_err("cublasGemmStridedBatchedEx (split K)"))
}

/// Batched row-major `c (b, m, n) = a (b, m, k) · op(bm)`, `op` = transpose when `trans_b`
/// (`bm (b, n, k)`), else `bm (b, k, n)`. `stride_b = 0` broadcasts one `bm` over the batch.
/// `ab16`: a and bm are f16 (tensor cores, f32 accumulation) with c f16 or f32 (`c16`); else
/// all f32 with plain f32 math (cuBLAS's default mode has no TF32; `c16` must be false).
///
/// # Safety
/// Pointers must be valid device buffers of the stated sizes on the handle's stream.
#[allow(clippy::too_many_arguments)]
pub unsafe fn batched_matmul(
    handle: bsys::cublasHandle_t,
    c: u64,
    c16: bool,
    ab16: bool,
    a: u64,
    bm: u64,
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    trans_b: bool,
    stride_b: i64,
) -> Result<(), CudaError> {
    let (alpha, beta) = (1f32, 0f32);
    let (op_b, ld_b) = if trans_b {
        (bsys::cublasOperation_t::CUBLAS_OP_T, k)
    } else {
        (bsys::cublasOperation_t::CUBLAS_OP_N, n)
    };
    crate::pdl::foreign();
    cublas::result::gemm_strided_batched_ex(
        handle,
        op_b,
        bsys::cublasOperation_t::CUBLAS_OP_N,
        n as i32,
        m as i32,
        k as i32,
        &alpha as *const f32 as *const c_void,
        bm as *const c_void,
        blas_type(ab16),
        ld_b as i32,
        stride_b,
        a as *const c_void,
        blas_type(ab16),
        k as i32,
        (m * k) as i64,
        &beta as *const f32 as *const c_void,
        c as *mut c_void,
        blas_type(c16),
        n as i32,
        (m * n) as i64,
        batch as i32,
        bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
    )
    .map_err(blas_err("cublasGemmStridedBatchedEx"))
}

/// A 2-D convolution's GEMM over im2col columns: per batch entry, row-major
/// `y_b (co, p) = w (co, k) · cols_b (k, p)`, one `w` shared by the batch (f16 operands, f32
/// accumulation, y f16 or f32 by `y16`). Column-major that is `y_bᵀ (p × co) = cols_bᵀ · wᵀ`: NN
/// with lda = p, ldb = k, ldc = p, `w`'s batch stride 0.
///
/// # Safety
/// Pointers must be valid device buffers of the stated sizes on the handle's stream.
#[allow(clippy::too_many_arguments)]
pub unsafe fn conv_gemm(
    handle: bsys::cublasHandle_t,
    y: u64,
    y16: bool,
    cols16: u64,
    w16: u64,
    batch: usize,
    co: usize,
    p: usize,
    k: usize,
) -> Result<(), CudaError> {
    let (alpha, beta) = (1f32, 0f32);
    crate::pdl::foreign();
    cublas::result::gemm_strided_batched_ex(
        handle,
        bsys::cublasOperation_t::CUBLAS_OP_N,
        bsys::cublasOperation_t::CUBLAS_OP_N,
        p as i32,
        co as i32,
        k as i32,
        &alpha as *const f32 as *const c_void,
        cols16 as *const c_void,
        bsys::cudaDataType_t::CUDA_R_16F,
        p as i32,
        (k * p) as i64,
        w16 as *const c_void,
        bsys::cudaDataType_t::CUDA_R_16F,
        k as i32,
        0,
        &beta as *const f32 as *const c_void,
        y as *mut c_void,
        blas_type(y16),
        p as i32,
        (co * p) as i64,
        batch as i32,
        bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
    )
    .map_err(blas_err("cublasGemmStridedBatchedEx conv2d"))
}

/// Which cuBLASLt GEMM: f16 operands with f32 output, or f16 output (both with an optional
/// fused f32 bias; cuBLASLt 13 on the H200 has no plan for f16 output with an f32 bias, so the
/// caller falls back), f16 output with an f16 bias, int8 operands with i32 output (IMMA), or
/// e4m3 operands with f16 output and an f16 bias (the q8 lane's FP8 form, fp8.rs: A's scale
/// from a device pointer, B's 1, Hopper's fast accumulation), or the same writing e4m3 (an
/// MLP's hidden for the next FP8 GEMM: D's scale 1, saturating).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LtKind {
    F16,
    F16Out16,
    F16Out16BiasF16,
    I8,
    Fp8,
    Fp8Out8,
    /// A split-K GEMM's partial products: K cut into this many slices, one batch entry each,
    /// e4m3 operands (A's scale from a device pointer, as [`LtKind::Fp8`]), f32 output, no
    /// bias or C (`linear_add_norms` sums the slices).
    SplitFp8(u8),
}

/// An activation cuBLASLt applies in the GEMM's epilogue, after the bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EpiAct {
    None,
    /// cuBLASLt's GELU, the tanh form.
    Gelu,
    Relu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    kind: LtKind,
    m: usize,
    n: usize,
    k: usize,
    bias: bool,
    /// `D = A·B + C` with beta = 1 (a residual added by the GEMM, `Backend::linear_add`):
    /// timed and saved apart from the beta = 0 plan, whose best algorithm can differ.
    c: bool,
    /// The activation after the bias, in the epilogue.
    act: EpiAct,
}

/// A cached plan for `D (m × n) = Aᵀ · B (+ bias per row of D)`, A stored k × m, B stored
/// k × n, column-major: with A = W (row-major (N, K)) and B = x (row-major (M, K)) that is the
/// row-major `y (M, N) = x · Wᵀ`.
struct LtPlan {
    desc: lts::cublasLtMatmulDesc_t,
    la: lts::cublasLtMatrixLayout_t,
    lb: lts::cublasLtMatrixLayout_t,
    lc: lts::cublasLtMatrixLayout_t,
    /// D's layout where its type is not C's ([`LtKind::Fp8Out8`]), else C's.
    ld: Option<lts::cublasLtMatrixLayout_t>,
    algo: lts::cublasLtMatmulAlgo_t,
    /// Candidates not yet timed (autotuning happens on the first eager call).
    candidates: Vec<lts::cublasLtMatmulAlgo_t>,
}

/// Algorithms chosen by timing, kept on disk between processes: the heuristic query and the
/// timing cost ~0.2 s at start-up on the H200 (most of it cuBLASLt's first heuristic call and
/// the lazy loading of every candidate's kernels), the saved choice costs one file read.
/// cuBLASLt documents the algorithm struct as reusable with the same library version and GPU:
/// the file name carries both (and the workspace size), and a saved entry is still checked with
/// `cublasLtMatmulAlgoCheck` before use. `STAPES_CUDA_LT_CACHE=0` turns it off.
struct AlgoCache {
    path: Option<std::path::PathBuf>,
    saved: HashMap<Key, [u64; 8]>,
}

impl AlgoCache {
    fn open(device: &str, workspace_bytes: usize) -> Self {
        let on = std::env::var("STAPES_CUDA_LT_CACHE").map_or(true, |v| v.trim() != "0");
        // SAFETY: a version query; the library is loaded (the handle exists).
        let version = unsafe { lts::cublasLtGetVersion() };
        let tag = format!("{device}/{version}/{workspace_bytes}");
        let hash = tag.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
        });
        let path = on
            .then(crate::kernels::cache_dir)
            .flatten()
            .map(|d| d.join(format!("cublaslt-{version}-{hash:016x}.txt")));
        let saved = path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|text| text.lines().filter_map(parse_line).collect())
            .unwrap_or_default();
        Self { path, saved }
    }

    /// Remember a choice and rewrite the file (best effort: a read-only cache only costs the
    /// timing again next time).
    fn save(&mut self, key: Key, algo: &lts::cublasLtMatmulAlgo_t) {
        self.saved.insert(key, algo.data);
        let Some(path) = &self.path else { return };
        let mut text = String::new();
        for (k, d) in &self.saved {
            let plus_c = if k.c { "+C" } else { "" };
            let plus_g = match k.act {
                EpiAct::None => "",
                EpiAct::Gelu => "+G",
                EpiAct::Relu => "+R",
            };
            text.push_str(&format!(
                "{:?}{plus_c}{plus_g} {} {} {} {}",
                k.kind, k.m, k.n, k.k, k.bias as u8
            ));
            for x in d {
                text.push_str(&format!(" {x:016x}"));
            }
            text.push('\n');
        }
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

/// `F16 384 1500 384 1 <8 hex words>` (`F16+C …` for a beta = 1 plan, `+G` after it for the
/// GELU epilogue); anything else is skipped.
fn parse_line(line: &str) -> Option<(Key, [u64; 8])> {
    let mut it = line.split_whitespace();
    let word = it.next()?;
    let (word, act) = match (word.strip_suffix("+G"), word.strip_suffix("+R")) {
        (Some(w), _) => (w, EpiAct::Gelu),
        (_, Some(w)) => (w, EpiAct::Relu),
        _ => (word, EpiAct::None),
    };
    let (word, c) = match word.strip_suffix("+C") {
        Some(w) => (w, true),
        None => (word, false),
    };
    let kind = match word {
        "F16" => LtKind::F16,
        "F16Out16" => LtKind::F16Out16,
        "F16Out16BiasF16" => LtKind::F16Out16BiasF16,
        "I8" => LtKind::I8,
        "Fp8" => LtKind::Fp8,
        "Fp8Out8" => LtKind::Fp8Out8,
        w => {
            let s = w.strip_prefix("SplitFp8(")?.strip_suffix(')')?;
            match s.parse::<u8>().ok()? {
                s if s > 1 => LtKind::SplitFp8(s),
                _ => return None,
            }
        }
    };
    let mut num = || it.next()?.parse::<usize>().ok();
    let (m, n, k, bias) = (num()?, num()?, num()?, num()?);
    let mut data = [0u64; 8];
    for d in data.iter_mut() {
        // exactly the 16 digits `save` writes: a cut line must not read as a smaller number
        let w = it.next().filter(|w| w.len() == 16)?;
        *d = u64::from_str_radix(w, 16).ok()?;
    }
    it.next().is_none().then_some((
        Key {
            kind,
            m,
            n,
            k,
            bias: bias != 0,
            c,
            act,
        },
        data,
    ))
}

// SAFETY: descriptors are plain cuBLASLt heap objects, only touched under the plans' mutex.
unsafe impl Send for LtPlan {}

impl Drop for LtPlan {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once.
        unsafe {
            let _ = ltr::destroy_matrix_layout(self.la);
            let _ = ltr::destroy_matrix_layout(self.lb);
            let _ = ltr::destroy_matrix_layout(self.lc);
            if let Some(ld) = self.ld {
                let _ = ltr::destroy_matrix_layout(ld);
            }
            let _ = ltr::destroy_matmul_desc(self.desc);
        }
    }
}

/// cuBLASLt with plans cached per shape and the algorithm chosen by timing the heuristic's top
/// candidates once (cuBLASLt's first pick is often not the fastest at these shapes).
pub struct Lt {
    handle: lts::cublasLtHandle_t,
    /// `None`: cuBLASLt has no algorithm for that shape (remembered so the caller's fallback is
    /// taken without asking again).
    plans: Mutex<HashMap<Key, Option<LtPlan>>>,
    saved: Mutex<AlgoCache>,
    pub workspace_bytes: usize,
}

// SAFETY: the handle is used only under the plans' mutex (see `matmul`).
unsafe impl Send for Lt {}
unsafe impl Sync for Lt {}

impl Drop for Lt {
    fn drop(&mut self) {
        self.plans
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        // SAFETY: created in `new`, destroyed once.
        let _ = unsafe { ltr::destroy_handle(self.handle) };
    }
}

/// How many of cuBLASLt's heuristic picks a shape's first use times: 8, or
/// `STAPES_CUDA_LT_CANDIDATES` (1 ..= 64).
fn candidates() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        crate::env_usize("STAPES_CUDA_LT_CANDIDATES")
            .filter(|n| (1..=64).contains(n))
            .unwrap_or(8)
    })
}

/// Rounds over the candidates a tuning makes, each candidate kept at its fastest round: 3, or
/// `STAPES_CUDA_LT_ROUNDS` (1 ..= 16). One round ranks by a single sample of each; alternating
/// rounds also spread clock and power drift over every candidate.
fn tune_rounds() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        crate::env_usize("STAPES_CUDA_LT_ROUNDS")
            .filter(|n| (1..=16).contains(n))
            .unwrap_or(3)
    })
}

/// `STAPES_CUDA_LT_TUNE=0`: take cuBLASLt's first heuristic pick instead of timing the
/// candidates at a shape's first use (start-up experiments).
fn tuning_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_LT_TUNE").map_or(true, |v| v.trim() != "0"))
}

impl Lt {
    /// `device` names the GPU (its name and compute capability) for the saved algorithms.
    pub fn new(workspace_bytes: usize, device: &str) -> Result<Self, CudaError> {
        let handle = ltr::create_handle().map_err(lt_err("cublasLtCreate"))?;
        Ok(Self {
            handle,
            plans: Mutex::new(HashMap::new()),
            saved: Mutex::new(AlgoCache::open(device, workspace_bytes)),
            workspace_bytes,
        })
    }

    /// A saved algorithm for `key` that cuBLASLt accepts for these descriptors and workspace.
    fn saved_algo(
        &self,
        key: Key,
        desc: lts::cublasLtMatmulDesc_t,
        la: lts::cublasLtMatrixLayout_t,
        lb: lts::cublasLtMatrixLayout_t,
        lc: lts::cublasLtMatrixLayout_t,
        ld: lts::cublasLtMatrixLayout_t,
    ) -> Option<lts::cublasLtMatmulAlgo_t> {
        let data = *self
            .saved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .saved
            .get(&key)?;
        let algo = lts::cublasLtMatmulAlgo_t { data };
        // SAFETY: the result struct is plain data written by the call; descriptors are live.
        let ok = unsafe {
            let mut r: lts::cublasLtMatmulHeuristicResult_t = std::mem::zeroed();
            lts::cublasLtMatmulAlgoCheck(self.handle, desc, la, lb, lc, ld, &algo, &mut r)
                == lts::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                && r.workspaceSize <= self.workspace_bytes
        };
        ok.then_some(algo)
    }

    /// The device name [`Lt::new`] files saved algorithms under: the GPU's name and its NVRTC
    /// target (`compute_XY`), as the backend and the prewarm thread both say it.
    pub fn device_tag(name: &str, arch: &str) -> String {
        format!("{name} {arch}")
    }

    /// Start-up: check one saved algorithm of each kind (operand types, bias, C) with cuBLASLt,
    /// at most `limit`. The first plan of each kind in a process costs 44–115 ms on the H200
    /// even when its algorithm is saved, while later shapes of that kind cost ~0.02 ms (lead's
    /// `--verbose` profile, stop 10): a per-kind first use inside cuBLASLt. Run on the prewarm
    /// thread in the device's primary context, that cost is paid while the model file is read
    /// and the weights upload. Returns how many were checked and accepted. No heuristic
    /// queries, no launches, no device memory.
    pub fn warm_saved(&self, limit: usize) -> usize {
        let saved: Vec<Key> = {
            let g = self.saved.lock().unwrap_or_else(|p| p.into_inner());
            let mut v: Vec<Key> = g.saved.keys().copied().collect();
            // a stable order: smallest problems first (the cheapest descriptors to check)
            v.sort_by_key(|k| (k.m * k.n * k.k, k.m, k.n, k.k));
            v
        };
        let mut seen = std::collections::HashSet::new();
        let mut ok = 0;
        for key in saved {
            if ok >= limit {
                break;
            }
            if seen.contains(&(key.kind, key.bias, key.c)) {
                continue;
            }
            let _s = tracing::info_span!("cublaslt.warm", kind = ?key.kind, m = key.m, n = key.n, k = key.k, c = key.c).entered();
            if self.plan_with(key, false).is_ok() {
                seen.insert((key.kind, key.bias, key.c));
                ok += 1;
            }
        }
        ok
    }

    fn plan(&self, key: Key) -> Result<LtPlan, CudaError> {
        self.plan_with(key, true)
    }

    /// `heuristic: false`: only a saved algorithm that cuBLASLt accepts makes a plan.
    fn plan_with(&self, key: Key, heuristic: bool) -> Result<LtPlan, CudaError> {
        let (m, n, k) = (key.m as u64, key.n as u64, key.k as u64);
        let (compute, scale, ab, cd) = match key.kind {
            LtKind::F16 => (
                lts::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                lts::cudaDataType_t::CUDA_R_32F,
                lts::cudaDataType_t::CUDA_R_16F,
                lts::cudaDataType_t::CUDA_R_32F,
            ),
            LtKind::F16Out16 | LtKind::F16Out16BiasF16 => (
                lts::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                lts::cudaDataType_t::CUDA_R_32F,
                lts::cudaDataType_t::CUDA_R_16F,
                lts::cudaDataType_t::CUDA_R_16F,
            ),
            LtKind::I8 => (
                lts::cublasComputeType_t::CUBLAS_COMPUTE_32I,
                lts::cudaDataType_t::CUDA_R_32I,
                lts::cudaDataType_t::CUDA_R_8I,
                lts::cudaDataType_t::CUDA_R_32I,
            ),
            LtKind::Fp8 | LtKind::Fp8Out8 => (
                lts::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                lts::cudaDataType_t::CUDA_R_32F,
                lts::cudaDataType_t::CUDA_R_8F_E4M3,
                lts::cudaDataType_t::CUDA_R_16F,
            ),
            LtKind::SplitFp8(_) => (
                lts::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                lts::cudaDataType_t::CUDA_R_32F,
                lts::cudaDataType_t::CUDA_R_8F_E4M3,
                lts::cudaDataType_t::CUDA_R_32F,
            ),
        };
        let slices = match key.kind {
            LtKind::SplitFp8(s) => u64::from(s.max(1)),
            _ => 1,
        };
        let desc = ltr::create_matmul_desc(compute, scale).map_err(lt_err("create_matmul_desc"))?;
        let t: i32 = 1; // CUBLAS_OP_T
                        // SAFETY: attributes are an i32 and a u32 enum as documented.
        unsafe {
            ltr::set_matmul_desc_attribute(
                desc,
                lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                &t as *const i32 as *const c_void,
                4,
            )
            .map_err(lt_err("TRANSA"))?;
            let epi = match (key.bias, key.act) {
                (true, EpiAct::None) => Some(lts::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS),
                (true, EpiAct::Gelu) => Some(lts::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS),
                (false, EpiAct::Gelu) => Some(lts::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU),
                (true, EpiAct::Relu) => Some(lts::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS),
                (false, EpiAct::Relu) => Some(lts::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU),
                (false, EpiAct::None) => None,
            };
            if let Some(epi) = epi {
                ltr::set_matmul_desc_attribute(
                    desc,
                    lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE,
                    &epi as *const _ as *const c_void,
                    std::mem::size_of_val(&epi),
                )
                .map_err(lt_err("EPILOGUE"))?;
            }
            if matches!(
                key.kind,
                LtKind::Fp8 | LtKind::Fp8Out8 | LtKind::SplitFp8(_)
            ) {
                // Hopper's FP8 accumulation without the periodic promotion to full f32: its
                // error (~2⁻¹⁴ of a partial sum) is far below the operands' e4m3 rounding (2⁻⁴)
                let fast: i8 = 1;
                ltr::set_matmul_desc_attribute(
                    desc,
                    lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                    &fast as *const i8 as *const c_void,
                    1,
                )
                .map_err(lt_err("FAST_ACCUM"))?;
            }
            if key.bias {
                // biases are f32 parameters (except F16Out16BiasF16's copies); without this
                // cuBLASLt reads them in D's type
                let bt = if matches!(
                    key.kind,
                    LtKind::F16Out16BiasF16 | LtKind::Fp8 | LtKind::Fp8Out8
                ) {
                    lts::cudaDataType_t::CUDA_R_16F
                } else {
                    lts::cudaDataType_t::CUDA_R_32F
                };
                ltr::set_matmul_desc_attribute(
                    desc,
                    lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                    &bt as *const _ as *const c_void,
                    std::mem::size_of_val(&bt),
                )
                .map_err(lt_err("BIAS_DATA_TYPE"))?;
            }
        }
        // a split kind reads K / slices of each row, slice s at offset s · K / slices
        let ks = k / slices;
        let la = ltr::create_matrix_layout(ab, ks, m, k as i64).map_err(lt_err("layout A"))?;
        let lb = ltr::create_matrix_layout(ab, ks, n, k as i64).map_err(lt_err("layout B"))?;
        let lc = ltr::create_matrix_layout(cd, m, n, m as i64).map_err(lt_err("layout C"))?;
        if slices > 1 {
            let count = slices as i32;
            for (l, stride) in [(la, ks as i64), (lb, ks as i64), (lc, (m * n) as i64)] {
                // SAFETY: a live layout; the attributes are an i32 and an i64 as documented.
                unsafe {
                    ltr::set_matrix_layout_attribute(
                        l,
                        lts::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                        &count as *const i32 as *const c_void,
                        4,
                    )
                    .map_err(lt_err("BATCH_COUNT"))?;
                    ltr::set_matrix_layout_attribute(
                        l,
                        lts::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                        &stride as *const i64 as *const c_void,
                        8,
                    )
                    .map_err(lt_err("STRIDED_BATCH_OFFSET"))?;
                }
            }
        }
        let ld = match key.kind {
            LtKind::Fp8Out8 => Some(
                ltr::create_matrix_layout(lts::cudaDataType_t::CUDA_R_8F_E4M3, m, n, m as i64)
                    .map_err(lt_err("layout D"))?,
            ),
            _ => None,
        };
        let ldd = ld.unwrap_or(lc);
        let destroy = || {
            // SAFETY: created above, not used elsewhere.
            unsafe {
                let _ = ltr::destroy_matrix_layout(la);
                let _ = ltr::destroy_matrix_layout(lb);
                let _ = ltr::destroy_matrix_layout(lc);
                if let Some(ld) = ld {
                    let _ = ltr::destroy_matrix_layout(ld);
                }
                let _ = ltr::destroy_matmul_desc(desc);
            }
        };
        if let Some(algo) = self.saved_algo(key, desc, la, lb, lc, ldd) {
            return Ok(LtPlan {
                desc,
                la,
                lb,
                lc,
                ld,
                algo,
                candidates: Vec::new(),
            });
        }
        if !heuristic {
            destroy();
            return Err(CudaError::Blas(format!(
                "no saved cuBLASLt algorithm accepted for {key:?}"
            )));
        }
        let pref = ltr::create_matmul_pref().map_err(lt_err("pref"))?;
        let ws = self.workspace_bytes;
        let want = candidates();
        let mut results: Vec<lts::cublasLtMatmulHeuristicResult_t> = Vec::with_capacity(want);
        let mut count = 0i32;
        // SAFETY: `results` has room for `want` entries; the count says how many were written.
        let st = unsafe {
            ltr::set_matmul_pref_attribute(
                pref,
                lts::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const usize as *const c_void,
                std::mem::size_of::<usize>(),
            )
            .map_err(lt_err("pref workspace"))?;
            let st = lts::cublasLtMatmulAlgoGetHeuristic(
                self.handle,
                desc,
                la,
                lb,
                lc,
                ldd,
                pref,
                want as i32,
                results.as_mut_ptr(),
                &mut count,
            );
            let _ = ltr::destroy_matmul_pref(pref);
            results.set_len(count.clamp(0, want as i32) as usize);
            st
        };
        let algos: Vec<_> = results
            .iter()
            .filter(|r| r.state == lts::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .collect();
        if st != lts::cublasStatus_t::CUBLAS_STATUS_SUCCESS || algos.is_empty() {
            destroy();
            return Err(CudaError::Blas(format!(
                "no cuBLASLt algorithm for {key:?}: {st:?}"
            )));
        }
        Ok(LtPlan {
            desc,
            la,
            lb,
            lc,
            ld,
            algo: algos[0],
            candidates: algos,
        })
    }

    /// # Safety
    /// `a` (k×m), `b` (k×n), `d` (m×n) and `bias` (m, f32, or 0) must be valid device buffers of
    /// the kind's types; `ws` holds `workspace_bytes`. For `I8`, m, n, k are multiples of 4.
    /// `tune` must be false during a graph capture.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn matmul(
        &self,
        stream: &Arc<CudaStream>,
        kind: LtKind,
        d: u64,
        a: u64,
        b: u64,
        bias: u64,
        ws: u64,
        m: usize,
        n: usize,
        k: usize,
        tune: bool,
    ) -> Result<(), CudaError> {
        self.matmul_c(
            stream,
            kind,
            d,
            a,
            b,
            bias,
            0,
            ws,
            m,
            n,
            k,
            tune,
            EpiAct::None,
        )
    }

    /// [`Lt::matmul`] plus `c` (m×n, of D's type, not aliasing `d`) with beta = 1:
    /// `D = Aᵀ·B + bias + C`. `c = 0` is `matmul`. `act`: `D = act(Aᵀ·B + bias)` in the
    /// epilogue (cuBLASLt's GELU is the tanh form), with `c = 0`.
    ///
    /// # Safety
    /// As [`Lt::matmul`]; `c` is 0 or a valid buffer of m·n elements of D's type.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn matmul_c(
        &self,
        stream: &Arc<CudaStream>,
        kind: LtKind,
        d: u64,
        a: u64,
        b: u64,
        bias: u64,
        c: u64,
        ws: u64,
        m: usize,
        n: usize,
        k: usize,
        tune: bool,
        act: EpiAct,
    ) -> Result<(), CudaError> {
        self.matmul_scaled(stream, kind, d, a, 0, b, bias, c, ws, m, n, k, tune, act)
    }

    /// [`Lt::matmul_c`] for [`LtKind::Fp8`] (`out8`: [`LtKind::Fp8Out8`], D in e4m3 and no C):
    /// `a_scale` points to the f32 that A's e4m3 values are multiplied by (B's scale is 1);
    /// `bias` is f16.
    ///
    /// # Safety
    /// As [`Lt::matmul_c`], with `a` and `b` e4m3, `d` f16 (e4m3 for `out8`), `c` f16 or 0,
    /// `a_scale` a live device f32.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn matmul_fp8(
        &self,
        stream: &Arc<CudaStream>,
        out8: bool,
        d: u64,
        a: u64,
        a_scale: u64,
        b: u64,
        bias: u64,
        c: u64,
        ws: u64,
        m: usize,
        n: usize,
        k: usize,
        tune: bool,
        act: EpiAct,
    ) -> Result<(), CudaError> {
        let kind = if out8 { LtKind::Fp8Out8 } else { LtKind::Fp8 };
        self.matmul_scaled(
            stream, kind, d, a, a_scale, b, bias, c, ws, m, n, k, tune, act,
        )
    }

    /// A split-K GEMM's partial products on e4m3 operands, through cuBLASLt (tuned as every
    /// other shape): `p (slices, rows, n)` f32, slice s = `x[:, s·K/S ..] · w[:, s·K/S ..]ᵀ`
    /// over K / S, times `*w_scale`.
    ///
    /// # Safety
    /// `w (n, k)` and `x (rows, k)` e4m3, `p` of `slices · rows · n` f32, `w_scale` a live
    /// device f32, all live on `stream`; `k / slices` a multiple of 16; `tune` false during a
    /// graph capture.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn split_k_fp8(
        &self,
        stream: &Arc<CudaStream>,
        p: u64,
        w: u64,
        w_scale: u64,
        x: u64,
        ws: u64,
        rows: usize,
        n: usize,
        k: usize,
        slices: u8,
        tune: bool,
    ) -> Result<(), CudaError> {
        let kind = LtKind::SplitFp8(slices);
        self.matmul_scaled(
            stream,
            kind,
            p,
            w,
            w_scale,
            x,
            0,
            0,
            ws,
            n,
            rows,
            k,
            tune,
            EpiAct::None,
        )
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn matmul_scaled(
        &self,
        stream: &Arc<CudaStream>,
        kind: LtKind,
        d: u64,
        a: u64,
        a_scale: u64,
        b: u64,
        bias: u64,
        c: u64,
        ws: u64,
        m: usize,
        n: usize,
        k: usize,
        tune: bool,
        act: EpiAct,
    ) -> Result<(), CudaError> {
        let key = Key {
            kind,
            m,
            n,
            k,
            bias: bias != 0,
            c: c != 0,
            act,
        };
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        let entry = match plans.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let _s = tracing::info_span!("cublaslt.plan", ?kind, m, n, k).entered();
                e.insert(self.plan(key).ok())
            }
        };
        let Some(p) = entry.as_mut() else {
            return Err(CudaError::Blas(format!(
                "no cuBLASLt algorithm for {key:?}"
            )));
        };
        if bias != 0 {
            ltr::set_matmul_desc_attribute(
                p.desc,
                lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                &bias as *const u64 as *const c_void,
                8,
            )
            .map_err(lt_err("BIAS_POINTER"))?;
        }
        if a_scale != 0 {
            ltr::set_matmul_desc_attribute(
                p.desc,
                lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                &a_scale as *const u64 as *const c_void,
                8,
            )
            .map_err(lt_err("A_SCALE_POINTER"))?;
        }
        let cs = stream.cu_stream() as lts::cudaStream_t;
        let run = |algo: &lts::cublasLtMatmulAlgo_t| {
            let (f1, f0) = (1f32, 0f32);
            let (i1, i0) = (1i32, 0i32);
            let (alpha, beta): (*const c_void, *const c_void) = match (kind, c != 0) {
                (LtKind::I8, false) => (&i1 as *const i32 as _, &i0 as *const i32 as _),
                (LtKind::I8, true) => (&i1 as *const i32 as _, &i1 as *const i32 as _),
                (_, false) => (&f1 as *const f32 as _, &f0 as *const f32 as _),
                (_, true) => (&f1 as *const f32 as _, &f1 as *const f32 as _),
            };
            // C = D with beta = 0 (cuBLASLt does not read it), else the residual; where D's type
            // is not C's, C = D would be an in-place call with two layouts, which cuBLASLt
            // refuses (CUBLAS_STATUS_INVALID_VALUE on the H200): B, equally unread, stands in
            let cp = match (c, p.ld) {
                (0, Some(_)) => b,
                (0, None) => d,
                _ => c,
            };
            crate::pdl::foreign();
            ltr::matmul(
                self.handle,
                p.desc,
                alpha,
                beta,
                a as *const c_void,
                p.la,
                b as *const c_void,
                p.lb,
                cp as *const c_void,
                p.lc,
                d as *mut c_void,
                p.ld.unwrap_or(p.lc),
                algo,
                ws as *mut c_void,
                self.workspace_bytes,
                cs,
            )
        };
        if tune && p.candidates.len() > 1 && tuning_on() {
            let _s = tracing::info_span!(
                "cublaslt.tune",
                ?kind,
                m,
                n,
                k,
                candidates = p.candidates.len()
            )
            .entered();
            let mut candidates = std::mem::take(&mut p.candidates);
            let by_graph = graph_timing_on() && m * n * k < GRAPH_TIMED_BELOW;
            // the first run also loads the candidate's kernels (not allowed inside a capture)
            candidates.retain(|algo| run(algo).is_ok());
            let mut fastest: Vec<Option<f32>> = vec![None; candidates.len()];
            for _ in 0..tune_rounds() {
                for (algo, best) in candidates.iter().zip(fastest.iter_mut()) {
                    let ms = if by_graph {
                        time_in_graph(stream, || run(algo).is_ok())
                    } else {
                        time_eager(stream, || run(algo).is_ok())
                    };
                    if let Some(ms) = ms {
                        *best = Some(best.map_or(ms, |b| b.min(ms)));
                    }
                }
            }
            let best = candidates
                .iter()
                .zip(&fastest)
                .filter_map(|(algo, ms)| ms.map(|ms| (ms, *algo)))
                .min_by(|a, b| a.0.total_cmp(&b.0));
            if let Some((ms, algo)) = best {
                tracing::debug!(?key, ms_per_run = ms, by_graph, "cuBLASLt algorithm chosen");
                p.algo = algo;
                self.saved
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .save(key, &algo);
            }
        }
        // the algorithm is frozen after its first use, so a graph and the eager path agree bit for bit
        p.candidates.clear();
        run(&p.algo).map_err(lt_err("cublasLtMatmul"))
    }
}

/// Runs of a candidate a graph timing averages over.
const GRAPH_RUNS: usize = 10;
/// Runs of a candidate an eager timing averages over (as before graph timing existed).
const EAGER_RUNS: usize = 5;

/// Shapes below this many multiply-adds (m·n·k) are timed in a graph: up to ~0.9 G (tiny's fc1,
/// one FastConformer clip's GEMMs) a GEMM takes a few microseconds, less than cuBLASLt's host
/// cost per eager call, and eager timing ranked the host (H200, stop 21 call 2: parakeet's
/// 140-row GEMMs 8–11 µs a run timed eagerly, 3.4–7.9 µs in a graph). Larger shapes (turbo's,
/// from 2.5 G) keep the eager timing, GPU-bound there, which chose better for 16 turbo windows
/// (calls 2, 5, 6: 67.8–69.2 ms eager-tuned, 69.0–71.9 graph-tuned).
const GRAPH_TIMED_BELOW: usize = 2_000_000_000;

/// `STAPES_CUDA_LT_TIMING=eager`: time candidates by eager launches (the form before stop 21).
fn graph_timing_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_LT_TIMING").map_or(true, |v| v.trim() != "eager"))
}

/// ms a run of `launch` takes on the GPU: [`GRAPH_RUNS`] runs captured into a graph, replayed
/// once to warm it and once between events. Eager launches of a GEMM of a few microseconds are
/// bound by cuBLASLt's host cost (~10 µs a call), so timing them ranks the host, not the kernels;
/// in a graph they run back to back as they will in the encoder's graph. `None` if the capture
/// or a launch fails (the stream is left out of capture either way).
fn time_in_graph(stream: &Arc<CudaStream>, mut launch: impl FnMut() -> bool) -> Option<f32> {
    use cudarc::driver::sys;
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .ok()?;
    let all = (0..GRAPH_RUNS).all(|_| launch());
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .ok()
        .flatten()?;
    if !all {
        return None;
    }
    graph.launch().ok()?;
    Some(gpu_ms(stream, || graph.launch().is_ok())? / GRAPH_RUNS as f32)
}

/// ms a run of `launch` takes from eager launches, [`EAGER_RUNS`] of them between events.
fn time_eager(stream: &Arc<CudaStream>, mut launch: impl FnMut() -> bool) -> Option<f32> {
    Some(gpu_ms(stream, || (0..EAGER_RUNS).all(|_| launch()))? / EAGER_RUNS as f32)
}

/// ms between events recorded on `stream` before and after `enqueue`'s work, waited for; `None`
/// if `enqueue` says it failed or an event call does.
fn gpu_ms(stream: &Arc<CudaStream>, enqueue: impl FnOnce() -> bool) -> Option<f32> {
    use cudarc::driver::sys;
    let ctx = stream.context();
    let e0 = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .ok()?;
    let e1 = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .ok()?;
    e0.record(stream).ok()?;
    let ok = enqueue();
    e1.record(stream).ok()?;
    e1.synchronize().ok()?;
    let ms = e0.elapsed_ms(&e1).ok()?;
    ok.then_some(ms)
}

/// int8 GEMM through cublasGemmEx (TN, i32 out): the alternative to cuBLASLt, for benchmarks.
///
/// # Safety
/// As [`Lt::matmul`] for `LtKind::I8`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn i8_gemm_ex(
    handle: bsys::cublasHandle_t,
    c: u64,
    a: u64,
    b: u64,
    m: usize,
    n: usize,
    k: usize,
) -> Result<(), CudaError> {
    let (alpha, beta) = (1i32, 0i32);
    crate::pdl::foreign();
    cublas::result::gemm_ex(
        handle,
        bsys::cublasOperation_t::CUBLAS_OP_T,
        bsys::cublasOperation_t::CUBLAS_OP_N,
        m as i32,
        n as i32,
        k as i32,
        &alpha as *const i32 as *const c_void,
        a as *const c_void,
        bsys::cudaDataType_t::CUDA_R_8I,
        k as i32,
        b as *const c_void,
        bsys::cudaDataType_t::CUDA_R_8I,
        k as i32,
        &beta as *const i32 as *const c_void,
        c as *mut c_void,
        bsys::cudaDataType_t::CUDA_R_32I,
        m as i32,
        bsys::cublasComputeType_t::CUBLAS_COMPUTE_32I,
        bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
    )
    .map_err(blas_err("cublasGemmEx int8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The saved-algorithm file: what `save` writes, `parse_line` reads back; damaged lines are
    // skipped rather than misread.
    #[test]
    fn saved_algorithm_lines_round_trip() {
        let dir = std::env::temp_dir().join(format!("stapes-lt-{}", std::process::id()));
        let path = dir.join("cublaslt-test.txt");
        let mut cache = AlgoCache {
            path: Some(path.clone()),
            saved: HashMap::new(),
        };
        let key = Key {
            kind: LtKind::I8,
            m: 384,
            n: 1504,
            k: 1152,
            bias: false,
            c: false,
            act: EpiAct::None,
        };
        let data = [1, u64::MAX, 0, 0x00ab_cdef_0123_4567, 5, 6, 7, 8];
        cache.save(key, &lts::cublasLtMatmulAlgo_t { data });
        let text = std::fs::read_to_string(&path).expect("cache file written");
        let lines: Vec<_> = text.lines().filter_map(parse_line).collect();
        assert_eq!(lines, vec![(key, data)]);
        // a beta = 1 plan of the same shape is a key of its own, written and read back apart
        let key_c = Key {
            kind: LtKind::F16Out16BiasF16,
            c: true,
            ..key
        };
        let data_c = [9, 8, 7, 6, 5, 4, 3, 2];
        cache.save(key_c, &lts::cublasLtMatmulAlgo_t { data: data_c });
        let text_c = std::fs::read_to_string(&path).expect("cache file rewritten");
        let mut got: Vec<_> = text_c.lines().filter_map(parse_line).collect();
        got.sort_by_key(|(k, _)| k.c);
        assert_eq!(got, vec![(key, data), (key_c, data_c)]);
        assert!(
            text_c.contains("F16Out16BiasF16+C 384 1504 1152 0 "),
            "{text_c}"
        );
        // so is the GELU epilogue's plan
        let key_g = Key {
            kind: LtKind::F16Out16,
            bias: true,
            act: EpiAct::Gelu,
            ..key
        };
        cache.save(key_g, &lts::cublasLtMatmulAlgo_t { data: data_c });
        let text_g = std::fs::read_to_string(&path).expect("cache file rewritten");
        assert!(text_g.contains("F16Out16+G 384 1504 1152 1 "), "{text_g}");
        let got_g: Vec<_> = text_g.lines().filter_map(parse_line).collect();
        assert!(got_g.contains(&(key_g, data_c)), "{got_g:?}");
        // and the ReLU epilogue's, a key apart from the GELU one of the same shape
        let key_r = Key {
            act: EpiAct::Relu,
            ..key_g
        };
        cache.save(key_r, &lts::cublasLtMatmulAlgo_t { data });
        let text_r = std::fs::read_to_string(&path).expect("cache file rewritten");
        assert!(text_r.contains("F16Out16+R 384 1504 1152 1 "), "{text_r}");
        let got_r: Vec<_> = text_r.lines().filter_map(parse_line).collect();
        assert!(got_r.contains(&(key_r, data)), "{got_r:?}");
        assert!(got_r.contains(&(key_g, data_c)), "{got_r:?}");
        // the FP8 kinds, with and without an e4m3 D, GELU and C
        let key_f8 = Key {
            kind: LtKind::Fp8Out8,
            bias: true,
            act: EpiAct::Gelu,
            ..key
        };
        let key_f8c = Key {
            kind: LtKind::Fp8,
            c: true,
            ..key
        };
        cache.save(key_f8, &lts::cublasLtMatmulAlgo_t { data });
        cache.save(key_f8c, &lts::cublasLtMatmulAlgo_t { data: data_c });
        let text_f8 = std::fs::read_to_string(&path).expect("cache file rewritten");
        assert!(text_f8.contains("Fp8Out8+G 384 1504 1152 1 "), "{text_f8}");
        assert!(text_f8.contains("Fp8+C 384 1504 1152 0 "), "{text_f8}");
        let got_f8: Vec<_> = text_f8.lines().filter_map(parse_line).collect();
        assert!(got_f8.contains(&(key_f8, data)), "{got_f8:?}");
        assert!(got_f8.contains(&(key_f8c, data_c)), "{got_f8:?}");
        let key_s8 = Key {
            kind: LtKind::SplitFp8(4),
            ..key
        };
        cache.save(key_s8, &lts::cublasLtMatmulAlgo_t { data: data_c });
        let text_s = std::fs::read_to_string(&path).expect("cache file rewritten");
        assert!(text_s.contains("SplitFp8(4) 384 1504 1152 0 "), "{text_s}");
        let got_s: Vec<_> = text_s.lines().filter_map(parse_line).collect();
        assert!(got_s.contains(&(key_s8, data_c)), "{got_s:?}");
        // one slice is not a split kind, and a count past a byte is not read
        let s8_line = text_s
            .lines()
            .find(|l| l.starts_with("SplitFp8(4)"))
            .unwrap_or_default();
        assert_eq!(parse_line(&s8_line.replacen("(4)", "(1)", 1)), None);
        assert_eq!(parse_line(&s8_line.replacen("(4)", "(300)", 1)), None);
        let line = text.lines().next().unwrap_or_default();
        assert!(line.starts_with("I8 384 1504 1152 0 "), "{line}");
        // a truncated line, an extra word, an unknown kind
        let cut = &line[..line.len() - 3];
        assert_eq!(parse_line(cut), None);
        assert_eq!(parse_line(&format!("{line} 9")), None);
        assert_eq!(parse_line(&line.replacen("I8", "F32", 1)), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
