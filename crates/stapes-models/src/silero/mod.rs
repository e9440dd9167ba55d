//! Silero VAD v6 (silero-vad 6.2.3's ONNX exports), 16 and 8 kHz, over any backend.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use stapes_models::silero::{SileroVad, VadParams};
//! # let samples = vec![0f32; 16000];
//! let vad = SileroVad::load(stapes_core::reference::ReferenceBackend::default(), "silero_vad.onnx")?;
//! let probs = vad.probabilities(&samples, 16000)?; // one per 32 ms window
//! let segments = vad.segments(&samples, 16000, &VadParams::default())?; // in input samples
//! # Ok(()) }
//! ```

pub mod config;
pub mod frontend;
pub mod model;
pub mod stream;
pub mod timestamps;
pub mod weights;

pub use config::VadRate;
pub use stream::{VadEvent, VadFrame, VadStream};
pub use timestamps::{speech_timestamps, SpeechSegment, VadParams};

use crate::error::{ModelError, Result};
use model::{frames_for, Branch};
use stapes_core::{Backend, HostTensor, Lane};
use std::path::{Path, PathBuf};

/// Windows encoded per batch in offline runs: large enough that the encoder's GEMMs are
/// efficient, small enough that the frames of an hour of audio are never all in memory.
const BLOCK_WINDOWS: usize = 256;

/// A loaded Silero VAD: the rate branches its file has, on backend `B`.
pub struct SileroVad<B: Backend> {
    backend: B,
    path: PathBuf,
    lane: Lane,
    branches: Vec<Branch<B>>,
}

impl<B: Backend> SileroVad<B> {
    /// Load `silero_vad.onnx` (16 + 8 kHz) or `silero_vad_16k_op15.onnx` (16 kHz). Weights go to
    /// the f32 lane where the backend has it, else f16.
    pub fn load(backend: B, path: impl AsRef<Path>) -> Result<Self> {
        let lane = if backend.supports_lane(Lane::F32) {
            Lane::F32
        } else {
            Lane::F16
        };
        Self::load_with_lane(backend, path, lane)
    }

    pub fn load_with_lane(backend: B, path: impl AsRef<Path>, lane: Lane) -> Result<Self> {
        let path = path.as_ref();
        backend.require_lane(lane)?;
        let file = stapes_formats::onnx::read_onnx(path)?;
        let host = weights::branches(&file)?;
        let mut branches = Vec::with_capacity(host.len());
        for w in &host {
            branches.push(Branch::upload(&backend, w, lane)?);
        }
        Ok(SileroVad {
            backend,
            path: path.to_path_buf(),
            lane,
            branches,
        })
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn lane(&self) -> Lane {
        self.lane
    }
    /// Choose the STFT path: the host FFT (default, where the file's basis is a windowed DFT)
    /// or the strided conv over the backend (always available; the export's own formulation).
    pub fn set_host_stft(&mut self, on: bool) {
        for b in &mut self.branches {
            b.use_host_stft = on;
        }
    }

    /// Whether every branch of this file can take the host FFT path.
    pub fn host_stft_available(&self) -> bool {
        self.branches.iter().all(|b| b.has_host_stft())
    }

    /// The network rates this file supports.
    pub fn rates(&self) -> Vec<VadRate> {
        self.branches.iter().map(|b| b.rate).collect()
    }

    pub(crate) fn branch(&self, rate: VadRate) -> Result<&Branch<B>> {
        self.branches
            .iter()
            .find(|b| b.rate == rate)
            .ok_or_else(|| {
                ModelError::BadInput(format!(
                    "{} has no {} Hz weights (it supports {:?} Hz)",
                    self.path.display(),
                    rate.hz(),
                    self.rates().iter().map(|r| r.hz()).collect::<Vec<_>>()
                ))
            })
    }

    /// Per-window speech probabilities (one per 512 samples at 16 kHz, 256 at 8 kHz, the last
    /// window zero padded) of mono `samples` at `sample_rate` (8000, 16000 or a multiple of 16000,
    /// which is decimated first as the silero-vad package does).
    pub fn probabilities(&self, samples: &[f32], sample_rate: u32) -> Result<Vec<f32>> {
        let (rate, step) = VadRate::for_input(sample_rate)?;
        if step == 1 {
            self.probabilities_at(samples, rate)
        } else {
            let dec: Vec<f32> = samples.iter().step_by(step).copied().collect();
            self.probabilities_at(&dec, rate)
        }
    }

    /// Probabilities of samples already at a network rate.
    pub fn probabilities_at(&self, samples: &[f32], rate: VadRate) -> Result<Vec<f32>> {
        let branch = self.branch(rate)?;
        if let Some(i) = samples.iter().position(|v| !v.is_finite()) {
            return Err(ModelError::BadInput(format!("sample {i} is not finite")));
        }
        let be = &self.backend;
        let n_windows = samples.len().div_ceil(rate.window());
        let mut probs = Vec::with_capacity(n_windows);
        let (mut h, mut c) = zero_state(be)?;
        let mut buf = Vec::new();
        let mut first = 0;
        while first < n_windows {
            let n = BLOCK_WINDOWS.min(n_windows - first);
            frames_for(samples, rate, first, n, &mut buf);
            probs.extend(branch.run_block(be, &buf, n, &mut h, &mut c)?);
            first += n;
        }
        Ok(probs)
    }

    /// Speech segments of `samples` at `sample_rate`, in samples of that rate, as the package's
    /// `get_speech_timestamps(audio, model, sampling_rate=sample_rate, **params)` returns them.
    pub fn segments(
        &self,
        samples: &[f32],
        sample_rate: u32,
        params: &VadParams,
    ) -> Result<Vec<SpeechSegment>> {
        let (rate, step) = VadRate::for_input(sample_rate)?;
        let probs = self.probabilities(samples, sample_rate)?;
        let model_len = samples.len().div_ceil(step);
        let segs = speech_timestamps(&probs, params, rate, model_len);
        Ok(segs
            .into_iter()
            .map(|s| SpeechSegment {
                start: s.start * step,
                end: s.end * step,
            })
            .collect())
    }

    /// A streaming session at `rate` with fresh state.
    pub fn stream(&self, rate: VadRate, params: &VadParams) -> Result<VadStream<'_, B>> {
        VadStream::new(self, rate, params)
    }
}

pub(crate) fn zero_state<B: Backend>(be: &B) -> Result<(B::Tensor, B::Tensor)> {
    let z = HostTensor::zeros(vec![1, config::HIDDEN]);
    Ok((be.upload(&z)?, be.upload(&z)?))
}
