use crate::AudioError;

/// Resamples mono audio from `from_hz` to [`crate::SAMPLE_RATE`].
pub fn resample(samples: &[f32], from_hz: u32) -> Result<Vec<f32>, AudioError> {
    let _ = (samples, from_hz);
    Err(AudioError::InvalidArgument("not implemented yet".into()))
}
