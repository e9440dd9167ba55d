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

/// The shared table's `cuda` row (f32 activations) for `op` in `lane`.
pub fn cuda_tol(op: Op, lane: Lane) -> Tolerance {
    tol_for(op, lane, "cuda")
}

/// The shared table's row for `backend` ("cuda", or "cuda-f16act" for ops inside an f16 chain).
pub fn tol_for(op: Op, lane: Lane, backend: &str) -> Tolerance {
    lookup(op, lane, backend)
        .unwrap_or_else(|| panic!("no tolerance row for {op:?} {lane} {backend}"))
        .tol
}

pub fn check(what: &str, op: Op, lane: Lane, got: &HostTensor, want: &HostTensor) {
    check_with(what, cuda_tol(op, lane), got, want)
}

pub fn check_with(what: &str, tol: Tolerance, got: &HostTensor, want: &HostTensor) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
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

/// Every value rounded to f16 and back: what an f16 activation holds.
pub fn round16(t: &HostTensor) -> HostTensor {
    let data = t
        .data
        .iter()
        .map(|v| half::f16::from_f32(*v).to_f32())
        .collect();
    HostTensor::new(t.shape.clone(), data).expect("same shape")
}
