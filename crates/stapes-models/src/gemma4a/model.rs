//! A loaded Gemma 4 audio tower: the front end (`Gemma4AudioFeatureExtractor`) and the tower,
//! with `embed_audio`'s projection into the text model where the checkpoint has one.

use super::config::{FrontEndConfig, Gemma4AudioConfig};
use super::encoder::{AudioTower, Inputs};
use super::weights::{load, Gemma4AudioCheckpoint};
use crate::fastconformer::encoder::Tensors;
use crate::{ModelError, Result};
use realfft::RealFftPlanner;
use stapes_core::{Backend, DeviceTensor, HostTensor, Lane};
use std::f64::consts::PI;
use std::path::{Path, PathBuf};

/// Input rate of every Gemma 4 audio tower.
pub const SAMPLE_RATE: u32 = 16_000;

/// Chains (distinct frame counts and valid frames) one model keeps on a capturing home; further
/// shapes run eagerly. The front end takes at most 30 s, so every input is in reach.
pub const MAX_CHAINS: usize = 32;

fn hz_to_mel(f: f64) -> f64 {
    2595.0 * (1.0 + f / 700.0).log10()
}

fn mel_to_hz(m: f64) -> f64 {
    700.0 * (10f64.powf(m / 2595.0) - 1.0)
}

/// transformers' `mel_filter_bank` with the HTK scale and no normalisation, `(n_bins, n_mels)`
/// row-major: triangles between mel-spaced corners over the FFT bins `0 … sr//2`.
pub fn mel_filters(cfg: &FrontEndConfig) -> Vec<f64> {
    let n_bins = cfg.fft_length / 2 + 1;
    let n_mels = cfg.n_mels;
    let (lo, hi) = (hz_to_mel(cfg.min_frequency), hz_to_mel(cfg.max_frequency));
    let corners: Vec<f64> = (0..n_mels + 2)
        .map(|i| mel_to_hz(lo + (hi - lo) * i as f64 / (n_mels + 1) as f64))
        .collect();
    let nyquist = (SAMPLE_RATE / 2) as f64;
    let mut fb = vec![0f64; n_bins * n_mels];
    for k in 0..n_bins {
        let f = nyquist * k as f64 / (n_bins - 1).max(1) as f64;
        for m in 0..n_mels {
            let down = (f - corners[m]) / (corners[m + 1] - corners[m]);
            let up = (corners[m + 2] - f) / (corners[m + 2] - corners[m + 1]);
            fb[k * n_mels + m] = down.min(up).max(0.0);
        }
    }
    fb
}

/// Log-mel features of 16 kHz `samples` as `Gemma4AudioFeatureExtractor` makes them for one
/// clip: `(T, n_mels)` and how many leading frames are valid (the rest are zero).
///
/// The clip is zero-padded to a multiple of 128 samples, `frame_length/2` zeros go in front
/// (semicausal: frame 0 is centred on sample 0), and frame `i` covers samples
/// `i·hop − frame_length/2 …` of `frame_length`, windowed by a periodic Hann window and
/// zero-padded to the FFT length; `log(mel · |STFT| + mel_floor)`. A frame is valid when its
/// window's last sample is audio, not padding.
pub fn log_mel(samples: &[f32], cfg: &FrontEndConfig) -> Result<(HostTensor, usize)> {
    crate::check_finite(samples)?;
    if samples.len() > cfg.max_samples {
        return Err(ModelError::BadInput(format!(
            "{} samples ({:.1} s) is more than the {} s the Gemma 4 feature extractor takes \
             in one pass (it would cut the rest); cut the audio first (`stapes transcribe --vad`)",
            samples.len(),
            samples.len() as f64 / SAMPLE_RATE as f64,
            cfg.max_samples / SAMPLE_RATE as usize
        )));
    }
    let (fl, hop, nfft) = (cfg.frame_length, cfg.hop_length, cfg.fft_length);
    let len = samples.len();
    let padded = len.next_multiple_of(cfg.pad_to_multiple_of.max(1));
    let front = fl / 2;
    let total = front + padded;
    // frames of `fl + 1` samples (the extra one feeds the preemphasis)
    let n_frames = match total.checked_sub(fl + 1) {
        Some(r) => r / hop + 1,
        None => 0,
    };
    let valid = (0..n_frames)
        .take_while(|i| i * hop + fl - front < len)
        .count();
    if valid == 0 {
        return Err(ModelError::BadInput(format!(
            "{len} samples give no whole feature frame (the Gemma 4 front end needs more than \
             {} samples)",
            fl - front
        )));
    }
    let scale = cfg.input_scale as f32;
    let wave = |j: usize| -> f32 {
        // j indexes the front-padded signal
        match j.checked_sub(front) {
            Some(s) if s < len => samples[s] * scale,
            _ => 0.0,
        }
    };
    let window: Vec<f64> = (0..fl)
        .map(|n| 0.5 - 0.5 * (2.0 * PI * n as f64 / fl as f64).cos())
        .collect();
    let fb = mel_filters(cfg);
    let n_bins = nfft / 2 + 1;
    let m = cfg.n_mels;
    let fft = RealFftPlanner::<f64>::new().plan_fft_forward(nfft);
    let mut input = fft.make_input_vec();
    let mut spectrum = fft.make_output_vec();
    let mut mag = vec![0f64; n_bins];
    let p = cfg.preemphasis;
    let mut data = vec![0f32; n_frames * m];
    for (i, row) in data.chunks_exact_mut(m).take(valid).enumerate() {
        let x = |k: usize| wave(i * hop + k) as f64;
        input.fill(0.0);
        for (k, slot) in input.iter_mut().take(fl).enumerate() {
            let v = if p > 0.0 {
                match (cfg.preemphasis_htk, k) {
                    (true, 0) => x(0) * (1.0 - p),
                    (true, _) => x(k) - p * x(k - 1),
                    (false, _) => x(k + 1) - p * x(k),
                }
            } else {
                x(k)
            };
            *slot = v * window[k];
        }
        fft.process(&mut input, &mut spectrum)
            .map_err(|e| ModelError::BadInput(format!("FFT: {e}")))?;
        for (a, c) in mag.iter_mut().zip(&spectrum) {
            *a = c.norm();
        }
        for (j, out) in row.iter_mut().enumerate() {
            let mel: f64 = (0..n_bins).map(|k| mag[k] * fb[k * m + j]).sum();
            let mut v = (mel + cfg.mel_floor).ln();
            if let Some(mean) = &cfg.per_bin_mean {
                v -= mean[j];
            }
            if let Some(std) = &cfg.per_bin_stddev {
                v /= std[j];
            }
            *out = v as f32;
        }
    }
    Ok((HostTensor::new(vec![n_frames, m], data)?, valid))
}

/// The tower's output for one clip.
pub struct Encoded<B: Backend> {
    /// `(1, N, output_dims)`: the valid tokens of the tower's output.
    pub tower: B::Tensor,
    /// `(1, N, text hidden)`: `embed_audio`'s projection of them (a whole checkpoint only) —
    /// what Gemma 4 puts in place of its audio tokens.
    pub embeddings: Option<B::Tensor>,
}

/// A Gemma 4 audio tower whose weights live on backend `B`, in one lane.
pub struct Gemma4Audio<B: Backend> {
    backend: B,
    pub config: Gemma4AudioConfig,
    pub front_end: FrontEndConfig,
    lane: Lane,
    path: PathBuf,
    tower: AudioTower<B>,
    /// The tower's chain inputs by (frames, valid frames): a captured chain reads them by
    /// address, so each lives as long as the model.
    chains: crate::ChainSlots<(usize, usize), Inputs<B>>,
    /// Whether the tower runs as chains: on the CUDA home (graphs on or off; off, a chain runs
    /// eagerly with the same f16 activations); elsewhere a chain is the eager pass.
    chained: bool,
    id: u64,
}

impl<B: Backend> Gemma4Audio<B> {
    /// Loads a `Gemma4AudioModel` directory or the audio part of a whole Gemma 4 checkpoint onto
    /// `backend`, GEMM weights in `lane`.
    pub fn new(backend: B, path: &Path, lane: Lane) -> Result<Self> {
        Self::from_checkpoint(backend, &load(path)?, lane)
    }

    pub fn from_checkpoint(backend: B, ck: &Gemma4AudioCheckpoint, lane: Lane) -> Result<Self> {
        backend.require_lane(lane)?;
        let t = Tensors {
            map: &ck.tensors,
            path: &ck.path,
        };
        let tower = AudioTower::load(&backend, &t, &ck.config, lane)?;
        let chained = backend.name() == "cuda";
        Ok(Self {
            chains: crate::ChainSlots::new(MAX_CHAINS),
            chained,
            id: crate::next_chain_id(),
            backend,
            config: ck.config.clone(),
            front_end: ck.front_end.clone(),
            lane,
            path: ck.path.clone(),
            tower,
        })
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn lane(&self) -> Lane {
        self.lane
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tower, for tests and benches that want every token it returns.
    pub fn tower(&self) -> &AudioTower<B> {
        &self.tower
    }

    /// [`log_mel`] with this model's front end.
    pub fn features(&self, samples: &[f32]) -> Result<(HostTensor, usize)> {
        log_mel(samples, &self.front_end)
    }

    /// The valid tokens of the tower's output (and their text-model embeddings) for
    /// `features (T, n_mels)` whose first `valid` frames are audio. On the CUDA home each
    /// (frames, valid frames) runs as one chain (with graphs on, captured on its second call
    /// and replayed after), at most [`MAX_CHAINS`] shapes a model; elsewhere, and past that,
    /// eagerly.
    pub fn encode(&self, features: &HostTensor, valid: usize) -> Result<Encoded<B>> {
        let b = &self.backend;
        let tower = &self.tower;
        let pass = |be: &B, inputs: &Inputs<B>| -> Result<Vec<B::Tensor>> {
            let all = tower.forward_prepared(be, inputs)?;
            let n = inputs.valid_tokens;
            let out = match all.shape()[1] == n {
                true => all,
                false => be.slice(&all, 1, 0, n)?,
            };
            let embeddings = tower.embed(be, &out)?;
            Ok(std::iter::once(out).chain(embeddings).collect())
        };
        let t = features.shape.first().copied().unwrap_or(0);
        let chained = match self.chained {
            false => None,
            true => {
                let name = format!("gemma4a-encoder/m{}t{t}v{valid}/{}", self.id, self.lane);
                self.chains.run(
                    b,
                    (t, valid),
                    &name,
                    "gemma4a tower",
                    || tower.prepare(b, t, valid),
                    |inputs| tower.write_features(b, &mut inputs.features, features, valid),
                    &mut |be, inputs| pass(be, inputs),
                )?
            }
        };
        let outs = match chained {
            Some(outs) => outs,
            None => {
                let mut inputs = tower.prepare(b, t, valid)?;
                tower.write_features(b, &mut inputs.features, features, valid)?;
                pass(b, &inputs)?
            }
        };
        let mut outs = outs.into_iter();
        let tower = outs.next().ok_or_else(|| {
            ModelError::BadInput("the gemma4a tower pass returned nothing".into())
        })?;
        Ok(Encoded {
            tower,
            embeddings: outs.next(),
        })
    }

    /// Front end and tower of 16 kHz mono `samples`.
    pub fn encode_samples(&self, samples: &[f32]) -> Result<Encoded<B>> {
        let (f, valid) = self.features(samples)?;
        self.encode(&f, valid)
    }
}
