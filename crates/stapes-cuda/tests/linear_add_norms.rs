//! `linear_add_norms` (a linear landing on a residual stream and the one or two layer norms
//! after it) on the CUDA home inside an f16 encoder chain, where its split form runs: the GEMM's
//! K slices as one batched GEMM into f32 partial products, then one kernel for their sum, the
//! bias, the residual and the norms. Against `ReferenceBackend` in f32 on the same f16 inputs
//! and weights, against the composed form, and replayed: eager == replay bit for bit. The split
//! form's run counter proves it ran where it should and not where it should not.
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use common::{check_with, rnd, round16, tol_for};
use stapes_core::backend::linear_add_norms_composed;
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::{Op, Tolerance};
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cuda::CudaBackend;

const EPS: f32 = 1e-5;

/// (rows, n, k, norms, bias): parakeet's fc2 before one norm and before the block's closing pair,
/// its output projection (K = d) before a norm, then odd rows and widths (n not a multiple of
/// 256), a narrow row, and more rows than the split form takes (composed there).
const CASES: [(usize, usize, usize, usize, bool); 6] = [
    (140, 1024, 4096, 1, true),
    (140, 1024, 4096, 2, true),
    (140, 1024, 1024, 1, true),
    (37, 520, 2048, 2, false),
    (300, 64, 2048, 1, true),
    (700, 256, 2048, 1, true),
];

/// Rows up to which the backend splits (conformer.rs `SPLIT_LN_MAX_M`).
const SPLIT_MAX_M: usize = 512;

struct Case {
    x: HostTensor,
    w: HostTensor,
    b: HostTensor,
    r: HostTensor,
    norms: Vec<[HostTensor; 2]>,
    bias: bool,
}

fn case(i: usize) -> Case {
    let (m, n, k, nn, bias) = CASES[i];
    let s = 100 * i as u64;
    let mut r = rnd(&[1, m, n], s + 4, 2.0);
    // an offset row mean, as a residual stream has
    r.data.iter_mut().for_each(|v| *v += 0.7);
    Case {
        x: round16(&rnd(&[1, m, k], s + 1, 1.0)),
        w: round16(&rnd(&[n, k], s + 2, 1.0 / (k as f32).sqrt())),
        b: rnd(&[n], s + 3, 0.2),
        r: round16(&r),
        norms: (0..nn)
            .map(|j| {
                let t = s + 10 + 2 * j as u64;
                [rnd(&[n], t, 1.5), rnd(&[n], t + 1, 0.5)]
            })
            .collect(),
        bias,
    }
}

/// The reference: the sum in f32, each stored result rounded to f16 before the next norm reads
/// it (as the chain stores them).
fn reference(c: &Case) -> Vec<HostTensor> {
    let r = ReferenceBackend::new();
    let x = r.upload(&c.x).unwrap();
    let w = r.weight(&c.w, Lane::F32).unwrap();
    let b = r.upload(&c.b).unwrap();
    let res = r.upload(&c.r).unwrap();
    let s = r.linear_add(&x, &w, c.bias.then_some(&b), &res).unwrap();
    let mut out = vec![r.download(&s).unwrap()];
    for [g, be] in &c.norms {
        let prev = r.upload(&round16(out.last().unwrap())).unwrap();
        let (g, be) = (r.upload(g).unwrap(), r.upload(be).unwrap());
        out.push(
            r.download(&r.layer_norm(&prev, &g, Some(&be), EPS).unwrap())
                .unwrap(),
        );
    }
    out
}

/// The case through `linear_add_norms` (or its composed form) in an f16 chain under `key`:
/// eager on the first call, captured on the second, replayed after.
fn run(g: &CudaBackend, c: &Case, key: &str, composed: bool) -> Vec<HostTensor> {
    let (x, r, b) = (
        g.upload(&c.x).unwrap(),
        g.upload(&c.r).unwrap(),
        g.upload(&c.b).unwrap(),
    );
    let w = g.weight(&c.w, Lane::F16).unwrap();
    let p: Vec<_> = c
        .norms
        .iter()
        .map(|[ga, be]| (g.upload(ga).unwrap(), g.upload(be).unwrap()))
        .collect();
    g.set_f16_activations(true);
    let out = g
        .chain(key, &mut |be| {
            let x16 = be.affine(&x, 1.0, 0.0)?;
            let r16 = be.affine(&r, 1.0, 0.0)?;
            let norms: Vec<_> = p.iter().map(|(ga, bb)| (ga, Some(bb))).collect();
            let bias = c.bias.then_some(&b);
            let (s, zs) = if composed {
                linear_add_norms_composed(be, &x16, &w, bias, &r16, &norms, EPS, None)?
            } else {
                be.linear_add_norms(&x16, &w, bias, &r16, &norms, EPS, None)?
            };
            let mut all = vec![s];
            all.extend(zs);
            Ok(all)
        })
        .unwrap();
    out.iter()
        .map(|t| {
            assert!(t.is_f16(), "{key}: chain outputs are f16");
            g.download(t).unwrap()
        })
        .collect()
}

#[test]
fn split_form_matches_the_reference_and_the_composed_form_and_replays() {
    let (g, _serial) =
        require_gpu!("split_form_matches_the_reference_and_the_composed_form_and_replays");
    for slices in [2, 4] {
        g.set_split_ln(slices);
        for (i, shape) in CASES.iter().enumerate() {
            let c = case(i);
            let what = format!("linear_add_norms {shape:?} in {slices} slices");
            let key = format!("test-encoder/lan-{slices}-{i}");
            let before = g.split_ln_runs();
            let first = run(g, &c, &key, false);
            let second = run(g, &c, &key, false);
            let third = run(g, &c, &key, false);
            let split_runs = g.split_ln_runs() - before;
            assert_eq!(
                first, second,
                "{what}: the captured launch differs from eager"
            );
            assert_eq!(first, third, "{what}: a replay differs from eager");
            let splits = shape.0 <= SPLIT_MAX_M && shape.2 >= g.split_ln_min_k();
            // eager once, then the capture; replays run no host code
            assert_eq!(
                split_runs,
                if splits { 2 } else { 0 },
                "{what}: split form runs"
            );
            let want = reference(&c);
            let lin = tol_for(Op::Linear, Lane::F16, "cuda-f16act");
            check_with(&format!("{what} sum"), lin, &first[0], &want[0]);
            // the sum's f16 rounding can fall on the other side of a tie-break from the
            // reference's for a few elements; each such element moves a norm's output by up to
            // |γ|·rstd·ulp, on top of the norm's own rounding (tests/ln_pair.rs's z bar)
            let ln = tol_for(Op::LayerNorm, Lane::F32, "cuda-f16act");
            let tol_z = Tolerance {
                max_rel: 3e-3,
                rel_l2: 1e-3,
                ..ln
            };
            for (j, (got, want)) in first[1..].iter().zip(&want[1..]).enumerate() {
                check_with(&format!("{what} norm {}", j + 1), tol_z, got, want);
            }
            let composed = run(g, &c, &format!("{key}-composed"), true);
            check_with(
                &format!("{what} sum vs composed"),
                lin,
                &first[0],
                &composed[0],
            );
            for (j, (a, b)) in first[1..].iter().zip(&composed[1..]).enumerate() {
                check_with(&format!("{what} norm {} vs composed", j + 1), tol_z, a, b);
            }
        }
    }
    g.set_split_ln(0);
    let c = case(0);
    let before = g.split_ln_runs();
    let off = run(g, &c, "test-encoder/lan-off", false);
    assert_eq!(g.split_ln_runs(), before, "slices 0 composes");
    check_with(
        "linear_add_norms composed (slices 0)",
        tol_for(Op::Linear, Lane::F16, "cuda-f16act"),
        &off[0],
        &reference(&c)[0],
    );
    g.set_split_ln(4);
    // a K bound above the case's K composes too
    let min_k = g.split_ln_min_k();
    g.set_split_ln_min_k(CASES[0].2 + 1);
    let before = g.split_ln_runs();
    run(g, &c, "test-encoder/lan-min-k", false);
    assert_eq!(g.split_ln_runs(), before, "K below the bound composes");
    g.set_split_ln_min_k(min_k);
}
