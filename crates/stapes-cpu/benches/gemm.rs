//! `linear` per lane at Whisper shapes against a plain `gemm` crate f32 call (the baseline).
//! Encoder FFN-up: base 1500×384·(1536×384)ᵀ, large 1500×1280·(5120×1280)ᵀ; decoder steps:
//! the logits projection (n, 384)·(51864, 384)ᵀ at n = 1 and 5.
//! Kept cheap: 10 samples, short measurement windows (`cargo bench -p stapes-cpu --bench gemm`).

use criterion::{criterion_group, criterion_main, Criterion};
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use std::hint::black_box;
use std::time::Duration;

fn baseline(
    x: &[f32],
    w: &[f32],
    m: usize,
    n: usize,
    k: usize,
    out: &mut [f32],
    pool: &rayon::ThreadPool,
) {
    pool.install(|| {
        // SAFETY: x is (m, k), w is (n, k) read as Wᵀ (k, n) with rs 1 / cs k, out is (m, n);
        // all three were allocated with exactly those sizes below.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                out.as_mut_ptr(),
                1,
                n as isize,
                false,
                x.as_ptr(),
                1,
                k as isize,
                w.as_ptr(),
                k as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(pool.current_num_threads()),
            )
        }
    })
}

fn bench_linear(c: &mut Criterion) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let be = CpuBackend::new(threads).expect("cpu backend");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    let shapes: [(&str, usize, usize, usize); 4] = [
        ("enc_base_1500x384x1536", 1500, 384, 1536),
        ("enc_large_1500x1280x5120", 1500, 1280, 5120),
        ("logits_1x384x51864", 1, 384, 51864),
        ("logits_5x384x51864", 5, 384, 51864),
    ];
    for (name, m, k, n) in shapes {
        let mut g = c.benchmark_group(name);
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
        let x = HostTensor::random(vec![m, k], 1, 1.0);
        let w = HostTensor::random(vec![n, k], 2, 0.05);
        let mut out = vec![0f32; m * n];
        g.bench_function("gemm_crate_f32", |b| {
            b.iter(|| baseline(&x.data, &w.data, m, n, k, black_box(&mut out), &pool))
        });
        let xt = be.upload(&x).expect("upload");
        for lane in [Lane::F32, Lane::F16, Lane::Q8] {
            let wt = be.weight(&w, lane).expect("weight");
            g.bench_function(format!("linear_{lane}"), |b| {
                b.iter(|| be.linear(black_box(&xt), &wt, None).expect("linear"))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench_linear);
criterion_main!(benches);
