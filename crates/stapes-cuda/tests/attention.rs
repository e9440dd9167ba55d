//! Attention with head size 64 on the `flash64_*` kernels (and their warpgroup-MMA form,
//! `awg64_*`, bit-identical to them on sm_90) and `attention_packed` against
//! `ReferenceBackend` (f32 inputs under the table's `cuda` row, f16 inputs inside a chain under
//! `cuda-f16act`), every kernel variant bit-identical to the others, packed bit-identical to
//! unpacked, a planted fault that the comparison must catch, the split-keys form (2-4 key
//! splits merged by a combine kernel) against the reference and the unsplit kernel, eagerly and
//! replayed from a CUDA graph, and (with `--nocapture`) the timing of the turbo / base / tiny
//! shapes for the ledger.
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{check_with, rnd, round16, tol_for};
use cudarc::driver::sys::CUevent_flags;
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::{compare, Op};
use stapes_core::{AttnParams, Backend, HostTensor, Lane};
use stapes_cuda::{CudaBackend, CudaTensor};

/// (B, Tq, Tk, heads, kv_len, causal); head size 64.
type Case = (usize, usize, usize, usize, Option<usize>, bool);

const D: usize = 64;

fn params(c: &Case) -> AttnParams {
    AttnParams {
        n_heads: c.3,
        scale: 1.0 / (D as f32).sqrt(),
        kv_len: c.4,
        causal: c.5,
    }
}

/// q, k, v of a case: q scaled up so the softmax is peaked (scores of std ≈ 1), not flat.
fn inputs(c: &Case, seed: u64) -> [HostTensor; 3] {
    let (b, tq, tk, h) = (c.0, c.1, c.2, c.3);
    [
        rnd(&[b, tq, h * D], seed, 3.0),
        rnd(&[b, tk, h * D], seed + 1, 1.0),
        rnd(&[b, tk, h * D], seed + 2, 1.0),
    ]
}

/// Head `h`'s columns of `(B, T, H·Dh)`.
fn head_cols(t: &HostTensor, h: usize, heads: usize) -> HostTensor {
    let c = t.shape[2];
    let d = c / heads;
    let data = t
        .data
        .chunks(c)
        .flat_map(|row| row[h * d..(h + 1) * d].iter().copied())
        .collect();
    HostTensor::new(vec![t.shape[0], t.shape[1], d], data).expect("head shape")
}

/// `ReferenceBackend::attention`, one head per thread (heads are independent; the scalar
/// reference on 20 heads × 1500² would otherwise take most of a device round).
fn reference(q: &HostTensor, k: &HostTensor, v: &HostTensor, p: &AttnParams) -> HostTensor {
    let heads = p.n_heads;
    let per_head: Vec<HostTensor> = std::thread::scope(|s| {
        let jobs: Vec<_> = (0..heads)
            .map(|h| {
                s.spawn(move || {
                    let r = ReferenceBackend::new();
                    let up = |t: &HostTensor| r.upload(&head_cols(t, h, heads)).expect("upload");
                    let ph = AttnParams { n_heads: 1, ..*p };
                    let o = r
                        .attention(&up(q), &up(k), &up(v), &ph)
                        .expect("reference attention");
                    r.download(&o).expect("download")
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("reference thread"))
            .collect()
    });
    let (b, tq) = (q.shape[0], q.shape[1]);
    let d = per_head.first().map(|t| t.shape[2]).unwrap_or(0);
    let mut out = vec![0f32; b * tq * heads * d];
    for (h, t) in per_head.iter().enumerate() {
        for (r, row) in t.data.chunks(d.max(1)).enumerate() {
            out[r * heads * d + h * d..][..d].copy_from_slice(row);
        }
    }
    HostTensor::new(vec![b, tq, heads * d], out).expect("reference shape")
}

/// Runs `f` eagerly inside a fresh encoder chain with f16 activations: the inputs are uploaded
/// and turned f16 by an identity `affine` first. Returns the outputs downloaded, each with
/// whether it was f16.
fn in_f16_chain(
    g: &CudaBackend,
    inputs: &[&HostTensor],
    f: &mut dyn FnMut(&CudaBackend, &[CudaTensor]) -> Vec<CudaTensor>,
) -> Vec<(HostTensor, bool)> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let ups: Vec<CudaTensor> = inputs.iter().map(|h| g.upload(h).unwrap()).collect();
    g.set_f16_activations(true);
    // a fresh key: the chain's first (eager) run, so host transfers and events are allowed
    let key = format!("attn-test-encoder/{}", N.fetch_add(1, Ordering::Relaxed));
    let outs = g
        .chain(&key, &mut |b| {
            let xs: Vec<CudaTensor> = ups
                .iter()
                .map(|t| b.affine(t, 1.0, 0.0))
                .collect::<stapes_core::Result<_>>()?;
            assert!(xs.iter().all(|x| x.is_f16()), "affine in an f16 chain");
            Ok(f(b, &xs))
        })
        .unwrap();
    outs.iter()
        .map(|o| (g.download(o).unwrap(), o.is_f16()))
        .collect()
}

/// Puts the shape-picked kernel and split back when a test ends, also by panic.
struct Auto<'a>(&'a CudaBackend);
impl Drop for Auto<'_> {
    fn drop(&mut self) {
        let _ = self.0.force_flash64_kernel(None);
        let _ = self.0.force_attn_split(None);
    }
}

fn bits(t: &HostTensor) -> Vec<u32> {
    t.data.iter().map(|v| v.to_bits()).collect()
}

fn uses_flash64(c: &Case) -> bool {
    c.1 >= 16
}

/// Shapes: T = 1 (row kernel), 17, 63, 65 (a masked tail tile), 1500 and 3000 keys; 1, 2, 3, 6
/// and 20 heads; batch 1, 2 and 3; a KV cache (`kv_len`) and causal masks.
const CASES: [Case; 10] = [
    (1, 1, 1, 6, None, false),
    (3, 17, 17, 1, None, false),
    (1, 63, 63, 20, None, false),
    (3, 65, 65, 6, None, false),
    (1, 1500, 1500, 6, None, false),
    (1, 300, 3000, 2, None, false),
    (2, 65, 100, 3, Some(71), false),
    (1, 100, 100, 2, None, true),
    (1, 40, 130, 2, Some(120), true),
    (3, 16, 16, 1, None, true),
];

#[test]
fn flash64_f32_inputs_match_reference() {
    let (g, _serial) = require_gpu!("flash64_f32_inputs_match_reference");
    let _auto = Auto(g);
    let tol = tol_for(Op::Attention, Lane::F16, "cuda");
    for (i, c) in CASES.iter().enumerate() {
        let [q, k, v] = inputs(c, 10 * i as u64 + 1);
        let p = params(c);
        let want = reference(&q, &k, &v, &p);
        let qkv = [&q, &k, &v].map(|t| g.upload(t).unwrap());
        let what = format!("attention {c:?}");
        every_kernel_matches(g, &qkv, &p, &want, tol, &what, uses_flash64(c));
    }
}

/// `attention` of `qkv` under the shape-picked kernel and each forced flash64 variant: every
/// result within `tol` of `want`, and, where `same_bits`, the forced variants bit-identical to
/// one another (the shape-picked one may split the keys, which sums in another order).
fn every_kernel_matches(
    g: &CudaBackend,
    [qt, kt, vt]: &[CudaTensor; 3],
    p: &AttnParams,
    want: &HostTensor,
    tol: stapes_core::tolerance::Tolerance,
    what: &str,
    same_bits: bool,
) {
    let mut kernels = vec![None];
    kernels.extend(CudaBackend::flash64_kernels().into_iter().map(Some));
    let mut first: Option<Vec<u32>> = None;
    for kn in &kernels {
        g.force_flash64_kernel(*kn).unwrap();
        let got = g.download(&g.attention(qt, kt, vt, p).unwrap()).unwrap();
        check_with(&format!("{what}, kernel {kn:?}"), tol, &got, want);
        if kn.is_some() && same_bits {
            match &first {
                None => first = Some(bits(&got)),
                Some(b) => assert!(
                    *b == bits(&got),
                    "{what}: kernel {kn:?} differs from {:?}",
                    kernels[1]
                ),
            }
        }
    }
    g.force_flash64_kernel(None).unwrap();
}

#[test]
fn flash64_f16_inputs_in_a_chain() {
    let (g, _serial) = require_gpu!("flash64_f16_inputs_in_a_chain");
    let _auto = Auto(g);
    let tol = tol_for(Op::Attention, Lane::F16, "cuda-f16act");
    // the turbo encoder's self-attention, then smaller and masked shapes
    let cases: [Case; 6] = [
        (1, 1500, 1500, 20, None, false),
        (3, 65, 65, 6, None, false),
        (2, 17, 17, 1, None, false),
        (1, 1, 1, 8, None, false),
        (1, 300, 3000, 2, None, false),
        (1, 80, 100, 2, Some(90), true),
    ];
    for (i, c) in cases.iter().enumerate() {
        let [q, k, v] = inputs(c, 100 + 10 * i as u64);
        let p = params(c);
        let want = reference(&round16(&q), &round16(&k), &round16(&v), &p);
        for kn in [None, Some("flash64_w4m2s3"), Some("flash64_w4m1s2")] {
            g.force_flash64_kernel(kn).unwrap();
            let got = in_f16_chain(g, &[&q, &k, &v], &mut |b, t| {
                vec![b.attention(&t[0], &t[1], &t[2], &p).unwrap()]
            });
            assert!(got[0].1, "{c:?}: attention in an f16 chain writes f16");
            check_with(
                &format!("f16 attention {c:?} kernel {kn:?}"),
                tol,
                &got[0].0,
                &want,
            );
        }
    }
}

/// `(B, T, 3·H·64)` from q, k, v `(B, T, H·64)` each.
fn stack(q: &HostTensor, k: &HostTensor, v: &HostTensor) -> HostTensor {
    let c = q.shape[2];
    let data = q
        .data
        .chunks(c)
        .zip(k.data.chunks(c))
        .zip(v.data.chunks(c))
        .flat_map(|((a, b), d)| a.iter().chain(b).chain(d).copied())
        .collect();
    HostTensor::new(vec![q.shape[0], q.shape[1], 3 * c], data).expect("stack shape")
}

#[test]
fn packed_equals_unpacked() {
    let (g, _serial) = require_gpu!("packed_equals_unpacked");
    let _auto = Auto(g);
    let tol32 = tol_for(Op::Attention, Lane::F16, "cuda");
    let tol16 = tol_for(Op::Attention, Lane::F16, "cuda-f16act");
    // self-attention shapes (Tq = Tk); T = 8 goes to the row kernel through the sliced default
    let cases: [Case; 5] = [
        (1, 1500, 1500, 20, None, false),
        (3, 65, 65, 6, None, false),
        (2, 17, 17, 1, None, false),
        (1, 8, 8, 2, None, false),
        (1, 70, 70, 3, Some(70), true),
    ];
    for (i, c) in cases.iter().enumerate() {
        let [q, k, v] = inputs(c, 200 + 10 * i as u64);
        let qkv = stack(&q, &k, &v);
        let p = params(c);
        // f32 activations (eager)
        let packed = g
            .download(&g.attention_packed(&g.upload(&qkv).unwrap(), &p).unwrap())
            .unwrap();
        let (qt, kt, vt) = (
            g.upload(&q).unwrap(),
            g.upload(&k).unwrap(),
            g.upload(&v).unwrap(),
        );
        let unpacked = g
            .download(&g.attention(&qt, &kt, &vt, &p).unwrap())
            .unwrap();
        assert!(
            bits(&packed) == bits(&unpacked),
            "{c:?}: f32 packed differs from unpacked"
        );
        let want = reference(&q, &k, &v, &p);
        check_with(&format!("packed f32 {c:?}"), tol32, &packed, &want);
        // f16 activations inside a chain
        let got = in_f16_chain(g, &[&qkv, &q, &k, &v], &mut |b, t| {
            vec![
                b.attention_packed(&t[0], &p).unwrap(),
                b.attention(&t[1], &t[2], &t[3], &p).unwrap(),
            ]
        });
        assert!(got[0].1 && got[1].1, "{c:?}: f16 in, f16 out");
        assert!(
            bits(&got[0].0) == bits(&got[1].0),
            "{c:?}: f16 packed differs from unpacked"
        );
        let want16 = reference(&round16(&q), &round16(&k), &round16(&v), &p);
        check_with(&format!("packed f16 {c:?}"), tol16, &got[0].0, &want16);
    }
    // head size 36: not a flash64 shape (whole 8-dim chunks only); the sliced path still
    // answers right
    let (b, t, h, d) = (2, 33, 2, 36);
    let q = rnd(&[b, t, h * d], 301, 2.0);
    let k = rnd(&[b, t, h * d], 302, 1.0);
    let v = rnd(&[b, t, h * d], 303, 1.0);
    let p = AttnParams {
        n_heads: h,
        scale: 1.0 / (d as f32).sqrt(),
        kv_len: None,
        causal: false,
    };
    let got = g
        .download(
            &g.attention_packed(&g.upload(&stack(&q, &k, &v)).unwrap(), &p)
                .unwrap(),
        )
        .unwrap();
    check_with(
        "packed head size 36",
        tol32,
        &got,
        &reference(&q, &k, &v, &p),
    );
    // a malformed packed tensor is a shape error, not a panic
    let bad = g.upload(&rnd(&[1, 4, 3 * 64 + 1], 1, 1.0)).unwrap();
    assert!(g.attention_packed(&bad, &p).is_err());
}

/// The comparison can fail: the kernel run with the tail tile's last key dropped (kv_len one
/// short, the off-by-one a tail mask invites) must miss the bar the right answer meets.
#[test]
fn planted_fault_fails_the_bar() {
    let (g, _serial) = require_gpu!("planted_fault_fails_the_bar");
    let _auto = Auto(g);
    let tol = tol_for(Op::Attention, Lane::F16, "cuda");
    let c: Case = (1, 65, 65, 6, None, false);
    let [q, k, v] = inputs(&c, 400);
    let p = params(&c);
    let want = reference(&q, &k, &v, &p);
    let (qt, kt, vt) = (
        g.upload(&q).unwrap(),
        g.upload(&k).unwrap(),
        g.upload(&v).unwrap(),
    );
    let right = g
        .download(&g.attention(&qt, &kt, &vt, &p).unwrap())
        .unwrap();
    assert!(compare(&right.data, &want.data, &tol).is_ok());
    let short = AttnParams {
        kv_len: Some(64),
        ..p
    };
    let fault = g
        .download(&g.attention(&qt, &kt, &vt, &short).unwrap())
        .unwrap();
    let r = compare(&fault.data, &want.data, &tol);
    eprintln!("planted fault (last key dropped): {r:?}");
    assert!(r.is_err(), "a dropped key passed the bar");
}

/// Median over 50 samples of (10 back-to-back calls) / 10, in µs, timed with CUDA events.
fn time_us(b: &CudaBackend, f: &mut dyn FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let ctx = b.context();
    let mut v: Vec<f64> = (0..50)
        .map(|_| {
            let e0 = ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .unwrap();
            let e1 = ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .unwrap();
            e0.record(b.stream()).unwrap();
            for _ in 0..10 {
                f();
            }
            e1.record(b.stream()).unwrap();
            e1.synchronize().unwrap();
            e0.elapsed_ms(&e1).unwrap() as f64 * 100.0
        })
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Prints µs and TFLOP/s per kernel for Whisper's encoder self-attention shapes, f16 in and
/// out as inside the encoder chain (no casts), and checks that the variants agree bit for bit.
#[test]
fn flash64_timing() {
    let (g, _serial) = require_gpu!("flash64_timing");
    let _auto = Auto(g);
    let mut kernels: Vec<&str> = vec!["auto", "legacy"];
    kernels.extend(CudaBackend::flash64_kernels());
    // the kernel comparison below is of the unsplit kernels; the split forms are timed after
    g.force_attn_split(Some(1)).unwrap();
    // (name, batch, heads)
    for (name, b, h) in [
        ("turbo", 1usize, 20usize),
        ("turbo batch 16", 16, 20),
        ("base", 1, 8),
        ("tiny", 1, 6),
    ] {
        let t = 1500;
        let c: Case = (b, t, t, h, None, false);
        let [q, k, v] = inputs(&c, 500);
        let qkv = stack(&q, &k, &v);
        let p = params(&c);
        let flops = 4.0 * (b * h * t * t * D) as f64;
        let mut lines = Vec::new();
        let outs = in_f16_chain(g, &[&q, &k, &v, &qkv], &mut |be, x| {
            let mut outs = Vec::new();
            for kn in &kernels {
                be.force_flash64_kernel(Some(kn)).unwrap();
                let us = time_us(be, &mut || {
                    be.attention(&x[0], &x[1], &x[2], &p).unwrap();
                });
                lines.push(format!(
                    "{name} (B {b}, {h} heads × {t}² × 64) {kn}: {us:.1} µs, {:.0} TFLOP/s",
                    flops / us / 1e6
                ));
                outs.push(be.attention(&x[0], &x[1], &x[2], &p).unwrap());
            }
            be.force_flash64_kernel(None).unwrap();
            // the warpgroup kernels (sm_90) against flash64_w4m2s2, same shapes and splits
            for wg in [true, false] {
                be.set_attn_wg(wg);
                let form = if wg { "awg64 where it runs" } else { "flash64" };
                be.force_attn_split(Some(1)).unwrap();
                let us = time_us(be, &mut || {
                    be.attention_packed(&x[3], &p).unwrap();
                });
                lines.push(format!(
                    "{name} (B {b}, {h} heads × {t}² × 64) packed, {form}, unsplit: {us:.1} µs, {:.0} TFLOP/s",
                    flops / us / 1e6
                ));
                // None: the shape's own choice (auto split)
                for ns in [None, Some(2), Some(3), Some(4), Some(6)] {
                    be.force_attn_split(ns).unwrap();
                    let us = time_us(be, &mut || {
                        be.attention_packed(&x[3], &p).unwrap();
                    });
                    let what = ns.map_or("auto".to_string(), |n| n.to_string());
                    lines.push(format!(
                        "{name} (B {b}, {h} heads × {t}² × 64) packed, {form}, split {what}: {us:.1} µs, {:.0} TFLOP/s",
                        flops / us / 1e6
                    ));
                }
            }
            be.set_attn_wg(true);
            be.force_attn_split(Some(1)).unwrap();
            outs
        });
        for l in &lines {
            println!("{l}");
        }
        // every flash64 kernel (after "auto" and "legacy") gives the same bits
        let first = bits(&outs[2].0);
        for (kn, o) in kernels.iter().zip(&outs).skip(3) {
            assert!(
                first == bits(&o.0),
                "{name}: {kn} differs from {}",
                kernels[2]
            );
        }
        assert!(
            bits(&outs[0].0) == first,
            "{name}: auto is not a flash64 kernel"
        );
    }
}

/// Awkward shapes for the split-keys form: one tile of keys (most splits empty), a masked tail
/// tile, tiny's and base's encoder self-attention, 3000 keys, heads 1 / 6 / 8, batch 1-3, a KV
/// cache (`kv_len`) and causal masks (splits past a block's last key see nothing).
const SPLIT_CASES: [Case; 9] = [
    (3, 17, 17, 1, None, false),
    (1, 65, 65, 6, None, false),
    (1, 1500, 1500, 6, None, false),
    (1, 1500, 1500, 8, None, false),
    (1, 300, 3000, 8, None, false),
    (2, 65, 100, 6, Some(71), false),
    (1, 100, 100, 1, None, true),
    (1, 40, 330, 6, Some(320), true),
    (2, 1500, 1500, 1, None, true),
];

/// Every split count against the reference (f32 in, and f16 in a chain) and against the
/// unsplit kernel on the same inputs, both within the attention bar of their lane.
#[test]
fn split_keys_match_reference_and_unsplit() {
    let (g, _serial) = require_gpu!("split_keys_match_reference_and_unsplit");
    let _auto = Auto(g);
    let tol32 = tol_for(Op::Attention, Lane::F16, "cuda");
    let tol16 = tol_for(Op::Attention, Lane::F16, "cuda-f16act");
    for (i, c) in SPLIT_CASES.iter().enumerate() {
        let [q, k, v] = inputs(c, 600 + 10 * i as u64);
        let p = params(c);
        let want = reference(&q, &k, &v, &p);
        let (qt, kt, vt) = (
            g.upload(&q).unwrap(),
            g.upload(&k).unwrap(),
            g.upload(&v).unwrap(),
        );
        g.force_attn_split(Some(1)).unwrap();
        let whole = g
            .download(&g.attention(&qt, &kt, &vt, &p).unwrap())
            .unwrap();
        check_with(&format!("unsplit {c:?}"), tol32, &whole, &want);
        let want16 = reference(&round16(&q), &round16(&k), &round16(&v), &p);
        for ns in [2, 3, 4] {
            g.force_attn_split(Some(ns)).unwrap();
            let got = g
                .download(&g.attention(&qt, &kt, &vt, &p).unwrap())
                .unwrap();
            check_with(&format!("split {ns} {c:?}"), tol32, &got, &want);
            check_with(&format!("split {ns} vs unsplit {c:?}"), tol32, &got, &whole);
            let got16 = in_f16_chain(g, &[&q, &k, &v], &mut |b, t| {
                vec![b.attention(&t[0], &t[1], &t[2], &p).unwrap()]
            });
            assert!(
                got16[0].1,
                "{c:?}: split attention in an f16 chain writes f16"
            );
            check_with(
                &format!("split {ns} f16 {c:?}"),
                tol16,
                &got16[0].0,
                &want16,
            );
        }
    }
}

/// Packed and unpacked take the same split: bit-identical; the auto choice splits tiny's and
/// base's encoder shape on the H200 and leaves turbo's whole (the timing test shows the effect).
#[test]
fn split_keys_packed_equals_unpacked() {
    let (g, _serial) = require_gpu!("split_keys_packed_equals_unpacked");
    let _auto = Auto(g);
    let tol = tol_for(Op::Attention, Lane::F16, "cuda");
    for (i, c) in [
        (1usize, 1500usize, 1500usize, 6usize, None, false),
        (3, 65, 65, 6, None, false),
        (1, 70, 70, 3, Some(70), true),
    ]
    .iter()
    .enumerate()
    {
        let [q, k, v] = inputs(c, 700 + 10 * i as u64);
        let p = params(c);
        for ns in [None, Some(3)] {
            g.force_attn_split(ns).unwrap();
            let packed = g
                .download(
                    &g.attention_packed(&g.upload(&stack(&q, &k, &v)).unwrap(), &p)
                        .unwrap(),
                )
                .unwrap();
            let (qt, kt, vt) = (
                g.upload(&q).unwrap(),
                g.upload(&k).unwrap(),
                g.upload(&v).unwrap(),
            );
            let unpacked = g
                .download(&g.attention(&qt, &kt, &vt, &p).unwrap())
                .unwrap();
            assert!(
                bits(&packed) == bits(&unpacked),
                "{c:?} split {ns:?}: packed differs from unpacked"
            );
            check_with(
                &format!("packed split {ns:?} {c:?}"),
                tol,
                &packed,
                &reference(&q, &k, &v, &p),
            );
        }
    }
    assert!(g.force_attn_split(Some(0)).is_err());
    assert!(g.force_attn_split(Some(9)).is_err());
}

/// The split form captured in a CUDA graph (scratch from the pool, kept by the graph) replays
/// bit-identically to the eager run, also after the input changes.
#[test]
fn split_keys_graph_replay_is_bit_identical() {
    let (g, _serial) = require_gpu!("split_keys_graph_replay_is_bit_identical");
    if !g.graphs_enabled() {
        eprintln!("SKIPPED (STAPES_CUDA_GRAPHS=0): split_keys_graph_replay_is_bit_identical");
        return;
    }
    let _auto = Auto(g);
    g.force_attn_split(Some(4)).unwrap();
    let c: Case = (1, 1500, 1500, 6, None, false);
    let x0 = {
        let [q, k, v] = inputs(&c, 800);
        stack(&q, &k, &v)
    };
    let x1 = {
        let [q, k, v] = inputs(&c, 810);
        stack(&q, &k, &v)
    };
    let p = params(&c);
    let eager = |x: &HostTensor| {
        g.download(&g.attention_packed(&g.upload(x).unwrap(), &p).unwrap())
            .unwrap()
    };
    let (eager0, eager1) = (eager(&x0), eager(&x1));
    assert!(bits(&eager0) != bits(&eager1), "inputs differ");
    let key = "attn-split-graph/0";
    let mut input = g.upload(&x0).unwrap();
    let out = g
        .run_graph(key, |b| Ok(vec![b.attention_packed(&input, &p)?]))
        .unwrap();
    assert!(
        bits(&g.download(&out[0]).unwrap()) == bits(&eager0),
        "captured run differs from eager"
    );
    for (x, want) in [(&x1, &eager1), (&x0, &eager0), (&x1, &eager1)] {
        g.write_host(&mut input, x).unwrap();
        let out = g.replay(key).unwrap();
        assert!(
            bits(&g.download(&out[0]).unwrap()) == bits(want),
            "replay differs from eager"
        );
    }
    g.drop_graph(key);
    eprintln!("ok   split 4 graph replay == eager bit for bit (3 replays, 2 inputs)");
}

/// Heads smaller than 64 in whole 8-dim chunks (GigaAM's 48; 56, 40, 32, 8) run on the flash64
/// kernels as heads of 64 with zero dims: against the reference (f32 eagerly, f16 in a chain),
/// every kernel variant bit-identical to the others, forced splits within the bar, packed
/// bit-identical to unpacked, and the small-head launch counter moved (the scalar row kernel,
/// which answered these shapes before, did not).
#[test]
fn small_heads_run_on_flash64_and_match_reference() {
    let (g, _serial) = require_gpu!("small_heads_run_on_flash64_and_match_reference");
    let _auto = Auto(g);
    let tol32 = tol_for(Op::Attention, Lane::F16, "cuda");
    let tol16 = tol_for(Op::Attention, Lane::F16, "cuda-f16act");
    // (B, T, heads, dh, kv_len): GigaAM v3's encoder on jfk (275 frames, 16 heads of 48), a
    // masked tail in a batch of 3, odd lengths, a turbo-length window
    let cases: [(usize, usize, usize, usize, Option<usize>); 6] = [
        (1, 275, 16, 48, None),
        (3, 65, 3, 48, Some(60)),
        (2, 17, 2, 40, None),
        (1, 130, 5, 32, None),
        (1, 33, 2, 8, None),
        (1, 1500, 2, 56, None),
    ];
    for (i, &(b, t, h, d, kv_len)) in cases.iter().enumerate() {
        let seed = 900 + 10 * i as u64;
        let q = rnd(&[b, t, h * d], seed, 3.0);
        let k = rnd(&[b, t, h * d], seed + 1, 1.0);
        let v = rnd(&[b, t, h * d], seed + 2, 1.0);
        let p = AttnParams {
            n_heads: h,
            scale: 1.0 / (d as f32).sqrt(),
            kv_len,
            causal: false,
        };
        let what = format!("dh {d}, {b} × {t} × {h} heads, kv_len {kv_len:?}");
        let want = reference(&q, &k, &v, &p);
        let before = CudaBackend::attn_small_head_launches();
        let qkv = [&q, &k, &v].map(|t| g.upload(t).unwrap());
        let [qt, kt, vt] = &qkv;
        every_kernel_matches(g, &qkv, &p, &want, tol32, &what, true);
        for ns in [2, 3] {
            g.force_attn_split(Some(ns)).unwrap();
            let got = g.download(&g.attention(qt, kt, vt, &p).unwrap()).unwrap();
            check_with(&format!("{what}, split {ns}"), tol32, &got, &want);
        }
        g.force_attn_split(None).unwrap();
        let got16 = in_f16_chain(g, &[&q, &k, &v], &mut |b, t| {
            vec![b.attention(&t[0], &t[1], &t[2], &p).unwrap()]
        });
        assert!(got16[0].1, "{what}: attention in an f16 chain writes f16");
        let want16 = reference(&round16(&q), &round16(&k), &round16(&v), &p);
        check_with(&format!("{what}, f16"), tol16, &got16[0].0, &want16);
        let packed = g
            .download(
                &g.attention_packed(&g.upload(&stack(&q, &k, &v)).unwrap(), &p)
                    .unwrap(),
            )
            .unwrap();
        let unpacked = g.download(&g.attention(qt, kt, vt, &p).unwrap()).unwrap();
        assert!(
            bits(&packed) == bits(&unpacked),
            "{what}: packed differs from unpacked"
        );
        assert!(
            CudaBackend::attn_small_head_launches() > before,
            "{what}: no flash64 launch for heads of {d}"
        );
    }
}

/// Puts the warpgroup kernels back on when a test ends, also by panic.
struct WgOn<'a>(&'a CudaBackend);
impl Drop for WgOn<'_> {
    fn drop(&mut self) {
        self.0.set_attn_wg(true);
    }
}

/// The warpgroup-MMA kernels (`awg64_*`, sm_90) do flash64's arithmetic in flash64's order:
/// their output is bit-identical to `flash64_w4m2s2`'s, unsplit and split 2 and 3 ways, f32 in
/// and f16 in a chain, packed or not; and they really ran (their launch counter moved).
#[test]
fn wg_kernels_equal_flash64_bit_for_bit() {
    let (g, _serial) = require_gpu!("wg_kernels_equal_flash64_bit_for_bit");
    if g.device_info().1 != "compute_90" {
        eprintln!("SKIPPED (not sm_90): wg_kernels_equal_flash64_bit_for_bit");
        return;
    }
    let (_auto, _wg) = (Auto(g), WgOn(g));
    let tol = tol_for(Op::Attention, Lane::F16, "cuda");
    let cases: [Case; 6] = [
        (1, 1500, 1500, 20, None, false),
        (1, 1500, 1500, 6, None, false),
        (3, 65, 65, 6, None, false),
        (2, 65, 100, 3, Some(71), false),
        (1, 300, 3000, 2, None, false),
        (2, 17, 17, 1, None, false),
    ];
    for (i, c) in cases.iter().enumerate() {
        let [q, k, v] = inputs(c, 900 + 10 * i as u64);
        let p = params(c);
        let (qt, kt, vt) = (
            g.upload(&q).unwrap(),
            g.upload(&k).unwrap(),
            g.upload(&v).unwrap(),
        );
        let qkv = (c.1 == c.2).then(|| g.upload(&stack(&q, &k, &v)).unwrap());
        let run = |wg: bool, ns: usize| {
            g.set_attn_wg(wg);
            g.force_attn_split(Some(ns)).unwrap();
            let before = CudaBackend::attn_wg_launches();
            let mut outs = vec![g
                .download(&g.attention(&qt, &kt, &vt, &p).unwrap())
                .unwrap()];
            if let Some(x) = &qkv {
                outs.push(g.download(&g.attention_packed(x, &p).unwrap()).unwrap());
            }
            outs.extend(
                in_f16_chain(g, &[&q, &k, &v], &mut |b, t| {
                    vec![b.attention(&t[0], &t[1], &t[2], &p).unwrap()]
                })
                .into_iter()
                .map(|(t, f16)| {
                    assert!(f16, "{c:?}: f16 chain writes f16");
                    t
                }),
            );
            let ran = CudaBackend::attn_wg_launches() - before;
            assert_eq!(
                ran > 0,
                wg,
                "{c:?} split {ns}: warpgroup kernel launches {ran} with the switch {wg}"
            );
            outs
        };
        let want = reference(&q, &k, &v, &p);
        for ns in [1, 2, 3] {
            let (wg, fa) = (run(true, ns), run(false, ns));
            for (j, (a, b)) in wg.iter().zip(&fa).enumerate() {
                assert!(
                    bits(a) == bits(b),
                    "{c:?} split {ns} output {j}: awg64 differs from flash64"
                );
            }
            check_with(&format!("awg64 {c:?} split {ns}"), tol, &wg[0], &want);
        }
        eprintln!("ok   {c:?}: awg64 == flash64 bit for bit, splits 1, 2, 3");
    }
}
