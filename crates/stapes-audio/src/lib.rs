//! stapes-audio: decode any supported container to 16 kHz mono f32, and the model front ends.
//!
//! A leaf crate: it knows nothing of models or backends.
//!
//! Decoding: WAV, FLAC, MP3 and Ogg Vorbis through symphonia, recognised from the content (a
//! name or extension only orders the probes). Channels are averaged to mono; any rate is
//! converted to [`SAMPLE_RATE`] with rubato's FFT resampler, its delay removed exactly, so sample
//! `i` is at `i / 16000` s. Encoder delay and padding are trimmed where the file records them
//! (LAME/Xing tags, Ogg granule positions).
//!
//! Damage: a WAV or FLAC stream shorter than its header declares is [`AudioError::Corrupt`]; a
//! lossy stream that merely stops early decodes to what is present (as players do), and isolated
//! undecodable lossy frames are skipped unless they are the majority. WAVs written to a pipe
//! (sizes 0xFFFFFFFF) are read to their end.

mod decode;
mod error;
pub mod features;
mod resample;

pub use decode::{decode_bytes, decode_raw_s16le, load_file, MAX_BYTES, MAX_SECONDS};
pub use error::AudioError;
pub use resample::resample;

/// The rate every front end and model in stapes consumes.
pub const SAMPLE_RATE: u32 = 16_000;
