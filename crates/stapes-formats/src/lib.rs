//! Container formats (being written).

pub mod onnx;

/// Errors reading a container: the file and, where known, the tensor are named.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {detail}")]
    Corrupt { path: std::path::PathBuf, detail: String },
    #[error("{path}: tensor `{tensor}`: {detail}")]
    BadTensor { path: std::path::PathBuf, tensor: String, detail: String },
    #[error("{path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
}
