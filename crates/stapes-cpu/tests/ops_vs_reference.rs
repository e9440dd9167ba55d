//! Every op × lane of the CPU home against the scalar reference, on random inputs of awkward
//! shapes, within `stapes_core::tolerance::TABLE`.

use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::{compare, lookup, Mismatch, Op};
use stapes_core::{
    Activation, AttnParams, Backend, Conv1dParams, Conv2dParams, Error, HostTensor, Lane,
};
use stapes_cpu::CpuBackend;

const LANES: [Lane; 3] = [Lane::F32, Lane::F16, Lane::Q8];

struct Pair {
    cpu: CpuBackend,
    rf: ReferenceBackend,
}

fn pair() -> Pair {
    Pair {
        cpu: CpuBackend::new(2).expect("cpu backend"),
        rf: ReferenceBackend::new(),
    }
}

fn rnd(shape: &[usize], seed: u64, scale: f32) -> HostTensor {
    HostTensor::random(shape.to_vec(), seed, scale)
}

/// Compare under the table's row for (op, lane, "cpu"); panics with the case name on failure.
fn check(op: Op, lane: Lane, case: &str, got: &HostTensor, want: &HostTensor) {
    assert_eq!(got.shape, want.shape, "{case}: shapes");
    let row =
        lookup(op, lane, "cpu").unwrap_or_else(|| panic!("no tolerance row for {op:?} {lane} cpu"));
    match compare(&got.data, &want.data, &row.tol) {
        // Printed so `--nocapture` shows each case's margin against its bar.
        Ok(m) => eprintln!(
            "{case}: max_abs {:.2e} (range {:.2e}) rel_l2 {:.2e}",
            m.max_abs, m.range, m.rel_l2
        ),
        Err(e) => panic!("{case}: {e}"),
    }
}

/// Run one op on both backends from host inputs and compare.
macro_rules! both {
    ($p:expr, |$b:ident, $up:ident| $body:expr) => {{
        let cpu = {
            let $b = &$p.cpu;
            let $up = |t: &HostTensor| $b.upload(t).expect("upload");
            let r = $body;
            $b.download(&r).expect("download")
        };
        let rf = {
            let $b = &$p.rf;
            let $up = |t: &HostTensor| $b.upload(t).expect("upload");
            let r = $body;
            $b.download(&r).expect("download")
        };
        (cpu, rf)
    }};
}

#[test]
fn linear_every_lane_awkward_shapes() {
    let p = pair();
    // (x shape, N): M ≤ 8 takes the GEMV path, larger M the GEMM path; K off multiples of 32
    // exercises the zero-padded last q8 block.
    let cases: &[(&[usize], usize)] = &[
        (&[1, 7], 5),
        (&[5, 384], 1500),
        (&[2, 3, 31], 33),
        (&[31, 33], 64),
        (&[33, 64], 7),
        (&[64, 100], 31),
        (&[1500, 33], 17),
        (&[9, 1], 3),
        // more than one 1024-row weight panel on the f16/q8 GEMM path
        (&[40, 48], 2100),
    ];
    for &lane in &LANES {
        for (i, &(xs, n)) in cases.iter().enumerate() {
            let k = *xs.last().expect("rank");
            let x = rnd(xs, 10 + i as u64, 1.0);
            let w = rnd(&[n, k], 20 + i as u64, 1.0);
            let b = rnd(&[n], 30 + i as u64, 1.0);
            let (got, want) = both!(p, |be, up| {
                let wt = be.weight(&w, lane).expect("weight");
                be.linear(&up(&x), &wt, Some(&up(&b))).expect("linear")
            });
            check(
                Op::Linear,
                lane,
                &format!("linear {lane} x{xs:?} n={n}"),
                &got,
                &want,
            );
        }
    }
    let c = p.cpu.counters().snapshot();
    assert_eq!(
        (c.gemm_f32, c.gemm_f16, c.gemm_q8),
        (9, 9, 9),
        "every lane's GEMM ran"
    );
}

#[test]
fn linear_logits_projection_shape() {
    // The decoder's vocabulary projection: (n, 384) · (51864, 384)ᵀ at n = 1 and 5 (beam).
    let p = pair();
    let w = rnd(&[51864, 384], 3, 0.05);
    for &lane in &LANES {
        for m in [1usize, 5] {
            let x = rnd(&[m, 384], 4 + m as u64, 1.0);
            let (got, want) = both!(p, |be, up| {
                let wt = be.weight(&w, lane).expect("weight");
                be.linear(&up(&x), &wt, None).expect("linear")
            });
            check(
                Op::Linear,
                lane,
                &format!("logits {lane} m={m}"),
                &got,
                &want,
            );
        }
    }
}

#[test]
fn q8_cpu_paths_within_their_rows() {
    let p = pair();
    let w = rnd(&[96, 384], 6, 1.0);
    // M ≤ 8 runs Q8_0×Q8_0 (activations quantized too): it must differ from the reference (else
    // the int8 path did not run) yet stay within the q8 row.
    let x = rnd(&[5, 384], 5, 1.0);
    let (got, want) = both!(p, |be, up| {
        let wt = be.weight(&w, Lane::Q8).expect("weight");
        be.linear(&up(&x), &wt, None).expect("linear")
    });
    let row = lookup(Op::Linear, Lane::Q8, "cpu").expect("row");
    let m =
        compare(&got.data, &want.data, &row.tol).unwrap_or_else(|e| panic!("q8 int8 path: {e}"));
    assert!(
        m.rel_l2 > 1e-4,
        "q8 result equals the f32-activation reference: rel_l2 {}",
        m.rel_l2
    );
    // ~amax/(440·rms) for uniform activations: 1/(440·0.577) ≈ 0.004.
    assert!(
        m.rel_l2 < 0.008,
        "q8 error larger than activation quantization explains: {}",
        m.rel_l2
    );
    // Larger M without VNNI dequantizes the weight and runs the f32 GEMM: as exact as the f32
    // lane.
    let x = rnd(&[64, 384], 7, 1.0);
    let plain = Pair {
        cpu: CpuBackend::new_without_vnni(2).expect("cpu"),
        rf: ReferenceBackend::new(),
    };
    let (got, want) = both!(plain, |be, up| {
        let wt = be.weight(&w, Lane::Q8).expect("weight");
        be.linear(&up(&x), &wt, None).expect("linear")
    });
    let f32_row = lookup(Op::Linear, Lane::F32, "cpu").expect("row");
    compare(&got.data, &want.data, &f32_row.tol).unwrap_or_else(|e| panic!("q8 W8A32 path: {e}"));
    // With VNNI, larger M is int8 too, within the q8 row.
    let (got, want) = both!(p, |be, up| {
        let wt = be.weight(&w, Lane::Q8).expect("weight");
        be.linear(&up(&x), &wt, None).expect("linear")
    });
    let m =
        compare(&got.data, &want.data, &row.tol).unwrap_or_else(|e| panic!("q8 large-M path: {e}"));
    assert!(m.rel_l2 < 0.008, "q8 large-M error: {}", m.rel_l2);
}

/// The VNNI large-M q8 GEMM computes what the small-M Q8_0×Q8_0 kernel computes, row by row
/// (same quantized activations, same block scales), up to f32 summation order; awkward shapes
/// cover partial row tiles, partial 32-column panels and a partial K block.
#[test]
fn q8_large_m_equals_q8_rows() {
    let be = CpuBackend::new(2).expect("cpu");
    if !be.has_vnni() {
        eprintln!("no AVX-512 VNNI here: the large-M q8 path is W8A32 (tested above)");
        return;
    }
    for (i, &(m, n, k)) in [
        (37usize, 45usize, 70usize),
        (300, 1536, 384),
        (9, 33, 32),
        (64, 31, 1536),
    ]
    .iter()
    .enumerate()
    {
        let w = rnd(&[n, k], 500 + i as u64, 1.0);
        let x = rnd(&[m, k], 510 + i as u64, 2.0);
        let b = rnd(&[n], 520 + i as u64, 1.0);
        let wt = be.weight(&w, Lane::Q8).expect("weight");
        let bias = be.upload(&b).expect("bias");
        let big = be
            .download(
                &be.linear(&be.upload(&x).expect("x"), &wt, Some(&bias))
                    .expect("linear"),
            )
            .expect("down");
        for r in 0..m {
            let xr = HostTensor::new(vec![1, k], x.data[r * k..(r + 1) * k].to_vec()).expect("row");
            let one = be
                .download(
                    &be.linear(&be.upload(&xr).expect("x"), &wt, Some(&bias))
                        .expect("row"),
                )
                .expect("down");
            for (j, (&a, &e)) in big.data[r * n..(r + 1) * n]
                .iter()
                .zip(&one.data)
                .enumerate()
            {
                assert!(
                    (a - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "({m}, {n}, {k}) row {r} col {j}: large-M {a} vs row kernel {e}"
                );
            }
        }
    }
}

#[test]
fn planted_errors_are_caught() {
    let p = pair();
    let x = rnd(&[33, 64], 7, 1.0);
    let w = rnd(&[31, 64], 8, 1.0);
    for &lane in &LANES {
        let (got, want) = both!(p, |be, up| {
            let wt = be.weight(&w, lane).expect("weight");
            be.linear(&up(&x), &wt, None).expect("linear")
        });
        let row = lookup(Op::Linear, lane, "cpu").expect("row");
        assert!(
            compare(&got.data, &want.data, &row.tol).is_ok(),
            "{lane}: clean result must pass"
        );
        // One element off by 10% of the result's range.
        let mut one = got.data.clone();
        let range = want.data.iter().fold(0f32, |a, v| a.max(v.abs()));
        one[500] += 0.1 * range;
        match compare(&one, &want.data, &row.tol) {
            Err(Mismatch::Element { m, .. }) => assert_eq!(m.worst, 500, "{lane}"),
            other => panic!("{lane}: planted element not caught: {other:?}"),
        }
        // A zeroed block of 32 outputs.
        let mut zeroed = got.data.clone();
        zeroed[64..96].fill(0.0);
        assert!(
            compare(&zeroed, &want.data, &row.tol).is_err(),
            "{lane}: zeroed block not caught"
        );
    }
}

#[test]
fn matmul_awkward_shapes() {
    let p = pair();
    // (a shape, b shape, trans_b)
    let cases: &[(&[usize], &[usize], bool)] = &[
        (&[1, 1, 7], &[1, 7, 5], false),
        (&[3, 31, 33], &[3, 33, 64], false),
        (&[2, 64, 1], &[2, 1, 31], false),
        (&[4, 7, 31], &[4, 33, 31], true),
        (&[1, 1500, 64], &[1, 33, 64], true),
        (&[2, 2, 5, 9], &[2, 2, 9, 3], false),
        (&[33, 7], &[7, 1], false),
    ];
    for (i, &(sa, sb, tb)) in cases.iter().enumerate() {
        let a = rnd(sa, 40 + i as u64, 1.0);
        let b = rnd(sb, 50 + i as u64, 1.0);
        let (got, want) = both!(p, |be, up| be.matmul(&up(&a), &up(&b), tb).expect("matmul"));
        check(
            Op::Matmul,
            Lane::F32,
            &format!("matmul {sa:?}·{sb:?} t={tb}"),
            &got,
            &want,
        );
    }
}

#[test]
fn conv1d_every_lane() {
    let p = pair();
    // (B, T, C_in, C_out, K, stride, padding)
    let cases = [
        (1, 7, 3, 5, 3, 1, 1),
        (2, 31, 33, 7, 3, 2, 1),
        (1, 64, 80, 31, 3, 1, 1),
        (1, 1500, 7, 5, 3, 2, 1),
        (3, 33, 1, 1, 5, 3, 2),
        (1, 3, 4, 6, 3, 1, 0),
    ];
    for &lane in &LANES {
        for (i, &(b, t, cin, cout, k, s, pad)) in cases.iter().enumerate() {
            let x = rnd(&[b, t, cin], 60 + i as u64, 1.0);
            let w = rnd(&[cout, cin, k], 70 + i as u64, 1.0);
            let bias = rnd(&[cout], 80 + i as u64, 1.0);
            let prm = Conv1dParams {
                kernel: k,
                stride: s,
                padding: pad,
            };
            let (got, want) = both!(p, |be, up| {
                let wt = be.weight(&w, lane).expect("weight");
                be.conv1d(&up(&x), &wt, Some(&up(&bias)), prm)
                    .expect("conv1d")
            });
            check(
                Op::Conv1d,
                lane,
                &format!("conv1d {lane} case {i}"),
                &got,
                &want,
            );
        }
    }
}

#[test]
fn depthwise_conv1d_shapes() {
    let p = pair();
    // (B, T, C, K, stride, padding)
    let cases = [
        (1, 7, 3, 3, 1, 1),
        (2, 31, 33, 5, 1, 2),
        (1, 1500, 64, 31, 1, 15),
        (1, 33, 7, 4, 2, 0),
        (3, 64, 1, 1, 1, 0),
    ];
    for (i, &(b, t, c, k, s, pad)) in cases.iter().enumerate() {
        let x = rnd(&[b, t, c], 90 + i as u64, 1.0);
        let w = rnd(&[c, k], 100 + i as u64, 1.0);
        let bias = rnd(&[c], 110 + i as u64, 1.0);
        let (got, want) = both!(p, |be, up| be
            .depthwise_conv1d(&up(&x), &up(&w), Some(&up(&bias)), s, pad)
            .expect("dw"));
        check(
            Op::DepthwiseConv1d,
            Lane::F32,
            &format!("depthwise case {i}"),
            &got,
            &want,
        );
    }
}

#[test]
fn conv2d_shapes() {
    let p = pair();
    // (B, C_in, H, W, C_out, kernel, stride, padding, groups)
    type Case = (
        usize,
        usize,
        usize,
        usize,
        usize,
        (usize, usize),
        (usize, usize),
        (usize, usize),
        usize,
    );
    let cases: [Case; 5] = [
        (1, 1, 80, 31, 7, (3, 3), (2, 2), (1, 1), 1),
        (2, 4, 7, 33, 4, (3, 3), (1, 1), (1, 1), 2),
        (1, 6, 31, 64, 6, (3, 3), (2, 2), (1, 1), 6),
        (1, 3, 33, 7, 5, (1, 1), (1, 1), (0, 0), 1),
        (1, 2, 64, 9, 4, (5, 3), (3, 1), (2, 0), 2),
    ];
    for (i, &(b, cin, h, w, cout, kernel, stride, padding, groups)) in cases.iter().enumerate() {
        let x = rnd(&[b, cin, h, w], 120 + i as u64, 1.0);
        let wt = rnd(
            &[cout, cin / groups, kernel.0, kernel.1],
            130 + i as u64,
            1.0,
        );
        let bias = rnd(&[cout], 140 + i as u64, 1.0);
        let prm = Conv2dParams {
            kernel,
            stride,
            padding,
            groups,
        };
        let (got, want) = both!(p, |be, up| be
            .conv2d(&up(&x), &up(&wt), Some(&up(&bias)), prm)
            .expect("conv2d"));
        check(
            Op::Conv2d,
            Lane::F32,
            &format!("conv2d case {i}"),
            &got,
            &want,
        );
    }
}

#[test]
fn attention_and_probs_shapes() {
    let p = pair();
    // (B, Tq, Tk, heads, Dh, kv_len, causal)
    let cases = [
        (1, 1, 7, 1, 64, None, false),
        (2, 31, 31, 6, 64, None, true),
        (1, 1, 33, 4, 16, Some(20), true),
        (1, 7, 64, 2, 32, Some(40), true),
        (3, 33, 33, 3, 8, None, false),
        (1, 1500, 1500, 1, 64, None, false),
        // several query blocks of the CPU kernel, causal across the block boundaries
        (1, 300, 333, 2, 16, Some(310), true),
        // the few-rows path: beam-5 cross-attention, a batch with Dh off the 8-lane grid
        (1, 5, 1500, 6, 64, None, false),
        (2, 3, 10, 2, 12, Some(6), true),
        (1, 16, 40, 3, 40, Some(37), true),
        (1, 17, 40, 3, 40, Some(37), true),
    ];
    for (i, &(b, tq, tk, h, dh, kv_len, causal)) in cases.iter().enumerate() {
        let q = rnd(&[b, tq, h * dh], 150 + i as u64, 1.0);
        let k = rnd(&[b, tk, h * dh], 160 + i as u64, 1.0);
        let v = rnd(&[b, tk, h * dh], 170 + i as u64, 1.0);
        let prm = AttnParams {
            n_heads: h,
            scale: 1.0 / (dh as f32).sqrt(),
            kv_len,
            causal,
        };
        let (got, want) = both!(p, |be, up| be
            .attention(&up(&q), &up(&k), &up(&v), &prm)
            .expect("attention"));
        check(
            Op::Attention,
            Lane::F32,
            &format!("attention case {i}"),
            &got,
            &want,
        );
        let (got, want) = both!(p, |be, up| be
            .attention_probs(&up(&q), &up(&k), &prm)
            .expect("probs"));
        check(
            Op::AttentionProbs,
            Lane::F32,
            &format!("attention_probs case {i}"),
            &got,
            &want,
        );
    }
}

const ROW_SHAPES: [&[usize]; 6] = [
    &[1, 7],
    &[31, 33],
    &[64, 384],
    &[2, 7, 1500],
    &[1, 1],
    &[1500, 64],
];

#[test]
fn norms_shapes() {
    let p = pair();
    for (i, s) in ROW_SHAPES.iter().enumerate() {
        let c = *s.last().expect("rank");
        let x = rnd(s, 180 + i as u64, 2.0);
        let g = rnd(&[c], 190 + i as u64, 1.5);
        let b = rnd(&[c], 200 + i as u64, 1.0);
        let (got, want) = both!(p, |be, up| be
            .layer_norm(&up(&x), &up(&g), Some(&up(&b)), 1e-5)
            .expect("ln"));
        check(
            Op::LayerNorm,
            Lane::F32,
            &format!("layer_norm {s:?}"),
            &got,
            &want,
        );
        let (got, want) = both!(p, |be, up| be
            .rms_norm(&up(&x), &up(&g), 1e-6)
            .expect("rms"));
        check(
            Op::RmsNorm,
            Lane::F32,
            &format!("rms_norm {s:?}"),
            &got,
            &want,
        );
    }
}

#[test]
fn activations_glu_softmax_shapes() {
    let p = pair();
    let acts = [
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::Relu,
        Activation::Sigmoid,
        Activation::Tanh,
    ];
    for (i, s) in ROW_SHAPES.iter().enumerate() {
        let x = rnd(s, 210 + i as u64, 4.0);
        for act in acts {
            let (got, want) = both!(p, |be, up| be.activation(&up(&x), act).expect("act"));
            check(
                Op::Activation,
                Lane::F32,
                &format!("{act:?} {s:?}"),
                &got,
                &want,
            );
        }
        let (got, want) = both!(p, |be, up| be.softmax(&up(&x)).expect("softmax"));
        check(
            Op::Softmax,
            Lane::F32,
            &format!("softmax {s:?}"),
            &got,
            &want,
        );
        let (got, want) = both!(p, |be, up| be.log_softmax(&up(&x)).expect("log_softmax"));
        check(
            Op::LogSoftmax,
            Lane::F32,
            &format!("log_softmax {s:?}"),
            &got,
            &want,
        );
    }
    let logits = rnd(&[2, 51864], 5, 8.0);
    let (got, want) = both!(p, |be, up| be
        .log_softmax(&up(&logits))
        .expect("log_softmax"));
    check(
        Op::LogSoftmax,
        Lane::F32,
        "log_softmax vocabulary",
        &got,
        &want,
    );
    for (i, s) in [
        &[1usize, 2][..],
        &[7, 64],
        &[31, 34],
        &[2, 3, 1500],
        &[1500, 8],
    ]
    .iter()
    .enumerate()
    {
        let x = rnd(s, 220 + i as u64, 4.0);
        let (got, want) = both!(p, |be, up| be.glu(&up(&x)).expect("glu"));
        check(Op::Glu, Lane::F32, &format!("glu {s:?}"), &got, &want);
    }
}

#[test]
fn elementwise_shapes() {
    let p = pair();
    let cases: [(&[usize], &[usize]); 6] = [
        (&[31, 33], &[33]),
        (&[7], &[7]),
        (&[2, 64, 7], &[64, 7]),
        (&[1500, 64], &[1500, 64]),
        (&[1, 1], &[1]),
        (&[3, 1500], &[]),
    ];
    for (i, &(sa, sb)) in cases.iter().enumerate() {
        let a = rnd(sa, 230 + i as u64, 3.0);
        let b = rnd(sb, 240 + i as u64, 3.0);
        let (got, want) = both!(p, |be, up| be.add(&up(&a), &up(&b)).expect("add"));
        check(
            Op::Elementwise,
            Lane::F32,
            &format!("add {sa:?}+{sb:?}"),
            &got,
            &want,
        );
        let (got, want) = both!(p, |be, up| be.mul(&up(&a), &up(&b)).expect("mul"));
        check(
            Op::Elementwise,
            Lane::F32,
            &format!("mul {sa:?}*{sb:?}"),
            &got,
            &want,
        );
        let (got, want) = both!(p, |be, up| be.affine(&up(&a), 0.37, -1.25).expect("affine"));
        check(
            Op::Elementwise,
            Lane::F32,
            &format!("affine {sa:?}"),
            &got,
            &want,
        );
    }
}

#[test]
fn layout_ops_are_exact() {
    let p = pair();
    let shapes: [&[usize]; 5] = [
        &[1, 7],
        &[31, 33],
        &[2, 64, 3],
        &[3, 1500, 7],
        &[2, 2, 33, 5],
    ];
    for (i, s) in shapes.iter().enumerate() {
        let x = rnd(s, 250 + i as u64, 1.0);
        let r = s.len();
        let (got, want) = both!(p, |be, up| be.transpose_last2(&up(&x)).expect("t"));
        check(
            Op::Layout,
            Lane::F32,
            &format!("transpose {s:?}"),
            &got,
            &want,
        );
        let len = s[r - 1].div_ceil(2);
        let (got, want) = both!(p, |be, up| be
            .slice(&up(&x), r - 1, s[r - 1] - len, len)
            .expect("slice"));
        check(Op::Layout, Lane::F32, &format!("slice {s:?}"), &got, &want);
        let (got, want) = both!(p, |be, up| be
            .concat(&[&up(&x), &up(&x)], 0)
            .expect("concat"));
        check(Op::Layout, Lane::F32, &format!("concat {s:?}"), &got, &want);
        let flat: Vec<usize> = vec![x.len()];
        let (got, want) = both!(p, |be, up| be.reshape(&up(&x), &flat).expect("reshape"));
        check(
            Op::Layout,
            Lane::F32,
            &format!("reshape {s:?}"),
            &got,
            &want,
        );
    }
    let cache = rnd(&[2, 33, 7], 260, 1.0);
    let step = rnd(&[2, 3, 7], 261, 1.0);
    let (got, want) = both!(p, |be, up| {
        let mut c = up(&cache);
        be.write_rows(&mut c, &up(&step), 30).expect("write_rows");
        be.gather_batch(&c, &[1, 0, 1]).expect("gather_batch")
    });
    check(
        Op::Layout,
        Lane::F32,
        "write_rows + gather_batch",
        &got,
        &want,
    );
    // the heads' one-pass forms against the reference's composed transposes, bit for bit
    // (B, T, H, Dh): one head, odd sizes, a batch of 3, a 1500-frame window (the pooled path),
    // an empty time axis
    for (i, &(b, t, h, dh)) in [
        (1, 7, 1, 5),
        (2, 5, 3, 4),
        (3, 9, 4, 16),
        (1, 1500, 6, 64),
        (2, 0, 2, 8),
    ]
    .iter()
    .enumerate()
    {
        let x = rnd(&[b, t, h * dh], 270 + i as u64, 1.0);
        let bias = rnd(&[h * dh], 280 + i as u64, 1.0);
        for with_bias in [false, true] {
            let (got, want) = both!(p, |be, up| {
                let bb = up(&bias);
                let y = be
                    .split_heads(&up(&x), h, with_bias.then_some(&bb))
                    .expect("split_heads");
                be.merge_heads(&y, b).expect("merge_heads")
            });
            let case = format!("split_heads + merge_heads {b}x{t}x{h}x{dh} bias {with_bias}");
            assert_eq!(got.shape, vec![b, t, h * dh], "{case}");
            assert_eq!(got.data, want.data, "{case}");
            let (got, want) = both!(p, |be, up| {
                let bb = up(&bias);
                be.split_heads(&up(&x), h, with_bias.then_some(&bb))
                    .expect("split_heads")
            });
            assert_eq!(got.shape, vec![b * h, t, dh], "{case}");
            assert_eq!(got.data, want.data, "{case}: split alone");
        }
    }
    // a reshape shares its tensor's values (no copy); writing rows into the tensor afterwards
    // leaves the reshape's values as they were, and a clone keeps its own too
    {
        let be = &p.cpu;
        let mut c = be.upload(&cache).expect("upload");
        let flat = be.reshape(&c, &[2 * 33 * 7]).expect("reshape");
        let copy = c.clone();
        be.write_rows(&mut c, &be.upload(&step).expect("upload"), 30)
            .expect("write_rows");
        assert_eq!(
            be.download(&flat).expect("down").data,
            cache.data,
            "the reshape changed"
        );
        assert_eq!(
            be.download(&copy).expect("down").data,
            cache.data,
            "the clone changed"
        );
        let written = be.download(&c).expect("down").data;
        assert_ne!(written, cache.data, "write_rows wrote nothing");
        assert_eq!(
            &written[30 * 7..33 * 7],
            &step.data[..3 * 7],
            "the first batch's rows"
        );
    }
    let table = rnd(&[51, 7], 262, 1.0);
    let (got, want) = both!(p, |be, up| be
        .gather_rows(&up(&table), &[50, 0, 3, 3])
        .expect("gather_rows"));
    check(Op::Layout, Lane::F32, "gather_rows", &got, &want);
}

#[test]
fn lstm_cell_default_matches() {
    let p = pair();
    for (i, &(b, inp, hid)) in [
        (1usize, 7usize, 5usize),
        (3, 33, 31),
        (2, 64, 64),
        (1, 1, 1),
        (5, 100, 33),
    ]
    .iter()
    .enumerate()
    {
        let x = rnd(&[b, inp], 270 + i as u64, 1.0);
        let h = rnd(&[b, hid], 280 + i as u64, 1.0);
        let c = rnd(&[b, hid], 290 + i as u64, 1.0);
        let wih = rnd(&[4 * hid, inp], 300 + i as u64, 0.5);
        let whh = rnd(&[4 * hid, hid], 310 + i as u64, 0.5);
        let bias = rnd(&[4 * hid], 320 + i as u64, 0.5);
        let (got, want) = both!(p, |be, up| {
            let (wi, wh) = (
                be.weight(&wih, Lane::F32).expect("w"),
                be.weight(&whh, Lane::F32).expect("w"),
            );
            let (h2, c2) = be
                .lstm_cell(&up(&x), &up(&h), &up(&c), &wi, &wh, Some(&up(&bias)))
                .expect("lstm");
            be.concat(&[&h2, &c2], 1).expect("concat")
        });
        check(
            Op::LstmCell,
            Lane::F32,
            &format!("lstm case {i}"),
            &got,
            &want,
        );
    }
}

#[test]
fn bad_shapes_are_typed_errors() {
    let be = CpuBackend::new(1).expect("cpu");
    let x = be.upload(&rnd(&[2, 5], 1, 1.0)).expect("upload");
    let w = be.weight(&rnd(&[3, 4], 2, 1.0), Lane::Q8).expect("weight");
    assert!(matches!(
        be.linear(&x, &w, None),
        Err(Error::Shape { op: "linear", .. })
    ));
    assert!(matches!(
        be.weight(&rnd(&[4], 2, 1.0), Lane::F32),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(be.slice(&x, 1, 4, 2), Err(Error::Shape { .. })));
    assert!(matches!(
        be.slice(&x, 1, usize::MAX, 2),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(be.gather_rows(&x, &[2]), Err(Error::Shape { .. })));
    assert!(matches!(
        be.glu(&be.upload(&rnd(&[3], 1, 1.0)).expect("up")),
        Err(Error::Shape { .. })
    ));
    let q = be.upload(&rnd(&[1, 4, 6], 3, 1.0)).expect("up");
    let causal = AttnParams {
        n_heads: 2,
        scale: 1.0,
        kv_len: Some(3),
        causal: true,
    };
    assert!(
        matches!(be.attention(&q, &q, &q, &causal), Err(Error::Shape { .. })),
        "kv_len < Tq when causal"
    );
    let conv = Conv1dParams {
        kernel: 9,
        stride: 1,
        padding: 0,
    };
    let cw = be.weight(&rnd(&[2, 6 * 9], 4, 1.0), Lane::F32).expect("w");
    assert!(
        matches!(be.conv1d(&q, &cw, None, conv), Err(Error::Shape { .. })),
        "kernel longer than input"
    );
}

#[test]
fn portable_kernels_match_the_reference() {
    // The non-AVX2 fallback never runs by itself on an AVX2 machine: force it and check the
    // lanes' dot kernels (GEMV and GEMM paths) and the element-wise maps.
    let p = Pair {
        cpu: CpuBackend::new_portable(2).expect("portable cpu"),
        rf: ReferenceBackend::new(),
    };
    assert!(!p.cpu.has_avx2());
    let cases: &[(&[usize], usize)] = &[
        (&[1, 7], 5),
        (&[5, 384], 300),
        (&[2, 3, 31], 33),
        (&[64, 100], 31),
        (&[1, 33], 9),
    ];
    for &lane in &LANES {
        for (i, &(xs, n)) in cases.iter().enumerate() {
            let k = *xs.last().expect("rank");
            let x = rnd(xs, 400 + i as u64, 1.0);
            let w = rnd(&[n, k], 410 + i as u64, 1.0);
            let (got, want) = both!(p, |be, up| {
                let wt = be.weight(&w, lane).expect("weight");
                be.linear(&up(&x), &wt, None).expect("linear")
            });
            check(
                Op::Linear,
                lane,
                &format!("portable linear {lane} x{xs:?} n={n}"),
                &got,
                &want,
            );
        }
    }
    let x = rnd(&[33, 1500], 420, 4.0);
    for act in [Activation::Gelu, Activation::Silu, Activation::Tanh] {
        let (got, want) = both!(p, |be, up| be.activation(&up(&x), act).expect("act"));
        check(
            Op::Activation,
            Lane::F32,
            &format!("portable {act:?}"),
            &got,
            &want,
        );
    }
    let (got, want) = both!(p, |be, up| be.softmax(&up(&x)).expect("softmax"));
    check(Op::Softmax, Lane::F32, "portable softmax", &got, &want);
}

#[test]
fn single_thread_equals_two_threads() {
    // The serial (caller-thread) and pooled paths split work differently but must agree; the
    // shapes are big enough that two threads take the parallel path.
    let one = CpuBackend::new(1).expect("cpu");
    let two = CpuBackend::new(2).expect("cpu");
    let x = rnd(&[300, 384], 430, 1.0);
    let w = rnd(&[1536, 384], 431, 1.0);
    let q = rnd(&[1, 300, 384], 432, 1.0);
    let prm = AttnParams {
        n_heads: 6,
        scale: 0.125,
        kv_len: None,
        causal: true,
    };
    for lane in LANES {
        for rows in [1usize, 5, 300] {
            let xr = HostTensor::new(vec![rows, 384], x.data[..rows * 384].to_vec()).expect("rows");
            let linear = |be: &CpuBackend| {
                be.download(
                    &be.linear(
                        &be.upload(&xr).expect("up"),
                        &be.weight(&w, lane).expect("w"),
                        None,
                    )
                    .expect("linear"),
                )
                .expect("down")
            };
            let (a, b) = (linear(&one), linear(&two));
            check(
                Op::Linear,
                lane,
                &format!("1 vs 2 threads, linear {lane} rows={rows}"),
                &a,
                &b,
            );
        }
    }
    let attention = |be: &CpuBackend| {
        let t = be.upload(&q).expect("up");
        be.download(&be.attention(&t, &t, &t, &prm).expect("attn"))
            .expect("down")
    };
    let (a, b) = (attention(&one), attention(&two));
    check(
        Op::Attention,
        Lane::F32,
        "1 vs 2 threads, attention",
        &a,
        &b,
    );
}
