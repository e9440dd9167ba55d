//! Shared by the GPU tests: one backend per test binary, skip-by-name without a GPU, and the
//! comparison against the reference under a tolerance.
#![allow(dead_code)]

use std::sync::OnceLock;

use stapes_core::tolerance::{compare, lookup, Op, Tolerance};
use stapes_core::{HostTensor, Lane};
use stapes_cuda::CudaBackend;

pub fn gpu() -> Option<&'static CudaBackend> {
    static B: OnceLock<Option<CudaBackend>> = OnceLock::new();
    B.get_or_init(|| {
        if !stapes_cuda::available() {
            return None;
        }
        match CudaBackend::new(0) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("CUDA present but the backend failed to open: {e}");
                None
            }
        }
    })
    .as_ref()
}

/// One backend drives one stream: tests that share it take turns (a graph capture would
/// otherwise record another test's launches).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static L: std::sync::Mutex<()> = std::sync::Mutex::new(());
    L.lock().unwrap_or_else(|p| p.into_inner())
}

/// The backend (holding the test lock until the end of the test), or print
/// `SKIPPED (no CUDA device): <name>` and return from the test.
#[macro_export]
macro_rules! require_gpu {
    ($name:expr) => {
        match common::gpu() {
            Some(g) => (g, common::serial()),
            None => {
                eprintln!("SKIPPED (no CUDA device): {}", $name);
                return;
            }
        }
    };
}

/// Evaluate the same body on the GPU and on the reference; returns (got, want) host tensors.
#[macro_export]
macro_rules! both {
    ($g:expr, $r:expr, |$be:ident| $body:expr) => {{
        let got = {
            let $be = $g;
            $body
        };
        let want = {
            let $be = $r;
            $body
        };
        (got, want)
    }};
}

/// Bars for ops the shared table has no `cuda` row for yet, with the reason.
pub fn cuda_tol(op: Op, lane: Lane) -> Tolerance {
    if let Some(r) = lookup(op, lane, "cuda") {
        return r.tol;
    }
    let t = |max_abs, max_rel, rel_l2| Tolerance {
        max_abs,
        max_rel,
        rel_l2,
    };
    match op {
        // copies only
        Op::Layout => t(0.0, 0.0, 0.0),
        // one f32 rounding; the GPU's fused multiply-add may round once less than the reference
        Op::Elementwise => t(1e-6, 2.4e-7, 2.4e-7),
        // expf/erff/tanhf are within 2 ulp on the GPU; outputs up to 4
        Op::Activation => t(4e-6, 0.0, 2e-6),
        Op::Glu => t(2e-6, 0.0, 2e-6),
        Op::Softmax => t(1e-6, 0.0, 4e-6),
        Op::LogSoftmax => t(8e-6, 0.0, 2e-6),
        Op::LayerNorm | Op::RmsNorm => t(8e-6, 0.0, 2e-6),
        // cuBLAS f32 (no TF32): accumulation order only
        Op::Matmul => t(0.0, 2e-5, 4e-6),
        Op::DepthwiseConv1d => t(0.0, 2e-6, 1e-6),
        Op::Conv2d => t(0.0, 2e-5, 4e-6),
        // q, k, v and the probabilities rounded to f16 for the tensor cores (2⁻¹¹ each), f32
        // accumulation and softmax: rel_l2 ≈ 2·2⁻¹¹ ≈ 1e-3; the f32 row kernel is far inside
        Op::Attention => t(0.0, 8e-3, 2.5e-3),
        Op::AttentionProbs => t(1e-6, 0.0, 4e-6),
        // conv1d = im2col + the lane's linear
        Op::Conv1d => cuda_tol(Op::Linear, lane),
        _ => t(0.0, 1e-5, 1e-5),
    }
}

pub fn check(what: &str, op: Op, lane: Lane, got: &HostTensor, want: &HostTensor) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    let tol = cuda_tol(op, lane);
    match compare(&got.data, &want.data, &tol) {
        Ok(m) => eprintln!(
            "ok   {what}: max_abs {:.2e} (range {:.2e}) rel_l2 {:.2e}",
            m.max_abs, m.range, m.rel_l2
        ),
        Err(e) => panic!("{what}: {e} (tolerance {tol:?})"),
    }
}

pub fn rnd(shape: &[usize], seed: u64, scale: f32) -> HostTensor {
    HostTensor::random(shape.to_vec(), seed, scale)
}
