//! Every op × lane of the CUDA home against `ReferenceBackend` on awkward shapes.
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use common::{check, rnd};
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::Op;
use stapes_core::{
    Activation, AttnParams, Backend, Conv1dParams, Conv2dParams, DeviceTensor, Error, HostTensor,
    Lane, WeightData, WeightView,
};

const LANES: [Lane; 2] = [Lane::F16, Lane::Q8];

#[test]
fn f32_lane_is_refused() {
    let (g, _serial) = require_gpu!("f32_lane_is_refused");
    let w = rnd(&[4, 8], 1, 1.0);
    assert!(matches!(
        g.weight(&w, Lane::F32),
        Err(Error::LaneUnavailable { .. })
    ));
    assert!(!g.supports_lane(Lane::F32) && g.supports_lane(Lane::F16) && g.supports_lane(Lane::Q8));
}

#[test]
fn linear_all_lanes() {
    let (g, _serial) = require_gpu!("linear_all_lanes");
    let r = ReferenceBackend::new();
    let before = g.counters().snapshot();
    // (rows, K, N): GEMV path (≤ 8 rows) and library path, K and N not multiples of 4/16/32
    let shapes = [
        (1, 64, 5),
        (3, 100, 17),
        (7, 385, 96),
        (8, 33, 257),
        (9, 31, 40),
        (33, 100, 17),
        (130, 385, 257),
        (517, 1280, 96),
        (20, 2560, 48),
        (2, 5120, 24),
    ];
    for lane in LANES {
        for (i, &(m, k, n)) in shapes.iter().enumerate() {
            let x = rnd(&[1, m, k], 10 + i as u64, 1.0);
            let w = rnd(&[n, k], 20 + i as u64, 1.0 / (k as f32).sqrt());
            let b = rnd(&[n], 30 + i as u64, 0.5);
            let with_bias = i % 2 == 0;
            let (got, want) = both!(g, &r, |be| {
                let xt = be.upload(&x).unwrap();
                let wt = be.weight(&w, lane).unwrap();
                let bt = be.upload(&b).unwrap();
                be.download(
                    &be.linear(&xt, &wt, if with_bias { Some(&bt) } else { None })
                        .unwrap(),
                )
                .unwrap()
            });
            check(
                &format!("linear {lane} m{m} k{k} n{n} bias {with_bias}"),
                Op::Linear,
                lane,
                &got,
                &want,
            );
        }
    }
    let after = g.counters().snapshot();
    assert!(
        after.gemm_f16 >= before.gemm_f16 + shapes.len() as u64,
        "f16 GEMMs not counted"
    );
    assert!(
        after.gemm_q8 >= before.gemm_q8 + shapes.len() as u64,
        "q8 GEMMs not counted"
    );
    assert!(after.ops > before.ops, "kernel launches not counted");
}

/// An f16 checkpoint's bytes stored by `weight_from` (the f16 lane copies them as they are)
/// give the weight `weight` makes of the widened matrix: the same products bit for bit, in both
/// lanes, from bytes at an odd address as a memory map may hold them.
#[test]
fn weight_from_f16_bytes_is_the_weight_of_the_widened_matrix() {
    let (g, _serial) = require_gpu!("weight_from_f16_bytes_is_the_weight_of_the_widened_matrix");
    // (rows, K, N): the GEMV and library paths, K and N off the tile sizes
    let shapes = [(1, 64, 5), (7, 385, 96), (3, 33, 1), (130, 40, 257)];
    for lane in LANES {
        for (i, &(m, k, n)) in shapes.iter().enumerate() {
            let w = rnd(&[n, k], 60 + i as u64, 1.0 / (k as f32).sqrt());
            let mut halves: Vec<half::f16> =
                w.data.iter().map(|&v| half::f16::from_f32(v)).collect();
            // the ends of f16's range: the largest finite value and a subnormal
            halves[0] = half::f16::MAX;
            if let Some(last) = halves.last_mut() {
                *last = half::f16::from_bits(0x8003);
            }
            let mut bytes = vec![0u8];
            bytes.extend(halves.iter().flat_map(|h| h.to_le_bytes()));
            let view = WeightView::new(n, k, WeightData::F16Le(&bytes[1..])).unwrap();
            let x = g.upload(&rnd(&[1, m, k], 70 + i as u64, 1.0)).unwrap();
            let run = |wt| g.download(&g.linear(&x, &wt, None).unwrap()).unwrap();
            let direct = run(g.weight_from(&view, lane).unwrap());
            let widened = run(g.weight(&view.to_host(), lane).unwrap());
            let bits = |t: &HostTensor| t.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&direct), bits(&widened), "{lane} m{m} k{k} n{n}");
        }
    }
    let short = WeightView {
        n: 2,
        k: 3,
        data: WeightData::F16Le(&[0u8; 10]),
        keep: None,
    };
    assert!(matches!(
        g.weight_from(&short, Lane::F16),
        Err(Error::Shape { .. })
    ));
}

#[test]
fn conv1d_all_lanes() {
    let (g, _serial) = require_gpu!("conv1d_all_lanes");
    let r = ReferenceBackend::new();
    // (B, T, C_in, C_out, kernel, stride, padding): Whisper's stem shapes, shrunk and skewed
    let cases = [
        (1, 30, 8, 12, 3, 1, 1),
        (2, 17, 5, 7, 3, 2, 1),
        (1, 9, 3, 10, 5, 1, 2),
        (1, 64, 80, 40, 3, 2, 1),
        (1, 600, 16, 64, 3, 2, 1),
    ];
    for lane in LANES {
        for (i, &(b, t, ci, co, kw, s, pd)) in cases.iter().enumerate() {
            let x = rnd(&[b, t, ci], 40 + i as u64, 1.0);
            let w = rnd(
                &[co, ci, kw],
                50 + i as u64,
                1.0 / ((ci * kw) as f32).sqrt(),
            );
            let bias = rnd(&[co], 60 + i as u64, 0.5);
            let p = Conv1dParams {
                kernel: kw,
                stride: s,
                padding: pd,
            };
            let (got, want) = both!(g, &r, |be| {
                let xt = be.upload(&x).unwrap();
                let wt = be.weight(&w, lane).unwrap();
                let bt = be.upload(&bias).unwrap();
                be.download(&be.conv1d(&xt, &wt, Some(&bt), p).unwrap())
                    .unwrap()
            });
            check(
                &format!("conv1d {lane} {:?}", cases[i]),
                Op::Conv1d,
                lane,
                &got,
                &want,
            );
            // with its GELU, in the GEMM's epilogue above GEMV sizes (linear_add.rs's tests
            // hold that epilogue to the linear's bar; here the convolution's)
            let (got, want) = both!(g, &r, |be| {
                let xt = be.upload(&x).unwrap();
                let wt = be.weight(&w, lane).unwrap();
                let bt = be.upload(&bias).unwrap();
                let y = be
                    .conv1d_act(&xt, &wt, Some(&bt), p, Activation::Gelu)
                    .unwrap();
                be.download(&y).unwrap()
            });
            check(
                &format!("conv1d_act gelu {lane} {:?}", cases[i]),
                Op::Conv1d,
                lane,
                &got,
                &want,
            );
        }
    }
}

#[test]
fn matmul_batched() {
    let (g, _serial) = require_gpu!("matmul_batched");
    let r = ReferenceBackend::new();
    for (i, &(bt, m, k, n, tb)) in [
        (1, 5, 7, 3, false),
        (3, 17, 33, 9, true),
        (2, 64, 100, 65, false),
        (4, 1, 64, 130, true),
    ]
    .iter()
    .enumerate()
    {
        let a = rnd(&[bt, m, k], 70 + i as u64, 1.0);
        let bs = if tb { [bt, n, k] } else { [bt, k, n] };
        let b = rnd(&bs, 80 + i as u64, 1.0);
        let (got, want) = both!(g, &r, |be| {
            let at = be.upload(&a).unwrap();
            let btt = be.upload(&b).unwrap();
            be.download(&be.matmul(&at, &btt, tb).unwrap()).unwrap()
        });
        check(
            &format!("matmul b{bt} m{m} k{k} n{n} trans_b {tb}"),
            Op::Matmul,
            Lane::F16,
            &got,
            &want,
        );
    }
}

#[test]
fn attention_fused_and_rows() {
    let (g, _serial) = require_gpu!("attention_fused_and_rows");
    let r = ReferenceBackend::new();
    // (B, Tq, Tk, H, Dh, kv_len, causal): fused path (Dh 64/128, Tq ≥ 16) and the row kernel
    let cases = [
        (1, 100, 100, 2, 64, None, false),
        (2, 37, 70, 3, 64, Some(53), false),
        (1, 65, 130, 2, 128, None, false),
        (1, 40, 40, 2, 64, None, true),
        (1, 20, 50, 1, 64, Some(45), true),
        (2, 1, 23, 4, 64, Some(17), false),
        (1, 3, 10, 2, 40, None, true),
        (1, 300, 1500, 4, 64, None, false),
        (1, 2, 700, 3, 64, Some(650), false),
        (1, 2, 20, 2, 18, None, false),
    ];
    for (i, &(b, tq, tk, h, d, kv, causal)) in cases.iter().enumerate() {
        // alternate the two d = 64 kernel variants over the fused cases
        g.set_attention_variant((i % 2) as u8);
        let q = rnd(&[b, tq, h * d], 90 + i as u64, 1.0);
        let k = rnd(&[b, tk, h * d], 100 + i as u64, 1.0);
        let v = rnd(&[b, tk, h * d], 110 + i as u64, 1.0);
        let p = AttnParams {
            n_heads: h,
            scale: 1.0 / (d as f32).sqrt(),
            kv_len: kv,
            causal,
        };
        let (got, want) = both!(g, &r, |be| {
            let (qt, kt, vt) = (
                be.upload(&q).unwrap(),
                be.upload(&k).unwrap(),
                be.upload(&v).unwrap(),
            );
            be.download(&be.attention(&qt, &kt, &vt, &p).unwrap())
                .unwrap()
        });
        check(
            &format!("attention {:?}", cases[i]),
            Op::Attention,
            Lane::F16,
            &got,
            &want,
        );
        let (got, want) = both!(g, &r, |be| {
            let (qt, kt) = (be.upload(&q).unwrap(), be.upload(&k).unwrap());
            be.download(&be.attention_probs(&qt, &kt, &p).unwrap())
                .unwrap()
        });
        check(
            &format!("attention_probs {:?}", cases[i]),
            Op::AttentionProbs,
            Lane::F16,
            &got,
            &want,
        );
    }
    g.set_attention_variant(1);
}

/// `act` over `x` on the CUDA home against the reference, at the activation bar.
fn check_activation(
    g: &stapes_cuda::CudaBackend,
    r: &ReferenceBackend,
    x: &HostTensor,
    act: Activation,
) {
    let (got, want) = both!(g, r, |be| {
        let xt = be.upload(x).unwrap();
        be.download(&be.activation(&xt, act).unwrap()).unwrap()
    });
    check(
        &format!("activation {act:?} {:?}", x.shape),
        Op::Activation,
        Lane::F16,
        &got,
        &want,
    );
}

/// Element-wise activations over more 4-value accesses than the grid has threads (132 · 32
/// blocks of 256 at most), so the grid-stride loop hands most threads two accesses and some one:
/// 16 parakeet clips' SiLU (2240 × 4096), a size just past the grid, and an odd count (the
/// one-value path).
#[test]
fn activations_past_the_grid_cap() {
    let (g, _serial) = require_gpu!("activations_past_the_grid_cap");
    let r = ReferenceBackend::new();
    for (i, shape) in [vec![2240usize, 4096], vec![3, 1000, 1500], vec![4_325_377]]
        .iter()
        .enumerate()
    {
        let x = rnd(shape, 150 + i as u64, 4.0);
        for act in [Activation::Silu, Activation::Gelu] {
            check_activation(g, &r, &x, act);
        }
    }
}

#[test]
fn norms_activations_softmax() {
    let (g, _serial) = require_gpu!("norms_activations_softmax");
    let r = ReferenceBackend::new();
    for (i, shape) in [
        vec![1usize, 7],
        vec![3, 5, 33],
        vec![2, 1500, 384],
        vec![4, 1031],
    ]
    .iter()
    .enumerate()
    {
        let c = *shape.last().unwrap();
        let x = rnd(shape, 120 + i as u64, 4.0);
        let gam = rnd(&[c], 130 + i as u64, 1.0);
        let bet = rnd(&[c], 140 + i as u64, 1.0);
        let (got, want) = both!(g, &r, |be| {
            let (xt, gt, bt) = (
                be.upload(&x).unwrap(),
                be.upload(&gam).unwrap(),
                be.upload(&bet).unwrap(),
            );
            be.download(&be.layer_norm(&xt, &gt, Some(&bt), 1e-5).unwrap())
                .unwrap()
        });
        check(
            &format!("layer_norm {shape:?}"),
            Op::LayerNorm,
            Lane::F16,
            &got,
            &want,
        );
        let (got, want) = both!(g, &r, |be| {
            let (xt, gt) = (be.upload(&x).unwrap(), be.upload(&gam).unwrap());
            be.download(&be.layer_norm(&xt, &gt, None, 1e-5).unwrap())
                .unwrap()
        });
        check(
            &format!("layer_norm no beta {shape:?}"),
            Op::LayerNorm,
            Lane::F16,
            &got,
            &want,
        );
        let (got, want) = both!(g, &r, |be| {
            let (xt, gt) = (be.upload(&x).unwrap(), be.upload(&gam).unwrap());
            be.download(&be.rms_norm(&xt, &gt, 1e-6).unwrap()).unwrap()
        });
        check(
            &format!("rms_norm {shape:?}"),
            Op::RmsNorm,
            Lane::F16,
            &got,
            &want,
        );
        for act in [
            Activation::Gelu,
            Activation::GeluTanh,
            Activation::Silu,
            Activation::Relu,
            Activation::Sigmoid,
            Activation::Tanh,
        ] {
            check_activation(g, &r, &x, act);
        }
        let (got, want) = both!(g, &r, |be| {
            let xt = be.upload(&x).unwrap();
            be.download(&be.softmax(&xt).unwrap()).unwrap()
        });
        check(
            &format!("softmax {shape:?}"),
            Op::Softmax,
            Lane::F16,
            &got,
            &want,
        );
        let (got, want) = both!(g, &r, |be| {
            let xt = be.upload(&x).unwrap();
            be.download(&be.log_softmax(&xt).unwrap()).unwrap()
        });
        check(
            &format!("log_softmax {shape:?}"),
            Op::LogSoftmax,
            Lane::F16,
            &got,
            &want,
        );
        if c % 2 == 0 {
            let (got, want) = both!(g, &r, |be| {
                let xt = be.upload(&x).unwrap();
                be.download(&be.glu(&xt).unwrap()).unwrap()
            });
            check(&format!("glu {shape:?}"), Op::Glu, Lane::F16, &got, &want);
        }
        let ids_g = g.argmax(&g.upload(&x).unwrap()).unwrap();
        let ids_r = r.argmax(&r.upload(&x).unwrap()).unwrap();
        assert_eq!(ids_g, ids_r, "argmax {shape:?}");
    }
}

#[test]
fn elementwise_and_broadcast() {
    let (g, _serial) = require_gpu!("elementwise_and_broadcast");
    let r = ReferenceBackend::new();
    for (i, (sa, sb)) in [
        (vec![3usize, 5, 7], vec![3usize, 5, 7]),
        (vec![2, 9, 33], vec![33]),
        (vec![4, 1500, 20], vec![1500, 20]),
    ]
    .iter()
    .enumerate()
    {
        let a = rnd(sa, 150 + i as u64, 2.0);
        let b = rnd(sb, 160 + i as u64, 2.0);
        let (got, want) = both!(g, &r, |be| {
            let (at, bt) = (be.upload(&a).unwrap(), be.upload(&b).unwrap());
            be.download(&be.add(&at, &bt).unwrap()).unwrap()
        });
        check(
            &format!("add {sa:?} {sb:?}"),
            Op::Elementwise,
            Lane::F16,
            &got,
            &want,
        );
        let (got, want) = both!(g, &r, |be| {
            let (at, bt) = (be.upload(&a).unwrap(), be.upload(&b).unwrap());
            be.download(&be.mul(&at, &bt).unwrap()).unwrap()
        });
        check(
            &format!("mul {sa:?} {sb:?}"),
            Op::Elementwise,
            Lane::F16,
            &got,
            &want,
        );
        let (got, want) = both!(g, &r, |be| {
            let at = be.upload(&a).unwrap();
            be.download(&be.affine(&at, 0.37, -1.25).unwrap()).unwrap()
        });
        check(
            &format!("affine {sa:?}"),
            Op::Elementwise,
            Lane::F16,
            &got,
            &want,
        );
    }
}

/// Padding masks: selected entries copied exactly, the rest become the fill (also -inf), and
/// shapes that do not divide into (B, R, S, inner) are refused.
#[test]
fn mask_fill_is_exact() {
    let (g, _serial) = require_gpu!("mask_fill_is_exact");
    let r = ReferenceBackend::new();
    let keep = |b: usize, s: usize, lens: &[usize], rank3: bool| {
        let data = lens
            .iter()
            .flat_map(|&l| (0..s).map(move |i| if i < l { 1.0 } else { 0.0 }))
            .collect();
        let shape = if rank3 { vec![b, s, 1] } else { vec![b, s] };
        HostTensor::new(shape, data).unwrap()
    };
    for (sx, k, inner, fill) in [
        // scores (B·H, C, T) with a key mask (B, T)
        (
            vec![6usize, 5, 7],
            keep(2, 7, &[7, 3], false),
            1usize,
            f32::NEG_INFINITY,
        ),
        // conv input (B, C, T, F) with (B, T, 1)
        (vec![3, 4, 9, 5], keep(3, 9, &[9, 1, 6], true), 5, 0.0),
        // sequence (B, T, C)
        (vec![2, 33, 20], keep(2, 33, &[17, 33], true), 20, 0.0),
    ] {
        let x = rnd(&sx, 321, 2.0);
        let (got, want) = both!(g, &r, |be| {
            let (xt, kt) = (be.upload(&x).unwrap(), be.upload(&k).unwrap());
            be.download(&be.mask_fill(&xt, &kt, inner, fill).unwrap())
                .unwrap()
        });
        assert_eq!(got.shape, sx);
        assert!(
            got.data
                .iter()
                .zip(&want.data)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "mask_fill {sx:?} differs from the reference"
        );
        assert!(got.data.contains(&fill), "nothing masked in {sx:?}");
    }
    let x = g.upload(&rnd(&[3, 5, 7], 1, 1.0)).unwrap();
    let bad = g.upload(&keep(2, 5, &[5, 5], false)).unwrap();
    assert!(
        g.mask_fill(&x, &bad, 7, 0.0).is_err(),
        "batch 2 does not divide 3"
    );
}

/// The fused Transformer-XL shift + scale + key mask + softmax against the reference's
/// composition of pad/reshape/slice/add/affine/mask_fill/softmax.
#[test]
fn rel_shift_softmax_matches_composition() {
    let (g, _serial) = require_gpu!("rel_shift_softmax_matches_composition");
    let r = ReferenceBackend::new();
    // (B, H, C, T): one block of all rows, a block of 7 rows, a masked batch of 3
    for (b, h, c, t, lens) in [
        (1usize, 2usize, 9usize, 9usize, None),
        (1, 4, 7, 40, None),
        (3, 2, 11, 11, Some(vec![11usize, 4, 8])),
    ] {
        let ac = rnd(&[b * h, c, t], 500 + t as u64, 3.0);
        let bd = rnd(&[b * h, c, t + c - 1], 600 + t as u64, 3.0);
        let keep = lens.as_ref().map(|l| {
            let data = l
                .iter()
                .flat_map(|&n| (0..t).map(move |j| if j < n { 1.0 } else { 0.0 }))
                .collect();
            HostTensor::new(vec![b, t, 1], data).unwrap()
        });
        let (got, want) = both!(g, &r, |be| {
            let (a, d) = (be.upload(&ac).unwrap(), be.upload(&bd).unwrap());
            let k = keep.as_ref().map(|k| be.upload(k).unwrap());
            be.download(&be.rel_shift_softmax(&a, &d, k.as_ref(), 0.125).unwrap())
                .unwrap()
        });
        check(
            &format!("rel_shift_softmax b{b} h{h} c{c} t{t}"),
            Op::Softmax,
            Lane::F16,
            &got,
            &want,
        );
        if let Some(l) = &lens {
            // masked keys get exactly zero weight
            for (row, probs) in got.data.chunks(t).enumerate() {
                let n = l[row / (h * c)];
                assert!(
                    probs[n..].iter().all(|p| *p == 0.0),
                    "row {row}: masked keys weighted"
                );
            }
        }
    }
    let a = g.upload(&rnd(&[2, 3, 5], 1, 1.0)).unwrap();
    let d = g.upload(&rnd(&[2, 3, 6], 2, 1.0)).unwrap();
    assert!(
        g.rel_shift_softmax(&a, &d, None, 1.0).is_err(),
        "bd must be (BH, C, T+C-1)"
    );
}

/// Head split (with the Transformer-XL bias folded in) and merge against the reference's
/// transpose/reshape composition; the round trip is the identity.
#[test]
fn split_and_merge_heads() {
    let (g, _serial) = require_gpu!("split_and_merge_heads");
    let r = ReferenceBackend::new();
    for (b, t, h, dh) in [(1usize, 7usize, 2usize, 3usize), (3, 33, 8, 16)] {
        let x = rnd(&[b, t, h * dh], 700 + t as u64, 2.0);
        let bias = rnd(&[h * dh], 800, 1.0);
        let (got, want) = both!(g, &r, |be| {
            let (xt, bt) = (be.upload(&x).unwrap(), be.upload(&bias).unwrap());
            be.download(&be.split_heads(&xt, h, Some(&bt)).unwrap())
                .unwrap()
        });
        assert_eq!(got.shape, vec![b * h, t, dh]);
        check(
            &format!("split_heads {b}x{t}x{h}x{dh}"),
            Op::Elementwise,
            Lane::F16,
            &got,
            &want,
        );
        let (got, want) = both!(g, &r, |be| {
            let xt = be.upload(&x).unwrap();
            let s = be.split_heads(&xt, h, None).unwrap();
            be.download(&be.merge_heads(&s, b).unwrap()).unwrap()
        });
        assert_eq!(got.data, x.data, "split then merge is the identity");
        assert_eq!(got.data, want.data);
    }
    let x = g.upload(&rnd(&[2, 3, 10], 1, 1.0)).unwrap();
    assert!(
        g.split_heads(&x, 3, None).is_err(),
        "10 channels do not split into 3 heads"
    );
}

#[test]
fn layout_ops_are_exact() {
    let (g, _serial) = require_gpu!("layout_ops_are_exact");
    let r = ReferenceBackend::new();
    let x = rnd(&[3, 37, 45], 170, 1.0);
    let y = rnd(&[3, 11, 45], 171, 1.0);
    let (got, want) = both!(g, &r, |be| {
        let xt = be.upload(&x).unwrap();
        be.download(&be.transpose_last2(&xt).unwrap()).unwrap()
    });
    check("transpose_last2", Op::Layout, Lane::F16, &got, &want);
    for (dim, start, len) in [(0, 1, 2), (1, 5, 20), (2, 44, 1), (2, 3, 17)] {
        let (got, want) = both!(g, &r, |be| {
            let xt = be.upload(&x).unwrap();
            be.download(&be.slice(&xt, dim, start, len).unwrap())
                .unwrap()
        });
        check(
            &format!("slice dim {dim} [{start}+{len}]"),
            Op::Layout,
            Lane::F16,
            &got,
            &want,
        );
    }
    let (got, want) = both!(g, &r, |be| {
        let (xt, yt) = (be.upload(&x).unwrap(), be.upload(&y).unwrap());
        be.download(&be.concat(&[&xt, &yt, &xt], 1).unwrap())
            .unwrap()
    });
    check("concat dim 1", Op::Layout, Lane::F16, &got, &want);
    let z = rnd(&[3, 37, 7], 172, 1.0);
    let (got, want) = both!(g, &r, |be| {
        let (xt, zt) = (be.upload(&x).unwrap(), be.upload(&z).unwrap());
        be.download(&be.concat(&[&zt, &xt], 2).unwrap()).unwrap()
    });
    check("concat last dim", Op::Layout, Lane::F16, &got, &want);
    let (got, want) = both!(g, &r, |be| {
        let mut xt = be.upload(&x).unwrap();
        let yt = be.upload(&y).unwrap();
        be.write_rows(&mut xt, &yt, 13).unwrap();
        be.download(&xt).unwrap()
    });
    check("write_rows", Op::Layout, Lane::F16, &got, &want);
    let (got, want) = both!(g, &r, |be| {
        let xt = be.upload(&x).unwrap();
        be.download(&be.gather_batch(&xt, &[2, 0, 2, 1]).unwrap())
            .unwrap()
    });
    check("gather_batch", Op::Layout, Lane::F16, &got, &want);
    // 16-byte aligned shapes take the vector copy path
    let a = rnd(&[2, 8, 64], 174, 1.0);
    let c = rnd(&[2, 3, 64], 175, 1.0);
    let (got, want) = both!(g, &r, |be| {
        let at = be.upload(&a).unwrap();
        be.download(&be.slice(&at, 2, 16, 32).unwrap()).unwrap()
    });
    check("slice aligned", Op::Layout, Lane::F16, &got, &want);
    let (got, want) = both!(g, &r, |be| {
        let mut at = be.upload(&a).unwrap();
        let ct = be.upload(&c).unwrap();
        be.write_rows(&mut at, &ct, 4).unwrap();
        let cat = be.concat(&[&at, &at], 2).unwrap();
        be.download(&cat).unwrap()
    });
    check(
        "write_rows + concat aligned",
        Op::Layout,
        Lane::F16,
        &got,
        &want,
    );
    let table = rnd(&[51, 33], 173, 1.0);
    let (got, want) = both!(g, &r, |be| {
        let tt = be.upload(&table).unwrap();
        be.download(&be.gather_rows(&tt, &[50, 0, 7, 7, 13]).unwrap())
            .unwrap()
    });
    check("gather_rows", Op::Layout, Lane::F16, &got, &want);
    let (got, want) = both!(g, &r, |be| {
        let xt = be.upload(&x).unwrap();
        let rs = be.reshape(&xt, &[111, 45]).unwrap();
        assert_eq!(rs.shape(), &[111, 45]);
        be.download(&rs).unwrap()
    });
    check("reshape", Op::Layout, Lane::F16, &got, &want);
}

#[test]
fn convolutions_direct() {
    let (g, _serial) = require_gpu!("convolutions_direct");
    let r = ReferenceBackend::new();
    for (i, &(b, t, c, kw, s, pd)) in [
        (1, 20, 8, 3, 1, 1),
        (2, 33, 17, 31, 1, 15),
        (1, 12, 5, 4, 2, 0),
    ]
    .iter()
    .enumerate()
    {
        let x = rnd(&[b, t, c], 180 + i as u64, 1.0);
        let w = rnd(&[c, kw], 190 + i as u64, 0.5);
        let bias = rnd(&[c], 200 + i as u64, 0.5);
        let (got, want) = both!(g, &r, |be| {
            let (xt, wt, bt) = (
                be.upload(&x).unwrap(),
                be.upload(&w).unwrap(),
                be.upload(&bias).unwrap(),
            );
            be.download(&be.depthwise_conv1d(&xt, &wt, Some(&bt), s, pd).unwrap())
                .unwrap()
        });
        check(
            &format!("depthwise_conv1d b{b} t{t} c{c} k{kw} s{s} p{pd}"),
            Op::DepthwiseConv1d,
            Lane::F16,
            &got,
            &want,
        );
    }
    // (B, C_in, H, W, C_out, k, stride, pad, groups)
    for (i, &(b, ci, h, w, co, k, s, pd, gr)) in [
        (1, 1, 20, 16, 4, 3, 2, 1, 1),
        (2, 4, 9, 11, 6, 3, 1, 1, 2),
        (1, 6, 8, 8, 6, 3, 2, 1, 6),
    ]
    .iter()
    .enumerate()
    {
        let x = rnd(&[b, ci, h, w], 210 + i as u64, 1.0);
        let wt = rnd(&[co, ci / gr, k, k], 220 + i as u64, 0.5);
        let bias = rnd(&[co], 230 + i as u64, 0.5);
        let p = Conv2dParams {
            kernel: (k, k),
            stride: (s, s),
            padding: (pd, pd),
            groups: gr,
        };
        let (got, want) = both!(g, &r, |be| {
            let (xt, wtt, bt) = (
                be.upload(&x).unwrap(),
                be.upload(&wt).unwrap(),
                be.upload(&bias).unwrap(),
            );
            be.download(&be.conv2d(&xt, &wtt, Some(&bt), p).unwrap())
                .unwrap()
        });
        check(
            &format!("conv2d case {i}"),
            Op::Conv2d,
            Lane::F16,
            &got,
            &want,
        );
    }
}

#[test]
fn lstm_cell_default_composition() {
    let (g, _serial) = require_gpu!("lstm_cell_default_composition");
    let r = ReferenceBackend::new();
    let (bsz, inp, hid) = (3, 20, 16);
    let x = rnd(&[bsz, inp], 240, 1.0);
    let h = rnd(&[bsz, hid], 241, 1.0);
    let c = rnd(&[bsz, hid], 242, 1.0);
    let wih = rnd(&[4 * hid, inp], 243, 0.3);
    let whh = rnd(&[4 * hid, hid], 244, 0.3);
    let bias = rnd(&[4 * hid], 245, 0.3);
    let (got, want) = both!(g, &r, |be| {
        let (xt, ht, ct, bt) = (
            be.upload(&x).unwrap(),
            be.upload(&h).unwrap(),
            be.upload(&c).unwrap(),
            be.upload(&bias).unwrap(),
        );
        let (wi, wh) = (
            be.weight(&wih, Lane::F16).unwrap(),
            be.weight(&whh, Lane::F16).unwrap(),
        );
        let (h2, _c2) = be.lstm_cell(&xt, &ht, &ct, &wi, &wh, Some(&bt)).unwrap();
        be.download(&h2).unwrap()
    });
    check(
        "lstm_cell h' (f16 weights)",
        Op::Linear,
        Lane::F16,
        &got,
        &want,
    );
}

#[test]
fn prepared_inputs_follow_in_place_writes() {
    let (g, _serial) = require_gpu!("prepared_inputs_follow_in_place_writes");
    let r = ReferenceBackend::new();
    let x = rnd(&[1, 40, 64], 300, 1.0);
    let w1 = rnd(&[24, 64], 301, 0.125);
    let w2 = rnd(&[40, 64], 302, 0.125);
    let rows = rnd(&[1, 5, 64], 303, 1.0);
    let x2 = rnd(&[1, 40, 64], 304, 1.0);
    for lane in LANES {
        // two weights over one input (the second reuses the converted input), then the input
        // changes in place twice; every result must follow the current contents
        let (got, want) = both!(g, &r, |be| {
            let mut xt = be.upload(&x).unwrap();
            let (a, b) = (be.weight(&w1, lane).unwrap(), be.weight(&w2, lane).unwrap());
            let y1 = be.linear(&xt, &a, None).unwrap();
            let y2 = be.linear(&xt, &b, None).unwrap();
            be.write_rows(&mut xt, &be.upload(&rows).unwrap(), 10)
                .unwrap();
            let y3 = be.linear(&xt, &a, None).unwrap();
            let y4 = be.linear(&xt, &b, None).unwrap();
            let parts: Vec<_> = [y1, y2, y3, y4]
                .into_iter()
                .map(|y| be.download(&y).unwrap().data)
                .collect();
            HostTensor::new(
                vec![parts.iter().map(|p| p.len()).sum::<usize>()],
                parts.concat(),
            )
            .unwrap()
        });
        check(
            &format!("prepared input across write_rows ({lane})"),
            Op::Linear,
            lane,
            &got,
            &want,
        );
        let mut xt = g.upload(&x).unwrap();
        let a = g.weight(&w1, lane).unwrap();
        let before = g.download(&g.linear(&xt, &a, None).unwrap()).unwrap();
        g.write_host(&mut xt, &x2).unwrap();
        let after = g.download(&g.linear(&xt, &a, None).unwrap()).unwrap();
        let fresh = g
            .download(&g.linear(&g.upload(&x2).unwrap(), &a, None).unwrap())
            .unwrap();
        assert_ne!(before.data, after.data, "{lane}: write_host not seen");
        assert_eq!(
            after.data, fresh.data,
            "{lane}: stale prepared input after write_host"
        );
    }
}

/// `attention` of one query row per sequence (a decoder step's self-attention with its
/// parameters on the host; the step kernels run the same `attn_one_*` code) against the CPU
/// reference: key counts from one to the step caches' 511 (eight key passes per round and
/// more), head sizes that idle lanes (4, 20, 100) or use them all (32, 64, 128), batches of
/// beams, causal (which one row ignores) and a masked tail. f32 throughout, so the CPU's f32
/// attention bar holds it.
#[test]
fn attention_one_row_matches_reference() {
    let (g, _serial) = require_gpu!("attention_one_row_matches_reference");
    let r = ReferenceBackend::new();
    let tol = common::tol_for(Op::Attention, Lane::F32, "cpu");
    // (B, Tk, H, Dh, kv_len, causal)
    let cases = [
        (1, 448, 20, 64, Some(1), true),
        (1, 448, 20, 64, Some(23), true),
        (5, 448, 6, 64, Some(64), true),
        (5, 448, 6, 64, Some(65), true),
        (2, 511, 8, 64, Some(511), true),
        (3, 40, 3, 32, None, false),
        (1, 300, 2, 128, Some(257), false),
        (2, 50, 5, 20, Some(33), true),
        (4, 17, 7, 4, None, true),
        (1, 90, 2, 100, Some(90), false),
    ];
    for (i, &(b, tk, h, d, kv, causal)) in cases.iter().enumerate() {
        let q = rnd(&[b, 1, h * d], 400 + i as u64, 1.0);
        let k = rnd(&[b, tk, h * d], 410 + i as u64, 1.0);
        let v = rnd(&[b, tk, h * d], 420 + i as u64, 1.0);
        let p = AttnParams {
            n_heads: h,
            scale: 1.0 / (d as f32).sqrt(),
            kv_len: kv,
            causal,
        };
        let (got, want) = both!(g, &r, |be| {
            let (qt, kt, vt) = (
                be.upload(&q).unwrap(),
                be.upload(&k).unwrap(),
                be.upload(&v).unwrap(),
            );
            be.download(&be.attention(&qt, &kt, &vt, &p).unwrap())
                .unwrap()
        });
        common::check_with(
            &format!("attention one row {:?}", cases[i]),
            tol,
            &got,
            &want,
        );
    }
}

/// The decoder's split cross-attention (`attention_decode`: key chunks per block, then a
/// combine) against the reference, at the shapes the decoders give it and awkward ones: a
/// masked tail (`kv_len`), one key, head sizes that leave lanes of a key group idle (4, 20) and
/// use every lane (128), beams, batches and many (row, head) pairs. The kernel is f32 throughout (only its summation
/// order differs from the reference), so it is held to the CPU's f32 attention bar, not the
/// tensor-core one: a dropped or doubled key chunk moves the output far past it.
#[test]
fn attention_decode_matches_reference() {
    let (g, _serial) = require_gpu!("attention_decode_matches_reference");
    let r = ReferenceBackend::new();
    let tol = common::tol_for(Op::Attention, Lane::F32, "cpu");
    // (B, Tq, Tk, H, Dh, kv_len)
    let cases = [
        (1, 1, 1500, 20, 64, None),
        (1, 5, 1500, 6, 64, None),
        (2, 3, 77, 4, 64, Some(70)),
        (1, 2, 130, 2, 128, None),
        (3, 1, 64, 3, 32, None),
        (1, 1, 65, 2, 20, None),
        (1, 16, 200, 1, 128, Some(129)),
        (1, 1, 8, 2, 64, Some(1)),
        (64, 16, 100, 17, 4, None),
    ];
    for (i, &(b, tq, tk, h, d, kv)) in cases.iter().enumerate() {
        let q = rnd(&[b, tq, h * d], 300 + i as u64, 1.0);
        let k = rnd(&[b, tk, h * d], 310 + i as u64, 1.0);
        let v = rnd(&[b, tk, h * d], 320 + i as u64, 1.0);
        let p = AttnParams {
            n_heads: h,
            scale: 1.0 / (d as f32).sqrt(),
            kv_len: kv,
            causal: false,
        };
        let (got, want) = both!(g, &r, |be| {
            let (qt, kt, vt) = (
                be.upload(&q).unwrap(),
                be.upload(&k).unwrap(),
                be.upload(&v).unwrap(),
            );
            be.download(&be.attention_decode(&qt, &kt, &vt, &p).unwrap())
                .unwrap()
        });
        common::check_with(
            &format!("attention_decode {:?}", cases[i]),
            tol,
            &got,
            &want,
        );
    }
}
