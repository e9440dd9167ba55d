//! Model names and where fetched models live.

use crate::error::StapesError;
use std::path::{Path, PathBuf};

/// The model `scripts/fetch-models.sh` fetches with no argument, and `-m`'s default.
pub const DEFAULT_MODEL: &str = "whisper-base";

/// `$STAPES_CACHE`, default `~/.cache/stapes`.
pub fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("STAPES_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("stapes")
}

/// A path as given, else a name under the cache's `models/`.
pub fn resolve(name_or_path: &str) -> Result<PathBuf, StapesError> {
    let p = Path::new(name_or_path);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    let cached = cache_dir().join("models").join(name_or_path);
    if cached.exists() {
        return Ok(cached);
    }
    Err(StapesError::BadInput(format!(
        "model `{name_or_path}` not found (not a path, and not in {}; run scripts/fetch-models.sh {name_or_path})",
        cache_dir().join("models").display()
    )))
}
