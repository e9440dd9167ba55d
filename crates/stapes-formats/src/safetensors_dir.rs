//! safetensors files and HF model directories (`model.safetensors`, or shards listed in
//! `model.safetensors.index.json`), read and written.
//!
//! ```text
//! u64 header_len | JSON header { name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {..} }
//! | data (offsets relative to the end of the header)
//! ```

use crate::tensor::{DType, RawTensor};
use crate::{map_file, FormatError};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const INDEX_FILE: &str = "model.safetensors.index.json";
pub const SINGLE_FILE: &str = "model.safetensors";
/// Header size limit (the format's own reference implementation uses 100 MB).
const MAX_HEADER: u64 = 100_000_000;

/// Tensors of one file or of every shard of a directory.
#[derive(Clone, Debug, Default)]
pub struct Safetensors {
    /// The file, or the directory for a sharded checkpoint.
    pub path: PathBuf,
    pub tensors: BTreeMap<String, RawTensor>,
    /// `__metadata__` string pairs (of the first file for shards).
    pub metadata: BTreeMap<String, String>,
}

fn dtype_from_name(s: &str) -> Option<DType> {
    Some(match s {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "I8" => DType::I8,
        "U8" => DType::U8,
        "I16" => DType::I16,
        "I32" => DType::I32,
        "I64" => DType::I64,
        _ => return None,
    })
}

fn dtype_name(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "F32",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I8 => "I8",
        DType::U8 => "U8",
        DType::I16 => "I16",
        DType::I32 => "I32",
        DType::I64 => "I64",
        _ => return None,
    })
}

/// Reads one `.safetensors` file; data stays in the memory map.
pub fn read_file(path: &Path) -> Result<Safetensors, FormatError> {
    let map = map_file(path)?;
    let corrupt = |d: String| FormatError::corrupt(path, d);
    if map.len() < 8 {
        return Err(corrupt(format!(
            "{} bytes, too short for a safetensors header",
            map.len()
        )));
    }
    let n = u64::from_le_bytes([
        map[0], map[1], map[2], map[3], map[4], map[5], map[6], map[7],
    ]);
    if n > MAX_HEADER || n > map.len() as u64 - 8 {
        return Err(corrupt(format!(
            "header length {n} exceeds the {}-byte file",
            map.len()
        )));
    }
    let data_start = 8 + n as usize;
    let header: Value = serde_json::from_slice(&map[8..data_start])
        .map_err(|e| corrupt(format!("header JSON: {e}")))?;
    let obj = header
        .as_object()
        .ok_or_else(|| corrupt("header is not a JSON object".into()))?;
    let data_len = map.len() - data_start;
    let mut out = Safetensors {
        path: path.to_path_buf(),
        ..Default::default()
    };
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for (name, v) in obj {
        if name == "__metadata__" {
            if let Some(m) = v.as_object() {
                for (k, x) in m {
                    out.metadata.insert(
                        k.clone(),
                        x.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| x.to_string()),
                    );
                }
            }
            continue;
        }
        let bad = |d: String| FormatError::BadTensor {
            path: path.to_path_buf(),
            tensor: name.clone(),
            detail: d,
        };
        let dt = v
            .get("dtype")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no dtype".into()))?;
        let dtype = dtype_from_name(dt).ok_or_else(|| bad(format!("unsupported dtype {dt}")))?;
        let shape = v
            .get("shape")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no shape".into()))?
            .iter()
            .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| bad("shape holds a non-integer".into()))?;
        let off = v
            .get("data_offsets")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no data_offsets".into()))?;
        let (b, e) = match (
            off.first().and_then(Value::as_u64),
            off.get(1).and_then(Value::as_u64),
            off.len(),
        ) {
            (Some(b), Some(e), 2) if b <= e && e <= data_len as u64 => (b as usize, e as usize),
            _ => {
                return Err(bad(format!(
                    "data_offsets {} outside the {data_len} data bytes (truncated file?)",
                    Value::Array(off.clone())
                )))
            }
        };
        let t = RawTensor::mapped(dtype, shape, map.clone(), data_start + b, e - b).map_err(bad)?;
        spans.push((b, e));
        out.tensors.insert(name.clone(), t);
    }
    spans.sort_unstable();
    if spans.windows(2).any(|w| w[1].0 < w[0].1) {
        return Err(corrupt("tensor data ranges overlap".into()));
    }
    Ok(out)
}

/// Reads an HF directory: the shards named by `model.safetensors.index.json`, else
/// `model.safetensors`, else every `*.safetensors` in it.
pub fn read_dir(dir: &Path) -> Result<Safetensors, FormatError> {
    let index = dir.join(INDEX_FILE);
    let mut files: Vec<PathBuf> = Vec::new();
    let mut weight_map: Option<BTreeMap<String, String>> = None;
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| FormatError::io(&index, e))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| FormatError::corrupt(&index, format!("invalid JSON: {e}")))?;
        let wm = v
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| FormatError::corrupt(&index, "no weight_map"))?;
        let mut m = BTreeMap::new();
        for (k, f) in wm {
            let f = f.as_str().ok_or_else(|| {
                FormatError::corrupt(&index, format!("weight_map[{k}] is not a file name"))
            })?;
            if f.contains('/') || f.contains('\\') || f.starts_with('.') {
                return Err(FormatError::corrupt(
                    &index,
                    format!("shard name `{f}` leaves the directory"),
                ));
            }
            if !files.iter().any(|p| p.file_name().is_some_and(|n| n == f)) {
                files.push(dir.join(f));
            }
            m.insert(k.clone(), f.to_string());
        }
        weight_map = Some(m);
    } else if dir.join(SINGLE_FILE).is_file() {
        files.push(dir.join(SINGLE_FILE));
    } else {
        let rd = std::fs::read_dir(dir).map_err(|e| FormatError::io(dir, e))?;
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().ends_with(".safetensors") {
                files.push(e.path());
            }
        }
        files.sort();
    }
    if files.is_empty() {
        return Err(FormatError::corrupt(dir, "no .safetensors file"));
    }
    let mut out = Safetensors {
        path: dir.to_path_buf(),
        ..Default::default()
    };
    for (i, f) in files.iter().enumerate() {
        let part = read_file(f)?;
        if i == 0 {
            out.metadata = part.metadata;
        }
        for (name, t) in part.tensors {
            if let Some(wm) = &weight_map {
                let listed = wm.get(&name).map(String::as_str);
                let here = f.file_name().and_then(|n| n.to_str());
                if listed != here {
                    return Err(FormatError::BadTensor {
                        path: f.clone(),
                        tensor: name,
                        detail: format!("found in this shard but the index says {listed:?}"),
                    });
                }
            }
            if out.tensors.insert(name.clone(), t).is_some() {
                return Err(FormatError::BadTensor {
                    path: f.clone(),
                    tensor: name,
                    detail: "stored in two shards".into(),
                });
            }
        }
    }
    if let Some(wm) = &weight_map {
        if let Some((name, file)) = wm.iter().find(|(n, _)| !out.tensors.contains_key(*n)) {
            return Err(FormatError::BadTensor {
                path: dir.join(file),
                tensor: name.clone(),
                detail: "listed in the index but not in the shard".into(),
            });
        }
    }
    Ok(out)
}

/// Writes one `.safetensors` file (header padded to 8 bytes, tensors in name order).
pub fn write_file(
    path: &Path,
    tensors: &BTreeMap<String, RawTensor>,
    metadata: &BTreeMap<String, String>,
) -> Result<(), FormatError> {
    let mut header = Map::new();
    if !metadata.is_empty() {
        header.insert("__metadata__".into(), json!(metadata));
    }
    let mut offset = 0usize;
    for (name, t) in tensors {
        let dt = dtype_name(t.dtype).ok_or_else(|| FormatError::BadTensor {
            path: path.to_path_buf(),
            tensor: name.clone(),
            detail: format!("{} cannot be stored in safetensors", t.dtype),
        })?;
        let end = offset + t.bytes().len();
        header.insert(
            name.clone(),
            json!({"dtype": dt, "shape": t.shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut h = serde_json::to_vec(&Value::Object(header))
        .map_err(|e| FormatError::corrupt(path, e.to_string()))?;
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let io = |source| FormatError::io(path, source);
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    w.write_all(&(h.len() as u64).to_le_bytes()).map_err(io)?;
    w.write_all(&h).map_err(io)?;
    for t in tensors.values() {
        w.write_all(t.bytes()).map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Writes tensors into `dir` as `model.safetensors`, or, when they exceed `max_shard_bytes`, as
/// `model-0000i-of-0000n.safetensors` shards with an index (HF's layout).
pub fn write_dir(
    dir: &Path,
    tensors: &BTreeMap<String, RawTensor>,
    metadata: &BTreeMap<String, String>,
    max_shard_bytes: Option<usize>,
) -> Result<(), FormatError> {
    std::fs::create_dir_all(dir).map_err(|e| FormatError::io(dir, e))?;
    let total: usize = tensors.values().map(|t| t.bytes().len()).sum();
    let limit = max_shard_bytes.unwrap_or(usize::MAX).max(1);
    if total <= limit {
        return write_file(&dir.join(SINGLE_FILE), tensors, metadata);
    }
    let mut shards: Vec<BTreeMap<String, RawTensor>> = vec![BTreeMap::new()];
    let mut size = 0usize;
    for (name, t) in tensors {
        let n = t.bytes().len();
        if size > 0 && size + n > limit {
            shards.push(BTreeMap::new());
            size = 0;
        }
        size += n;
        if let Some(last) = shards.last_mut() {
            last.insert(name.clone(), t.clone());
        }
    }
    let count = shards.len();
    let mut weight_map = Map::new();
    for (i, shard) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-{:05}.safetensors", i + 1, count);
        write_file(&dir.join(&file), shard, metadata)?;
        for name in shard.keys() {
            weight_map.insert(name.clone(), json!(file));
        }
    }
    let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    let p = dir.join(INDEX_FILE);
    let text = serde_json::to_string_pretty(&index)
        .map_err(|e| FormatError::corrupt(&p, e.to_string()))?;
    std::fs::write(&p, text).map_err(|e| FormatError::io(&p, e))
}
