//! Issue 3's long-form acceptance in its own terms, on the documented long-form route (`--vad`,
//! `Engine::transcribe_with_vad`): the clips concatenated with silences into a ≥ 3-minute file
//! (the 190 s file tools/reference/whisper_fw.py builds: the 7 clips three times, each after 2.5 s
//! of silence, 2.5 s at the end) yield every clip's text in order, nothing dropped or repeated,
//! segment boundaries within 0.5 s and each clip's first/last word within 0.3 s of the true clip
//! boundaries, for tiny.en and base.
//!
//! Truth: a clip file is not cut at its speech (0.2–0.35 s of room tone before, up to 1 s after),
//! so a clip's boundaries are where Silero VAD (the silero-vad 6.2.3 package through onnxruntime,
//! default parameters, run on each clip file alone: tools/reference/whisper_fw_bounds.py, fixture
//! speech_bounds.json) hears its speech start and end, shifted to where the clip was placed in the
//! long file. Expected text: faster-whisper float32 greedy on each clip alone (fw_decode.json),
//! at most one word edit per clip occurrence ([`MAX_EDITS`]); words are given to a clip by their
//! middle. Greedy, temperature 0, the CPU's default lane (f32).
//!
//! Holds on tiny.en and base with the default 28 s span (`WHISPER_END_ROOM`). With
//! `STAPES_VAD_SPAN=30` base fails as it did before that room: one group of 29.6 s (0920, 0930
//! and jfk's first phrase) comes back as 0920's text and "He", dropping 0930 and "And so my fellow
//! Americans" (docs/runs/vadfix-longform-base-span30.txt). Base's DTW last-word ends fall 0.1–0.43 s
//! before Silero's speech end (faster-whisper's own vad_filter route on this file: 0.33–0.43 s
//! early, fw_longform_vad.json); `--vad` ends a piece's last word with the piece
//! (`EDGE_WORD_REACH`), which is what meets the 0.3 s bar (without it: 5 misses on base, 2 late
//! first words on tiny.en; docs/runs/vadfix-longform-no-edge-rule.txt).

use stapes::engine::{Engine, EngineOptions, TranscribeOptions};
use stapes::runtime::DeviceRequest;
use stapes::vad::Vad;
use stapes_models::transcript::Transcript;
use stapes_models::wer::{normalized_words, word_edits};
use std::path::{Path, PathBuf};

mod clips_common;
use clips_common::{cache, clip, CLIPS, SR};

/// Seconds of silence before every clip and at the end (whisper_fw.py's LONG_GAP).
const GAP: f64 = 2.5;
/// Rounds of the 7 clips (whisper_fw.py's LONG_REPEAT).
const REPEAT: usize = 3;
/// A clip's first word starts, and its last word ends, within this of its speech (seconds).
const WORD_BAR: f64 = 0.3;
/// A clip's speech start (end) has a segment start (end) within this (seconds).
const SEG_BAR: f64 = 0.5;
/// Word edits allowed per clip occurrence against the clip's text heard alone.
const MAX_EDITS: usize = 1;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../stapes-models/tests/fixtures/whisper")
}

fn json(name: &str) -> serde_json::Value {
    let p = fixtures().join(name);
    let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_slice(&b).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// One clip placed in the long file: name, file span and speech span (seconds on the long file).
struct Placed {
    name: &'static str,
    file: (f64, f64),
    speech: (f64, f64),
}

/// The long file and where each clip (and its speech) lies in it.
fn build() -> (Vec<f32>, Vec<Placed>) {
    let bounds = json("speech_bounds.json");
    let gap = vec![0f32; (GAP * SR) as usize];
    let clips: Vec<Vec<f32>> = CLIPS.iter().map(|c| clip(c)).collect();
    let (mut out, mut placed) = (Vec::new(), Vec::new());
    for _ in 0..REPEAT {
        for (name, a) in CLIPS.iter().zip(&clips) {
            out.extend_from_slice(&gap);
            let start = out.len() as f64 / SR;
            out.extend_from_slice(a);
            let end = out.len() as f64 / SR;
            let b = &bounds["clips"][*name];
            let (Some(s), Some(e)) = (b[0].as_f64(), b[1].as_f64()) else {
                panic!("speech_bounds.json: no span for {name}")
            };
            placed.push(Placed {
                name,
                file: (start, end),
                speech: (start + s, start + e),
            });
        }
    }
    out.extend_from_slice(&gap);
    (out, placed)
}

/// Index of the clip whose file span, widened to the middle of the silences around it, holds `t`.
fn owner(placed: &[Placed], t: f64) -> usize {
    placed
        .iter()
        .position(|p| t < p.file.1 + GAP / 2.0)
        .unwrap_or(placed.len() - 1)
}

fn engine(model: &str) -> Engine {
    let dir = cache().join("models").join(model);
    assert!(
        dir.exists(),
        "{} missing: run scripts/fetch-models.sh all",
        dir.display()
    );
    Engine::load(
        &dir,
        &EngineOptions {
            device: DeviceRequest::Cpu,
            lane: None,
            threads: None,
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

/// Word edits between two texts, normalised. A hyphen joins or separates words depending on who
/// spells it (Whisper's own normaliser makes it a space, `normalized_words` drops it): heard with
/// other neighbours Whisper may write "fellow-Americans" for "fellow Americans", or
/// "ill-disposed" for "old-sposed"; each is one reword, so the fewer edits of the two spellings
/// count.
fn edits(got: &str, want: &str) -> usize {
    let joined = word_edits(&normalized_words(got), &normalized_words(want));
    let split = |s: &str| normalized_words(&s.replace('-', " "));
    joined.min(word_edits(&split(got), &split(want)))
}

/// Greedy, temperature 0, word timestamps: the options every run here uses.
fn greedy_with_words() -> TranscribeOptions {
    TranscribeOptions {
        beam_size: 1,
        temperature: Some(0.0),
        word_timestamps: true,
        ..Default::default()
    }
}

/// The long file through `--vad` with word timestamps, checked clip by clip.
fn longform_vad(model: &str) {
    let (audio, placed) = build();
    assert!(
        audio.len() as f64 / SR >= 180.0,
        "the file is under 3 minutes"
    );
    let reference = json("fw_decode.json");
    let vad = Vad::load("silero-vad").expect("silero-vad (run scripts/fetch-models.sh all)");
    let opts = greedy_with_words();
    let clock = std::time::Instant::now();
    // `STAPES_VAD_SPAN` (diagnostic): another span limit than the default's
    let vopts = stapes::vad::VadOptions {
        max_span: std::env::var("STAPES_VAD_SPAN")
            .ok()
            .and_then(|s| s.parse().ok()),
        ..Default::default()
    };
    let t: Transcript = engine(model)
        .transcribe_vad(&audio, &vad, &vopts, &opts, None, &mut |_| {})
        .unwrap_or_else(|e| panic!("{model} --vad: {e}"));
    eprintln!(
        "{model}: {:.0} s of audio in {:.1} s, {} segments",
        audio.len() as f64 / SR,
        clock.elapsed().as_secs_f64(),
        t.segments.len()
    );

    if std::env::var_os("STAPES_DEBUG_LONGFORM").is_some() {
        for s in &t.segments {
            eprintln!("{:8.2} {:8.2} {}", s.start, s.end, s.text);
        }
    }
    let mut failures = Vec::new();
    // Segments in time order, each within one clip (no segment runs across a silence).
    for w in t.segments.windows(2) {
        if w[1].start < w[0].end - 1e-9 {
            failures.push(format!(
                "segments overlap or are out of order: {:.2}–{:.2} then {:.2}–{:.2}",
                w[0].start, w[0].end, w[1].start, w[1].end
            ));
        }
    }
    let mut segs_of: Vec<Vec<(f64, f64)>> = vec![Vec::new(); placed.len()];
    for s in &t.segments {
        let (a, b) = (owner(&placed, s.start), owner(&placed, s.end));
        if a != b {
            failures.push(format!(
                "segment {:.2}–{:.2} {:?} runs across the silence between clips {a} and {b}",
                s.start, s.end, s.text
            ));
        }
        segs_of[a].push((s.start, s.end));
    }
    // Words per clip, by their middle.
    let mut words_of: Vec<Vec<(f64, f64, String)>> = vec![Vec::new(); placed.len()];
    for s in &t.segments {
        let Some(words) = &s.words else {
            failures.push(format!("segment {:.2} has no words", s.start));
            continue;
        };
        for w in words {
            words_of[owner(&placed, 0.5 * (w.start + w.end))].push((
                w.start,
                w.end,
                w.word.clone(),
            ));
        }
    }
    for (i, p) in placed.iter().enumerate() {
        let want_text = reference["models"][model]["clips"][p.name]["greedy"]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("fw_decode.json: {model} {}", p.name));
        let want = normalized_words(want_text);
        let text: String = words_of[i].iter().map(|w| w.2.as_str()).collect();
        let got = normalized_words(&text);
        let (s0, e0) = p.speech;
        let line = |what: &str| format!("{} at {:.2} s: {what}", p.name, p.file.0);
        // every word inside the clip's file span: nothing heard in the silences
        for (ws, we, w) in &words_of[i] {
            if *ws < p.file.0 - 0.05 || *we > p.file.1 + 0.05 {
                failures.push(line(&format!(
                    "word {w:?} {ws:.2}–{we:.2} lies in a silence"
                )));
            }
        }
        // Heard in a group with its neighbours rather than alone, Whisper may reword once
        // (tiny.en: "ill-disposed", right, where alone it says "old-sposed"); more than one
        // edit is dropped, repeated or misplaced speech.
        let edits = edits(&text, want_text);
        if edits > MAX_EDITS {
            failures.push(line(&format!(
                "text differs ({edits} word edits)\n    got  {got:?}\n    want {want:?}"
            )));
        } else if edits > 0 {
            eprintln!("  {} at {:.2} s rewords: {got:?}", p.name, p.file.0);
        }
        let (Some(first), Some(last)) = (words_of[i].first(), words_of[i].last()) else {
            failures.push(line("no words"));
            continue;
        };
        let nearest = |x: f64, f: &dyn Fn(&(f64, f64)) -> f64| {
            segs_of[i]
                .iter()
                .map(f)
                .min_by(|a, b| (a - x).abs().total_cmp(&(b - x).abs()))
                .unwrap_or(f64::INFINITY)
        };
        let (ss, se) = (nearest(s0, &|s| s.0), nearest(e0, &|s| s.1));
        eprintln!(
            "{model} {:>14} at {:6.2}: speech {s0:6.2}–{e0:6.2}  first word {:+.2}  last word {:+.2}  segment start {:+.2}  end {:+.2}",
            p.name,
            p.file.0,
            first.0 - s0,
            last.1 - e0,
            ss - s0,
            se - e0
        );
        for (what, got, truth, bar) in [
            ("first word start", first.0, s0, WORD_BAR),
            ("last word end", last.1, e0, WORD_BAR),
            ("segment start", ss, s0, SEG_BAR),
            ("segment end", se, e0, SEG_BAR),
        ] {
            if (got - truth).abs() > bar {
                failures.push(line(&format!(
                    "{what} {got:.2} is {:+.2} s from the speech's {truth:.2} (bar {bar} s)",
                    got - truth
                )));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{model} --vad long-form:\n{}",
        failures.join("\n")
    );
}

#[test]
fn longform_vad_tiny_en_every_clip_in_order_within_the_bars() {
    longform_vad("whisper-tiny.en");
}

#[test]
fn longform_vad_base_every_clip_in_order_within_the_bars() {
    longform_vad("whisper-base");
}

/// The retry of wordless pieces: with 30 s spans (no end room) base loses 0930 in a 29.6 s group
/// (docs/runs/vadfix-longform-base-span30.txt); heard again alone, every occurrence of 0930 comes
/// back with its text.
#[test]
fn longform_vad_base_30s_spans_hear_a_wordless_piece_again() {
    let (audio, placed) = build();
    let reference = json("fw_decode.json");
    let vad = Vad::load("silero-vad").expect("silero-vad (run scripts/fetch-models.sh all)");
    let opts = greedy_with_words();
    let vopts = stapes::vad::VadOptions {
        max_span: Some(30.0),
        ..Default::default()
    };
    let t = engine("whisper-base")
        .transcribe_vad(&audio, &vad, &vopts, &opts, None, &mut |_| {})
        .unwrap_or_else(|e| panic!("base --vad: {e}"));
    let want = reference["models"]["whisper-base"]["clips"]["librivox-0930"]["greedy"]["text"]
        .as_str()
        .expect("fw_decode.json: base 0930");
    for (i, p) in placed.iter().enumerate() {
        if p.name != "librivox-0930" {
            continue;
        }
        let text: String = t
            .segments
            .iter()
            .flat_map(|s| s.words.iter().flatten())
            .filter(|w| owner(&placed, 0.5 * (w.start + w.end)) == i)
            .map(|w| w.word.as_str())
            .collect();
        assert!(
            edits(&text, want) <= MAX_EDITS,
            "0930 at {:.2} s: got {text:?}, want {want:?}",
            p.file.0
        );
    }
}

/// Diagnostic (ignored; prints): the `--vad` groups of the long file for `STAPES_MODEL`
/// (default base), each group's text heard alone (`Engine::transcribe`) and in the batch
/// (`Engine::transcribe_batch_with`, as `--vad` runs every group after the first), and each
/// speech piece that the `--vad` run leaves without a word, heard alone.
#[test]
#[ignore]
fn longform_vad_groups_probe() {
    use stapes::batch::EngineInput;
    let model = std::env::var("STAPES_MODEL").unwrap_or("whisper-base".into());
    let (audio, _) = build();
    let vad = Vad::load("silero-vad").expect("silero-vad");
    let mut params = stapes::vad::VadParams::default();
    params.max_speech_duration_s = params
        .max_speech_duration_s
        .min(stapes::vad::WHISPER_MAX_SPAN - stapes::vad::WHISPER_END_ROOM);
    let speech = vad.speech(&audio, &params).expect("vad");
    let span = stapes::vad::VadOptions::default()
        .span_for("whisper")
        .expect("span");
    let groups = stapes::vad::groups(&speech, span);
    let e = engine(&model);
    let opts = TranscribeOptions {
        beam_size: 1,
        temperature: Some(0.0),
        word_timestamps: true,
        language: Some("en".into()),
        ..Default::default()
    };
    let samples: Vec<Vec<f32>> = groups.iter().map(|g| g.samples(&audio)).collect();
    let inputs: Vec<EngineInput<'_>> = samples
        .iter()
        .map(|a| EngineInput {
            samples: a,
            options: &opts,
        })
        .collect();
    let batched: Vec<std::sync::Mutex<String>> =
        groups.iter().map(|_| Default::default()).collect();
    e.transcribe_batch_with(&inputs, 8, &|i, r| {
        let s = match r {
            Ok(t) => t
                .segments
                .iter()
                .map(|s| format!("[{:.2}-{:.2}]{}", s.start, s.end, s.text))
                .collect(),
            Err(e) => format!("error {e}"),
        };
        *batched[i].lock().unwrap_or_else(|p| p.into_inner()) = s;
    });
    // Speech pieces the --vad run leaves without a word, heard again alone.
    let t = e
        .transcribe_with_vad(&audio, &vad, &opts, None)
        .expect("--vad");
    let words: Vec<f64> = t
        .segments
        .iter()
        .flat_map(|s| s.words.iter().flatten())
        .map(|w| 0.5 * (w.start + w.end))
        .collect();
    for p in &speech {
        if words.iter().any(|&m| m >= p.start && m <= p.end) {
            continue;
        }
        let a = &audio[(p.start * SR) as usize..((p.end * SR) as usize).min(audio.len())];
        let alone = e.transcribe(a, &opts, None).expect("piece");
        eprintln!(
            "piece {:.2}–{:.2} s has no word in the --vad run; alone: {:?}",
            p.start,
            p.end,
            alone.text()
        );
    }
    for (i, (g, a)) in groups.iter().zip(&samples).enumerate() {
        let t = e.transcribe(a, &opts, None).expect("group");
        let alone: String = t
            .segments
            .iter()
            .map(|s| format!("[{:.2}-{:.2}]{}", s.start, s.end, s.text))
            .collect();
        let b = batched[i].lock().unwrap_or_else(|p| p.into_inner()).clone();
        eprintln!(
            "group {i}: {:.2}–{:.2} s, {:.2} s heard, pieces {:?}\n  alone   {alone}\n  batched {}",
            g.pieces[0].start,
            g.pieces.last().map_or(0.0, |p| p.end),
            g.duration(),
            g.pieces
                .iter()
                .map(|p| format!("{:.2}-{:.2}", p.start, p.end))
                .collect::<Vec<_>>(),
            if b == alone { "(same)".to_string() } else { b }
        );
    }
}
