//! The models a server answers for, by name (`-m name=path`, repeatable; the first is the
//! default).

use stapes::{Engine, EngineOptions, StapesError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The name OpenAI clients send by default; it selects the default model unless a model was
/// registered under that name, so clients hard-coding it work unchanged.
pub const OPENAI_DEFAULT_NAME: &str = "whisper-1";

pub struct ModelEntry {
    pub name: String,
    pub path: PathBuf,
    opts: EngineOptions,
    engine: Mutex<Option<Arc<Engine>>>,
}

impl ModelEntry {
    /// The loaded engine, loading it first if the server started lazily. Blocking: call it on
    /// the blocking pool. A failed load is not cached, so a later request retries it.
    pub fn engine(&self) -> Result<Arc<Engine>, StapesError> {
        let mut slot = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = slot.as_ref() {
            return Ok(Arc::clone(e));
        }
        let engine = Arc::new(Engine::load(&self.path, &self.opts)?);
        *slot = Some(Arc::clone(&engine));
        Ok(engine)
    }

    /// Family of the loaded engine, `None` while not loaded.
    pub fn family(&self) -> Option<&'static str> {
        let slot = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref().map(|e| e.family())
    }
}

pub struct Registry {
    entries: Vec<Arc<ModelEntry>>,
}

/// `name=path` or a bare path / cached model name (served under its file name).
///
/// A spec that names an existing path is a path even when it contains `=`.
pub fn parse_spec(spec: &str) -> Result<(String, String), StapesError> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err(StapesError::Usage("-m: empty model".into()));
    }
    if !Path::new(spec).exists() {
        if let Some((name, path)) = spec.split_once('=') {
            let (name, path) = (name.trim(), path.trim());
            if name.is_empty() || path.is_empty() {
                return Err(StapesError::Usage(format!("-m {spec}: expected NAME=PATH")));
            }
            if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(StapesError::Usage(format!(
                    "-m {spec}: a model name has no spaces"
                )));
            }
            return Ok((name.to_owned(), path.to_owned()));
        }
    }
    Ok((default_name(spec), spec.to_owned()))
}

/// A directory by its name (`whisper-tiny.en`), a file by its stem (`ggml-tiny.en.bin` →
/// `ggml-tiny.en`); a cached model name is already a name.
fn default_name(spec: &str) -> String {
    let p = Path::new(spec.trim_end_matches('/'));
    let part = if p.is_file() {
        p.file_stem()
    } else {
        p.file_name()
    };
    part.map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| spec.to_owned())
}

impl Registry {
    /// Resolves every spec; loads each model now unless `lazy`.
    pub fn build(specs: &[String], opts: &EngineOptions, lazy: bool) -> Result<Self, StapesError> {
        let default = [stapes::models::DEFAULT_MODEL.to_owned()];
        let specs = if specs.is_empty() {
            &default[..]
        } else {
            specs
        };
        let mut entries: Vec<Arc<ModelEntry>> = Vec::new();
        for spec in specs {
            let (name, path) = parse_spec(spec)?;
            if entries.iter().any(|e| e.name == name) {
                return Err(StapesError::Usage(format!(
                    "-m: two models are named `{name}`; name them with -m NAME=PATH"
                )));
            }
            let path = stapes::models::resolve(&path)?;
            let entry = ModelEntry {
                name,
                path,
                opts: opts.clone(),
                engine: Mutex::new(None),
            };
            if !lazy {
                let engine = entry.engine()?;
                eprintln!(
                    "stapes serve: loaded `{}` ({}) on {} in lane {}",
                    entry.name,
                    engine.family(),
                    engine.device(),
                    engine.lane()
                );
            }
            entries.push(Arc::new(entry));
        }
        Ok(Self { entries })
    }

    /// The model a request names; none named (or OpenAI's default name) → the default model.
    pub fn lookup(&self, name: Option<&str>) -> Option<Arc<ModelEntry>> {
        let name = name.map(str::trim).filter(|n| !n.is_empty());
        if let Some(n) = name {
            if let Some(e) = self.entries.iter().find(|e| e.name == n) {
                return Some(Arc::clone(e));
            }
            if n != OPENAI_DEFAULT_NAME {
                return None;
            }
        }
        self.entries.first().cloned()
    }

    pub fn entries(&self) -> &[Arc<ModelEntry>] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_forms() {
        assert_eq!(
            parse_spec("tiny=/m/a").ok(),
            Some(("tiny".into(), "/m/a".into()))
        );
        assert_eq!(
            parse_spec("whisper-tiny.en").ok(),
            Some(("whisper-tiny.en".into(), "whisper-tiny.en".into()))
        );
        assert_eq!(
            parse_spec("/x/ggml-tiny.en.bin/").ok().map(|s| s.0),
            Some("ggml-tiny.en.bin".into())
        );
        assert!(parse_spec("=/m/a").is_err());
        assert!(parse_spec("a b=/m").is_err());
        assert!(parse_spec("  ").is_err());
    }

    #[test]
    fn existing_file_is_named_by_stem_even_with_equals_sign() {
        let dir = std::env::temp_dir().join(format!("stapes-serve-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok();
        let f = dir.join("a=b.bin");
        std::fs::write(&f, b"x").ok();
        let spec = f.to_string_lossy().into_owned();
        assert_eq!(parse_spec(&spec).ok(), Some(("a=b".into(), spec.clone())));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn lookup_by_name_and_openai_default() {
        let dir = std::env::temp_dir();
        let specs = vec![
            format!("a={}", dir.display()),
            format!("b={}", dir.display()),
        ];
        let r = Registry::build(&specs, &EngineOptions::default(), true).expect("lazy build");
        assert_eq!(r.lookup(None).map(|e| e.name.clone()), Some("a".into()));
        assert_eq!(
            r.lookup(Some("b")).map(|e| e.name.clone()),
            Some("b".into())
        );
        assert_eq!(
            r.lookup(Some("whisper-1")).map(|e| e.name.clone()),
            Some("a".into())
        );
        assert!(r.lookup(Some("c")).is_none());
        assert!(Registry::build(
            &[specs[0].clone(), specs[0].clone()],
            &EngineOptions::default(),
            true
        )
        .is_err());
    }
}
