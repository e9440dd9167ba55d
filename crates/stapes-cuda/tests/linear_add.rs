//! `Backend::linear_add` (`x · Wᵀ + b + r`, the residual inside the GEMM) and
//! `Backend::linear_act` (`act(x · Wᵀ + b)`, q8: the activation and the next GEMM's input
//! quantization in the scaling epilogue) on the CUDA home against `ReferenceBackend`'s composed
//! defaults, f16 and q8 lanes, f32 activations (eager) and f16 activations (inside an encoder
//! chain).
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{check, check_with, rnd, round16, tol_for};
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::{compare, Op};
use stapes_core::{Activation, Backend, Error, HostTensor, Lane};
use stapes_cuda::{CudaTensor, Q8Mix};

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

/// fc1 → GELU → fc2 as the Whisper encoder runs it (`linear_act` then `linear_add`) against the
/// reference's composition, eager (f32) and in an f16 chain (twice: eager, then the replayed
/// graph); q8 at > 8 rows: fc2 finds its input quantized by fc1's epilogue (one launch, its
/// scaling epilogue, instead of two).
#[test]
fn linear_act_then_linear_add_mlp() {
    let (g, _serial) = require_gpu!("linear_act_then_linear_add_mlp");
    // the epilogue fusions checked here are the int8 path's (q8_mix.rs)
    g.set_q8_mix(Q8Mix::Int8);
    static N: AtomicUsize = AtomicUsize::new(0);
    let r = ReferenceBackend::new();
    // (rows, d, hidden): GEMV path, odd sizes, and a Whisper-tiny-sized block
    let shapes = [(5, 64, 256), (9, 36, 100), (33, 100, 172), (300, 384, 1536)];
    for lane in LANES {
        for act in [Activation::Gelu, Activation::Silu, Activation::Relu] {
            for (i, &(m, d, hid)) in shapes.iter().enumerate() {
                let x = rnd(&[1, m, d], 50 + i as u64, 1.0);
                let w1 = rnd(&[hid, d], 60 + i as u64, 2.0 / (d as f32).sqrt());
                let b1 = rnd(&[hid], 70 + i as u64, 0.5);
                let w2 = rnd(&[d, hid], 80 + i as u64, 1.0 / (hid as f32).sqrt());
                let b2 = rnd(&[d], 90 + i as u64, 0.5);
                let what = format!("mlp {lane} {act:?} m{m} d{d} hid{hid}");
                let want_for = |round: bool| {
                    let rd = |t: &HostTensor| if round { round16(t) } else { t.clone() };
                    let xt = r.upload(&rd(&x)).unwrap();
                    let (w1t, w2t) = (r.weight(&w1, lane).unwrap(), r.weight(&w2, lane).unwrap());
                    let (b1t, b2t) = (r.upload(&b1).unwrap(), r.upload(&b2).unwrap());
                    let h = r
                        .activation(&r.linear(&xt, &w1t, Some(&b1t)).unwrap(), act)
                        .unwrap();
                    let y = r
                        .add(&r.linear(&h, &w2t, Some(&b2t)).unwrap(), &xt)
                        .unwrap();
                    (r.download(&h).unwrap(), r.download(&y).unwrap())
                };
                let (w1g, w2g) = (g.weight(&w1, lane).unwrap(), g.weight(&w2, lane).unwrap());
                let (b1g, b2g) = (g.upload(&b1).unwrap(), g.upload(&b2).unwrap());
                let xg = g.upload(&x).unwrap();

                // eager, f32 activations
                let sa = g.counters().snapshot();
                let h = g.linear_act(&xg, &w1g, Some(&b1g), act).unwrap();
                let s0 = g.counters().snapshot();
                if lane == Lane::F16 && m > 8 && act == Activation::Relu {
                    // no launch beyond a plain linear's on the same (already cast) input
                    let plain = g.linear(&xg, &w1g, Some(&b1g)).unwrap();
                    let sp = g.counters().snapshot();
                    let again = g.linear_act(&xg, &w1g, Some(&b1g), act).unwrap();
                    let sr = g.counters().snapshot();
                    assert_eq!(
                        sr.ops - sp.ops,
                        sp.ops - s0.ops,
                        "{what}: ReLU should run in the GEMM's epilogue (first call {})",
                        s0.ops - sa.ops
                    );
                    drop((plain, again));
                }
                let y = g.linear_add(&h, &w2g, Some(&b2g), &xg).unwrap();
                let s1 = g.counters().snapshot();
                let (want_h, want_y) = want_for(false);
                let tol = common::cuda_tol(Op::Linear, lane);
                check_with(
                    &format!("{what} f32 hidden"),
                    tol,
                    &g.download(&h).unwrap(),
                    &want_h,
                );
                check_with(
                    &format!("{what} f32 out"),
                    tol,
                    &g.download(&y).unwrap(),
                    &want_y,
                );
                if lane == Lane::Q8 && m > 8 {
                    assert_eq!(
                        s1.ops - s0.ops,
                        1,
                        "{what}: fc2 should find its input quantized by fc1's epilogue"
                    );
                }

                // f16 chain, eager then replayed
                let key = format!("test-encoder/mlp-{}", N.fetch_add(1, Ordering::Relaxed));
                let run = || -> (HostTensor, HostTensor) {
                    let out = g
                        .chain(&key, &mut |be| {
                            let x16 = be.affine(&xg, 1.0, 0.0)?;
                            let h = be.linear_act(&x16, &w1g, Some(&b1g), act)?;
                            let y = be.linear_add(&h, &w2g, Some(&b2g), &x16)?;
                            Ok(vec![h, y])
                        })
                        .unwrap();
                    assert!(
                        out.iter().all(|t| t.is_f16()),
                        "{what}: chain outputs not f16"
                    );
                    (g.download(&out[0]).unwrap(), g.download(&out[1]).unwrap())
                };
                let (h1, y1) = run();
                let (h2, y2) = run();
                assert_eq!(
                    (&h1.data, &y1.data),
                    (&h2.data, &y2.data),
                    "{what}: replay differs"
                );
                let (want_h, want_y) = want_for(true);
                let tol = tol_for(Op::Linear, lane, "cuda-f16act");
                check_with(&format!("{what} f16 hidden"), tol, &h1, &want_h);
                check_with(&format!("{what} f16 out"), tol, &y1, &want_y);
            }
        }
    }
    g.set_q8_mix(Q8Mix::F16);
}

/// `linear_act` with GELU in cuBLASLt's epilogue (`set_gelu_epilogue`): eager (f32
/// activations) and inside an encoder chain (f16), f16 lane and the q8 lane's f16 copy, against
/// the reference's linear then GELU. For the erf `Gelu` the epilogue's tanh form stands in: its
/// output must differ from the erf pass's (the epilogue really ran) and both must hold the
/// linear's bar; `GeluTanh` is the epilogue's own function.
#[test]
fn linear_act_gelu_epilogue() {
    let (g, _serial) = require_gpu!("linear_act_gelu_epilogue");
    g.set_q8_mix(Q8Mix::F16);
    static N: AtomicUsize = AtomicUsize::new(0);
    let r = ReferenceBackend::new();
    for lane in LANES {
        for act in [Activation::Gelu, Activation::GeluTanh] {
            for (i, &(m, k, n)) in [(300, 384, 1536), (130, 385, 257), (1500, 128, 512)]
                .iter()
                .enumerate()
            {
                let x = rnd(&[1, m, k], 150 + i as u64, 1.0);
                let w = rnd(&[n, k], 160 + i as u64, 2.0 / (k as f32).sqrt());
                let b = rnd(&[n], 170 + i as u64, 0.5);
                let what = format!("gelu epilogue {lane} {act:?} m{m} k{k} n{n}");
                let want = |round: bool| {
                    let xr = if round { round16(&x) } else { x.clone() };
                    let xt = r.upload(&xr).unwrap();
                    let (wt, bt) = (r.weight(&w, lane).unwrap(), r.upload(&b).unwrap());
                    let h = r.linear(&xt, &wt, Some(&bt)).unwrap();
                    r.download(&r.activation(&h, act).unwrap()).unwrap()
                };
                let (wg, bg, xg) = (
                    g.weight(&w, lane).unwrap(),
                    g.upload(&b).unwrap(),
                    g.upload(&x).unwrap(),
                );
                let key = format!("test-encoder/gelu-{}", N.fetch_add(1, Ordering::Relaxed));
                let run = |epi: bool| -> (HostTensor, HostTensor) {
                    g.set_gelu_epilogue(epi);
                    let eager = g.download(&g.linear_act(&xg, &wg, Some(&bg), act).unwrap());
                    let chain = g
                        .chain(&format!("{key}-{epi}"), &mut |be| {
                            let x16 = be.affine(&xg, 1.0, 0.0)?;
                            Ok(vec![be.linear_act(&x16, &wg, Some(&bg), act)?])
                        })
                        .unwrap();
                    g.set_gelu_epilogue(false);
                    (eager.unwrap(), g.download(&chain[0]).unwrap())
                };
                let (eager, chain) = run(true);
                check(
                    &format!("{what} eager"),
                    Op::Linear,
                    lane,
                    &eager,
                    &want(false),
                );
                check_with(
                    &format!("{what} f16 chain"),
                    common::cuda_tol(Op::Linear, lane),
                    &chain,
                    &want(true),
                );
                if act == Activation::Gelu {
                    let (eager_pass, chain_pass) = run(false);
                    assert_ne!(
                        eager.data, eager_pass.data,
                        "{what}: eager epilogue not taken"
                    );
                    assert_ne!(
                        chain.data, chain_pass.data,
                        "{what}: chain epilogue not taken"
                    );
                }
            }
        }
    }
}
