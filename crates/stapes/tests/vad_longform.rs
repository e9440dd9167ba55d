//! Issue 6's long-file acceptance: a ≥ 10-minute file of real speech clips, silences and noise.
//! With `--vad` (Engine::transcribe_with_vad) every clip's text comes back in order, nothing is
//! transcribed in the silent or noise regions, and segment starts sit near the clip starts. The
//! plain seek loop on the same file is reported (hallucinated segments counted), not asserted.

use stapes::engine::{Engine, EngineOptions, TranscribeOptions};
use stapes::runtime::DeviceRequest;
use stapes::vad::Vad;
use stapes_models::wer::{normalized_words as words, word_edits as edit_distance};
use std::path::{Path, PathBuf};

const CLIPS: [&str; 7] = [
    "jfk",
    "beckett",
    "librivox-0870",
    "librivox-0880",
    "librivox-0890",
    "librivox-0920",
    "librivox-0930",
];
const SR: f64 = 16_000.0;

fn cache() -> PathBuf {
    std::env::var_os("STAPES_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/stapes")
        })
}

fn load(p: &Path) -> Vec<f32> {
    stapes::audio::load_file(p)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch-models.sh all)", p.display()))
}

fn clip(name: &str) -> Vec<f32> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = match name {
        "jfk" => root.join("samples/jfk.wav"),
        "beckett" => cache().join("audio/beckett.wav"),
        n => cache().join(format!(
            "audio/librivox/sense_and_sensibility_01_austen_64kb-{}.wav",
            &n[9..]
        )),
    };
    load(&p)
}

/// faster-whisper's greedy text of each clip (tools/reference/whisper_fw.py).
fn reference_text(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../stapes-models/tests/fixtures/whisper/fw_decode.json");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&p).expect("fw_decode.json")).expect("json");
    v["models"]["whisper-tiny.en"]["clips"][name]["greedy"]["text"]
        .as_str()
        .expect("text")
        .to_string()
}

/// 4 rounds of the 7 clips, each clip after 12 s of silence, 6 s of noise after every second clip,
/// padded with silence to 10 minutes. Returns the samples, the clip spans and the noise spans.
/// (clip name, start s, end s)
type ClipSpan = (&'static str, f64, f64);

fn build() -> (Vec<f32>, Vec<ClipSpan>, Vec<(f64, f64)>) {
    let clips: Vec<(&str, Vec<f32>)> = CLIPS.iter().map(|c| (*c, clip(c))).collect();
    let noise48 = load(&cache().join("audio/Noise.wav"));
    let noise: Vec<f32> = noise48
        .iter()
        .cycle()
        .take((6.0 * SR) as usize)
        .map(|x| x * 0.5)
        .collect();
    let silence = vec![0f32; (12.0 * SR) as usize];
    let (mut out, mut spans, mut noises) = (Vec::new(), Vec::new(), Vec::new());
    for _round in 0..4 {
        for (i, (name, a)) in clips.iter().enumerate() {
            out.extend_from_slice(&silence);
            let start = out.len() as f64 / SR;
            out.extend_from_slice(a);
            spans.push((*name, start, out.len() as f64 / SR));
            if i % 2 == 1 {
                out.extend_from_slice(&silence[..(2.0 * SR) as usize]);
                let s = out.len() as f64 / SR;
                out.extend_from_slice(&noise);
                noises.push((s, out.len() as f64 / SR));
            }
        }
    }
    out.resize(out.len().max((600.0 * SR) as usize), 0.0);
    (out, spans, noises)
}

#[test]
fn ten_minutes_with_vad_every_clip_in_order_nothing_in_silence_or_noise() {
    let (audio, spans, noises) = build();
    assert!(audio.len() as f64 / SR >= 600.0);
    let model = cache().join("models/whisper-tiny.en");
    assert!(
        model.exists(),
        "{} missing: run scripts/fetch-models.sh all",
        model.display()
    );
    let engine = Engine::load(
        &model,
        &EngineOptions {
            device: DeviceRequest::Cpu,
            lane: None,
            threads: None,
        },
    )
    .expect("engine");
    let vad = Vad::load("silero-vad").expect("silero-vad (run scripts/fetch-models.sh all)");
    let opts = TranscribeOptions {
        beam_size: 1,
        temperature: Some(0.0),
        ..Default::default()
    };
    let t = engine
        .transcribe_with_vad(&audio, &vad, &opts, None)
        .expect("transcribe --vad");

    if std::env::var_os("STAPES_DEBUG_VAD").is_some() {
        for s in &t.segments {
            eprintln!("{:8.2} {:8.2} {}", s.start, s.end, s.text);
        }
        eprintln!("{spans:?}");
    }
    // Nothing from silence or noise: every segment overlaps a clip (0.3 s of slack for the VAD's
    // padding). A segment may straddle a cut-out gap when the recogniser joined the text of two
    // neighbouring pieces; its text still comes from speech.
    for s in &t.segments {
        let overlaps = spans
            .iter()
            .any(|(_, a, b)| s.end > a - 0.3 && s.start < b + 0.3);
        assert!(
            overlaps,
            "segment {:.2}-{:.2} {:?} lies in silence or noise (noise spans {noises:?})",
            s.start, s.end, s.text
        );
    }
    assert!(
        t.segments.windows(2).all(|w| w[1].start >= w[0].start),
        "segments out of order"
    );
    // Every clip's text, in order: the whole transcript against the clips' reference texts.
    let got = words(
        &t.segments
            .iter()
            .map(|s| s.text.as_str())
            .collect::<String>(),
    );
    let want: Vec<String> = spans
        .iter()
        .flat_map(|(name, _, _)| words(&reference_text(name)))
        .collect();
    let d = edit_distance(&got, &want);
    eprintln!(
        "vad long-form: {} segments, {} words, {d} word edits vs the clips' faster-whisper texts",
        t.segments.len(),
        got.len()
    );
    assert!(
        d * 20 <= want.len(),
        "{d} word edits over {} words\n got: {got:?}\nwant: {want:?}",
        want.len()
    );
    // Segment starts against clip starts, for each clip where a segment starts.
    let mut offsets = Vec::new();
    for (_, a, b) in &spans {
        if let Some(s) = t
            .segments
            .iter()
            .find(|s| s.start >= a - 0.3 && s.start < *b)
        {
            offsets.push((s.start - a).abs());
        }
    }
    offsets.sort_by(f64::total_cmp);
    let within = offsets.iter().filter(|o| **o <= 0.3).count();
    eprintln!(
        "segment starts: {} of {} clips start a segment, {within} within 0.3 s of the clip start, worst {:.2} s",
        offsets.len(),
        spans.len(),
        offsets.last().copied().unwrap_or(0.0)
    );

    // the plain seek loop on the same file, for the report: segments outside every clip
    let plain = engine
        .transcribe(&audio, &opts, None)
        .expect("plain transcribe");
    let stray = plain
        .segments
        .iter()
        .filter(|s| {
            !spans
                .iter()
                .any(|(_, a, b)| s.end > a - 0.3 && s.start < b + 0.3)
        })
        .count();
    eprintln!(
        "plain seek loop: {} segments, {stray} entirely in silence or noise",
        plain.segments.len()
    );
}
