//! Model front ends. Every one returns [`Features`] stored frames-major `(n_frames, n_bins)`.

mod core;
pub mod gigaam;
pub mod nemo;
pub mod whisper;

/// A feature matrix, frames-major: `data[frame * n_bins + bin]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    pub n_frames: usize,
    pub n_bins: usize,
    pub data: Vec<f32>,
}

impl Features {
    /// The bins of frame `t`.
    pub fn frame(&self, t: usize) -> &[f32] {
        &self.data[t * self.n_bins..(t + 1) * self.n_bins]
    }

    /// The same values bins-major, `(n_bins, n_frames)`: the layout of the PyTorch front ends
    /// (`(n_mels, T)`), for code that compares against them or feeds a channel-first conv.
    pub fn bins_major(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.data.len()];
        for (t, row) in self.data.chunks_exact(self.n_bins.max(1)).enumerate() {
            for (b, &v) in row.iter().enumerate() {
                out[b * self.n_frames + t] = v;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Features;

    #[test]
    fn bins_major_transposes() {
        let f = Features {
            n_frames: 2,
            n_bins: 3,
            data: vec![0.0, 1.0, 2.0, 10.0, 11.0, 12.0],
        };
        assert_eq!(f.frame(1), &[10.0, 11.0, 12.0]);
        assert_eq!(f.bins_major(), vec![0.0, 10.0, 1.0, 11.0, 2.0, 12.0]);
    }
}
