//! Micro-benchmark of the CUDA home at Whisper large-v3-turbo encoder shapes (T = 1500,
//! d = 1280, 20 heads × 64, FFN 5120): f16 vs q8 linear, decoder-step GEMVs, fused attention,
//! and a synthetic 32-layer encoder stack (no conv stem) eager vs CUDA-graph replay.
//! Times come from CUDA events around each repetition; medians of `--reps` (default 30).
//!
//! `cargo run --release -p stapes-cuda --example cuda_bench -- [--reps N] [--layers N] [--batch B]`

use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use stapes_core::{Activation, AttnParams, Backend, HostTensor, Lane};
use stapes_cuda::{CudaBackend, CudaTensor, CudaWeight};

fn arg(name: &str, default: usize) -> usize {
    let v: Vec<String> = std::env::args().collect();
    v.iter()
        .position(|a| a == name)
        .and_then(|i| v.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

struct Stats {
    median: f64,
    min: f64,
    max: f64,
}

/// Milliseconds per call of `f`, timed with CUDA events on the backend's stream.
fn time(g: &CudaBackend, reps: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..3 {
        f();
    }
    g.synchronize().unwrap();
    let ctx = g.context();
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let a = ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .unwrap();
        let b = ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .unwrap();
        a.record(g.stream()).unwrap();
        f();
        b.record(g.stream()).unwrap();
        b.synchronize().unwrap();
        v.push(a.elapsed_ms(&b).unwrap() as f64);
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Stats {
        median: v[v.len() / 2],
        min: v[0],
        max: v[v.len() - 1],
    }
}

struct Layer {
    ln_g: CudaTensor,
    ln_b: CudaTensor,
    q: CudaWeight,
    k: CudaWeight,
    v: CudaWeight,
    o: CudaWeight,
    fc1: CudaWeight,
    fc2: CudaWeight,
    bq: CudaTensor,
    b1: CudaTensor,
    b2: CudaTensor,
    /// q, k, v stacked (3d, d): one GEMM instead of three (a model-side fusion, measured here)
    qkv: CudaWeight,
    bqkv: CudaTensor,
}

fn layer(g: &CudaBackend, d: usize, f: usize, lane: Lane, seed: u64) -> Layer {
    let r = |s: &[usize], k: u64, sc: f32| HostTensor::random(s.to_vec(), seed * 100 + k, sc);
    let (inv_d, inv_f) = (1.0 / (d as f32).sqrt(), 1.0 / (f as f32).sqrt());
    Layer {
        ln_g: g.upload(&r(&[d], 1, 1.0)).unwrap(),
        ln_b: g.upload(&r(&[d], 2, 0.1)).unwrap(),
        q: g.weight(&r(&[d, d], 3, inv_d), lane).unwrap(),
        k: g.weight(&r(&[d, d], 4, inv_d), lane).unwrap(),
        v: g.weight(&r(&[d, d], 5, inv_d), lane).unwrap(),
        o: g.weight(&r(&[d, d], 6, inv_d), lane).unwrap(),
        fc1: g.weight(&r(&[f, d], 7, inv_d), lane).unwrap(),
        fc2: g.weight(&r(&[d, f], 8, inv_f), lane).unwrap(),
        bq: g.upload(&r(&[d], 9, 0.1)).unwrap(),
        b1: g.upload(&r(&[f], 10, 0.1)).unwrap(),
        b2: g.upload(&r(&[d], 11, 0.1)).unwrap(),
        qkv: g.weight(&r(&[3 * d, d], 12, inv_d), lane).unwrap(),
        bqkv: g.upload(&r(&[3 * d], 13, 0.1)).unwrap(),
    }
}

/// The Whisper encoder block, pre-norm (LN, q/k/v, attention, out, LN, fc1 + GELU, fc2).
fn encoder(
    g: &CudaBackend,
    x: &CudaTensor,
    layers: &[Layer],
    n_layers: usize,
    heads: usize,
    fused_qkv: bool,
) -> stapes_core::Result<CudaTensor> {
    let d = x.shape()[2];
    let p = AttnParams {
        n_heads: heads,
        scale: 1.0 / ((d / heads) as f32).sqrt(),
        kv_len: None,
        causal: false,
    };
    let mut h = x.clone();
    for i in 0..n_layers {
        let l = &layers[i % layers.len()];
        let n = g.layer_norm(&h, &l.ln_g, Some(&l.ln_b), 1e-5)?;
        let (q, k, v) = if fused_qkv {
            let qkv = g.linear(&n, &l.qkv, Some(&l.bqkv))?;
            (
                g.slice(&qkv, 2, 0, d)?,
                g.slice(&qkv, 2, d, d)?,
                g.slice(&qkv, 2, 2 * d, d)?,
            )
        } else {
            (
                g.linear(&n, &l.q, Some(&l.bq))?,
                g.linear(&n, &l.k, None)?,
                g.linear(&n, &l.v, Some(&l.bq))?,
            )
        };
        let a = g.attention(&q, &k, &v, &p)?;
        h = g.add(&h, &g.linear(&a, &l.o, Some(&l.b2))?)?;
        let n = g.layer_norm(&h, &l.ln_g, Some(&l.ln_b), 1e-5)?;
        let f = g.activation(&g.linear(&n, &l.fc1, Some(&l.b1))?, Activation::Gelu)?;
        h = g.add(&h, &g.linear(&f, &l.fc2, Some(&l.b2))?)?;
    }
    Ok(h)
}

use stapes_core::DeviceTensor;

fn main() {
    let reps = arg("--reps", 30).max(20);
    let n_layers = arg("--layers", 32);
    let batch = arg("--batch", 1);
    let g = match CudaBackend::new(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("cuda_bench: {e}");
            std::process::exit(4);
        }
    };
    let (name, arch) = g.device_info();
    println!(
        "device: {name} ({arch}); reps {reps}; graphs {}",
        g.graphs_enabled()
    );
    let (t, d, heads, ffn) = (1500usize, 1280usize, 20usize, 5120usize);

    println!("\n## linear, M = {t} (one 30 s window), median ms [min..max], TFLOP/s");
    println!("| shape (M×K → N) | f16 ms | f16 TFLOP/s | q8 ms | q8 TOP/s | q8 speed-up |");
    println!("|---|---|---|---|---|---|");
    for &(k, n) in &[(d, d), (d, 3 * d), (d, ffn), (ffn, d)] {
        let x = g
            .upload(&HostTensor::random(vec![1, t, k], 1, 1.0))
            .unwrap();
        let w = HostTensor::random(vec![n, k], 2, 1.0 / (k as f32).sqrt());
        let mut res = Vec::new();
        for lane in [Lane::F16, Lane::Q8] {
            let wt = g.weight(&w, lane).unwrap();
            let s = time(&g, reps, || {
                g.linear(&x, &wt, None).unwrap();
            });
            res.push(s);
        }
        let fl = 2.0 * (t * k * n) as f64;
        println!(
            "| {t}×{k} → {n} | {:.4} [{:.4}..{:.4}] | {:.0} | {:.4} [{:.4}..{:.4}] | {:.0} | {:.2}× |",
            res[0].median, res[0].min, res[0].max, fl / res[0].median / 1e9, res[1].median, res[1].min, res[1].max,
            fl / res[1].median / 1e9, res[0].median / res[1].median
        );
    }

    println!("\n## q8 linear by phase (M = {t}), median ms: quantize | cuBLASLt int8 | epilogue | cublasGemmEx int8");
    for &(k, n) in &[(d, d), (d, ffn), (ffn, d)] {
        let x = g
            .upload(&HostTensor::random(vec![1, t, k], 1, 1.0))
            .unwrap();
        let wt = g
            .weight(
                &HostTensor::random(vec![n, k], 2, 1.0 / (k as f32).sqrt()),
                Lane::Q8,
            )
            .unwrap();
        let ph: Vec<f64> = (0..4u8)
            .map(|p| time(&g, reps, || g.q8_phase(&x, &wt, p).unwrap()).median)
            .collect();
        println!(
            "{t}×{k} → {n}: {:.4} | {:.4} ({:.0} TOP/s) | {:.4} | {:.4} ({:.0} TOP/s)",
            ph[0],
            ph[1],
            2.0 * (t * k * n) as f64 / ph[1] / 1e9,
            ph[2],
            ph[3],
            2.0 * (t * k * n) as f64 / ph[3] / 1e9
        );
    }

    println!("\n## decoder-step GEMV (M = 1), median ms");
    println!("| shape (K → N) | f16 ms | q8 ms | f16 GB/s (weights) | q8 GB/s |");
    println!("|---|---|---|---|---|");
    for &(k, n) in &[(d, d), (d, ffn), (ffn, d), (d, 51866)] {
        let x = g
            .upload(&HostTensor::random(vec![1, 1, k], 3, 1.0))
            .unwrap();
        let w = HostTensor::random(vec![n, k], 4, 1.0 / (k as f32).sqrt());
        let mut ms = Vec::new();
        for lane in [Lane::F16, Lane::Q8] {
            let wt = g.weight(&w, lane).unwrap();
            ms.push(time(&g, reps, || {
                g.linear(&x, &wt, None).unwrap();
            }));
        }
        let (b16, b8) = ((n * k * 2) as f64, (n * k) as f64);
        println!(
            "| {k} → {n} | {:.4} | {:.4} | {:.0} | {:.0} |",
            ms[0].median,
            ms[1].median,
            b16 / ms[0].median / 1e6,
            b8 / ms[1].median / 1e6
        );
    }

    println!(
        "\n## attention, {heads} heads × {t} × 64 (fused, f16 tensor cores; incl. the K/V casts)"
    );
    for b in [1usize, batch.max(1)] {
        let q = g
            .upload(&HostTensor::random(vec![b, t, d], 5, 1.0))
            .unwrap();
        let k = g
            .upload(&HostTensor::random(vec![b, t, d], 6, 1.0))
            .unwrap();
        let v = g
            .upload(&HostTensor::random(vec![b, t, d], 7, 1.0))
            .unwrap();
        let p = AttnParams {
            n_heads: heads,
            scale: 0.125,
            kv_len: None,
            causal: false,
        };
        for variant in [0u8, 1] {
            g.set_attention_variant(variant);
            let s = time(&g, reps, || {
                g.attention(&q, &k, &v, &p).unwrap();
            });
            let fl = 4.0 * (b * heads * t * t * 64) as f64;
            println!(
                "batch {b}, kernel variant {variant}: {:.4} ms [{:.4}..{:.4}] = {:.0} TFLOP/s",
                s.median,
                s.min,
                s.max,
                fl / s.median / 1e9
            );
        }
        g.set_attention_variant(1);
        if b == batch {
            break;
        }
    }

    println!("\n## decoder-step attention (row kernel, f32), median ms");
    for &(b, tk, kv) in &[(1usize, t, t), (5, t, t), (1, 448, 100), (5, 448, 100)] {
        let q = g
            .upload(&HostTensor::random(vec![b, 1, d], 8, 1.0))
            .unwrap();
        let k = g
            .upload(&HostTensor::random(vec![b, tk, d], 9, 1.0))
            .unwrap();
        let v = g
            .upload(&HostTensor::random(vec![b, tk, d], 10, 1.0))
            .unwrap();
        let p = AttnParams {
            n_heads: heads,
            scale: 0.125,
            kv_len: Some(kv),
            causal: false,
        };
        let s = time(&g, reps, || {
            g.attention(&q, &k, &v, &p).unwrap();
        });
        println!(
            "batch {b}, 1 query over {kv} of {tk} keys: {:.4} ms [{:.4}..{:.4}]",
            s.median, s.min, s.max
        );
    }

    println!("\n## one encoder layer's other ops, isolated (eager, median ms)");
    {
        let x = g
            .upload(&HostTensor::random(vec![1, t, d], 21, 1.0))
            .unwrap();
        let y = g
            .upload(&HostTensor::random(vec![1, t, d], 22, 1.0))
            .unwrap();
        let big = g
            .upload(&HostTensor::random(vec![1, t, ffn], 23, 1.0))
            .unwrap();
        let gam = g.upload(&HostTensor::random(vec![d], 24, 1.0)).unwrap();
        let ln = time(&g, reps, || {
            g.layer_norm(&x, &gam, Some(&gam), 1e-5).unwrap();
        });
        let add = time(&g, reps, || {
            g.add(&x, &y).unwrap();
        });
        let gelu = time(&g, reps, || {
            g.activation(&big, Activation::Gelu).unwrap();
        });
        let sl = time(&g, reps, || {
            g.slice(&big, 2, 0, d).unwrap();
        });
        println!(
            "layer_norm {t}×{d}: {:.4} | add {t}×{d}: {:.4} | gelu {t}×{ffn}: {:.4} | slice {t}×{d} of {ffn}: {:.4}",
            ln.median, add.median, gelu.median, sl.median
        );
    }

    println!("\n## synthetic turbo encoder: {n_layers} layers (8 distinct weight sets), T = {t}, batch {batch}, no conv stem");
    println!("| lane | q/k/v | eager ms | graph replay ms | capture s |");
    println!("|---|---|---|---|---|");
    for lane in [Lane::Q8, Lane::F16] {
        let t0 = Instant::now();
        let layers: Vec<Layer> = (0..8.min(n_layers))
            .map(|i| layer(&g, d, ffn, lane, 11 + i as u64))
            .collect();
        let load_s = t0.elapsed().as_secs_f64();
        let x = g
            .upload(&HostTensor::random(vec![batch, t, d], 12, 1.0))
            .unwrap();
        for fused in [false, true] {
            let eager = time(&g, reps, || {
                encoder(&g, &x, &layers, n_layers, heads, fused).unwrap();
            });
            let key = format!("bench-{lane}-{batch}-{fused}");
            let t1 = Instant::now();
            let out = g
                .run_graph(&key, |b| {
                    Ok(vec![encoder(b, &x, &layers, n_layers, heads, fused)?])
                })
                .unwrap();
            g.synchronize().unwrap();
            let cap_s = t1.elapsed().as_secs_f64();
            let replay = time(&g, reps, || {
                g.replay(&key).unwrap();
            });
            // graph result equals eager, bit for bit
            let e = g
                .download(&encoder(&g, &x, &layers, n_layers, heads, fused).unwrap())
                .unwrap();
            g.replay(&key).unwrap();
            let r = g.download(&out[0]).unwrap();
            let same = e.data == r.data;
            println!(
                "| {lane} | {} | {:.3} [{:.3}..{:.3}] | {:.3} [{:.3}..{:.3}] | {cap_s:.2} (weights {load_s:.1} s) |{}",
                if fused { "one (3d×d) GEMM" } else { "three GEMMs" },
                eager.median,
                eager.min,
                eager.max,
                replay.median,
                replay.min,
                replay.max,
                if same { "" } else { " GRAPH != EAGER" }
            );
            g.drop_graph(&key);
        }
    }
    let c = g.counters().snapshot();
    println!("\ncounters: {c:?}");
    let (res, used) = g.memory_usage();
    println!(
        "device memory: {:.1} MiB reserved, {:.1} MiB in use",
        res as f64 / 1048576.0,
        used as f64 / 1048576.0
    );
}
