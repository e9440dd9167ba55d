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
