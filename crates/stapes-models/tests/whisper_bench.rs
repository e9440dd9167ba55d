//! Timing of the Whisper pipeline on jfk (ignored by default; run with
//! `cargo test --release -p stapes-models --test whisper_bench -- --ignored --nocapture`).
//! Set STAPES_BENCH_MODELS / STAPES_BENCH_LANES / STAPES_BENCH_BEAMS to narrow the grid.

mod whisper_common;

use stapes_core::{HostTensor, Lane};
use std::time::Instant;
use whisper_common::*;

fn list(var: &str, default: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect()
}

#[test]
#[ignore]
fn bench_jfk() {
    let samples = audio("jfk");
    for name in list("STAPES_BENCH_MODELS", "whisper-tiny.en,whisper-base") {
        for lane in list("STAPES_BENCH_LANES", "f32,q8") {
            let lane: Lane = lane.parse().expect("lane");
            let t0 = Instant::now();
            let m = model(&name, lane);
            let load = t0.elapsed().as_secs_f64();
            // the encoder alone
            let n_mels = m.config.n_mels;
            let mel = HostTensor::new(vec![3000, n_mels], vec![0.1; 3000 * n_mels]).unwrap();
            let t = Instant::now();
            let _ = m.encode_host(&mel).unwrap();
            let enc = t.elapsed().as_secs_f64();
            for beam in list("STAPES_BENCH_BEAMS", "1,5") {
                let beam: usize = beam.parse().expect("beam");
                let opts = ref_options(beam);
                let _ = m.transcribe(&samples, &opts).unwrap(); // warm-up
                let iters = 3;
                let t = Instant::now();
                let mut text = String::new();
                for _ in 0..iters {
                    text = m.transcribe(&samples, &opts).unwrap().text();
                }
                let e2e = t.elapsed().as_secs_f64() / iters as f64;
                eprintln!(
                    "{name} {lane} beam {beam}: transcribe {:.0} ms (encoder {:.0} ms, load {:.2} s) — {text}",
                    e2e * 1e3,
                    enc * 1e3,
                    load
                );
            }
        }
    }
}
