//! stapes-audio: decode any supported container to 16 kHz mono f32, and the model front ends.
//!
//! A leaf crate: it knows nothing of models or backends.

mod decode;
mod error;
pub mod features;
mod resample;

pub use decode::{decode_bytes, decode_raw_s16le, load_file, MAX_BYTES, MAX_SECONDS};
pub use error::AudioError;
pub use resample::resample;

/// The rate every front end and model in stapes consumes.
pub const SAMPLE_RATE: u32 = 16_000;
