//! The library's error, with the exit code contract of design.md §6.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum StapesError {
    /// Bad flags or request fields (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Bad audio or model input (exit 3).
    #[error("{0}")]
    BadInput(String),
    /// The device or lane asked for is not available here (exit 4).
    #[error("{0}")]
    Unavailable(String),
    /// Anything else (exit 1).
    #[error("{0}")]
    Internal(String),
}

impl StapesError {
    pub fn exit_code(&self) -> i32 {
        match self {
            StapesError::Usage(_) => 2,
            StapesError::BadInput(_) => 3,
            StapesError::Unavailable(_) => 4,
            StapesError::Internal(_) => 1,
        }
    }
}

impl From<stapes_audio::AudioError> for StapesError {
    fn from(e: stapes_audio::AudioError) -> Self {
        StapesError::BadInput(e.to_string())
    }
}

impl From<stapes_core::Error> for StapesError {
    fn from(e: stapes_core::Error) -> Self {
        match e {
            stapes_core::Error::LaneUnavailable { .. } => StapesError::Unavailable(e.to_string()),
            stapes_core::Error::Device(_) => StapesError::Unavailable(e.to_string()),
            _ => StapesError::Internal(e.to_string()),
        }
    }
}

impl From<stapes_models::ModelError> for StapesError {
    fn from(e: stapes_models::ModelError) -> Self {
        use stapes_models::ModelError as M;
        match e {
            M::Backend(b) => b.into(),
            M::BadInput(s) => StapesError::BadInput(s),
            M::BadOption(s) => StapesError::Usage(s),
            other => StapesError::BadInput(other.to_string()),
        }
    }
}

impl From<stapes_formats::FormatError> for StapesError {
    fn from(e: stapes_formats::FormatError) -> Self {
        StapesError::BadInput(e.to_string())
    }
}
