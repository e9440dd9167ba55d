//! End-to-end decoding parity with faster-whisper (float32, CTranslate2 4.8.5) on real speech:
//! greedy token ids and segment times, beam-5 text, q8 text, language probabilities. Expected
//! values come from tools/reference/whisper_fw.py. Needs the real weights and clips.

mod whisper_common;

use stapes_core::Lane;
use stapes_models::transcript::Transcript;
use stapes_models::wer::text_edits as word_edits;
use whisper_common::*;

fn run(
    m: &stapes_models::whisper::Whisper<stapes_cpu::CpuBackend>,
    clip: &str,
    beam: usize,
) -> Transcript {
    m.transcribe(&audio(clip), &ref_options(beam))
        .unwrap_or_else(|e| panic!("{clip}: {e}"))
}

fn greedy_ids(name: &str) {
    let r = reference();
    let m = model(name, Lane::F32);
    let mut failures = Vec::new();
    for clip in CLIPS {
        let got = run(&m, clip, 1);
        failures.extend(compare_segments(
            clip,
            &got,
            &r["models"][name]["clips"][clip]["greedy"]["segments"],
        ));
        eprintln!("{name} {clip}: {}", got.text());
    }
    assert!(
        failures.is_empty(),
        "{name} greedy:\n{}",
        failures.join("\n")
    );
}

fn texts(name: &str, lane: Lane, beam: usize, key: &str) {
    texts_within(name, lane, beam, key, 0)
}

/// Like [`texts`], allowing `slack` clips to differ, by at most one word each once case and
/// punctuation are ignored.
fn texts_within(name: &str, lane: Lane, beam: usize, key: &str, slack: usize) {
    let r = reference();
    let m = model(name, lane);
    let mut failures = Vec::new();
    for clip in CLIPS {
        let want = r["models"][name]["clips"][clip][key]["text"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let got = run(&m, clip, beam).text();
        eprintln!("{name} {lane} beam {beam} {clip}: {got}");
        if got != want {
            failures.push((
                word_edits(&got, &want),
                format!("{clip}:\n  got  {got:?}\n  want {want:?}"),
            ));
        }
    }
    let hard = failures.len() > slack || failures.iter().any(|(e, _)| *e > 1);
    let msg: Vec<String> = failures.into_iter().map(|(_, m)| m).collect();
    assert!(!hard, "{name} {lane} beam {beam}:\n{}", msg.join("\n"));
    if !msg.is_empty() {
        eprintln!("{name} {lane}: tolerated difference:\n{}", msg.join("\n"));
    }
}

#[test]
fn greedy_ids_match_faster_whisper_tiny_en() {
    greedy_ids("whisper-tiny.en");
}

#[test]
fn greedy_ids_match_faster_whisper_base() {
    greedy_ids("whisper-base");
}

#[test]
fn beam5_text_matches_faster_whisper_tiny_en() {
    texts("whisper-tiny.en", Lane::F32, 5, "beam5");
}

#[test]
fn beam5_text_matches_faster_whisper_base() {
    texts("whisper-base", Lane::F32, 5, "beam5");
}

/// q8 promise: the text of faster-whisper float32 greedy, allowing one clip per model to differ
/// by one word (case and punctuation ignored). 8-bit weights flip fragile spots: tiny.en says
/// "old-sposed" for "ill-disposed" on LibriVox 0890, base changes beckett's punctuation; faster-
/// whisper int8 deviates from its own float32 on the same two clips ("old-exposed"; "Fail again,
/// fail better.").
#[test]
fn q8_greedy_text_matches_tiny_en() {
    texts_within("whisper-tiny.en", Lane::Q8, 1, "greedy", 1);
}

#[test]
fn q8_greedy_text_matches_base() {
    texts_within("whisper-base", Lane::Q8, 1, "greedy", 1);
}

#[test]
fn language_probabilities_match_base_on_jfk() {
    let r = reference();
    let want = r["models"]["whisper-base"]["jfk_language_probs"]
        .as_array()
        .expect("probs")
        .clone();
    let m = model("whisper-base", Lane::F32);
    let t = m.transcribe(&audio("jfk"), &ref_options(1)).unwrap();
    assert_eq!(t.language, "en");
    assert_eq!(want[0][0].as_str(), Some("en"));
    let p_en = want[0][1].as_f64().unwrap() as f32;
    // stapes detects on the transcription window (one mel frame fewer than faster-whisper's
    // detection input for audio under 30 s), which moves the probability by ~2e-4
    assert!(
        (t.language_probability - p_en).abs() < 1e-3,
        "{} vs {p_en}",
        t.language_probability
    );
}
