//! A PyTorch checkpoint reader without Python: the zip container `torch.save` writes (entries
//! stored, not compressed) and the subset of pickle (protocols 2–4) a state dict uses —
//! dicts / OrderedDicts of tensors rebuilt by `torch._utils._rebuild_tensor_v2` over persistent
//! storages `("storage", torch.<Type>Storage, key, location, numel)` kept in `<archive>/data/<key>`.
//!
//! Nothing a pickle names is ever called. The tensor builders in `GLOBALS` are interpreted; any
//! other class (a checkpoint's config, e.g. omegaconf's `DictConfig` in GigaAM's `.ckpt`) becomes
//! an inert [`V::Object`] holding its constructor arguments and `BUILD` state, which
//! [`to_json`] reads as plain data. A hostile file can make the reader build values, not run code.

use stapes_core::HostTensor;
use std::collections::BTreeMap;

type R<T> = std::result::Result<T, String>;

/// One zip entry's bytes inside the archive.
struct ZipEntry {
    start: usize,
    len: usize,
}

/// Stored entries of a zip archive, by name.
fn zip_entries(b: &[u8]) -> R<BTreeMap<String, ZipEntry>> {
    let u16_at = |o: usize| -> R<usize> {
        b.get(o..o + 2)
            .map(|s| u16::from_le_bytes([s[0], s[1]]) as usize)
            .ok_or_else(|| "truncated zip".to_string())
    };
    let u32_at = |o: usize| -> R<usize> {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
            .ok_or_else(|| "truncated zip".to_string())
    };
    let u64_at = |o: usize| -> R<usize> {
        b.get(o..o + 8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])) as usize)
            .ok_or_else(|| "truncated zip".to_string())
    };
    // End of central directory: the last "PK\5\6" within the final 64 KiB + 22 bytes.
    let lo = b.len().saturating_sub(65_557);
    let eocd = (lo..b.len().saturating_sub(21))
        .rev()
        .find(|&i| b[i..].starts_with(&[0x50, 0x4b, 0x05, 0x06]))
        .ok_or("no zip end-of-central-directory record")?;
    let mut n_entries = u16_at(eocd + 10)?;
    let mut cd = u32_at(eocd + 16)?;
    // zip64: the locator sits right before the classic record.
    if eocd >= 20 && b[eocd - 20..].starts_with(&[0x50, 0x4b, 0x06, 0x07]) {
        let rec = u64_at(eocd - 20 + 8)?;
        if !b
            .get(rec..)
            .is_some_and(|s| s.starts_with(&[0x50, 0x4b, 0x06, 0x06]))
        {
            return Err("bad zip64 end-of-central-directory record".into());
        }
        n_entries = u64_at(rec + 32)?;
        cd = u64_at(rec + 48)?;
    }
    let mut out = BTreeMap::new();
    let mut p = cd;
    for _ in 0..n_entries {
        if !b
            .get(p..)
            .is_some_and(|s| s.starts_with(&[0x50, 0x4b, 0x01, 0x02]))
        {
            return Err("bad zip central directory entry".into());
        }
        let method = u16_at(p + 10)?;
        let mut size = u32_at(p + 24)?;
        let (nl, el, cl) = (u16_at(p + 28)?, u16_at(p + 30)?, u16_at(p + 32)?);
        let mut local = u32_at(p + 42)?;
        let name = b.get(p + 46..p + 46 + nl).ok_or("truncated zip")?;
        let name = String::from_utf8_lossy(name).to_string();
        // zip64 extra field: the 0xFFFFFFFF fields follow in the order size, compressed, offset.
        let mut e = p + 46 + nl;
        let end = e + el;
        while e + 4 <= end {
            let (id, len) = (u16_at(e)?, u16_at(e + 2)?);
            if id == 1 {
                let mut q = e + 4;
                if size == 0xFFFF_FFFF {
                    size = u64_at(q)?;
                    q += 8;
                }
                if u32_at(p + 20)? == 0xFFFF_FFFF {
                    q += 8;
                }
                if local == 0xFFFF_FFFF {
                    local = u64_at(q)?;
                }
            }
            e += 4 + len;
        }
        if method != 0 {
            return Err(format!(
                "zip entry `{name}` is compressed (method {method})"
            ));
        }
        if !b
            .get(local..)
            .is_some_and(|s| s.starts_with(&[0x50, 0x4b, 0x03, 0x04]))
        {
            return Err(format!("zip entry `{name}`: bad local header"));
        }
        let start = local + 30 + u16_at(local + 26)? + u16_at(local + 28)?;
        if start.checked_add(size).is_none_or(|x| x > b.len()) {
            return Err(format!("zip entry `{name}` runs past the end"));
        }
        out.insert(name, ZipEntry { start, len: size });
        p = end + cl;
    }
    Ok(out)
}

/// A pickled value.
#[derive(Clone, Debug, PartialEq)]
enum V {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tuple(Vec<V>),
    List(Vec<V>),
    Dict(Vec<(V, V)>),
    Global(&'static str),
    /// A class or function the reader does not interpret, by `module.name`.
    Class(String),
    /// An instance of an uninterpreted class: its constructor arguments and its `BUILD` state.
    Object {
        class: String,
        args: Box<V>,
        state: Box<V>,
    },
    /// A storage: element type name ("Float", "Half", …), key, numel.
    Storage(String, String, usize),
    Tensor {
        dtype: String,
        key: String,
        offset: usize,
        shape: Vec<usize>,
        stride: Vec<usize>,
    },
    Mark,
}

/// The only callables a state dict needs.
const GLOBALS: &[&str] = &[
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_parameter",
    "torch.FloatStorage",
    "torch.HalfStorage",
    "torch.BFloat16Storage",
    "torch.DoubleStorage",
    "torch.LongStorage",
    "torch.IntStorage",
    "torch.ShortStorage",
    "torch.CharStorage",
    "torch.ByteStorage",
    "torch.BoolStorage",
];

fn global(module: &str, name: &str) -> V {
    let full = format!("{module}.{name}");
    GLOBALS
        .iter()
        .find(|g| **g == full)
        .map_or(V::Class(full), |g| V::Global(g))
}

fn as_usizes(v: &V) -> R<Vec<usize>> {
    match v {
        V::Tuple(xs) | V::List(xs) => xs
            .iter()
            .map(|x| match x {
                V::Int(i) if *i >= 0 => Ok(*i as usize),
                _ => Err(format!("expected a size, got {x:?}")),
            })
            .collect(),
        _ => Err(format!("expected a tuple of sizes, got {v:?}")),
    }
}

fn reduce(f: V, args: V) -> R<V> {
    let args = match args {
        V::Tuple(a) => a,
        other => return Err(format!("REDUCE arguments are not a tuple: {other:?}")),
    };
    match f {
        V::Global("collections.OrderedDict") => Ok(V::Dict(Vec::new())),
        V::Global("torch._utils._rebuild_tensor_v2") => {
            let [storage, offset, size, stride, ..] = &args[..] else {
                return Err("_rebuild_tensor_v2 takes at least 4 arguments".into());
            };
            let V::Storage(dtype, key, _) = storage else {
                return Err(format!("_rebuild_tensor_v2 over {storage:?}"));
            };
            let V::Int(offset) = offset else {
                return Err("bad storage offset".into());
            };
            Ok(V::Tensor {
                dtype: dtype.clone(),
                key: key.clone(),
                offset: (*offset).max(0) as usize,
                shape: as_usizes(size)?,
                stride: as_usizes(stride)?,
            })
        }
        V::Global("torch._utils._rebuild_parameter") => args
            .into_iter()
            .next()
            .ok_or_else(|| "_rebuild_parameter without a tensor".to_string()),
        // `defaultdict(factory)` and friends: only their items (set afterwards) matter here.
        V::Class(c) if c == "collections.defaultdict" => Ok(V::Dict(Vec::new())),
        V::Class(class) => Ok(V::Object {
            class,
            args: Box::new(V::Tuple(args)),
            state: Box::new(V::None),
        }),
        other => Err(format!("cannot call {other:?}")),
    }
}

/// Runs the pickle machine over `b`; returns the top-level object.
fn unpickle(b: &[u8]) -> R<V> {
    let mut stack: Vec<V> = Vec::new();
    let mut memo: BTreeMap<usize, V> = BTreeMap::new();
    let mut i = 0usize;
    let take = |i: &mut usize, n: usize| -> R<&[u8]> {
        let s = b.get(*i..*i + n).ok_or("truncated pickle")?;
        *i += n;
        Ok(s)
    };
    let pop = |stack: &mut Vec<V>| {
        stack
            .pop()
            .ok_or_else(|| "pickle stack underflow".to_string())
    };
    let pop_mark = |stack: &mut Vec<V>| -> R<Vec<V>> {
        let m = stack
            .iter()
            .rposition(|v| *v == V::Mark)
            .ok_or("pickle MARK missing")?;
        let items = stack.split_off(m + 1);
        stack.pop();
        Ok(items)
    };
    let line = |i: &mut usize| -> R<String> {
        let rest = b.get(*i..).ok_or("truncated pickle")?;
        let n = rest
            .iter()
            .position(|&c| c == b'\n')
            .ok_or("unterminated pickle line")?;
        *i += n + 1;
        Ok(String::from_utf8_lossy(&rest[..n]).to_string())
    };
    loop {
        let op = *b.get(i).ok_or("pickle ends without STOP")?;
        i += 1;
        match op {
            0x80 => i += 1,                 // PROTO
            0x95 => i += 8,                 // FRAME
            b'.' => return pop(&mut stack), // STOP
            b'(' => stack.push(V::Mark),
            b'N' => stack.push(V::None),
            0x88 => stack.push(V::Bool(true)),
            0x89 => stack.push(V::Bool(false)),
            b'}' => stack.push(V::Dict(Vec::new())),
            b']' => stack.push(V::List(Vec::new())),
            b')' => stack.push(V::Tuple(Vec::new())),
            b'd' => {
                let items = pop_mark(&mut stack)?;
                let mut it = items.into_iter();
                let mut d = Vec::new();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    d.push((k, v));
                }
                stack.push(V::Dict(d));
            }
            b'l' => {
                let items = pop_mark(&mut stack)?;
                stack.push(V::List(items));
            }
            b't' => {
                let items = pop_mark(&mut stack)?;
                stack.push(V::Tuple(items));
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                if stack.len() < n {
                    return Err("pickle stack underflow".into());
                }
                let items = stack.split_off(stack.len() - n);
                stack.push(V::Tuple(items));
            }
            b'J' => {
                let s = take(&mut i, 4)?;
                stack.push(V::Int(i32::from_le_bytes([s[0], s[1], s[2], s[3]]) as i64));
            }
            b'K' => stack.push(V::Int(take(&mut i, 1)?[0] as i64)),
            b'M' => {
                let s = take(&mut i, 2)?;
                stack.push(V::Int(u16::from_le_bytes([s[0], s[1]]) as i64));
            }
            0x8a => {
                let n = take(&mut i, 1)?[0] as usize;
                let s = take(&mut i, n)?;
                if n > 8 {
                    return Err("pickle LONG1 wider than 64 bits".into());
                }
                let mut v: i64 = 0;
                for (k, &byte) in s.iter().enumerate() {
                    v |= (byte as i64) << (8 * k);
                }
                if n > 0 && n < 8 && s[n - 1] & 0x80 != 0 {
                    v -= 1i64 << (8 * n);
                }
                stack.push(V::Int(v));
            }
            b'G' => {
                let s = take(&mut i, 8)?;
                stack.push(V::Float(f64::from_be_bytes(s.try_into().unwrap_or([0; 8]))));
            }
            b'X' | 0x8c | b'T' | b'U' | b'B' | b'C' | 0x8d | 0x8e => {
                let n = match op {
                    0x8c | b'U' | b'C' => take(&mut i, 1)?[0] as usize,
                    0x8d | 0x8e => {
                        let s = take(&mut i, 8)?;
                        u64::from_le_bytes(s.try_into().unwrap_or([0; 8])) as usize
                    }
                    _ => {
                        let s = take(&mut i, 4)?;
                        u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize
                    }
                };
                let s = take(&mut i, n)?;
                stack.push(V::Str(String::from_utf8_lossy(s).to_string()));
            }
            b'c' => {
                let module = line(&mut i)?;
                let name = line(&mut i)?;
                stack.push(global(&module, &name));
            }
            0x93 => {
                let name = pop(&mut stack)?;
                let module = pop(&mut stack)?;
                match (module, name) {
                    (V::Str(m), V::Str(n)) => stack.push(global(&m, &n)),
                    _ => return Err("STACK_GLOBAL without strings".into()),
                }
            }
            b'q' => {
                let k = take(&mut i, 1)?[0] as usize;
                memo.insert(k, stack.last().cloned().ok_or("memo of empty stack")?);
            }
            b'r' => {
                let s = take(&mut i, 4)?;
                let k = u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize;
                memo.insert(k, stack.last().cloned().ok_or("memo of empty stack")?);
            }
            0x94 => {
                let k = memo.len();
                memo.insert(k, stack.last().cloned().ok_or("memo of empty stack")?);
            }
            b'h' | b'j' => {
                let k = if op == b'h' {
                    take(&mut i, 1)?[0] as usize
                } else {
                    let s = take(&mut i, 4)?;
                    u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize
                };
                stack.push(memo.get(&k).cloned().ok_or("pickle memo key missing")?);
            }
            b'Q' => {
                let pid = pop(&mut stack)?;
                let V::Tuple(t) = pid else {
                    return Err("persistent id is not a tuple".into());
                };
                match &t[..] {
                    [V::Str(tag), V::Global(ty), V::Str(key), _, V::Int(n), ..]
                        if tag == "storage" =>
                    {
                        let dtype = ty
                            .trim_start_matches("torch.")
                            .trim_end_matches("Storage")
                            .to_string();
                        stack.push(V::Storage(dtype, key.clone(), (*n).max(0) as usize));
                    }
                    _ => return Err(format!("unknown persistent id {t:?}")),
                }
            }
            b'R' | 0x81 => {
                let args = pop(&mut stack)?;
                let f = pop(&mut stack)?;
                stack.push(reduce(f, args)?);
            }
            b'b' => {
                // BUILD: an object's state; kept on uninterpreted objects (a config's fields),
                // dropped elsewhere (an OrderedDict's `_metadata`: the tensors do not need it).
                let st = pop(&mut stack)?;
                if let Some(V::Object { state, .. }) = stack.last_mut() {
                    **state = st;
                }
            }
            b's' | b'u' => {
                let items = if op == b's' {
                    let v = pop(&mut stack)?;
                    let k = pop(&mut stack)?;
                    vec![k, v]
                } else {
                    pop_mark(&mut stack)?
                };
                let Some(V::Dict(d)) = stack.last_mut() else {
                    return Err("SETITEMS on a non-dict".into());
                };
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    d.push((k, v));
                }
            }
            b'a' | b'e' => {
                let items = if op == b'a' {
                    vec![pop(&mut stack)?]
                } else {
                    pop_mark(&mut stack)?
                };
                let Some(V::List(l)) = stack.last_mut() else {
                    return Err("APPENDS on a non-list".into());
                };
                l.extend(items);
            }
            other => return Err(format!("pickle opcode 0x{other:02x} is not supported")),
        }
    }
}

/// Decodes one little-endian storage element.
type Convert = fn(&[u8]) -> f32;

fn element(dtype: &str) -> R<(usize, Convert)> {
    Ok(match dtype {
        "Float" => (4, |s| f32::from_le_bytes([s[0], s[1], s[2], s[3]])),
        "Half" => (2, |s| half::f16::from_le_bytes([s[0], s[1]]).to_f32()),
        "BFloat16" => (2, |s| half::bf16::from_le_bytes([s[0], s[1]]).to_f32()),
        "Double" => (8, |s| {
            f64::from_le_bytes(s.try_into().unwrap_or([0; 8])) as f32
        }),
        "Long" => (8, |s| {
            i64::from_le_bytes(s.try_into().unwrap_or([0; 8])) as f32
        }),
        "Int" => (4, |s| i32::from_le_bytes([s[0], s[1], s[2], s[3]]) as f32),
        "Short" => (2, |s| i16::from_le_bytes([s[0], s[1]]) as f32),
        "Char" => (1, |s| s[0] as i8 as f32),
        "Byte" | "Bool" => (1, |s| s[0] as f32),
        other => return Err(format!("storage type {other} is not supported")),
    })
}

/// Reads the tensors of a `torch.save`d state dict (`model_weights.ckpt`) as f32.
pub fn read_state_dict(bytes: &[u8]) -> R<BTreeMap<String, HostTensor>> {
    Ok(read_checkpoint(bytes)?.tensors)
}

/// What a `torch.save`d checkpoint holds: its tensors, and the plain-data entries beside them.
pub struct Checkpoint {
    /// The state dict's tensors as f32 (under `"state_dict"` when the file nests them there).
    pub tensors: BTreeMap<String, HostTensor>,
    /// The top-level entries that are not tensors or the state dict (a config, hyperparameters),
    /// as JSON (see [`to_json`]); an empty object for a bare state dict.
    pub extra: serde_json::Value,
}

/// Reads a `torch.save` zip checkpoint: a dict of tensors, or a dict holding one under
/// `"state_dict"` (Lightning's layout, GigaAM's `{"cfg", "state_dict"}`).
pub fn read_checkpoint(bytes: &[u8]) -> R<Checkpoint> {
    let entries = zip_entries(bytes)?;
    let (pkl_name, pkl) = entries
        .iter()
        .find(|(n, _)| n.ends_with("/data.pkl") || n.as_str() == "data.pkl")
        .ok_or("no data.pkl in the checkpoint (a pre-1.6 legacy torch.save file?)")?;
    let prefix = &pkl_name[..pkl_name.len() - "data.pkl".len()];
    let top = unpickle(&bytes[pkl.start..pkl.start + pkl.len])?;
    let V::Dict(items) = top else {
        return Err("the checkpoint is not a dict of tensors".into());
    };
    let nested = items
        .iter()
        .position(|(k, v)| *k == V::Str("state_dict".into()) && matches!(v, V::Dict(_)));
    let mut extra = serde_json::Map::new();
    let items = match nested {
        Some(at) => {
            let mut items = items;
            let (_, inner) = items.remove(at);
            for (k, v) in items {
                if let V::Str(k) = k {
                    extra.insert(k, to_json(&v));
                }
            }
            match inner {
                V::Dict(d) => d,
                _ => Vec::new(),
            }
        }
        None => items,
    };
    let mut out = BTreeMap::new();
    for (k, v) in items {
        let (
            V::Str(name),
            V::Tensor {
                dtype,
                key,
                offset,
                shape,
                stride,
            },
        ) = (k, v)
        else {
            continue;
        };
        let (size, conv) = element(&dtype)?;
        let e = entries
            .get(&format!("{prefix}data/{key}"))
            .ok_or_else(|| format!("tensor `{name}`: storage {key} missing"))?;
        let data = &bytes[e.start..e.start + e.len];
        // Bound every index before allocating: a damaged pickle may claim any shape.
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| format!("tensor `{name}`: shape {shape:?} overflows"))?;
        let last = shape.iter().zip(&stride).try_fold(offset, |a, (&d, &s)| {
            a.checked_add(d.saturating_sub(1).checked_mul(s)?)
        });
        if stride.len() != shape.len() || (n > 0 && last.is_none_or(|l| l >= data.len() / size)) {
            return Err(format!(
                "tensor `{name}` ({shape:?}, strides {stride:?}) reads past its storage"
            ));
        }
        // Gather through the strides (state dicts are almost always contiguous, but views exist).
        let mut vals = Vec::with_capacity(n);
        let mut idx = vec![0usize; shape.len()];
        for _ in 0..n {
            let el = offset + idx.iter().zip(&stride).map(|(i, s)| i * s).sum::<usize>();
            let s = data
                .get(el * size..el * size + size)
                .ok_or_else(|| format!("tensor `{name}` reads past its storage"))?;
            vals.push(conv(s));
            for d in (0..shape.len()).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        let t = HostTensor::new(shape, vals).map_err(|e| format!("tensor `{name}`: {e}"))?;
        out.insert(name, t);
    }
    Ok(Checkpoint {
        tensors: out,
        extra: serde_json::Value::Object(extra),
    })
}

/// A pickled value as plain data. omegaconf containers (`DictConfig`, `ListConfig`) become their
/// `_content`, its value nodes their `_val`; dicts with non-string keys get the keys' JSON text.
/// Anything else that is not data (tensors, other objects, classes) becomes `null`.
fn to_json(v: &V) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        V::None | V::Mark | V::Global(_) | V::Class(_) => J::Null,
        V::Storage(..) | V::Tensor { .. } => J::Null,
        V::Bool(b) => J::Bool(*b),
        V::Int(i) => J::from(*i),
        V::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        V::Str(s) => J::String(s.clone()),
        V::Tuple(xs) | V::List(xs) => J::Array(xs.iter().map(to_json).collect()),
        V::Dict(items) => J::Object(
            items
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        V::Str(s) => s.clone(),
                        other => to_json(other).to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        V::Object { class, state, .. } => {
            let field = |name: &str| match state.as_ref() {
                V::Dict(items) => items
                    .iter()
                    .find(|(k, _)| *k == V::Str(name.into()))
                    .map(|(_, v)| to_json(v)),
                _ => None,
            };
            if class.starts_with("omegaconf.dictconfig.")
                || class.starts_with("omegaconf.listconfig.")
            {
                field("_content").unwrap_or(J::Null)
            } else if class.starts_with("omegaconf.nodes.") {
                field("_val").unwrap_or(J::Null)
            } else {
                J::Null
            }
        }
    }
}
