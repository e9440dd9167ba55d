//! Parakeet TDT 0.6B-shaped encoder and TDT decode speed on the CPU, random weights of the
//! published shape (no real Parakeet weights exist here). Ignored by default: timings on a shared
//! machine are noise for CI. Run with
//! `cargo test --release -p stapes-models --test fastconformer_speed -- --ignored --nocapture`.
//! `STAPES_FC_LAYERS` (default 4) caps the encoder depth to keep memory and time small; the
//! full-depth encoder time is extrapolated per layer and printed as such.

use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::fastconformer::{synthetic_checkpoint, Parakeet, ParakeetConfig};
use std::time::Instant;

#[test]
#[ignore]
fn parakeet_tdt_06b_shape_on_11s() {
    let mut cfg = ParakeetConfig::published("parakeet-tdt-0.6b-v2").unwrap();
    let full_layers = cfg.encoder.num_layers;
    let layers: usize = std::env::var("STAPES_FC_LAYERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    cfg.encoder.num_layers = layers.clamp(1, full_layers);
    let ck = synthetic_checkpoint(&cfg, 11).unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let m = Parakeet::from_checkpoint(CpuBackend::new(threads).unwrap(), &ck, Lane::F32).unwrap();
    let audio = HostTensor::random(vec![11 * 16_000], 5, 0.1);
    let t0 = Instant::now();
    let feats = m.features(&audio.data).unwrap();
    let t_fe = t0.elapsed().as_secs_f64();
    let mut best = f64::MAX;
    let mut enc = None;
    for _ in 0..3 {
        let t = Instant::now();
        let e = m.encode_host(&feats).unwrap();
        m.backend().synchronize().unwrap();
        best = best.min(t.elapsed().as_secs_f64());
        enc = Some(e);
    }
    let enc = enc.unwrap();
    let t = Instant::now();
    let d = m.greedy(&enc).unwrap();
    let t_dec = t.elapsed().as_secs_f64();
    let per_layer = best / cfg.encoder.num_layers as f64;
    eprintln!(
        "parakeet-tdt-0.6b-v2 shape, 11 s, {threads} threads: front end {:.1} ms, encoder \
         {:.1} ms for {} layers (≈{:.0} ms for {full_layers} incl. subsampling), TDT greedy {:.1} ms \
         for {} steps",
        t_fe * 1e3,
        best * 1e3,
        cfg.encoder.num_layers,
        per_layer * full_layers as f64 * 1e3,
        t_dec * 1e3,
        d.steps.len()
    );
    assert_eq!(m.backend().download(&enc).unwrap().shape[1], 138);
}

/// Peak resident memory of this process so far (VmHWM), in MiB.
fn peak_rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A 20-minute input through the tiny TDT fixture on the CPU: bounded memory from the chunked
/// subsampling and query-blocked attention (the O(T'²) work remains). Reports wall time and peak
/// RSS; asserts the peak stays far below what unchunked score matrices would need.
#[test]
#[ignore]
fn twenty_minutes_in_bounded_memory() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fastconformer/tdt");
    let m = Parakeet::new(CpuBackend::new(2).unwrap(), &dir, Lane::F32).unwrap();
    let audio = HostTensor::random(vec![20 * 60 * 16_000], 9, 0.1);
    let before = peak_rss_mib();
    let t = Instant::now();
    let tr = m.transcribe(&audio.data).unwrap();
    let secs = t.elapsed().as_secs_f64();
    let peak = peak_rss_mib();
    let frames = m.config.encoder.output_frames(20 * 60 * 100);
    // One unchunked layer's scores alone: heads × T'² floats.
    let unchunked_mib =
        (m.config.encoder.num_heads * frames * frames * 4) as f64 / (1 << 20) as f64;
    eprintln!(
        "20 min ({frames} encoder frames): {secs:.1} s, peak RSS {peak:.0} MiB (before {before:.0}); \
         one unchunked score tensor would be {unchunked_mib:.0} MiB; {} tokens",
        tr.segments.iter().map(|s| s.tokens.len()).sum::<usize>()
    );
    assert!(
        peak < unchunked_mib,
        "peak {peak} MiB is not below {unchunked_mib} MiB"
    );
}
