//! stapes: speech recognition for every open ASR family, on the CPU and on GPUs.
//!
//! `Engine::load(path, options)` → `engine.transcribe(samples, options)` → segments.

pub mod output;
pub mod runtime;

pub use stapes_models::transcript::{Segment, Transcript, Word};
