//! Sample-rate conversion to 16 kHz with rubato's FFT resampler, whole or streamed.

use std::path::{Path, PathBuf};

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Indexing, Resampler, WindowFunction};

use crate::{AudioError, SAMPLE_RATE};

/// Least input block per FFT: long enough for a sharp anti-aliasing filter (the filter spans one
/// block) and to amortise the per-block overhead.
const MIN_BLOCK: usize = 2048;

/// Resamples mono audio from `from_hz` to [`crate::SAMPLE_RATE`].
///
/// The output has `ceil(len · 16000 / from_hz)` samples and no added delay: sample `i` of the
/// output is at time `i / 16000` s, as sample `i · from_hz / 16000` of the input.
pub fn resample(samples: &[f32], from_hz: u32) -> Result<Vec<f32>, AudioError> {
    let label = PathBuf::from("<samples>");
    let mut stream = Stream::new(from_hz, &label)?;
    stream.push(samples)?;
    stream.finish()
}

/// Resamples input that arrives in pieces (decoded packets), so that a long file never holds
/// its full-rate signal in memory. The result equals [`resample`] of the concatenated input.
pub(crate) struct Stream {
    label: PathBuf,
    from_hz: u32,
    /// `None` when the input is already at 16 kHz.
    fft: Option<Fft<f32>>,
    /// Input not yet handed to the resampler (less than one block after each push).
    pending: Vec<f32>,
    /// Output so far, still including the resampler's delay at the front.
    out: Vec<f32>,
    scratch: Vec<f32>,
    total_in: u64,
}

impl Stream {
    pub fn new(from_hz: u32, label: &Path) -> Result<Self, AudioError> {
        if from_hz == 0 {
            return Err(AudioError::InvalidArgument(format!(
                "{}: a sample rate of 0 Hz cannot be resampled",
                label.display()
            )));
        }
        let fft = if from_hz == SAMPLE_RATE {
            None
        } else {
            // rubato's FFT resampler works in blocks of `k · from / gcd` input samples; its delay
            // compensation is exact only when both block sizes are even (an odd block leaves a
            // half-sample shift: half an input sample at 44.1 kHz, half an output sample at
            // 96 kHz). So k is even.
            let gcd = gcd(from_hz as usize, SAMPLE_RATE as usize);
            let unit_in = from_hz as usize / gcd;
            let k = 2 * MIN_BLOCK.div_ceil(2 * unit_in);
            let fft = Fft::<f32>::new_custom(
                from_hz as usize,
                SAMPLE_RATE as usize,
                k * unit_in,
                1,
                1,
                WindowFunction::BlackmanHarris2,
                FixedSync::Input,
            )
            .map_err(|e| failed(label, from_hz, e.to_string()))?;
            Some(fft)
        };
        let scratch = vec![0.0; fft.as_ref().map_or(0, |f| f.output_frames_max())];
        Ok(Self {
            label: label.to_path_buf(),
            from_hz,
            fft,
            pending: Vec::new(),
            out: Vec::new(),
            scratch,
            total_in: 0,
        })
    }

    /// Input samples received so far.
    pub fn input_len(&self) -> u64 {
        self.total_in
    }

    pub fn push(&mut self, samples: &[f32]) -> Result<(), AudioError> {
        // A float stream can carry NaN or infinity; one such sample would spread through the
        // resampler and every feature frame after it, and the models would return empty text.
        if let Some(i) = samples.iter().position(|v| !v.is_finite()) {
            return Err(AudioError::Corrupt {
                path: self.label.clone(),
                detail: format!(
                    "sample {} is {} (samples must be finite)",
                    self.total_in + i as u64,
                    samples[i]
                ),
            });
        }
        self.total_in += samples.len() as u64;
        let Some(fft) = self.fft.as_mut() else {
            self.out.extend_from_slice(samples);
            return Ok(());
        };
        self.pending.extend_from_slice(samples);
        let block = fft.input_frames_next();
        let mut used = 0;
        while self.pending.len() - used >= block {
            let input = &self.pending[used..used + block];
            run_block(
                fft,
                input,
                None,
                &mut self.scratch,
                &mut self.out,
                &self.label,
                self.from_hz,
            )?;
            used += block;
        }
        self.pending.drain(..used);
        Ok(())
    }

    pub fn finish(mut self) -> Result<Vec<f32>, AudioError> {
        let Some(fft) = self.fft.as_mut() else {
            return Ok(self.out);
        };
        let expected = (self.total_in * SAMPLE_RATE as u64).div_ceil(self.from_hz as u64) as usize;
        let delay = fft.output_delay();
        if !self.pending.is_empty() {
            let partial = Indexing {
                input_offset: 0,
                output_offset: 0,
                active_channels_mask: None,
                partial_len: Some(self.pending.len()),
            };
            run_block(
                fft,
                &self.pending,
                Some(&partial),
                &mut self.scratch,
                &mut self.out,
                &self.label,
                self.from_hz,
            )?;
        }
        // Zeros push the last real samples through the filter, past its delay.
        let flush = Indexing {
            input_offset: 0,
            output_offset: 0,
            active_channels_mask: None,
            partial_len: Some(0),
        };
        while self.out.len() < expected + delay {
            run_block(
                fft,
                &[],
                Some(&flush),
                &mut self.scratch,
                &mut self.out,
                &self.label,
                self.from_hz,
            )?;
        }
        self.out.drain(..delay.min(self.out.len()));
        self.out.truncate(expected);
        Ok(self.out)
    }
}

fn run_block(
    fft: &mut Fft<f32>,
    input: &[f32],
    indexing: Option<&Indexing>,
    scratch: &mut [f32],
    out: &mut Vec<f32>,
    label: &Path,
    from_hz: u32,
) -> Result<(), AudioError> {
    let frames_out = scratch.len();
    let adapter_in = InterleavedSlice::new(input, 1, input.len())
        .map_err(|e| failed(label, from_hz, e.to_string()))?;
    let mut adapter_out = InterleavedSlice::new_mut(scratch, 1, frames_out)
        .map_err(|e| failed(label, from_hz, e.to_string()))?;
    let (_, produced) = fft
        .process_into_buffer(&adapter_in, &mut adapter_out, indexing)
        .map_err(|e| failed(label, from_hz, e.to_string()))?;
    out.extend_from_slice(&scratch[..produced]);
    Ok(())
}

fn failed(label: &Path, from_hz: u32, what: String) -> AudioError {
    AudioError::Unsupported {
        path: label.to_path_buf(),
        detail: format!("cannot resample {from_hz} Hz to {SAMPLE_RATE} Hz: {what}"),
    }
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chirp(rate: u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let t = i as f64 / rate as f64;
                (0.4 * (2.0 * std::f64::consts::PI * (200.0 + 900.0 * t) * t).sin()) as f32
            })
            .collect()
    }

    /// rubato's own one-call path, the reference for the streamed one.
    fn process_all(x: &[f32], from_hz: u32) -> Vec<f32> {
        let gcd = gcd(from_hz as usize, SAMPLE_RATE as usize);
        let unit_in = from_hz as usize / gcd;
        let k = 2 * MIN_BLOCK.div_ceil(2 * unit_in);
        let mut fft = Fft::<f32>::new_custom(
            from_hz as usize,
            SAMPLE_RATE as usize,
            k * unit_in,
            1,
            1,
            WindowFunction::BlackmanHarris2,
            FixedSync::Input,
        )
        .expect("resampler");
        let input = InterleavedSlice::new(x, 1, x.len()).expect("adapter");
        fft.process_all(&input, x.len(), None)
            .expect("process_all")
            .take_data()
    }

    #[test]
    fn streamed_equals_rubato_process_all_for_any_piece_sizes() {
        let label = PathBuf::from("<test>");
        for (rate, n) in [(44_100u32, 100_003usize), (8_000, 12_345), (48_000, 4_800)] {
            let x = chirp(rate, n);
            let want = process_all(&x, rate);
            for piece in [1usize, 577, 1152, 4096, n] {
                let mut s = Stream::new(rate, &label).expect("stream");
                for chunk in x.chunks(piece) {
                    s.push(chunk).expect("push");
                }
                let got = s.finish().expect("finish");
                assert_eq!(got.len(), want.len(), "{rate} Hz, pieces of {piece}");
                assert_eq!(got, want, "{rate} Hz, pieces of {piece}");
            }
        }
    }
}
