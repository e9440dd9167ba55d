//! `layer_norm_pair` (two layer norms in a row, both results) on the CUDA home against
//! `ReferenceBackend`'s two `layer_norm` calls: eager with f32 activations (one launch), and inside
//! an encoder chain with f16 activations (eager then replayed: bit-identical; the reference rounds
//! x and y to f16 as the chain stores them). `layer_norm_feeding` and the pair's `next`: the q8
//! linear after them gives the same bits as on a copy of the norm's result (quantized afresh) with
//! one launch fewer. The fused kernels are off by default until they have run on a GPU: each test
//! turns them on (`STAPES_CUDA_LN_PAIR=1`, `STAPES_CUDA_LN_Q8=1`) before its first op.
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use common::{check_with, rnd, round16, tol_for};
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::{Op, Tolerance};
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cuda::{CudaBackend, CudaTensor, Q8Mix};

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
    std::env::set_var("STAPES_CUDA_LN_Q8", "1");
}

struct Case {
    x: HostTensor,
    p: [HostTensor; 4],
    betas: bool,
}

fn case(i: usize) -> Case {
    let (rows, d, betas) = SHAPES[i];
    case_of(rows, d, betas, 10 * i as u64)
}

/// Random rows of `d` with an offset mean and the two norms' gains and biases, from seed `s`.
fn case_of(rows: usize, d: usize, betas: bool, s: u64) -> Case {
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

/// The case's gains and biases on one backend, uploaded before any chain (an upload inside a
/// stream capture is not allowed).
fn params<B: Backend>(b: &B, c: &Case) -> Vec<B::Tensor> {
    c.p.iter().map(|h| b.upload(h).unwrap()).collect()
}

fn pair_on<B: Backend>(b: &B, c: &Case, p: &[B::Tensor], x: &B::Tensor) -> (B::Tensor, B::Tensor) {
    let beta = |i: usize| c.betas.then_some(&p[i]);
    b.layer_norm_pair(x, [(&p[0], beta(1)), (&p[2], beta(3))], EPS, None)
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

/// A pair's f16 results y and z (from an f16 chain) against the reference's norms of x and y
/// rounded to f16.
fn check_pair_f16(what: &str, c: &Case, y: &HostTensor, z: &HostTensor) {
    let (wy, wz) = reference(c, true);
    let tol = tol_for(Op::LayerNorm, Lane::F32, "cuda-f16act");
    check_with(&format!("{what} y"), tol, y, &wy);
    // y's f32 values differ from the reference's by float rounding, so a few round to the
    // neighbouring f16 on one side only; such an element moves z by up to |γ₂|·rstd·ulp(y)
    // (≈ 1e-3 of z's range here) on top of z's own rounding
    let tol_z = Tolerance {
        max_rel: 3e-3,
        rel_l2: 1e-3,
        ..tol
    };
    check_with(&format!("{what} z"), tol_z, z, &wz);
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
        let p = params(g, &c);
        let (y, z) = pair_on(g, &c, &p, &x);
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
        let p = params(g, &c);
        g.set_f16_activations(true);
        let key = format!("test-encoder/ln-pair-{i}");
        let run = || -> Vec<HostTensor> {
            let out = g
                .chain(&key, &mut |be| {
                    let x = be.affine(&up, 1.0, 0.0)?;
                    let (y, z) = pair_on(be, &c, &p, &x);
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
        check_pair_f16(&what, &c, &first[0], &first[1]);
    }
}

/// The q8 linear of `w` over `h` and over a copy of `h` (not prepared: quantized afresh), and the
/// launches of each.
fn linear_twice(
    g: &CudaBackend,
    h: &CudaTensor,
    w: &<CudaBackend as Backend>::Weight,
) -> stapes_core::Result<(CudaTensor, u64, CudaTensor, u64)> {
    let copy = g.affine(h, 1.0, 0.0)?;
    let s0 = g.counters().snapshot().ops;
    let a = g.linear(h, w, None)?;
    let s1 = g.counters().snapshot().ops;
    let b = g.linear(&copy, w, None)?;
    let s2 = g.counters().snapshot().ops;
    Ok((a, s1 - s0, b, s2 - s1))
}

#[test]
fn norms_feeding_a_q8_linear_prepare_its_input_exactly() {
    ln_pair_on();
    let (g, _serial) = require_gpu!("norms_feeding_a_q8_linear_prepare_its_input_exactly");
    // the norm quantizes for a q8 linear on the int8 tensor cores (q8_mix.rs)
    g.set_q8_mix(Q8Mix::Int8);
    // (rows, d, n): one clip's frames × the 0.6b-v2 width; rows off the 16-row padding
    for (rows, d, n) in [(140usize, 1024usize, 256usize), (37, 200, 96)] {
        let host_p = [
            rnd(&[d], 8, 1.5),
            rnd(&[d], 9, 0.5),
            rnd(&[d], 10, 1.5),
            rnd(&[d], 11, 0.5),
        ];
        let x = g.upload(&rnd(&[rows, d], 7, 3.0)).unwrap();
        let p: Vec<_> = host_p.iter().map(|h| g.upload(h).unwrap()).collect();
        let w = g.weight(&rnd(&[n, d], 12, 0.05), Lane::Q8).unwrap();
        for f16 in [false, true] {
            // an encoder chain (run once, eagerly) so the activations take that chain's type
            g.set_f16_activations(f16);
            let what = format!("({rows}, {d}) -> {n}, f16 activations {f16}");
            let mut launches = Vec::new();
            let out = g
                .chain(&format!("test-encoder/ln-q8-{rows}-{f16}"), &mut |be| {
                    let x = be.affine(&x, 1.0, 0.0)?; // in the activation type
                    let y = be.layer_norm_feeding(&x, &p[0], Some(&p[1]), EPS, &w)?;
                    let plain = be.layer_norm(&x, &p[0], Some(&p[1]), EPS)?;
                    let (a, na, b, nb) = linear_twice(be, &y, &w)?;
                    let norms = [(&p[0], Some(&p[1])), (&p[2], Some(&p[3]))];
                    let (_, z) = be.layer_norm_pair(&x, norms, EPS, Some(&w))?;
                    let (a2, na2, b2, nb2) = linear_twice(be, &z, &w)?;
                    launches = vec![na, nb, na2, nb2];
                    Ok(vec![y, plain, a, b, a2, b2])
                })
                .unwrap();
            let h: Vec<HostTensor> = out.iter().map(|t| g.download(t).unwrap()).collect();
            assert_eq!(out[0].is_f16(), f16, "{what}: activation type");
            let backend = if f16 { "cuda-f16act" } else { "cuda" };
            check_with(
                &format!("{what}: layer_norm_feeding vs layer_norm"),
                tol_for(Op::LayerNorm, Lane::F32, backend),
                &h[0],
                &h[1],
            );
            assert_eq!(h[2].shape, vec![rows, n], "{what}");
            assert_eq!(
                h[2], h[3],
                "{what}: feeding: prepared vs fresh quantization"
            );
            assert_eq!(h[4], h[5], "{what}: pair: prepared vs fresh quantization");
            let [na, nb, na2, nb2] = launches[..] else {
                panic!("{what}: the chain did not run")
            };
            assert_eq!(
                na + 1,
                nb,
                "{what}: feeding: the linear skips its quantize launch"
            );
            assert_eq!(
                na2 + 1,
                nb2,
                "{what}: pair: the linear skips its quantize launch"
            );
        }
        g.set_f16_activations(true);
    }
    g.set_q8_mix(Q8Mix::F16);
}

/// The f16 layer norm's two warp-a-row forms (`layer_norm_rows16`, and `_gb` with gamma/beta
/// loaded beside the row, which the home picks where its grid is one wave): 6000 rows take the
/// plain form on any card below 375 SMs, the same rows 500 at a time the `_gb` form. Same
/// arithmetic, so the same bits; both against the reference. Widths: whisper tiny's, the
/// FastConformer's, turbo's (the `_gb` form's widest) and one past it (plain either way).
#[test]
fn layer_norm_f16_forms_agree_bit_for_bit() {
    let (g, _serial) = require_gpu!("layer_norm_f16_forms_agree_bit_for_bit");
    const ROWS: usize = 6000;
    const PART: usize = 500;
    for (i, d) in [384usize, 1024, 1280, 2048].into_iter().enumerate() {
        let s = 100 + 10 * i as u64;
        let mut x = rnd(&[ROWS, d], s, 3.0);
        x.data.iter_mut().for_each(|v| *v += 0.7);
        let (gam, beta) = (rnd(&[d], s + 1, 1.5), rnd(&[d], s + 2, 0.5));
        let (up, gu, bu) = (
            g.upload(&x).unwrap(),
            g.upload(&gam).unwrap(),
            g.upload(&beta).unwrap(),
        );
        g.set_f16_activations(true);
        let out = g
            .chain(&format!("test-encoder/ln-forms-{d}"), &mut |be| {
                let x16 = be.affine(&up, 1.0, 0.0)?;
                let mut outs = vec![be.layer_norm(&x16, &gu, Some(&bu), EPS)?];
                for r0 in (0..ROWS).step_by(PART) {
                    let part = be.slice(&x16, 0, r0, PART)?;
                    outs.push(be.layer_norm(&part, &gu, Some(&bu), EPS)?);
                }
                Ok(outs)
            })
            .unwrap();
        let host: Vec<HostTensor> = out.iter().map(|t| g.download(t).unwrap()).collect();
        let parts: Vec<f32> = host[1..].iter().flat_map(|h| h.data.clone()).collect();
        assert!(
            host[0]
                .data
                .iter()
                .zip(&parts)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "d = {d}: the 6000-row norm and its 500-row parts differ"
        );
        let r = ReferenceBackend::new();
        let want = r
            .layer_norm(
                &r.upload(&round16(&x)).unwrap(),
                &r.upload(&gam).unwrap(),
                Some(&r.upload(&beta).unwrap()),
                EPS,
            )
            .unwrap();
        let tol = tol_for(Op::LayerNorm, Lane::F32, "cuda-f16act");
        check_with(
            &format!("layer_norm f16 ({ROWS}, {d})"),
            tol,
            &host[0],
            &r.download(&want).unwrap(),
        );
    }
}
