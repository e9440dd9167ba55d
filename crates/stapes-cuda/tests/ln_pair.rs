//! `layer_norm_pair` (two layer norms in a row, both results) on the CUDA home against
//! `ReferenceBackend`'s two `layer_norm` calls: eager with f32 activations (one launch), and inside
//! an encoder chain with f16 activations (eager then replayed: bit-identical; the reference rounds
//! x and y to f16 as the chain stores them). The fused kernel is off by default until it has run
//! on a GPU: each test turns it on (`STAPES_CUDA_LN_PAIR=1`) before its first op.
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use common::{check_with, rnd, tol_for};
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::{Op, Tolerance};
use stapes_core::{Backend, HostTensor, Lane};

const EPS: f32 = 1e-5;
/// (rows, d, with betas): the 0.6b-v2 block width over one clip's frames, odd sizes.
const SHAPES: [(usize, usize, bool); 4] = [
    (140, 1024, true),
    (3, 77, true),
    (1, 512, false),
    (17, 5, true),
];

fn ln_pair_on() {
    std::env::set_var("STAPES_CUDA_LN_PAIR", "1");
}

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
    p: [HostTensor; 4],
    betas: bool,
}

fn case(i: usize) -> Case {
    let (rows, d, betas) = SHAPES[i];
    let s = 10 * i as u64;
    let mut x = rnd(&[rows, d], s, 3.0);
    // an offset row mean, as a residual stream has
    x.data.iter_mut().for_each(|v| *v += 0.7);
    Case {
        x,
        p: [
            rnd(&[d], s + 1, 1.5),
            rnd(&[d], s + 2, 0.5),
            rnd(&[d], s + 3, 1.5),
            rnd(&[d], s + 4, 0.5),
        ],
        betas,
    }
}

fn pair_on<B: Backend>(b: &B, c: &Case, x: &B::Tensor) -> (B::Tensor, B::Tensor) {
    let p: Vec<B::Tensor> = c.p.iter().map(|h| b.upload(h).unwrap()).collect();
    let beta = |i: usize| c.betas.then_some(&p[i]);
    b.layer_norm_pair(x, [(&p[0], beta(1)), (&p[2], beta(3))], EPS)
        .unwrap()
}

/// The reference: two norms, x and y rounded to f16 first when `round`.
fn reference(c: &Case, round: bool) -> (HostTensor, HostTensor) {
    let r = ReferenceBackend::new();
    let p: Vec<_> = c.p.iter().map(|h| r.upload(h).unwrap()).collect();
    let beta = |i: usize| c.betas.then_some(&p[i]);
    let x = r
        .upload(&if round { round16(&c.x) } else { c.x.clone() })
        .unwrap();
    let y = r.layer_norm(&x, &p[0], beta(1), EPS).unwrap();
    let yh = r.download(&y).unwrap();
    let y_in = if round {
        r.upload(&round16(&yh)).unwrap()
    } else {
        y
    };
    let z = r.layer_norm(&y_in, &p[2], beta(3), EPS).unwrap();
    (yh, r.download(&z).unwrap())
}

fn tol2(backend: &str) -> Tolerance {
    let t = tol_for(Op::LayerNorm, Lane::F32, backend);
    Tolerance {
        max_abs: 2.0 * t.max_abs,
        max_rel: 2.0 * t.max_rel,
        rel_l2: 2.0 * t.rel_l2,
    }
}

#[test]
fn layer_norm_pair_f32_matches_two_reference_norms_in_one_launch() {
    ln_pair_on();
    let (g, _serial) =
        require_gpu!("layer_norm_pair_f32_matches_two_reference_norms_in_one_launch");
    for (i, shape) in SHAPES.iter().enumerate() {
        let c = case(i);
        let what = format!("layer_norm_pair {shape:?}");
        let x = g.upload(&c.x).unwrap();
        let s0 = g.counters().snapshot();
        let (y, z) = pair_on(g, &c, &x);
        let launches = g.counters().snapshot().ops - s0.ops;
        let (wy, wz) = reference(&c, false);
        check_with(
            &format!("{what} y"),
            tol_for(Op::LayerNorm, Lane::F32, "cuda"),
            &g.download(&y).unwrap(),
            &wy,
        );
        check_with(
            &format!("{what} z"),
            tol2("cuda"),
            &g.download(&z).unwrap(),
            &wz,
        );
        assert_eq!(launches, 1, "{what}: {launches} launches, want one kernel");
    }
}

#[test]
fn layer_norm_pair_f16_chain_and_replay() {
    ln_pair_on();
    let (g, _serial) = require_gpu!("layer_norm_pair_f16_chain_and_replay");
    for (i, shape) in SHAPES.iter().enumerate() {
        let c = case(i);
        let what = format!("layer_norm_pair f16 {shape:?}");
        let up = g.upload(&c.x).unwrap();
        g.set_f16_activations(true);
        let key = format!("test-encoder/ln-pair-{i}");
        let run = || -> Vec<HostTensor> {
            let out = g
                .chain(&key, &mut |be| {
                    let x = be.affine(&up, 1.0, 0.0)?;
                    let (y, z) = pair_on(be, &c, &x);
                    Ok(vec![y, z])
                })
                .unwrap();
            out.iter()
                .map(|t| {
                    assert!(t.is_f16(), "chain outputs are f16");
                    g.download(t).unwrap()
                })
                .collect()
        };
        let (first, second) = (run(), run());
        assert_eq!(first, second, "{what}: replay differs from eager");
        let (wy, wz) = reference(&c, true);
        let tol = tol_for(Op::LayerNorm, Lane::F32, "cuda-f16act");
        check_with(&format!("{what} y"), tol, &first[0], &wy);
        // y's f32 values differ from the reference's by float rounding, so a few round to the
        // neighbouring f16 on one side only; such an element moves z by up to |γ₂|·rstd·ulp(y)
        // (≈ 1e-3 of z's range here) on top of z's own rounding
        let tol_z = Tolerance {
            max_rel: 3e-3,
            rel_l2: 1e-3,
            ..tol
        };
        check_with(&format!("{what} z"), tol_z, &first[1], &wz);
    }
}
