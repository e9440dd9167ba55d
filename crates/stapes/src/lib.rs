//! stapes: speech recognition for every open ASR family, on the CPU and on GPUs.
//!
//! `Engine::load(path, options)` → `engine.transcribe(samples, options)` → segments.

pub mod batch;
pub mod bench;
pub mod canary;
pub mod engine;
pub mod error;
pub mod inspect;
pub mod models;
pub mod output;
pub mod profile;
pub mod runtime;
pub mod vad;

pub use engine::{Engine, EngineOptions, Task, TranscribeOptions};
pub use error::StapesError;
pub use stapes_audio as audio;
pub use stapes_models::transcript::{Segment, Transcript, Word};
