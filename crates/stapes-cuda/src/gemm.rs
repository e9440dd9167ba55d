//! Library GEMMs: cuBLAS GemmEx for f16 (tensor cores, f32 accumulate) and batched f32, and
//! cuBLASLt int8 IMMA for the q8 lane with descriptors, layouts and the chosen algorithm cached
//! per shape (cuBLASLt's heuristic is too slow to run per call).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::cublas::{self, sys as bsys};
use cudarc::cublaslt::{self, result as ltr, sys as lts};

use crate::CudaError;

fn blas_err(what: &'static str) -> impl Fn(cublas::result::CublasError) -> CudaError {
    move |e| CudaError::Blas(format!("{what}: {e:?}"))
}
fn lt_err(what: &'static str) -> impl Fn(cublaslt::result::CublasError) -> CudaError {
    move |e| CudaError::Blas(format!("{what}: {e:?}"))
}

/// Row-major `y (m, n) = x (m, k) · w (n, k)ᵀ` with f16 operands and f32 output.
/// In cuBLAS's column-major terms that is `yᵀ (n × m) = wᵀᵀ · xᵀ`: TN with lda = ldb = k.
///
/// # Safety
/// Pointers must be valid device buffers of the stated sizes on the handle's stream.
pub unsafe fn f16_linear(
    handle: bsys::cublasHandle_t,
    y: u64,
    x16: u64,
    w16: u64,
    m: usize,
    n: usize,
    k: usize,
) -> Result<(), CudaError> {
    let (alpha, beta) = (1f32, 0f32);
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
        bsys::cudaDataType_t::CUDA_R_32F,
        n as i32,
        bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
    )
    .map_err(blas_err("cublasGemmEx f16"))
}

/// Batched row-major f32 `c (b, m, n) = a (b, m, k) · op(bm)`, `op` = transpose when `trans_b`
/// (`bm (b, n, k)`), else `bm (b, k, n)`. `stride_b = 0` broadcasts one `bm` over the batch.
/// Plain f32 math (cuBLAS's default mode has no TF32).
///
/// # Safety
/// Pointers must be valid device buffers of the stated sizes on the handle's stream.
#[allow(clippy::too_many_arguments)]
pub unsafe fn f32_matmul(
    handle: bsys::cublasHandle_t,
    c: u64,
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
    cublas::result::gemm_strided_batched_ex(
        handle,
        op_b,
        bsys::cublasOperation_t::CUBLAS_OP_N,
        n as i32,
        m as i32,
        k as i32,
        &alpha as *const f32 as *const c_void,
        bm as *const c_void,
        bsys::cudaDataType_t::CUDA_R_32F,
        ld_b as i32,
        stride_b,
        a as *const c_void,
        bsys::cudaDataType_t::CUDA_R_32F,
        k as i32,
        (m * k) as i64,
        &beta as *const f32 as *const c_void,
        c as *mut c_void,
        bsys::cudaDataType_t::CUDA_R_32F,
        n as i32,
        (m * n) as i64,
        batch as i32,
        bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
    )
    .map_err(blas_err("cublasGemmStridedBatchedEx f32"))
}

/// A cached cuBLASLt int8 plan for one (m, n, k): `C (m × n, i32) = Aᵀ · B`, A stored k × m,
/// B stored k × n (both int8, column-major), i.e. row-major `acc (n_rows, m) = x8 · w8ᵀ`.
struct LtPlan {
    desc: lts::cublasLtMatmulDesc_t,
    la: lts::cublasLtMatrixLayout_t,
    lb: lts::cublasLtMatrixLayout_t,
    lc: lts::cublasLtMatrixLayout_t,
    algo: lts::cublasLtMatmulAlgo_t,
}

// SAFETY: the descriptors are plain heap objects of cuBLASLt, used under the plans' mutex or
// read-only after creation.
unsafe impl Send for LtPlan {}

impl Drop for LtPlan {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once.
        unsafe {
            let _ = ltr::destroy_matrix_layout(self.la);
            let _ = ltr::destroy_matrix_layout(self.lb);
            let _ = ltr::destroy_matrix_layout(self.lc);
            let _ = ltr::destroy_matmul_desc(self.desc);
        }
    }
}

pub struct LtInt8 {
    handle: lts::cublasLtHandle_t,
    plans: Mutex<HashMap<(usize, usize, usize), LtPlan>>,
    pub workspace_bytes: usize,
}

// SAFETY: the handle is used only under the plans' mutex (see `run`).
unsafe impl Send for LtInt8 {}
unsafe impl Sync for LtInt8 {}

impl Drop for LtInt8 {
    fn drop(&mut self) {
        self.plans
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        // SAFETY: created in `new`, destroyed once.
        let _ = unsafe { ltr::destroy_handle(self.handle) };
    }
}

impl LtInt8 {
    pub fn new(workspace_bytes: usize) -> Result<Self, CudaError> {
        let handle = ltr::create_handle().map_err(lt_err("cublasLtCreate"))?;
        Ok(Self {
            handle,
            plans: Mutex::new(HashMap::new()),
            workspace_bytes,
        })
    }

    fn plan(
        &self,
        handle: lts::cublasLtHandle_t,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<LtPlan, CudaError> {
        let desc = ltr::create_matmul_desc(
            lts::cublasComputeType_t::CUBLAS_COMPUTE_32I,
            lts::cudaDataType_t::CUDA_R_32I,
        )
        .map_err(lt_err("create_matmul_desc"))?;
        let t: i32 = 1; // CUBLAS_OP_T
                        // SAFETY: the attribute is an i32 as documented.
        unsafe {
            ltr::set_matmul_desc_attribute(
                desc,
                lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                &t as *const i32 as *const c_void,
                4,
            )
        }
        .map_err(lt_err("TRANSA"))?;
        let la =
            ltr::create_matrix_layout(lts::cudaDataType_t::CUDA_R_8I, k as u64, m as u64, k as i64)
                .map_err(lt_err("layout A"))?;
        let lb =
            ltr::create_matrix_layout(lts::cudaDataType_t::CUDA_R_8I, k as u64, n as u64, k as i64)
                .map_err(lt_err("layout B"))?;
        let lc = ltr::create_matrix_layout(
            lts::cudaDataType_t::CUDA_R_32I,
            m as u64,
            n as u64,
            m as i64,
        )
        .map_err(lt_err("layout C"))?;
        let pref = ltr::create_matmul_pref().map_err(lt_err("pref"))?;
        let ws = self.workspace_bytes;
        // SAFETY: the attribute is a usize as documented.
        let heur = unsafe {
            ltr::set_matmul_pref_attribute(
                pref,
                lts::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const usize as *const c_void,
                std::mem::size_of::<usize>(),
            )
            .map_err(lt_err("pref workspace"))?;
            let h = ltr::get_matmul_algo_heuristic(handle, desc, la, lb, lc, lc, pref);
            let _ = ltr::destroy_matmul_pref(pref);
            h.map_err(lt_err("cublasLtMatmulAlgoGetHeuristic int8"))?
        };
        Ok(LtPlan {
            desc,
            la,
            lb,
            lc,
            algo: heur.algo,
        })
    }

    /// # Safety
    /// Pointers must be valid device buffers: `a` k×m int8, `b` k×n int8, `c` m×n i32,
    /// `ws` of `workspace_bytes`; `m`, `n`, `k` multiples of 4.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run(
        &self,
        stream: lts::cudaStream_t,
        c: u64,
        a: u64,
        b: u64,
        ws: u64,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<(), CudaError> {
        let handle = self.handle;
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        let p = match plans.entry((m, n, k)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(self.plan(handle, m, n, k)?),
        };

        let (alpha, beta) = (1i32, 0i32);
        ltr::matmul(
            handle,
            p.desc,
            &alpha as *const i32 as *const c_void,
            &beta as *const i32 as *const c_void,
            a as *const c_void,
            p.la,
            b as *const c_void,
            p.lb,
            c as *const c_void,
            p.lc,
            c as *mut c_void,
            p.lc,
            &p.algo,
            ws as *mut c_void,
            self.workspace_bytes,
            stream,
        )
        .map_err(lt_err("cublasLtMatmul int8"))
    }
}
