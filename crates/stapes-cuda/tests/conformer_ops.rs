//! The FastConformer fused ops on the CUDA home against `ReferenceBackend`'s composed defaults
//! (the specification): `glu_depthwise_act` (GLU + padding mask + depthwise conv + activation)
//! and `rel_attention_inputs` (q+u, q+v, k, v and the repeated position heads from one stacked
//! projection), eager with f32 activations and inside an encoder chain with f16 activations
//! (first run eager, second a graph replay: bit-identical), on awkward shapes; one launch each.
//! Also GigaAM's `rotary_half` (one launch where the default composes seven).
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{check_with, rnd, round16, tol_for};
use stapes_core::backend::{RelAttnInputs, RelAttnParams};
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::{compare, Op, Tolerance};
use stapes_core::{Activation, Backend, Error, HostTensor, Lane};
use stapes_cuda::{CudaBackend, CudaTensor};

/// The fused op has three error sources in a row (GLU's expf, the K-tap sum, the activation's
/// expf), each within its own row of the table; their bars add (the conv's taps are < 1 in
/// magnitude here and SiLU's slope is ≤ 1.1, so no stage amplifies an earlier one).
fn glu_dw_tol(backend: &str) -> Tolerance {
    let rows =
        [Op::Glu, Op::DepthwiseConv1d, Op::Activation].map(|op| tol_for(op, Lane::F16, backend));
    Tolerance {
        max_abs: rows.iter().map(|r| r.max_abs).sum(),
        max_rel: rows.iter().map(|r| r.max_rel).sum(),
        rel_l2: rows.iter().map(|r| r.rel_l2).sum(),
    }
}

/// (B, T, C, K, masked, activation): T of 1 with K 3, even K (one frame shorter output), C off
/// the 64-channel tile, K = 31 (longer than the 16-frame tile), K = 41 (past 32 taps, under the
/// fused limit), K past the fused limit (the composed fallback).
const GDW: [(usize, usize, usize, usize, bool, Activation); 8] = [
    (1, 1, 5, 3, false, Activation::Silu),
    (2, 37, 70, 9, true, Activation::Silu),
    (3, 130, 129, 31, true, Activation::Silu),
    (1, 17, 64, 4, false, Activation::Gelu),
    (2, 5, 33, 1, true, Activation::Relu),
    (1, 140, 1024, 9, false, Activation::Silu),
    (2, 53, 96, 41, true, Activation::Silu),
    (2, 300, 40, 131, true, Activation::Silu),
];

struct GdwCase {
    x: HostTensor,
    keep: Option<HostTensor>,
    w: HostTensor,
    b: HostTensor,
    act: Activation,
}

fn gdw_case(i: usize) -> GdwCase {
    let (bs, t, c, k, masked, act) = GDW[i];
    // sequence j keeps its first t - j·t/(2·bs) frames (the first is always full)
    let keep = masked.then(|| {
        let data = (0..bs)
            .flat_map(|j| {
                let len = t - j * t / (2 * bs);
                (0..t).map(move |f| if f < len { 1.0 } else { 0.0 })
            })
            .collect();
        HostTensor::new(vec![bs, t, 1], data).expect("keep")
    });
    GdwCase {
        x: rnd(&[bs, t, 2 * c], 100 + i as u64, 2.0),
        keep,
        w: rnd(&[c, k], 200 + i as u64, 1.0 / (k as f32).sqrt()),
        b: rnd(&[c], 300 + i as u64, 0.5),
        act,
    }
}

fn gdw_reference(c: &GdwCase, round: bool, mask: bool) -> HostTensor {
    let r = ReferenceBackend::new();
    let x = r
        .upload(&if round { round16(&c.x) } else { c.x.clone() })
        .unwrap();
    let keep = c
        .keep
        .as_ref()
        .filter(|_| mask)
        .map(|k| r.upload(k).unwrap());
    let w = r.upload(&c.w).unwrap();
    let b = r.upload(&c.b).unwrap();
    let y = r
        .glu_depthwise_act(&x, keep.as_ref(), &w, Some(&b), c.act)
        .unwrap();
    r.download(&y).unwrap()
}

#[test]
fn glu_depthwise_act_f32_matches_the_composed_reference_in_one_launch() {
    let (g, _serial) =
        require_gpu!("glu_depthwise_act_f32_matches_the_composed_reference_in_one_launch");
    let tol = glu_dw_tol("cuda");
    for (i, shape) in GDW.iter().enumerate() {
        let c = gdw_case(i);
        let what = format!("glu_depthwise_act {:?}", shape);
        let x = g.upload(&c.x).unwrap();
        let keep = c.keep.as_ref().map(|k| g.upload(k).unwrap());
        let w = g.upload(&c.w).unwrap();
        let b = g.upload(&c.b).unwrap();
        let s0 = g.counters().snapshot();
        let y = g
            .glu_depthwise_act(&x, keep.as_ref(), &w, Some(&b), c.act)
            .unwrap();
        let launches = g.counters().snapshot().ops - s0.ops;
        assert!(!y.is_f16(), "{what}: eager ops write f32");
        let got = g.download(&y).unwrap();
        let want = gdw_reference(&c, false, true);
        check_with(&what, tol, &got, &want);
        if shape.3 <= 128 {
            assert_eq!(launches, 1, "{what}: {launches} launches, want one kernel");
        }
        if c.keep.is_some() {
            // the mask must show: without it the padded sequences' edges differ
            let unmasked = gdw_reference(&c, false, false);
            assert!(
                compare(&got.data, &unmasked.data, &tol).is_err(),
                "{what}: the output equals the unmasked composition"
            );
        }
    }
}

static KEY: AtomicUsize = AtomicUsize::new(0);

/// `f` inside a fresh encoder chain (f16 activations), run twice: eager, then replayed. The
/// inputs enter the chain through an identity `affine` (an f16 copy). Returns both downloads.
fn twice_in_f16_chain(
    g: &CudaBackend,
    inputs: &[&HostTensor],
    f: &dyn Fn(&CudaBackend, &[CudaTensor]) -> Vec<CudaTensor>,
) -> (Vec<HostTensor>, Vec<HostTensor>) {
    let ups: Vec<CudaTensor> = inputs.iter().map(|h| g.upload(h).unwrap()).collect();
    g.set_f16_activations(true);
    let key = format!(
        "test-encoder/conformer-{}",
        KEY.fetch_add(1, Ordering::Relaxed)
    );
    let run = || -> Vec<HostTensor> {
        let out = g
            .chain(&key, &mut |be| {
                let xs: Vec<CudaTensor> = ups
                    .iter()
                    .map(|u| be.affine(u, 1.0, 0.0))
                    .collect::<stapes_core::Result<_>>()?;
                Ok(f(be, &xs))
            })
            .unwrap();
        out.iter()
            .map(|t| {
                assert!(t.is_f16(), "chain outputs are f16");
                g.download(t).unwrap()
            })
            .collect()
    };
    let first = run();
    let second = run();
    (first, second)
}

#[test]
fn glu_depthwise_act_f16_chain_and_replay() {
    let (g, _serial) = require_gpu!("glu_depthwise_act_f16_chain_and_replay");
    // one f16 rounding of the output (the fused op keeps GLU and the conv sum in f32)
    let tol = glu_dw_tol("cuda-f16act");
    for (i, shape) in GDW.iter().enumerate() {
        let c = gdw_case(i);
        let what = format!("glu_depthwise_act f16 {:?}", shape);
        let (w, b) = (g.upload(&c.w).unwrap(), g.upload(&c.b).unwrap());
        let keep = c.keep.as_ref().map(|k| g.upload(k).unwrap());
        let (first, second) = twice_in_f16_chain(g, &[&c.x], &|be, xs| {
            vec![be
                .glu_depthwise_act(&xs[0], keep.as_ref(), &w, Some(&b), c.act)
                .unwrap()]
        });
        assert_eq!(
            first[0].data, second[0].data,
            "{what}: graph replay differs from the eager run"
        );
        check_with(&what, tol, &first[0], &gdw_reference(&c, true, true));
    }
}

/// `glu_dw_act`'s blocks of 16, 32 and 64 output frames (`set_gdw_rows`), and the choice by
/// shape (0), give the same bits:
/// every output is the same sum in the same order, only the blocks' shares differ. Eager f32 and
/// in an f16 chain, on the table's fused shapes and a 16-clip parakeet shape (T 140, C 1024,
/// K 9), where a 64-frame block ends mid-sequence and the last block is partial.
#[test]
fn glu_depthwise_act_block_rows_are_bit_identical() {
    let (g, _serial) = require_gpu!("glu_depthwise_act_block_rows_are_bit_identical");
    let mut cases: Vec<GdwCase> = (0..GDW.len())
        .filter(|&i| GDW[i].3 <= 128)
        .map(gdw_case)
        .collect();
    cases.push(GdwCase {
        x: rnd(&[16, 140, 2048], 950, 2.0),
        keep: None,
        w: rnd(&[1024, 9], 951, 1.0 / 3.0),
        b: rnd(&[1024], 952, 0.5),
        act: Activation::Silu,
    });
    for c in &cases {
        let what = format!("glu_depthwise_act {:?} K {}", c.x.shape, c.w.shape[1]);
        let (w, b) = (g.upload(&c.w).unwrap(), g.upload(&c.b).unwrap());
        let keep = c.keep.as_ref().map(|k| g.upload(k).unwrap());
        let x = g.upload(&c.x).unwrap();
        let eager = |rows: usize| {
            g.set_gdw_rows(rows).unwrap();
            let y = g
                .glu_depthwise_act(&x, keep.as_ref(), &w, Some(&b), c.act)
                .unwrap();
            g.download(&y).unwrap().data
        };
        let chained = |rows: usize| {
            g.set_gdw_rows(rows).unwrap();
            let (first, _) = twice_in_f16_chain(g, &[&c.x], &|be, xs| {
                vec![be
                    .glu_depthwise_act(&xs[0], keep.as_ref(), &w, Some(&b), c.act)
                    .unwrap()]
            });
            first[0].data.clone()
        };
        for (form, run) in [
            ("f32", &eager as &dyn Fn(usize) -> Vec<f32>),
            ("f16", &chained),
        ] {
            let base = run(16);
            for rows in [32, 64, 0] {
                let other = run(rows);
                let first = base
                    .iter()
                    .zip(&other)
                    .position(|(p, q)| p.to_bits() != q.to_bits());
                assert!(
                    first.is_none(),
                    "{what} {form}: value {first:?} differs between 16 and {rows} frames a block"
                );
            }
        }
    }
    assert!(g.set_gdw_rows(48).is_err(), "48 frames a block is refused");
    g.set_gdw_rows(0).unwrap();
}

/// (B, T, H, Dh, P): P = 2T−1 (the encoder's positions) and others; Dh 3 and 128.
const RAI: [(usize, usize, usize, usize, usize); 5] = [
    (1, 7, 2, 3, 13),
    (3, 20, 4, 16, 39),
    (2, 33, 8, 128, 65),
    (1, 140, 8, 128, 279),
    (4, 1, 1, 5, 2),
];

struct RaiCase {
    qkv: HostTensor,
    pos: HostTensor,
    bu: HostTensor,
    bv: HostTensor,
    heads: usize,
}

fn rai_case(i: usize) -> RaiCase {
    let (bs, t, h, dh, p) = RAI[i];
    let c = h * dh;
    RaiCase {
        qkv: rnd(&[bs, t, 3 * c], 400 + i as u64, 1.0),
        pos: rnd(&[1, p, c], 500 + i as u64, 1.0),
        bu: rnd(&[c], 600 + i as u64, 0.5),
        bv: rnd(&[c], 700 + i as u64, 0.5),
        heads: h,
    }
}

fn parts(r: RelAttnInputs<HostTensor>) -> [(&'static str, HostTensor); 5] {
    [
        ("qu", r.qu),
        ("qv", r.qv),
        ("k", r.k),
        ("v", r.v),
        ("p", r.p),
    ]
}

fn rai_reference(c: &RaiCase, round: bool) -> RelAttnInputs<HostTensor> {
    let r = ReferenceBackend::new();
    let rd = |t: &HostTensor| if round { round16(t) } else { t.clone() };
    let y = r
        .rel_attention_inputs(
            &r.upload(&rd(&c.qkv)).unwrap(),
            &r.upload(&rd(&c.pos)).unwrap(),
            c.heads,
            &r.upload(&c.bu).unwrap(),
            &r.upload(&c.bv).unwrap(),
        )
        .unwrap();
    let d = |t| r.download(&t).unwrap();
    RelAttnInputs {
        qu: d(y.qu),
        qv: d(y.qv),
        k: d(y.k),
        v: d(y.v),
        p: d(y.p),
    }
}

#[test]
fn rel_attention_inputs_f32_matches_the_composed_reference_in_one_launch() {
    let (g, _serial) =
        require_gpu!("rel_attention_inputs_f32_matches_the_composed_reference_in_one_launch");
    for (i, shape) in RAI.iter().enumerate() {
        let c = rai_case(i);
        let (qkv, pos) = (g.upload(&c.qkv).unwrap(), g.upload(&c.pos).unwrap());
        let (bu, bv) = (g.upload(&c.bu).unwrap(), g.upload(&c.bv).unwrap());
        let s0 = g.counters().snapshot();
        let y = g
            .rel_attention_inputs(&qkv, &pos, c.heads, &bu, &bv)
            .unwrap();
        let launches = g.counters().snapshot().ops - s0.ops;
        assert_eq!(
            launches, 1,
            "rel_attention_inputs {:?}: {launches} launches",
            shape
        );
        let got = RelAttnInputs {
            qu: g.download(&y.qu).unwrap(),
            qv: g.download(&y.qv).unwrap(),
            k: g.download(&y.k).unwrap(),
            v: g.download(&y.v).unwrap(),
            p: g.download(&y.p).unwrap(),
        };
        for ((name, got), (_, want)) in parts(got).into_iter().zip(parts(rai_reference(&c, false)))
        {
            // k, v, p are copies (exact); qu, qv one f32 add each, as the reference's add
            let tol = if matches!(name, "qu" | "qv") {
                tol_for(Op::Elementwise, Lane::F16, "cuda")
            } else {
                tol_for(Op::Layout, Lane::F16, "cuda")
            };
            check_with(
                &format!("rel_attention_inputs {:?} {name}", shape),
                tol,
                &got,
                &want,
            );
        }
    }
}

#[test]
fn rel_attention_inputs_f16_chain_and_replay() {
    let (g, _serial) = require_gpu!("rel_attention_inputs_f16_chain_and_replay");
    for (i, shape) in RAI.iter().enumerate() {
        let c = rai_case(i);
        let (bu, bv) = (g.upload(&c.bu).unwrap(), g.upload(&c.bv).unwrap());
        let heads = c.heads;
        let (first, second) = twice_in_f16_chain(g, &[&c.qkv, &c.pos], &|be, xs| {
            let y = be
                .rel_attention_inputs(&xs[0], &xs[1], heads, &bu, &bv)
                .unwrap();
            vec![y.qu, y.qv, y.k, y.v, y.p]
        });
        let want = parts(rai_reference(&c, true));
        for (j, (name, want)) in want.iter().enumerate() {
            let what = format!("rel_attention_inputs f16 {:?} {name}", shape);
            assert_eq!(first[j].data, second[j].data, "{what}: replay differs");
            let tol = if j < 2 {
                tol_for(Op::Elementwise, Lane::F16, "cuda-f16act")
            } else {
                tol_for(Op::Layout, Lane::F16, "cuda-f16act")
            };
            check_with(&what, tol, &first[j], want);
        }
    }
}

#[test]
fn fused_conformer_ops_refuse_bad_shapes() {
    let (g, _serial) = require_gpu!("fused_conformer_ops_refuse_bad_shapes");
    let up = |s: &[usize]| g.upload(&HostTensor::zeros(s.to_vec())).unwrap();
    let shape_err = |r: stapes_core::Result<CudaTensor>, op: &str, what: &str| match r {
        Err(Error::Shape { op: o, .. }) => assert_eq!(o, op, "{what}"),
        other => panic!("{what}: expected a shape error, got {other:?}"),
    };
    let w = up(&[8, 3]);
    // odd last dim, C mismatch, output shorter than one frame, keep of the wrong length
    for (x, keep, what) in [
        (up(&[1, 4, 15]), None, "odd 2C"),
        (up(&[1, 4, 14]), None, "2C != 2·8"),
        (
            up(&[1, 4, 16]),
            Some(up(&[1, 5, 1])),
            "keep of 5 frames for 4",
        ),
    ] {
        shape_err(
            g.glu_depthwise_act(&x, keep.as_ref(), &w, None, Activation::Silu),
            "glu_depthwise_act",
            what,
        );
    }
    let long = up(&[8, 8]); // K 8: T 2 + 2·3 < 8
    shape_err(
        g.glu_depthwise_act(&up(&[1, 1, 16]), None, &long, None, Activation::Silu),
        "glu_depthwise_act",
        "T too short",
    );
    let b = up(&[12]);
    for (qkv, pos, what) in [
        (up(&[1, 4, 35]), up(&[1, 7, 12]), "3C not a multiple of 3"),
        (up(&[1, 4, 36]), up(&[2, 7, 12]), "pos batch 2"),
        (up(&[1, 4, 36]), up(&[1, 7, 10]), "pos width"),
        (up(&[4, 36]), up(&[1, 7, 12]), "rank 2"),
    ] {
        match g.rel_attention_inputs(&qkv, &pos, 4, &b, &b) {
            Err(Error::Shape { op, .. }) => assert_eq!(op, "rel_attention_inputs", "{what}"),
            Err(e) => panic!("{what}: expected a shape error, got {e:?}"),
            Ok(_) => panic!("{what}: accepted"),
        }
    }
    match g.rel_attention_inputs(&up(&[1, 4, 36]), &up(&[1, 7, 12]), 5, &b, &b) {
        Err(Error::Shape { .. }) => {}
        Err(e) => panic!("12 channels in 5 heads: expected a shape error, got {e:?}"),
        Ok(_) => panic!("12 channels in 5 heads: accepted"),
    }
}

/// `rel_shift_softmax` (one warp per row) on rows longer than the 256 keys it keeps in
/// registers, and on many rows, against the reference's composition; masked batches.
#[test]
fn rel_shift_softmax_long_rows_match_the_composition() {
    let (g, _serial) = require_gpu!("rel_shift_softmax_long_rows_match_the_composition");
    let r = ReferenceBackend::new();
    // (B, H, C, T, lengths; none = unmasked)
    let cases: [(usize, usize, usize, usize, &[usize]); 4] = [
        (1, 2, 5, 300, &[]),
        (2, 3, 4, 601, &[601, 257]),
        (2, 8, 33, 140, &[140, 77]),
        (1, 1, 1, 256, &[]),
    ];
    for (bs, h, c, t, lens) in cases {
        let ac = rnd(&[bs * h, c, t], 800 + t as u64, 3.0);
        let bd = rnd(&[bs * h, c, t + c - 1], 900 + t as u64, 3.0);
        let keep = (!lens.is_empty()).then(|| {
            let data = lens
                .iter()
                .flat_map(|&n| (0..t).map(move |j| if j < n { 1.0 } else { 0.0 }))
                .collect();
            HostTensor::new(vec![bs, t, 1], data).unwrap()
        });
        let (got, want) = both!(g, &r, |be| {
            let k = keep.as_ref().map(|k| be.upload(k).unwrap());
            let (a, d) = (be.upload(&ac).unwrap(), be.upload(&bd).unwrap());
            let y = be.rel_shift_softmax(&a, &d, k.as_ref(), 0.125).unwrap();
            be.download(&y).unwrap()
        });
        check_with(
            &format!("rel_shift_softmax b{bs} h{h} c{c} t{t} lengths {lens:?}"),
            tol_for(Op::Softmax, Lane::F16, "cuda"),
            &got,
            &want,
        );
    }
}

/// (B, T, H, Dh, lengths; none = unmasked, query block of the composed path): one frame, odd T
/// off the 64-query and 32-key tiles, the 0.6b shape, T past 256 (the composed default's
/// query blocks), head size 64, a masked batch; Dh 16 takes the composed path.
/// (B, T, H, Dh, lengths, query block)
type RaCase = (usize, usize, usize, usize, &'static [usize], usize);
const RA: [RaCase; 7] = [
    (1, 1, 2, 64, &[], 256),
    (1, 37, 2, 128, &[], 256),
    (2, 70, 3, 64, &[70, 41], 16),
    (1, 140, 8, 128, &[], 256),
    (2, 300, 2, 128, &[300, 129], 256),
    (3, 33, 4, 64, &[33, 1, 20], 8),
    (1, 20, 2, 16, &[], 256),
];

fn ra_inputs(
    i: usize,
) -> (
    HostTensor,
    HostTensor,
    HostTensor,
    HostTensor,
    Option<HostTensor>,
) {
    let (bs, t, h, dh, lens, _) = RA[i];
    ra_case_inputs(1000 + i as u64, bs, t, h, dh, lens)
}

/// q|k|v, positions, u and v biases from `seed` (+ 100 · k for the k-th), and the frame mask of
/// `lens` (none where empty).
fn ra_case_inputs(
    seed: u64,
    bs: usize,
    t: usize,
    h: usize,
    dh: usize,
    lens: &[usize],
) -> (
    HostTensor,
    HostTensor,
    HostTensor,
    HostTensor,
    Option<HostTensor>,
) {
    let c = h * dh;
    let keep = (!lens.is_empty()).then(|| {
        let data = lens
            .iter()
            .flat_map(|&n| (0..t).map(move |j| if j < n { 1.0 } else { 0.0 }))
            .collect();
        HostTensor::new(vec![bs, t, 1], data).unwrap()
    });
    (
        rnd(&[bs, t, 3 * c], seed, 1.0),
        rnd(&[1, 2 * t - 1, c], seed + 100, 1.0),
        rnd(&[c], seed + 200, 0.3),
        rnd(&[c], seed + 300, 0.3),
        keep,
    )
}

/// `rel_attention` inside an f16 encoder chain (the fused kernel for heads of 64 and 128)
/// against the reference's composition on the same f16-rounded inputs, eager == replay, one
/// launch; rows past a sequence's length are compared too (their keys are masked, their
/// queries are real).
#[test]
fn rel_attention_f16_chain_matches_the_composition() {
    let (g, _serial) = require_gpu!("rel_attention_f16_chain_matches_the_composition");
    let r = ReferenceBackend::new();
    for (i, &(bs, t, h, dh, lens, qb)) in RA.iter().enumerate() {
        let what = format!("rel_attention b{bs} t{t} h{h} dh{dh} lengths {lens:?}");
        let (qkv, pos, bu, bv, keep) = ra_inputs(i);
        let p = RelAttnParams {
            heads: h,
            scale: 1.0 / (dh as f32).sqrt(),
            query_block: qb,
        };
        let (gbu, gbv) = (g.upload(&bu).unwrap(), g.upload(&bv).unwrap());
        let gkeep = keep.as_ref().map(|k| g.upload(k).unwrap());
        let launches = std::cell::Cell::new(0u64);
        let (first, second) = twice_in_f16_chain(g, &[&qkv, &pos], &|be, xs| {
            let s0 = be.counters().snapshot().ops;
            let y = be
                .rel_attention(&xs[0], &xs[1], &gbu, &gbv, gkeep.as_ref(), &p)
                .unwrap();
            // the eager first run counts; the capture (second run) counts nothing
            launches.set(launches.get().max(be.counters().snapshot().ops - s0));
            vec![y]
        });
        assert_eq!(first[0].data, second[0].data, "{what}: replay differs");
        let want = {
            let k = keep.as_ref().map(|k| r.upload(k).unwrap());
            let y = r
                .rel_attention(
                    &r.upload(&round16(&qkv)).unwrap(),
                    &r.upload(&round16(&pos)).unwrap(),
                    &r.upload(&bu).unwrap(),
                    &r.upload(&bv).unwrap(),
                    k.as_ref(),
                    &p,
                )
                .unwrap();
            r.download(&y).unwrap()
        };
        check_with(
            &what,
            tol_for(Op::Attention, Lane::F16, "cuda-f16act"),
            &first[0],
            &want,
        );
        if dh == 64 || dh == 128 {
            assert_eq!(launches.get(), 1, "{what}: {} launches", launches.get());
        }
    }
}

/// Eager f32 activations: heads of 64/128 run the fused kernel on f16 copies of q|k|v and the
/// positions (the cuda Attention row: f16 operands, f32 accumulation); other head sizes the
/// composed ops, within their rows added up (three f32 cuBLAS products and the softmax).
#[test]
fn rel_attention_f32_matches_the_reference() {
    let (g, _serial) = require_gpu!("rel_attention_f32_matches_the_reference");
    let r = ReferenceBackend::new();
    let (mm, sm) = (
        tol_for(Op::Matmul, Lane::F16, "cuda"),
        tol_for(Op::Softmax, Lane::F16, "cuda"),
    );
    let composed_tol = Tolerance {
        max_abs: 3.0 * mm.max_abs + sm.max_abs,
        max_rel: 3.0 * mm.max_rel + sm.max_rel,
        rel_l2: 3.0 * mm.rel_l2 + sm.rel_l2,
    };
    for (i, &(bs, t, h, dh, lens, qb)) in RA.iter().enumerate() {
        let (qkv, pos, bu, bv, keep) = ra_inputs(i);
        let p = RelAttnParams {
            heads: h,
            scale: 1.0 / (dh as f32).sqrt(),
            query_block: qb,
        };
        let (got, want) = both!(g, &r, |be| {
            let k = keep.as_ref().map(|k| be.upload(k).unwrap());
            let y = be
                .rel_attention(
                    &be.upload(&qkv).unwrap(),
                    &be.upload(&pos).unwrap(),
                    &be.upload(&bu).unwrap(),
                    &be.upload(&bv).unwrap(),
                    k.as_ref(),
                    &p,
                )
                .unwrap();
            be.download(&y).unwrap()
        });
        check_with(
            &format!("rel_attention f32 b{bs} t{t} h{h} dh{dh} lengths {lens:?}"),
            if dh == 64 || dh == 128 {
                tol_for(Op::Attention, Lane::F16, "cuda")
            } else {
                composed_tol
            },
            &got,
            &want,
        );
    }
}

fn same_bits(a: &HostTensor, b: &HostTensor) -> bool {
    a.shape == b.shape
        && a.data
            .iter()
            .zip(&b.data)
            .all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Every launch form of the fused kernel on the same inputs: the plain kernel with 1-9 warps a
/// block (at most 4 for heads of 64) gives the same bits (each warp walks every key in the same
/// order, wherever its tiles and position rows sit in the block's stages and ring), the split-keys form
/// (by shape, and with 1, 3, 8 and 9 warps: warps with two tiles, one, none) and the by-shape choice
/// are within the Attention row of the reference. The cases add 16 clips of the 0.6b shape,
/// where the choice by shape is the plain kernel. Every form also runs with a partial last key
/// tile's dead products skipped (`set_rel_tail`: the plain form's `rel_attn_t_*` entries), and
/// gives the same bits.
#[test]
fn rel_attention_forms_agree() {
    let (g, _serial) = require_gpu!("rel_attention_forms_agree");
    let r = ReferenceBackend::new();
    let cases: Vec<RaCase> = RA
        .iter()
        .copied()
        .chain([
            (16, 140, 8, 128, &[][..], 256),
            (5, 203, 2, 64, &[203, 7, 150, 1, 99][..], 16),
            // masked frames in the staged form (heads of 128, every (b, h) fits)
            (3, 100, 2, 128, &[100, 37, 64][..], 256),
        ])
        .filter(|c| c.3 == 64 || c.3 == 128)
        .collect();
    // launches of the staged form (heads of 128 where the (b, h) fits: 16 parakeet clips' shape)
    let mut staged_runs = 0;
    for (i, &(bs, t, h, dh, lens, qb)) in cases.iter().enumerate() {
        let what = format!("rel_attention b{bs} t{t} h{h} dh{dh} lengths {lens:?}");
        let (qkv, pos, bu, bv, keep) = ra_case_inputs(2000 + 10 * i as u64, bs, t, h, dh, lens);
        let p = RelAttnParams {
            heads: h,
            scale: 1.0 / (dh as f32).sqrt(),
            query_block: qb,
        };
        fn run<B: Backend>(
            be: &B,
            x: &[&HostTensor; 4],
            keep: Option<&HostTensor>,
            p: &RelAttnParams,
        ) -> HostTensor {
            let k = keep.map(|k| be.upload(k).unwrap());
            let up = |i: usize| be.upload(x[i]).unwrap();
            let y = be
                .rel_attention(&up(0), &up(1), &up(2), &up(3), k.as_ref(), p)
                .unwrap();
            be.download(&y).unwrap()
        }
        let xs = [&qkv, &pos, &bu, &bv];
        let want = run(&r, &xs, keep.as_ref(), &p);
        let tol = tol_for(Op::Attention, Lane::F16, "cuda");
        let mut plain: Option<HostTensor> = None;
        let forms = [1, 2, 3, 4, 5, 9]
            .map(|w| (Some(w), None))
            .into_iter()
            .chain([None, Some(1), Some(3), Some(8), Some(9)].map(|ks| (Some(0), ks)))
            .chain([(None, None)]);
        for (form, ks) in forms {
            g.force_rel_attn_form(form).unwrap();
            g.force_rel_ks_warps(ks).unwrap();
            let before = g.set_rel_tail(false);
            let got = run(g, &xs, keep.as_ref(), &p);
            g.set_rel_tail(true);
            let staged_before = g.set_rel_staged(false);
            let tailed = run(g, &xs, keep.as_ref(), &p);
            g.set_rel_staged(true);
            let runs = g.rel_staged_runs();
            let staged = run(g, &xs, keep.as_ref(), &p);
            staged_runs += g.rel_staged_runs() - runs;
            g.set_rel_staged(staged_before);
            g.set_rel_tail(before);
            assert!(
                same_bits(&got, &tailed),
                "{what} form {form:?} split warps {ks:?}: skipping the last tile's dead products changes bits"
            );
            assert!(
                same_bits(&tailed, &staged),
                "{what} form {form:?} split warps {ks:?}: the staged form's bits differ from the ring's"
            );
            check_with(
                &format!("{what} form {form:?} split warps {ks:?}"),
                tol,
                &got,
                &want,
            );
            if let Some(w @ 1..=9) = form {
                match &plain {
                    None => plain = Some(got),
                    Some(first) => assert!(
                        same_bits(first, &got),
                        "{what}: {w} warps a block differ from 1"
                    ),
                }
            }
        }
    }
    g.force_rel_attn_form(None).unwrap();
    g.force_rel_ks_warps(None).unwrap();
    assert!(
        staged_runs > 0,
        "the staged rel-attention never ran (16 clips of 140 frames fit it)"
    );
    assert!(g.force_rel_attn_form(Some(10)).is_err());
    assert!(g.force_rel_ks_warps(Some(0)).is_err());
    assert!(g.force_rel_ks_warps(Some(10)).is_err());
}

/// (B, T, H, Dh): a head of 2, odd frames, GigaAM v3's published shape (16 heads of 48 over an
/// 11 s clip's 275 frames), a count off every multiple of 4.
const ROT: [(usize, usize, usize, usize); 6] = [
    (1, 1, 1, 2),
    (2, 7, 3, 4),
    (1, 33, 4, 48),
    (3, 5, 2, 16),
    (1, 275, 16, 48),
    (2, 3, 1, 6),
];

/// Three f32 roundings in the composition (two products, one sum) where the kernel may fuse them:
/// the element-wise row once per rounding.
fn rotary_tol(backend: &str) -> Tolerance {
    let r = tol_for(Op::Elementwise, Lane::F32, backend);
    let f32_row = tol_for(Op::Elementwise, Lane::F32, "cuda");
    Tolerance {
        max_abs: r.max_abs + 2.0 * f32_row.max_abs,
        max_rel: r.max_rel + 2.0 * f32_row.max_rel,
        rel_l2: r.rel_l2 + 2.0 * f32_row.rel_l2,
    }
}

fn rot_case(i: usize) -> (HostTensor, HostTensor, HostTensor) {
    let (bs, t, h, dh) = ROT[i];
    let c = h * dh;
    (
        rnd(&[bs, t, c], 1300 + i as u64, 2.0),
        rnd(&[t, c], 1350 + i as u64, 1.0),
        rnd(&[t, c], 1370 + i as u64, 1.0),
    )
}

fn rot_reference(x: &HostTensor, cos: &HostTensor, sin: &HostTensor, dh: usize) -> HostTensor {
    let r = ReferenceBackend::new();
    let up = |v: &HostTensor| r.upload(v).unwrap();
    let y = r.rotary_half(&up(x), &up(cos), &up(sin), dh).unwrap();
    r.download(&y).unwrap()
}

#[test]
fn rotary_half_matches_the_reference_in_one_launch() {
    let (g, _serial) = require_gpu!("rotary_half_matches_the_reference_in_one_launch");
    for (i, shape) in ROT.iter().enumerate() {
        let dh = shape.3;
        let (x, cos, sin) = rot_case(i);
        let what = format!("rotary_half {shape:?}");
        let (xd, cd, sd) = (
            g.upload(&x).unwrap(),
            g.upload(&cos).unwrap(),
            g.upload(&sin).unwrap(),
        );
        let s0 = g.counters().snapshot();
        let y = g.rotary_half(&xd, &cd, &sd, dh).unwrap();
        let launches = g.counters().snapshot().ops - s0.ops;
        assert_eq!(launches, 1, "{what}: {launches} launches, want one kernel");
        let got = g.download(&y).unwrap();
        check_with(
            &what,
            rotary_tol("cuda"),
            &got,
            &rot_reference(&x, &cos, &sin, dh),
        );
        // in an encoder chain with f16 activations, eager then replayed
        let (first, second) = twice_in_f16_chain(g, &[&x], &|be, xs| {
            vec![be.rotary_half(&xs[0], &cd, &sd, dh).unwrap()]
        });
        assert_eq!(
            first[0].data, second[0].data,
            "{what}: graph replay differs from the eager run"
        );
        let want16 = rot_reference(&round16(&x), &cos, &sin, dh);
        check_with(
            &format!("{what} f16"),
            rotary_tol("cuda-f16act"),
            &first[0],
            &want16,
        );
    }
    let x = g.upload(&rnd(&[1, 2, 6], 1, 1.0)).unwrap();
    let cs = g.upload(&rnd(&[2, 6], 2, 1.0)).unwrap();
    let short = g.upload(&rnd(&[1, 6], 3, 1.0)).unwrap();
    for (what, r) in [
        ("heads of 4 in 6", g.rotary_half(&x, &cs, &cs, 4)),
        ("odd head size", g.rotary_half(&x, &cs, &cs, 3)),
        ("cos of another length", g.rotary_half(&x, &short, &cs, 2)),
    ] {
        match r {
            Err(Error::Shape { op, .. }) => assert_eq!(op, "rotary_half", "{what}"),
            other => panic!("{what}: expected a shape error, got {other:?}"),
        }
    }
}
