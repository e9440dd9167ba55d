//! Issue 6's long-file acceptance: a ≥ 10-minute file of real speech clips, silences and noise.
//! With `--vad` (Engine::transcribe_with_vad) every clip's text comes back in order, nothing is
//! transcribed in the silent or noise regions, no segment runs across them, and each clip's text
//! starts and ends within 0.3 s of its speech. The plain seek loop on the same file is reported
//! (hallucinated segments counted), not asserted.

use stapes::engine::{Engine, EngineOptions, TranscribeOptions};
use stapes::runtime::DeviceRequest;
use stapes::vad::Vad;
use stapes_models::wer::{normalized_words as words, word_edits as edit_distance};
use std::path::Path;

mod clips_common;
use clips_common::{cache, clip, CLIPS, SR};

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

/// tools/reference/vad_longform.py's output: the silero-vad package on this test's file.
fn reference() -> serde_json::Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vad_longform.json");
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Mono 16-bit PCM WAV samples at the file's own rate, as x/32768 (no resampling).
fn pcm16(p: &Path) -> Vec<f32> {
    let b = std::fs::read(p)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch-models.sh all)", p.display()));
    assert!(b.len() > 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WAVE");
    let mut at = 12;
    while at + 8 <= b.len() {
        let len = u32::from_le_bytes([b[at + 4], b[at + 5], b[at + 6], b[at + 7]]) as usize;
        if &b[at..at + 4] == b"fmt " {
            let channels = u16::from_le_bytes([b[at + 10], b[at + 11]]);
            let bits = u16::from_le_bytes([b[at + 22], b[at + 23]]);
            assert_eq!(
                (channels, bits),
                (1, 16),
                "{}: mono 16-bit PCM",
                p.display()
            );
        }
        if &b[at..at + 4] == b"data" {
            let end = (at + 8 + len).min(b.len());
            return b[at + 8..end]
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as f32 / 32768.0)
                .collect();
        }
        at += 8 + len + (len & 1);
    }
    panic!("{}: no data chunk", p.display())
}

/// 4 rounds of the 7 clips, each clip after 12 s of silence, 6 s of noise after every second clip,
/// padded with silence to 10 minutes. Returns the samples, the clip spans and the noise spans.
/// (clip name, start s, end s)
type ClipSpan = (&'static str, f64, f64);

fn build() -> (Vec<f32>, Vec<ClipSpan>, Vec<(f64, f64)>) {
    let clips: Vec<(&str, Vec<f32>)> = CLIPS.iter().map(|c| (*c, clip(c))).collect();
    // 48 kHz decimated by 3 (no filter), as the reference script does, so both sides build the
    // same samples without depending on a resampler
    let noise48 = pcm16(&cache().join("audio/Noise.wav"));
    let noise: Vec<f32> = noise48
        .iter()
        .step_by(3)
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
    // The reference ran on this very file: same layout, same samples.
    let reference = reference();
    let n = reference["samples"].as_u64().expect("samples") as usize;
    let sum: f64 = audio.iter().map(|&x| x as f64).sum();
    let sum2: f64 = audio.iter().map(|&x| x as f64 * x as f64).sum();
    let close = |a: f64, k: &str| (a - reference[k].as_f64().expect(k)).abs() < 1e-6;
    assert!(
        audio.len() == n && close(sum, "sum") && close(sum2, "sum_squares"),
        "the file differs from the one tools/reference/vad_longform.py built"
    );
    let ref_clips = reference["clips"].as_array().expect("clips");
    assert_eq!(ref_clips.len(), spans.len());
    for ((name, a, b), c) in spans.iter().zip(ref_clips) {
        assert_eq!(c["name"].as_str(), Some(*name));
        assert!((c["start"].as_f64().unwrap_or(-1.0) - a).abs() < 1e-9);
        assert!((c["end"].as_f64().unwrap_or(-1.0) - b).abs() < 1e-9);
    }
    let vad = Vad::load("silero-vad").expect("silero-vad (run scripts/fetch-models.sh all)");
    // Our VAD hears the speech where the package does, to the sample.
    let pieces = vad
        .speech(&audio, &stapes::vad::VadParams::default())
        .expect("vad");
    let want_pieces: Vec<(usize, usize)> = reference["speech_samples"]
        .as_array()
        .expect("speech_samples")
        .iter()
        .map(|p| {
            (
                p[0].as_u64().unwrap_or(0) as usize,
                p[1].as_u64().unwrap_or(0) as usize,
            )
        })
        .collect();
    let got_pieces: Vec<(usize, usize)> = pieces
        .iter()
        .map(|p| {
            (
                (p.start * SR).round() as usize,
                (p.end * SR).round() as usize,
            )
        })
        .collect();
    assert_eq!(
        got_pieces, want_pieces,
        "VAD pieces differ from the package's"
    );
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
    let opts = TranscribeOptions {
        beam_size: 1,
        temperature: Some(0.0),
        ..Default::default()
    };
    // `STAPES_VAD_SPAN` (diagnostic): another span limit than the default's, to measure what the
    // default's end room costs.
    let vopts = stapes::vad::VadOptions {
        max_span: std::env::var("STAPES_VAD_SPAN")
            .ok()
            .and_then(|s| s.parse().ok()),
        ..Default::default()
    };
    let span = vopts.span_for("whisper").expect("span");
    let mut params = vopts.params.clone();
    params.max_speech_duration_s = params.max_speech_duration_s.min(span);
    let n_groups = stapes::vad::groups(&vad.speech(&audio, &params).expect("vad"), span).len();
    let clock = std::time::Instant::now();
    let t = engine
        .transcribe_vad(&audio, &vad, &vopts, &opts, None, &mut |_| {})
        .expect("transcribe --vad");
    let vad_secs = clock.elapsed().as_secs_f64();
    eprintln!("--vad: span limit {span} s, {n_groups} groups, {vad_secs:.1} s");

    // The plain seek loop on the same file, for the report: segments entirely outside every clip
    // (hallucinated in silence or noise), segments running across a gap, and its word edits.
    let clock = std::time::Instant::now();
    let plain = engine
        .transcribe(&audio, &opts, None)
        .expect("plain transcribe");
    let plain_secs = clock.elapsed().as_secs_f64();
    let stray = plain
        .segments
        .iter()
        .filter(|s| {
            !spans
                .iter()
                .any(|(_, a, b)| s.end > a - 0.3 && s.start < b + 0.3)
        })
        .count();
    let across = plain
        .segments
        .iter()
        .filter(|s| {
            !spans
                .iter()
                .any(|(_, a, b)| s.start >= a - 0.3 && s.end <= b + 0.3)
        })
        .count();
    let want: Vec<String> = spans
        .iter()
        .flat_map(|(name, _, _)| words(&reference_text(name)))
        .collect();
    let plain_edits = edit_distance(&words(&plain.text()), &want);
    eprintln!(
        "plain seek loop: {} segments, {stray} entirely in silence or noise, {across} not within one clip, {plain_edits} word edits over {} words; {plain_secs:.1} s (--vad: {vad_secs:.1} s)",
        plain.segments.len(),
        want.len()
    );

    if std::env::var_os("STAPES_DEBUG_VAD").is_some() {
        for s in &t.segments {
            eprintln!("{:8.2} {:8.2} {}", s.start, s.end, s.text);
        }
        eprintln!("{spans:?}");
    }
    // Nothing from silence or noise, and nothing joined across them: every segment lies within
    // one clip (0.3 s of slack for the VAD's padding).
    for s in &t.segments {
        let inside = spans
            .iter()
            .any(|(_, a, b)| s.start >= a - 0.3 && s.end <= b + 0.3);
        assert!(
            inside,
            "segment {:.2}-{:.2} {:?} is not within one clip: it lies in or across silence or noise (noise spans {noises:?})",
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
    // Each clip's first segment starts, and its last segment ends, within 0.3 s of where the
    // reference VAD hears the clip's speech start and end (a clip file opens and closes on up to
    // a second of room tone, so its first sample is not where its text starts).
    let (mut worst_start, mut worst_end, mut worst_file) = (0f64, 0f64, 0f64);
    for (i, (name, a, b)) in spans.iter().enumerate() {
        let f = |k: &str| reference["clips"][i][k].as_f64().expect("clip span");
        let (s0, s1) = (f("speech_start"), f("speech_end"));
        let mine: Vec<_> = t
            .segments
            .iter()
            .filter(|s| s.start >= a - 0.3 && s.end <= b + 0.3)
            .collect();
        let (Some(first), Some(last)) = (mine.first(), mine.last()) else {
            panic!("{name} at {a:.2} s: no segment");
        };
        let (ds, de) = (first.start - s0, last.end - s1);
        eprintln!(
            "{name:>14} at {a:7.2}: start {:+.2} s from its speech ({:+.2} s from the file start), end {de:+.2} s",
            ds,
            first.start - a
        );
        worst_start = worst_start.max(ds.abs());
        worst_end = worst_end.max(de.abs());
        worst_file = worst_file.max((first.start - a).abs());
    }
    eprintln!(
        "segment bounds vs speech: worst start {worst_start:.2} s, worst end {worst_end:.2} s (worst start vs the clip file's first sample {worst_file:.2} s)"
    );
    assert!(
        worst_start <= 0.3 && worst_end <= 0.3,
        "clip text starts {worst_start:.2} s / ends {worst_end:.2} s away from the speech (want ≤ 0.3 s)"
    );
}
