//! Whisper (OpenAI): tiny … large-v3-turbo, .en variants. One model, every format.

pub mod config;
