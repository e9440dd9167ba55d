//! Whisper's log-mel front end, as faster-whisper's `FeatureExtractor.__call__` computes it
//! (and so as OpenAI's `log_mel_spectrogram`): 400-point periodic-Hann STFT, hop 160, centred
//! with reflect padding, the last frame dropped, Slaney mel filters, `log10(max(x, 1e-10))`,
//! floored at `max − 8`, then `(x + 4) / 4`.

use super::core::{hann, mel_filterbank, MelScale, MelStft, Pad, SparseMel};
use super::Features;

pub const N_FFT: usize = 400;
pub const HOP_LENGTH: usize = 160;
/// Frequency bins of one frame, `N_FFT / 2 + 1`.
pub const N_FREQ: usize = N_FFT / 2 + 1;

/// Log-mel spectrogram of `samples` (16 kHz mono) after appending `padding` zero samples.
///
/// Returns `(len + padding) / 160` frames of `n_mels` bins, frames-major. faster-whisper's
/// default is `padding = 160`; OpenAI's `transcribe` uses 480 000 (30 s).
pub fn log_mel(samples: &[f32], n_mels: usize, padding: usize) -> Features {
    // 1 + len / hop centred frames, of which the last is dropped (as Whisper does).
    let n_frames = (samples.len() + padding) / HOP_LENGTH;
    let stft = MelStft::new(
        N_FFT,
        HOP_LENGTH,
        &hann(N_FFT, true),
        N_FFT / 2,
        Pad::Reflect,
        SparseMel::from_dense(&filterbank_f64(n_mels), n_mels, N_FREQ),
    );
    let mut data = stft.run(samples, padding, n_frames, |p| p.max(1e-10).log10());
    let max = data.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let floor = max - 8.0;
    for v in &mut data {
        *v = (v.max(floor) + 4.0) / 4.0;
    }
    Features {
        n_frames,
        n_bins: n_mels,
        data,
    }
}

/// The Slaney-normalised mel filterbank Whisper uses (librosa's `filters.mel(sr=16000,
/// n_fft=400, n_mels)`), `(n_mels, 201)` row-major. Equals OpenAI's `mel_filters.npz` for 80 and
/// 128 bins.
pub fn filterbank(n_mels: usize) -> Vec<f32> {
    filterbank_f64(n_mels).iter().map(|&w| w as f32).collect()
}

fn filterbank_f64(n_mels: usize) -> Vec<f64> {
    mel_filterbank(
        16_000.0,
        N_FFT,
        n_mels,
        0.0,
        8_000.0,
        MelScale::Slaney,
        true,
    )
}
