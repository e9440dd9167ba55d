//! Silero VAD throughput on one CPU thread (the ledger number). Ignored by default because
//! timings on a shared machine are noise for CI; run with
//! `cargo test --release -p stapes-models --test silero_speed -- --ignored --nocapture`.

use stapes_core::{Backend, HostTensor};
use stapes_cpu::CpuBackend;
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

/// Best of `reps` runs, in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
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

    let t16 = best(5, || {
        vad.probabilities(&audio, 16000).expect("runs");
    });
    let t8 = best(5, || {
        vad.probabilities(&a8, 8000).expect("runs");
    });
    let tseg = best(5, || {
        vad.segments(&audio, 16000, &VadParams::default())
            .expect("runs");
    });
    // Streaming, one 32 ms window per feed (the real-time case: no batching across windows).
    let tstream = best(3, || {
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
    for (what, t) in [
        ("offline 16 kHz", t16),
        ("offline 8 kHz", t8),
        ("segments 16 kHz", tseg),
        ("stream 16 kHz, 512/feed", tstream),
    ] {
        println!(
            "silero {what}: {secs:.0} s of audio in {:.1} ms = {:.0}x real time ({:.1} us/window)",
            t * 1e3,
            secs / t,
            t * 1e6 / (audio.len() / 512) as f64
        );
    }
}
