//! Batched transcription of independent inputs: one seek loop per input, the loops in lock-step
//! on their encoder calls, every round's windows encoded in one batched encoder call.
//!
//! Each input runs the very seek loop of [`Whisper::transcribe`] (decoding.rs) on its own thread,
//! with the encoder call handed in. That call parks the thread at a rendezvous; when every live
//! input has either asked for a window or finished, the last one to arrive encodes the whole
//! round as one `(B, n_frames, n_mels)` batch and hands each input its row. Decoding, the
//! timestamp rules, fallback and word timings stay the single-input code, so each input's result
//! is the one it gets alone, up to the encoder's batch-size invariance (bit-identical on the CPU
//! home; the tests compare token ids).
//!
//! At most `max_batch` inputs are in flight; when one finishes, its thread takes the next input,
//! so a long input does not hold the batch below `max_batch` while short ones remain.
//!
//! On a home that captures chains (a GPU), the threads take turns on the device: a thread holds
//! the turn from the moment its encoding comes back until it asks for its next window (or its
//! input ends), and a round's encode holds it too (the turn is the model's, so two batches
//! running at once take turns as well). No two threads launch work at once, and the decoder
//! keeps its captured step chains. The GPU ran their steps one after another anyway; without
//! turns it lost the step chains, which a capture racing another thread's launches on the one
//! stream would break. Elsewhere the threads decode side by side, each CPU thread doing its own
//! work.

use super::decoding::WhisperOptions;
use super::model::Whisper;
use crate::transcript::Transcript;
use crate::{ModelError, Result};
use stapes_core::{Backend, HostTensor};
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// Inputs in flight at once when the caller does not say (the encoder batch ceiling).
pub const DEFAULT_MAX_BATCH: usize = 16;

/// One input of [`Whisper::transcribe_batch_each`]: 16 kHz mono samples and their options.
/// Options may differ between inputs: only the encoder is shared, and it takes no options.
#[derive(Clone, Copy, Debug)]
pub struct BatchInput<'a> {
    pub samples: &'a [f32],
    pub options: &'a WhisperOptions,
}

/// What a batched run did, for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Windows per encoder call, in call order.
    pub encoder_batches: Vec<usize>,
}

impl BatchStats {
    /// Windows encoded in all.
    pub fn windows(&self) -> usize {
        self.encoder_batches.iter().sum()
    }
}

/// The rendezvous state: who is still running, whose windows wait, whose encodings are ready.
struct Round<T> {
    /// Threads that have not finished all their inputs.
    live: usize,
    /// (thread, mel window `(n_frames, n_mels)`) of this round.
    pending: Vec<(usize, HostTensor)>,
    /// Per thread: its encoding `(1, n_audio_ctx, d)` once the round ran.
    ready: Vec<Option<Result<T>>>,
    batches: Vec<usize>,
}

struct Rendezvous<'m, B: Backend> {
    model: &'m Whisper<B>,
    /// Threads take turns on the device (module doc): the round's encode takes one too.
    turns: bool,
    round: Mutex<Round<B::Tensor>>,
    wake: Condvar,
}

impl<'m, B: Backend> Rendezvous<'m, B> {
    fn new(model: &'m Whisper<B>, threads: usize, turns: bool) -> Self {
        Self {
            model,
            turns,
            round: Mutex::new(Round {
                live: threads,
                pending: Vec::with_capacity(threads),
                ready: (0..threads).map(|_| None).collect(),
                batches: Vec::new(),
            }),
            wake: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Round<B::Tensor>> {
        // A thread that panicked is reported by its own result; the numbers here stay usable.
        self.round.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Thread `who`'s encoder call: waits for the round, returns its row.
    fn encode(&self, who: usize, mel: HostTensor) -> Result<B::Tensor> {
        let mut g = self.lock();
        g.pending.push((who, mel));
        if g.pending.len() >= g.live {
            self.run(&mut g);
        }
        loop {
            if let Some(r) = g.ready.get_mut(who).and_then(Option::take) {
                return r;
            }
            g = self.wake.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Thread `who` has no inputs left: the round no longer waits for it.
    fn leave(&self) {
        let mut g = self.lock();
        g.live = g.live.saturating_sub(1);
        if !g.pending.is_empty() && g.pending.len() >= g.live {
            self.run(&mut g);
        }
    }

    /// Encode every pending window in one call (under the lock: every other live thread is
    /// parked here anyway) and wake the owners.
    fn run(&self, g: &mut Round<B::Tensor>) {
        let batch = std::mem::take(&mut g.pending);
        g.batches.push(batch.len());
        // every live thread of this batch is parked here, but another batch's may hold the turn
        let _turn = self.turns.then(|| self.model.take_device_turn());
        // A panic here would strand every parked thread: turn it into each window's error.
        let results =
            catch_unwind(AssertUnwindSafe(|| self.encode_all(&batch))).unwrap_or_else(|_| {
                batch
                    .iter()
                    .map(|_| Err(ModelError::BadInput("the batched encoder panicked".into())))
                    .collect()
            });
        for ((who, _), r) in batch.iter().zip(results) {
            if let Some(slot) = g.ready.get_mut(*who) {
                *slot = Some(r);
            }
        }
        self.wake.notify_all();
    }

    fn encode_all(&self, batch: &[(usize, HostTensor)]) -> Vec<Result<B::Tensor>> {
        let m = self.model;
        if batch.len() == 1 {
            return vec![m.encode_host(&batch[0].1)];
        }
        let stacked = || -> Result<Vec<B::Tensor>> {
            let shape = &batch[0].1.shape;
            let mut data = Vec::with_capacity(batch.len() * batch[0].1.data.len());
            for (_, mel) in batch {
                if &mel.shape != shape {
                    return Err(ModelError::BadInput(format!(
                        "mel windows of one batch differ: {:?} vs {shape:?}",
                        mel.shape
                    )));
                }
                data.extend_from_slice(&mel.data);
            }
            let mut dims = vec![batch.len()];
            dims.extend_from_slice(shape);
            let x = m.backend.upload(&HostTensor::new(dims, data)?)?; // (B, n_frames, n_mels)
            let enc = m.encode(&x)?; // (B, n_audio_ctx, d)
            (0..batch.len())
                .map(|j| Ok(m.backend.slice(&enc, 0, j, 1)?)) // (1, n_audio_ctx, d)
                .collect()
        };
        match stacked() {
            Ok(rows) => rows.into_iter().map(Ok).collect(),
            Err(e) => {
                // One window per call then, so each input gets its own error (or its encoding).
                tracing::warn!(error = %e, windows = batch.len(), "batched encode failed; encoding the windows one by one");
                batch.iter().map(|(_, mel)| m.encode_host(mel)).collect()
            }
        }
    }
}

/// Makes a thread leave the rendezvous however it ends (a panic included), so the others never
/// wait for it.
struct Leave<'r, 'm, B: Backend>(&'r Rendezvous<'m, B>);

impl<B: Backend> Drop for Leave<'_, '_, B> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl<B: Backend> Whisper<B> {
    fn take_device_turn(&self) -> MutexGuard<'_, ()> {
        // the guarded value is `()`: a panicking holder leaves nothing half-done behind
        self.device_turn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Transcribe several independent inputs (16 kHz mono) with the same options, their encoder
    /// windows batched; result `i` is what [`Self::transcribe`] returns for `inputs[i]`.
    pub fn transcribe_batch(
        &self,
        inputs: &[&[f32]],
        opts: &WhisperOptions,
    ) -> Vec<Result<Transcript>> {
        let each: Vec<BatchInput<'_>> = inputs
            .iter()
            .map(|samples| BatchInput {
                samples,
                options: opts,
            })
            .collect();
        self.transcribe_batch_each(&each, DEFAULT_MAX_BATCH).0
    }

    /// [`Self::transcribe_batch`] with options per input and at most `max_batch` inputs in
    /// flight (`max_batch` ≤ 1: one after another, each encoder call one window). Also returns
    /// the encoder batch sizes.
    pub fn transcribe_batch_each(
        &self,
        inputs: &[BatchInput<'_>],
        max_batch: usize,
    ) -> (Vec<Result<Transcript>>, BatchStats) {
        let slots: Vec<Mutex<Option<Result<Transcript>>>> =
            inputs.iter().map(|_| Mutex::new(None)).collect();
        let stats = self.transcribe_batch_with(inputs, max_batch, &|i, r| {
            if let Some(slot) = slots.get(i) {
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            }
        });
        let results = slots
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                m.into_inner()
                    .unwrap_or_else(|p| p.into_inner())
                    .unwrap_or_else(|| {
                        Err(ModelError::BadInput(format!("input {i} was never run")))
                    })
            })
            .collect();
        (results, stats)
    }

    /// [`Self::transcribe_batch_each`], handing each input's result to `deliver(index, result)`
    /// as soon as that input is done (a server answers short requests before long ones of the
    /// same batch finish). `deliver` is called exactly once per input, from worker threads.
    pub fn transcribe_batch_with(
        &self,
        inputs: &[BatchInput<'_>],
        max_batch: usize,
        deliver: &(dyn Fn(usize, Result<Transcript>) + Sync),
    ) -> BatchStats {
        let threads = max_batch.max(1).min(inputs.len());
        if threads == 0 {
            return BatchStats::default();
        }
        let turns = threads > 1 && self.backend.captures_chains();
        if threads > 1 && !turns {
            self.decoder.expect_concurrent();
        }
        let rv = Rendezvous::new(self, threads, turns);
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for who in 0..threads {
                let (rv, next) = (&rv, &next);
                scope.spawn(move || {
                    let _leave = Leave(rv);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(input) = inputs.get(i) else { break };
                        // this thread's turn on the device, when turns are taken (module doc)
                        let turn: RefCell<Option<MutexGuard<'_, ()>>> = RefCell::new(None);
                        let encode = |mel: HostTensor| {
                            // given up before parking: the round's encode takes the turn
                            // while every live thread of this batch waits at the rendezvous
                            turn.borrow_mut().take();
                            let r = rv.encode(who, mel);
                            if turns {
                                *turn.borrow_mut() = Some(self.take_device_turn());
                            }
                            r
                        };
                        let r = catch_unwind(AssertUnwindSafe(|| {
                            self.transcribe_windows(
                                input.samples,
                                input.options,
                                None,
                                &mut |_| {},
                                &encode,
                            )
                        }))
                        .unwrap_or_else(|_| {
                            Err(ModelError::BadInput(format!(
                                "input {i}: the transcription panicked"
                            )))
                        });
                        // before `leave` or the next input's rendezvous, which may encode
                        turn.borrow_mut().take();
                        deliver(i, r);
                    }
                });
            }
        });
        let batches = std::mem::take(&mut rv.lock().batches);
        BatchStats {
            encoder_batches: batches,
        }
    }
}
