//! The q8 lane's GEMMs by shape (src/q8_mix.rs): a q8 GEMM routed to the f16 tensor cores must
//! be the f16 GEMM over the q8 weight's own values, bit for bit, eager and in a replayed f16
//! chain; the optional K rule must route long-K GEMMs to int8 and the rest to f16, and the
//! switch must change the path (a mix that silently stayed on one path would pass the equality
//! alone).
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use common::rnd;
use stapes_core::{Activation, Backend, HostTensor, Lane};
use stapes_cuda::{CudaBackend, Q8Mix};

/// (rows, K, N) above the GEMV size (8 rows), K and N off the tile sizes.
const SHAPES: [(usize, usize, usize); 5] = [
    (9, 31, 40),
    (33, 100, 17),
    (130, 385, 257),
    (517, 640, 96),
    (300, 64, 384),
];

/// The values a q8 weight holds on the CUDA home: the lane's 32-blocks, then one int8 scale
/// per row (backend.rs `weight`), each value `q × (amax / 127)` in f32 — what the f16 copy
/// rounds once to f16, as the f16 lane does with the values it is given.
fn cuda_q8_values(w: &HostTensor) -> HostTensor {
    let (codes, scales) = common::q8_rows(w);
    let k = w.shape[1];
    let out = codes
        .iter()
        .enumerate()
        .map(|(i, c)| c * scales[i / k])
        .collect();
    HostTensor::new(w.shape.clone(), out).expect("shape")
}

/// linear, linear_add and linear_act(GELU) of one weight, eager (f32 out).
fn eager(
    g: &CudaBackend,
    x: &HostTensor,
    w: &stapes_cuda::CudaWeight,
    b: &HostTensor,
    r: &HostTensor,
) -> Vec<Vec<f32>> {
    let (xt, bt, rt) = (
        g.upload(x).unwrap(),
        g.upload(b).unwrap(),
        g.upload(r).unwrap(),
    );
    let outs = [
        g.linear(&xt, w, Some(&bt)).unwrap(),
        g.linear_add(&xt, w, Some(&bt), &rt).unwrap(),
        g.linear_act(&xt, w, Some(&bt), Activation::Gelu).unwrap(),
    ];
    outs.iter().map(|t| g.download(t).unwrap().data).collect()
}

/// The same three inside an encoder chain (f16 activations): the eager first run and the
/// replay, which must agree bit for bit.
fn chained(
    g: &CudaBackend,
    x: &HostTensor,
    w: &stapes_cuda::CudaWeight,
    b: &HostTensor,
    r: &HostTensor,
) -> Vec<Vec<f32>> {
    common::linear_ops_chained(g, "q8-mix", x, w, b, r, Activation::Gelu).0
}

/// Input `(1, m, k)`, weight `(n, k)`, bias `(n)` and residual `(1, m, n)` from seed `s`.
fn case(s: u64, m: usize, k: usize, n: usize) -> [HostTensor; 4] {
    [
        rnd(&[1, m, k], s, 1.0),
        rnd(&[n, k], s + 1, 1.0 / (k as f32).sqrt()),
        rnd(&[n], s + 2, 0.5),
        rnd(&[1, m, n], s + 3, 1.0),
    ]
}

fn differing(a: &[f32], b: &[f32]) -> usize {
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count()
}

#[test]
fn q8_on_the_f16_tensor_cores_is_the_f16_gemm_of_its_values() {
    let (g, _serial) = require_gpu!("q8_on_the_f16_tensor_cores_is_the_f16_gemm_of_its_values");
    g.set_f16_activations(true);
    for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
        let [x, w, b, r] = case(100 + 10 * i as u64, m, k, n);
        let wq = g.weight(&w, Lane::Q8).unwrap();
        let wh = g.weight(&cuda_q8_values(&w), Lane::F16).unwrap();
        g.set_q8_mix(Q8Mix::F16);
        let c0 = g.counters().snapshot().gemm_q8_f16;
        let q_eager = eager(g, &x, &wq, &b, &r);
        let on_copy = g.counters().snapshot().gemm_q8_f16 - c0;
        let q_chain = chained(g, &x, &wq, &b, &r);
        let h_eager = eager(g, &x, &wh, &b, &r);
        let h_chain = chained(g, &x, &wh, &b, &r);
        g.set_q8_mix(Q8Mix::Int8);
        let c1 = g.counters().snapshot().gemm_q8_f16;
        let i_eager = eager(g, &x, &wq, &b, &r);
        let what = format!("m{m} k{k} n{n}");
        assert_eq!(
            on_copy, 3,
            "{what}: the three q8 GEMMs did not all count as on the f16 copy"
        );
        assert_eq!(
            g.counters().snapshot().gemm_q8_f16 - c1,
            0,
            "{what}: int8 GEMMs counted as on the f16 copy"
        );
        for (j, op) in ["linear", "linear_add", "linear_act"].iter().enumerate() {
            let what = format!("{op} m{m} k{k} n{n}");
            assert_eq!(
                differing(&q_eager[j], &h_eager[j]),
                0,
                "{what} eager: q8 through its f16 copy != f16 lane on the same values"
            );
            assert_eq!(
                differing(&q_chain[j], &h_chain[j]),
                0,
                "{what} f16 chain: q8 through its f16 copy != f16 lane on the same values"
            );
            assert!(
                differing(&q_eager[j], &i_eager[j]) > 0,
                "{what}: the int8 path gave the f16 path's bits (the switch changed nothing)"
            );
        }
    }
    g.set_q8_mix(Q8Mix::F16);
}

#[test]
fn the_shape_rule_keeps_long_k_on_int8() {
    let (g, _serial) = require_gpu!("the_shape_rule_keeps_long_k_on_int8");
    // (K, on f16 under the K rule): turbo's q|k|v and fc1 (1280) go to f16, fc2 (5120) stays int8
    for (i, (k, f16_path)) in [(1280usize, true), (5120, false)].into_iter().enumerate() {
        let (m, n) = (40, 64);
        let s = 300 + 10 * i as u64;
        let [x, w, b, r] = case(s, m, k, n);
        let wq = g.weight(&w, Lane::Q8).unwrap();
        let mut by_mode = Vec::new();
        for mode in [Q8Mix::Shape, Q8Mix::F16, Q8Mix::Int8] {
            g.set_q8_mix(mode);
            by_mode.push(eager(g, &x, &wq, &b, &r));
        }
        g.set_q8_mix(Q8Mix::F16);
        let (rule, f16, int8) = (&by_mode[0], &by_mode[1], &by_mode[2]);
        let same = if f16_path { f16 } else { int8 };
        let other = if f16_path { int8 } else { f16 };
        for j in 0..3 {
            assert_eq!(
                differing(&rule[j], &same[j]),
                0,
                "K {k} op {j}: the rule took the other path"
            );
            assert!(
                differing(&rule[j], &other[j]) > 0,
                "K {k} op {j}: both paths gave the same bits"
            );
        }
        // decoder-step sizes stay on the int8 GEMV whatever the rule
        let x1 = rnd(&[1, 3, k], s + 4, 1.0);
        let r1 = rnd(&[1, 3, n], s + 5, 1.0);
        g.set_q8_mix(Q8Mix::F16);
        let f = eager(g, &x1, &wq, &b, &r1);
        g.set_q8_mix(Q8Mix::Int8);
        let q = eager(g, &x1, &wq, &b, &r1);
        g.set_q8_mix(Q8Mix::F16);
        assert_eq!(f, q, "K {k}: a 3-row GEMV changed with the mix");
    }
}
