//! The FastConformer ops' composed defaults (`glu_depthwise_act`, `rel_attention_inputs`,
//! `rel_attention`) on `ReferenceBackend` against the formulas written out element by element
//! here (GLU, zeroed padding, "same" depthwise conv, SiLU; Transformer-XL scores with the
//! position of distance i − j at row T−1−i+j), on awkward shapes. These defaults are the
//! specification the GPU kernels are tested against.

use stapes_core::backend::{rel_attention_composed, RelAttnParams};
use stapes_core::reference::ReferenceBackend;
use stapes_core::{Activation, Backend, HostTensor};

fn rnd(shape: &[usize], seed: u64, scale: f32) -> HostTensor {
    HostTensor::random(shape.to_vec(), seed, scale)
}

fn close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let range = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * range.max(1e-3),
            "{what}: element {i}: {g} vs {w} (range {range})"
        );
    }
}

/// Sequence `b` of `bs` keeps its first `t - b·t/(2·bs)` frames.
fn lengths(bs: usize, t: usize) -> Vec<usize> {
    (0..bs).map(|b| t - b * t / (2 * bs)).collect()
}

fn keep_tensor(lens: &[usize], t: usize) -> HostTensor {
    let data = lens
        .iter()
        .flat_map(|&n| (0..t).map(move |j| if j < n { 1.0 } else { 0.0 }))
        .collect();
    HostTensor::new(vec![lens.len(), t, 1], data).expect("keep")
}

#[test]
fn glu_depthwise_act_default_is_the_formula() {
    let r = ReferenceBackend::new();
    // (B, T, C, K, masked): odd and even K, T shorter than K, one frame
    for (case, &(bs, t, c, k, masked)) in [
        (1usize, 9usize, 5usize, 3usize, false),
        (2, 11, 4, 4, true),
        (3, 2, 3, 5, true),
        (1, 1, 2, 1, false),
    ]
    .iter()
    .enumerate()
    {
        let x = rnd(&[bs, t, 2 * c], 10 + case as u64, 2.0);
        let w = rnd(&[c, k], 20 + case as u64, 0.5);
        let bias = rnd(&[c], 30 + case as u64, 0.5);
        let lens = if masked { lengths(bs, t) } else { vec![t; bs] };
        let keep = keep_tensor(&lens, t);
        let pad = (k - 1) / 2;
        let t_out = t + 2 * pad + 1 - k;
        let mut want = vec![0f32; bs * t_out * c];
        for b in 0..bs {
            for to in 0..t_out {
                for ch in 0..c {
                    let mut acc = bias.data[ch];
                    for kk in 0..k {
                        let ti = (to + kk) as isize - pad as isize;
                        if ti < 0 || ti as usize >= lens[b] {
                            continue; // zero padding, and frames past the sequence zeroed
                        }
                        let row = (b * t + ti as usize) * 2 * c;
                        let (a, g) = (x.data[row + ch], x.data[row + c + ch]);
                        acc += w.data[ch * k + kk] * a / (1.0 + (-g).exp());
                    }
                    want[(b * t_out + to) * c + ch] = acc / (1.0 + (-acc).exp());
                }
            }
        }
        let kt = masked.then(|| r.upload(&keep).unwrap());
        let y = r
            .glu_depthwise_act(
                &r.upload(&x).unwrap(),
                kt.as_ref(),
                &r.upload(&w).unwrap(),
                Some(&r.upload(&bias).unwrap()),
                Activation::Silu,
            )
            .unwrap();
        let got = r.download(&y).unwrap();
        assert_eq!(got.shape, vec![bs, t_out, c]);
        close(
            &format!("glu_depthwise_act case {case}"),
            &got.data,
            &want,
            1e-5,
        );
    }
}

/// Transformer-XL attention written out: for head h, query i, key j (kept),
/// score = ((q_i + u)·k_j + (q_i + v)·pos[T−1−i+j])·scale, softmax over j, · v_j.
#[allow(clippy::too_many_arguments)]
fn rel_attention_formula(
    qkv: &HostTensor,
    pos: &HostTensor,
    bu: &HostTensor,
    bv: &HostTensor,
    lens: &[usize],
    t: usize,
    heads: usize,
    scale: f32,
) -> Vec<f32> {
    let bs = lens.len();
    let c = qkv.shape[2] / 3;
    let dh = c / heads;
    let at = |b: usize, i: usize, part: usize, h: usize, d: usize| {
        qkv.data[(b * t + i) * 3 * c + part * c + h * dh + d]
    };
    let mut out = vec![0f32; bs * t * c];
    for b in 0..bs {
        for h in 0..heads {
            for i in 0..t {
                let mut scores = vec![f32::NEG_INFINITY; t];
                for (j, s) in scores.iter_mut().enumerate().take(lens[b]) {
                    let (mut ac, mut bd) = (0f32, 0f32);
                    let prow = t - 1 - i + j;
                    for d in 0..dh {
                        let q = at(b, i, 0, h, d);
                        ac += (q + bu.data[h * dh + d]) * at(b, j, 1, h, d);
                        bd += (q + bv.data[h * dh + d]) * pos.data[prow * c + h * dh + d];
                    }
                    *s = (ac + bd) * scale;
                }
                let m = scores.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
                let e: Vec<f32> = scores.iter().map(|&s| (s - m).exp()).collect();
                let sum: f32 = e.iter().sum();
                for d in 0..dh {
                    let v: f32 = (0..t).map(|j| e[j] / sum * at(b, j, 2, h, d)).sum();
                    out[(b * t + i) * c + h * dh + d] = v;
                }
            }
        }
    }
    out
}

#[test]
fn rel_attention_default_is_the_formula_for_any_query_block() {
    let r = ReferenceBackend::new();
    // (B, T, H, Dh, masked)
    for (case, &(bs, t, heads, dh, masked)) in [
        (1usize, 1usize, 1usize, 3usize, false),
        (1, 7, 2, 4, false),
        (2, 9, 3, 2, true),
        (3, 5, 1, 8, true),
    ]
    .iter()
    .enumerate()
    {
        let c = heads * dh;
        let qkv = rnd(&[bs, t, 3 * c], 40 + case as u64, 1.0);
        let pos = rnd(&[1, 2 * t - 1, c], 50 + case as u64, 1.0);
        let bu = rnd(&[c], 60 + case as u64, 0.5);
        let bv = rnd(&[c], 70 + case as u64, 0.5);
        let lens = if masked { lengths(bs, t) } else { vec![t; bs] };
        let scale = 1.0 / (dh as f32).sqrt();
        let want = rel_attention_formula(&qkv, &pos, &bu, &bv, &lens, t, heads, scale);
        let keep = masked.then(|| r.upload(&keep_tensor(&lens, t)).unwrap());
        let (x, p, u, v) = (
            r.upload(&qkv).unwrap(),
            r.upload(&pos).unwrap(),
            r.upload(&bu).unwrap(),
            r.upload(&bv).unwrap(),
        );
        for query_block in [1, 2, 3, t, t + 5] {
            let params = RelAttnParams {
                heads,
                scale,
                query_block,
            };
            let y = r
                .rel_attention(&x, &p, &u, &v, keep.as_ref(), &params)
                .unwrap();
            let got = r.download(&y).unwrap();
            assert_eq!(got.shape, vec![bs, t, c]);
            close(
                &format!("rel_attention case {case} query block {query_block}"),
                &got.data,
                &want,
                1e-5,
            );
        }
    }
}

#[test]
fn rel_attention_refuses_positions_that_are_not_2t_minus_1() {
    let r = ReferenceBackend::new();
    let x = r.upload(&HostTensor::zeros(vec![1, 4, 12])).unwrap();
    let u = r.upload(&HostTensor::zeros(vec![4])).unwrap();
    let params = RelAttnParams {
        heads: 2,
        scale: 1.0,
        query_block: 4,
    };
    for p in [6usize, 8] {
        let pos = r.upload(&HostTensor::zeros(vec![1, p, 4])).unwrap();
        match rel_attention_composed(&r, &x, &pos, &u, &u, None, &params) {
            Err(stapes_core::Error::Shape { op, .. }) => assert_eq!(op, "rel_attention"),
            other => panic!("{p} positions for 4 frames: expected a shape error, got {other:?}"),
        }
    }
}

/// `rotary_half` (GigaAM's rotation) against its formula: per head of `dh`, element `j` of the
/// first half is `x_j·cos_j − x_{j+dh/2}·sin_j`, of the second `x_j·cos_j + x_{j−dh/2}·sin_j`,
/// the products and the sum in the same order, so the default must match bit for bit.
#[test]
fn rotary_half_matches_its_formula() {
    let b = ReferenceBackend::new();
    // (batch, frames, heads, head size): one head, odd frames, a head of 2, GigaAM's 48
    for (i, &(bs, t, h, dh)) in [
        (1, 1, 1, 2),
        (2, 7, 3, 4),
        (1, 33, 4, 48),
        (3, 5, 2, 16),
        (1, 2, 16, 6),
    ]
    .iter()
    .enumerate()
    {
        let c = h * dh;
        let x = rnd(&[bs, t, c], 900 + i as u64, 2.0);
        let cos = rnd(&[t, c], 950 + i as u64, 1.0);
        let sin = rnd(&[t, c], 970 + i as u64, 1.0);
        let up = |v: &HostTensor| b.upload(v).expect("upload");
        let got = b
            .rotary_half(&up(&x), &up(&cos), &up(&sin), dh)
            .and_then(|y| b.download(&y))
            .expect("rotary_half");
        let half = dh / 2;
        let mut want = vec![0f32; x.data.len()];
        for row in 0..bs * t {
            let tt = row % t;
            for head in 0..h {
                for j in 0..dh {
                    let at = row * c + head * dh + j;
                    let pair = if j < half { at + half } else { at - half };
                    let rot = if j < half {
                        -x.data[pair]
                    } else {
                        x.data[pair]
                    };
                    let k = tt * c + head * dh + j;
                    want[at] = x.data[at] * cos.data[k] + rot * sin.data[k];
                }
            }
        }
        assert_eq!(got.shape, x.shape, "case {i}: shape");
        assert_eq!(got.data, want, "case {i}: ({bs}, {t}, {h}×{dh})");
    }
    let bad = b.upload(&rnd(&[1, 2, 6], 1, 1.0)).expect("upload");
    let cs = b.upload(&rnd(&[2, 6], 2, 1.0)).expect("upload");
    assert!(b.rotary_half(&bad, &cs, &cs, 4).is_err(), "heads of 4 in 6");
    assert!(b.rotary_half(&bad, &cs, &cs, 3).is_err(), "odd head size");
}
