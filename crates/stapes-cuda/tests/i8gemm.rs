//! The q8 lane's own int8 tensor-core GEMM (`kernels/i8gemm.cu`, `STAPES_CUDA_I8GEMM`) against
//! the library path it replaces (cuBLASLt int8 → i32 → `dequant_epilogue*` /
//! `dequant_act_quant`), in the same process: `linear` and `linear_add` bit for bit, f32
//! activations (eager) and f16 activations (encoder chain, eager and replayed); `linear_act`'s
//! output bit for bit; the MLP (`linear_act` → `linear_add`) bit for bit with f32 activations,
//! and with f16 activations within the table's `cuda-f16act` q8 row of the reference (there the
//! next GEMM quantizes fc1's f16-rounded output, the library path its f32 values).
//! Every case also asserts that the int8 kernel really ran (its launch count grew).
//! `i8gemm_bench` (ignored) times it against the library path and cuBLASLt f16.
//! Without a GPU each test prints `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{check_with, rnd, tol_for};
use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::Op;
use stapes_core::{Activation, Backend, HostTensor, Lane};
use stapes_cuda::{CudaBackend, CudaTensor, Q8Mix};

/// (rows, K, N): rows off every tile height (9, 33, 130, 517), K off 16 / 64 (31, 100, 385),
/// odd N (17, 257: the scalar-store epilogue), N off 128, K long enough for the pipeline to
/// wrap (2560 = 40 K-tiles), and a Whisper-tiny-sized MLP shape.
const SHAPES: [(usize, usize, usize); 8] = [
    (9, 31, 40),
    (33, 100, 17),
    (130, 385, 257),
    (517, 640, 96),
    (300, 64, 384),
    (20, 2560, 48),
    (1500, 384, 1536),
    (140, 1024, 520),
];

/// Tile variants: each forced (1..=16; 14 to 16 the TMA-fed wgmma forms, which fall back to
/// the shape rule on a device without them), and the shape rule (0).
const TILES: [u8; 17] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0];

struct Case {
    x: HostTensor,
    w: HostTensor,
    b: HostTensor,
    r: HostTensor,
}

fn case(i: usize, m: usize, k: usize, n: usize) -> Case {
    Case {
        x: rnd(&[1, m, k], 110 + i as u64, 1.0),
        w: rnd(&[n, k], 120 + i as u64, 1.0 / (k as f32).sqrt()),
        b: rnd(&[n], 130 + i as u64, 0.5),
        r: rnd(&[1, m, n], 140 + i as u64, 1.0),
    }
}

/// The variants of one case as host tensors: linear without / with bias, linear_add without /
/// with bias, linear_act (GELU, SiLU) with bias.
fn variants(g: &CudaBackend, c: &Case, f16: bool, key: &str) -> Vec<HostTensor> {
    let x = g.upload(&c.x).unwrap();
    let w = g.weight(&c.w, Lane::Q8).unwrap();
    let b = g.upload(&c.b).unwrap();
    let r = g.upload(&c.r).unwrap();
    let body = |be: &CudaBackend| -> stapes_core::Result<Vec<CudaTensor>> {
        // identity affines: inside a chain they make the f16 copies the encoder would hold
        let (x, r) = (be.affine(&x, 1.0, 0.0)?, be.affine(&r, 1.0, 0.0)?);
        Ok(vec![
            be.linear(&x, &w, None)?,
            be.linear(&x, &w, Some(&b))?,
            be.linear_add(&x, &w, None, &r)?,
            be.linear_add(&x, &w, Some(&b), &r)?,
            be.linear_act(&x, &w, Some(&b), Activation::Gelu)?,
            be.linear_act(&x, &w, Some(&b), Activation::Silu)?,
        ])
    };
    let out = if f16 {
        g.chain(key, &mut |be| body(be)).unwrap()
    } else {
        body(g).unwrap()
    };
    out.iter().map(|t| g.download(t).unwrap()).collect()
}

const NAMES: [&str; 6] = [
    "linear",
    "linear+bias",
    "linear_add",
    "linear_add+bias",
    "linear_act gelu",
    "linear_act silu",
];

fn assert_bits(what: &str, got: &HostTensor, want: &HostTensor) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    let diff = got
        .data
        .iter()
        .zip(&want.data)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    let first = got
        .data
        .iter()
        .zip(&want.data)
        .position(|(a, b)| a.to_bits() != b.to_bits());
    assert_eq!(
        diff,
        0,
        "{what}: {diff} of {} values differ, first at {first:?}: {:?} vs {:?}",
        got.data.len(),
        first.map(|i| got.data[i]),
        first.map(|i| want.data[i])
    );
}

/// Every variant, f32 activations (eager): the int8 kernel's outputs equal the library path's.
#[test]
fn i8gemm_equals_library_path_f32_activations() {
    let (g, _serial) = require_gpu!("i8gemm_equals_library_path_f32_activations");
    // both sides of every comparison here are int8 GEMMs
    g.set_q8_mix(Q8Mix::Int8);
    g.set_f16_activations(false);
    for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
        let c = case(i, m, k, n);
        g.set_i8gemm(false);
        let want = variants(g, &c, false, "");
        for tile in TILES {
            g.set_i8gemm(true);
            g.set_i8gemm_variant(tile);
            let l0 = g.i8gemm_launches();
            let got = variants(g, &c, false, "");
            let launched = g.i8gemm_launches() - l0;
            g.set_i8gemm(false);
            let what = format!("m{m} k{k} n{n} tile {tile}");
            assert_eq!(
                launched, 6,
                "{what}: the int8 kernel ran {launched} times, not 6"
            );
            for (v, name) in NAMES.iter().enumerate() {
                assert_bits(&format!("{what} {name} f32"), &got[v], &want[v]);
            }
            eprintln!("ok   {what}: 6 variants bitwise (f32 activations)");
        }
    }
    g.set_i8gemm_variant(0);
}

/// Every variant inside an encoder chain (f16 activations): eager == library path bitwise, and
/// the replayed graph == the eager run bitwise.
#[test]
fn i8gemm_equals_library_path_f16_chain_and_replay() {
    let (g, _serial) = require_gpu!("i8gemm_equals_library_path_f16_chain_and_replay");
    // both sides of every comparison here are int8 GEMMs
    g.set_q8_mix(Q8Mix::Int8);
    static N: AtomicUsize = AtomicUsize::new(0);
    g.set_f16_activations(true);
    let key = || format!("test-encoder/i8gemm-{}", N.fetch_add(1, Ordering::Relaxed));
    for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
        let c = case(i, m, k, n);
        g.set_i8gemm(false);
        let want = variants(g, &c, true, &key());
        for tile in TILES {
            g.set_i8gemm(true);
            g.set_i8gemm_variant(tile);
            let kk = key();
            let l0 = g.i8gemm_launches();
            let eager = variants(g, &c, true, &kk);
            let launched = g.i8gemm_launches() - l0;
            let replayed = variants(g, &c, true, &kk);
            g.set_i8gemm(false);
            let what = format!("m{m} k{k} n{n} tile {tile}");
            assert!(
                launched >= 6,
                "{what}: the int8 kernel ran {launched} times"
            );
            for (v, name) in NAMES.iter().enumerate() {
                assert_bits(&format!("{what} {name} f16 eager"), &eager[v], &want[v]);
                assert_bits(
                    &format!("{what} {name} f16 replay"),
                    &replayed[v],
                    &eager[v],
                );
            }
            eprintln!("ok   {what}: 6 variants bitwise (f16 chain), replay == eager");
        }
    }
    g.set_i8gemm_variant(0);
}

/// fc1 → GELU → fc2 (`linear_act` then `linear_add`), the encoder MLP: f32 activations bitwise
/// equal to the library path; f16 activations (where fc2 quantizes fc1's f16 output rather than
/// its f32 values) within the `cuda-f16act` q8 row of the reference, like the library path.
#[test]
fn i8gemm_mlp_against_library_and_reference() {
    let (g, _serial) = require_gpu!("i8gemm_mlp_against_library_and_reference");
    // both sides of every comparison here are int8 GEMMs
    g.set_q8_mix(Q8Mix::Int8);
    static N: AtomicUsize = AtomicUsize::new(0);
    let r = ReferenceBackend::new();
    for (i, &(m, d, hid)) in [(33, 100, 172), (300, 384, 1536), (517, 64, 256)]
        .iter()
        .enumerate()
    {
        let x = rnd(&[1, m, d], 150 + i as u64, 1.0);
        let w1 = rnd(&[hid, d], 160 + i as u64, 2.0 / (d as f32).sqrt());
        let b1 = rnd(&[hid], 170 + i as u64, 0.5);
        let w2 = rnd(&[d, hid], 180 + i as u64, 1.0 / (hid as f32).sqrt());
        let b2 = rnd(&[d], 190 + i as u64, 0.5);
        let run = |f16: bool, on: bool| -> HostTensor {
            g.set_f16_activations(f16);
            g.set_i8gemm(on);
            let xt = g.upload(&x).unwrap();
            let (w1t, w2t) = (
                g.weight(&w1, Lane::Q8).unwrap(),
                g.weight(&w2, Lane::Q8).unwrap(),
            );
            let (b1t, b2t) = (g.upload(&b1).unwrap(), g.upload(&b2).unwrap());
            let l0 = g.i8gemm_launches();
            let mut body = |be: &CudaBackend| -> stapes_core::Result<Vec<CudaTensor>> {
                let x = be.affine(&xt, 1.0, 0.0)?;
                let h = be.linear_act(&x, &w1t, Some(&b1t), Activation::Gelu)?;
                Ok(vec![be.linear_add(&h, &w2t, Some(&b2t), &x)?])
            };
            let out = if f16 {
                let key = format!("test-encoder/i8mlp-{}", N.fetch_add(1, Ordering::Relaxed));
                g.chain(&key, &mut body).unwrap()
            } else {
                body(g).unwrap()
            };
            let host = g.download(&out[0]).unwrap();
            let launched = g.i8gemm_launches() - l0;
            g.set_i8gemm(false);
            if on {
                assert_eq!(
                    launched, 2,
                    "mlp m{m}: the int8 kernel ran {launched} times"
                );
            } else {
                assert_eq!(launched, 0, "mlp m{m}: the switch did not turn it off");
            }
            host
        };
        let what = format!("mlp m{m} d{d} hid{hid}");
        assert_bits(
            &format!("{what} f32"),
            &run(false, true),
            &run(false, false),
        );
        let want = {
            let rd = |t: &HostTensor| {
                HostTensor::new(
                    t.shape.clone(),
                    t.data
                        .iter()
                        .map(|v| half::f16::from_f32(*v).to_f32())
                        .collect(),
                )
                .unwrap()
            };
            let xt = r.upload(&rd(&x)).unwrap();
            let (w1t, w2t) = (
                r.weight(&w1, Lane::Q8).unwrap(),
                r.weight(&w2, Lane::Q8).unwrap(),
            );
            let (b1t, b2t) = (r.upload(&b1).unwrap(), r.upload(&b2).unwrap());
            let h = r
                .activation(&r.linear(&xt, &w1t, Some(&b1t)).unwrap(), Activation::Gelu)
                .unwrap();
            r.download(&r.linear_add(&h, &w2t, Some(&b2t), &xt).unwrap())
                .unwrap()
        };
        let tol = tol_for(Op::Linear, Lane::Q8, "cuda-f16act");
        check_with(&format!("{what} f16 i8gemm"), tol, &run(true, true), &want);
        check_with(
            &format!("{what} f16 library"),
            tol,
            &run(true, false),
            &want,
        );
    }
    g.set_f16_activations(false);
}

/// Micro-benchmark at the encoder shapes (ignored; the device rounds run it with
/// `--ignored --nocapture`): int8 kernel (every tile variant) vs cuBLASLt int8 + scaling
/// epilogue vs cuBLASLt f16, each as `reps` back-to-back `linear`s (with bias, f16 out) inside
/// one captured encoder chain, so launch gaps are the graph's.
#[test]
#[ignore]
fn i8gemm_bench() {
    let (g, _serial) = require_gpu!("i8gemm_bench");
    // both sides of every comparison here are int8 GEMMs
    g.set_q8_mix(Q8Mix::Int8);
    g.set_f16_activations(true);
    let reps = 20usize;
    let iters = 10usize;
    let shapes: [(usize, usize, usize, &str); 10] = [
        (1500, 1280, 3840, "turbo qkv"),
        (1500, 1280, 1280, "turbo out"),
        (1500, 1280, 5120, "turbo fc1"),
        (1500, 5120, 1280, "turbo fc2"),
        (24000, 1280, 5120, "turbo fc1 x16"),
        (1500, 384, 1536, "tiny fc1"),
        (1500, 1536, 384, "tiny fc2"),
        (1500, 512, 2048, "base fc1"),
        (140, 1024, 4096, "parakeet fc1"),
        (2240, 1024, 4096, "parakeet fc1 long"),
    ];
    let (name, arch) = g.device_info();
    println!("device {name} {arch}; {reps} linears per graph, {iters} replays timed");
    // `STAPES_I8_BENCH_TILES=name,name`: only those variants (the full sweep takes minutes)
    let only = std::env::var("STAPES_I8_BENCH_TILES").unwrap_or_default();
    let picked: Vec<(u8, &str)> = g
        .i8gemm_variants()
        .into_iter()
        .enumerate()
        .map(|(i, v)| (i as u8 + 1, v))
        .filter(|(_, v)| only.is_empty() || only.split(',').any(|o| o.trim() == *v))
        .collect();
    let variants: Vec<&str> = picked.iter().map(|p| p.1).collect();
    println!(
        "| shape | f16 TFLOP/s (ms) | cuBLASLt i8+epi TOP/s (ms) | {} | auto | best | lt/best | f16/best |",
        variants.join(" | ")
    );
    static N: AtomicUsize = AtomicUsize::new(0);
    for (m, k, n, what) in shapes {
        let x = g.upload(&rnd(&[1, m, k], 1, 1.0)).unwrap();
        let wh = rnd(&[n, k], 2, 1.0 / (k as f32).sqrt());
        let b = g.upload(&rnd(&[n], 3, 0.5)).unwrap();
        let w16 = g.weight(&wh, Lane::F16).unwrap();
        let w8 = g.weight(&wh, Lane::Q8).unwrap();
        let time = |w: &stapes_cuda::CudaWeight, on: bool, tile: u8| -> f64 {
            g.set_i8gemm(on);
            g.set_i8gemm_variant(tile);
            let key = format!("bench-encoder/i8-{}", N.fetch_add(1, Ordering::Relaxed));
            let mut body = |be: &CudaBackend| -> stapes_core::Result<Vec<CudaTensor>> {
                let x16 = be.affine(&x, 1.0, 0.0)?;
                let mut last = Vec::new();
                for _ in 0..reps {
                    last = vec![be.linear(&x16, w, Some(&b))?];
                }
                Ok(last)
            };
            // eager (plans chosen), capture, then timed replays
            for _ in 0..3 {
                g.chain(&key, &mut body).unwrap();
            }
            g.synchronize().unwrap();
            let t0 = std::time::Instant::now();
            for _ in 0..iters {
                g.chain(&key, &mut body).unwrap();
            }
            g.synchronize().unwrap();
            let ms = t0.elapsed().as_secs_f64() * 1e3 / (iters * reps) as f64;
            g.set_i8gemm(false);
            g.set_i8gemm_variant(0);
            ms
        };
        let f16 = time(&w16, false, 0);
        let lt = time(&w8, false, 0);
        let ours: Vec<f64> = picked.iter().map(|p| time(&w8, true, p.0)).collect();
        let auto = time(&w8, true, 0);
        let fl = 2.0 * (m * k * n) as f64;
        let tf = |ms: f64| fl / ms / 1e9;
        let (bi, best) = ours
            .iter()
            .copied()
            .enumerate()
            .fold((0, f64::MAX), |a, (i, t)| if t < a.1 { (i, t) } else { a });
        let cells: Vec<String> = ours
            .iter()
            .map(|&t| format!("{:.0} ({t:.4})", tf(t)))
            .collect();
        println!(
            "| {m}x{k}->{n} {what} | {:.0} ({f16:.4}) | {:.0} ({lt:.4}) | {} | {:.0} ({auto:.4}) | {} | {:.2}x | {:.2}x |",
            tf(f16),
            tf(lt),
            cells.join(" | "),
            tf(auto),
            variants[bi],
            lt / best,
            f16 / best
        );
    }
    g.set_f16_activations(false);
}

/// One shape for a profiler (ignored): `STAPES_I8_PROFILE=m,k,n` (default the turbo fc1
/// 1500,1280,5120), the variant from `STAPES_CUDA_I8GEMM_TILE`; three eager q8 `linear`s with
/// the int8 kernel on, e.g. under `ncu -k regex:i8gemm_bm --launch-count 1`.
#[test]
#[ignore]
fn i8gemm_profile_one() {
    let (g, _serial) = require_gpu!("i8gemm_profile_one");
    // both sides of every comparison here are int8 GEMMs
    g.set_q8_mix(Q8Mix::Int8);
    let dims: Vec<usize> = std::env::var("STAPES_I8_PROFILE")
        .unwrap_or_else(|_| "1500,1280,5120".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let [m, k, n] = dims[..] else {
        panic!("STAPES_I8_PROFILE wants m,k,n, got {dims:?}");
    };
    let x = g.upload(&rnd(&[1, m, k], 1, 1.0)).unwrap();
    let w = g
        .weight(&rnd(&[n, k], 2, 1.0 / (k as f32).sqrt()), Lane::Q8)
        .unwrap();
    let b = g.upload(&rnd(&[n], 3, 0.5)).unwrap();
    g.set_i8gemm(true);
    let l0 = g.i8gemm_launches();
    for _ in 0..3 {
        g.linear(&x, &w, Some(&b)).unwrap();
    }
    g.synchronize().unwrap();
    assert_eq!(g.i8gemm_launches() - l0, 3);
    g.set_i8gemm(false);
}
