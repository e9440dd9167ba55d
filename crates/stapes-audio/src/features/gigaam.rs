//! GigaAM's front end (`gigaam.preprocess.FeatureExtractor`): a torchaudio `MelSpectrogram`
//! (periodic Hann window, power spectrum, HTK-scale mel filters without normalisation, 0–8 kHz)
//! followed by `ln(clamp(x, 1e-9, 1e9))`. It is not a Kaldi fbank: no dither, no DC removal, no
//! preemphasis, no povey window.
//!
//! v2 checkpoints use n_fft = win = 400 with centred reflect padding; v3 checkpoints use
//! n_fft = win = 320 without centring, and carry the window and the mel matrix as bfloat16
//! buffers, which [`GigaamConfig::v3`] reproduces by rounding them to bfloat16.

use super::core::{hann, mel_filterbank, MelScale, MelStft, Pad, SparseMel};
use super::Features;
use crate::AudioError;

#[derive(Debug, Clone, PartialEq)]
pub struct GigaamConfig {
    pub sample_rate: u32,
    pub n_mels: usize,
    pub n_fft: usize,
    pub win_length: usize,
    pub hop_length: usize,
    /// torch.stft `center=True` (reflect padding of `n_fft / 2` on both sides).
    pub center: bool,
    /// Round the window and the mel matrix to bfloat16, as the v3 checkpoints store them.
    pub bf16_buffers: bool,
}

impl GigaamConfig {
    /// GigaAM v2 (`gigaam` 0.1.0 on PyPI): 64 mels, n_fft = win = 400, hop 160, centred.
    pub fn v2() -> Self {
        Self {
            sample_rate: 16_000,
            n_mels: 64,
            n_fft: 400,
            win_length: 400,
            hop_length: 160,
            center: true,
            bf16_buffers: false,
        }
    }

    /// GigaAM v3: 64 mels, n_fft = win = 320, hop 160, not centred, bfloat16 buffers.
    pub fn v3() -> Self {
        Self {
            n_fft: 320,
            win_length: 320,
            center: false,
            bf16_buffers: true,
            ..Self::v2()
        }
    }
}

/// Frames produced for `n_samples` (GigaAM's `out_len`).
pub fn n_frames(n_samples: usize, cfg: &GigaamConfig) -> usize {
    if cfg.hop_length == 0 {
        return 0;
    }
    if cfg.center {
        if n_samples == 0 {
            0
        } else {
            n_samples / cfg.hop_length + 1
        }
    } else if n_samples < cfg.win_length.max(cfg.n_fft) {
        0
    } else {
        (n_samples - cfg.n_fft) / cfg.hop_length + 1
    }
}

/// Log-mel features of `samples` (16 kHz mono), frames-major.
pub fn log_mel(samples: &[f32], cfg: &GigaamConfig) -> Features {
    let (window, fb) = buffers(cfg);
    // The buffers are built for `cfg`, so their sizes always fit.
    log_mel_with_buffers(samples, cfg, &window, &fb).unwrap_or_else(|_| empty(cfg))
}

/// [`log_mel`] with the window and mel matrix taken from a checkpoint
/// (`preprocessor.featurizer.0.spectrogram.window`, `win_length` values, and
/// `preprocessor.featurizer.0.mel_scale.fb`, `(n_fft / 2 + 1, n_mels)` row-major as torchaudio
/// stores it), for exact parity whatever precision the checkpoint stored them in.
/// `cfg.bf16_buffers` is ignored.
pub fn log_mel_with_buffers(
    samples: &[f32],
    cfg: &GigaamConfig,
    window: &[f32],
    fb: &[f32],
) -> Result<Features, AudioError> {
    let n_freq = cfg.n_fft / 2 + 1;
    if window.len() != cfg.win_length || fb.len() != n_freq * cfg.n_mels {
        return Err(AudioError::InvalidArgument(format!(
            "GigaAM front end: window of {} values and mel matrix of {} values do not fit \
             win_length {} and ({n_freq}, {})",
            window.len(),
            fb.len(),
            cfg.win_length,
            cfg.n_mels
        )));
    }
    let n_frames = n_frames(samples.len(), cfg);
    if n_frames == 0 || cfg.n_fft == 0 || cfg.win_length > cfg.n_fft {
        return Ok(empty(cfg));
    }
    // torchaudio keeps the matrix frequency-major; the STFT wants one row per mel filter.
    let mut dense = vec![0.0f64; cfg.n_mels * n_freq];
    for k in 0..n_freq {
        for m in 0..cfg.n_mels {
            dense[m * n_freq + k] = fb[k * cfg.n_mels + m] as f64;
        }
    }
    let window: Vec<f64> = window.iter().map(|&w| w as f64).collect();
    let stft = MelStft::new(
        cfg.n_fft,
        cfg.hop_length,
        &window,
        if cfg.center { cfg.n_fft / 2 } else { 0 },
        Pad::Reflect,
        SparseMel::from_dense(&dense, cfg.n_mels, n_freq),
    );
    let data = stft.run(samples, 0, n_frames, |p| p.clamp(1e-9, 1e9).ln());
    Ok(Features {
        n_frames,
        n_bins: cfg.n_mels,
        data,
    })
}

/// The window and mel matrix [`log_mel`] uses for `cfg`, in the layout of
/// [`log_mel_with_buffers`]: `(window, fb)` with `fb` `(n_fft / 2 + 1, n_mels)` row-major.
pub fn buffers(cfg: &GigaamConfig) -> (Vec<f32>, Vec<f32>) {
    let sr = cfg.sample_rate as f64;
    let n_freq = cfg.n_fft / 2 + 1;
    let dense = mel_filterbank(
        sr,
        cfg.n_fft,
        cfg.n_mels,
        0.0,
        sr / 2.0,
        MelScale::Htk,
        false,
    );
    let round = |x: f32| if cfg.bf16_buffers { round_bf16(x) } else { x };
    let mut fb = vec![0.0f32; n_freq * cfg.n_mels];
    for m in 0..cfg.n_mels {
        for k in 0..n_freq {
            fb[k * cfg.n_mels + m] = round(dense[m * n_freq + k] as f32);
        }
    }
    let window = hann(cfg.win_length, true)
        .iter()
        .map(|&w| round(w as f32))
        .collect();
    (window, fb)
}

fn empty(cfg: &GigaamConfig) -> Features {
    Features {
        n_frames: 0,
        n_bins: cfg.n_mels,
        data: Vec::new(),
    }
}

/// f32 → bfloat16 → f32 with round-to-nearest-even, as `tensor.bfloat16()` does.
fn round_bf16(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) & 0xffff_0000;
    f32::from_bits(rounded)
}
