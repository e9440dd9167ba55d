//! Voice activity detection (Silero VAD v6) and VAD-driven cutting of long audio into spans a
//! family can take in one piece.

use crate::engine::{Engine, TranscribeOptions};
use crate::error::StapesError;
use stapes_cpu::CpuBackend;
pub use stapes_models::silero::VadParams;
use stapes_models::silero::{SileroVad, SpeechSegment};
use stapes_models::transcript::Transcript;
use std::path::{Path, PathBuf};

/// The cached model `scripts/fetch-models.sh silero-vad` fetches.
pub const DEFAULT_VAD_MODEL: &str = "silero-vad";

/// Speech found in 16 kHz audio, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Speech {
    pub start: f64,
    pub end: f64,
}

/// Silero on the CPU: the graph is tiny and per-window, so the CPU is its home.
pub struct Vad {
    model: SileroVad<CpuBackend>,
}

impl Vad {
    /// A `.onnx` file, a directory holding `silero_vad.onnx`, or a cached model name.
    pub fn load(name_or_path: &str) -> Result<Vad, StapesError> {
        let p = crate::models::resolve(name_or_path)?;
        let file = if p.is_dir() { pick_onnx(&p)? } else { p };
        let be = CpuBackend::new(1)?;
        Ok(Vad {
            model: SileroVad::load(be, &file)?,
        })
    }

    /// Per-window speech probabilities (32 ms windows) of 16 kHz samples.
    pub fn probabilities(&self, samples: &[f32]) -> Result<Vec<f32>, StapesError> {
        Ok(self.model.probabilities(samples, 16_000)?)
    }

    /// Speech segments with the silero-vad package's parameters `params`.
    pub fn speech(&self, samples: &[f32], params: &VadParams) -> Result<Vec<Speech>, StapesError> {
        let segs = self.model.segments(samples, 16_000, params)?;
        Ok(segs
            .iter()
            .map(|s: &SpeechSegment| Speech {
                start: s.start_seconds(16_000),
                end: s.end_seconds(16_000),
            })
            .collect())
    }
}

fn pick_onnx(dir: &Path) -> Result<PathBuf, StapesError> {
    for name in ["silero_vad.onnx", "silero_vad_16k_op15.onnx"] {
        let f = dir.join(name);
        if f.is_file() {
            return Ok(f);
        }
    }
    Err(StapesError::BadInput(format!(
        "{}: no silero_vad.onnx in this directory",
        dir.display()
    )))
}

/// Speech pieces recognised together: their audio is concatenated (the silence between them is
/// dropped, so a recogniser never hears it) and times are mapped back piece by piece.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub pieces: Vec<Speech>,
}

impl Group {
    /// Seconds of audio the recogniser hears.
    pub fn duration(&self) -> f64 {
        self.pieces.iter().map(|p| p.end - p.start).sum()
    }

    /// The concatenated 16 kHz samples of the pieces.
    pub fn samples(&self, audio: &[f32]) -> Vec<f32> {
        let mut out = Vec::new();
        for p in &self.pieces {
            let a = ((p.start * 16_000.0) as usize).min(audio.len());
            let b = ((p.end * 16_000.0) as usize).clamp(a, audio.len());
            out.extend_from_slice(&audio[a..b]);
        }
        out
    }

    /// A time in the concatenated audio back on the input's timeline. `at_end` picks the earlier
    /// piece at a seam, so a segment ending exactly where a piece ends stays in that piece.
    pub fn to_input_time(&self, t: f64, at_end: bool) -> f64 {
        let mut offset = 0.0;
        for (i, p) in self.pieces.iter().enumerate() {
            let len = p.end - p.start;
            let last = i + 1 == self.pieces.len();
            if t < offset + len || (at_end && t <= offset + len) || last {
                return p.start + (t - offset).clamp(0.0, len);
            }
            offset += len;
        }
        0.0
    }
}

impl Group {
    /// A segment `[start, end)` of the concatenated audio back on the input's timeline. A
    /// recogniser's timestamps jitter by a few tenths of a second, so a segment that only grazes a
    /// piece at a seam is not stretched over the silence that was cut out there: it starts in the
    /// first piece and ends in the last piece it overlaps by at least `min(0.25 s, a third of it)`.
    pub fn to_input_span(&self, start: f64, end: f64) -> (f64, f64) {
        let need = (0.25f64).min((end - start) / 3.0).max(0.0);
        let mut offset = 0.0;
        let mut first = None;
        let mut last = None;
        for p in &self.pieces {
            let len = p.end - p.start;
            let overlap = (end.min(offset + len) - start.max(offset)).max(0.0);
            if overlap > 0.0 && overlap >= need {
                let a = p.start + (start - offset).clamp(0.0, len);
                let b = p.start + (end - offset).clamp(0.0, len);
                first.get_or_insert(a);
                last = Some(b);
            }
            offset += len;
        }
        match (first, last) {
            (Some(a), Some(b)) => (a, b.max(a)),
            _ => {
                let a = self.to_input_time(start, false);
                (a, self.to_input_time(end, true).max(a))
            }
        }
    }
}

/// Group speech into pieces of at most `max_span` seconds of audio in all (one recogniser call
/// each); a single longer segment is cut into `max_span` pieces. Gaps between pieces are never
/// transcribed, which is what keeps silence and noise from producing text.
pub fn groups(speech: &[Speech], max_span: f64) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for s in speech {
        let mut start = s.start;
        while start < s.end {
            let end = (start + max_span).min(s.end);
            let piece = Speech { start, end };
            match out.last_mut() {
                Some(g) if g.duration() + (end - start) <= max_span => g.pieces.push(piece),
                _ => out.push(Group {
                    pieces: vec![piece],
                }),
            }
            start = end;
        }
    }
    out
}

impl Engine {
    /// Transcribe only where `vad` hears speech: speech pieces grouped up to 30 s, the silence
    /// between them dropped, each group transcribed alone, times mapped back piece by piece.
    pub fn transcribe_with_vad(
        &self,
        samples: &[f32],
        vad: &Vad,
        opts: &TranscribeOptions,
        progress: Option<&dyn Fn(f64)>,
    ) -> Result<Transcript, StapesError> {
        const SR: f64 = 16_000.0;
        let params = stapes_models::silero::VadParams::default();
        let speech = vad.speech(samples, &params)?;
        let mut out = Transcript {
            duration: samples.len() as f64 / SR,
            ..Default::default()
        };
        let mut language: Option<String> = opts.language.clone();
        for group in groups(&speech, 30.0) {
            let audio = group.samples(samples);
            if audio.len() < 1600 {
                continue; // under 0.1 s: nothing a recogniser can use
            }
            // The language detected on the first group holds for the rest, as on the plain path.
            let o = TranscribeOptions {
                language: language.clone(),
                ..opts.clone()
            };
            let t = self.transcribe(&audio, &o, None)?;
            if language.is_none() && !t.language.is_empty() {
                language = Some(t.language.clone());
                out.language = t.language.clone();
                out.language_probability = t.language_probability;
            }
            for mut seg in t.segments {
                seg.id = out.segments.len();
                (seg.start, seg.end) = group.to_input_span(seg.start, seg.end);
                if let Some(words) = seg.words.as_mut() {
                    for w in words.iter_mut() {
                        w.start = group.to_input_time(w.start, false);
                        w.end = group.to_input_time(w.end, true).max(w.start);
                    }
                }
                out.segments.push(seg);
            }
            if let Some(p) = progress {
                if let Some(last) = group.pieces.last() {
                    p(last.end);
                }
            }
        }
        if out.language.is_empty() {
            out.language = language.unwrap_or_default();
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(a: f64, b: f64) -> Speech {
        Speech { start: a, end: b }
    }

    #[test]
    fn groups_fill_up_to_the_limit_and_cut_long_speech() {
        let g = groups(
            &[sp(0.5, 4.0), sp(6.0, 20.0), sp(29.0, 33.0), sp(40.0, 105.0)],
            30.0,
        );
        let pieces: Vec<Vec<Speech>> = g.iter().map(|g| g.pieces.clone()).collect();
        assert_eq!(
            pieces,
            vec![
                vec![sp(0.5, 4.0), sp(6.0, 20.0), sp(29.0, 33.0)],
                vec![sp(40.0, 70.0)],
                vec![sp(70.0, 100.0)],
                vec![sp(100.0, 105.0)],
            ]
        );
        assert!(g.iter().all(|g| g.duration() <= 30.0 + 1e-9));
        assert!(groups(&[], 30.0).is_empty());
    }

    #[test]
    fn group_times_map_back_piece_by_piece() {
        let g = Group {
            pieces: vec![sp(0.5, 4.0), sp(6.0, 20.0), sp(29.0, 33.0)],
        };
        assert_eq!(g.to_input_time(0.0, false), 0.5);
        assert_eq!(g.to_input_time(3.5, false), 6.0); // the seam starts the next piece
        assert_eq!(g.to_input_time(3.5, true), 4.0); // and ends the previous one
        assert!((g.to_input_time(10.0, false) - 12.5).abs() < 1e-9);
        assert!((g.to_input_time(18.5, false) - 30.0).abs() < 1e-9);
        assert_eq!(g.to_input_time(99.0, true), 33.0); // clamped to the last piece
        let audio: Vec<f32> = (0..16_000 * 40).map(|i| i as f32).collect();
        assert_eq!(g.samples(&audio).len(), (21.5 * 16_000.0) as usize);
        // a segment that grazes the first piece for 0.1 s starts in the second one
        let (a, b) = g.to_input_span(3.4, 8.0);
        assert!((a - 6.0).abs() < 1e-9 && (b - 10.5).abs() < 1e-9, "{a} {b}");
        // one that spans the seam for real keeps both ends
        let (a, b) = g.to_input_span(2.0, 8.0);
        assert!((a - 2.5).abs() < 1e-9 && (b - 10.5).abs() < 1e-9, "{a} {b}");
    }
}
