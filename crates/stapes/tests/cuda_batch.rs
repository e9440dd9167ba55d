//! Cross-request batching on the CUDA home: `Whisper::transcribe_batch` gives every input the
//! token ids `transcribe` gives it alone, and batching raises throughput (windows/s).
//! Without a CUDA device the tests print `SKIPPED (no CUDA device): <name>` and return. They need
//! real Whisper weights in `STAPES_GPU_MODEL` (any format we read) and the clips under
//! `$STAPES_CACHE/audio` (default ~/.cache/stapes). Timings go to stderr and, with
//! `STAPES_BATCH_REPORT=path`, to a JSON file.

use stapes_core::Lane;
use stapes_cuda::CudaBackend;
use stapes_models::transcript::Transcript;
use stapes_models::whisper::batch::BatchInput;
use stapes_models::whisper::weights::load_checkpoint;
use stapes_models::whisper::{Whisper, WhisperOptions};
use std::path::PathBuf;
use std::time::Instant;

fn ready(name: &str) -> Option<PathBuf> {
    if !stapes_cuda::available() {
        eprintln!("SKIPPED (no CUDA device): {name}");
        return None;
    }
    match std::env::var_os("STAPES_GPU_MODEL") {
        Some(p) => Some(PathBuf::from(p)),
        None => panic!("{name}: a CUDA device is present but STAPES_GPU_MODEL is not set"),
    }
}

fn cache() -> PathBuf {
    std::env::var_os("STAPES_CACHE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/stapes")
        })
}

/// jfk, the five LibriVox clips and beckett, then a 65 s input of all of them with gaps.
fn clips() -> Vec<Vec<f32>> {
    let load = |p: PathBuf| {
        stapes_audio::load_file(&p)
            .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch-models.sh audio)", p.display()))
    };
    let mut out = vec![load(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../samples/jfk.wav"),
    )];
    for n in ["0870", "0880", "0890", "0920", "0930"] {
        out.push(load(cache().join(format!(
            "audio/librivox/sense_and_sensibility_01_austen_64kb-{n}.wav"
        ))));
    }
    out.push(load(cache().join("audio/beckett.wav")));
    let mut long = Vec::new();
    for c in &out {
        long.extend(std::iter::repeat_n(0f32, 40_000));
        long.extend_from_slice(c);
    }
    out.push(long);
    out
}

fn greedy() -> WhisperOptions {
    WhisperOptions {
        beam_size: 1,
        temperatures: vec![0.0],
        ..Default::default()
    }
}

fn ids(t: &Transcript) -> Vec<Vec<u32>> {
    t.segments.iter().map(|s| s.tokens.clone()).collect()
}

#[test]
fn cuda_batch_equals_single_and_is_faster() {
    let Some(path) = ready("cuda_batch_equals_single_and_is_faster") else {
        return;
    };
    let ck = load_checkpoint(&path).expect("STAPES_GPU_MODEL loads");
    let base = clips();
    let mut report = Vec::new();
    for lane in [Lane::F16, Lane::Q8] {
        let m = Whisper::new(CudaBackend::new(0).expect("cuda"), &ck, lane).expect("model");
        let opts = greedy();
        // 32 inputs: the 8 distinct ones four times over.
        let inputs: Vec<&[f32]> = (0..32).map(|i| base[i % base.len()].as_slice()).collect();

        // warm-up: kernels, the batch-1 graph, and the batch sizes the batched runs use
        let _ = m.transcribe(inputs[0], &opts).expect("warm-up");
        let each: Vec<BatchInput<'_>> = inputs
            .iter()
            .map(|samples| BatchInput {
                samples,
                options: &opts,
            })
            .collect();
        for b in [8, 16, 32] {
            let _ = m.transcribe_batch_each(&each, b);
        }

        let t0 = Instant::now();
        let single: Vec<Transcript> = inputs
            .iter()
            .map(|x| m.transcribe(x, &opts).expect("single"))
            .collect();
        let t_single = t0.elapsed().as_secs_f64();
        let windows: usize = {
            let (_, st) = m.transcribe_batch_each(&each, 1);
            st.windows()
        };
        let mut row = serde_json::json!({
            "lane": lane.to_string(),
            "inputs": inputs.len(),
            "windows": windows,
            "audio_s": inputs.iter().map(|x| x.len()).sum::<usize>() as f64 / 16000.0,
            "single_s": t_single,
            "single_windows_per_s": windows as f64 / t_single,
        });
        for b in [8, 16, 32] {
            let t0 = Instant::now();
            let (got, stats) = m.transcribe_batch_each(&each, b);
            let t = t0.elapsed().as_secs_f64();
            let mut same = 0;
            for (i, (g, w)) in got.iter().zip(&single).enumerate() {
                let g = g
                    .as_ref()
                    .unwrap_or_else(|e| panic!("{lane} b{b} input {i}: {e}"));
                assert_eq!(
                    ids(g),
                    ids(w),
                    "{lane} batch {b}: input {i} ids differ from transcribe alone"
                );
                same += usize::from(g == w);
            }
            let max_batch = stats.encoder_batches.iter().copied().max().unwrap_or(0);
            eprintln!(
                "{lane} batch {b}: {:.3} s ({:.1} windows/s) vs single {:.3} s ({:.1} windows/s); {} encoder calls, largest {max_batch}; {same}/{} results bit-identical",
                t,
                stats.windows() as f64 / t,
                t_single,
                windows as f64 / t_single,
                stats.encoder_batches.len(),
                got.len()
            );
            assert_eq!(stats.windows(), windows);
            row[format!("batch{b}_s")] = serde_json::json!(t);
            row[format!("batch{b}_windows_per_s")] = serde_json::json!(windows as f64 / t);
            row[format!("batch{b}_encoder_calls")] = serde_json::json!(stats.encoder_batches.len());
            row[format!("batch{b}_bit_identical")] = serde_json::json!(same);
        }

        // the encoder alone: one window at a time vs 16 in one call
        let mel = stapes_core::HostTensor::random(
            vec![2 * ck.config.n_audio_ctx, ck.config.n_mels],
            7,
            1.0,
        );
        let t1 = time_encode(&m, &mel, 1);
        let t16 = time_encode(&m, &mel, 16);
        eprintln!(
            "{lane} encoder: batch 1 {:.1} windows/s, batch 16 {:.1} windows/s",
            1.0 / t1,
            16.0 / t16
        );
        row["encoder_b1_windows_per_s"] = serde_json::json!(1.0 / t1);
        row["encoder_b16_windows_per_s"] = serde_json::json!(16.0 / t16);
        report.push(row);
    }
    if let Some(p) = std::env::var_os("STAPES_BATCH_REPORT") {
        std::fs::write(&p, serde_json::to_string_pretty(&report).expect("json")).expect("report");
    }
}

/// Median seconds of one encoder call on `batch` copies of `mel` (host-synchronised).
fn time_encode<B: stapes_core::Backend>(
    m: &Whisper<B>,
    mel: &stapes_core::HostTensor,
    batch: usize,
) -> f64 {
    let mut data = Vec::with_capacity(batch * mel.data.len());
    for _ in 0..batch {
        data.extend_from_slice(&mel.data);
    }
    let mut shape = vec![batch];
    shape.extend_from_slice(&mel.shape);
    let x = m
        .backend()
        .upload(&stapes_core::HostTensor::new(shape, data).expect("mel"))
        .expect("upload");
    let mut times = Vec::new();
    for i in 0..13 {
        let t0 = Instant::now();
        let e = m.encode(&x).expect("encode");
        m.backend().synchronize().expect("sync");
        drop(e);
        if i >= 3 {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
