//! The model families, each written once over `stapes_core::Backend`.

pub mod error;
pub mod fastconformer;
pub mod silero;
pub mod transcript;
pub mod wer;
pub mod whisper;

pub use error::{ModelError, Result};
