//! Sample-rate conversion to 16 kHz with rubato's FFT resampler.

use std::path::{Path, PathBuf};

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Resampler};

use crate::{AudioError, SAMPLE_RATE};

/// Input chunk handed to the resampler; large enough that the FFT work dominates the overhead.
const CHUNK: usize = 4096;

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
    let mut resampler = Fft::<f32>::new(
        from_hz as usize,
        SAMPLE_RATE as usize,
        CHUNK,
        1,
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
