//! Streaming VAD: feed samples in any chunk sizes, get one probability per completed window and
//! speech start/end events with the silero-vad package's `VADIterator` rules (threshold,
//! `threshold − 0.15` to end, `min_silence_duration_ms`, `speech_pad_ms`).
//!
//! The model state (LSTM h, c and the context samples) is carried across `feed` calls exactly as
//! the package's `OnnxWrapper` carries it between calls, so a stream's probabilities equal the
//! offline ones window for window.

use super::config::VadRate;
use super::model::{reflect_tail, Branch};
use super::timestamps::VadParams;
use super::{zero_state, SileroVad};
use crate::error::{ModelError, Result};
use stapes_core::Backend;

/// A change of state, positions in samples at the stream's rate since the last reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VadEvent {
    /// Speech began at `sample` (already moved back by the pad).
    SpeechStart { sample: usize },
    /// Speech that began at `start` ended at `end`: a finished segment.
    SpeechEnd { start: usize, end: usize },
}

/// One window's result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VadFrame {
    /// Window index since the last reset.
    pub window: usize,
    pub probability: f32,
    pub event: Option<VadEvent>,
}

/// A streaming session over a loaded [`SileroVad`] (see the module docs).
pub struct VadStream<'a, B: Backend> {
    vad: &'a SileroVad<B>,
    branch: &'a Branch<B>,
    rate: VadRate,
    threshold: f64,
    neg_threshold: f64,
    min_silence_samples: f64,
    speech_pad_samples: f64,
    h: B::Tensor,
    c: B::Tensor,
    /// The last `ctx` samples of the previous model input.
    context: Vec<f32>,
    /// Samples not yet part of a window.
    pending: Vec<f32>,
    frames: Vec<f32>,
    window: usize,
    // VADIterator's bookkeeping
    triggered: bool,
    temp_end: i64,
    current_sample: i64,
    open_start: usize,
}

impl<'a, B: Backend> VadStream<'a, B> {
    pub fn new(vad: &'a SileroVad<B>, rate: VadRate, params: &VadParams) -> Result<Self> {
        let branch = vad.branch(rate)?;
        let (h, c) = zero_state(vad.backend())?;
        let sr = rate.hz() as f64;
        Ok(VadStream {
            vad,
            branch,
            rate,
            threshold: params.threshold,
            // VADIterator ends speech below `threshold - 0.15` (it has no 0.01 floor).
            neg_threshold: params.neg_threshold.unwrap_or(params.threshold - 0.15),
            min_silence_samples: sr * params.min_silence_duration_ms / 1000.0,
            speech_pad_samples: sr * params.speech_pad_ms / 1000.0,
            h,
            c,
            context: vec![0.0; rate.context()],
            pending: Vec::new(),
            frames: Vec::new(),
            window: 0,
            triggered: false,
            temp_end: 0,
            current_sample: 0,
            open_start: 0,
        })
    }

    pub fn rate(&self) -> VadRate {
        self.rate
    }

    /// Whether speech is open (a start was reported and no end yet).
    pub fn in_speech(&self) -> bool {
        self.triggered
    }

    /// Forget everything: state, context, buffered samples, events.
    pub fn reset(&mut self) -> Result<()> {
        let (h, c) = zero_state(self.vad.backend())?;
        self.h = h;
        self.c = c;
        self.context.iter_mut().for_each(|v| *v = 0.0);
        self.pending.clear();
        self.window = 0;
        self.triggered = false;
        self.temp_end = 0;
        self.current_sample = 0;
        self.open_start = 0;
        Ok(())
    }

    /// Add samples (at the stream's rate); returns the windows they completed.
    pub fn feed(&mut self, samples: &[f32]) -> Result<Vec<VadFrame>> {
        if let Some(i) = samples.iter().position(|v| !v.is_finite()) {
            return Err(ModelError::BadInput(format!(
                "sample {i} of this chunk is not finite"
            )));
        }
        self.pending.extend_from_slice(samples);
        let n = self.pending.len() / self.rate.window();
        if n == 0 {
            return Ok(Vec::new());
        }
        let probs = self.run_windows(n)?;
        self.pending.drain(..n * self.rate.window());
        Ok(probs.into_iter().map(|p| self.advance(p)).collect())
    }

    /// End of input: a partial window is zero padded and scored; speech still open is closed at
    /// the end of the samples fed (`VADIterator` would leave it open).
    pub fn finish(&mut self) -> Result<Vec<VadFrame>> {
        let mut out = Vec::new();
        let fed = self.window * self.rate.window() + self.pending.len();
        if !self.pending.is_empty() {
            self.pending.resize(self.rate.window(), 0.0);
            let p = self.run_windows(1)?;
            self.pending.clear();
            out.extend(p.into_iter().map(|p| self.advance(p)));
        }
        if self.triggered {
            self.triggered = false;
            self.temp_end = 0;
            let end = VadEvent::SpeechEnd {
                start: self.open_start,
                end: fed,
            };
            match out.last_mut() {
                Some(f) if f.event.is_none() => f.event = Some(end),
                _ => out.push(VadFrame {
                    window: self.window.saturating_sub(1),
                    probability: f32::NAN,
                    event: Some(end),
                }),
            }
        }
        Ok(out)
    }

    /// Score the first `n` whole windows of `pending` as one block, carrying h, c and context.
    fn run_windows(&mut self, n: usize) -> Result<Vec<f32>> {
        let (win, ctx) = (self.rate.window(), self.rate.context());
        let width = ctx + win + ctx;
        self.frames.clear();
        self.frames.resize(n * width, 0.0);
        for j in 0..n {
            let row = &mut self.frames[j * width..(j + 1) * width];
            if j == 0 {
                row[..ctx].copy_from_slice(&self.context);
            } else {
                row[..ctx].copy_from_slice(&self.pending[j * win - ctx..j * win]);
            }
            row[ctx..ctx + win].copy_from_slice(&self.pending[j * win..(j + 1) * win]);
            reflect_tail(row, ctx + win, ctx);
        }
        let last = (n - 1) * width;
        self.context
            .copy_from_slice(&self.frames[last + win..last + win + ctx]);
        let be = self.vad.backend();
        self.branch
            .run_block(be, &self.frames, n, &mut self.h, &mut self.c)
    }

    /// VADIterator.__call__ for one window's probability.
    fn advance(&mut self, p: f32) -> VadFrame {
        let window = self.rate.window() as i64;
        let p64 = p as f64;
        self.current_sample += window;
        let idx = self.window;
        self.window += 1;
        let mut event = None;
        if p64 >= self.threshold && self.temp_end != 0 {
            self.temp_end = 0;
        }
        if p64 >= self.threshold && !self.triggered {
            self.triggered = true;
            let start =
                (self.current_sample as f64 - self.speech_pad_samples - window as f64).max(0.0);
            self.open_start = start.trunc() as usize;
            event = Some(VadEvent::SpeechStart {
                sample: self.open_start,
            });
        } else if p64 < self.neg_threshold && self.triggered {
            if self.temp_end == 0 {
                self.temp_end = self.current_sample;
            }
            if (self.current_sample - self.temp_end) as f64 >= self.min_silence_samples {
                let end = (self.temp_end as f64 + self.speech_pad_samples - window as f64).max(0.0);
                self.temp_end = 0;
                self.triggered = false;
                event = Some(VadEvent::SpeechEnd {
                    start: self.open_start,
                    end: end.trunc() as usize,
                });
            }
        }
        VadFrame {
            window: idx,
            probability: p,
            event,
        }
    }
}
