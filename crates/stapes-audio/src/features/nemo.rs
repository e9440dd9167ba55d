//! NeMo's `AudioToMelSpectrogramPreprocessor` (`FilterbankFeatures`) as Parakeet and Canary
//! configure it: preemphasis, a 400-point symmetric Hann window centred in a 512-point FFT, hop
//! 160, zero ("constant") centre padding, power spectrum, Slaney-normalised Slaney-scale mel
//! filters, `ln(x + 2^-24)`, then per-feature normalisation over the valid frames.
//!
//! Dither is not applied: it is random noise added in training and makes results irreproducible.

use super::core::{hann, mel_filterbank, MelScale, MelStft, Pad, SparseMel};
use super::Features;

/// NeMo's `CONSTANT` added to the standard deviation in `normalize_batch`.
const STD_EPSILON: f64 = 1e-5;

/// How `normalize` in a NeMo preprocessor config treats the log-mel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalize {
    /// `per_feature`: each mel bin to zero mean, unit (Bessel-corrected) standard deviation over
    /// the valid frames.
    PerFeature,
    /// No normalisation (`normalize: NA`).
    None,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NemoConfig {
    pub sample_rate: u32,
    pub n_mels: usize,
    pub n_fft: usize,
    pub win_length: usize,
    pub hop_length: usize,
    /// `preemph`; `None` disables it.
    pub preemphasis: Option<f32>,
    /// Added before the log (`log_zero_guard_value`, `add` mode).
    pub log_guard: f32,
    pub normalize: Normalize,
}

impl NemoConfig {
    /// The preprocessor of Parakeet (TDT/CTC/RNNT) and Canary checkpoints; `n_mels` is 80 or 128
    /// per checkpoint (`features` in its config).
    pub fn parakeet(n_mels: usize) -> Self {
        Self {
            sample_rate: 16_000,
            n_mels,
            n_fft: 512,
            win_length: 400,
            hop_length: 160,
            preemphasis: Some(0.97),
            log_guard: 2f32.powi(-24),
            normalize: Normalize::PerFeature,
        }
    }
}

/// Number of frames NeMo treats as valid for `n_samples` of audio (`seq_len` in
/// `FilterbankFeatures.get_seq_len`, centre padding of `n_fft / 2` on each side).
pub fn n_frames(n_samples: usize, cfg: &NemoConfig) -> usize {
    if cfg.hop_length == 0 {
        return 0;
    }
    (n_samples + 2 * (cfg.n_fft / 2)).saturating_sub(cfg.n_fft) / cfg.hop_length
}

/// Log-mel features of `samples`, frames-major, `n_frames(len)` frames.
///
/// NeMo computes one more, padding frame and zeroes it through the length mask; it is omitted
/// here. With fewer than two valid frames the standard deviation is undefined and the normalised
/// output is all zeros.
pub fn log_mel(samples: &[f32], cfg: &NemoConfig) -> Features {
    let n_frames = n_frames(samples.len(), cfg);
    let n_mels = cfg.n_mels;
    if n_frames == 0 || cfg.n_fft == 0 || cfg.win_length > cfg.n_fft {
        return Features {
            n_frames: 0,
            n_bins: n_mels,
            data: Vec::new(),
        };
    }
    let emphasised;
    let x: &[f32] = match cfg.preemphasis {
        Some(a) => {
            let mut y = Vec::with_capacity(samples.len());
            y.push(samples[0]);
            y.extend(samples.windows(2).map(|w| w[1] - a * w[0]));
            emphasised = y;
            &emphasised
        }
        None => samples,
    };
    let n_bins = cfg.n_fft / 2 + 1;
    let sr = cfg.sample_rate as f64;
    let fb = mel_filterbank(sr, cfg.n_fft, n_mels, 0.0, sr / 2.0, MelScale::Slaney, true);
    let stft = MelStft::new(
        cfg.n_fft,
        cfg.hop_length,
        &hann(cfg.win_length, false),
        cfg.n_fft / 2,
        Pad::Zero,
        SparseMel::from_dense(&fb, n_mels, n_bins),
    );
    let guard = cfg.log_guard;
    let mut data = stft.run(x, 0, n_frames, |p| (p + guard).ln());
    if cfg.normalize == Normalize::PerFeature {
        normalize_per_feature(&mut data, n_frames, n_mels);
    }
    Features {
        n_frames,
        n_bins: n_mels,
        data,
    }
}

fn normalize_per_feature(data: &mut [f32], n_frames: usize, n_mels: usize) {
    if n_frames < 2 {
        data.iter_mut().for_each(|v| *v = 0.0);
        return;
    }
    let mut mean = vec![0.0f64; n_mels];
    for row in data.chunks_exact(n_mels) {
        for (m, &v) in mean.iter_mut().zip(row) {
            *m += v as f64;
        }
    }
    mean.iter_mut().for_each(|m| *m /= n_frames as f64);
    let mut var = vec![0.0f64; n_mels];
    for row in data.chunks_exact(n_mels) {
        for ((s, &v), &m) in var.iter_mut().zip(row).zip(&mean) {
            let d = v as f64 - m;
            *s += d * d;
        }
    }
    let scale: Vec<f64> = var
        .iter()
        .map(|&s| 1.0 / ((s / (n_frames - 1) as f64).sqrt() + STD_EPSILON))
        .collect();
    for row in data.chunks_exact_mut(n_mels) {
        for ((v, &m), &k) in row.iter_mut().zip(&mean).zip(&scale) {
            *v = ((*v as f64 - m) * k) as f32;
        }
    }
}
