//! `Engine::transcribe_batch`: several independent inputs at once, their encoder work batched
//! (Whisper: every live input's 30 s window in one encoder call per round; see
//! `stapes_models::whisper::batch`; Parakeet: clips of similar length padded into one encoder pass
//! and one batched greedy decode, see [`PADDED_BATCH_SAMPLES`]; GigaAM on the CPU: the same
//! padded batches, its encoder masking each clip's padding). Results are what [`Engine::transcribe`] returns for each input
//! alone; one input's failure is its own result and does not touch the others.

use crate::engine::{whisper_options, Engine, Inner, TranscribeOptions};
use crate::error::StapesError;
use stapes_models::fastconformer::Parakeet;
use stapes_models::gigaam::Gigaam;
use stapes_models::transcript::Transcript;
use stapes_models::whisper::batch::{BatchInput, BatchStats};
use stapes_models::whisper::WhisperOptions;
use std::sync::Mutex;

pub use stapes_models::whisper::batch::DEFAULT_MAX_BATCH;

/// One input of [`Engine::transcribe_batch_each`].
#[derive(Clone, Copy, Debug)]
pub struct EngineInput<'a> {
    /// 16 kHz mono samples.
    pub samples: &'a [f32],
    pub options: &'a TranscribeOptions,
}

/// Results in input order, and the encoder batch sizes (windows per encoder call — Parakeet:
/// clips per call; empty for families that run their inputs one by one).
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
        let slots: Vec<Mutex<Option<Result<Transcript, StapesError>>>> =
            inputs.iter().map(|_| Mutex::new(None)).collect();
        let stats = self.transcribe_batch_with(inputs, max_batch, &|i, r| {
            if let Some(slot) = slots.get(i) {
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            }
        });
        let results = slots
            .into_iter()
            .map(|m| {
                m.into_inner()
                    .unwrap_or_else(|p| p.into_inner())
                    .unwrap_or_else(|| Err(StapesError::Internal("an input was never run".into())))
            })
            .collect();
        BatchOutcome { results, stats }
    }

    /// [`Self::transcribe_batch_each`], handing each result to `deliver(index, result)` as soon
    /// as its input is done; called exactly once per input, possibly from worker threads.
    pub fn transcribe_batch_with(
        &self,
        inputs: &[EngineInput<'_>],
        max_batch: usize,
        deliver: &(dyn Fn(usize, Result<Transcript, StapesError>) + Sync),
    ) -> BatchStats {
        match &self.inner {
            Inner::WhisperCpu(m) => whisper_batch(m, inputs, max_batch, deliver),
            Inner::WhisperCuda(m) => {
                let _turn = self.gpu_turn();
                whisper_batch(m, inputs, max_batch, deliver)
            }
            Inner::ParakeetCpu(m) => parakeet_batch(m, inputs, max_batch, deliver),
            Inner::ParakeetCuda(m) => {
                let _turn = self.gpu_turn();
                parakeet_batch(m, inputs, max_batch, deliver)
            }
            // GigaAM's padded batch on the CPU only for now: on CUDA it would run eagerly, outside
            // the per-length encoder chains, and has not been checked on a GPU yet.
            Inner::GigaamCpu(m) => gigaam_batch(m, inputs, max_batch, deliver),
            // Other families (Canary, GigaAM on CUDA, …) one input at a time.
            _ => {
                for (i, input) in inputs.iter().enumerate() {
                    deliver(i, self.transcribe(input.samples, input.options, None));
                }
                BatchStats::default()
            }
        }
    }
}

fn whisper_batch<B: stapes_core::Backend>(
    m: &stapes_models::whisper::Whisper<B>,
    inputs: &[EngineInput<'_>],
    max_batch: usize,
    deliver: &(dyn Fn(usize, Result<Transcript, StapesError>) + Sync),
) -> BatchStats {
    let opts: Vec<WhisperOptions> = inputs.iter().map(|i| whisper_options(i.options)).collect();
    // Inputs `Engine::transcribe` refuses (empty, non-finite) are refused here too; the rest
    // run batched.
    let mut runnable: Vec<usize> = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        match crate::engine::check_samples(input.samples) {
            Err(e) => deliver(i, Err(e)),
            Ok(()) => runnable.push(i),
        }
    }
    let each: Vec<BatchInput<'_>> = runnable
        .iter()
        .map(|&i| BatchInput {
            samples: inputs[i].samples,
            options: &opts[i],
        })
        .collect();
    m.transcribe_batch_with(&each, max_batch, &|j, r| {
        if let Some(&i) = runnable.get(j) {
            deliver(i, r.map_err(StapesError::from));
        }
    })
}

/// Padded audio one Parakeet or GigaAM batch may hold (clips × longest clip, 16 kHz samples):
/// 16 clips of 30 s. The encoder's activations grow with it; a single longer clip still runs,
/// alone.
pub const PADDED_BATCH_SAMPLES: usize = 16 * 30 * 16_000;

/// Transcripts of several clips in one call, or the error that failed the call.
type BatchFn<'a> = &'a dyn Fn(&[&[f32]]) -> Result<Vec<Transcript>, StapesError>;

/// A one-pass family's batch entry points ([`padded_batches`]).
struct OnePass<'a> {
    /// The family's request check (`check_one_pass_options` and the family's own).
    check: &'a dyn Fn(&EngineInput<'_>) -> Result<(), StapesError>,
    one: &'a dyn Fn(&[f32]) -> Result<Transcript, StapesError>,
    batch: BatchFn<'a>,
    family: &'static str,
}

/// Inputs of a one-pass family (Parakeet, GigaAM) as padded batches: sorted by length so each
/// batch pads little (and short inputs are delivered first), cut at `max_batch` clips and
/// [`PADDED_BATCH_SAMPLES`]. A batch that fails is rerun one input at a time, so an error
/// stays with the input that caused it.
fn padded_batches(
    f: &OnePass<'_>,
    inputs: &[EngineInput<'_>],
    max_batch: usize,
    deliver: &(dyn Fn(usize, Result<Transcript, StapesError>) + Sync),
) -> BatchStats {
    let mut stats = BatchStats::default();
    let mut runnable: Vec<usize> = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        if input.samples.is_empty() {
            deliver(
                i,
                Err(StapesError::BadInput("the audio holds no samples".into())),
            );
        } else if let Err(e) = (f.check)(input) {
            deliver(i, Err(e));
        } else {
            runnable.push(i);
        }
    }
    // Stable: equal lengths keep input order.
    runnable.sort_by_key(|&i| inputs[i].samples.len());
    let mut rest = &runnable[..];
    while !rest.is_empty() {
        let mut n = 1;
        while n < rest.len()
            && n < max_batch
            && (n + 1) * inputs[rest[n]].samples.len() <= PADDED_BATCH_SAMPLES
        {
            n += 1;
        }
        let (group, tail) = rest.split_at(n);
        rest = tail;
        if let [i] = group {
            stats.encoder_batches.push(1);
            deliver(*i, (f.one)(inputs[*i].samples));
            continue;
        }
        let clips: Vec<&[f32]> = group.iter().map(|&i| inputs[i].samples).collect();
        match (f.batch)(&clips) {
            Ok(ts) if ts.len() == group.len() => {
                stats.encoder_batches.push(group.len());
                for (&i, t) in group.iter().zip(ts) {
                    deliver(i, Ok(t));
                }
            }
            _ => {
                tracing::warn!(
                    clips = group.len(),
                    family = f.family,
                    "a batch failed; its inputs run one at a time"
                );
                for &i in group {
                    stats.encoder_batches.push(1);
                    deliver(i, (f.one)(inputs[i].samples));
                }
            }
        }
    }
    stats
}

fn parakeet_batch<B: stapes_core::Backend>(
    m: &Parakeet<B>,
    inputs: &[EngineInput<'_>],
    max_batch: usize,
    deliver: &(dyn Fn(usize, Result<Transcript, StapesError>) + Sync),
) -> BatchStats {
    let f = OnePass {
        check: &|i| crate::engine::check_one_pass_options("Parakeet", i.options),
        one: &|s| m.transcribe(s).map_err(StapesError::from),
        batch: &|c| m.transcribe_batch(c).map_err(StapesError::from),
        family: "Parakeet",
    };
    padded_batches(&f, inputs, max_batch, deliver)
}

fn gigaam_batch<B: stapes_core::Backend>(
    m: &Gigaam<B>,
    inputs: &[EngineInput<'_>],
    max_batch: usize,
    deliver: &(dyn Fn(usize, Result<Transcript, StapesError>) + Sync),
) -> BatchStats {
    let f = OnePass {
        check: &|i| crate::engine::check_gigaam_input(i.options, i.samples),
        one: &|s| m.transcribe(s).map_err(StapesError::from),
        batch: &|c| m.transcribe_batch(c).map_err(StapesError::from),
        family: "GigaAM",
    };
    padded_batches(&f, inputs, max_batch, deliver)
}
