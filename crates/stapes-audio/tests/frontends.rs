//! Front ends against the peers' numbers, dumped by tools/reference/audio_frontends.py.

use std::path::PathBuf;

use stapes_audio::features::{gigaam, nemo, whisper, Features};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn jfk() -> Vec<f32> {
    let path = repo_root().join("samples/jfk.wav");
    let samples = stapes_audio::load_file(&path).expect("samples/jfk.wav decodes");
    // The Python side reads the same file as int16 / 32768; check we start from the same signal.
    let reader = hound::WavReader::open(&path).expect("hound opens jfk.wav");
    let direct: Vec<f32> = reader
        .into_samples::<i16>()
        .map(|s| s.expect("valid sample") as f32 / 32768.0)
        .collect();
    assert_eq!(
        samples, direct,
        "symphonia's s16 decode differs from int16/32768"
    );
    samples
}

/// A tensor from a fixture file: (shape, row-major f32 data).
fn fixture(file: &str, name: &str) -> (Vec<usize>, Vec<f32>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid safetensors");
    let t = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("{file}:{name}: {e}"));
    assert_eq!(t.dtype(), safetensors::Dtype::F32);
    let data = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (t.shape().to_vec(), data)
}

struct Diff {
    max_abs: f32,
    mean_abs: f64,
}

fn diff(ours: &[f32], reference: &[f32]) -> Diff {
    assert_eq!(ours.len(), reference.len(), "length mismatch");
    let mut max_abs = 0.0f32;
    let mut sum = 0.0f64;
    for (a, b) in ours.iter().zip(reference) {
        let d = (a - b).abs();
        assert!(d.is_finite(), "non-finite value: ours {a}, reference {b}");
        max_abs = max_abs.max(d);
        sum += d as f64;
    }
    Diff {
        max_abs,
        mean_abs: sum / ours.len().max(1) as f64,
    }
}

fn check(label: &str, got: &Features, file: &str, name: &str, max_bar: f32, mean_bar: f64) {
    let (shape, want) = fixture(file, name);
    assert_eq!(
        (got.n_frames, got.n_bins),
        (shape[0], shape[1]),
        "{label}: shape"
    );
    let d = diff(&got.data, &want);
    println!(
        "{label}: max abs {:.3e}, mean abs {:.3e} over {} values",
        d.max_abs,
        d.mean_abs,
        want.len()
    );
    assert!(
        d.max_abs <= max_bar,
        "{label}: max abs {} > {max_bar}",
        d.max_abs
    );
    assert!(
        d.mean_abs <= mean_bar,
        "{label}: mean abs {} > {mean_bar}",
        d.mean_abs
    );
}

#[test]
fn whisper_filterbank_matches_openai_npz() {
    for n_mels in [80usize, 128] {
        let (shape, want) = fixture("whisper_ref.safetensors", &format!("mel_{n_mels}"));
        assert_eq!(shape, vec![n_mels, 201]);
        let got = whisper::filterbank(n_mels);
        let d = diff(&got, &want);
        println!("mel_{n_mels}: max abs {:.3e}", d.max_abs);
        assert!(d.max_abs <= 1e-6, "mel_{n_mels}: max abs {}", d.max_abs);
    }
}

// Bar: the acceptance line of issue 2 (1e-4 max abs). Both sides are float32 FFTs of the same
// frames, so they differ by float32 rounding only: measured ~2e-5 max (in the quietest bins, where
// FFT rounding is largest relative to the power) and ~1e-7 mean. A real defect (wrong window,
// padding or frame alignment) moves values by 1e-2 or more.
#[test]
fn whisper_log_mel_jfk_80_matches_faster_whisper() {
    let x = jfk();
    let got = whisper::log_mel(&x, 80, 160);
    check(
        "whisper 80 pad 160",
        &got,
        "whisper_ref.safetensors",
        "jfk_80_pad160",
        1e-4,
        1e-6,
    );
}

#[test]
fn whisper_log_mel_128_no_padding() {
    let x = jfk();
    let got = whisper::log_mel(&x[..64000], 128, 0);
    check(
        "whisper 128 pad 0",
        &got,
        "whisper_ref.safetensors",
        "jfk4s_128_pad0",
        1e-4,
        1e-6,
    );
}

#[test]
fn whisper_log_mel_odd_length_with_padding() {
    let x = jfk();
    let got = whisper::log_mel(&x[..16001], 80, 3200);
    check(
        "whisper 80 odd length pad 3200",
        &got,
        "whisper_ref.safetensors",
        "jfk_head_80_pad3200",
        1e-4,
        1e-6,
    );
}

#[test]
fn whisper_log_mel_edge_inputs_do_not_panic() {
    let empty = whisper::log_mel(&[], 80, 0);
    assert_eq!((empty.n_frames, empty.data.len()), (0, 0));
    let tiny = whisper::log_mel(&[0.5, -0.25, 0.125], 80, 160);
    assert_eq!(tiny.n_frames, 1);
    assert!(tiny.data.iter().all(|v| v.is_finite()));
    let silent = whisper::log_mel(&vec![0.0; 16000], 128, 0);
    // log10(1e-10) everywhere: max − 8 floor leaves -10, then (x + 4) / 4.
    assert!(silent.data.iter().all(|&v| (v - (-1.5)).abs() < 1e-6));
}

// Bar for NeMo: the reference is transformers' float32 torch pipeline, whose own distance from a
// float64 transcription of NeMo's formulas (in the fixture script) is 2.0e-4 / 3.5e-4 max abs and
// ~1e-6 mean: the log of the quietest bins amplifies float32 FFT rounding, and per-feature
// normalisation divides by a std that can be small. Ours is another float32 pipeline, so the max
// difference to the reference may be up to the sum of both errors: 1e-3 max, 1e-5 mean. A
// defect (wrong window symmetry, padding mode, log guard, Bessel correction) shifts whole bins by
// 1e-3..1e-1 and fails the mean bar.
#[test]
fn nemo_log_mel_jfk_80_matches_transformers() {
    let x = jfk();
    let got = nemo::log_mel(&x, &nemo::NemoConfig::parakeet(80));
    check(
        "nemo 80",
        &got,
        "nemo_ref.safetensors",
        "jfk_80",
        1e-3,
        1e-5,
    );
}

#[test]
fn nemo_log_mel_128_matches_transformers_and_float64_port() {
    let x = jfk();
    let got = nemo::log_mel(&x[..48000], &nemo::NemoConfig::parakeet(128));
    check(
        "nemo 128 vs transformers",
        &got,
        "nemo_ref.safetensors",
        "jfk3s_128",
        1e-3,
        1e-5,
    );
    check(
        "nemo 128 vs float64 port",
        &got,
        "nemo_ref.safetensors",
        "jfk3s_128_f64port",
        1e-3,
        1e-5,
    );
}

#[test]
fn nemo_edge_inputs_do_not_panic() {
    let cfg = nemo::NemoConfig::parakeet(80);
    assert_eq!(nemo::log_mel(&[], &cfg).n_frames, 0);
    assert_eq!(nemo::log_mel(&[0.1; 100], &cfg).n_frames, 0);
    let one = nemo::log_mel(&[0.1; 200], &cfg);
    assert_eq!(one.n_frames, 1);
    assert!(one.data.iter().all(|&v| v == 0.0));
}

// Bar for GigaAM: no normalisation follows the natural log, so float32 FFT rounding in the
// quietest bins (power ~1e-8, ~160 dB under the frame's peak) shows directly: the gigaam
// package's own float32 output is 6.7e-3 max / 1.2e-5 mean from the same module run in float64
// (v3: 3.2e-4 / 2.3e-6; fixture script output). Ours is another float32 pipeline, so the bar is
// that error twice over: 1.5e-2 max, 3e-5 mean against the package, and 1e-2 / 2e-5 against the
// float64 truth. A defect (Slaney instead of HTK mel, a normalised filterbank, wrong centring,
// window or log clamp) moves typical values by 1e-2..1, far over the mean bar.
#[test]
fn gigaam_v2_matches_gigaam_package() {
    let x = jfk();
    let got = gigaam::log_mel(&x[..80000], &gigaam::GigaamConfig::v2());
    check(
        "gigaam v2 vs package",
        &got,
        "gigaam_ref.safetensors",
        "v2_jfk5s",
        1.5e-2,
        3e-5,
    );
    check(
        "gigaam v2 vs float64",
        &got,
        "gigaam_ref.safetensors",
        "v2_jfk5s_f64",
        1e-2,
        2e-5,
    );
}

#[test]
fn gigaam_v3_matches_torchaudio_with_bf16_buffers() {
    let x = jfk();
    let got = gigaam::log_mel(&x[..48000], &gigaam::GigaamConfig::v3());
    check(
        "gigaam v3",
        &got,
        "gigaam_ref.safetensors",
        "v3_jfk3s",
        1e-3,
        1e-5,
    );
}

#[test]
fn gigaam_edge_inputs_do_not_panic() {
    assert_eq!(
        gigaam::log_mel(&[], &gigaam::GigaamConfig::v2()).n_frames,
        0
    );
    assert_eq!(
        gigaam::log_mel(&[0.1; 3], &gigaam::GigaamConfig::v2()).n_frames,
        1
    );
    assert_eq!(
        gigaam::log_mel(&[0.1; 319], &gigaam::GigaamConfig::v3()).n_frames,
        0
    );
    assert_eq!(
        gigaam::log_mel(&[0.1; 320], &gigaam::GigaamConfig::v3()).n_frames,
        1
    );
}

#[test]
fn gigaam_checkpoint_buffers_give_the_same_features() {
    let x = jfk();
    let cfg = gigaam::GigaamConfig::v3();
    let (window, fb) = gigaam::buffers(&cfg);
    let got = gigaam::log_mel_with_buffers(&x[..48000], &cfg, &window, &fb).expect("buffers fit");
    assert_eq!(got, gigaam::log_mel(&x[..48000], &cfg));
    check(
        "gigaam v3 from buffers",
        &got,
        "gigaam_ref.safetensors",
        "v3_jfk3s",
        1e-3,
        1e-5,
    );
    assert!(matches!(
        gigaam::log_mel_with_buffers(&x, &cfg, &window[1..], &fb),
        Err(stapes_audio::AudioError::InvalidArgument(_))
    ));
    assert!(matches!(
        gigaam::log_mel_with_buffers(&x, &cfg, &window, &fb[..fb.len() - 1]),
        Err(stapes_audio::AudioError::InvalidArgument(_))
    ));
}
