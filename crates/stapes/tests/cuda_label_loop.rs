//! The Parakeet RNNT/TDT label loop on the CUDA home (`fastconformer/label_loop.rs`: per-clip
//! state on the device, a captured chain of steps): graph replay against the same loop run
//! eagerly, against the host loop, against CPU f32 (f16 lane: identical steps, the fixtures'
//! margins allow no near-tie, see `tolerance::FAMILY`), and a padded batch decoded together
//! against one clip at a time. Without a CUDA device every test prints
//! `SKIPPED (no CUDA device): <name>` and returns.

use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_cuda::CudaBackend;
use stapes_models::fastconformer::{synthetic_checkpoint, Decoded, Parakeet, ParakeetConfig};
use std::time::Instant;

mod fc_common;
use fc_common::{fixtures, gpu, read, CLIPS};

fn features() -> Vec<HostTensor> {
    let inputs = read("inputs.safetensors");
    CLIPS
        .iter()
        .map(|c| inputs[&format!("features.{c}")].clone())
        .collect()
}

fn cuda() -> CudaBackend {
    CudaBackend::new(0).expect("cuda opens")
}

/// `count` clips: clip `i` is fixture clip `i % 3` cut by `step·i` feature frames, so a batch
/// of them is padded with distinct lengths.
fn cut(feats: &[HostTensor], count: usize, step: usize) -> Vec<HostTensor> {
    (0..count)
        .map(|i| {
            let f = &feats[i % feats.len()];
            let (n, mels) = (f.shape[0] - step * i, f.shape[1]);
            HostTensor::new(vec![n, mels], f.data[..n * mels].to_vec()).expect("cut")
        })
        .collect()
}

/// Steps, tokens, frames and every margin bit for bit.
fn identical(a: &Decoded, b: &Decoded) -> bool {
    a == b
        && a.margins.len() == b.margins.len()
        && a.margins
            .iter()
            .zip(&b.margins)
            .all(|(x, y)| x.to_bits() == y.to_bits())
}

fn first_difference(a: &Decoded, b: &Decoded) -> String {
    let k = a
        .steps
        .iter()
        .zip(&b.steps)
        .position(|(x, y)| x != y)
        .unwrap_or(a.steps.len().min(b.steps.len()));
    format!(
        "{} vs {} steps, first difference at step {k}: {:?} vs {:?}",
        a.steps.len(),
        b.steps.len(),
        a.steps.get(k),
        b.steps.get(k)
    )
}

#[test]
fn label_loop_graph_equals_eager_host_loop_and_cpu_f32() {
    let Some(_g) = gpu("label_loop_graph_equals_eager_host_loop_and_cpu_f32") else {
        return;
    };
    let feats = features();
    let mut failures = Vec::new();
    for model in ["tdt", "rnnt"] {
        let dir = fixtures().join(model);
        let cpu = Parakeet::new(CpuBackend::new(2).unwrap(), &dir, Lane::F32).expect("cpu model");
        for lane in [Lane::F16, Lane::Q8] {
            std::env::set_var("STAPES_CUDA_GRAPHS", "0");
            let eager = Parakeet::new(cuda(), &dir, lane).expect("model");
            std::env::remove_var("STAPES_CUDA_GRAPHS");
            let graphed = Parakeet::new(cuda(), &dir, lane).expect("model");
            // where nothing is captured the loop defaults to the host; force the device form
            eager.set_device_decode(Some(true));
            for (i, f) in feats.iter().enumerate() {
                let what = format!("{lane} {model}/{}", CLIPS[i]);
                let enc_g = graphed.encode_host(f).expect("encode");
                // one encoder output for both, so only the loops are compared
                let host_enc = graphed.backend().download(&enc_g).expect("download");
                let enc_e = eager.backend().upload(&host_enc).expect("upload");
                let want = eager.greedy(&enc_e).expect("eager device loop");
                // first use runs eagerly, then the capture, then replays
                for call in 0..3 {
                    let got = graphed.greedy(&enc_g).expect("graphed device loop");
                    if !identical(&got, &want) {
                        failures.push(format!(
                            "{what} call {call}: graph differs from eager: {}",
                            first_difference(&got, &want)
                        ));
                    }
                }
                graphed.set_device_decode(Some(false));
                let host = graphed.greedy(&enc_g).expect("host loop");
                graphed.set_device_decode(None);
                if host != want {
                    failures.push(format!(
                        "{what}: device loop differs from the host loop: {}",
                        first_difference(&want, &host)
                    ));
                }
                let worst = host
                    .margins
                    .iter()
                    .zip(&want.margins)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                eprintln!(
                    "{what}: {} steps, {} tokens; device loop margins vs host loop: max |diff| {worst:.2e}",
                    want.steps.len(),
                    want.tokens.len()
                );
                if lane == Lane::F16 {
                    let enc_cpu = cpu.encode_host(f).expect("cpu encode");
                    let cpu_d = cpu.greedy(&enc_cpu).expect("cpu greedy");
                    if want != cpu_d {
                        failures.push(format!(
                            "{what}: device loop differs from cpu f32: {}",
                            first_difference(&want, &cpu_d)
                        ));
                    }
                }
            }
            let c = graphed.backend().counters().snapshot();
            eprintln!("{lane} {model}: graphed counters {c:?}");
            if c.graph_captures < 1 || c.graph_replays < 3 {
                failures.push(format!("{lane} {model}: no capture or replays: {c:?}"));
            }
            if eager.backend().counters().snapshot().graph_replays != 0 {
                failures.push(format!("{lane} {model}: the eager model replayed a graph"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A padded batch of 3 clips (the loop's linears one GEMV call, as a clip alone) and of 16
/// (above 8 rows, where `linear` would switch to the tensor-core GEMMs and round differently):
/// every clip's steps and margins bit for bit those of its single decode, and its decisions
/// those of the host loop, f16 and q8, two calls each (the second replays the captured loop).
#[test]
fn batched_label_loop_equals_one_clip_at_a_time() {
    let Some(_g) = gpu("batched_label_loop_equals_one_clip_at_a_time") else {
        return;
    };
    let feats = features();
    let mut failures = Vec::new();
    for (count, step) in [(3, 40), (16, 15)] {
        let clips = cut(&feats, count, step);
        for model in ["tdt", "rnnt"] {
            for lane in [Lane::F16, Lane::Q8] {
                let m = Parakeet::new(cuda(), &fixtures().join(model), lane).expect("model");
                let (enc, lens) = m.encode_batch(&clips).expect("batch");
                for call in 0..2 {
                    let batched = m.greedy_batch(&enc, &lens).expect("batched loop");
                    let mut worst = 0f32;
                    for (i, b) in batched.iter().enumerate() {
                        let what = format!("{lane} {model} batch {count} clip {i} call {call}");
                        let one = m.greedy_at(&enc, i, lens[i]).expect("single loop");
                        if !identical(b, &one) {
                            failures.push(format!(
                                "{what}: batched differs from single: {} (margins equal: {})",
                                first_difference(b, &one),
                                b.margins == one.margins
                            ));
                        }
                        if call > 0 {
                            continue;
                        }
                        m.set_device_decode(Some(false));
                        let host = m.greedy_at(&enc, i, lens[i]).expect("host loop");
                        m.set_device_decode(None);
                        if *b != host {
                            failures.push(format!(
                                "{what}: batched differs from the host loop: {}",
                                first_difference(b, &host)
                            ));
                        }
                        worst = b
                            .margins
                            .iter()
                            .zip(&host.margins)
                            .map(|(x, y)| (x - y).abs())
                            .fold(worst, f32::max);
                    }
                    let steps: usize = batched.iter().map(|d| d.steps.len()).sum();
                    let tokens: usize = batched.iter().map(|d| d.tokens.len()).sum();
                    eprintln!(
                        "{lane} {model} batch {count} call {call}: {steps} steps, {tokens} tokens; \
                         margins vs host loop max |diff| {worst:.2e}"
                    );
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

fn median_ms(mut f: impl FnMut(), iters: usize) -> f64 {
    let mut ms: Vec<f64> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    ms[ms.len() / 2]
}

/// Decode time of the label loops on parakeet-tdt-0.6b-v2 shapes (random weights, f16 and q8):
/// 11 s of random features (1100 frames) one clip, host loop against device loop, and 16 clips
/// of it decoded as one batch against 16 single device loops, the batch in its exact form (the
/// default) and in the former one (`STAPES_PARAKEET_BATCH_EXACT=0`: a GEMM per linear above 8
/// rows, one encoder-projection GEMM for the batch). Fails if an exact batch's clip differs
/// from its single decode. Run by name with `--ignored`.
#[test]
#[ignore]
fn label_loop_speed_on_parakeet_tdt_shapes() {
    let Some(_g) = gpu("label_loop_speed_on_parakeet_tdt_shapes") else {
        return;
    };
    let cfg = ParakeetConfig::published("parakeet-tdt-0.6b-v2").expect("shape");
    let ck = synthetic_checkpoint(&cfg, 5).expect("synthetic");
    let mut failures = Vec::new();
    for lane in [Lane::F16, Lane::Q8] {
        let m = Parakeet::from_checkpoint(cuda(), &ck, lane).expect("model");
        let b = m.backend();
        let feats = HostTensor::random(vec![1100, cfg.encoder.num_mel_bins], 7, 1.0);
        let enc = m.encode_host(&feats).expect("encode");
        m.set_device_decode(Some(false));
        let host = m.greedy(&enc).expect("host loop");
        let host_ms = median_ms(|| drop(m.greedy(&enc).expect("host")), 9);
        m.set_device_decode(None);
        let dev = m.greedy(&enc).expect("device loop");
        let _ = m.greedy(&enc).expect("capture");
        let dev_ms = median_ms(|| drop(m.greedy(&enc).expect("device")), 15);
        let t = stapes_core::DeviceTensor::shape(&enc)[1];
        let batch = 16;
        let enc16 = {
            let h = b.download(&enc).expect("download");
            let data: Vec<f32> = (0..batch).flat_map(|_| h.data.iter().copied()).collect();
            let shape = vec![batch, h.shape[1], h.shape[2]];
            b.upload(&HostTensor::new(shape, data).expect("t"))
                .expect("up")
        };
        let lens = vec![t; batch];
        eprintln!(
            "{lane} TDT 0.6b decode, {t} encoder frames: {} steps, {} tokens; host loop {host_ms:.2} ms, \
             device loop {dev_ms:.2} ms ({:.1} µs/step); device == host loop: {}",
            dev.steps.len(),
            dev.tokens.len(),
            dev_ms * 1e3 / dev.steps.len().max(1) as f64,
            dev == host
        );
        for exact in [false, true] {
            std::env::set_var("STAPES_PARAKEET_BATCH_EXACT", if exact { "1" } else { "0" });
            let batched = m.greedy_batch(&enc16, &lens).expect("batch");
            let _ = m.greedy_batch(&enc16, &lens).expect("capture");
            let b16_ms = median_ms(|| drop(m.greedy_batch(&enc16, &lens).expect("b16")), 9);
            let same = batched.iter().filter(|d| **d == dev).count();
            let bits = batched.iter().filter(|d| identical(d, &dev)).count();
            let form = if exact {
                "exact"
            } else {
                "former (BATCH_EXACT=0)"
            };
            eprintln!(
                "{lane} 16 clips batched, {form}: {b16_ms:.2} ms ({:.2} ms per clip); \
                 equal to single: {same}/16 decisions, {bits}/16 bit for bit",
                b16_ms / batch as f64
            );
            if exact && bits != batch {
                failures.push(format!(
                    "{lane}: {bits}/16 clips of the exact batch equal their single decode"
                ));
            }
        }
        std::env::remove_var("STAPES_PARAKEET_BATCH_EXACT");
        if lane == Lane::F16 {
            for k in [4, 16] {
                m.set_device_decode_steps(k);
                let d = m.greedy(&enc).expect("warm");
                let _ = m.greedy(&enc).expect("capture");
                let ms = median_ms(|| drop(m.greedy(&enc).expect("device")), 9);
                eprintln!(
                    "{lane} TDT 0.6b decode, {k} steps per call: {ms:.2} ms; same steps as 8 per call: {}",
                    d == dev
                );
            }
            m.set_device_decode_steps(8);
        }
        let c = b.counters().snapshot();
        eprintln!("{lane}: counters {c:?}");
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
