//! f16 cross K/V (`Backend::compact_copy` with `STAPES_CUDA_CROSS_F16=1`, step.rs): the split
//! decoder cross-attention over f16 K/V (`attn_split_kv16`) gives the bits of the f32 kernel
//! over the same values rounded to f16 (the kernels differ only in how K/V are loaded).

mod common;

use half::f16;
use stapes_core::{AttnParams, Backend, HostTensor};

fn rounded(t: &HostTensor) -> HostTensor {
    let data = t.data.iter().map(|x| f16::from_f32(*x).to_f32()).collect();
    HostTensor::new(t.shape.clone(), data).expect("same shape")
}

#[test]
fn split_attention_over_f16_kv_equals_f32_over_rounded_values() {
    // read once per process, before the first compact_copy
    std::env::set_var("STAPES_CUDA_CROSS_F16", "1");
    let (g, _serial) = require_gpu!("split_attention_over_f16_kv_equals_f32_over_rounded_values");
    // (batch, query rows, keys, heads, head size): turbo's and tiny's windows, beams, odd sizes
    let shapes = [
        (1, 1, 1500, 20, 64),
        (1, 5, 1500, 6, 64),
        (2, 3, 77, 4, 64),
        (1, 2, 130, 2, 128),
        (3, 1, 64, 3, 32),
    ];
    for (i, &(b, tq, tk, h, d)) in shapes.iter().enumerate() {
        let s = i as u64 * 10;
        let q = HostTensor::random(vec![b, tq, h * d], s + 1, 1.0);
        let k = HostTensor::random(vec![b, tk, h * d], s + 2, 1.0);
        let v = HostTensor::random(vec![b, tk, h * d], s + 3, 1.0);
        let p = AttnParams {
            n_heads: h,
            scale: 1.0 / (d as f32).sqrt(),
            kv_len: None,
            causal: false,
        };
        let qd = g.upload(&q).expect("q");
        let k16 = g.compact_copy(&g.upload(&k).expect("k")).expect("k16");
        let v16 = g.compact_copy(&g.upload(&v).expect("v")).expect("v16");
        assert!(k16.is_f16() && v16.is_f16(), "compact_copy kept f32");
        let got = g
            .download(&g.attention_decode(&qd, &k16, &v16, &p).expect("f16 K/V"))
            .expect("download");
        let kr = g.upload(&rounded(&k)).expect("k rounded");
        let vr = g.upload(&rounded(&v)).expect("v rounded");
        let want = g
            .download(&g.attention_decode(&qd, &kr, &vr, &p).expect("f32 K/V"))
            .expect("download");
        let bad = (0..want.data.len())
            .filter(|&j| got.data[j].to_bits() != want.data[j].to_bits())
            .count();
        assert_eq!(
            bad,
            0,
            "{:?}: {bad} of {} values differ",
            (b, tq, tk, h, d),
            want.data.len()
        );
        // the compact copy holds exactly the rounded values
        assert_eq!(g.download(&k16).expect("k16").data, rounded(&k).data);
        eprintln!("ok   {:?}", (b, tq, tk, h, d));
    }
}

/// `linear_compact` (the cross K/V projections) writes f16 from the GEMM itself: f16 storage, the
/// values of `compact_copy(linear(..))` within the f16-output Linear rows (both round the same
/// accumulators once to f16; the bias goes in as f16 there), both lanes, with and without a
/// bias, from f32 and from f16 inputs.
#[test]
fn linear_compact_is_the_rounded_linear() {
    std::env::set_var("STAPES_CUDA_CROSS_F16", "1");
    let (g, _serial) = require_gpu!("linear_compact_is_the_rounded_linear");
    let tol = common::tol_for(
        stapes_core::tolerance::Op::Linear,
        stapes_core::Lane::F16,
        "cuda-f16act",
    );
    // (rows, K, N): tiny's and turbo's cross projections, a short window, odd sizes
    for (i, &(m, k, n)) in [
        (1500, 384, 384),
        (1500, 1280, 1280),
        (300, 512, 512),
        (37, 96, 40),
    ]
    .iter()
    .enumerate()
    {
        let s = 100 + 10 * i as u64;
        let x = HostTensor::random(vec![1, m, k], s, 1.0);
        let wh = HostTensor::random(vec![n, k], s + 1, 1.0 / (k as f32).sqrt());
        let bias = g
            .upload(&HostTensor::random(vec![n], s + 2, 0.5))
            .expect("bias");
        for lane in [stapes_core::Lane::F16, stapes_core::Lane::Q8] {
            let w = g.weight(&wh, lane).expect("weight");
            let xd = g.upload(&x).expect("x");
            for b in [None, Some(&bias)] {
                let what = format!("m{m} k{k} n{n} {lane} bias {}", b.is_some());
                let got = g.linear_compact(&xd, &w, b).expect("linear_compact");
                assert!(got.is_f16(), "{what}: not in f16 storage");
                let want = g
                    .compact_copy(&g.linear(&xd, &w, b).expect("linear"))
                    .expect("compact");
                let (got, want) = (g.download(&got).unwrap(), g.download(&want).unwrap());
                common::check_with(&what, tol, &got, &want);
            }
        }
    }
}
