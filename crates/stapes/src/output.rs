//! Output writers: txt, srt, vtt, json (stapes' own, one object per file) and verbose_json
//! (OpenAI's shape). Library code so the CLI and the server format identically.

use serde_json::{json, Value};
use stapes_models::transcript::{Segment, Transcript};
use std::fmt::Write as _;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Txt,
    Srt,
    Vtt,
    Json,
    VerboseJson,
}

impl OutputFormat {
    pub fn extension(self) -> &'static str {
        match self {
            OutputFormat::Txt => "txt",
            OutputFormat::Srt => "srt",
            OutputFormat::Vtt => "vtt",
            OutputFormat::Json | OutputFormat::VerboseJson => "json",
        }
    }
}

impl FromStr for OutputFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "txt" | "text" => Ok(OutputFormat::Txt),
            "srt" => Ok(OutputFormat::Srt),
            "vtt" => Ok(OutputFormat::Vtt),
            "json" => Ok(OutputFormat::Json),
            "verbose_json" => Ok(OutputFormat::VerboseJson),
            other => Err(format!(
                "unknown output format `{other}` (expected txt, srt, vtt, json or verbose_json)"
            )),
        }
    }
}

/// Facts about the run that the json formats report beside the transcript.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    pub file: String,
    pub family: String,
    pub device: String,
    pub lane: String,
    pub task: String,
}

pub fn render(fmt: OutputFormat, t: &Transcript, info: &RunInfo) -> String {
    match fmt {
        OutputFormat::Txt => txt(t),
        OutputFormat::Srt => srt(t),
        OutputFormat::Vtt => vtt(t),
        OutputFormat::Json => json_compact(t, info).to_string() + "\n",
        OutputFormat::VerboseJson => {
            serde_json::to_string_pretty(&verbose_json(t, info)).unwrap_or_default() + "\n"
        }
    }
}

/// One line per segment, as whisper.cpp's `-otxt` does.
pub fn txt(t: &Transcript) -> String {
    let mut out = String::new();
    for s in &t.segments {
        let line = s.text.trim();
        if !line.is_empty() {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `HH:MM:SS{sep}mmm`, rounded to the millisecond, never negative.
pub fn timestamp(seconds: f64, sep: char) -> String {
    let ms = (seconds.max(0.0) * 1000.0).round() as u64;
    let (h, rem) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rem) = (rem / 60_000, rem % 60_000);
    let (s, ms) = (rem / 1000, rem % 1000);
    format!("{h:02}:{m:02}:{s:02}{sep}{ms:03}")
}

/// Segments with text, their times made monotonic (a cue never starts before the previous ended
/// started, and never ends before it starts) so strict subtitle parsers accept them.
fn cues(t: &Transcript) -> Vec<(f64, f64, &str)> {
    let mut out = Vec::new();
    let mut last_start = 0.0f64;
    for s in &t.segments {
        let text = s.text.trim();
        if text.is_empty() {
            continue;
        }
        let start = s.start.max(last_start);
        let end = s.end.max(start);
        last_start = start;
        out.push((start, end, text));
    }
    out
}

pub fn srt(t: &Transcript) -> String {
    let mut out = String::new();
    for (i, (start, end, text)) in cues(t).into_iter().enumerate() {
        let _ = write!(
            out,
            "{}\n{} --> {}\n{}\n\n",
            i + 1,
            timestamp(start, ','),
            timestamp(end, ','),
            text.replace("-->", "->")
        );
    }
    out
}

pub fn vtt(t: &Transcript) -> String {
    let mut out = String::from("WEBVTT\n\n");
    for (start, end, text) in cues(t) {
        let _ = write!(
            out,
            "{} --> {}\n{}\n\n",
            timestamp(start, '.'),
            timestamp(end, '.'),
            text.replace("-->", "->")
        );
    }
    out
}

fn seconds(x: f64) -> Value {
    json!((x * 1000.0).round() / 1000.0)
}

/// stapes' own JSON (design.md §6): one object per file.
pub fn json_compact(t: &Transcript, info: &RunInfo) -> Value {
    json!({
        "file": info.file,
        "text": t.text(),
        "language": t.language,
        "family": info.family,
        "device": info.device,
        "lane": info.lane,
        "segments": t.segments.iter().map(|s| json!({
            "start": seconds(s.start),
            "end": seconds(s.end),
            "text": s.text,
            "tokens": s.tokens,
        })).collect::<Vec<_>>(),
    })
}

fn verbose_segment(s: &Segment) -> Value {
    let mut v = json!({
        "id": s.id,
        "seek": (s.start * 100.0).round() as u64,
        "start": seconds(s.start),
        "end": seconds(s.end),
        "text": s.text,
        "tokens": s.tokens,
        "temperature": s.temperature,
        "avg_logprob": s.avg_logprob,
        "compression_ratio": s.compression_ratio,
        "no_speech_prob": s.no_speech_prob,
    });
    if let Some(words) = &s.words {
        v["words"] = json!(words
            .iter()
            .map(|w| json!({"word": w.word, "start": seconds(w.start), "end": seconds(w.end), "probability": w.probability}))
            .collect::<Vec<_>>());
    }
    v
}

/// OpenAI's `verbose_json` response shape (segments; words when they were computed).
pub fn verbose_json(t: &Transcript, info: &RunInfo) -> Value {
    let mut v = json!({
        "task": if info.task.is_empty() { "transcribe" } else { info.task.as_str() },
        "language": t.language,
        "duration": seconds(t.duration),
        "text": t.text(),
        "segments": t.segments.iter().map(verbose_segment).collect::<Vec<_>>(),
    });
    let words: Vec<Value> = t
        .segments
        .iter()
        .filter_map(|s| s.words.as_ref())
        .flatten()
        .map(|w| json!({"word": w.word.trim(), "start": seconds(w.start), "end": seconds(w.end)}))
        .collect();
    if t.segments.iter().any(|s| s.words.is_some()) {
        v["words"] = json!(words);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use stapes_models::transcript::Word;

    fn seg(id: usize, start: f64, end: f64, text: &str) -> Segment {
        Segment {
            id,
            start,
            end,
            text: text.into(),
            tokens: vec![50364, 400, 50414],
            avg_logprob: -0.2,
            no_speech_prob: 0.01,
            compression_ratio: 1.1,
            temperature: 0.0,
            words: None,
        }
    }

    fn sample() -> Transcript {
        Transcript {
            language: "en".into(),
            language_probability: 1.0,
            duration: 3725.5,
            segments: vec![
                seg(0, 0.0, 1.5, " Hello there."),
                seg(1, 1.5, 3661.0016, " A --> B"),
                seg(2, 3661.1, 3661.2, "   "),
            ],
        }
    }

    #[test]
    fn timestamps_format_hours_and_round_ms() {
        assert_eq!(timestamp(3661.0016, ','), "01:01:01,002");
        assert_eq!(timestamp(-1.0, '.'), "00:00:00.000");
        assert_eq!(timestamp(59.9996, '.'), "00:01:00.000");
    }

    #[test]
    fn srt_numbers_cues_and_skips_empty_text() {
        let s = srt(&sample());
        assert_eq!(
            s,
            "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n00:00:01,500 --> 01:01:01,002\nA -> B\n\n"
        );
    }

    #[test]
    fn vtt_has_header_and_dot_millis() {
        let v = vtt(&sample());
        assert!(v.starts_with("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n"));
        assert!(!v.contains("A --> B"));
    }

    #[test]
    fn cues_are_monotonic_even_when_segments_are_not() {
        let mut t = sample();
        t.segments[1].start = 1.0; // earlier than the previous start is fine; before it is not
        t.segments[1].end = 0.5;
        let c = cues(&t);
        assert!(c.windows(2).all(|w| w[1].0 >= w[0].0));
        assert!(c.iter().all(|(s, e, _)| e >= s));
    }

    #[test]
    fn json_shapes() {
        let info = RunInfo {
            file: "a.wav".into(),
            family: "whisper".into(),
            device: "cpu".into(),
            lane: "f32".into(),
            task: String::new(),
        };
        let mut t = sample();
        t.segments[0].words = Some(vec![Word {
            start: 0.1,
            end: 0.4,
            word: " Hello".into(),
            probability: 0.9,
        }]);
        let j = json_compact(&t, &info);
        assert_eq!(j["text"], "Hello there. A --> B");
        assert_eq!(j["segments"][0]["tokens"][1], 400);
        assert_eq!(j["segments"][1]["end"], 3661.002);
        let v = verbose_json(&t, &info);
        assert_eq!(v["task"], "transcribe");
        assert_eq!(v["words"][0]["word"], "Hello");
        assert_eq!(v["segments"][0]["words"][0]["probability"], 0.9f32 as f64);
        assert!(v["segments"][1].get("words").is_none());
    }
}
