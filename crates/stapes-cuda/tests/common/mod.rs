//! Shared by the GPU tests: one backend per test binary, skip-by-name without a GPU, and the
//! comparison against the reference under a tolerance.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use stapes_core::counters::CounterSnapshot;
use stapes_core::tolerance::{compare, lookup, Op, Tolerance};
use stapes_core::{Activation, Backend, HostTensor, Lane};
use stapes_cuda::{CudaBackend, CudaTensor};

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

/// The CUDA home's q8 re-lay of `w (n, k)` (the lane's 32-blocks, then int8 per row, as
/// backend.rs `q8_row` makes it): the codes (row-major) and the per-row scales `amax / 127`.
pub fn q8_rows(w: &HostTensor) -> (Vec<f32>, Vec<f32>) {
    let (n, k) = (w.shape[0], w.shape[1]);
    let (mut codes, mut scales) = (Vec::with_capacity(n * k), Vec::with_capacity(n));
    for r in 0..n {
        let row = stapes_core::lane::round_trip(Lane::Q8, &w.data[r * k..(r + 1) * k]);
        let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
        codes.extend(row.iter().map(|v| (v * inv).round().clamp(-127.0, 127.0)));
        scales.push(amax / 127.0);
    }
    (codes, scales)
}

/// linear, linear_add and linear_act(`act`) of one weight inside an encoder chain (f16
/// activations, key `test-encoder/<tag>-N`): the eager first run and the replay, which must
/// agree bit for bit. Returns the outputs and the counters right after the eager run.
pub fn linear_ops_chained(
    g: &CudaBackend,
    tag: &str,
    x: &HostTensor,
    w: &stapes_cuda::CudaWeight,
    b: &HostTensor,
    r: &HostTensor,
    act: Activation,
) -> (Vec<Vec<f32>>, CounterSnapshot) {
    static N: AtomicUsize = AtomicUsize::new(0);
    let (xt, bt, rt) = (
        g.upload(x).unwrap(),
        g.upload(b).unwrap(),
        g.upload(r).unwrap(),
    );
    let key = format!("test-encoder/{tag}-{}", N.fetch_add(1, Ordering::Relaxed));
    let run = || -> Vec<Vec<f32>> {
        let outs = g
            .chain(&key, &mut |be| {
                let x16 = be.affine(&xt, 1.0, 0.0)?;
                let r16 = be.affine(&rt, 1.0, 0.0)?;
                Ok(vec![
                    be.linear(&x16, w, Some(&bt))?,
                    be.linear_add(&x16, w, Some(&bt), &r16)?,
                    be.linear_act(&x16, w, Some(&bt), act)?,
                ])
            })
            .unwrap();
        outs.iter()
            .map(|t: &CudaTensor| g.download(t).unwrap().data)
            .collect()
    };
    let first = run();
    let after_eager = g.counters().snapshot();
    let replayed = run();
    assert_eq!(
        first, replayed,
        "{key}: the replay differs from the eager run"
    );
    (first, after_eager)
}

/// Activations with a heavier tail than uniform, like a layer-normed residual stream.
pub fn heavy_tailed_activations(m: usize, k: usize) -> HostTensor {
    let u = HostTensor::random(vec![1, m, k], 901, 1.0);
    let data = u.data.iter().map(|v| v * v * v * 2.0 + v * 0.5).collect();
    HostTensor::new(vec![1, m, k], data).expect("shape")
}

/// The worst output column's relative L2 over row-major `(rows, n)` results: one column's
/// weights are one row of W, where a zeroed 32-block shows at ≈ √(32/K) of that column
/// instead of being diluted over N columns.
pub fn worst_column(got: &[f32], want: &[f32], n: usize) -> (usize, f32) {
    let rows = got.len() / n;
    (0..n)
        .map(|j| {
            let (mut num, mut den) = (0f64, 0f64);
            for r in 0..rows {
                let (g, w) = (got[r * n + j] as f64, want[r * n + j] as f64);
                num += (g - w) * (g - w);
                den += w * w;
            }
            (j, (num / den.max(1e-30)).sqrt() as f32)
        })
        .fold((0, 0f32), |a, b| if b.1 > a.1 { b } else { a })
}

/// `body` as the chain `key`, run twice: eagerly, then replayed from its capture. Asserts the
/// replay gives the eager run's values bit for bit (naming the first that differs), and returns
/// the outputs with how far each of `count`'s counters moved over the eager run.
pub fn chain_eager_replay<const N: usize>(
    g: &CudaBackend,
    key: &str,
    count: &dyn Fn() -> [u64; N],
    body: &mut dyn FnMut(&CudaBackend) -> stapes_core::Result<Vec<CudaTensor>>,
) -> (Vec<Vec<f32>>, [u64; N]) {
    let mut go = || -> Vec<Vec<f32>> {
        let outs = g
            .chain(key, &mut *body)
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        outs.iter()
            .map(|t| g.download(t).expect("download").data)
            .collect()
    };
    let c0 = count();
    let eager = go();
    let c1 = count();
    let replayed = go();
    assert_eq!(eager.len(), replayed.len(), "{key}: outputs of the replay");
    for (j, (e, r)) in eager.iter().zip(&replayed).enumerate() {
        assert_eq!(e.len(), r.len(), "{key}: output {j}'s length in the replay");
        let first = (0..e.len()).find(|&i| e[i].to_bits() != r[i].to_bits() || e[i] != r[i]);
        if let Some(i) = first {
            panic!(
                "{key}: the replay differs from the eager run: output {j}, value {i}: {} vs {}",
                r[i], e[i]
            );
        }
    }
    (eager, std::array::from_fn(|i| c1[i] - c0[i]))
}
