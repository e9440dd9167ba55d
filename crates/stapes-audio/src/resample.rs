//! Sample-rate conversion to 16 kHz with rubato's FFT resampler.

use std::path::{Path, PathBuf};

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Resampler, WindowFunction};

use crate::{AudioError, SAMPLE_RATE};

/// Least input block per FFT: long enough for a sharp anti-aliasing filter (the filter spans one
/// block) and to amortise the per-block overhead.
const MIN_BLOCK: usize = 2048;

/// Resamples mono audio from `from_hz` to [`crate::SAMPLE_RATE`].
///
/// The output has `ceil(len · 16000 / from_hz)` samples and no added delay: sample `i` of the
/// output is at time `i / 16000` s, as sample `i · from_hz / 16000` of the input.
pub fn resample(samples: &[f32], from_hz: u32) -> Result<Vec<f32>, AudioError> {
    resample_labeled(samples, from_hz, &PathBuf::from("<samples>"))
}

pub(crate) fn resample_labeled(
    samples: &[f32],
    from_hz: u32,
    label: &Path,
) -> Result<Vec<f32>, AudioError> {
    if from_hz == 0 {
        return Err(AudioError::InvalidArgument(format!(
            "{}: a sample rate of 0 Hz cannot be resampled",
            label.display()
        )));
    }
    if from_hz == SAMPLE_RATE || samples.is_empty() {
        return Ok(samples.to_vec());
    }
    let failed = |what: String| AudioError::Unsupported {
        path: label.to_path_buf(),
        detail: format!("cannot resample {from_hz} Hz to {SAMPLE_RATE} Hz: {what}"),
    };
    // rubato's FFT resampler works in blocks of `k · from / gcd` input samples; its delay
    // compensation is exact only when both block sizes are even (an odd block leaves a half-sample
    // shift: half an input sample at 44.1 kHz, half an output sample at 96 kHz). So k is even.
    let gcd = gcd(from_hz as usize, SAMPLE_RATE as usize);
    let unit_in = from_hz as usize / gcd;
    let k = 2 * MIN_BLOCK.div_ceil(2 * unit_in);
    let mut resampler = Fft::<f32>::new_custom(
        from_hz as usize,
        SAMPLE_RATE as usize,
        k * unit_in,
        1,
        1,
        WindowFunction::BlackmanHarris2,
        FixedSync::Input,
    )
    .map_err(|e| failed(e.to_string()))?;
    let input =
        InterleavedSlice::new(samples, 1, samples.len()).map_err(|e| failed(e.to_string()))?;
    // `process_all` trims the resampler's own delay, so timing is preserved exactly.
    let out = resampler
        .process_all(&input, samples.len(), None)
        .map_err(|e| failed(e.to_string()))?;
    Ok(out.take_data())
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
