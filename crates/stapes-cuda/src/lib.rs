//! stapes-cuda: the CUDA home.
//!
//! [`CudaBackend`] implements [`stapes_core::Backend`] on one NVIDIA GPU (compute capability
//! ≥ 8.0) through cudarc with dynamic loading: the crate builds and links without any CUDA file,
//! and a machine without a driver, library or device gets a [`CudaError`] from
//! [`CudaBackend::new`], never a panic ([`available`] asks without opening anything).
//!
//! - Lanes: f16 (cuBLASLt on tensor cores, f32 accumulate, bias fused in the epilogue) and q8
//!   (weights re-laid at load as int8 with one scale per output row, activations quantized per
//!   row on the fly, cuBLASLt int8 IMMA, then a scaling epilogue; see [`CudaWeight`]). Rows
//!   ≤ 8 (decoder steps) use GEMV kernels that stream the weight once. f32 weights are refused
//!   with `Error::LaneUnavailable`.
//! - Activations live on the device as f32, or as f16 between the ops of encoder chains
//!   ([`CudaTensor`], [`CudaBackend::set_f16_activations`]; kernels compute in f32 either way);
//!   op semantics are those of `stapes_core::backend`. Attention with head size 64/128 and ≥ 16 queries runs a fused
//!   flash-style kernel on f16 tensor cores (scores never leave registers); other shapes and
//!   `attention_probs` use an f32 row kernel.
//! - Kernels are the `.cu` files in `kernels/`, compiled by NVRTC for the device's
//!   `sm_XY` at first use and cached as CUBIN (PTX as the fallback) under `$STAPES_CACHE/cuda` or
//!   `~/.cache/stapes/cuda` (key: file, arch, hash of source + options + NVRTC version); every
//!   file is prefixed with `kernels/common.cuh`.
//! - Memory comes from a caching arena: no `cuMemAlloc` on the hot path after the first pass,
//!   and the same sequence of allocations gets the same addresses.
//! - CUDA graphs: [`CudaBackend::run_graph`] captures a closure of backend calls once per key
//!   (shape bucket × lane) and replays it; [`CudaBackend::write_host`] refreshes inputs between
//!   replays; `STAPES_CUDA_GRAPHS=0` runs the closure eagerly instead. Replays are bit-identical
//!   to the eager run (tested).
//! - Engagement: `counters()` counts eager kernel launches (`ops`), GEMMs per lane, graph
//!   captures/replays and declines.
//!
//! Library lookup: the loader path first, then `STAPES_CUDA_LIBDIR`, `STAPES_NVRTC_LIB` (a file or
//! a directory), `CUDA_HOME`/`CUDA_PATH`, `/usr/local/cuda/lib64`, and pip wheels
//! (`<site-packages>/nvidia/*/lib`); found libraries are preloaded by absolute path.
//!
//! CI without a GPU: `cargo test --release -p stapes-cuda` builds everything, the GPU tests print
//! `SKIPPED (no CUDA device): <name>`, and `tests/nvrtc_compile.rs` compiles every kernel for
//! `compute_80` and `compute_90` when libnvrtc is found (`pip install nvidia-cuda-nvrtc==13.0.88`;
//! if the wheel's directory is not found by the search above, point `STAPES_NVRTC_LIB` at
//! `<site-packages>/nvidia/cu13/lib`).

mod backend;
mod gemm;
mod graph;
pub mod kernels;
pub mod loader;
pub mod pdl;
mod pool;
mod select;
mod step;
mod transducer;

pub use backend::{CudaBackend, CudaTensor, CudaWeight, Q8Mix};

/// A tuning switch's count from the environment: `None` unset or not a whole number (callers
/// check its range and supply their default).
pub(crate) fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
}

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
    // the driver's own start-up (cuInit): paid once per process, whoever calls first
    let _s = tracing::info_span!("cuda.init").entered();
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

/// The process-wide part of opening a GPU (loading the libraries, `cuInit`, creating the
/// device's primary context: ~0.3 s on the H200), started on a thread of its own so that it
/// runs while the caller reads the model file (the libraries load on a second thread beside
/// the driver's start). [`CudaBackend::new`] on the caller's thread then
/// finds it done (it waits where it is not). Dropping the handle joins the thread and releases
/// its hold on the context; drop it after the backend is open, or the context is made twice.
pub struct Prewarm {
    thread: Option<std::thread::JoinHandle<Option<std::sync::Arc<cudarc::driver::CudaContext>>>>,
}

/// Start [`Prewarm`] for device `ordinal`. Nothing happens (and nothing fails) where CUDA is
/// absent: the backend's own open reports that.
pub fn prewarm(ordinal: usize) -> Prewarm {
    let parent = tracing::Span::current();
    let thread = std::thread::Builder::new()
        .name("stapes-cuda-prewarm".into())
        .spawn(move || {
            let span = tracing::info_span!(parent: &parent, "cuda.prewarm", ordinal);
            let _s = span.enter();
            let libs_span = span.clone();
            // cuBLASLt alone takes ~70 ms to load: the libraries load on a second thread while
            // this one starts the driver and the context, which need only libcuda
            let libs = std::thread::Builder::new()
                .name("stapes-cuda-libs".into())
                .spawn(move || libs_span.in_scope(|| loader::ensure_all().is_ok()))
                .ok();
            let ctx = loader::ensure_driver().ok().and_then(|()| {
                let _c = tracing::info_span!("cuda.context", with_init = true).entered();
                std::panic::catch_unwind(|| cudarc::driver::CudaContext::new(ordinal).ok())
                    .ok()
                    .flatten()
            });
            let libs_ok = libs.is_none_or(|t| t.join().unwrap_or(false));
            let ctx = ctx.filter(|_| libs_ok);
            if let Some(c) = &ctx {
                warm_cublaslt(c);
            }
            ctx
        })
        .ok();
    Prewarm { thread }
}

/// One saved cuBLASLt algorithm of each kind checked in the primary context
/// ([`gemm::Lt::warm_saved`]), so the backend's first plan of each kind is cheap. This thread
/// is joined only when the engine is built (after the weights are uploaded), so the work stays
/// off the critical path. `STAPES_CUDA_LT_WARM=0` skips it.
fn warm_cublaslt(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) {
    if std::env::var("STAPES_CUDA_LT_WARM").is_ok_and(|v| v.trim() == "0") {
        return;
    }
    let _s = tracing::info_span!("cuda.lt_warm", checked = tracing::field::Empty).entered();
    let run = || -> Option<usize> {
        ctx.bind_to_thread().ok()?;
        let (maj, min) = ctx.compute_capability().ok()?;
        let name = ctx.name().ok()?;
        let arch = format!("compute_{maj}{min}");
        let lt = gemm::Lt::new(
            backend::WORKSPACE_BYTES,
            &gemm::Lt::device_tag(&name, &arch),
        )
        .ok()?;
        Some(lt.warm_saved(8))
    };
    // cudarc panics on a missing symbol; a failed warm-up only costs the later first plans
    if let Ok(Some(n)) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        tracing::Span::current().record("checked", n);
    }
}

impl Drop for Prewarm {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            // the context (if any) is released here, after the backend took its own reference
            let _ = t.join();
        }
    }
}
