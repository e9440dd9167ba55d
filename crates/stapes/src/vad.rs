//! Voice activity detection (Silero VAD v6) and VAD-driven cutting of long audio into spans a
//! family can take in one piece.

use crate::error::StapesError;
use stapes_cpu::CpuBackend;
pub use stapes_models::silero::VadParams;
use stapes_models::silero::{SileroVad, SpeechSegment};
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

/// Group speech into spans no longer than `max_span` seconds (each span is one piece of work
/// for the recogniser); a single longer segment is cut at `max_span`. Gaps between spans are
/// never transcribed, which is what keeps silence and noise from producing text.
pub fn spans(speech: &[Speech], max_span: f64) -> Vec<Speech> {
    let mut out: Vec<Speech> = Vec::new();
    for s in speech {
        let mut start = s.start;
        while s.end - start > max_span {
            out.push(Speech {
                start,
                end: start + max_span,
            });
            start += max_span;
        }
        match out.last_mut() {
            Some(last) if s.end - last.start <= max_span && start >= last.end => last.end = s.end,
            _ => out.push(Speech { start, end: s.end }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(a: f64, b: f64) -> Speech {
        Speech { start: a, end: b }
    }

    #[test]
    fn spans_merge_until_the_limit_and_cut_long_speech() {
        let s = spans(
            &[sp(0.5, 4.0), sp(6.0, 20.0), sp(29.0, 33.0), sp(40.0, 105.0)],
            30.0,
        );
        assert_eq!(
            s,
            vec![
                sp(0.5, 20.0),
                sp(29.0, 33.0),
                sp(40.0, 70.0),
                sp(70.0, 100.0),
                sp(100.0, 105.0)
            ]
        );
        assert!(s.iter().all(|x| x.end - x.start <= 30.0 + 1e-9));
        assert!(spans(&[], 30.0).is_empty());
    }
}
