//! The STFT magnitude of Silero's model input on the host, by real FFT.
//!
//! The export computes it as a strided conv with a stored basis: 2F rows `w[n]·cos(2πfn/N)` and
//! `−w[n]·sin(2πfn/N)` (w = periodic Hann), i.e. a windowed DFT. As a GEMM that is the biggest
//! part of the model (~40 % of its multiply-adds); an FFT does it in a few percent of that. The
//! basis in the file is checked against the DFT of its own window (row 0) before this path is
//! used; a file whose basis is anything else runs the conv over the backend instead
//! ([`super::model::Branch::encode`]). Both paths are tested against onnxruntime.

use super::config::VadRate;
use crate::error::{ModelError, Result};
use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};
use stapes_core::HostTensor;
use std::sync::Arc;

/// Largest |stored − recomputed| basis entry accepted: the stored values are f32 roundings of
/// the same numbers (observed 8e-8), while any other transform differs by O(1).
const BASIS_TOL: f64 = 1e-6;

/// Host STFT magnitude for one rate branch.
pub struct StftFrontEnd {
    n: usize,
    window: Vec<f32>,
    fft: Arc<dyn RealToComplex<f32>>,
}

impl StftFrontEnd {
    /// `basis`: the `(2F, N)` STFT basis as the weight table stores it (real/imaginary rows
    /// interleaved). `None` when it is not a windowed DFT.
    pub fn from_basis(rate: VadRate, basis: &HostTensor) -> Option<Self> {
        let n = rate.filter_length();
        let bins = n / 2 + 1;
        if basis.shape != [2 * bins, n] {
            return None;
        }
        let window: Vec<f32> = basis.data[..n].to_vec();
        for f in 0..bins {
            let re = &basis.data[2 * f * n..(2 * f + 1) * n];
            let im = &basis.data[(2 * f + 1) * n..(2 * f + 2) * n];
            for t in 0..n {
                let phase = 2.0 * std::f64::consts::PI * ((f * t) % n) as f64 / n as f64;
                let w = window[t] as f64;
                if (re[t] as f64 - w * phase.cos()).abs() > BASIS_TOL
                    || (im[t] as f64 + w * phase.sin()).abs() > BASIS_TOL
                {
                    return None;
                }
            }
        }
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(n);
        Some(StftFrontEnd { n, window, fft })
    }

    /// Magnitudes of the frames of model inputs `frames (rows, width)`: frame j of a row starts
    /// at `j·N/2`; output `(rows, T, F)` with `T = (width − N)/(N/2) + 1`.
    pub fn magnitudes(&self, frames: &[f32], rows: usize, width: usize) -> Result<HostTensor> {
        let (n, hop) = (self.n, self.n / 2);
        let bins = n / 2 + 1;
        let t_frames = if width >= n { (width - n) / hop + 1 } else { 0 };
        let mut out = vec![0f32; rows * t_frames * bins];
        let mut input = vec![0f32; n];
        let mut spec = vec![Complex::new(0f32, 0f32); bins];
        let mut scratch = self.fft.make_scratch_vec();
        for r in 0..rows {
            let row = &frames[r * width..(r + 1) * width];
            for j in 0..t_frames {
                let seg = &row[j * hop..j * hop + n];
                for ((d, &x), &w) in input.iter_mut().zip(seg).zip(&self.window) {
                    *d = x * w;
                }
                self.fft
                    .process_with_scratch(&mut input, &mut spec, &mut scratch)
                    .map_err(|e| ModelError::BadInput(format!("silero STFT: {e}")))?;
                let dst = &mut out[(r * t_frames + j) * bins..][..bins];
                for (d, z) in dst.iter_mut().zip(&spec) {
                    *d = (z.re * z.re + z.im * z.im).sqrt();
                }
            }
        }
        Ok(HostTensor {
            shape: vec![rows, t_frames, bins],
            data: out,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Hann-windowed DFT basis in the weight table's interleaved layout.
    fn dft_basis(n: usize) -> HostTensor {
        let bins = n / 2 + 1;
        let w: Vec<f64> = (0..n)
            .map(|t| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * t as f64 / n as f64).cos())
            .collect();
        let mut data = Vec::with_capacity(2 * bins * n);
        for f in 0..bins {
            for part in 0..2 {
                for (t, wt) in w.iter().enumerate() {
                    let ph = 2.0 * std::f64::consts::PI * (f * t) as f64 / n as f64;
                    data.push(
                        (if part == 0 {
                            wt * ph.cos()
                        } else {
                            -wt * ph.sin()
                        }) as f32,
                    );
                }
            }
        }
        HostTensor {
            shape: vec![2 * bins, n],
            data,
        }
    }

    #[test]
    fn fft_magnitudes_equal_the_basis_product() {
        let basis = dft_basis(128);
        let fe =
            StftFrontEnd::from_basis(VadRate::Hz8000, &basis).expect("a DFT basis is accepted");
        let width = 32 + 256 + 32;
        let frames: Vec<f32> = (0..2 * width)
            .map(|i| ((i * 7919 % 613) as f32 / 613.0 - 0.5) * 0.3)
            .collect();
        let got = fe.magnitudes(&frames, 2, width).expect("fft");
        assert_eq!(got.shape, vec![2, 4, 65]);
        for r in 0..2 {
            for j in 0..4 {
                let seg = &frames[r * width + j * 64..][..128];
                for f in 0..65 {
                    let dot = |row: usize| -> f64 {
                        basis.data[row * 128..(row + 1) * 128]
                            .iter()
                            .zip(seg)
                            .map(|(a, b)| (*a as f64) * (*b as f64))
                            .sum()
                    };
                    let want = (dot(2 * f).powi(2) + dot(2 * f + 1).powi(2)).sqrt();
                    let g = got.data[(r * 4 + j) * 65 + f] as f64;
                    assert!(
                        (g - want).abs() <= 1e-5 * (1.0 + want),
                        "row {r} frame {j} bin {f}: {g} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn other_bases_fall_back_to_the_conv() {
        let mut basis = dft_basis(128);
        basis.data[3 * 128 + 17] += 1e-3;
        assert!(StftFrontEnd::from_basis(VadRate::Hz8000, &basis).is_none());
        assert!(
            StftFrontEnd::from_basis(VadRate::Hz16000, &dft_basis(128)).is_none(),
            "wrong length"
        );
    }
}
