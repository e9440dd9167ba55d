//! Container formats, family-agnostic: each reader yields named [`RawTensor`]s (dtype, shape, raw
//! bytes) plus whatever metadata the container carries; model families map the names.

pub mod ct2;
pub mod ggml;
pub mod gguf;
pub mod onnx;
pub mod safetensors_dir;
pub mod sniff;
pub mod tensor;

pub use sniff::{sniff, Format, GGML_MAGIC};
pub use tensor::{DType, RawTensor};

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Errors reading a container: the file and, where known, the tensor are named.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {detail}")]
    Corrupt {
        path: std::path::PathBuf,
        detail: String,
    },
    #[error("{path}: tensor `{tensor}`: {detail}")]
    BadTensor {
        path: std::path::PathBuf,
        tensor: String,
        detail: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: unsupported: {detail}")]
    Unsupported {
        path: std::path::PathBuf,
        detail: String,
    },
}

impl FormatError {
    pub fn corrupt(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        FormatError::Corrupt {
            path: path.into(),
            detail: detail.into(),
        }
    }
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Maps a file read-only. An empty file is reported as corrupt (a zero-length map is an error on
/// some platforms and never a valid container).
pub(crate) fn map_file(path: &Path) -> Result<Arc<memmap2::Mmap>, FormatError> {
    let file = std::fs::File::open(path).map_err(|e| FormatError::io(path, e))?;
    let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
    if len == 0 {
        return Err(FormatError::corrupt(path, "empty file"));
    }
    // SAFETY: the map is read-only; like every mmap-based loader we accept that a file truncated
    // by another process while mapped is outside our control.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| FormatError::io(path, e))?;
    Ok(Arc::new(map))
}

/// Bounds-checked little-endian reader over a byte slice; every read names what was missing.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.remaining() {
            return Err(format!(
                "truncated: needs {n} bytes at offset {}, only {} left in the file",
                self.pos,
                self.remaining()
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    pub(crate) fn skip(&mut self, n: usize) -> Result<(), String> {
        self.take(n).map(|_| ())
    }
    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn i32(&mut self) -> Result<i32, String> {
        Ok(self.u32()? as i32)
    }
    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// CTranslate2 string: u16 length including a trailing NUL.
    pub(crate) fn str16(&mut self) -> Result<String, String> {
        let n = self.u16()? as usize;
        if n == 0 {
            return Err("string of length 0 (the NUL is counted)".into());
        }
        let b = self.take(n)?;
        if b[n - 1] != 0 {
            return Err("string is not NUL-terminated".into());
        }
        String::from_utf8(b[..n - 1].to_vec()).map_err(|_| "string is not UTF-8".into())
    }
}
