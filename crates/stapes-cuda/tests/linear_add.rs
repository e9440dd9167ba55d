//! `Backend::linear_add` (`x · Wᵀ + b + r`, the residual inside the GEMM) on the CUDA home
//! against `ReferenceBackend`'s composed default (`linear` then `add`), f16 and q8 lanes,
//! f32 activations (eager) and f16 activations (inside an encoder chain).
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{check, check_with, rnd, tol_for};
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::{compare, Op};
use stapes_core::{Backend, Error, HostTensor, Lane};
use stapes_cuda::CudaTensor;

const LANES: [Lane; 2] = [Lane::F16, Lane::Q8];

/// (rows, K, N): the GEMV path (≤ 8 rows) and the library path; K and N off the tile sizes.
const SHAPES: [(usize, usize, usize); 8] = [
    (1, 64, 5),
    (7, 385, 96),
    (9, 31, 40),
    (33, 100, 17),
    (130, 385, 257),
    (517, 640, 96),
    (300, 64, 384),
    (20, 2560, 48),
];

fn round16(t: &HostTensor) -> HostTensor {
    let data = t
        .data
        .iter()
        .map(|v| half::f16::from_f32(*v).to_f32())
        .collect();
    HostTensor::new(t.shape.clone(), data).expect("same shape")
}

struct Case {
    x: HostTensor,
    w: HostTensor,
    b: HostTensor,
    r: HostTensor,
    with_bias: bool,
}

fn case(i: usize, m: usize, k: usize, n: usize) -> Case {
    Case {
        x: rnd(&[1, m, k], 10 + i as u64, 1.0),
        w: rnd(&[n, k], 20 + i as u64, 1.0 / (k as f32).sqrt()),
        b: rnd(&[n], 30 + i as u64, 0.5),
        r: rnd(&[1, m, n], 40 + i as u64, 1.0),
        with_bias: i.is_multiple_of(2),
    }
}

/// The reference: the trait's composed default.
fn reference(c: &Case, lane: Lane, round: bool) -> (HostTensor, HostTensor) {
    let r = ReferenceBackend::new();
    let rd = |t: &HostTensor| if round { round16(t) } else { t.clone() };
    let x = r.upload(&rd(&c.x)).unwrap();
    let w = r.weight(&c.w, lane).unwrap();
    let b = r.upload(&c.b).unwrap();
    let res = r.upload(&rd(&c.r)).unwrap();
    let bias = c.with_bias.then_some(&b);
    let with = r
        .download(&r.linear_add(&x, &w, bias, &res).unwrap())
        .unwrap();
    let without = r.download(&r.linear(&x, &w, bias).unwrap()).unwrap();
    (with, without)
}

/// The residual must show: the same output without it is far outside the tolerance (a kernel
/// that dropped `r` would pass a comparison against a reference that also lacked it).
fn assert_residual_counts(
    what: &str,
    op_tol: stapes_core::tolerance::Tolerance,
    got: &HostTensor,
    without: &HostTensor,
) {
    assert!(
        compare(&got.data, &without.data, &op_tol).is_err(),
        "{what}: the output equals linear without the residual"
    );
}

#[test]
fn linear_add_f32_activations() {
    let (g, _serial) = require_gpu!("linear_add_f32_activations");
    for lane in LANES {
        for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
            let c = case(i, m, k, n);
            let x = g.upload(&c.x).unwrap();
            let w = g.weight(&c.w, lane).unwrap();
            let b = g.upload(&c.b).unwrap();
            let res = g.upload(&c.r).unwrap();
            let bias = c.with_bias.then_some(&b);
            // the library path must add r inside the GEMM / epilogue: no launch beyond what
            // `linear` of the same (already prepared) input costs
            let _ = g.linear(&x, &w, bias).unwrap();
            let s0 = g.counters().snapshot();
            let _ = g.linear(&x, &w, bias).unwrap();
            let s1 = g.counters().snapshot();
            let y = g.linear_add(&x, &w, bias, &res).unwrap();
            let s2 = g.counters().snapshot();
            assert!(!y.is_f16(), "eager ops write f32");
            let got = g.download(&y).unwrap();
            let (want, without) = reference(&c, lane, false);
            let what = format!(
                "linear_add {lane} f32 act m{m} k{k} n{n} bias {}",
                c.with_bias
            );
            check(&what, Op::Linear, lane, &got, &want);
            assert_residual_counts(&what, common::cuda_tol(Op::Linear, lane), &got, &without);
            if m > 8 {
                assert_eq!(
                    s2.ops - s1.ops,
                    s1.ops - s0.ops,
                    "{what}: linear_add launched more kernels than linear (a separate add pass)"
                );
            }
        }
    }
}

/// Runs `linear_add` inside an encoder chain (f16 activations) twice under one key: the first
/// call runs eagerly, the second replays the captured graph; both must be the same bits.
#[test]
fn linear_add_f16_activations_and_replay() {
    let (g, _serial) = require_gpu!("linear_add_f16_activations_and_replay");
    static N: AtomicUsize = AtomicUsize::new(0);
    g.set_f16_activations(true);
    for lane in LANES {
        for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
            let c = case(i, m, k, n);
            let x = g.upload(&c.x).unwrap();
            let w = g.weight(&c.w, lane).unwrap();
            let b = g.upload(&c.b).unwrap();
            let res = g.upload(&c.r).unwrap();
            let key = format!(
                "test-encoder/linear-add-{}",
                N.fetch_add(1, Ordering::Relaxed)
            );
            let run = || -> (HostTensor, bool) {
                let out = g
                    .chain(&key, &mut |be| {
                        // identity affines make f16 copies of the inputs inside the chain
                        let x16 = be.affine(&x, 1.0, 0.0)?;
                        let r16 = be.affine(&res, 1.0, 0.0)?;
                        let bias = c.with_bias.then_some(&b);
                        Ok(vec![be.linear_add(&x16, &w, bias, &r16)?])
                    })
                    .unwrap();
                let t: &CudaTensor = &out[0];
                (g.download(t).unwrap(), t.is_f16())
            };
            let (first, is16) = run();
            let (replayed, _) = run();
            let what = format!(
                "linear_add {lane} f16 act m{m} k{k} n{n} bias {}",
                c.with_bias
            );
            assert!(is16, "{what}: the chain's output is not f16");
            assert_eq!(
                first.data, replayed.data,
                "{what}: graph replay differs from the eager run"
            );
            let (want, without) = reference(&c, lane, true);
            let tol = tol_for(Op::Linear, lane, "cuda-f16act");
            check_with(&what, tol, &first, &want);
            assert_residual_counts(&what, tol, &first, &without);
        }
    }
}

#[test]
fn linear_add_refuses_a_broadcast_residual() {
    let (g, _serial) = require_gpu!("linear_add_refuses_a_broadcast_residual");
    for lane in LANES {
        let x = g.upload(&rnd(&[2, 20, 64], 1, 1.0)).unwrap();
        let w = g.weight(&rnd(&[48, 64], 2, 0.1), lane).unwrap();
        for bad in [vec![48], vec![1, 20, 48], vec![2, 20, 47], vec![40, 48]] {
            let r = g.upload(&HostTensor::zeros(bad.clone())).unwrap();
            match g.linear_add(&x, &w, None, &r) {
                Err(Error::Shape { op, detail }) => {
                    assert_eq!(op, "linear_add");
                    assert!(detail.contains("residual"), "{detail}");
                }
                other => panic!("{lane} residual {bad:?}: expected a shape error, got {other:?}"),
            }
        }
    }
}
