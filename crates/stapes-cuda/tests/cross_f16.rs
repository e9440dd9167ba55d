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
