//! Silero VAD v6 against onnxruntime and the silero-vad package (fixture written by
//! tools/reference/silero_ort.py): per-window probabilities within 1e-4 at 16 and 8 kHz on the
//! reference and CPU backends, segments identical to `get_speech_timestamps`, stream events
//! identical to `VADIterator`.
//!
//! Needs `scripts/fetch-models.sh silero-vad audio`; fails loudly without it.

use serde_json::Value;
use stapes_core::reference::ReferenceBackend;
use stapes_core::Backend;
use stapes_cpu::CpuBackend;
use stapes_models::silero::{
    speech_timestamps, SileroVad, SpeechSegment, VadEvent, VadParams, VadRate,
};
use std::path::{Path, PathBuf};

const PROB_TOL: f32 = 1e-4;

fn cpu() -> CpuBackend {
    CpuBackend::new(1).expect("CPU backend with one thread")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cache() -> PathBuf {
    std::env::var_os("STAPES_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/stapes")
        })
}

fn model(name: &str) -> PathBuf {
    let p = cache().join("models/silero-vad").join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh silero-vad audio",
        p.display()
    );
    p
}

fn fixture() -> Value {
    let p = root().join("crates/stapes-models/tests/fixtures/silero/silero_ort.json");
    serde_json::from_str(&std::fs::read_to_string(&p).expect("fixture readable"))
        .expect("fixture is JSON")
}

fn read_pcm16(path: &Path) -> (Vec<f32>, u32) {
    assert!(
        path.exists(),
        "{} is missing: run scripts/fetch-models.sh audio",
        path.display()
    );
    let mut r = hound::WavReader::open(path).expect("wav opens");
    let spec = r.spec();
    assert_eq!(
        (spec.channels, spec.bits_per_sample),
        (1, 16),
        "{}",
        path.display()
    );
    let x = r
        .samples::<i16>()
        .map(|s| s.expect("sample") as f32 / 32768.0)
        .collect();
    (x, spec.sample_rate)
}

/// The audio a case hands to `get_speech_timestamps`, rebuilt as the script built it.
fn case_audio(name: &str) -> Vec<f32> {
    let lv = |n: &str| {
        cache().join(format!(
            "audio/librivox/sense_and_sensibility_01_austen_64kb-{n}.wav"
        ))
    };
    match name {
        "jfk" => read_pcm16(&root().join("samples/jfk.wav")).0,
        "noise" => read_pcm16(&cache().join("audio/Noise.wav")).0,
        "mix" => {
            let mut x = case_audio("jfk");
            x.extend(std::iter::repeat_n(0.0, 16000));
            x.extend(case_audio("noise").iter().step_by(3));
            x.extend(read_pcm16(&lv("0870")).0);
            x.extend(std::iter::repeat_n(0.0, 8000));
            x.extend(read_pcm16(&lv("0880")).0);
            x
        }
        n if n.starts_with("lv-") => read_pcm16(&lv(&n[3..])).0,
        other => panic!("unknown fixture case {other}"),
    }
}

fn params_from(v: &Value) -> VadParams {
    let mut p = VadParams::default();
    let o = v.as_object().expect("params object");
    for (k, val) in o {
        let f = || val.as_f64().expect("number");
        match k.as_str() {
            "threshold" => p.threshold = f(),
            "neg_threshold" => p.neg_threshold = Some(f()),
            "min_speech_duration_ms" => p.min_speech_duration_ms = f(),
            "max_speech_duration_s" => p.max_speech_duration_s = f(),
            "min_silence_duration_ms" => p.min_silence_duration_ms = f(),
            "speech_pad_ms" => p.speech_pad_ms = f(),
            "min_silence_at_max_speech" => p.min_silence_at_max_speech_ms = f(),
            "use_max_poss_sil_at_max_speech" => {
                p.use_max_poss_sil_at_max_speech = val.as_bool().expect("bool")
            }
            other => panic!("fixture uses an unknown parameter {other}"),
        }
    }
    p
}

fn segs_from(v: &Value) -> Vec<SpeechSegment> {
    v.as_array()
        .expect("segments")
        .iter()
        .map(|s| SpeechSegment {
            start: s[0].as_u64().expect("start") as usize,
            end: s[1].as_u64().expect("end") as usize,
        })
        .collect()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

fn rate_of(hz: u64) -> VadRate {
    match hz {
        16000 => VadRate::Hz16000,
        8000 => VadRate::Hz8000,
        other => panic!("rate {other}"),
    }
}

struct Case {
    name: String,
    model_rate: u64,
    call_rate: u32,
    audio: Vec<f32>,
    models: Vec<String>,
    probs: Vec<f32>,
    segments: Vec<(VadParams, Vec<SpeechSegment>)>,
    events: Vec<Value>,
}

fn cases() -> Vec<Case> {
    let fx = fixture();
    fx["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let name = c["name"].as_str().expect("name").to_string();
            let pre = c["decimate_first"].as_u64().expect("decimate_first") as usize;
            let audio: Vec<f32> = case_audio(&name).into_iter().step_by(pre).collect();
            assert_eq!(
                audio.len() as u64,
                c["n_samples"].as_u64().expect("n"),
                "{name}: input rebuilt with another length"
            );
            Case {
                name,
                model_rate: c["model_rate"].as_u64().expect("rate"),
                call_rate: c["call_rate"].as_u64().expect("call_rate") as u32,
                audio,
                models: c["models"]
                    .as_array()
                    .expect("models")
                    .iter()
                    .map(|m| m.as_str().expect("str").to_string())
                    .collect(),
                probs: f32s(&c["probs"]),
                segments: c["segments"]
                    .as_array()
                    .expect("segments")
                    .iter()
                    .map(|s| (params_from(&s["params"]), segs_from(&s["segments"])))
                    .collect(),
                events: c["stream_events"].as_array().expect("events").clone(),
            }
        })
        .collect()
}

#[test]
fn timestamps_equal_the_package_on_synthetic_probabilities() {
    let fx = fixture();
    let sets: Vec<Vec<f32>> = fx["synthetic_probs"]
        .as_array()
        .expect("sets")
        .iter()
        .map(f32s)
        .collect();
    let mut checked = 0;
    for s in fx["synthetic"].as_array().expect("synthetic") {
        let probs = &sets[s["probs_index"].as_u64().expect("index") as usize];
        let rate = rate_of(s["rate"].as_u64().expect("rate"));
        let params = params_from(&s["params"]);
        let want = segs_from(&s["segments"]);
        let got = speech_timestamps(
            probs,
            &params,
            rate,
            s["n_samples"].as_u64().expect("n") as usize,
        );
        assert_eq!(got, want, "rate {:?} params {params:?}", rate);
        checked += 1;
    }
    assert_eq!(checked, 40);
}

#[test]
fn timestamps_equal_the_package_on_onnxruntime_probabilities() {
    for c in cases() {
        let rate = rate_of(c.model_rate);
        let (_, step) = VadRate::for_input(c.call_rate).expect("rate");
        let model_len = c.audio.len().div_ceil(step);
        for (params, want) in &c.segments {
            let got: Vec<SpeechSegment> = speech_timestamps(&c.probs, params, rate, model_len)
                .into_iter()
                .map(|s| SpeechSegment {
                    start: s.start * step,
                    end: s.end * step,
                })
                .collect();
            assert_eq!(&got, want, "{}@{}: {params:?}", c.name, c.model_rate);
        }
    }
}

/// Probabilities within PROB_TOL of onnxruntime and segments identical, for every case a model
/// file serves (`only` limits the cases, for the slow scalar backend).
fn check_backend<B: Backend>(make: impl Fn() -> B, host_stft: bool, only: Option<&[&str]>) {
    let all = cases();
    for file in ["silero_vad.onnx", "silero_vad_16k_op15.onnx"] {
        let mut vad = SileroVad::load(make(), model(file)).expect("model loads");
        // The real basis is a Hann-windowed DFT, so the host FFT path must be on offer.
        assert!(
            vad.host_stft_available(),
            "{file}: basis not recognised as a windowed DFT"
        );
        vad.set_host_stft(host_stft);
        let before = vad.backend().counters().snapshot();
        for c in all.iter().filter(|c| c.models.iter().any(|m| m == file)) {
            if only.is_some_and(|o| !o.contains(&c.name.as_str())) {
                continue;
            }
            let probs = vad
                .probabilities(&c.audio, c.call_rate)
                .expect("probabilities");
            assert_eq!(
                probs.len(),
                c.probs.len(),
                "{file} {}@{}",
                c.name,
                c.model_rate
            );
            let (worst, at) = probs
                .iter()
                .zip(&c.probs)
                .enumerate()
                .map(|(i, (a, b))| ((a - b).abs(), i))
                .fold((0f32, 0), |m, x| if x.0 > m.0 { x } else { m });
            eprintln!(
                "{} (host STFT {host_stft}) {file} {}@{}: max |Δp| {worst:.2e} (window {at})",
                vad.backend().name(),
                c.name,
                c.model_rate
            );
            assert!(
                worst <= PROB_TOL,
                "{file} {}@{}: window {at}: {} vs onnxruntime {}",
                c.name,
                c.model_rate,
                probs[at],
                c.probs[at]
            );
            for (params, want) in &c.segments {
                let got = vad
                    .segments(&c.audio, c.call_rate, params)
                    .expect("segments");
                assert_eq!(&got, want, "{file} {}@{}: {params:?}", c.name, c.model_rate);
            }
        }
        // Engagement: the f32 lane's GEMMs on this backend did the work.
        let after = vad.backend().counters().snapshot();
        assert!(
            after.gemm_f32 > before.gemm_f32,
            "{}: no f32 GEMM ran",
            vad.backend().name()
        );
        assert!(
            after.declines.is_empty(),
            "{}: declined {:?}",
            vad.backend().name(),
            after.declines
        );
    }
}

#[test]
fn cpu_probabilities_and_segments_match_onnxruntime() {
    check_backend(cpu, true, None);
}

#[test]
fn cpu_conv_stft_matches_onnxruntime() {
    check_backend(cpu, false, None);
}

#[test]
fn reference_probabilities_and_segments_match_onnxruntime() {
    let few: &[&str] = &["jfk", "noise", "lv-0880"];
    check_backend(ReferenceBackend::default, true, Some(few));
    check_backend(ReferenceBackend::default, false, Some(few));
}

#[test]
fn stream_equals_offline_and_vaditerator_events() {
    let vad = SileroVad::load(cpu(), model("silero_vad.onnx")).expect("model loads");
    for c in cases()
        .iter()
        .filter(|c| c.name == "mix" || c.name == "jfk")
    {
        let rate = rate_of(c.model_rate);
        let audio: Vec<f32> = if c.call_rate == 48000 {
            c.audio.iter().step_by(3).copied().collect()
        } else {
            c.audio.clone()
        };
        let offline = vad.probabilities_at(&audio, rate).expect("offline");
        let mut stream = vad.stream(rate, &VadParams::default()).expect("stream");
        let mut frames = Vec::new();
        // Odd chunk sizes: windows straddle feeds, several windows complete in one feed.
        let sizes = [1usize, 700, 37, 4096, 513, 255, 9000];
        let mut pos = 0;
        let mut k = 0;
        while pos < audio.len() {
            let n = sizes[k % sizes.len()].min(audio.len() - pos);
            frames.extend(stream.feed(&audio[pos..pos + n]).expect("feed"));
            pos += n;
            k += 1;
        }
        frames.extend(stream.finish().expect("finish"));
        // After a reset the stream starts from zero state and context again: the first second
        // fed in one piece gives the same probabilities as the first pass.
        stream.reset().expect("reset");
        let again = stream
            .feed(&audio[..rate.hz() as usize])
            .expect("feed after reset");
        for (a, b) in again.iter().zip(&frames) {
            assert!(
                (a.probability - b.probability).abs() <= 1e-5,
                "{}: window {} after reset",
                c.name,
                a.window
            );
            assert_eq!(a.window, b.window);
        }
        let probs: Vec<f32> = frames
            .iter()
            .filter(|f| !f.probability.is_nan())
            .map(|f| f.probability)
            .collect();
        assert_eq!(probs.len(), offline.len(), "{}@{}", c.name, c.model_rate);
        for (i, (a, b)) in probs.iter().zip(&offline).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5,
                "{}@{} window {i}: stream {a} vs offline {b}",
                c.name,
                c.model_rate
            );
        }
        // Events before the last window: VADIterator has no finish(), which may close speech there.
        let n_windows = c.probs.len() - 1;
        let got: Vec<(usize, &'static str, usize)> = frames
            .iter()
            .filter(|f| f.window < n_windows && !f.probability.is_nan())
            .filter_map(|f| match f.event {
                Some(VadEvent::SpeechStart { sample }) => Some((f.window, "start", sample)),
                Some(VadEvent::SpeechEnd { end, .. }) => Some((f.window, "end", end)),
                None => None,
            })
            .collect();
        let want: Vec<(usize, &'static str, usize)> = c
            .events
            .iter()
            .filter(|e| (e["window"].as_u64().expect("window") as usize) < n_windows)
            .map(|e| {
                let w = e["window"].as_u64().expect("window") as usize;
                match (e.get("start"), e.get("end")) {
                    (Some(s), _) => (w, "start", s.as_u64().expect("start") as usize),
                    (_, Some(x)) => (w, "end", x.as_u64().expect("end") as usize),
                    _ => panic!("event without start/end"),
                }
            })
            .collect();
        assert!(!want.is_empty(), "{}: the fixture has speech", c.name);
        assert_eq!(got, want, "{}@{}", c.name, c.model_rate);
    }
}

#[test]
fn a_zeroed_encoder_block_fails_the_bar() {
    // The parity bar must be able to fail: with the weights of one encoder block zeroed the
    // probabilities move far past 1e-4 (the same comparison as the parity tests).
    let mut bytes = std::fs::read(model("silero_vad_16k_op15.onnx")).expect("model readable");
    let file = stapes_formats::onnx::parse_onnx(Path::new("x"), &bytes).expect("parses");
    let w = file
        .tensor("model.encoder.2.reparam_conv.weight")
        .expect("tensor")
        .f32_values()
        .expect("f32")
        .to_vec();
    let needle: Vec<u8> = w.iter().take(16).flat_map(|v| v.to_le_bytes()).collect();
    let at = bytes
        .windows(needle.len())
        .position(|win| win == needle.as_slice())
        .expect("raw bytes found");
    bytes[at..at + w.len() * 4].iter_mut().for_each(|b| *b = 0);
    let dir = std::env::temp_dir().join(format!("stapes-silero-fault-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let planted = dir.join("planted.onnx");
    std::fs::write(&planted, &bytes).expect("write");
    let vad = SileroVad::load(cpu(), &planted).expect("still a valid file");
    let c = cases()
        .into_iter()
        .find(|c| c.name == "jfk" && c.model_rate == 16000)
        .expect("jfk case");
    let probs = vad.probabilities(&c.audio, 16000).expect("runs");
    let worst = probs
        .iter()
        .zip(&c.probs)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        worst > 100.0 * PROB_TOL,
        "a zeroed block moved probabilities by only {worst}"
    );
}

#[test]
fn bad_files_and_inputs_are_typed_errors() {
    let dir = std::env::temp_dir().join(format!("stapes-silero-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let bytes = std::fs::read(model("silero_vad_16k_op15.onnx")).expect("model readable");

    let truncated = dir.join("truncated.onnx");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    let e = SileroVad::load(cpu(), &truncated)
        .err()
        .expect("truncated file fails")
        .to_string();
    assert!(e.contains("truncated.onnx"), "{e}");

    let empty = dir.join("empty.onnx");
    std::fs::write(&empty, b"").expect("write");
    let e = SileroVad::load(cpu(), &empty)
        .err()
        .expect("empty file fails")
        .to_string();
    assert!(e.contains("empty.onnx"), "{e}");

    let e = SileroVad::load(cpu(), dir.join("absent.onnx"))
        .err()
        .expect("absent file fails")
        .to_string();
    assert!(e.contains("absent.onnx"), "{e}");

    // A file without the STFT basis is not a Silero VAD.
    let name = b"model.stft.forward_basis_buffer";
    let mut renamed = bytes.clone();
    let hits: Vec<usize> = renamed
        .windows(name.len())
        .enumerate()
        .filter(|(_, w)| *w == name)
        .map(|(i, _)| i)
        .collect();
    assert!(!hits.is_empty(), "name present");
    for at in hits {
        renamed[at..at + 5].copy_from_slice(b"XXXXX");
    }
    let other = dir.join("renamed.onnx");
    std::fs::write(&other, &renamed).expect("write");
    let e = SileroVad::load(cpu(), &other)
        .err()
        .expect("renamed basis fails")
        .to_string();
    assert!(e.contains("renamed.onnx") && e.contains("stft"), "{e}");
    std::fs::remove_dir_all(&dir).ok();

    let vad = SileroVad::load(cpu(), model("silero_vad_16k_op15.onnx")).expect("loads");
    assert_eq!(vad.rates(), vec![VadRate::Hz16000]);
    let e = vad
        .probabilities(&[0.0; 1000], 8000)
        .expect_err("no 8 kHz branch")
        .to_string();
    assert!(e.contains("8000"), "{e}");
    assert!(vad.probabilities(&[0.0; 1000], 44100).is_err());
    assert!(vad.probabilities(&[0.0, f32::NAN], 16000).is_err());
    assert_eq!(
        vad.probabilities(&[], 16000).expect("empty input is fine"),
        Vec::<f32>::new()
    );
}

#[test]
fn damaged_files_never_panic() {
    // Truncation at many offsets and single-byte corruption anywhere: loading either fails with
    // an error naming the file or yields a model (a flipped weight byte is still a model); it
    // never panics.
    let path = model("silero_vad_16k_op15.onnx");
    let bytes = std::fs::read(&path).expect("model readable");
    let p = Path::new("damaged.onnx");
    for i in 1..64 {
        let cut = bytes.len() * i / 64;
        if let Err(e) = stapes_formats::onnx::parse_onnx(p, &bytes[..cut]) {
            assert!(e.to_string().contains("damaged.onnx"), "{e}");
        } else {
            // A cut on a message boundary can still parse; the weight table must then notice.
            let f = stapes_formats::onnx::parse_onnx(p, &bytes[..cut]).expect("parsed above");
            assert!(
                stapes_models::silero::weights::branches(&f).is_err(),
                "cut at {cut} accepted"
            );
        }
    }
    let mut seed = 0x5eed_u64;
    for _ in 0..150 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut damaged = bytes.clone();
        let at = (seed % damaged.len() as u64) as usize;
        damaged[at] ^= 0x5a;
        if let Ok(f) = stapes_formats::onnx::parse_onnx(p, &damaged) {
            let _ = stapes_models::silero::weights::branches(&f);
        }
    }
}

#[test]
fn a_loaded_model_can_be_shared_across_threads() {
    // The server keeps one VAD per process and runs requests on a thread pool.
    fn shared<T: Send + Sync>(_: &T) {}
    let vad = SileroVad::load(cpu(), model("silero_vad.onnx")).expect("loads");
    shared(&vad);
    let a = case_audio("jfk");
    let probs = std::thread::scope(|s| {
        let h = s.spawn(|| vad.probabilities(&a, 16000).expect("runs"));
        h.join().expect("thread")
    });
    assert_eq!(probs, vad.probabilities(&a, 16000).expect("runs"));
}
