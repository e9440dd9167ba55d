//! f16 activations inside chains: every op reading f16 inputs and writing f16 against
//! `ReferenceBackend` on the same inputs rounded to f16, under the table's `cuda-f16act` rows;
//! chains with f16 activations off are bit-identical to eager f32 ops.
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{check_with, rnd, round16, tol_for};
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::Op;
use stapes_core::{Activation, AttnParams, Backend, Conv1dParams, Conv2dParams, HostTensor, Lane};
use stapes_cuda::{CudaBackend, CudaTensor};

/// Runs `f` inside a fresh chain with f16 activations on: inputs are uploaded (f32) and turned
/// f16 by an identity `affine` first. Returns the downloaded output and whether it was f16.
fn in_f16_chain(
    g: &CudaBackend,
    inputs: &[&HostTensor],
    f: &dyn Fn(&CudaBackend, &[CudaTensor]) -> CudaTensor,
) -> (HostTensor, bool) {
    static N: AtomicUsize = AtomicUsize::new(0);
    let ups: Vec<CudaTensor> = inputs.iter().map(|h| g.upload(h).unwrap()).collect();
    g.set_f16_activations(true);
    // a fresh key: the chain runs eagerly (its warm-up call), so host transfers are allowed
    let key = format!("test-encoder/f16act-{}", N.fetch_add(1, Ordering::Relaxed));
    let out = g
        .chain(&key, &mut |b| {
            let xs: Vec<CudaTensor> = ups
                .iter()
                .map(|t| b.affine(t, 1.0, 0.0))
                .collect::<stapes_core::Result<_>>()?;
            assert!(xs.iter().all(|x| x.is_f16()), "affine in an f16 chain");
            Ok(vec![f(b, &xs)])
        })
        .unwrap();
    (g.download(&out[0]).unwrap(), out[0].is_f16())
}

type RefT = <ReferenceBackend as Backend>::Tensor;

/// The reference on the f16-rounded inputs.
fn on_ref(
    r: &ReferenceBackend,
    inputs: &[&HostTensor],
    f: &dyn Fn(&ReferenceBackend, &[RefT]) -> RefT,
) -> HostTensor {
    let xs: Vec<RefT> = inputs
        .iter()
        .map(|h| r.upload(&round16(h)).unwrap())
        .collect();
    r.download(&f(r, &xs)).unwrap()
}

/// Same body on both sides: `$be` is the backend, `$x` the slice of input tensors.
macro_rules! f16_case {
    ($g:expr, $r:expr, $what:expr, $op:expr, $lane:expr, $inputs:expr, |$be:ident, $x:ident| $body:expr) => {{
        let inputs: Vec<&HostTensor> = $inputs;
        let (got, is16) = in_f16_chain($g, &inputs, &|$be, $x| $body);
        let want = on_ref($r, &inputs, &|$be, $x| $body);
        check_with($what, tol_for($op, $lane, "cuda-f16act"), &got, &want);
        is16
    }};
}

#[test]
fn every_op_in_an_f16_chain() {
    let (g, _serial) = require_gpu!("every_op_in_an_f16_chain");
    let r = ReferenceBackend::new();
    let x = rnd(&[2, 37, 96], 1, 4.0);
    let y = rnd(&[2, 37, 96], 2, 4.0);
    let row = rnd(&[96], 3, 1.0);
    let gam = rnd(&[96], 4, 1.0);
    let f = Lane::F16;

    assert!(f16_case!(
        g,
        &r,
        "add",
        Op::Elementwise,
        f,
        vec![&x, &y],
        |be, t| be.add(&t[0], &t[1]).unwrap()
    ));
    assert!(f16_case!(
        g,
        &r,
        "mul broadcast",
        Op::Elementwise,
        f,
        vec![&x, &row],
        |be, t| be.mul(&t[0], &t[1]).unwrap()
    ));
    assert!(f16_case!(
        g,
        &r,
        "affine",
        Op::Elementwise,
        f,
        vec![&x],
        |be, t| be.affine(&t[0], 0.5, -1.0).unwrap()
    ));
    for act in [
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::Relu,
        Activation::Sigmoid,
        Activation::Tanh,
    ] {
        assert!(f16_case!(
            g,
            &r,
            &format!("{act:?}"),
            Op::Activation,
            f,
            vec![&x],
            |be, t| be.activation(&t[0], act).unwrap()
        ));
    }
    assert!(f16_case!(g, &r, "glu", Op::Glu, f, vec![&x], |be, t| be
        .glu(&t[0])
        .unwrap()));
    assert!(f16_case!(
        g,
        &r,
        "softmax",
        Op::Softmax,
        f,
        vec![&x],
        |be, t| be.softmax(&t[0]).unwrap()
    ));
    assert!(f16_case!(
        g,
        &r,
        "log_softmax",
        Op::LogSoftmax,
        f,
        vec![&x],
        |be, t| be.log_softmax(&t[0]).unwrap()
    ));
    // both layer-norm kernels: the warp-per-row one (C % 4 == 0) and the block one (C = 1031);
    // gamma and beta arrive f16 here and are widened for the kernel
    assert!(f16_case!(
        g,
        &r,
        "layer_norm rows",
        Op::LayerNorm,
        f,
        vec![&x, &gam, &row],
        |be, t| be.layer_norm(&t[0], &t[1], Some(&t[2]), 1e-5).unwrap()
    ));
    // the 16-byte form at turbo's width (C % 8 == 0, f16 in and out), and C % 8 == 4 (the
    // 8-byte form) without beta
    let wide = rnd(&[3, 5, 1280], 7, 4.0);
    let (gam_w, beta_w) = (rnd(&[1280], 8, 1.0), rnd(&[1280], 9, 1.0));
    assert!(f16_case!(
        g,
        &r,
        "layer_norm rows, 16-byte form",
        Op::LayerNorm,
        f,
        vec![&wide, &gam_w, &beta_w],
        |be, t| be.layer_norm(&t[0], &t[1], Some(&t[2]), 1e-5).unwrap()
    ));
    let x100 = rnd(&[4, 100], 10, 4.0);
    let gam100 = rnd(&[100], 11, 1.0);
    assert!(f16_case!(
        g,
        &r,
        "layer_norm rows, C % 8 == 4",
        Op::LayerNorm,
        f,
        vec![&x100, &gam100],
        |be, t| be.layer_norm(&t[0], &t[1], None, 1e-5).unwrap()
    ));
    let odd = rnd(&[3, 1031], 5, 4.0);
    let gam_odd = rnd(&[1031], 6, 1.0);
    assert!(f16_case!(
        g,
        &r,
        "layer_norm block",
        Op::LayerNorm,
        f,
        vec![&odd, &gam_odd],
        |be, t| be.layer_norm(&t[0], &t[1], None, 1e-5).unwrap()
    ));
    assert!(f16_case!(
        g,
        &r,
        "rms_norm",
        Op::RmsNorm,
        f,
        vec![&x, &gam],
        |be, t| be.rms_norm(&t[0], &t[1], 1e-6).unwrap()
    ));
    // layout: exact copies of f16 data
    assert!(f16_case!(
        g,
        &r,
        "transpose",
        Op::Layout,
        f,
        vec![&x],
        |be, t| be.transpose_last2(&t[0]).unwrap()
    ));
    assert!(f16_case!(
        g,
        &r,
        "slice odd",
        Op::Layout,
        f,
        vec![&x],
        |be, t| be.slice(&t[0], 2, 3, 41).unwrap()
    ));
    assert!(f16_case!(
        g,
        &r,
        "concat",
        Op::Layout,
        f,
        vec![&x, &y],
        |be, t| be.concat(&[&t[0], &t[1]], 1).unwrap()
    ));
    assert!(f16_case!(
        g,
        &r,
        "split_heads",
        Op::Layout,
        f,
        vec![&x],
        |be, t| be.split_heads(&t[0], 4, None).unwrap()
    ));
    assert!(f16_case!(
        g,
        &r,
        "merge_heads",
        Op::Layout,
        f,
        vec![&x],
        |be, t| {
            let s = be.split_heads(&t[0], 4, None).unwrap();
            be.merge_heads(&s, 2).unwrap()
        }
    ));
    let keep = HostTensor::new(
        vec![2, 37],
        (0..74)
            .map(|i| if i % 37 < 20 + i / 37 * 10 { 1.0 } else { 0.0 })
            .collect(),
    )
    .unwrap();
    assert!(f16_case!(
        g,
        &r,
        "mask_fill",
        Op::Layout,
        f,
        vec![&x, &keep],
        |be, t| be.mask_fill(&t[0], &t[1], 96, 0.0).unwrap()
    ));
    let ac = rnd(&[4, 7, 40], 8, 3.0);
    let bd = rnd(&[4, 7, 46], 9, 3.0);
    assert!(f16_case!(
        g,
        &r,
        "rel_shift_softmax",
        Op::Softmax,
        f,
        vec![&ac, &bd],
        |be, t| be.rel_shift_softmax(&t[0], &t[1], None, 0.125).unwrap()
    ));
    // argmax on f16 logits: the same ids as on the rounded values
    let logits = rnd(&[5, 1031], 7, 4.0);
    let ids_ref = r.argmax(&r.upload(&round16(&logits)).unwrap()).unwrap();
    let lt = g.upload(&logits).unwrap();
    g.set_f16_activations(true);
    let out = g
        .chain("test-encoder/argmax", &mut |b| {
            Ok(vec![b.affine(&lt, 1.0, 0.0)?])
        })
        .unwrap();
    assert!(out[0].is_f16());
    assert_eq!(g.argmax(&out[0]).unwrap(), ids_ref, "argmax of f16 rows");
}

#[test]
fn gemms_convs_attention_in_an_f16_chain() {
    let (g, _serial) = require_gpu!("gemms_convs_attention_in_an_f16_chain");
    let r = ReferenceBackend::new();
    // (rows, K, N): GEMV (≤ 8 rows), cuBLASLt with the f32 bias in its epilogue, odd shapes
    // cuBLASLt may refuse (cublasGemmEx + the bias kernel then)
    for (i, &(m, k, n)) in [
        (3, 100, 17),
        (8, 64, 40),
        (130, 384, 256),
        (33, 100, 17),
        (517, 1280, 96),
    ]
    .iter()
    .enumerate()
    {
        for lane in [Lane::F16, Lane::Q8] {
            let x = rnd(&[1, m, k], 10 + i as u64, 1.0);
            let w = rnd(&[n, k], 20 + i as u64, 1.0 / (k as f32).sqrt());
            let b = rnd(&[n], 30 + i as u64, 0.5);
            let is16 = f16_case!(
                g,
                &r,
                &format!("linear {lane} m{m} k{k} n{n}"),
                Op::Linear,
                lane,
                vec![&x, &b],
                |be, t| {
                    let wt = be.weight(&w, lane).unwrap();
                    be.linear(&t[0], &wt, Some(&t[1])).unwrap()
                }
            );
            assert!(is16, "linear output in an f16 chain is f16");
        }
    }
    let a = rnd(&[3, 40, 64], 40, 1.0);
    let bm = rnd(&[3, 50, 64], 41, 1.0);
    assert!(f16_case!(
        g,
        &r,
        "matmul trans_b",
        Op::Matmul,
        Lane::F16,
        vec![&a, &bm],
        |be, t| be.matmul(&t[0], &t[1], true).unwrap()
    ));
    let c = rnd(&[2, 30, 16], 42, 1.0);
    let w1 = rnd(&[24, 16 * 3], 43, 0.25);
    for lane in [Lane::F16, Lane::Q8] {
        assert!(f16_case!(
            g,
            &r,
            &format!("conv1d {lane}"),
            Op::Conv1d,
            lane,
            vec![&c],
            |be, t| {
                let wt = be.weight(&w1, lane).unwrap();
                let p = Conv1dParams {
                    kernel: 3,
                    stride: 2,
                    padding: 1,
                };
                be.conv1d(&t[0], &wt, None, p).unwrap()
            }
        ));
    }
    let dw = rnd(&[16, 9], 44, 0.3);
    assert!(f16_case!(
        g,
        &r,
        "depthwise",
        Op::DepthwiseConv1d,
        Lane::F16,
        vec![&c, &dw],
        |be, t| be.depthwise_conv1d(&t[0], &t[1], None, 1, 4).unwrap()
    ));
    let img = rnd(&[1, 4, 12, 10], 45, 1.0);
    let k2 = rnd(&[6, 2, 3, 3], 46, 0.3);
    assert!(f16_case!(
        g,
        &r,
        "conv2d groups 2",
        Op::Conv2d,
        Lane::F16,
        vec![&img, &k2],
        |be, t| be
            .conv2d(
                &t[0],
                &t[1],
                None,
                Conv2dParams {
                    kernel: (3, 3),
                    stride: (2, 2),
                    padding: (1, 1),
                    groups: 2,
                }
            )
            .unwrap()
    ));
    // many channels (32 × 3 × 3 = 288 ≥ the GEMM form's 64): im2col + the tensor-core GEMM and
    // the direct kernel, each against the reference, with a bias, a batch of 3, odd sizes
    let img = rnd(&[3, 32, 13, 11], 47, 1.0);
    let k3 = rnd(&[40, 32, 3, 3], 48, 0.1);
    let b3 = rnd(&[40], 49, 1.0);
    let mut gemms = [0u64; 2];
    for (i, gemm) in [true, false].into_iter().enumerate() {
        g.set_conv2d_gemm(gemm);
        let before = g.counters().snapshot().gemm_f16;
        assert!(f16_case!(
            g,
            &r,
            &format!("conv2d 32 channels, gemm form {gemm}"),
            Op::Conv2d,
            Lane::F16,
            vec![&img, &k3, &b3],
            |be, t| be
                .conv2d(
                    &t[0],
                    &t[1],
                    Some(&t[2]),
                    Conv2dParams {
                        kernel: (3, 3),
                        stride: (2, 2),
                        padding: (1, 1),
                        groups: 1,
                    }
                )
                .unwrap()
        ));
        gemms[i] = g.counters().snapshot().gemm_f16 - before;
    }
    g.set_conv2d_gemm(true);
    assert_eq!(gemms, [1, 0], "f16 GEMMs of the two forms");
    // fused (Dh 64, Tq ≥ 16, causal and not) and the row kernel (Dh 40, one query)
    for (i, &(tq, tk, h, d, causal)) in [
        (100, 100, 2, 64, false),
        (40, 40, 2, 64, true),
        (1, 23, 2, 40, false),
    ]
    .iter()
    .enumerate()
    {
        let q = rnd(&[1, tq, h * d], 50 + i as u64, 1.0);
        let k = rnd(&[1, tk, h * d], 60 + i as u64, 1.0);
        let v = rnd(&[1, tk, h * d], 70 + i as u64, 1.0);
        let p = AttnParams {
            n_heads: h,
            scale: 1.0 / (d as f32).sqrt(),
            kv_len: None,
            causal,
        };
        assert!(f16_case!(
            g,
            &r,
            &format!("attention tq{tq} tk{tk} d{d} causal {causal}"),
            Op::Attention,
            Lane::F16,
            vec![&q, &k, &v],
            |be, t| be.attention(&t[0], &t[1], &t[2], &p).unwrap()
        ));
        let probs_f16 = f16_case!(
            g,
            &r,
            &format!("attention_probs tq{tq} d{d}"),
            Op::AttentionProbs,
            Lane::F16,
            vec![&q, &k],
            |be, t| be.attention_probs(&t[0], &t[1], &p).unwrap()
        );
        assert!(!probs_f16, "probabilities stay f32");
    }
}

/// The reference mode: with f16 activations off a chain is the eager f32 ops, bit for bit, and
/// outside chains ops write f32 even from f16 inputs.
#[test]
fn f32_mode_chain_equals_eager_and_eager_ops_write_f32() {
    let (g, _serial) = require_gpu!("f32_mode_chain_equals_eager_and_eager_ops_write_f32");
    let x = rnd(&[1, 50, 64], 80, 2.0);
    let w = rnd(&[128, 64], 81, 0.125);
    let gam = rnd(&[64], 82, 1.0);
    let wt = g.weight(&w, Lane::F16).unwrap();
    let (xt, gt) = (g.upload(&x).unwrap(), g.upload(&gam).unwrap());
    let body = |b: &CudaBackend| -> stapes_core::Result<Vec<CudaTensor>> {
        let h = b.layer_norm(&xt, &gt, None, 1e-5)?;
        let h = b.linear(&h, &wt, None)?;
        let h = b.activation(&h, Activation::Gelu)?;
        Ok(vec![b.softmax(&h)?])
    };
    let eager = g.download(&body(g).unwrap()[0]).unwrap();
    g.set_f16_activations(false);
    let chained = g.chain("test-encoder/off", &mut |b| body(b)).unwrap();
    g.set_f16_activations(true);
    assert!(!chained[0].is_f16());
    assert_eq!(g.download(&chained[0]).unwrap().data, eager.data);
    // on again: the same chain key now runs the f16 graph (its own key), close to f32
    let c16 = g.chain("test-encoder/off", &mut |b| body(b)).unwrap();
    assert!(c16[0].is_f16());
    let d = stapes_core::tensor::rel_l2(&g.download(&c16[0]).unwrap().data, &eager.data);
    assert!(d < 2e-3, "f16 chain vs f32: rel L2 {d}");
    // chains other than encoders (decoder steps) keep f32 with f16 activations on
    let step = g.chain("whisper-step/dec0/b1", &mut |b| body(b)).unwrap();
    assert!(!step[0].is_f16(), "a decoder-step chain stays f32");
    assert_eq!(g.download(&step[0]).unwrap().data, eager.data);
    // an f16 tensor fed to an eager op gives f32 back
    let y = g
        .linear(
            &c16[0],
            &g.weight(&rnd(&[8, 128], 83, 0.1), Lane::F16).unwrap(),
            None,
        )
        .unwrap();
    assert!(!y.is_f16());
    assert!(g.download(&y).unwrap().data.iter().all(|v| v.is_finite()));
}

/// With an f16 copy of the bias, cuBLASLt plans the f16-output GEMM with its bias epilogue (the
/// f32 bias has no plan there: those GEMMs fall back to cublasGemmEx + a bias pass and say so
/// in the decline counters). Same bars as the fallback.
#[test]
fn f16_bias_copies_reach_the_cublaslt_epilogue() {
    let (g, _serial) = require_gpu!("f16_bias_copies_reach_the_cublaslt_epilogue");
    let r = ReferenceBackend::new();
    g.set_bias_f16(true);
    for (i, &(m, k, n)) in [(130, 384, 256), (517, 1280, 96), (1500, 384, 1536)]
        .iter()
        .enumerate()
    {
        let x = rnd(&[1, m, k], 200 + i as u64, 1.0);
        let w = rnd(&[n, k], 210 + i as u64, 1.0 / (k as f32).sqrt());
        let b = rnd(&[n], 220 + i as u64, 0.5);
        let is16 = f16_case!(
            g,
            &r,
            &format!("linear f16 bias16 m{m} k{k} n{n}"),
            Op::Linear,
            Lane::F16,
            vec![&x, &b],
            |be, t| {
                let wt = be.weight(&w, Lane::F16).unwrap();
                be.linear(&t[0], &wt, Some(&t[1])).unwrap()
            }
        );
        assert!(is16);
        let declines = g.counters().snapshot().declines;
        let fell_back = declines
            .keys()
            .any(|d| d.contains("F16Out16BiasF16") && d.contains(&format!("{m}x{k}x{n}")));
        assert!(
            !fell_back,
            "no cuBLASLt plan with an f16 bias: {declines:?}"
        );
    }
    g.set_bias_f16(false);
}
