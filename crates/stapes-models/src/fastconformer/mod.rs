//! FastConformer family: Parakeet with a CTC, RNNT or TDT head (transformers' `ParakeetFor*`).

pub mod canary;
pub mod config;
pub mod decoder;
pub mod encoder;
pub mod model;
pub mod nemo;
mod pickle;
pub mod weights;

pub use canary::{Canary, CanaryConfig};
pub use config::{EncoderConfig, HeadConfig, ParakeetConfig, TransducerConfig};
pub use decoder::{ctc_collapse, Decoded, Step};
pub use encoder::Chunking;
pub use model::{Parakeet, SAMPLE_RATE};
pub use nemo::load_nemo;
pub use weights::{expected_shapes, load, load_hf, synthetic_checkpoint, ParakeetCheckpoint};
