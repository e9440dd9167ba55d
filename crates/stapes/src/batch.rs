//! `Engine::transcribe_batch`: several independent inputs at once, their encoder work batched
//! (Whisper: every live input's 30 s window in one encoder call per round; see
//! `stapes_models::whisper::batch`). Results are what [`Engine::transcribe`] returns for each input
//! alone; one input's failure is its own result and does not touch the others.

use crate::engine::{whisper_options, Engine, Inner, TranscribeOptions};
use crate::error::StapesError;
use stapes_models::transcript::Transcript;
use stapes_models::whisper::batch::{BatchInput, BatchStats};
use stapes_models::whisper::WhisperOptions;

pub use stapes_models::whisper::batch::DEFAULT_MAX_BATCH;

/// One input of [`Engine::transcribe_batch_each`].
#[derive(Clone, Copy, Debug)]
pub struct EngineInput<'a> {
    /// 16 kHz mono samples.
    pub samples: &'a [f32],
    pub options: &'a TranscribeOptions,
}

/// Results in input order, and the encoder batch sizes (windows per encoder call; empty for
/// families that run their inputs one by one).
#[derive(Debug)]
pub struct BatchOutcome {
    pub results: Vec<Result<Transcript, StapesError>>,
    pub stats: BatchStats,
}

impl Engine {
    /// Transcribe independent inputs with the same options, batched; result `i` is
    /// `self.transcribe(inputs[i], opts, None)`.
    pub fn transcribe_batch(
        &self,
        inputs: &[&[f32]],
        opts: &TranscribeOptions,
    ) -> Vec<Result<Transcript, StapesError>> {
        let each: Vec<EngineInput<'_>> = inputs
            .iter()
            .map(|samples| EngineInput {
                samples,
                options: opts,
            })
            .collect();
        self.transcribe_batch_each(&each, DEFAULT_MAX_BATCH).results
    }

    /// Inputs with their own options (any mix: only the encoder is shared), at most `max_batch`
    /// in flight; `max_batch` ≤ 1 runs them one after another.
    pub fn transcribe_batch_each(
        &self,
        inputs: &[EngineInput<'_>],
        max_batch: usize,
    ) -> BatchOutcome {
        match &self.inner {
            Inner::WhisperCpu(m) => whisper_batch(m, inputs, max_batch),
            Inner::WhisperCuda(m) => whisper_batch(m, inputs, max_batch),
            // The Parakeet encoder takes batches too, but its decode is per input; one by one
            // until a batched Parakeet entry point exists.
            Inner::ParakeetCpu(_) | Inner::ParakeetCuda(_) => BatchOutcome {
                results: inputs
                    .iter()
                    .map(|i| self.transcribe(i.samples, i.options, None))
                    .collect(),
                stats: BatchStats::default(),
            },
        }
    }
}

fn whisper_batch<B: stapes_core::Backend>(
    m: &stapes_models::whisper::Whisper<B>,
    inputs: &[EngineInput<'_>],
    max_batch: usize,
) -> BatchOutcome {
    let opts: Vec<WhisperOptions> = inputs.iter().map(|i| whisper_options(i.options)).collect();
    // Empty inputs are refused as `Engine::transcribe` refuses them; the rest run batched.
    let runnable: Vec<usize> = (0..inputs.len())
        .filter(|&i| !inputs[i].samples.is_empty())
        .collect();
    let each: Vec<BatchInput<'_>> = runnable
        .iter()
        .map(|&i| BatchInput {
            samples: inputs[i].samples,
            options: &opts[i],
        })
        .collect();
    let (done, stats) = m.transcribe_batch_each(&each, max_batch);
    let mut results: Vec<Result<Transcript, StapesError>> = inputs
        .iter()
        .map(|_| Err(StapesError::BadInput("the audio holds no samples".into())))
        .collect();
    for (&i, r) in runnable.iter().zip(done) {
        results[i] = r.map_err(StapesError::from);
    }
    BatchOutcome { results, stats }
}
