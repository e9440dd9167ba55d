//! `Engine`: a loaded model on a home, in a lane. The one entry point the CLI and server use.

use crate::error::StapesError;
use crate::runtime::{Device, DeviceRequest};
use stapes_core::counters::CounterSnapshot;
use stapes_core::Lane;
use stapes_models::transcript::Transcript;
use std::path::Path;

/// How to load a model.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub device: DeviceRequest,
    /// Pinned lane; `None` = the policy (CPU f32, GPU q8).
    pub lane: Option<Lane>,
    /// CPU worker threads; `None` = all cores.
    pub threads: Option<usize>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self { device: DeviceRequest::Auto, lane: None, threads: None }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Task {
    #[default]
    Transcribe,
    /// Translate to English (Whisper multilingual models).
    Translate,
}

/// Per-request decoding options (family-agnostic; each family uses what applies to it).
#[derive(Clone, Debug)]
pub struct TranscribeOptions {
    /// Language code; `None` = detect.
    pub language: Option<String>,
    pub task: Task,
    /// 1 = greedy.
    pub beam_size: usize,
    /// One fixed temperature (no fallback); `None` = the fallback schedule 0, 0.2, … 1.0.
    pub temperature: Option<f32>,
    pub without_timestamps: bool,
    pub initial_prompt: Option<String>,
    pub condition_on_previous_text: bool,
    pub word_timestamps: bool,
}

impl Default for TranscribeOptions {
    fn default() -> Self {
        Self {
            language: None,
            task: Task::Transcribe,
            beam_size: 5,
            temperature: None,
            without_timestamps: false,
            initial_prompt: None,
            condition_on_previous_text: false,
            word_timestamps: false,
        }
    }
}

/// A loaded model. `Send + Sync`: share it behind an `Arc`.
pub struct Engine {
    family: &'static str,
    device: Device,
    lane: Lane,
    inner: Inner,
}

enum Inner {}

impl Engine {
    pub fn load(_model: &Path, _opts: &EngineOptions) -> Result<Engine, StapesError> {
        Err(StapesError::Unavailable("the engine is being wired (Whisper lands next)".into()))
    }

    pub fn family(&self) -> &'static str {
        self.family
    }
    pub fn device(&self) -> Device {
        self.device
    }
    pub fn lane(&self) -> Lane {
        self.lane
    }
    pub fn counters(&self) -> CounterSnapshot {
        match self.inner {}
    }

    /// Transcribe 16 kHz mono samples. `progress` receives seconds of audio done.
    pub fn transcribe(
        &self,
        _samples: &[f32],
        _opts: &TranscribeOptions,
        _progress: Option<&dyn Fn(f64)>,
    ) -> Result<Transcript, StapesError> {
        match self.inner {}
    }
}
