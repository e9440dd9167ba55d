//! The fused decoder-step ops on the CUDA home (`norm_linear`, `qkv_step`,
//! `attention_step_packed`: step.rs, kernels/step.cu) against `ReferenceBackend`'s composed
//! defaults: awkward shapes, every epilogue combination, f16 weights (one kernel launch each)
//! and q8 weights (the composed fallback).
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use common::{check, rnd};
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::Op;
use stapes_core::{
    Activation, AttnParams, Backend, DeviceTensor, HostTensor, Lane, LinearFusion, NormRef,
    StepParams,
};

/// ‖a − b‖ / ‖b‖.
fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den.max(1e-30)).sqrt()
}

/// (rows, K, N): one row (greedy), a few (beams), row counts past one block's group of x rows
/// (17, 32), K past what one group holds in shared memory (5120: two rows per group; at 5 rows
/// three groups of the wide form's batched loads), N off the blocks' feature counts; the wide
/// form (a norm, more than 2 rows or N ≥ 16384: 4 features per warp) and, without those parts,
/// the split-K form with 1, 2, 4 and 8 warps per feature (1280 × 1280 splits 4 ways, 5120 × 40
/// 8 ways); tiny's fc2 at 5 rows (8 rows of K 1536 would fill the 48 KB of shared memory
/// exactly, beside the kernel's own reduction buffer: the launch must pick fewer rows per
/// block); the logits of turbo (1 row) and tiny (5 beams), whose wide grids are one wave of
/// blocks walking several tiles each.
const SHAPES: [(usize, usize, usize); 14] = [
    (5, 1536, 384),
    (2, 512, 16411),
    (1, 1280, 1280),
    (1, 64, 5),
    (3, 384, 1152),
    (5, 1280, 3001),
    (2, 5120, 40),
    (5, 5120, 640),
    (17, 96, 33),
    (32, 256, 100),
    (9, 8, 7),
    (1, 1280, 5191),
    (1, 1280, 51866),
    (5, 384, 51865),
];

/// The parts of a fusion, as switches.
#[derive(Clone, Copy, Debug)]
struct Parts {
    norm: bool,
    beta: bool,
    bias: bool,
    gelu: bool,
    residual: bool,
}

const PARTS: [Parts; 5] = [
    Parts {
        norm: true,
        beta: true,
        bias: true,
        gelu: false,
        residual: false,
    },
    Parts {
        norm: false,
        beta: false,
        bias: true,
        gelu: false,
        residual: true,
    },
    Parts {
        norm: true,
        beta: true,
        bias: true,
        gelu: true,
        residual: false,
    },
    Parts {
        norm: true,
        beta: false,
        bias: false,
        gelu: false,
        residual: false,
    },
    Parts {
        norm: false,
        beta: false,
        bias: false,
        gelu: true,
        residual: true,
    },
];

struct Case {
    x: HostTensor,
    w: HostTensor,
    bias: HostTensor,
    gamma: HostTensor,
    beta: HostTensor,
    r: HostTensor,
}

fn case(i: usize, m: usize, k: usize, n: usize) -> Case {
    // an offset and spread in x so the norm has something to remove
    let mut x = rnd(&[m, 1, k], 10 + i as u64, 2.0);
    x.data.iter_mut().for_each(|v| *v += 0.7);
    let mut gamma = rnd(&[k], 50 + i as u64, 0.3);
    gamma.data.iter_mut().for_each(|v| *v += 1.0);
    Case {
        x,
        w: rnd(&[n, k], 20 + i as u64, 1.0 / (k as f32).sqrt()),
        bias: rnd(&[n], 30 + i as u64, 0.5),
        gamma,
        beta: rnd(&[k], 60 + i as u64, 0.2),
        r: rnd(&[m, 1, n], 40 + i as u64, 1.0),
    }
}

/// `norm_linear` of case `c` with `parts` on backend `b`, downloaded.
fn run<B: Backend>(b: &B, c: &Case, lane: Lane, p: Parts) -> HostTensor {
    let x = b.upload(&c.x).unwrap();
    let w = b.weight(&c.w, lane).unwrap();
    let (bias, gamma, beta, r) = (
        b.upload(&c.bias).unwrap(),
        b.upload(&c.gamma).unwrap(),
        b.upload(&c.beta).unwrap(),
        b.upload(&c.r).unwrap(),
    );
    let f = LinearFusion {
        norm: p.norm.then_some(NormRef {
            gamma: &gamma,
            beta: p.beta.then_some(&beta),
            eps: 1e-5,
        }),
        bias: p.bias.then_some(&bias),
        act: p.gelu.then_some(Activation::Gelu),
        residual: p.residual.then_some(&r),
    };
    b.download(&b.norm_linear(&x, &w, &f).unwrap()).unwrap()
}

#[test]
fn norm_linear_equals_composed_reference() {
    let (g, _serial) = require_gpu!("norm_linear_equals_composed_reference");
    let r = ReferenceBackend::new();
    for lane in [Lane::F16, Lane::Q8] {
        for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
            let c = case(i, m, k, n);
            for (j, &p) in PARTS.iter().enumerate() {
                // every shape with every combination would be slow on the scalar reference
                if (i + j) % 2 == 1 && m * k * n > 1 << 20 {
                    continue;
                }
                let got = run(g, &c, lane, p);
                let want = run(&r, &c, lane, p);
                let what = format!("norm_linear {lane} m{m} k{k} n{n} {p:?}");
                check(&what, Op::Linear, lane, &got, &want);
                // the norm, activation and residual must show in the result: the same case
                // without them lies outside the bar (a kernel that skipped one would pass a
                // comparison that also lacked it)
                if p.norm || p.gelu || p.residual {
                    let bare = Parts {
                        norm: false,
                        gelu: false,
                        residual: false,
                        ..p
                    };
                    let without = run(&r, &c, lane, bare);
                    let d = rel_l2(&want.data, &without.data);
                    assert!(d > 1e-2, "{what}: the fused parts change nothing ({d})");
                }
            }
        }
    }
}

/// One launch for the fused op itself (measured around the op alone).
#[test]
fn norm_linear_is_one_launch_for_f16_weights() {
    let (g, _serial) = require_gpu!("norm_linear_is_one_launch_for_f16_weights");
    for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
        let c = case(i, m, k, n);
        let x = g.upload(&c.x).unwrap();
        let w = g.weight(&c.w, Lane::F16).unwrap();
        let (bias, gamma, r) = (
            g.upload(&c.bias).unwrap(),
            g.upload(&c.gamma).unwrap(),
            g.upload(&c.r).unwrap(),
        );
        let f = LinearFusion {
            norm: Some(NormRef {
                gamma: &gamma,
                beta: None,
                eps: 1e-5,
            }),
            bias: Some(&bias),
            act: Some(Activation::Gelu),
            residual: Some(&r),
        };
        let before = g.counters().snapshot().ops;
        let y = g.norm_linear(&x, &w, &f).unwrap();
        let launches = g.counters().snapshot().ops - before;
        assert_eq!(y.shape(), [m, 1, n]);
        assert_eq!(launches, 1, "m{m} k{k} n{n}: {launches} launches");
    }
}

/// `qkv_step` + `attention_step_packed` over a cache with earlier rows against the reference's
/// composed defaults: the returned qkv, both caches (the step's row appended, the rest
/// untouched) and the attention output; tiny's head size 64 and an odd one (d 80, 5 heads of 16).
#[test]
fn qkv_step_and_packed_attention_equal_composed_reference() {
    let (g, _serial) = require_gpu!("qkv_step_and_packed_attention_equal_composed_reference");
    let r = ReferenceBackend::new();
    for (i, &(bs, d, heads, t, pos)) in [
        (1usize, 384usize, 6usize, 448usize, 0usize),
        (5, 384, 6, 448, 37),
        (3, 80, 5, 20, 19),
        (32, 64, 1, 9, 4),
    ]
    .iter()
    .enumerate()
    {
        let mut x = rnd(&[bs, 1, d], 70 + i as u64, 1.5);
        x.data.iter_mut().for_each(|v| *v -= 0.3);
        let w = rnd(&[3 * d, d], 71 + i as u64, 1.0 / (d as f32).sqrt());
        let mut bias = rnd(&[3 * d], 72 + i as u64, 0.5);
        bias.data[d..2 * d].iter_mut().for_each(|v| *v = 0.0);
        let gamma = rnd(&[d], 73 + i as u64, 1.0);
        let k0 = rnd(&[bs, t, d], 74 + i as u64, 1.0);
        let v0 = rnd(&[bs, t, d], 75 + i as u64, 1.0);
        let ids: Vec<u32> = (0..bs as u32).collect();
        let step = StepParams { position: pos, ids }.to_host().unwrap();
        fn go<B: Backend>(
            b: &B,
            tensors: [&HostTensor; 6],
            step: &HostTensor,
            heads: usize,
        ) -> [HostTensor; 4] {
            let [x, w, bias, gamma, k0, v0] = tensors;
            let (x, w) = (b.upload(x).unwrap(), b.weight(w, Lane::F16).unwrap());
            let (bias, gamma) = (b.upload(bias).unwrap(), b.upload(gamma).unwrap());
            let (mut kc, mut vc) = (b.upload(k0).unwrap(), b.upload(v0).unwrap());
            let st = b.upload(step).unwrap();
            let f = LinearFusion {
                norm: Some(NormRef {
                    gamma: &gamma,
                    beta: None,
                    eps: 1e-5,
                }),
                bias: Some(&bias),
                ..Default::default()
            };
            let qkv = b.qkv_step(&x, &w, &f, (&mut kc, &mut vc), &st).unwrap();
            let d = x.shape()[2];
            let p = AttnParams {
                n_heads: heads,
                scale: 1.0 / ((d / heads) as f32).sqrt(),
                kv_len: None,
                causal: true,
            };
            let a = b.attention_step_packed(&qkv, &kc, &vc, &p, &st).unwrap();
            [qkv, kc, vc, a].map(|t| b.download(&t).unwrap())
        }
        let tensors = [&x, &w, &bias, &gamma, &k0, &v0];
        let got = go(g, tensors, &step, heads);
        let want = go(&r, tensors, &step, heads);
        let what = format!("qkv_step b{bs} d{d} h{heads} T{t} pos{pos}");
        check(
            &format!("{what} qkv"),
            Op::Linear,
            Lane::F16,
            &got[0],
            &want[0],
        );
        check(
            &format!("{what} k cache"),
            Op::Linear,
            Lane::F16,
            &got[1],
            &want[1],
        );
        check(
            &format!("{what} v cache"),
            Op::Linear,
            Lane::F16,
            &got[2],
            &want[2],
        );
        check(
            &format!("{what} attention"),
            Op::Attention,
            Lane::F16,
            &got[3],
            &want[3],
        );
        // rows other than pos are the uploaded ones, bit for bit
        for (name, c, c0) in [("k", &got[1], &k0), ("v", &got[2], &v0)] {
            for b in 0..bs {
                for row in (0..t).filter(|&row| row != pos) {
                    let o = (b * t + row) * d;
                    assert!(
                        c.data[o..o + d] == c0.data[o..o + d],
                        "{what}: {name} cache row {row} of sequence {b} changed"
                    );
                }
                let o = (b * t + pos) * d;
                assert!(
                    c.data[o..o + d] != c0.data[o..o + d],
                    "{what}: {name} cache row {pos} of sequence {b} not written"
                );
            }
        }
    }
}

/// A residual of another shape is refused with the op's name, not read out of bounds.
#[test]
fn norm_linear_refuses_a_residual_of_another_shape() {
    let (g, _serial) = require_gpu!("norm_linear_refuses_a_residual_of_another_shape");
    let c = case(0, 2, 64, 8);
    let x = g.upload(&c.x).unwrap();
    let w = g.weight(&c.w, Lane::F16).unwrap();
    let bad = g.upload(&rnd(&[2, 1, 9], 1, 1.0)).unwrap();
    let f = LinearFusion {
        residual: Some(&bad),
        ..Default::default()
    };
    let e = g.norm_linear(&x, &w, &f).unwrap_err().to_string();
    assert!(e.contains("norm_linear") && e.contains("residual"), "{e}");
}

/// Timing, not a check (run with `--ignored`): the fused step GEMV on turbo's shapes (d 1280),
/// 1 and 5 rows, 200 back-to-back launches then one sync; prints µs per call and the weight
/// bytes streamed per second.
#[test]
#[ignore]
fn step_gemv_bandwidth_turbo_shapes() {
    let (g, _serial) = require_gpu!("step_gemv_bandwidth_turbo_shapes");
    let d = 1280;
    for (name, n, k, norm) in [
        ("qkv (LN)", 3 * d, d, true),
        ("out_proj (+res)", d, d, false),
        ("fc1 (LN, GELU)", 4 * d, d, true),
        ("fc2 (+res)", d, 4 * d, false),
        ("logits (LN)", 51866, d, true),
    ] {
        let w = g
            .weight(&rnd(&[n, k], 3, 1.0 / (k as f32).sqrt()), Lane::F16)
            .unwrap();
        let gamma = g.upload(&rnd(&[k], 4, 1.0)).unwrap();
        for m in [1usize, 5] {
            let x = g.upload(&rnd(&[m, 1, k], 5, 1.0)).unwrap();
            let r = g.upload(&rnd(&[m, 1, n], 6, 1.0)).unwrap();
            let f = LinearFusion {
                norm: norm.then_some(NormRef {
                    gamma: &gamma,
                    beta: None,
                    eps: 1e-5,
                }),
                residual: (!norm).then_some(&r),
                ..Default::default()
            };
            for _ in 0..20 {
                let _ = g.norm_linear(&x, &w, &f).unwrap();
            }
            g.synchronize().unwrap();
            let reps = 200;
            let t = std::time::Instant::now();
            for _ in 0..reps {
                let _ = g.norm_linear(&x, &w, &f).unwrap();
            }
            g.synchronize().unwrap();
            let us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
            let tbs = (n * k * 2) as f64 / (us * 1e-6) / 1e12;
            println!("step_gemv {name:16} m{m} ({n} x {k}): {us:7.2} us, {tbs:.2} TB/s");
        }
    }
}
