//! GGUF (versions 2 and 3), read-only: metadata key/values and tensors.
//!
//! ```text
//! "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//! n_kv × { string key | u32 type | value }          string := u64 len, bytes
//! n_tensors × { string name | u32 n_dims | u64 ne[n_dims] (innermost first) | u32 ggml_type
//!               | u64 offset (from the data section) }
//! padding to `general.alignment` (default 32) | data
//! ```
//! Shapes are reported outermost first, like every other container here.

use crate::ggml::dtype_from_code;
use crate::tensor::{numel, RawTensor};
use crate::{map_file, Cursor, FormatError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const DEFAULT_ALIGNMENT: u64 = 32;
/// Arrays nested deeper than this are not metadata anyone writes; refusing them bounds recursion.
const MAX_DEPTH: usize = 4;

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValue {
    /// Any integer value (bool as 0/1) as i64.
    pub fn as_i64(&self) -> Option<i64> {
        Some(match *self {
            GgufValue::U8(v) => v as i64,
            GgufValue::I8(v) => v as i64,
            GgufValue::U16(v) => v as i64,
            GgufValue::I16(v) => v as i64,
            GgufValue::U32(v) => v as i64,
            GgufValue::I32(v) => v as i64,
            GgufValue::U64(v) => i64::try_from(v).ok()?,
            GgufValue::I64(v) => v,
            GgufValue::Bool(v) => v as i64,
            _ => return None,
        })
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// A parsed GGUF file.
#[derive(Clone, Debug)]
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub alignment: u64,
    /// Where the last tensor's data ends (the rest is alignment padding).
    pub data_end: usize,
    pub metadata: BTreeMap<String, GgufValue>,
    /// Tensors in file order.
    pub tensors: Vec<(String, RawTensor)>,
}

impl GgufFile {
    pub fn get(&self, name: &str) -> Option<&RawTensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

fn string(c: &mut Cursor) -> Result<String, String> {
    let n = c.u64()?;
    let n = usize::try_from(n).map_err(|_| format!("string length {n}"))?;
    let b = c.take(n)?;
    String::from_utf8(b.to_vec()).map_err(|_| "string is not UTF-8".into())
}

fn value(c: &mut Cursor, ty: u32, depth: usize) -> Result<GgufValue, String> {
    Ok(match ty {
        0 => GgufValue::U8(c.u8()?),
        1 => GgufValue::I8(c.u8()? as i8),
        2 => GgufValue::U16(c.u16()?),
        3 => GgufValue::I16(c.u16()? as i16),
        4 => GgufValue::U32(c.u32()?),
        5 => GgufValue::I32(c.i32()?),
        6 => GgufValue::F32(f32::from_bits(c.u32()?)),
        7 => match c.u8()? {
            0 => GgufValue::Bool(false),
            1 => GgufValue::Bool(true),
            b => return Err(format!("bool byte {b}")),
        },
        8 => GgufValue::String(string(c)?),
        9 => {
            if depth >= MAX_DEPTH {
                return Err("arrays nested too deep".into());
            }
            let elem = c.u32()?;
            let n = c.u64()?;
            // Every element takes at least one byte: bounds the allocation by the file.
            if n > c.remaining() as u64 {
                return Err(format!("array of {n} elements exceeds the file"));
            }
            let mut v = Vec::with_capacity(n as usize);
            for _ in 0..n {
                v.push(value(c, elem, depth + 1)?);
            }
            GgufValue::Array(v)
        }
        10 => GgufValue::U64(c.u64()?),
        11 => GgufValue::I64(c.u64()? as i64),
        12 => GgufValue::F64(f64::from_bits(c.u64()?)),
        t => return Err(format!("unknown value type {t}")),
    })
}

/// Reads a GGUF file; tensor data stays in the memory map.
pub fn read(path: &Path) -> Result<GgufFile, FormatError> {
    let map = map_file(path)?;
    let corrupt = |d: String| FormatError::corrupt(path, d);
    let mut c = Cursor::new(&map);
    let magic = c.take(4).map_err(|e| corrupt(format!("header: {e}")))?;
    if magic != b"GGUF" {
        return Err(corrupt("not a GGUF file (bad magic)".into()));
    }
    let version = c.u32().map_err(|e| corrupt(format!("header: {e}")))?;
    if !(2..=3).contains(&version) {
        return Err(FormatError::Unsupported {
            path: path.to_path_buf(),
            detail: format!("GGUF version {version} (2 and 3 are read)"),
        });
    }
    let n_tensors = c.u64().map_err(|e| corrupt(format!("header: {e}")))?;
    let n_kv = c.u64().map_err(|e| corrupt(format!("header: {e}")))?;
    // A key/value takes ≥ 13 bytes and a tensor info ≥ 24: absurd counts stop here.
    if n_kv > c.remaining() as u64 / 13 || n_tensors > c.remaining() as u64 / 24 {
        return Err(corrupt(format!(
            "header claims {n_kv} metadata entries and {n_tensors} tensors, more than the file holds"
        )));
    }
    let mut metadata = BTreeMap::new();
    for i in 0..n_kv {
        let mut key = String::new();
        let r = (|| -> Result<GgufValue, String> {
            key = string(&mut c)?;
            let ty = c.u32()?;
            value(&mut c, ty, 0)
        })();
        match r {
            Ok(v) => {
                metadata.insert(key, v);
            }
            Err(e) => return Err(corrupt(format!("metadata entry #{i} `{key}`: {e}"))),
        }
    }
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_i64() {
            Some(a) if a > 0 && (a as u64).is_power_of_two() => a as u64,
            _ => {
                return Err(corrupt(format!(
                    "general.alignment {v:?} is not a power of two"
                )))
            }
        },
    };
    struct Info {
        name: String,
        shape: Vec<usize>,
        code: u32,
        offset: u64,
    }
    let mut infos = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let mut name = String::new();
        let r = (|| -> Result<Info, String> {
            name = string(&mut c)?;
            let n_dims = c.u32()?;
            if n_dims > 8 {
                return Err(format!("{n_dims} dimensions"));
            }
            let mut ne = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                let d = c.u64()?;
                ne.push(usize::try_from(d).map_err(|_| format!("dimension {d}"))?);
            }
            let code = c.u32()?;
            let offset = c.u64()?;
            Ok(Info {
                name: name.clone(),
                shape: ne.into_iter().rev().collect(),
                code,
                offset,
            })
        })();
        match r {
            Ok(info) => infos.push(info),
            Err(detail) => {
                return Err(FormatError::BadTensor {
                    path: path.to_path_buf(),
                    tensor: format!("#{i} {name}"),
                    detail,
                })
            }
        }
    }
    let data_start = (c.pos() as u64).div_ceil(alignment) * alignment;
    let mut tensors: Vec<(String, RawTensor)> = Vec::with_capacity(infos.len());
    let mut data_end = data_start as usize;
    for info in infos {
        let bad = |d: String| FormatError::BadTensor {
            path: path.to_path_buf(),
            tensor: info.name.clone(),
            detail: d,
        };
        let dtype = dtype_from_code(info.code as i32)
            .ok_or_else(|| bad(format!("unsupported ggml type {}", info.code)))?;
        let n = numel(&info.shape).ok_or_else(|| bad("shape overflows".into()))?;
        let len = dtype
            .storage_bytes(n)
            .ok_or_else(|| bad(format!("{n} elements cannot be {dtype}")))?;
        if info.offset % alignment != 0 {
            return Err(bad(format!(
                "offset {} is not aligned to {alignment}",
                info.offset
            )));
        }
        let start = data_start
            .checked_add(info.offset)
            .and_then(|s| usize::try_from(s).ok())
            .ok_or_else(|| bad("offset overflows".into()))?;
        if start.checked_add(len).is_none_or(|end| end > map.len()) {
            return Err(bad(format!(
                "truncated: data {start}+{len} lies past the end of the {}-byte file",
                map.len()
            )));
        }
        if tensors.iter().any(|(n, _)| *n == info.name) {
            return Err(bad("duplicate tensor".into()));
        }
        let t = RawTensor::mapped(dtype, info.shape, map.clone(), start, len).map_err(bad)?;
        data_end = data_end.max(start + len);
        tensors.push((info.name, t));
    }
    Ok(GgufFile {
        path: path.to_path_buf(),
        version,
        alignment,
        data_end,
        metadata,
        tensors,
    })
}
