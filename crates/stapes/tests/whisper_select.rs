//! Whisper's token choice through `Backend::select_tokens` (`Whisper::set_device_select`) against
//! the host path (whole logits rows downloaded, `LogitRules` + log-softmax + argmax / top-k), on
//! real speech (jfk, librivox-0870), greedy and beam 5, faster-whisper's default options
//! (timestamps, temperature fallback): the same token ids, text, fallback temperatures, and
//! scores within 1e-5.
//!
//! - CPU: real tiny.en from `$STAPES_CACHE/models/whisper-tiny.en` (the composed default: a host
//!   selection of its own, so everything must be equal bit for bit).
//! - CUDA: `STAPES_GPU_MODEL` (real Whisper weights), the select kernel (`STAPES_CUDA_SELECT=1`,
//!   set by the test). Without a device it prints `SKIPPED (no CUDA device): <name>`.

#[allow(dead_code)]
mod clips_common;

use stapes_core::{Backend, Lane};
use stapes_models::transcript::Transcript;
use stapes_models::whisper::weights::load_checkpoint;
use stapes_models::whisper::{Whisper, WhisperOptions};

const CLIPS: [&str; 2] = ["jfk", "librivox-0870"];

fn options(beam: usize) -> WhisperOptions {
    WhisperOptions {
        beam_size: beam,
        ..Default::default()
    }
}

fn run<B: Backend>(m: &Whisper<B>, audio: &[f32], beam: usize, device: bool) -> Transcript {
    m.set_device_select(Some(device));
    assert_eq!(m.device_select(), device);
    m.transcribe(audio, &options(beam))
        .unwrap_or_else(|e| panic!("beam {beam}, device selection {device}: {e}"))
}

/// Same segments, ids, text and temperatures; scores within `tol`.
fn compare(what: &str, got: &Transcript, want: &Transcript, tol: f32) {
    assert_eq!(got.text(), want.text(), "{what}: text");
    assert_eq!(
        got.segments.len(),
        want.segments.len(),
        "{what}: segment count"
    );
    for (i, (a, b)) in got.segments.iter().zip(&want.segments).enumerate() {
        assert_eq!(a.tokens, b.tokens, "{what}: segment {i} ids");
        assert_eq!(a.temperature, b.temperature, "{what}: segment {i} fallback");
        assert_eq!(
            (a.start, a.end),
            (b.start, b.end),
            "{what}: segment {i} times"
        );
        for (name, x, y) in [
            ("avg_logprob", a.avg_logprob, b.avg_logprob),
            ("no_speech_prob", a.no_speech_prob, b.no_speech_prob),
        ] {
            assert!(
                (x - y).abs() <= tol,
                "{what}: segment {i} {name} {x} vs {y}"
            );
        }
    }
}

fn check_model<B: Backend>(tag: &str, m: &Whisper<B>, tol: f32) {
    for clip in CLIPS {
        let audio = clips_common::clip(clip);
        for beam in [1, 5] {
            let host = run(m, &audio, beam, false);
            let device = run(m, &audio, beam, true);
            let what = format!("{tag} {clip} beam {beam}");
            compare(&what, &device, &host, tol);
            assert!(!host.text().trim().is_empty(), "{what}: empty transcript");
            eprintln!("{what}: {}", device.text());
        }
    }
    m.set_device_select(None);
}

#[test]
fn cpu_request_selection_equals_host_selection() {
    let dir = clips_common::cache().join("models/whisper-tiny.en");
    let ck = load_checkpoint(&dir).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/fetch-models.sh whisper-tiny.en)",
            dir.display()
        )
    });
    let cpu = stapes_cpu::CpuBackend::new(0).expect("cpu backend");
    let m = Whisper::new(cpu, &ck, Lane::F32).expect("model");
    check_model("cpu f32", &m, 0.0);
}

#[test]
fn cuda_device_selection_equals_host_selection() {
    const NAME: &str = "cuda_device_selection_equals_host_selection";
    std::env::set_var("STAPES_CUDA_SELECT", "1");
    if !stapes_cuda::available() {
        eprintln!("SKIPPED (no CUDA device): {NAME}");
        return;
    }
    let Some(path) = std::env::var_os("STAPES_GPU_MODEL").filter(|p| !p.is_empty()) else {
        eprintln!("SKIPPED (STAPES_GPU_MODEL not set): {NAME}");
        return;
    };
    let ck = load_checkpoint(std::path::Path::new(&path)).expect("STAPES_GPU_MODEL loads");
    let cuda = stapes_cuda::CudaBackend::new(0).expect("cuda backend");
    assert!(cuda.selects_on_device(), "STAPES_CUDA_SELECT=1 was read");
    for lane in [Lane::F16, Lane::Q8] {
        let cuda = stapes_cuda::CudaBackend::new(0).expect("cuda backend");
        let m = Whisper::new(cuda, &ck, lane).expect("model");
        check_model(&format!("cuda {lane}"), &m, 1e-5);
    }
}
