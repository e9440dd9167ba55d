//! Whisper (OpenAI): tiny … large-v3-turbo, .en variants. One model, every format.

pub mod config;
pub mod decoder;
pub mod encoder;
pub mod model;
pub mod tokenizer;
pub mod weights;

pub use model::Whisper;
