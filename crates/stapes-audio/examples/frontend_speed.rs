//! Wall time of decoding, resampling and each front end.
//! `cargo run --release -p stapes-audio --example frontend_speed [audio file]`

use std::path::PathBuf;
use std::time::Instant;

use stapes_audio::features::{gigaam, nemo, whisper};

fn best_of<T>(iters: usize, mut f: impl FnMut() -> T) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..iters {
        let t = Instant::now();
        std::hint::black_box(f());
        best = best.min(t.elapsed().as_secs_f64());
    }
    best * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../samples/jfk.wav"));
    let jfk = stapes_audio::load_file(&path)?;
    // 30 s: the Whisper window, made of the clip repeated.
    let x: Vec<f32> = jfk.iter().copied().cycle().take(480_000).collect();
    println!("threads: {}", rayon::current_num_threads());
    println!(
        "decode {}: {:.2} ms",
        path.display(),
        best_of(5, || stapes_audio::load_file(&path))
    );
    let up: Vec<f32> = x.iter().copied().cycle().take(44_100 * 30).collect();
    println!(
        "resample 30 s 44.1 kHz -> 16 kHz: {:.2} ms",
        best_of(5, || stapes_audio::resample(&up, 44_100))
    );
    for n_mels in [80, 128] {
        println!(
            "whisper log_mel 30 s, {n_mels} mels: {:.2} ms",
            best_of(20, || whisper::log_mel(&x, n_mels, 0))
        );
    }
    let one_s = &x[..16_000];
    println!(
        "whisper log_mel 1 s, 80 mels (fixed cost): {:.3} ms",
        best_of(50, || whisper::log_mel(one_s, 80, 0))
    );
    let cfg = nemo::NemoConfig::parakeet(128);
    println!(
        "nemo log_mel 30 s, 128 mels: {:.2} ms",
        best_of(20, || nemo::log_mel(&x, &cfg))
    );
    let cfg = gigaam::GigaamConfig::v3();
    println!(
        "gigaam v3 log_mel 30 s: {:.2} ms",
        best_of(20, || gigaam::log_mel(&x, &cfg))
    );
    Ok(())
}
