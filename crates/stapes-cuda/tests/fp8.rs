//! The q8 lane's FP8 form (src/fp8.rs), inside f16 chains where it runs:
//! - it computes what it says: the e4m3 roundings of the activation and of the weight's q8
//!   values over one scale, their exact products summed, times the scale, plus the bias (and
//!   residual, or through cuBLASLt's tanh GELU), one f16 rounding — emulated here on the host
//!   from the same values, so a wrong scale, layout, operand order or epilogue shows at full size;
//! - eager == replay bit for bit, and the engagement counter proves FP8 ran;
//! - against the exact f32 reference it holds the table's q8 row for f16 chains, and a planted
//!   fault (one zeroed 32-weight block) fails the worst-column bar;
//! - `Q8Mix::F16` switches it off (other bits), and shapes FP8 cannot take (N or K not a
//!   multiple of 16) run on the f16 copy.
//!
//! Without a GPU (or below sm_89) each test prints `SKIPPED (…): <name>` and returns.

mod common;

use common::rnd;
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::{compare, Op};
use stapes_core::{Activation, Backend, HostTensor, Lane};
use stapes_cuda::{CudaBackend, Q8Mix};

/// e4m3 as `cvt.rn.satfinite.e4m3x2.f32` makes it: 3 mantissa bits, round to nearest even,
/// subnormals in steps of 2⁻⁹ below 2⁻⁶, saturating at ±448.
fn e4m3(v: f32) -> f32 {
    if v.is_nan() {
        return v;
    }
    let a = v.abs();
    if a >= 448.0 {
        return 448f32.copysign(v);
    }
    let ulp = if a < 2f32.powi(-6) {
        2f32.powi(-9)
    } else {
        let e = ((a.to_bits() >> 23) & 0xff) as i32 - 127;
        2f32.powi(e - 3)
    };
    let r = ((a / ulp).round_ties_even() * ulp).min(448.0);
    r.copysign(v)
}

fn silu(v: f64) -> f64 {
    v / (1.0 + (-v).exp())
}

/// `v` rounded to f16, as f32.
fn h16(v: f64) -> f32 {
    half::f16::from_f64(v).to_f32()
}

fn gelu_tanh(v: f64) -> f64 {
    0.5 * v * (1.0 + (0.797_884_560_802_865_4 * (v + 0.044715 * v * v * v)).tanh())
}

/// linear, linear_add and linear_act(GELU) of `w` as the FP8 form computes them (f64 sums of
/// the exact e4m3 products), each rounded once to f16.
fn emulate(x: &HostTensor, w: &HostTensor, b: &HostTensor, r: &HostTensor) -> Vec<Vec<f32>> {
    let zero = HostTensor::new(r.shape.clone(), vec![0.0; r.data.len()]).unwrap();
    let y = emulate_f32(x, w, b, &zero);
    let h = |v: f64| half::f16::from_f64(v).to_f32();
    let r16 = |i: usize| half::f16::from_f32(r.data[i]).to_f32() as f64;
    vec![
        y.iter().map(|&v| h(v)).collect(),
        y.iter().enumerate().map(|(i, &v)| h(v + r16(i))).collect(),
        y.iter().map(|&v| h(gelu_tanh(v))).collect(),
    ]
}

/// The three ops (tanh GELU) inside an encoder chain, eager == replay; returns the outputs
/// and how many GEMMs the eager run counted as FP8.
fn chained(
    g: &CudaBackend,
    x: &HostTensor,
    w: &stapes_cuda::CudaWeight,
    b: &HostTensor,
    r: &HostTensor,
) -> (Vec<Vec<f32>>, u64) {
    let c0 = g.counters().snapshot().gemm_q8_fp8;
    let (outs, after) = common::linear_ops_chained(g, "fp8", x, w, b, r, Activation::GeluTanh);
    (outs, after.gemm_q8_fp8 - c0)
}

/// The backend where it has e4m3 tensor cores, else print why the test is skipped.
fn fp8_gpu(name: &str) -> Option<&'static CudaBackend> {
    let Some(g) = common::gpu() else {
        eprintln!("SKIPPED (no CUDA device): {name}");
        return None;
    };
    if !g.fp8_capable() {
        eprintln!("SKIPPED (no e4m3 tensor cores on this device): {name}");
        return None;
    }
    Some(g)
}

/// [`fp8_gpu`] set up for f16 chains on the FP8 form, with the test lock held.
fn fp8_chain_gpu(name: &str) -> Option<(&'static CudaBackend, std::sync::MutexGuard<'static, ()>)> {
    let serial = common::serial();
    let g = fp8_gpu(name)?;
    g.set_f16_activations(true);
    g.set_q8_mix(Q8Mix::Fp8);
    // the fused forms' tests compare bits with an f16 hidden; the e4m3 hidden's test sets its own
    g.set_hidden_e4m3("0");
    Some((g, serial))
}

/// A form that writes the next GEMM's e4m3 input against the plain form, each run through
/// `run` (true: that form, false: the plain one): their outputs, the conversion passes each form
/// launched, and the FP8 GEMMs the two counted together.
struct FedPlain {
    fed: Vec<Vec<f32>>,
    plain: Vec<Vec<f32>>,
    fed_passes: u64,
    plain_passes: u64,
    fp8_gemms: u64,
}

fn fed_and_plain(g: &CudaBackend, run: &dyn Fn(bool) -> Vec<Vec<f32>>) -> FedPlain {
    let c0 = g.counters().snapshot().gemm_q8_fp8;
    let p0 = g.fp8_input_passes();
    let fed = run(true);
    let p1 = g.fp8_input_passes();
    let plain = run(false);
    let p2 = g.fp8_input_passes();
    FedPlain {
        fed,
        plain,
        fed_passes: p1 - p0,
        plain_passes: p2 - p1,
        fp8_gemms: g.counters().snapshot().gemm_q8_fp8 - c0,
    }
}

/// The results of one chain run under `key`, downloaded.
fn chain_data(
    g: &CudaBackend,
    key: &str,
    f: &mut dyn FnMut(&CudaBackend) -> stapes_core::Result<Vec<stapes_cuda::CudaTensor>>,
) -> Vec<Vec<f32>> {
    let outs = g.chain(key, f).unwrap();
    outs.iter().map(|t| g.download(t).unwrap().data).collect()
}

/// Input `(1, m, k)`, weight `(n, k)`, bias `(n)` and residual `(1, m, n)` from seed `s`.
fn case(s: u64, m: usize, k: usize, n: usize) -> [HostTensor; 4] {
    [
        rnd(&[1, m, k], s, 2.0),
        rnd(&[n, k], s + 1, 1.0 / (k as f32).sqrt()),
        rnd(&[n], s + 2, 0.5),
        rnd(&[1, m, n], s + 3, 1.0),
    ]
}

/// An MLP's operands from seed `s`: input `(1, m, d)`, fc1 `(hid, d)` and fc2 `(d, hid)` with
/// biases, a residual `(1, m, d)`; the weights as q8 on `g`, the rest also uploaded.
struct Mlp {
    x: HostTensor,
    w1: HostTensor,
    b1: HostTensor,
    w2: HostTensor,
    b2: HostTensor,
    r: HostTensor,
    w1q: stapes_cuda::CudaWeight,
    w2q: stapes_cuda::CudaWeight,
    xt: stapes_cuda::CudaTensor,
    b1t: stapes_cuda::CudaTensor,
    b2t: stapes_cuda::CudaTensor,
    rt: stapes_cuda::CudaTensor,
}

fn mlp_case(g: &CudaBackend, s: u64, m: usize, d: usize, hid: usize) -> Mlp {
    let x = rnd(&[1, m, d], s, 2.0);
    let w1 = rnd(&[hid, d], s + 1, 1.0 / (d as f32).sqrt());
    let b1 = rnd(&[hid], s + 2, 0.5);
    let w2 = rnd(&[d, hid], s + 3, 1.0 / (hid as f32).sqrt());
    let b2 = rnd(&[d], s + 4, 0.5);
    let r = rnd(&[1, m, d], s + 5, 1.0);
    let up = |t: &HostTensor| g.upload(t).unwrap();
    Mlp {
        w1q: g.weight(&w1, Lane::Q8).unwrap(),
        w2q: g.weight(&w2, Lane::Q8).unwrap(),
        xt: up(&x),
        b1t: up(&b1),
        b2t: up(&b2),
        rt: up(&r),
        x,
        w1,
        b1,
        w2,
        b2,
        r,
    }
}

/// The bar of an FP8 GEMM's output against the host emulation of its e4m3 products: the
/// tensor cores' sums in another order (fast accumulation) and one f16 rounding of the output
/// against the f64 sums, ≤ 2⁻¹¹ of a value plus the accumulation's ~2⁻¹⁴.
const EMULATION_BAR: stapes_core::tolerance::Tolerance = stapes_core::tolerance::Tolerance {
    max_abs: 0.0,
    max_rel: 4e-3,
    rel_l2: 1.5e-3,
};

#[test]
fn fp8_gemm_is_the_e4m3_product_of_its_values() {
    let name = "fp8_gemm_is_the_e4m3_product_of_its_values";
    let _serial = common::serial();
    let Some(g) = fp8_gpu(name) else {
        return;
    };
    g.set_f16_activations(true);
    // (rows, K, N): past the GEMV size, K and N multiples of 16 with odd tile remainders, and
    // turbo's width
    for (i, &(m, k, n)) in [
        (9, 64, 96),
        (33, 640, 48),
        (517, 1280, 256),
        (150, 384, 1536),
    ]
    .iter()
    .enumerate()
    {
        let [x, w, b, r] = case(500 + 10 * i as u64, m, k, n);
        let wq = g.weight(&w, Lane::Q8).unwrap();
        g.set_q8_mix(Q8Mix::Fp8);
        let (got, on_fp8) = chained(g, &x, &wq, &b, &r);
        g.set_q8_mix(Q8Mix::F16);
        let (copy, copy_fp8) = chained(g, &x, &wq, &b, &r);
        g.set_q8_mix(Q8Mix::Fp8);
        let want = emulate(&x, &w, &b, &r);
        let what = format!("m{m} k{k} n{n}");
        assert_eq!(on_fp8, 3, "{what}: the three GEMMs did not all run on FP8");
        assert_eq!(copy_fp8, 0, "{what}: Q8Mix::F16 still ran FP8");
        let tol = EMULATION_BAR;
        for (j, op) in ["linear", "linear_add", "linear_act(gelu)"]
            .iter()
            .enumerate()
        {
            let m_ok = compare(&got[j], &want[j], &tol)
                .unwrap_or_else(|e| panic!("{op} {what}: FP8 vs its emulation: {e}"));
            eprintln!(
                "ok {op} {what}: vs emulation rel_l2 {:.2e} max_abs {:.2e}",
                m_ok.rel_l2, m_ok.max_abs
            );
            assert!(
                got[j]
                    .iter()
                    .zip(&copy[j])
                    .any(|(a, b)| a.to_bits() != b.to_bits()),
                "{op} {what}: FP8 gave the f16 copy's bits (the switch changed nothing)"
            );
        }
    }
    // N not a multiple of 16: the f16 copy, not FP8
    let [x, w, b, r] = case(600, 40, 64, 40);
    let wq = g.weight(&w, Lane::Q8).unwrap();
    let (_, on_fp8) = chained(g, &x, &wq, &b, &r);
    assert_eq!(on_fp8, 0, "N = 40 ran on FP8");
}

/// Worst-column bar: the FP8 error model's rms (two e4m3 roundings, ~0.037 of a column) with
/// room for a column's spread; a zeroed 32-block of K = 1280 moves its column by ~0.16.
const COLUMN_BAR: f32 = 0.08;

#[test]
fn fp8_meets_the_q8_chain_bar_and_a_planted_fault_fails_it() {
    let name = "fp8_meets_the_q8_chain_bar_and_a_planted_fault_fails_it";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    let (m, k, n) = (200, 1280, 256);
    let x = common::heavy_tailed_activations(m, k);
    let w = HostTensor::random(vec![n, k], 902, 1.0 / (k as f32).sqrt());
    let b = HostTensor::random(vec![n], 903, 0.2);
    let r = HostTensor::random(vec![1, m, n], 904, 1.0);
    let reference = ReferenceBackend::new();
    let want = {
        let (xt, wt, bt) = (
            reference.upload(&x).unwrap(),
            reference.weight(&w, Lane::F32).unwrap(),
            reference.upload(&b).unwrap(),
        );
        let y = reference.linear(&xt, &wt, Some(&bt)).unwrap();
        reference.download(&y).unwrap()
    };
    let tol = common::tol_for(Op::Linear, Lane::Q8, "cuda-f16act");
    let wq = g.weight(&w, Lane::Q8).unwrap();
    let (got, on_fp8) = chained(g, &x, &wq, &b, &r);
    assert_eq!(on_fp8, 3, "FP8 did not run");
    let m_ok = compare(&got[0], &want.data, &tol)
        .unwrap_or_else(|e| panic!("FP8 q8 vs the f32 reference: {e}"));
    let (col, col_err) = common::worst_column(&got[0], &want.data, n);
    eprintln!(
        "fp8 clean: rel_l2 {:.2e} max_abs {:.2e}; worst column {col} rel_l2 {col_err:.2e}",
        m_ok.rel_l2, m_ok.max_abs
    );
    assert!(
        col_err <= COLUMN_BAR,
        "clean FP8 worst column {col}: {col_err}"
    );
    let mut bad = w.clone();
    for v in &mut bad.data[77 * k + 13 * 32..77 * k + 14 * 32] {
        *v = 0.0;
    }
    let wb = g.weight(&bad, Lane::Q8).unwrap();
    let (got_bad, _) = chained(g, &x, &wb, &b, &r);
    let (col, col_err) = common::worst_column(&got_bad[0], &want.data, n);
    eprintln!("fp8 with a zeroed block: worst column {col} rel_l2 {col_err:.2e}");
    assert_eq!(col, 77, "the fault should be the worst column");
    assert!(
        col_err > COLUMN_BAR,
        "planted fault passed the bar: {col_err}"
    );
}

/// `mlp_add` on FP8 keeps the hidden in e4m3 (fc1's epilogue writes it, bias and tanh GELU
/// applied in f32 first): emulated here from the same values; eager == replay; the counter
/// shows both GEMMs on FP8; `Q8Mix::F16` composes the two ops instead (other bits).
#[test]
fn fp8_mlp_keeps_its_hidden_in_e4m3() {
    let name = "fp8_mlp_keeps_its_hidden_in_e4m3";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    for (i, &(m, d, n1)) in [(33, 64, 256), (300, 384, 1536)].iter().enumerate() {
        let s = 700 + 10 * i as u64;
        let Mlp {
            x,
            w1,
            b1,
            w2,
            b2,
            r,
            w1q: q1,
            w2q: q2,
            xt,
            b1t,
            b2t,
            rt,
        } = mlp_case(g, s, m, d, n1);
        let key = format!("test-encoder/fp8-mlp-{i}");
        let run = |key: &str| -> Vec<f32> {
            let outs = g
                .chain(key, &mut |be| {
                    let x16 = be.affine(&xt, 1.0, 0.0)?;
                    let r16 = be.affine(&rt, 1.0, 0.0)?;
                    Ok(vec![be.mlp_add(
                        &x16,
                        &q1,
                        Some(&b1t),
                        Activation::GeluTanh,
                        &q2,
                        Some(&b2t),
                        &r16,
                    )?])
                })
                .unwrap();
            g.download(&outs[0]).unwrap().data
        };
        let c0 = g.counters().snapshot().gemm_q8_fp8;
        let got = run(&key);
        let on_fp8 = g.counters().snapshot().gemm_q8_fp8 - c0;
        assert_eq!(
            got,
            run(&key),
            "m{m}: the replay differs from the eager run"
        );
        assert_eq!(on_fp8, 2, "m{m}: both GEMMs should run on FP8");
        // host emulation: fc1 as the FP8 GEMM, bias and GELU in f32, the hidden to e4m3
        let zero_r = HostTensor::new(vec![1, m, n1], vec![0.0; m * n1]).unwrap();
        let fc1 = emulate_f32(&x, &w1, &b1, &zero_r);
        let hidden: Vec<f32> = fc1.iter().map(|&v| e4m3(gelu_tanh(v) as f32)).collect();
        let want = fp8_dot(&hidden, &w2, &b2, &r, m);
        // besides the linear's bar: a hidden value whose f32 GELU sits within cuBLASLt's GELU
        // error of an e4m3 rounding boundary rounds to the neighbour, a whole e4m3 step (2⁻³
        // of it); a few in 10³ do (H200: 2.2e-3 rel_l2 at m = 33), far inside FP8's own 0.037
        let tol = stapes_core::tolerance::Tolerance {
            max_abs: 0.0,
            max_rel: 2e-2,
            rel_l2: 6e-3,
        };
        let m_ok = compare(&got, &want, &tol)
            .unwrap_or_else(|e| panic!("mlp m{m}: FP8 vs its emulation: {e}"));
        eprintln!("ok mlp m{m}: vs emulation rel_l2 {:.2e}", m_ok.rel_l2);
        g.set_q8_mix(Q8Mix::F16);
        let composed = run(&format!("{key}-f16copy"));
        g.set_q8_mix(Q8Mix::Fp8);
        assert!(
            got.iter()
                .zip(&composed)
                .any(|(a, b)| a.to_bits() != b.to_bits()),
            "m{m}: Q8Mix::F16 gave FP8's bits"
        );
    }
}

/// The pre-activation of the FP8 linear in f32 (before any f16 rounding): `Σ e4m3(x)·e4m3(w8/sw)
/// · sw + bias16 + r16`, row-major `(m, n)`.
fn emulate_f32(x: &HostTensor, w: &HostTensor, b: &HostTensor, r: &HostTensor) -> Vec<f64> {
    let x8: Vec<f32> = x
        .data
        .iter()
        .map(|&v| e4m3(half::f16::from_f32(v).to_f32()))
        .collect();
    let m = x.data.len() / w.shape[1];
    fp8_dot_f64(&x8, w, b, r, m)
}

/// `Σ x8·e4m3(w8/sw) · sw + bias16 + r16` for e4m3 inputs `x8 (m, k)`, in f64.
fn fp8_dot_f64(x8: &[f32], w: &HostTensor, b: &HostTensor, r: &HostTensor, m: usize) -> Vec<f64> {
    let (n, k) = (w.shape[0], w.shape[1]);
    let (codes, scales) = common::q8_rows(w);
    let smax = scales.iter().fold(0f32, |a, &s| a.max(s.abs()));
    let sw = if smax > 0.0 {
        smax * 127.0 / 448.0
    } else {
        1.0
    };
    let inv = 1.0 / sw;
    let w8: Vec<f32> = (0..n * k)
        .map(|i| e4m3(codes[i] * (scales[i / k] * inv)))
        .collect();
    let h16 = |v: f32| half::f16::from_f32(v).to_f32() as f64;
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k)
                .map(|t| x8[i * k + t] as f64 * w8[j * k + t] as f64)
                .sum();
            out.push(dot * sw as f64 + h16(b.data[j]) + h16(r.data[i * n + j]));
        }
    }
    out
}

/// [`fp8_dot_f64`] rounded once to f16.
fn fp8_dot(x8: &[f32], w: &HostTensor, b: &HostTensor, r: &HostTensor, m: usize) -> Vec<f32> {
    fp8_dot_f64(x8, w, b, r, m)
        .into_iter()
        .map(|v| half::f16::from_f64(v).to_f32())
        .collect()
}

/// A norm that feeds an FP8 GEMM writes the e4m3 input beside its f16 result: the GEMM then
/// gives the bits it gives after a plain norm and the conversion pass.
#[test]
fn fp8_norm_feeding_writes_the_gemms_input() {
    let name = "fp8_norm_feeding_writes_the_gemms_input";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    for (i, &(m, d, n)) in [(40, 384, 1152), (1500, 1280, 256)].iter().enumerate() {
        let s = 800 + 10 * i as u64;
        let x = rnd(&[1, m, d], s, 2.0);
        let gamma = rnd(&[d], s + 1, 1.0);
        let beta = rnd(&[d], s + 2, 0.3);
        let w = rnd(&[n, d], s + 3, 1.0 / (d as f32).sqrt());
        let b = rnd(&[n], s + 4, 0.5);
        let wq = g.weight(&w, Lane::Q8).unwrap();
        let up = |t: &HostTensor| g.upload(t).unwrap();
        let (xt, gt, bt, bb) = (up(&x), up(&gamma), up(&beta), up(&b));
        let run = |feeding: bool| -> Vec<Vec<f32>> {
            let key = format!("test-encoder/fp8-ln-{i}-{feeding}");
            chain_data(g, &key, &mut |be| {
                let x16 = be.affine(&xt, 1.0, 0.0)?;
                let h = if feeding {
                    be.layer_norm_feeding(&x16, &gt, Some(&bt), 1e-5, &wq)?
                } else {
                    be.layer_norm(&x16, &gt, Some(&bt), 1e-5)?
                };
                let y = be.linear(&h, &wq, Some(&bb))?;
                Ok(vec![h, y])
            })
        };
        let FedPlain {
            fed,
            plain,
            fed_passes,
            plain_passes,
            ..
        } = fed_and_plain(g, &run);
        // each chain runs eagerly, is captured, then replayed: passes counted at launch
        assert_eq!(
            fed_passes, 0,
            "m{m} d{d}: the fed GEMM still converted its input"
        );
        assert!(
            plain_passes >= 1,
            "m{m} d{d}: the plain norm's GEMM converted nothing"
        );
        assert_eq!(fed[0], plain[0], "m{m} d{d}: the norms differ");
        assert_eq!(fed[1], plain[1], "m{m} d{d}: the GEMM read another input");
    }
}

/// `layer_norm_pair` naming the FP8 linear that reads its second norm (a FastConformer block's
/// closing norm, then the next block's first, which fc1 reads) writes that linear's e4m3 input:
/// the linear converts nothing, and both norms and the linear's output are the bits of the pair
/// without `next` followed by the linear's own conversion. 16 parakeet clips (2240 x 1024), an
/// odd row count with a width off the powers of two, and a few rows.
#[test]
fn fp8_norm_pair_writes_the_next_gemms_input() {
    let name = "fp8_norm_pair_writes_the_next_gemms_input";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    for (i, &(m, d, n)) in [(2240, 1024, 4096), (603, 272, 528), (40, 384, 1152)]
        .iter()
        .enumerate()
    {
        let s = 1300 + 10 * i as u64;
        let x = rnd(&[1, m, d], s, 2.0);
        let [g1, b1, g2, b2] =
            [(1, 1.0), (2, 0.3), (3, 1.0), (4, 0.3)].map(|(o, a)| rnd(&[d], s + o, a));
        let w = rnd(&[n, d], s + 5, 1.0 / (d as f32).sqrt());
        let b = rnd(&[n], s + 6, 0.5);
        let wq = g.weight(&w, Lane::Q8).unwrap();
        let up = |t: &HostTensor| g.upload(t).unwrap();
        let (xt, bb) = (up(&x), up(&b));
        let (g1t, b1t, g2t, b2t) = (up(&g1), up(&b1), up(&g2), up(&b2));
        let run = |feeding: bool| -> Vec<Vec<f32>> {
            let key = format!("test-encoder/fp8-ln-pair-{i}-{feeding}");
            chain_data(g, &key, &mut |be| {
                let x16 = be.affine(&xt, 1.0, 0.0)?;
                let norms = [(&g1t, Some(&b1t)), (&g2t, Some(&b2t))];
                let next = feeding.then_some(&wq);
                let (y, z) = be.layer_norm_pair(&x16, norms, 1e-5, next)?;
                let out = be.linear(&z, &wq, Some(&bb))?;
                Ok(vec![y, z, out])
            })
        };
        let FedPlain {
            fed,
            plain,
            fed_passes,
            plain_passes,
            fp8_gemms,
        } = fed_and_plain(g, &run);
        assert!(fp8_gemms > 0, "m{m} d{d}: no FP8 GEMM ran");
        assert_eq!(
            fed_passes, 0,
            "m{m} d{d}: the fed GEMM still converted its input"
        );
        assert!(
            plain_passes >= 1,
            "m{m} d{d}: the plain pair's GEMM converted nothing"
        );
        assert_eq!(fed[0], plain[0], "m{m} d{d}: the closing norms differ");
        assert_eq!(fed[1], plain[1], "m{m} d{d}: the second norms differ");
        assert_eq!(fed[2], plain[2], "m{m} d{d}: the GEMM read another input");
    }
}

/// `linear_act_feeding` with SiLU (an activation pass of its own) before an FP8 GEMM: the pass
/// also writes the GEMM's e4m3 input, so the GEMM converts nothing, and the bits of the
/// activation and of the GEMM are those of `linear_act` followed by the GEMM's own conversion.
/// At a shape where `linear_add_norms` splits (it reads f16 there) the pass writes f16 only,
/// and the GEMM converts as before.
#[test]
fn fp8_silu_pass_writes_the_next_gemms_input() {
    let name = "fp8_silu_pass_writes_the_next_gemms_input";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    // (rows, d, hidden, split on e4m3, fed): 600 rows past the split form's bound; an odd row
    // count and widths off the powers of two; 16 parakeet clips' fc1 output (2240 x 4096, past
    // the pass's grid cap, so its threads loop); 140 rows with a hidden of 1024, the split
    // form's shape, with its e4m3 operands switched off (it reads f16) and on
    let shapes = [
        (600, 256, 512, true, true),
        (603, 272, 528, true, true),
        (2240, 1024, 4096, true, true),
        (140, 256, 1024, false, false),
        (140, 256, 1024, true, true),
    ];
    for (i, &(m, d, hid, split_fp8, fed_expected)) in shapes.iter().enumerate() {
        g.set_split_fp8(split_fp8);
        let s = 900 + 10 * i as u64;
        let Mlp {
            w1q,
            w2q,
            xt,
            b1t,
            b2t,
            rt,
            ..
        } = mlp_case(g, s, m, d, hid);
        let run = |feeding: bool| -> Vec<Vec<f32>> {
            let key = format!("test-encoder/fp8-silu-{i}-{feeding}");
            chain_data(g, &key, &mut |be| {
                let x16 = be.affine(&xt, 1.0, 0.0)?;
                let r16 = be.affine(&rt, 1.0, 0.0)?;
                let h = if feeding {
                    be.linear_act_feeding(&x16, &w1q, Some(&b1t), Activation::Silu, &w2q)?
                } else {
                    be.linear_act(&x16, &w1q, Some(&b1t), Activation::Silu)?
                };
                let y = be.linear_add(&h, &w2q, Some(&b2t), &r16)?;
                Ok(vec![h, y])
            })
        };
        let FedPlain {
            fed,
            plain,
            fed_passes,
            plain_passes,
            fp8_gemms,
        } = fed_and_plain(g, &run);
        assert!(fp8_gemms >= 4, "m{m}: the GEMMs did not run on FP8");
        // both forms convert fc1's input x each time the chain runs its ops; the plain form
        // converts the activation for fc2 as well
        assert!(fed_passes >= 1, "m{m}: fc1 converted nothing");
        if fed_expected {
            assert_eq!(
                plain_passes,
                2 * fed_passes,
                "m{m}: the fed GEMM still converted its input"
            );
        } else {
            assert_eq!(
                fed_passes, plain_passes,
                "m{m}: the split shape's pass wrote e4m3"
            );
        }
        assert_eq!(fed[0], plain[0], "m{m}: the activations differ");
        assert_eq!(fed[1], plain[1], "m{m}: the GEMM read another input");
    }
    g.set_split_fp8(true);
}

/// `glu_depthwise_act_feeding` before an FP8 GEMM: the conv module's middle also writes the
/// GEMM's e4m3 input (the GEMM converts nothing), with the bits of `glu_depthwise_act`
/// followed by the GEMM's own conversion; at a split shape of `linear_add_norms` it does so
/// only where the split runs on e4m3 (its switch).
#[test]
fn fp8_conv_module_writes_the_next_gemms_input() {
    let name = "fp8_conv_module_writes_the_next_gemms_input";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    // (frames, channels, split on e4m3, fed): past the split form's rows; an odd frame count (a
    // last block of few frames) and channels off the powers of two; 16 parakeet clips' frames;
    // 140 frames of 1024 channels, the split form's shape, its e4m3 operands off and on
    let shapes = [
        (600, 256, true, true),
        (603, 272, true, true),
        (2240, 1024, true, true),
        (140, 1024, false, false),
        (140, 1024, true, true),
    ];
    for (i, &(t, c, split_fp8, fed_expected)) in shapes.iter().enumerate() {
        g.set_split_fp8(split_fp8);
        let s = 950 + 10 * i as u64;
        let x = rnd(&[1, t, 2 * c], s, 2.0);
        let dw = rnd(&[c, 9], s + 1, 0.4);
        let db = rnd(&[c], s + 2, 0.2);
        let w2 = rnd(&[c, c], s + 3, 1.0 / (c as f32).sqrt());
        let b2 = rnd(&[c], s + 4, 0.5);
        let r = rnd(&[1, t, c], s + 5, 1.0);
        let w2q = g.weight(&w2, Lane::Q8).unwrap();
        let up = |t: &HostTensor| g.upload(t).unwrap();
        let (xt, dwt, dbt, b2t, rt) = (up(&x), up(&dw), up(&db), up(&b2), up(&r));
        let run = |feeding: bool| -> Vec<Vec<f32>> {
            let key = format!("test-encoder/fp8-glu-{i}-{feeding}");
            chain_data(g, &key, &mut |be| {
                let x16 = be.affine(&xt, 1.0, 0.0)?;
                let r16 = be.affine(&rt, 1.0, 0.0)?;
                let act = Activation::Silu;
                let h = if feeding {
                    be.glu_depthwise_act_feeding(&x16, None, &dwt, Some(&dbt), act, &w2q)?
                } else {
                    be.glu_depthwise_act(&x16, None, &dwt, Some(&dbt), act)?
                };
                let y = be.linear_add(&h, &w2q, Some(&b2t), &r16)?;
                Ok(vec![h, y])
            })
        };
        let FedPlain {
            fed,
            plain,
            fed_passes,
            plain_passes,
            fp8_gemms,
        } = fed_and_plain(g, &run);
        assert!(fp8_gemms >= 2, "t{t}: the GEMM did not run on FP8");
        assert!(
            plain_passes >= 1,
            "t{t}: the plain form's GEMM converted nothing"
        );
        if fed_expected {
            assert_eq!(
                fed_passes, 0,
                "t{t}: the fed GEMM still converted its input"
            );
        } else {
            assert_eq!(
                fed_passes, plain_passes,
                "t{t}: the split shape's pass wrote e4m3"
            );
        }
        assert_eq!(fed[0], plain[0], "t{t}: the conv module's outputs differ");
        assert_eq!(fed[1], plain[1], "t{t}: the GEMM read another input");
    }
    g.set_split_fp8(true);
}

/// `linear_add_norms`' split form on e4m3 operands (one FastConformer clip's fc2: 140 rows,
/// K = 4096, after the SiLU pass that writes its e4m3 input), in both of its FP8 forms:
/// cuBLASLt's strided batch and, on sm_90, the few-row GEMM's K slices (`f8wg`, partial sums
/// in f32 from its own epilogue). The sum each stores is the e4m3 product of the pass's values
/// over the weight's e4m3 values, plus bias and residual, one f16 rounding (emulated on the
/// host); eager == replay; the counters prove which form ran; with the switch off the same
/// chain runs the split on f16 operands.
#[test]
fn fp8_split_sum_is_the_e4m3_product_of_its_input() {
    let name = "fp8_split_sum_is_the_e4m3_product_of_its_input";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    let sm90 = g.device_info().1 == "compute_90";
    if !sm90 {
        eprintln!("{name}: not sm_90, the few-row GEMM's slices are not checked here");
    }
    // (rows, d, hidden, slices): parakeet's fc2 in 4 slices; the split's smallest K (1024) in
    // 4 (slices of two ring stages); an odd row count and a narrower row in 2
    let shapes = [
        (140, 1024, 4096, 4),
        (140, 1024, 1024, 4),
        (77, 256, 2048, 2),
    ];
    for (i, &(m, d, hid, slices)) in shapes.iter().enumerate() {
        g.set_split_ln(slices);
        let s = 1700 + 10 * i as u64;
        let Mlp {
            w2,
            b2,
            r,
            w1q,
            w2q,
            xt,
            b1t,
            b2t,
            rt,
            ..
        } = mlp_case(g, s, m, d, hid);
        let up = |t: &HostTensor| g.upload(t).unwrap();
        let (gt, bt) = (up(&rnd(&[d], s + 6, 1.0)), up(&rnd(&[d], s + 7, 0.5)));
        // outputs, FP8 GEMMs, split runs, few-row launches
        let run = |on: bool, f8wg: &str| -> (Vec<Vec<f32>>, u64, u64, u64) {
            g.set_split_fp8(on);
            g.set_f8wg(f8wg);
            g.set_f8wg_split(f8wg != "0");
            let key = format!("test-encoder/fp8-split-{i}-{on}-{f8wg}");
            let count = || {
                [
                    g.counters().snapshot().gemm_q8_fp8,
                    g.split_ln_runs(),
                    g.f8wg_runs(),
                ]
            };
            let (outs, [fp8, splits, f8wg_runs]) =
                common::chain_eager_replay(g, &key, &count, &mut |be| {
                    let x16 = be.affine(&xt, 1.0, 0.0)?;
                    let r16 = be.affine(&rt, 1.0, 0.0)?;
                    let h =
                        be.linear_act_feeding(&x16, &w1q, Some(&b1t), Activation::Silu, &w2q)?;
                    let (y, mut z) = be.linear_add_norms(
                        &h,
                        &w2q,
                        Some(&b2t),
                        &r16,
                        &[(&gt, Some(&bt))],
                        1e-5,
                        None,
                    )?;
                    let z = z
                        .pop()
                        .ok_or_else(|| stapes_core::Error::shape("test", "no norm"))?;
                    Ok(vec![h, y, z])
                });
            (outs, fp8, splits, f8wg_runs)
        };
        let (f16_outs, f16_fp8, f16_splits, _) = run(false, "0");
        let mut forms = vec![("cuBLASLt", run(true, "0"))];
        if sm90 {
            forms.push(("few-row", run(true, "1")));
        }
        g.set_split_fp8(true);
        g.set_f8wg("1");
        let what = format!("m{m} d{d} hidden{hid} slices{slices}");
        assert_eq!(f16_splits, 1, "{what}: the split form did not run (f16)");
        assert_eq!(
            f16_fp8, 1,
            "{what}: with the switch off the split still ran on FP8"
        );
        for (form, (outs, fp8_gemms, splits, f8wg_runs)) in &forms {
            let what = format!("{what} {form}");
            assert_eq!(*splits, 1, "{what}: the split form did not run");
            assert_eq!(
                *fp8_gemms, 2,
                "{what}: fc1 and the split did not both run on FP8"
            );
            // the few-row form takes fc1 (with its SiLU) and the slices
            let want_runs = if *form == "few-row" { 2 } else { 0 };
            assert_eq!(
                *f8wg_runs, want_runs,
                "{what}: the few-row GEMM ran {f8wg_runs} times"
            );
            let x8: Vec<f32> = outs[0].iter().map(|&v| e4m3(v)).collect();
            let want = fp8_dot(&x8, &w2, &b2, &r, m);
            let tol = EMULATION_BAR;
            let ok = compare(&outs[1], &want, &tol)
                .unwrap_or_else(|e| panic!("{what}: the split's sum vs its emulation: {e}"));
            eprintln!(
                "ok split {what}: vs emulation rel_l2 {:.2e} max_abs {:.2e}",
                ok.rel_l2, ok.max_abs
            );
            assert!(
                outs[1]
                    .iter()
                    .zip(&f16_outs[1])
                    .any(|(a, b)| a.to_bits() != b.to_bits()),
                "{what}: the e4m3 split gave the f16 split's bits (the switch changed nothing)"
            );
        }
    }
    g.set_split_ln(4);
}

/// `layer_norm_linear` and `layer_norm_mlp_add` on FP8 keep the norm in e4m3 only: they give the
/// bits of the plain norm followed by `linear` / `mlp_add` (whose GEMMs convert the norm's f16
/// result with the pass, the same roundings), convert nothing themselves, and count their GEMMs
/// as FP8. Where FP8 does not apply (N off 16) they compose and still agree.
#[test]
fn fp8_norm_then_gemm_keeps_the_norm_in_e4m3() {
    let name = "fp8_norm_then_gemm_keeps_the_norm_in_e4m3";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    for (i, &(m, d, n, fp8)) in [
        (40, 384, 1152, true),
        (1500, 1280, 256, true),
        (64, 256, 200, false),
    ]
    .iter()
    .enumerate()
    {
        let s = 1700 + 10 * i as u64;
        let x = rnd(&[1, m, d], s, 2.0);
        let gamma = rnd(&[d], s + 1, 1.0);
        let beta = rnd(&[d], s + 2, 0.3);
        let w = rnd(&[n, d], s + 3, 1.0 / (d as f32).sqrt());
        let b = rnd(&[n], s + 4, 0.5);
        let w1 = rnd(&[n, d], s + 5, 1.0 / (d as f32).sqrt());
        let w2 = rnd(&[d, n], s + 6, 1.0 / (n as f32).sqrt());
        let b2 = rnd(&[d], s + 7, 0.5);
        let q = |t: &HostTensor| g.weight(t, Lane::Q8).unwrap();
        let (wq, w1q, w2q) = (q(&w), q(&w1), q(&w2));
        let up = |t: &HostTensor| g.upload(t).unwrap();
        let (xt, gt, bt, bb, bb2) = (up(&x), up(&gamma), up(&beta), up(&b), up(&b2));
        let act = Activation::GeluTanh;
        let run = |fused: bool| -> (Vec<Vec<f32>>, u64, u64) {
            let key = format!("test-encoder/fp8-ln-gemm-{i}-{fused}");
            let (p0, c0) = (g.fp8_input_passes(), g.counters().snapshot().gemm_q8_fp8);
            let outs = g
                .chain(&key, &mut |be| {
                    let x16 = be.affine(&xt, 1.0, 0.0)?;
                    Ok(if fused {
                        vec![
                            be.layer_norm_linear(&x16, &gt, Some(&bt), 1e-5, &wq, Some(&bb))?,
                            be.layer_norm_mlp_add(
                                &x16,
                                &gt,
                                Some(&bt),
                                1e-5,
                                &w1q,
                                Some(&bb),
                                act,
                                &w2q,
                                Some(&bb2),
                            )?,
                        ]
                    } else {
                        let h = be.layer_norm(&x16, &gt, Some(&bt), 1e-5)?;
                        vec![
                            be.linear(&h, &wq, Some(&bb))?,
                            be.mlp_add(&h, &w1q, Some(&bb), act, &w2q, Some(&bb2), &x16)?,
                        ]
                    })
                })
                .unwrap();
            let (p1, c1) = (g.fp8_input_passes(), g.counters().snapshot().gemm_q8_fp8);
            let outs = outs.iter().map(|t| g.download(t).unwrap().data).collect();
            (outs, p1 - p0, c1 - c0)
        };
        let (fused, fused_passes, fused_fp8) = run(true);
        let (plain, plain_passes, _) = run(false);
        assert_eq!(
            fused[0], plain[0],
            "m{m} d{d} n{n}: layer_norm_linear differs"
        );
        assert_eq!(
            fused[1], plain[1],
            "m{m} d{d} n{n}: layer_norm_mlp_add differs"
        );
        if fp8 {
            // the chain runs eagerly, then is captured: three GEMMs each time
            assert!(
                fused_fp8 >= 3,
                "m{m} d{d} n{n}: {fused_fp8} FP8 GEMMs counted"
            );
            assert_eq!(fused_passes, 0, "m{m} d{d} n{n}: the fused forms converted");
            assert!(
                plain_passes >= 1,
                "m{m} d{d} n{n}: the plain norm's GEMMs converted nothing"
            );
        } else {
            assert_eq!(fused_fp8, 0, "m{m} d{d} n{n}: FP8 ran on N off 16");
        }
    }
}

/// Self-attention whose output projection runs on FP8 writes its result in e4m3 too (the
/// warpgroup form, sm_90): the projection then converts nothing and gives the bits it gives
/// after the plain attention and the conversion pass.
#[test]
fn fp8_attention_writes_the_projections_input() {
    let name = "fp8_attention_writes_the_projections_input";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    let (t, heads) = (300, 4);
    let c = heads * 64;
    let qkv = rnd(&[1, t, 3 * c], 900, 1.0);
    let w = rnd(&[c, c], 901, 1.0 / (c as f32).sqrt());
    let b = rnd(&[c], 902, 0.5);
    let r = rnd(&[1, t, c], 903, 1.0);
    let wq = g.weight(&w, Lane::Q8).unwrap();
    let up = |x: &HostTensor| g.upload(x).unwrap();
    let (qt, bt, rt) = (up(&qkv), up(&b), up(&r));
    let p = stapes_core::AttnParams {
        n_heads: heads,
        scale: 0.125,
        kv_len: None,
        causal: false,
    };
    let run = |fused: bool| -> Vec<Vec<f32>> {
        let key = format!("test-encoder/fp8-attn-{fused}");
        let outs = g
            .chain(&key, &mut |be| {
                let q16 = be.affine(&qt, 1.0, 0.0)?;
                let r16 = be.affine(&rt, 1.0, 0.0)?;
                let y = if fused {
                    be.attention_packed_add(&q16, &p, &wq, Some(&bt), &r16)?
                } else {
                    let a = be.attention_packed(&q16, &p)?;
                    be.linear_add(&a, &wq, Some(&bt), &r16)?
                };
                Ok(vec![y])
            })
            .unwrap();
        outs.iter().map(|x| g.download(x).unwrap().data).collect()
    };
    let FedPlain {
        fed: fused,
        plain,
        fed_passes,
        plain_passes,
        ..
    } = fed_and_plain(g, &run);
    let wg = CudaBackend::attn_wg_launches() > 0;
    if wg {
        assert_eq!(
            fed_passes, 0,
            "the fused projection still converted its input"
        );
    } else {
        eprintln!("(the warpgroup attention did not run here: the fused form converts too)");
    }
    assert!(plain_passes >= 1, "the plain projection converted nothing");
    assert_eq!(
        fused, plain,
        "the fused form differs from attention + linear_add"
    );
}

/// The FastConformer's relative-position attention, when its output projection reads it on
/// FP8 (`rel_attention_feeding`), writes its result as e4m3 too, in both kernel forms (split
/// keys, and the plain one with 2 warps): its f16 result keeps its bits, and the projection's
/// split form (one clip: 140 rows, d = 1024) then reads those bytes, so its sum is the e4m3
/// product of the attention's values (emulated on the host). Without the hint the split runs on
/// f16 operands and counts no FP8 GEMM.
#[test]
fn fp8_rel_attention_writes_the_projections_input() {
    let name = "fp8_rel_attention_writes_the_projections_input";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    let (t, heads, c) = (140, 8, 1024);
    let s = 3100;
    let qkv = rnd(&[1, t, 3 * c], s, 1.0);
    let pos = rnd(&[1, 2 * t - 1, c], s + 1, 1.0);
    let (bu, bv) = (rnd(&[c], s + 2, 0.3), rnd(&[c], s + 3, 0.3));
    let [_, w, b, r] = case(s + 4, t, c, c);
    let up = |x: &HostTensor| g.upload(x).unwrap();
    let (qt, pt, but, bvt, bt, rt) = (up(&qkv), up(&pos), up(&bu), up(&bv), up(&b), up(&r));
    let (gt, nbt) = (up(&rnd(&[c], s + 9, 1.0)), up(&rnd(&[c], s + 10, 0.5)));
    let wq = g.weight(&w, Lane::Q8).unwrap();
    let p = stapes_core::backend::RelAttnParams {
        heads,
        scale: 1.0 / (c as f32 / heads as f32).sqrt(),
        query_block: t,
    };
    g.set_rel_attn_e4m3(true);
    for form in [0u32, 2] {
        g.force_rel_attn_form(Some(form)).unwrap();
        // outputs, and FP8 GEMMs of the eager run
        let run = |fed: bool| -> (Vec<Vec<f32>>, u64) {
            let key = format!("test-encoder/fp8-rel-attn-{form}-{fed}");
            let count = || [g.counters().snapshot().gemm_q8_fp8];
            let (outs, [fp8]) = common::chain_eager_replay(g, &key, &count, &mut |be| {
                let q16 = be.affine(&qt, 1.0, 0.0)?;
                let p16 = be.affine(&pt, 1.0, 0.0)?;
                let r16 = be.affine(&rt, 1.0, 0.0)?;
                let a = if fed {
                    be.rel_attention_feeding(&q16, &p16, &but, &bvt, None, &p, &wq)?
                } else {
                    be.rel_attention(&q16, &p16, &but, &bvt, None, &p)?
                };
                let (y, _) = be.linear_add_norms(
                    &a,
                    &wq,
                    Some(&bt),
                    &r16,
                    &[(&gt, Some(&nbt))],
                    1e-5,
                    None,
                )?;
                Ok(vec![a, y])
            });
            (outs, fp8)
        };
        let ((fed, fed_fp8), (plain, plain_fp8)) = (run(true), run(false));
        let what = format!("form {form}");
        assert_eq!(
            fed[0], plain[0],
            "{what}: the attention's f16 result differs"
        );
        assert_eq!(
            (fed_fp8, plain_fp8),
            (1, 0),
            "{what}: FP8 GEMMs with / without the hint (the split reads e4m3 only where the \
             attention wrote it)"
        );
        let x8: Vec<f32> = fed[0].iter().map(|&v| e4m3(v)).collect();
        let want = fp8_dot(&x8, &w, &b, &r, t);
        let tol = EMULATION_BAR;
        let ok = compare(&fed[1], &want, &tol)
            .unwrap_or_else(|e| panic!("{what}: the projection vs its emulation: {e}"));
        eprintln!(
            "ok rel attention {what}: vs emulation rel_l2 {:.2e} max_abs {:.2e}",
            ok.rel_l2, ok.max_abs
        );
    }
    g.force_rel_attn_form(None).unwrap();
}

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += (g as f64 - w as f64).powi(2);
        den += (w as f64).powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// `layer_norm_attention_add` runs q|k|v without its bias and leaves it to the attention where
/// the whole warpgroup form runs (a turbo-shaped window, 240 blocks: counted), which adds q's to
/// Q and v's to its output and drops k's; where the keys are split (a tiny-shaped window, 6
/// heads, 72 blocks) the composed ops run. On FP8 and on the f16 lane alike it agrees with the
/// composed ops (norm, linear with the bias, attention, output projection): the bias joins an
/// f16-rounded q or an f32 output instead of the GEMM's epilogue (last-bit changes, ~2⁻¹¹),
/// 2e-3 rel_l2 on f16; on FP8 the attention's e4m3 rounding carries those into a few of its
/// values (steps of 2⁻⁴), 1e-2. Without the bias the result is far off, so the comparison sees
/// a dropped bias.
#[test]
fn attention_block_leaves_the_qkv_bias_to_the_attention() {
    let name = "attention_block_leaves_the_qkv_bias_to_the_attention";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    let cases = [
        (1500, 20, true, Lane::Q8),
        (1500, 6, false, Lane::Q8),
        (1500, 20, true, Lane::F16),
    ];
    for (i, &(t, heads, whole, lane)) in cases.iter().enumerate() {
        let c = heads * 64;
        let s = 2100 + 10 * i as u64;
        let x = rnd(&[1, t, c], s, 2.0);
        let gamma = rnd(&[c], s + 1, 1.0);
        let beta = rnd(&[c], s + 2, 0.3);
        let wqkv = rnd(&[3 * c, c], s + 3, 1.0 / (c as f32).sqrt());
        let bqkv = rnd(&[3 * c], s + 4, 0.5);
        let wo = rnd(&[c, c], s + 5, 1.0 / (c as f32).sqrt());
        let bo = rnd(&[c], s + 6, 0.5);
        let q = |w: &HostTensor| g.weight(w, lane).unwrap();
        let (wqkv_q, wo_q) = (q(&wqkv), q(&wo));
        let up = |h: &HostTensor| g.upload(h).unwrap();
        let (xt, gt, bt, bqt, bot) = (up(&x), up(&gamma), up(&beta), up(&bqkv), up(&bo));
        let p = stapes_core::AttnParams {
            n_heads: heads,
            scale: 0.125,
            kv_len: None,
            causal: false,
        };
        // 0: the fused op; 1: composed; 2: composed without the q|k|v bias
        let run = |form: usize| -> Vec<f32> {
            let key = format!("test-encoder/fp8-attn-block-{i}-{form}");
            let outs = g
                .chain(&key, &mut |be| {
                    let x16 = be.affine(&xt, 1.0, 0.0)?;
                    let y = if form == 0 {
                        be.layer_norm_attention_add(
                            &x16,
                            &gt,
                            Some(&bt),
                            1e-5,
                            &wqkv_q,
                            Some(&bqt),
                            &p,
                            &wo_q,
                            Some(&bot),
                        )?
                    } else {
                        let h = be.layer_norm(&x16, &gt, Some(&bt), 1e-5)?;
                        let qkv = be.linear(&h, &wqkv_q, (form == 1).then_some(&bqt))?;
                        be.attention_packed_add(&qkv, &p, &wo_q, Some(&bot), &x16)?
                    };
                    Ok(vec![y])
                })
                .unwrap();
            g.download(&outs[0]).unwrap().data
        };
        let (w0, f0) = (
            CudaBackend::attn_wg_launches(),
            CudaBackend::attn_wg_bias_launches(),
        );
        let fused = run(0);
        let folded = CudaBackend::attn_wg_bias_launches() - f0;
        let wg = CudaBackend::attn_wg_launches() > w0;
        let (composed, unbiased) = (run(1), run(2));
        let (err, off) = (rel_l2(&fused, &composed), rel_l2(&unbiased, &composed));
        eprintln!(
            "{lane} t{t} h{heads}: fused vs composed rel_l2 {err:.2e}, without the bias {off:.2e}, \
             {folded} launches added the bias"
        );
        if wg {
            assert_eq!(
                folded > 0,
                whole,
                "{lane} t{t} h{heads}: the bias went the wrong way"
            );
        } else {
            eprintln!("(the warpgroup attention did not run here: the bias is added first)");
        }
        let bar = if lane == Lane::F16 { 2e-3 } else { 1e-2 };
        assert!(
            err < bar,
            "{lane} t{t} h{heads}: fused differs by {err:.2e}"
        );
        assert!(
            off > 0.05,
            "{lane} t{t} h{heads}: the bias changes only {off:.2e}"
        );
    }
}

/// The few-row FP8 GEMM (`f8wg`, `STAPES_CUDA_F8WG`, sm_90): fc1 with its SiLU in the epilogue
/// and the e4m3 bytes of its result for fc2, and a plain linear, against the host emulation of
/// the e4m3 products (each f16 rounding where the kernel makes it) and against cuBLASLt's form
/// (with its activation pass). fc2 reads fc1's e4m3 bytes without a conversion pass and gives
/// the emulation of its product with them. Eager == replay; the launch counter proves it ran.
#[test]
fn fp8_few_row_gemm_is_the_e4m3_product_of_its_input() {
    let name = "fp8_few_row_gemm_is_the_e4m3_product_of_its_input";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    if g.device_info().1 != "compute_90" {
        eprintln!("SKIPPED (the few-row FP8 GEMM is sm_90's): {name}");
        return;
    }
    // (rows, d, hidden, mode): one parakeet clip's fc1 (140 x 1024 -> 4096) by shape; an odd
    // row count with K of two stages; rows over four blocks of 72 with K of one stage; then
    // each form forced, on rows past a block of 72 and past 144
    let shapes = [
        (140, 1024, 4096, "1"),
        (77, 256, 320, "1"),
        (300, 128, 512, "1"),
        (141, 384, 192, "n72s8"),
        (141, 384, 192, "n144s6"),
        (150, 1024, 256, "n144s6"),
    ];
    let tol = EMULATION_BAR;
    for (i, &(m, d, hid, mode)) in shapes.iter().enumerate() {
        let s = 2100 + 10 * i as u64;
        let Mlp {
            x,
            w1,
            b1,
            w2,
            b2,
            r,
            w1q,
            w2q,
            xt,
            b1t,
            b2t,
            rt,
        } = mlp_case(g, s, m, d, hid);
        // outputs: fc1 + SiLU, fc2 + residual over it, fc1 plain; with the runs and passes
        let run = |mode: &str| -> (Vec<Vec<f32>>, u64, u64) {
            g.set_f8wg(mode);
            let key = format!("test-encoder/f8wg-{i}-{mode}");
            let count = || [g.f8wg_runs(), g.fp8_input_passes()];
            let (outs, [runs, passes]) = common::chain_eager_replay(g, &key, &count, &mut |be| {
                let x16 = be.affine(&xt, 1.0, 0.0)?;
                let r16 = be.affine(&rt, 1.0, 0.0)?;
                let h = be.linear_act_feeding(&x16, &w1q, Some(&b1t), Activation::Silu, &w2q)?;
                let y = be.linear_add(&h, &w2q, Some(&b2t), &r16)?;
                let p = be.linear(&x16, &w1q, Some(&b1t))?;
                Ok(vec![h, y, p])
            });
            (outs, runs, passes)
        };
        let (lt, lt_runs, lt_passes) = run("0");
        let (outs, runs, passes) = run(mode);
        g.set_f8wg("0");
        let what = format!("m{m} d{d} hidden{hid} {mode}");
        assert_eq!(lt_runs, 0, "{what}: the few-row GEMM ran while off");
        // fc1 with its activation and the plain linear (fc2 has a residual: cuBLASLt)
        assert_eq!(
            runs, 2,
            "{what}: the few-row GEMM did not take fc1 and the linear"
        );
        assert_eq!(
            passes, lt_passes,
            "{what}: fc2 converted fc1's output (its e4m3 bytes were not left for it)"
        );
        let x8: Vec<f32> = x
            .data
            .iter()
            .map(|&v| e4m3(half::f16::from_f32(v).to_f32()))
            .collect();
        let zero = HostTensor::new(vec![1, m, hid], vec![0.0; m * hid]).unwrap();
        let pre = fp8_dot_f64(&x8, &w1, &b1, &zero, m);
        let want_h: Vec<f32> = pre.iter().map(|&v| h16(silu(h16(v) as f64))).collect();
        let want_p: Vec<f32> = pre.iter().map(|&v| h16(v)).collect();
        let h8: Vec<f32> = outs[0].iter().map(|&v| e4m3(v)).collect();
        let want_y = fp8_dot(&h8, &w2, &b2, &r, m);
        for (j, label, want) in [
            (0, "fc1 + SiLU", &want_h),
            (1, "fc2", &want_y),
            (2, "plain", &want_p),
        ] {
            let ok = compare(&outs[j], want, &tol)
                .unwrap_or_else(|e| panic!("{what}: {label} vs its emulation: {e}"));
            eprintln!("ok {what} {label}: vs emulation rel_l2 {:.2e}", ok.rel_l2);
        }
        // fc2's input differs where fc1's two forms round apart, so only fc1's outputs are
        // held against cuBLASLt's
        for (j, label) in [(0, "fc1 + SiLU"), (2, "plain")] {
            let ok = compare(&outs[j], &lt[j], &tol)
                .unwrap_or_else(|e| panic!("{what}: {label} vs cuBLASLt's form: {e}"));
            eprintln!("ok {what} {label}: vs cuBLASLt rel_l2 {:.2e}", ok.rel_l2);
        }
    }
}

/// `feeding_add_norms`: where the linear after the pass runs on FP8 in `linear_add_norms`'
/// composed form, the pass writes only the e4m3 copy that GEMM reads, and the op's results
/// (the sum and both norms) are the bits of the pass's `_feeding` op then `linear_add_norms`,
/// eager and replayed; the counter proves the e4m3-only form ran. At a split shape of
/// `linear_add_norms` (its f16 operands) and with the switch off it does not run, same bits.
#[test]
fn fp8_feeding_add_norms_writes_e4m3_only() {
    use stapes_core::backend::{feeding_composed, Feeding, Feeds, RelAttnParams};
    let name = "fp8_feeding_add_norms_writes_e4m3_only";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    g.set_rel_attn_e4m3(true);
    // (rows, channels, split on e4m3, switch, e4m3 only expected): past the split form's rows;
    // 16 parakeet clips' rows; one clip's 140 rows of 1024 channels, the split form's shape
    // (f16 operands there); the switch off. Heads of 128.
    let shapes = [
        (600, 256, true, true, true),
        (2240, 256, true, true, true),
        (140, 1024, false, true, false),
        (600, 256, true, false, false),
    ];
    for (i, &(t, c, split_fp8, on, expected)) in shapes.iter().enumerate() {
        let (heads, hid) = (c / 128, 2 * c);
        g.set_split_fp8(split_fp8);
        let s = 4000 + 20 * i as u64;
        let up = |x: &HostTensor| g.upload(x).unwrap();
        let q8 = |x: &HostTensor| g.weight(x, Lane::Q8).unwrap();
        let x = up(&rnd(&[1, t, c], s, 2.0));
        let r = up(&rnd(&[1, t, c], s + 1, 1.0));
        let x2 = up(&rnd(&[1, t, 2 * c], s + 2, 2.0));
        let qkv = up(&rnd(&[1, t, 3 * c], s + 3, 1.0));
        let pos = up(&rnd(&[1, 2 * t - 1, c], s + 4, 1.0));
        let (bu, bv) = (up(&rnd(&[c], s + 5, 0.3)), up(&rnd(&[c], s + 6, 0.3)));
        let (dw, db) = (up(&rnd(&[c, 9], s + 7, 0.4)), up(&rnd(&[c], s + 8, 0.2)));
        let w1 = q8(&rnd(&[hid, c], s + 9, 1.0 / (c as f32).sqrt()));
        let b1 = up(&rnd(&[hid], s + 10, 0.5));
        let w2 = q8(&rnd(&[c, hid], s + 11, 1.0 / (hid as f32).sqrt()));
        let wc = q8(&rnd(&[c, c], s + 12, 1.0 / (c as f32).sqrt()));
        let bc = up(&rnd(&[c], s + 13, 0.5));
        let (g1, n1) = (up(&rnd(&[c], s + 14, 1.0)), up(&rnd(&[c], s + 15, 0.5)));
        let (g2, n2) = (up(&rnd(&[c], s + 16, 1.0)), up(&rnd(&[c], s + 17, 0.5)));
        let p = RelAttnParams {
            heads,
            scale: 1.0 / ((c / heads) as f32).sqrt(),
            query_block: t,
        };
        for pass_i in 0..3 {
            let run = |fused: bool| -> (Vec<Vec<f32>>, u64) {
                g.set_e4m3_only(on);
                let key = format!("test-encoder/fp8-feeding-{i}-{pass_i}-{fused}");
                let count = || [g.e4m3_only_runs()];
                let (outs, [runs]) = common::chain_eager_replay(g, &key, &count, &mut |be| {
                    let x16 = be.affine(&x, 1.0, 0.0)?;
                    let r16 = be.affine(&r, 1.0, 0.0)?;
                    let (x2_16, q16, p16);
                    let (pass, w) = match pass_i {
                        0 => (
                            Feeding::LinearAct {
                                x: &x16,
                                w: &w1,
                                bias: Some(&b1),
                                act: Activation::Silu,
                            },
                            &w2,
                        ),
                        1 => {
                            x2_16 = be.affine(&x2, 1.0, 0.0)?;
                            let pass = Feeding::GluDepthwiseAct {
                                x: &x2_16,
                                keep: None,
                                w: &dw,
                                bias: Some(&db),
                                act: Activation::Silu,
                            };
                            (pass, &wc)
                        }
                        _ => {
                            q16 = be.affine(&qkv, 1.0, 0.0)?;
                            p16 = be.affine(&pos, 1.0, 0.0)?;
                            let pass = Feeding::RelAttention {
                                qkv: &q16,
                                pos: &p16,
                                bias_u: &bu,
                                bias_v: &bv,
                                keep: None,
                                p,
                            };
                            (pass, &wc)
                        }
                    };
                    let bias = if pass_i == 0 { None } else { Some(&bc) };
                    let norms = [(&g1, Some(&n1)), (&g2, Some(&n2))];
                    // the results are downloaded below: not the linear's alone
                    let feeds = Some(Feeds {
                        w: &w1,
                        only: false,
                    });
                    let (y, zs) = if fused {
                        be.feeding_add_norms(pass, w, bias, &r16, &norms, 1e-5, feeds)?
                    } else {
                        let h = feeding_composed(be, pass, w)?;
                        be.linear_add_norms(&h, w, bias, &r16, &norms, 1e-5, Some(&w1))?
                    };
                    Ok([vec![y], zs].concat())
                });
                g.set_e4m3_only(true);
                (outs, runs)
            };
            let ((fused, runs), (composed, composed_runs)) = (run(true), run(false));
            let what = format!("rows {t} pass {pass_i} switch {on}");
            assert_eq!(composed_runs, 0, "{what}: the composed form counted a run");
            assert_eq!(
                runs > 0,
                expected,
                "{what}: e4m3-only runs {runs}, expected {expected}"
            );
            assert_eq!(fused.len(), 3, "{what}: the sum and two norms");
            for (j, (a, b)) in fused.iter().zip(&composed).enumerate() {
                assert!(
                    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{what}: result {j} differs from the composed form"
                );
            }
        }
    }
    g.set_split_fp8(true);
    g.set_e4m3_only(true);
}

/// `feeding_add_norms` with `Feeds::only`: where the linear after the pass runs on FP8 and the
/// last norm's only reader is the next linear on FP8, that norm writes its e4m3 rows alone.
/// The sum, the pair's first norm and the next linear's output over the last norm are the bits
/// of the same chain with the f16 rows written (`only` false), eager and replayed; the counter
/// proves the e4m3-only norm ran (and not where `only` is false or the switch is off). Reading
/// the unwritten result any other way (a download, an f16 op) is an error, not its stale bytes,
/// and the backend works on after it.
#[test]
fn fp8_norm_feeding_only_writes_e4m3_alone() {
    use stapes_core::backend::{Feeding, Feeds};
    let name = "fp8_norm_feeding_only_writes_e4m3_alone";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    // (rows, channels): 16 parakeet clips' rows at 256 channels, and at parakeet's 1024
    for (i, &(t, c)) in [(2240, 256), (2240, 1024)].iter().enumerate() {
        let hid = 2 * c;
        let s = 5000 + 20 * i as u64;
        let up = |x: &HostTensor| g.upload(x).unwrap();
        let q8 = |x: &HostTensor| g.weight(x, Lane::Q8).unwrap();
        let x = up(&rnd(&[1, t, c], s, 2.0));
        let r = up(&rnd(&[1, t, c], s + 1, 1.0));
        let w1 = q8(&rnd(&[hid, c], s + 2, 1.0 / (c as f32).sqrt()));
        let b1 = up(&rnd(&[hid], s + 3, 0.5));
        let w2 = q8(&rnd(&[c, hid], s + 4, 1.0 / (hid as f32).sqrt()));
        let wn = q8(&rnd(&[3 * c, c], s + 5, 1.0 / (c as f32).sqrt()));
        let bn = up(&rnd(&[3 * c], s + 6, 0.5));
        let (g1, n1) = (up(&rnd(&[c], s + 7, 1.0)), up(&rnd(&[c], s + 8, 0.5)));
        let (g2, n2) = (up(&rnd(&[c], s + 9, 1.0)), up(&rnd(&[c], s + 10, 0.5)));
        for pair in [false, true] {
            let norms_all = [(&g1, Some(&n1)), (&g2, Some(&n2))];
            let norms = if pair {
                &norms_all[..]
            } else {
                &norms_all[1..]
            };
            let fwd = |be: &CudaBackend, only: bool| {
                let x16 = be.affine(&x, 1.0, 0.0)?;
                let r16 = be.affine(&r, 1.0, 0.0)?;
                let pass = Feeding::LinearAct {
                    x: &x16,
                    w: &w1,
                    bias: Some(&b1),
                    act: Activation::Silu,
                };
                let feeds = Some(Feeds { w: &wn, only });
                be.feeding_add_norms(pass, &w2, None, &r16, norms, 1e-5, feeds)
            };
            let run = |only: bool, switch: bool| -> (Vec<Vec<f32>>, u64) {
                g.set_norm_e4m3_only(switch);
                let key = format!("test-encoder/fp8-norm-only-{i}-{pair}-{only}-{switch}");
                let count = || [g.norm_e4m3_only_runs()];
                let (outs, [runs]) = common::chain_eager_replay(g, &key, &count, &mut |be| {
                    let (y, mut zs) = fwd(be, only)?;
                    let z = zs.pop().expect("the last norm");
                    // the next sub-block's first linear, as the encoder runs it
                    let next = be.linear(&z, &wn, Some(&bn))?;
                    Ok([vec![y], zs, vec![next]].concat())
                });
                g.set_norm_e4m3_only(true);
                (outs, runs)
            };
            let what = format!("rows {t} channels {c} pair {pair}");
            let (alone, runs) = run(true, true);
            let (written, written_runs) = run(false, true);
            let (off, off_runs) = run(true, false);
            assert!(runs > 0, "{what}: the e4m3-only norm never ran");
            assert_eq!(written_runs, 0, "{what}: ran where only is false");
            assert_eq!(off_runs, 0, "{what}: ran with the switch off");
            assert_eq!(alone.len(), if pair { 3 } else { 2 }, "{what}: results");
            for (j, ((a, b), o)) in alone.iter().zip(&written).zip(&off).enumerate() {
                for (k, other) in [b, o].iter().enumerate() {
                    let same = a.len() == other.len()
                        && a.iter()
                            .zip(other.iter())
                            .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(
                        same,
                        "{what}: result {j} differs from form {k} (f16 rows written)"
                    );
                }
            }
            // the unwritten result cannot be read as f16: not downloaded (a chain's output) ...
            let key = format!("test-encoder/fp8-norm-only-read-{i}-{pair}");
            let outs = g
                .chain(&key, &mut |be| {
                    Ok(vec![fwd(be, true)?.1.pop().expect("norm")])
                })
                .expect("the chain");
            let e = g
                .download(&outs[0])
                .expect_err("downloaded an elided result");
            assert!(e.to_string().contains("never written"), "{what}: {e}");
            // ... nor read by an f16 op
            let key = format!("test-encoder/fp8-norm-only-op-{i}-{pair}");
            let e = g
                .chain(&key, &mut |be| {
                    let z = fwd(be, true)?.1.pop().expect("norm");
                    Ok(vec![be.affine(&z, 1.0, 0.0)?])
                })
                .expect_err("an f16 op read an elided result");
            assert!(e.to_string().contains("never written"), "{what}: {e}");
            let fine = g.download(&x).expect("the backend after the error");
            assert_eq!(fine.data.len(), t * c, "{what}");
        }
    }
}

/// `feeding_add_norms` after fc1 with SiLU on cuBLASLt (past the few-row GEMM's rows), with the
/// hidden switched to e4m3 (`set_hidden_e4m3`): fc1 writes its pre-activation as e4m3 and
/// `act8_e4m3` maps the bytes to the SiLU's e4m3, the fc2 input.
/// - The table and the computed form give the same bits, eager and replayed, and the counter
///   proves the form ran (and not where it is off).
/// - The sum is what the host emulation of that arithmetic gives: the pre-activation rounded to
///   e4m3, SiLU, f16, e4m3, then fc2's FP8 products.
/// - Against the exact f32 MLP it stays within 1.5× the f16 hidden's error. The e4m3 rounding
///   before the SiLU takes fc2's input from ~2.7 % to ~3.7 % rms on Gaussian pre-activations;
///   with the weight's own ~2.6 % that is ~3.75 % → ~4.5 % of fc2's output (×1.2).
#[test]
fn fp8_e4m3_hidden_is_the_silu_of_its_e4m3_preactivation() {
    use stapes_core::backend::Feeding;
    let name = "fp8_e4m3_hidden_is_the_silu_of_its_e4m3_preactivation";
    let Some((g, _serial)) = fp8_chain_gpu(name) else {
        return;
    };
    for (i, &(m, d, hid)) in [(600, 256, 512), (1104, 256, 1024)].iter().enumerate() {
        let s = 5000 + 20 * i as u64;
        let Mlp {
            x,
            w1,
            b1,
            w2,
            b2,
            r,
            w1q,
            w2q,
            xt,
            b1t,
            b2t,
            rt,
        } = mlp_case(g, s, m, d, hid);
        let (gamma, beta) = (
            g.upload(&rnd(&[d], s + 10, 1.0)).unwrap(),
            g.upload(&rnd(&[d], s + 11, 0.5)).unwrap(),
        );
        let run = |mode: &str| -> (Vec<Vec<f32>>, u64) {
            g.set_hidden_e4m3(mode);
            let key = format!("test-encoder/fp8-hidden-{i}-{mode}");
            let count = || [g.hidden_e4m3_runs()];
            let (outs, [runs]) = common::chain_eager_replay(g, &key, &count, &mut |be| {
                let x16 = be.affine(&xt, 1.0, 0.0)?;
                let r16 = be.affine(&rt, 1.0, 0.0)?;
                let pass = Feeding::LinearAct {
                    x: &x16,
                    w: &w1q,
                    bias: Some(&b1t),
                    act: Activation::Silu,
                };
                let norms = [(&gamma, Some(&beta))];
                let (y, zs) =
                    be.feeding_add_norms(pass, &w2q, Some(&b2t), &r16, &norms, 1e-5, None)?;
                Ok([vec![y], zs].concat())
            });
            g.set_hidden_e4m3("0");
            (outs, runs)
        };
        let ((table, t_runs), (math, m_runs), (f16h, f_runs)) = (run("lut"), run("math"), run("0"));
        assert!(
            t_runs > 0 && m_runs > 0,
            "m{m}: the e4m3 hidden did not run"
        );
        assert_eq!(f_runs, 0, "m{m}: the e4m3 hidden ran while switched off");
        for (j, (a, b)) in table.iter().zip(&math).enumerate() {
            assert!(
                a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()),
                "m{m}: output {j}: the table's bytes differ from the computed ones"
            );
        }
        // host emulation of the e4m3 hidden
        let zero = HostTensor::new(vec![1, m, hid], vec![0.0; m * hid]).unwrap();
        let hidden: Vec<f32> = emulate_f32(&x, &w1, &b1, &zero)
            .iter()
            .map(|&v| e4m3(h16(silu(e4m3(v as f32) as f64))))
            .collect();
        let want = fp8_dot(&hidden, &w2, &b2, &r, m);
        // a pre-activation within the GEMM's accumulation error of an e4m3 rounding boundary
        // rounds to the neighbour (a whole e4m3 step of that hidden value): the MLP test's bar
        let tol = stapes_core::tolerance::Tolerance {
            max_abs: 0.0,
            max_rel: 2e-2,
            rel_l2: 6e-3,
        };
        let e = compare(&table[0], &want, &tol)
            .unwrap_or_else(|e| panic!("m{m}: the e4m3 hidden vs its emulation: {e}"));
        // both forms against the exact MLP, residual taken out (it would dilute the error)
        // the specification's ops in f32 on the unrounded operands
        let exact: Vec<f32> = {
            let re = ReferenceBackend::new();
            let up = |t: &HostTensor| re.upload(t).unwrap();
            let (w1r, w2r) = (
                re.weight(&w1, Lane::F32).unwrap(),
                re.weight(&w2, Lane::F32).unwrap(),
            );
            let h = re.linear(&up(&x), &w1r, Some(&up(&b1))).unwrap();
            let h = re.activation(&h, Activation::Silu).unwrap();
            let y = re.linear(&h, &w2r, Some(&up(&b2))).unwrap();
            re.download(&y).unwrap().data
        };
        let fc2 = |y: &[f32]| -> Vec<f32> {
            y.iter()
                .zip(&r.data)
                .map(|(&v, &rv)| v - h16(rv as f64))
                .collect()
        };
        let (err8, err16) = (
            rel_l2(&fc2(&table[0]), &exact),
            rel_l2(&fc2(&f16h[0]), &exact),
        );
        eprintln!(
            "ok m{m}: vs emulation rel_l2 {:.2e}; vs exact: e4m3 hidden {err8:.4}, f16 hidden {err16:.4}",
            e.rel_l2
        );
        assert!(
            err16 > 0.0,
            "m{m}: the f16 hidden matched the exact MLP exactly"
        );
        assert!(
            err8 <= 1.5 * err16,
            "m{m}: the e4m3 hidden's error {err8:.4} is over 1.5× the f16 hidden's {err16:.4}"
        );
    }
}
