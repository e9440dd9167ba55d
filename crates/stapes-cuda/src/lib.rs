//! stapes-cuda: the CUDA home.
//!
//! [`CudaBackend`] implements [`stapes_core::Backend`] on one NVIDIA GPU through cudarc with
//! dynamic loading (the crate builds and links without any CUDA file; a machine without a driver
//! or library gets a [`CudaError`], never a panic). Lanes: f16 (cuBLAS tensor cores, f32
//! accumulate) and q8 (int8 IMMA through cuBLASLt, see [`CudaWeight`]); f32 is refused with
//! `Error::LaneUnavailable`. Activations live on the device as f32. Kernels are the `.cu` files in
//! `kernels/`, compiled by NVRTC at first use and cached on disk ([`kernels::cache_dir`]).
//! Chains of ops can be captured as CUDA graphs and replayed ([`CudaBackend::run_graph`]).

mod backend;
mod gemm;
mod graph;
pub mod kernels;
pub mod loader;
mod pool;

pub use backend::{CudaBackend, CudaTensor, CudaWeight};

/// Everything that can go wrong below the op contract. Converted to
/// `stapes_core::Error::Device` at the trait boundary.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA driver: {0}")]
    NoDriver(String),
    #[error("CUDA library missing: {0}")]
    Library(String),
    #[error("no CUDA device {ordinal}: {detail}")]
    NoDevice { ordinal: usize, detail: String },
    #[error("CUDA driver call `{what}` failed: {detail}")]
    Driver { what: &'static str, detail: String },
    #[error("NVRTC could not compile {file}.cu:\n{log}")]
    Compile { file: &'static str, log: String },
    #[error("kernel `{0}` is not loaded")]
    MissingKernel(&'static str),
    #[error("cuBLAS: {0}")]
    Blas(String),
    #[error("device out of memory: {0}")]
    OutOfMemory(String),
    #[error("CUDA graph: {0}")]
    Graph(String),
}

impl CudaError {
    pub(crate) fn driver(what: &'static str, e: cudarc::driver::DriverError) -> Self {
        CudaError::Driver {
            what,
            detail: format!("{e:?}"),
        }
    }
}

impl From<CudaError> for stapes_core::Error {
    fn from(e: CudaError) -> Self {
        stapes_core::Error::Device(format!("cuda: {e}"))
    }
}

/// True when a CUDA driver, the libraries and at least one device are present (no panic, no
/// context created). Tests use it to decide whether to run or report themselves skipped.
pub fn available() -> bool {
    if loader::ensure_all().is_err() {
        return false;
    }
    std::panic::catch_unwind(|| {
        // SAFETY: cuInit/cuDeviceGetCount only write the count; the library is present.
        unsafe {
            let mut n = 0i32;
            cudarc::driver::sys::cuInit(0).result().is_ok()
                && cudarc::driver::sys::cuDeviceGetCount(&mut n)
                    .result()
                    .is_ok()
                && n > 0
        }
    })
    .unwrap_or(false)
}
