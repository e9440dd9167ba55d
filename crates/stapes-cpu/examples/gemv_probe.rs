//! Best-of-15 timing of decoder-step GEMVs per lane against the `gemm` crate's f32 call.
//! The minimum is reported because this shared machine is noisy.
//! `cargo run --release -p stapes-cpu --example gemv_probe -- [threads]`
use stapes_core::{Activation, AttnParams, Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use std::time::Instant;

fn best<F: FnMut()>(mut f: F) -> f64 {
    let mut b = f64::MAX;
    for _ in 0..15 {
        let t = Instant::now();
        f();
        b = b.min(t.elapsed().as_secs_f64() * 1e3);
    }
    b
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let be = CpuBackend::new(threads).expect("cpu");
    for (m, k, n) in [
        (1usize, 384usize, 51864usize),
        (5, 384, 51864),
        (1, 384, 1536),
        (1, 1536, 384),
    ] {
        let x = HostTensor::random(vec![m, k], 1, 1.0);
        let w = HostTensor::random(vec![n, k], 2, 0.05);
        let mut out = vec![0f32; m * n];
        let par = if threads > 1 {
            gemm::Parallelism::Rayon(threads)
        } else {
            gemm::Parallelism::None
        };
        // SAFETY: x (m, k), w (n, k) read as Wᵀ, out (m, n), all allocated at those sizes.
        let base = best(|| unsafe {
            gemm::gemm(
                m,
                n,
                k,
                out.as_mut_ptr(),
                1,
                n as isize,
                false,
                x.data.as_ptr(),
                1,
                k as isize,
                w.data.as_ptr(),
                k as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                par,
            )
        });
        let xt = be.upload(&x).expect("up");
        let mut line = format!("m={m} k={k} n={n}: gemm_crate {base:.3} ms");
        for lane in [Lane::F32, Lane::F16, Lane::Q8] {
            let wt = be.weight(&w, lane).expect("w");
            let t = best(|| {
                be.linear(&xt, &wt, None).expect("linear");
            });
            line += &format!(", {lane} {t:.3} ms");
        }
        println!("{line}");
    }
    // Whisper-tiny encoder pieces: self-attention over 1500 frames (6 heads of 64), the FFN
    // activation, softmax rows.
    let x = be
        .upload(&HostTensor::random(vec![1, 1500, 384], 3, 1.0))
        .expect("up");
    let p = AttnParams {
        n_heads: 6,
        scale: 0.125,
        kv_len: None,
        causal: false,
    };
    let t = best(|| {
        be.attention(&x, &x, &x, &p).expect("attention");
    });
    let h = be
        .upload(&HostTensor::random(vec![1500, 1536], 4, 3.0))
        .expect("up");
    let g = best(|| {
        be.activation(&h, Activation::Gelu).expect("gelu");
    });
    let s = best(|| {
        be.softmax(&h).expect("softmax");
    });
    println!("attention 1500x1500 6x64: {t:.2} ms; gelu 1500x1536: {g:.2} ms; softmax 1500x1536: {s:.2} ms");
    // Encoder GEMM: the gemm crate's own threading vs two row halves, each single-threaded.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool");
    let (m, k, n) = (1500usize, 384usize, 1536usize);
    let x = HostTensor::random(vec![m, k], 5, 1.0);
    let w = HostTensor::random(vec![n, k], 6, 0.05);
    let mut out = vec![0f32; m * n];
    let call = |out: &mut [f32], rows: usize, x: &[f32], par: gemm::Parallelism| {
        // SAFETY: x (rows, k), w (n, k) read as Wᵀ, out (rows, n).
        unsafe {
            gemm::gemm(
                rows,
                n,
                k,
                out.as_mut_ptr(),
                1,
                n as isize,
                false,
                x.as_ptr(),
                1,
                k as isize,
                w.data.as_ptr(),
                k as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                par,
            )
        }
    };
    let own = best(|| pool.install(|| call(&mut out, m, &x.data, gemm::Parallelism::Rayon(2))));
    let halves = best(|| {
        let (o1, o2) = out.split_at_mut(m / 2 * n);
        let (x1, x2) = x.data.split_at(m / 2 * k);
        pool.install(|| {
            rayon::join(
                || call(o1, m / 2, x1, gemm::Parallelism::None),
                || call(o2, m - m / 2, x2, gemm::Parallelism::None),
            )
        });
    });
    let single = best(|| call(&mut out, m, &x.data, gemm::Parallelism::None));
    println!("gemm 1500x384x1536: Rayon(2) {own:.2} ms, two halves {halves:.2} ms, one thread {single:.2} ms");
    // Encoder linears through the backend per lane; q8 with and without the VNNI kernel.
    let plain = CpuBackend::new_without_vnni(threads).expect("cpu");
    for (m, k, n) in [
        (1500usize, 384usize, 1536usize),
        (1500, 1536, 384),
        (1500, 512, 512),
    ] {
        let x = be
            .upload(&HostTensor::random(vec![m, k], 7, 1.0))
            .expect("x");
        let w = HostTensor::random(vec![n, k], 8, 0.05);
        let mut line = format!("linear {m}x{k}x{n}:");
        for (name, b) in [("", &be), (" (no vnni)", &plain)] {
            for lane in [Lane::F32, Lane::Q8] {
                let wt = b.weight(&w, lane).expect("w");
                let t = best(|| {
                    b.linear(&x, &wt, None).expect("linear");
                });
                line += &format!(" {lane}{name} {t:.2} ms");
            }
        }
        println!("{line}");
    }
}
