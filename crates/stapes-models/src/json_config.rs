//! Typed reads of a transformers `config.json`: a missing or null key takes the family's
//! default; a value of the wrong type is refused with the key and the file named.

use crate::{ModelError, Result};
use serde_json::Value;
use std::path::Path;

/// The JSON of `path` (a `config.json`), its read or parse error naming the file.
pub(crate) fn read(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    serde_json::from_str(&text).map_err(|e| bad(path, format!("config.json is not JSON: {e}")))
}

pub(crate) fn bad(path: &Path, detail: impl Into<String>) -> ModelError {
    ModelError::bad_model(path, detail)
}

pub(crate) fn uint(v: &Value, key: &str, default: usize, path: &Path) -> Result<usize> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x.as_u64().map(|n| n as usize).ok_or_else(|| {
            bad(
                path,
                format!("`{key}` must be a non-negative integer, got {x}"),
            )
        }),
    }
}

pub(crate) fn float(v: &Value, key: &str, default: f64, path: &Path) -> Result<f64> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x
            .as_f64()
            .ok_or_else(|| bad(path, format!("`{key}` must be a number, got {x}"))),
    }
}

pub(crate) fn boolean(v: &Value, key: &str, default: bool, path: &Path) -> Result<bool> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x
            .as_bool()
            .ok_or_else(|| bad(path, format!("`{key}` must be true or false, got {x}"))),
    }
}
