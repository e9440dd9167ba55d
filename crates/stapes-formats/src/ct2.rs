//! CTranslate2 `model.bin` (faster-whisper's format).
//!
//! ```text
//! u32 version | str spec_name | u32 spec_revision | u32 n_vars
//! n_vars × { str name | u8 rank | u32 dims[rank] | u8 dtype | u32 n_bytes | data }
//! u32 n_aliases | n_aliases × { str alias | str target }
//! str := u16 length including the NUL, the bytes, NUL
//! ```
//! Rank-0 variables are configuration values (`decoder/num_heads`, flags …). The file must be
//! consumed exactly: trailing bytes mean we misread something.

use crate::tensor::{DType, RawTensor};
use crate::{map_file, Cursor, FormatError};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Binary versions whose variable records carry a dtype byte and a byte count.
const MIN_VERSION: u32 = 4;
const MAX_VERSION: u32 = 6;

/// A parsed `model.bin`.
#[derive(Debug)]
pub struct Ct2File {
    pub path: PathBuf,
    pub version: u32,
    pub spec: String,
    pub spec_revision: u32,
    /// Every variable, rank-0 configuration values included, by name.
    pub variables: BTreeMap<String, RawTensor>,
    /// alias → target (e.g. `decoder/projection/weight` → `decoder/embeddings/weight`).
    pub aliases: BTreeMap<String, String>,
}

impl Ct2File {
    /// A variable by name, following an alias.
    pub fn get(&self, name: &str) -> Option<&RawTensor> {
        self.variables
            .get(name)
            .or_else(|| self.aliases.get(name).and_then(|t| self.variables.get(t)))
    }

    /// A rank-0 configuration value as an integer.
    pub fn scalar_i64(&self, name: &str) -> Option<i64> {
        self.get(name)
            .filter(|t| t.shape.is_empty())
            .and_then(|t| t.scalar_f64())
            .map(|v| v as i64)
    }

    /// Variables of rank ≥ 1 (the weights).
    pub fn tensors(&self) -> impl Iterator<Item = (&String, &RawTensor)> {
        self.variables.iter().filter(|(_, t)| !t.shape.is_empty())
    }

    /// Rank-0 variables (configuration values and flags).
    pub fn scalars(&self) -> impl Iterator<Item = (&String, &RawTensor)> {
        self.variables.iter().filter(|(_, t)| t.shape.is_empty())
    }
}

fn dtype_from_code(code: u8) -> Option<DType> {
    Some(match code {
        0 => DType::F32,
        1 => DType::I8,
        2 => DType::I16,
        3 => DType::I32,
        4 => DType::F16,
        5 => DType::BF16,
        _ => return None,
    })
}

fn dtype_code(dtype: DType) -> Option<u8> {
    Some(match dtype {
        DType::F32 => 0,
        DType::I8 => 1,
        DType::I16 => 2,
        DType::I32 => 3,
        DType::F16 => 4,
        DType::BF16 => 5,
        _ => return None,
    })
}

/// Reads and validates a `model.bin`; tensor data stays in the memory map.
pub fn read(path: &Path) -> Result<Ct2File, FormatError> {
    let map = map_file(path)?;
    parse(path, map)
}

fn parse(path: &Path, map: Arc<memmap2::Mmap>) -> Result<Ct2File, FormatError> {
    let corrupt = |detail: String| FormatError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let mut c = Cursor::new(&map);
    let version = c.u32().map_err(|e| corrupt(format!("header: {e}")))?;
    if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
        return Err(FormatError::Unsupported {
            path: path.to_path_buf(),
            detail: format!(
                "CTranslate2 binary version {version} (supported: {MIN_VERSION}..={MAX_VERSION}); not a CTranslate2 model.bin?"
            ),
        });
    }
    let spec = c
        .str16()
        .map_err(|e| corrupt(format!("header: spec name: {e}")))?;
    let spec_revision = c
        .u32()
        .map_err(|e| corrupt(format!("header: spec revision: {e}")))?;
    let n_vars = c
        .u32()
        .map_err(|e| corrupt(format!("header: variable count: {e}")))? as usize;
    // Each record needs at least 2+1+1+1+4 bytes: rejects absurd counts before looping.
    if n_vars > c.remaining() / 9 {
        return Err(corrupt(format!(
            "header claims {n_vars} variables, more than the file can hold"
        )));
    }
    let mut variables = BTreeMap::new();
    for i in 0..n_vars {
        let mut name = String::new();
        let rec = (|| -> Result<RawTensor, String> {
            name = c.str16().map_err(|e| format!("name: {e}"))?;
            let rank = c.u8()? as usize;
            let mut shape = Vec::with_capacity(rank);
            for _ in 0..rank {
                shape.push(c.u32()? as usize);
            }
            let code = c.u8()?;
            let dtype =
                dtype_from_code(code).ok_or_else(|| format!("unknown dtype code {code}"))?;
            let n_bytes = c.u32()? as usize;
            let start = c.pos();
            c.skip(n_bytes).map_err(|e| format!("data: {e}"))?;
            RawTensor::mapped(dtype, shape, map.clone(), start, n_bytes)
        })();
        match rec {
            Ok(t) => {
                if variables.insert(name.clone(), t).is_some() {
                    return Err(FormatError::BadTensor {
                        path: path.to_path_buf(),
                        tensor: format!("#{i} {name}"),
                        detail: "duplicate variable name".into(),
                    });
                }
            }
            Err(detail) => {
                let tensor = if name.is_empty() {
                    format!("#{i} of {n_vars}")
                } else {
                    format!("#{i} of {n_vars} {name}")
                };
                return Err(FormatError::BadTensor {
                    path: path.to_path_buf(),
                    tensor,
                    detail,
                });
            }
        }
    }
    let mut aliases = BTreeMap::new();
    let n_aliases = c
        .u32()
        .map_err(|e| corrupt(format!("alias count after the last variable: {e}")))?
        as usize;
    for i in 0..n_aliases {
        let alias = c.str16().map_err(|e| corrupt(format!("alias #{i}: {e}")))?;
        let target = c
            .str16()
            .map_err(|e| corrupt(format!("alias #{i} `{alias}` target: {e}")))?;
        if !variables.contains_key(&target) {
            return Err(corrupt(format!(
                "alias `{alias}` points at missing variable `{target}`"
            )));
        }
        aliases.insert(alias, target);
    }
    if c.remaining() != 0 {
        return Err(corrupt(format!(
            "{} unexpected bytes after the aliases",
            c.remaining()
        )));
    }
    Ok(Ct2File {
        path: path.to_path_buf(),
        version,
        spec,
        spec_revision,
        variables,
        aliases,
    })
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Result<(), String> {
    let len = u16::try_from(s.len() + 1).map_err(|_| format!("name too long: {s}"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    Ok(())
}

/// Writes a `model.bin` (binary version 6). Variables are written in name order, as CTranslate2's
/// converter does.
pub fn write(
    path: &Path,
    spec: &str,
    spec_revision: u32,
    variables: &BTreeMap<String, RawTensor>,
    aliases: &BTreeMap<String, String>,
) -> Result<(), FormatError> {
    let bad = |tensor: &str, detail: String| FormatError::BadTensor {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        detail,
    };
    let io = |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let mut head = Vec::new();
    head.extend_from_slice(&MAX_VERSION.to_le_bytes());
    put_str(&mut head, spec).map_err(|e| bad(spec, e))?;
    head.extend_from_slice(&spec_revision.to_le_bytes());
    head.extend_from_slice(&(variables.len() as u32).to_le_bytes());
    f.write_all(&head).map_err(io)?;
    for (name, t) in variables {
        let mut rec = Vec::new();
        put_str(&mut rec, name).map_err(|e| bad(name, e))?;
        rec.push(u8::try_from(t.shape.len()).map_err(|_| bad(name, "rank > 255".into()))?);
        for &d in &t.shape {
            let d = u32::try_from(d).map_err(|_| bad(name, "dimension > u32".into()))?;
            rec.extend_from_slice(&d.to_le_bytes());
        }
        let code = dtype_code(t.dtype)
            .ok_or_else(|| bad(name, format!("{} cannot be stored in CTranslate2", t.dtype)))?;
        rec.push(code);
        let n = u32::try_from(t.bytes().len()).map_err(|_| bad(name, "more than 4 GiB".into()))?;
        rec.extend_from_slice(&n.to_le_bytes());
        f.write_all(&rec).map_err(io)?;
        f.write_all(t.bytes()).map_err(io)?;
    }
    let mut tail = Vec::new();
    tail.extend_from_slice(&(aliases.len() as u32).to_le_bytes());
    for (a, t) in aliases {
        put_str(&mut tail, a).map_err(|e| bad(a, e))?;
        put_str(&mut tail, t).map_err(|e| bad(a, e))?;
    }
    f.write_all(&tail).map_err(io)?;
    f.flush().map_err(io)
}
