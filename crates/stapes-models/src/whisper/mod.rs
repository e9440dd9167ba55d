//! Whisper (OpenAI): tiny … large-v3-turbo, .en variants. One model, every format.

pub mod batch;
pub mod config;
pub mod decoder;
pub mod decoding;
pub mod encoder;
pub mod model;
pub mod timing;
pub mod tokenizer;
pub mod weights;

pub use decoding::{Task, WhisperOptions};
pub use model::Whisper;
