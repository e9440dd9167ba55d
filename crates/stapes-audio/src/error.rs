use std::path::PathBuf;

/// Why audio could not be turned into samples. Each message names the input and fits on one line.
#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: is a directory, not an audio file")]
    IsDirectory { path: PathBuf },
    #[error("{path}: empty input (no audio samples)")]
    Empty { path: PathBuf },
    #[error("{path}: unsupported or unrecognised audio format ({detail})")]
    Unsupported { path: PathBuf, detail: String },
    #[error("{path}: corrupt or truncated audio ({detail})")]
    Corrupt { path: PathBuf, detail: String },
    #[error("{path}: too long ({what}; the limit is {limit})")]
    TooLong {
        path: PathBuf,
        what: String,
        limit: String,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}
