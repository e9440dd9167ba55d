//! Silero VAD throughput on one CPU thread (the ledger number). Ignored by default because
//! timings on a shared machine are noise for CI; run with
//! `cargo test --release -p stapes-models --test silero_speed -- --ignored --nocapture`.

use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::silero::model::{frames_for, Branch};
use stapes_models::silero::{SileroVad, VadParams, VadRate};
use std::path::PathBuf;
use std::time::Instant;

fn model() -> PathBuf {
    let cache = std::env::var_os("STAPES_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/stapes")
        });
    let p = cache.join("models/silero-vad/silero_vad.onnx");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh silero-vad",
        p.display()
    );
    p
}

fn jfk() -> Vec<f32> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../samples/jfk.wav");
    let mut r = hound::WavReader::open(&p).expect("jfk.wav opens");
    r.samples::<i16>()
        .map(|s| s.expect("sample") as f32 / 32768.0)
        .collect()
}

/// CPU seconds used by this process so far (all threads), from /proc/self/stat: on a shared
/// machine the wall clock also counts time spent waiting for a core.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    // After the command name: field 3 (state) first, so utime (14) and stime (15) are tokens
    // 11 and 12; USER_HZ is 100 on Linux.
    let tok: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| tok.get(i).and_then(|v| v.parse::<f64>().ok());
    field(11)
        .zip(field(12))
        .map_or(f64::NAN, |(u, s)| (u + s) / 100.0)
}

/// Best wall time of `reps` runs, in seconds (the CPU time per run goes to `CPU` below).
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    best_and_cpu(reps, &mut f).0
}

/// (best wall seconds, mean CPU seconds) over `reps` runs.
fn best_and_cpu(reps: usize, f: &mut dyn FnMut()) -> (f64, f64) {
    let c0 = cpu_seconds();
    let wall = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    (wall, (cpu_seconds() - c0) / reps as f64)
}

#[test]
#[ignore]
fn silero_throughput_one_thread() {
    let vad = SileroVad::load(CpuBackend::new(1).expect("cpu"), model()).expect("loads");
    // 60 s: jfk repeated (11 s each), so the LSTM walks a realistic mix of speech and pauses.
    let one = jfk();
    let audio: Vec<f32> = one.iter().cycle().take(60 * 16000).copied().collect();
    let secs = audio.len() as f64 / 16000.0;
    let a8: Vec<f32> = audio.iter().step_by(2).copied().collect();

    let t16 = best_and_cpu(20, &mut || {
        vad.probabilities(&audio, 16000).expect("runs");
    });
    let t8 = best_and_cpu(20, &mut || {
        vad.probabilities(&a8, 8000).expect("runs");
    });
    let tseg = best_and_cpu(10, &mut || {
        vad.segments(&audio, 16000, &VadParams::default())
            .expect("runs");
    });
    // Streaming, one 32 ms window per feed (the real-time case: no batching across windows).
    let tstream = best_and_cpu(5, &mut || {
        let mut s = vad
            .stream(VadRate::Hz16000, &VadParams::default())
            .expect("stream");
        for chunk in audio.chunks(512) {
            s.feed(chunk).expect("feed");
        }
        s.finish().expect("finish");
    });
    // Where the time goes: ops issued per window, and what one tiny op costs on this home.
    let ops = |f: &dyn Fn()| {
        let before = vad.backend().counters().snapshot().ops;
        f();
        vad.backend().counters().snapshot().ops - before
    };
    let windows = (audio.len() / 512) as f64;
    let offline_ops = ops(&|| {
        vad.probabilities(&audio, 16000).expect("runs");
    }) as f64
        / windows;
    let stream_ops = ops(&|| {
        let mut s = vad
            .stream(VadRate::Hz16000, &VadParams::default())
            .expect("stream");
        for chunk in audio.chunks(512) {
            s.feed(chunk).expect("feed");
        }
    }) as f64
        / windows;
    let be = vad.backend();
    let x = be.upload(&HostTensor::zeros(vec![1, 128])).expect("upload");
    let tiny = best(3, || {
        for _ in 0..2000 {
            be.affine(&x, 1.0, 0.5).expect("affine");
        }
    }) / 2000.0;
    println!(
        "silero ops/window: offline {offline_ops:.1}, stream {stream_ops:.1}; one (1,128) affine on this home: {:.2} us",
        tiny * 1e6
    );
    // The same split by stage: the batched encoder (compute bound) and the LSTM walk (op bound).
    let file = stapes_formats::onnx::read_onnx(model()).expect("reads");
    let host = stapes_models::silero::weights::branches(&file).expect("weights");
    let w16 = host
        .iter()
        .find(|b| b.rate == VadRate::Hz16000)
        .expect("16 kHz branch");
    let mut branch = Branch::upload(be, w16, Lane::F32).expect("upload");
    let n = 256;
    let mut frames = Vec::new();
    frames_for(&audio, VadRate::Hz16000, 0, n, &mut frames);
    let t_fft = best(5, || {
        branch.encode(be, &frames, n).expect("encode");
    });
    branch.use_host_stft = false;
    let t_conv = best(5, || {
        branch.encode(be, &frames, n).expect("encode");
    });
    let enc = branch.encode(be, &frames, n).expect("encode");
    let t_lstm = best(5, || {
        let z = be.upload(&HostTensor::zeros(vec![1, 128])).expect("upload");
        let (mut h, mut c) = (z.clone(), z);
        branch.walk(be, &enc, &mut h, &mut c).expect("walk");
    });
    println!(
        "silero stages (batch {n}): encoder with host FFT STFT {:.1} us/window, with conv STFT \
         {:.1} us/window; LSTM step {:.1} us",
        t_fft * 1e6 / n as f64,
        t_conv * 1e6 / n as f64,
        t_lstm * 1e6 / n as f64
    );
    for (what, (wall, cpu)) in [
        ("offline 16 kHz", t16),
        ("offline 8 kHz", t8),
        ("segments 16 kHz", tseg),
        ("stream 16 kHz, 512/feed", tstream),
    ] {
        println!(
            "silero {what}: {secs:.0} s of audio: best wall {:.1} ms = {:.0}x real time; \
             CPU {:.1} ms/run = {:.0}x real time ({:.1} us/window)",
            wall * 1e3,
            secs / wall,
            cpu * 1e3,
            secs / cpu,
            cpu * 1e6 / (audio.len() / 512) as f64
        );
    }
}
