//! The parts every front end shares: windows, mel filterbanks, and a parallel STFT → mel-power
//! pass over frames.

use std::f64::consts::PI;
use std::sync::Arc;

use rayon::prelude::*;
use realfft::{RealFftPlanner, RealToComplex};

/// Frames handed to one rayon task: enough to amortise the per-task FFT scratch allocation.
const FRAMES_PER_TASK: usize = 64;

/// Hann window of `len` points. `periodic` is `torch.hann_window(len, periodic=True)` (the DFT-even
/// window Whisper and torchaudio use); otherwise the symmetric window NeMo uses.
pub(crate) fn hann(len: usize, periodic: bool) -> Vec<f64> {
    let denom = if periodic { len } else { len.saturating_sub(1) };
    if denom == 0 {
        return vec![1.0; len];
    }
    (0..len)
        .map(|n| 0.5 - 0.5 * (2.0 * PI * n as f64 / denom as f64).cos())
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MelScale {
    /// Slaney's Auditory Toolbox scale (librosa's default): linear below 1 kHz, log above.
    Slaney,
    /// `2595 · log10(1 + f / 700)` (torchaudio's default).
    Htk,
}

fn hz_to_mel(f: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 2595.0 * (1.0 + f / 700.0).log10(),
        MelScale::Slaney => {
            let f_sp = 200.0 / 3.0;
            let min_log_hz = 1000.0;
            let min_log_mel = min_log_hz / f_sp;
            let logstep = 6.4f64.ln() / 27.0;
            if f >= min_log_hz {
                min_log_mel + (f / min_log_hz).ln() / logstep
            } else {
                f / f_sp
            }
        }
    }
}

fn mel_to_hz(m: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 700.0 * (10f64.powf(m / 2595.0) - 1.0),
        MelScale::Slaney => {
            let f_sp = 200.0 / 3.0;
            let min_log_hz = 1000.0;
            let min_log_mel = min_log_hz / f_sp;
            let logstep = 6.4f64.ln() / 27.0;
            if m >= min_log_mel {
                min_log_hz * (logstep * (m - min_log_mel)).exp()
            } else {
                f_sp * m
            }
        }
    }
}

/// Triangular mel filters over the `n_fft / 2 + 1` bins of a real FFT, `(n_mels, n_bins)`
/// row-major, computed in f64. `slaney_norm` scales each triangle by `2 / (f_hi − f_lo)`
/// (constant energy per channel) as librosa's `norm="slaney"` does.
pub(crate) fn mel_filterbank(
    sample_rate: f64,
    n_fft: usize,
    n_mels: usize,
    f_min: f64,
    f_max: f64,
    scale: MelScale,
    slaney_norm: bool,
) -> Vec<f64> {
    let n_bins = n_fft / 2 + 1;
    let mel_lo = hz_to_mel(f_min, scale);
    let mel_hi = hz_to_mel(f_max, scale);
    let points: Vec<f64> = (0..n_mels + 2)
        .map(|i| {
            let t = i as f64 / (n_mels + 1) as f64;
            mel_to_hz(mel_lo + (mel_hi - mel_lo) * t, scale)
        })
        .collect();
    let bin_hz = sample_rate / n_fft as f64;
    let mut out = vec![0.0; n_mels * n_bins];
    for m in 0..n_mels {
        let (lo, mid, hi) = (points[m], points[m + 1], points[m + 2]);
        let norm = if slaney_norm { 2.0 / (hi - lo) } else { 1.0 };
        for k in 0..n_bins {
            let f = k as f64 * bin_hz;
            let rising = (f - lo) / (mid - lo);
            let falling = (hi - f) / (hi - mid);
            out[m * n_bins + k] = rising.min(falling).max(0.0) * norm;
        }
    }
    out
}

/// A mel filterbank stored by its non-zero span per filter: the matrix is > 90 % zeros.
pub(crate) struct SparseMel {
    pub n_mels: usize,
    /// `(first bin, weights)` per filter.
    filters: Vec<(usize, Vec<f32>)>,
}

impl SparseMel {
    pub fn from_dense(dense: &[f64], n_mels: usize, n_bins: usize) -> Self {
        let filters = (0..n_mels)
            .map(|m| {
                let row = &dense[m * n_bins..(m + 1) * n_bins];
                match row.iter().position(|&w| w != 0.0) {
                    None => (0, Vec::new()),
                    Some(first) => {
                        let last = row.iter().rposition(|&w| w != 0.0).unwrap_or(first);
                        (first, row[first..=last].iter().map(|&w| w as f32).collect())
                    }
                }
            })
            .collect();
        Self { n_mels, filters }
    }

    #[inline]
    fn apply(&self, power: &[f32], out: &mut [f32]) {
        for (o, (first, w)) in out.iter_mut().zip(&self.filters) {
            *o = power[*first..*first + w.len()]
                .iter()
                .zip(w)
                .map(|(p, w)| p * w)
                .sum();
        }
    }
}

/// How samples before the start and after the end of the signal are invented for the frames
/// that straddle them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pad {
    /// `numpy.pad(mode="reflect")` / torch's reflect: mirror without repeating the edge sample.
    Reflect,
    Zero,
}

/// Short-time power spectrum folded through a mel filterbank.
pub(crate) struct MelStft {
    n_fft: usize,
    hop: usize,
    /// Signal index of frame 0's first sample is `-left_pad`.
    left_pad: usize,
    pad: Pad,
    /// `n_fft` points: the analysis window, zero-padded and centred when shorter than `n_fft`.
    window: Vec<f32>,
    fft: Arc<dyn RealToComplex<f32>>,
    mel: SparseMel,
}

impl MelStft {
    pub fn new(
        n_fft: usize,
        hop: usize,
        window: &[f64],
        left_pad: usize,
        pad: Pad,
        mel: SparseMel,
    ) -> Self {
        let mut padded = vec![0.0f32; n_fft];
        let offset = (n_fft - window.len().min(n_fft)) / 2;
        for (dst, &w) in padded[offset..].iter_mut().zip(window) {
            *dst = w as f32;
        }
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(n_fft);
        Self {
            n_fft,
            hop,
            left_pad,
            pad,
            window: padded,
            fft,
            mel,
        }
    }

    /// Mel power of frames `0..n_frames` of `x` followed by `zeros` zero samples (padding that is
    /// never materialised), frames-major, each value passed through `post`.
    pub fn run(
        &self,
        x: &[f32],
        zeros: usize,
        n_frames: usize,
        post: impl Fn(f32) -> f32 + Sync,
    ) -> Vec<f32> {
        let n_mels = self.mel.n_mels;
        let mut out = vec![0.0f32; n_frames * n_mels];
        if n_mels == 0 || n_frames == 0 {
            return out;
        }
        out.par_chunks_mut(FRAMES_PER_TASK * n_mels)
            .enumerate()
            .for_each_init(
                || {
                    (
                        self.fft.make_input_vec(),
                        self.fft.make_output_vec(),
                        self.fft.make_scratch_vec(),
                        vec![0.0f32; self.n_fft / 2 + 1],
                    )
                },
                |(frame, spec, scratch, power), (task, chunk)| {
                    for (i, row) in chunk.chunks_mut(n_mels).enumerate() {
                        let f = task * FRAMES_PER_TASK + i;
                        self.fill_frame(x, zeros, f, frame);
                        // The buffers are sized by the plan itself, so this cannot fail.
                        let _ = self.fft.process_with_scratch(frame, spec, scratch);
                        for (p, c) in power.iter_mut().zip(spec.iter()) {
                            *p = c.re * c.re + c.im * c.im;
                        }
                        self.mel.apply(power, row);
                        for v in row.iter_mut() {
                            *v = post(*v);
                        }
                    }
                },
            );
        out
    }

    fn fill_frame(&self, x: &[f32], zeros: usize, f: usize, frame: &mut [f32]) {
        let start = (f * self.hop) as isize - self.left_pad as isize;
        let real = x.len() as isize;
        let len = (x.len() + zeros) as isize;
        if start >= 0 && start + self.n_fft as isize <= real {
            let s = start as usize;
            for ((d, &v), &w) in frame
                .iter_mut()
                .zip(&x[s..s + self.n_fft])
                .zip(&self.window)
            {
                *d = v * w;
            }
            return;
        }
        let at = |i: usize| x.get(i).copied().unwrap_or(0.0);
        for (j, (d, &w)) in frame.iter_mut().zip(&self.window).enumerate() {
            let i = start + j as isize;
            let v = if (0..len).contains(&i) {
                at(i as usize)
            } else {
                match self.pad {
                    Pad::Zero => 0.0,
                    Pad::Reflect => at(reflect_index(i, len as usize)),
                }
            };
            *d = v * w;
        }
    }
}

/// Index into a signal of `len > 0` samples extended by mirroring about its end samples
/// (period `2 (len − 1)`), which is what repeated `numpy.pad(mode="reflect")` produces.
fn reflect_index(i: isize, len: usize) -> usize {
    if len <= 1 {
        return 0;
    }
    let period = 2 * (len as isize - 1);
    let m = i.rem_euclid(period);
    if m < len as isize {
        m as usize
    } else {
        (period - m) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_matches_numpy_convention() {
        // np.pad([0,1,2,3], 5, mode="reflect") == [1,2,3,2,1,0,1,2,3,2,1,0,1,2]
        let got: Vec<usize> = (-5..9).map(|i| reflect_index(i, 4)).collect();
        assert_eq!(got, vec![1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2]);
    }

    #[test]
    fn hann_shapes() {
        let p = hann(4, true);
        assert!((p[0]).abs() < 1e-12 && (p[2] - 1.0).abs() < 1e-12);
        let s = hann(5, false);
        assert!((s[4]).abs() < 1e-12 && (s[2] - 1.0).abs() < 1e-12);
    }
}
