//! The two sample rates Silero VAD v6 runs at and their framing.

use crate::error::{ModelError, Result};

/// A rate the network itself runs at. Other rates are brought to one of these by the caller
/// (multiples of 16 kHz are decimated, as the silero-vad package does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VadRate {
    Hz8000,
    Hz16000,
}

impl VadRate {
    pub fn hz(self) -> u32 {
        match self {
            VadRate::Hz8000 => 8000,
            VadRate::Hz16000 => 16000,
        }
    }

    /// New samples per model call (32 ms).
    pub fn window(self) -> usize {
        match self {
            VadRate::Hz8000 => 256,
            VadRate::Hz16000 => 512,
        }
    }

    /// Samples of the previous model input prepended to each window (4 ms).
    pub fn context(self) -> usize {
        match self {
            VadRate::Hz8000 => 32,
            VadRate::Hz16000 => 64,
        }
    }

    /// STFT filter length of that rate's branch (the hop is half of it).
    pub fn filter_length(self) -> usize {
        match self {
            VadRate::Hz8000 => 128,
            VadRate::Hz16000 => 256,
        }
    }

    /// The network rate and the decimation step for an input rate, following the package's
    /// `get_speech_timestamps`: 8 and 16 kHz as they are, a multiple of 16 kHz by `x[::step]`.
    pub fn for_input(sample_rate: u32) -> Result<(VadRate, usize)> {
        match sample_rate {
            8000 => Ok((VadRate::Hz8000, 1)),
            16000 => Ok((VadRate::Hz16000, 1)),
            r if r > 16000 && r % 16000 == 0 => Ok((VadRate::Hz16000, (r / 16000) as usize)),
            r => Err(ModelError::BadInput(format!(
                "Silero VAD runs at 8000 or 16000 Hz (or a multiple of 16000, decimated); got {r} Hz"
            ))),
        }
    }
}

/// LSTM width of Silero VAD v6 (the `state` input is `(2, B, 128)`).
pub const HIDDEN: usize = 128;
