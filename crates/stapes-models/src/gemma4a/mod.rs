//! The Gemma 4 audio tower (transformers' `Gemma4AudioModel`, model_type `gemma4_audio`): a
//! USM-style conformer over 4×-subsampled log-mel frames with chunked local attention, from a
//! tower saved alone or from the audio part of a whole Gemma 4 checkpoint (then with
//! `embed_audio`'s projection into the text model).
//!
//! ```text
//! Gemma4Audio::new(backend, dir, lane)
//!   .features(&samples_16k) -> ((T, 128) log-mel, valid frames)
//!   .encode(&features, valid) -> Encoded { tower (1, N, output_dims), embeddings }
//! ```

pub mod config;
pub mod encoder;
pub mod model;
pub mod weights;

pub use config::{FrontEndConfig, Gemma4AudioConfig, Layout};
pub use model::{log_mel, mel_filters, Encoded, Gemma4Audio, SAMPLE_RATE};
pub use weights::{expected_shapes, load, synthetic_checkpoint, Gemma4AudioCheckpoint};
