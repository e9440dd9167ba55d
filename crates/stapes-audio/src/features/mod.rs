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
}
