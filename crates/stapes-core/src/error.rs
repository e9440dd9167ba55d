use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors raised by a backend. Declines are typed so callers can count them and fall back.
#[derive(Debug, Error)]
pub enum Error {
    #[error("{op}: bad shapes: {detail}")]
    Shape { op: &'static str, detail: String },
    #[error("{op}: declined by the {backend} backend: {reason}")]
    Decline {
        op: &'static str,
        backend: &'static str,
        reason: String,
    },
    #[error("lane {lane} is not available on the {backend} backend")]
    LaneUnavailable {
        lane: crate::Lane,
        backend: &'static str,
    },
    #[error("device error: {0}")]
    Device(String),
}

impl Error {
    pub fn shape(op: &'static str, detail: impl Into<String>) -> Self {
        Error::Shape {
            op,
            detail: detail.into(),
        }
    }
}
