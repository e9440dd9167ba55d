use std::path::PathBuf;
use thiserror::Error;

pub type Result<T, E = ModelError> = std::result::Result<T, E>;

/// Errors from loading or running a model. Bad files name the file and, where known, the tensor.
#[derive(Debug, Error)]
pub enum ModelError {
    #[error("{path}: {detail}")]
    BadModel { path: PathBuf, detail: String },
    #[error("{path}: tensor `{tensor}`: {detail}")]
    BadTensor {
        path: PathBuf,
        tensor: String,
        detail: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid input: {0}")]
    BadInput(String),
    /// A request option the model cannot honour (an unknown language code): the caller's
    /// flags or fields, not the audio.
    #[error("{0}")]
    BadOption(String),
    #[error(transparent)]
    Backend(#[from] stapes_core::Error),
    #[error(transparent)]
    Format(#[from] stapes_formats::FormatError),
}

impl ModelError {
    pub fn bad_model(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        ModelError::BadModel {
            path: path.into(),
            detail: detail.into(),
        }
    }
    pub fn bad_tensor(
        path: impl Into<PathBuf>,
        tensor: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        ModelError::BadTensor {
            path: path.into(),
            tensor: tensor.into(),
            detail: detail.into(),
        }
    }
}
