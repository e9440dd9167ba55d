//! GigaAM family (salute-developers/GigaAM, `gigaam` package): a Conformer encoder with a CTC or
//! RNNT head, read from the package's `.ckpt` checkpoints (v1, v2, v3; character vocabularies or
//! the e2e models' SentencePiece one).
//!
//! ```text
//! Gigaam::new(backend, path.ckpt, lane)
//!   .transcribe(&samples_16k) -> Transcript (segments; word timings from 40 ms frames)
//!   .features / .encode_host / .greedy / .decode_text   the stages, for tests and benches
//! ```
//!
//! The heads and their greedy decoders are the FastConformer family's (the same CTC projection
//! and LSTM transducer with a ReLU joint); the encoder is this family's own.

pub mod config;
pub mod encoder;
pub mod model;
pub mod weights;

pub use config::{AttentionKind, ConvNorm, EncoderConfig, GigaamConfig, Subsampling, Vocabulary};
pub use model::{Gigaam, SAMPLE_RATE, TRAINED_MAX_S};
pub use weights::{expected_shapes, load, GigaamCheckpoint};
