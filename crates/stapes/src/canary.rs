//! Canary requests through the engine: source / target language and punctuation, which the
//! family-agnostic [`TranscribeOptions`] does not carry.

use crate::engine::{Engine, Inner, Task, TranscribeOptions};
use crate::error::StapesError;
use stapes_models::fastconformer::CanaryRequest;
use stapes_models::transcript::{Segment, Transcript};

/// Canary-only request fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CanaryOptions {
    /// Language of the text; `None` = the source language (transcription), or English with
    /// `Task::Translate`.
    pub target_language: Option<String>,
    /// Punctuation and capitalization; `None` = on (NeMo's default).
    pub pnc: Option<bool>,
}

/// The Canary request `opts` + `canary` ask for. No language: `"auto"` (canary2 models
/// identify it, others take English), and the text in that language unless a target is given
/// (`Task::Translate` alone: English).
pub fn canary_request(opts: &TranscribeOptions, canary: &CanaryOptions) -> CanaryRequest {
    let source = opts.language.clone().unwrap_or_else(|| "auto".into());
    let target = match (&canary.target_language, opts.task) {
        (Some(t), _) => t.clone(),
        (None, Task::Translate) => "en".into(),
        (None, Task::Transcribe) => source.clone(),
    };
    CanaryRequest {
        source,
        target,
        pnc: canary.pnc.unwrap_or(true),
        ..CanaryRequest::default()
    }
}

impl Engine {
    /// Transcribes (or translates) with a Canary model: windows of at most 40 s, each segment
    /// handed to `on_segment` when decoded; greedy for `opts.beam_size` 1, else beam search of
    /// that width. Other families: a usage error.
    pub fn transcribe_canary(
        &self,
        samples: &[f32],
        opts: &TranscribeOptions,
        canary: &CanaryOptions,
        progress: Option<&dyn Fn(f64)>,
        on_segment: &mut dyn FnMut(&Segment),
    ) -> Result<Transcript, StapesError> {
        crate::engine::check_samples(samples)?;
        let req = canary_request(opts, canary);
        let beam = opts.beam_size.max(1);
        let _turn = self.gpu_turn();
        let t = match &self.inner {
            Inner::CanaryCpu(m) => {
                m.transcribe_request_observed(samples, &req, beam, on_segment)?
            }
            Inner::CanaryCuda(m) => {
                m.transcribe_request_observed(samples, &req, beam, on_segment)?
            }
            _ => {
                return Err(StapesError::Usage(format!(
                    "target language / punctuation switches are Canary options; this is a {} model",
                    self.family()
                )))
            }
        };
        if let Some(p) = progress {
            p(samples.len() as f64 / 16_000.0);
        }
        Ok(t)
    }
}
