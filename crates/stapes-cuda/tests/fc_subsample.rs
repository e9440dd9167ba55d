//! The FastConformer subsampling ops on the CUDA home against `ReferenceBackend`'s composed
//! defaults (the specification): `subsample_stem` (mask, conv, ReLU, mask, depthwise conv,
//! channel-last) and `depthwise_conv2d_cl` (ReLU and mask on the input, depthwise conv), eager
//! with f32 activations (one launch each) and inside an encoder chain with f16 activations (first
//! run eager, second a graph replay: bit-identical); the masks must show. Shapes: the
//! parakeet-tdt-0.6b-v2 stem on 1120 frames, a padded batch of five, odd lengths, channels off
//! the 128-channel group. The stem runs in the chain twice: on an f16 copy of its input and on
//! the f32 input itself (as a model's features reach it). In the f16 chain the depthwise cases
//! with C % 8 == 0 (256, 40) take the 16-byte kernel `fc_dw_cl_h8`, the others (300, 33) and
//! every f32 case `fc_dw_cl`. Each test pins the fused kernels on (`STAPES_CUDA_FC_SUB=1`, read
//! once per process) before its first op, whatever the environment says.
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{check_with, rnd, round16, tol_for};
use stapes_core::backend::StridingParams;
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::{compare, Tolerance};
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cuda::{CudaBackend, CudaTensor};

const P: StridingParams = StridingParams {
    kernel: 3,
    stride: 2,
    padding: 1,
};

/// (B, T, F, C): the 0.6b-v2 stem (1120 frames × 128 mels, 256 channels), a padded batch, odd T
/// and F, C off the channel group, a single frame.
const STEM: [(usize, usize, usize, usize); 5] = [
    (1, 1120, 128, 256),
    (5, 203, 128, 256),
    (3, 37, 21, 40),
    (2, 9, 80, 33),
    (1, 1, 5, 8),
];

fn fused_on() {
    std::env::set_var("STAPES_CUDA_FC_SUB", "1");
}

/// Sequence j of a batch of `bs` keeps its first `t − j·t/(2·bs)` frames (the first is full).
fn lengths(bs: usize, t: usize) -> Vec<usize> {
    (0..bs).map(|j| (t - j * t / (2 * bs)).max(1)).collect()
}

fn keep(lens: &[usize], t: usize) -> HostTensor {
    let data = lens
        .iter()
        .flat_map(|&l| (0..t).map(move |f| if f < l { 1.0 } else { 0.0 }))
        .collect();
    HostTensor::new(vec![lens.len(), t, 1], data).expect("keep")
}

/// The two convs' error rows added (the stem's conv0 sum, then the depthwise sum over it).
fn tol2(backend: &str) -> Tolerance {
    let r = tol_for(stapes_core::tolerance::Op::Conv2d, Lane::F32, backend);
    Tolerance {
        max_abs: 2.0 * r.max_abs,
        max_rel: 2.0 * r.max_rel,
        rel_l2: 2.0 * r.rel_l2,
    }
}

struct StemCase {
    x: HostTensor,
    keep0: HostTensor,
    keep1: HostTensor,
    w0: HostTensor,
    b0: HostTensor,
    w1: HostTensor,
    b1: HostTensor,
}

fn stem_case(i: usize) -> StemCase {
    stem_case_of(STEM[i], i as u64)
}

/// A stem case of shape (B, T, F, C), its random values from seeds offset by `s`.
fn stem_case_of((bs, t, f, c): (usize, usize, usize, usize), s: u64) -> StemCase {
    let lens = lengths(bs, t);
    let t1 = P.out_len(t);
    let lens1: Vec<usize> = lens.iter().map(|&l| P.out_len(l)).collect();
    StemCase {
        x: rnd(&[bs, t, f], 10 + s, 2.0),
        keep0: keep(&lens, t),
        keep1: keep(&lens1, t1),
        w0: rnd(&[c, 1, 3, 3], 20 + s, 0.4),
        b0: rnd(&[c], 30 + s, 0.2),
        w1: rnd(&[c, 1, 3, 3], 40 + s, 0.4),
        b1: rnd(&[c], 50 + s, 0.2),
    }
}

/// A case's parameters on one backend, uploaded before any chain (an upload inside a stream
/// capture is not allowed).
fn stem_params<B: Backend>(b: &B, c: &StemCase) -> [B::Tensor; 6] {
    [&c.keep0, &c.keep1, &c.w0, &c.b0, &c.w1, &c.b1].map(|h| b.upload(h).unwrap())
}

fn stem_with<B: Backend>(b: &B, p: &[B::Tensor; 6], x: &B::Tensor, masked: bool) -> B::Tensor {
    let [k0, k1, w0, b0, w1, b1] = p;
    let (k0, k1) = if masked {
        (Some(k0), Some(k1))
    } else {
        (None, None)
    };
    b.subsample_stem(x, k0, w0, b0, k1, w1, b1, &P).unwrap()
}

fn stem_on<B: Backend>(b: &B, c: &StemCase, x: &B::Tensor, masked: bool) -> B::Tensor {
    stem_with(b, &stem_params(b, c), x, masked)
}

fn stem_reference(c: &StemCase, round: bool, masked: bool) -> HostTensor {
    let r = ReferenceBackend::new();
    let x = r
        .upload(&if round { round16(&c.x) } else { c.x.clone() })
        .unwrap();
    let y = stem_on(&r, c, &x, masked);
    r.download(&y).unwrap()
}

#[test]
fn subsample_stem_f32_matches_the_composed_reference_in_one_launch() {
    fused_on();
    let (g, _serial) =
        require_gpu!("subsample_stem_f32_matches_the_composed_reference_in_one_launch");
    for (i, shape) in STEM.iter().enumerate() {
        let c = stem_case(i);
        let what = format!("subsample_stem {shape:?}");
        let x = g.upload(&c.x).unwrap();
        let s0 = g.counters().snapshot();
        let y = stem_on(g, &c, &x, true);
        let launches = g.counters().snapshot().ops - s0.ops;
        let got = g.download(&y).unwrap();
        let want = stem_reference(&c, false, true);
        assert_eq!(got.shape, want.shape, "{what}");
        check_with(&what, tol2("cuda"), &got, &want);
        assert_eq!(launches, 1, "{what}: {launches} launches, want one kernel");
        if shape.0 > 1 {
            let unmasked = stem_reference(&c, false, false);
            assert!(
                compare(&got.data, &unmasked.data, &tol2("cuda")).is_err(),
                "{what}: the output equals the unmasked composition"
            );
        }
    }
}

/// `fc_sub_stem` with 2 and 4 output frames a block (`set_stem_frames`) gives the bits of 1 frame
/// a block, eager with f32 activations and in an f16 chain with the features in f32: every conv0
/// value and output is the same sum in the same order. Besides the table's shapes, two clips of
/// 1097 frames: 275 output frames, a last block of 3 frames at 4 a block and 1 at 2.
#[test]
fn subsample_stem_frames_a_block_are_bit_identical() {
    fused_on();
    let (g, _serial) = require_gpu!("subsample_stem_frames_a_block_are_bit_identical");
    let shapes: Vec<_> = STEM.iter().copied().chain([(2, 1097, 128, 256)]).collect();
    for (i, &shape) in shapes.iter().enumerate() {
        let c = stem_case_of(shape, 60 + i as u64);
        let p = stem_params(g, &c);
        let x = g.upload(&c.x).unwrap();
        let run = |frames: usize| {
            g.set_stem_frames(frames).unwrap();
            let eager = g.download(&stem_with(g, &p, &x, true)).unwrap();
            let (chain, replay) =
                twice_in_chain(g, &c.x, false, &|be, x| stem_with(be, &p, x, true));
            g.set_f16_activations(false);
            assert_eq!(chain.data, replay.data, "{shape:?} {frames} frames: replay");
            (eager, chain)
        };
        let (eager1, chain1) = run(1);
        check_with(
            &format!("subsample_stem {shape:?} 1 frame a block"),
            tol2("cuda"),
            &eager1,
            &stem_reference(&c, false, true),
        );
        for frames in [2, 4] {
            let (eager, chain) = run(frames);
            for (form, got, want) in [
                ("f32 eager", &eager, &eager1),
                ("f16 chain", &chain, &chain1),
            ] {
                assert_eq!(got.shape, want.shape, "{shape:?} {form}, {frames} frames");
                let bits = |t: &HostTensor| t.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert!(
                    bits(got) == bits(want),
                    "{shape:?} {form}: {frames} frames a block differ from 1"
                );
            }
        }
    }
    g.set_stem_frames(0).unwrap();
    assert!(
        g.set_stem_frames(3).is_err(),
        "3 frames a block is not a form"
    );
}

/// (B, T, F, C, relu_input): the 0.6b-v2 second stage (280 × 32 × 256), odd sizes.
const DW: [(usize, usize, usize, usize, bool); 4] = [
    (1, 280, 32, 256, true),
    (4, 37, 16, 300, true),
    (3, 19, 11, 40, true),
    (2, 6, 7, 33, false),
];

struct DwCase {
    x: HostTensor,
    keep: HostTensor,
    w: HostTensor,
    b: HostTensor,
    relu: bool,
}

fn dw_case(i: usize) -> DwCase {
    let (bs, t, f, c, relu) = DW[i];
    let s = i as u64;
    DwCase {
        x: rnd(&[bs, t, f, c], 60 + s, 2.0),
        keep: keep(&lengths(bs, t), t),
        w: rnd(&[c, 1, 3, 3], 70 + s, 0.4),
        b: rnd(&[c], 80 + s, 0.2),
        relu,
    }
}

fn dw_params<B: Backend>(b: &B, c: &DwCase) -> [B::Tensor; 3] {
    [&c.keep, &c.w, &c.b].map(|h| b.upload(h).unwrap())
}

fn dw_with<B: Backend>(
    b: &B,
    c: &DwCase,
    p: &[B::Tensor; 3],
    x: &B::Tensor,
    masked: bool,
) -> B::Tensor {
    let [k, w, bias] = p;
    b.depthwise_conv2d_cl(x, masked.then_some(k), c.relu, w, bias, &P)
        .unwrap()
}

fn dw_on<B: Backend>(b: &B, c: &DwCase, x: &B::Tensor, masked: bool) -> B::Tensor {
    dw_with(b, c, &dw_params(b, c), x, masked)
}

fn dw_reference(c: &DwCase, round: bool, masked: bool) -> HostTensor {
    let r = ReferenceBackend::new();
    let x = r
        .upload(&if round { round16(&c.x) } else { c.x.clone() })
        .unwrap();
    let y = dw_on(&r, c, &x, masked);
    r.download(&y).unwrap()
}

#[test]
fn depthwise_conv2d_cl_f32_matches_the_composed_reference_in_one_launch() {
    fused_on();
    let (g, _serial) =
        require_gpu!("depthwise_conv2d_cl_f32_matches_the_composed_reference_in_one_launch");
    let tol = tol_for(stapes_core::tolerance::Op::Conv2d, Lane::F32, "cuda");
    for (i, shape) in DW.iter().enumerate() {
        let c = dw_case(i);
        let what = format!("depthwise_conv2d_cl {shape:?}");
        let x = g.upload(&c.x).unwrap();
        let s0 = g.counters().snapshot();
        let y = dw_on(g, &c, &x, true);
        let launches = g.counters().snapshot().ops - s0.ops;
        let got = g.download(&y).unwrap();
        let want = dw_reference(&c, false, true);
        assert_eq!(got.shape, want.shape, "{what}");
        check_with(&what, tol, &got, &want);
        assert_eq!(launches, 1, "{what}: {launches} launches, want one kernel");
        if shape.0 > 1 {
            let unmasked = dw_reference(&c, false, false);
            assert!(
                compare(&got.data, &unmasked.data, &tol).is_err(),
                "{what}: the output equals the unmasked composition"
            );
        }
    }
}

static KEY: AtomicUsize = AtomicUsize::new(0);

/// `f` inside a fresh encoder chain (f16 activations), run twice: eager, then replayed. The
/// input enters the chain through an identity `affine` (an f16 copy). Returns both downloads.
fn twice_in_f16_chain(
    g: &CudaBackend,
    input: &HostTensor,
    f: &dyn Fn(&CudaBackend, &CudaTensor) -> CudaTensor,
) -> (HostTensor, HostTensor) {
    twice_in_chain(g, input, true, f)
}

/// [`twice_in_f16_chain`], the input as an f16 copy (`f16_input`) or the uploaded f32 tensor
/// itself (a model's features reach its stem in f32).
fn twice_in_chain(
    g: &CudaBackend,
    input: &HostTensor,
    f16_input: bool,
    f: &dyn Fn(&CudaBackend, &CudaTensor) -> CudaTensor,
) -> (HostTensor, HostTensor) {
    let up = g.upload(input).unwrap();
    g.set_f16_activations(true);
    let key = format!(
        "test-encoder/fc-sub-{}",
        KEY.fetch_add(1, Ordering::Relaxed)
    );
    let run = || -> HostTensor {
        let out = g
            .chain(&key, &mut |be| {
                if !f16_input {
                    return Ok(vec![f(be, &up)]);
                }
                let x = be.affine(&up, 1.0, 0.0)?;
                Ok(vec![f(be, &x)])
            })
            .unwrap();
        assert!(out[0].is_f16(), "chain outputs are f16");
        g.download(&out[0]).unwrap()
    };
    let first = run();
    let second = run();
    (first, second)
}

/// The f32 bars plus one f16 rounding of the output.
fn with_f16_output(t: Tolerance) -> Tolerance {
    Tolerance {
        max_abs: t.max_abs + 1e-2,
        max_rel: t.max_rel + 1e-3,
        rel_l2: t.rel_l2 + 1e-3,
    }
}

#[test]
fn subsampling_ops_f16_chain_and_replay() {
    fused_on();
    let (g, _serial) = require_gpu!("subsampling_ops_f16_chain_and_replay");
    for (i, shape) in STEM.iter().enumerate() {
        let c = stem_case(i);
        let what = format!("subsample_stem f16 {shape:?}");
        let p = stem_params(g, &c);
        let (first, second) = twice_in_f16_chain(g, &c.x, &|be, x| stem_with(be, &p, x, true));
        assert_eq!(first.data, second.data, "{what}: replay differs from eager");
        check_with(
            &what,
            with_f16_output(tol2("cuda")),
            &first,
            &stem_reference(&c, true, true),
        );
        // the features of a model reach the stem in f32: the f32 bars plus the output's f16
        // rounding, against the unrounded input
        let what = format!("subsample_stem f32 in, f16 out {shape:?}");
        let (first, second) = twice_in_chain(g, &c.x, false, &|be, x| stem_with(be, &p, x, true));
        assert_eq!(first.data, second.data, "{what}: replay differs from eager");
        check_with(
            &what,
            with_f16_output(tol2("cuda")),
            &first,
            &stem_reference(&c, false, true),
        );
    }
    let tol = tol_for(stapes_core::tolerance::Op::Conv2d, Lane::F32, "cuda");
    for (i, shape) in DW.iter().enumerate() {
        let c = dw_case(i);
        let what = format!("depthwise_conv2d_cl f16 {shape:?}");
        let p = dw_params(g, &c);
        let (first, second) = twice_in_f16_chain(g, &c.x, &|be, x| dw_with(be, &c, &p, x, true));
        assert_eq!(first.data, second.data, "{what}: replay differs from eager");
        check_with(
            &what,
            with_f16_output(tol),
            &first,
            &dw_reference(&c, true, true),
        );
    }
}

#[test]
fn subsampling_ops_reject_bad_shapes() {
    fused_on();
    let (g, _serial) = require_gpu!("subsampling_ops_reject_bad_shapes");
    let up = |s: &[usize]| g.upload(&rnd(s, 1, 1.0)).unwrap();
    let (w, b) = (up(&[8, 1, 3, 3]), up(&[8]));
    // stem: x not (B, T, F); weights of different widths; masks of the wrong length
    assert!(g
        .subsample_stem(&up(&[2, 5]), None, &w, &b, None, &w, &b, &P)
        .is_err());
    let (w9, b9) = (up(&[9, 1, 3, 3]), up(&[9]));
    assert!(g
        .subsample_stem(&up(&[1, 9, 9]), None, &w, &b, None, &w9, &b9, &P)
        .is_err());
    let bad_keep = g.upload(&keep(&[3], 4)).unwrap();
    assert!(g
        .subsample_stem(&up(&[1, 9, 9]), Some(&bad_keep), &w, &b, None, &w, &b, &P)
        .is_err());
    // depthwise: channels of x ≠ C; kernel shape ≠ p's
    assert!(g
        .depthwise_conv2d_cl(&up(&[1, 4, 4, 7]), None, true, &w, &b, &P)
        .is_err());
    assert!(g
        .depthwise_conv2d_cl(&up(&[1, 4, 4, 8]), None, true, &up(&[8, 1, 5, 5]), &b, &P)
        .is_err());
}
