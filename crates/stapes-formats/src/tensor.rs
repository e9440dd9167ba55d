//! A named tensor as a container stores it: dtype, shape and the raw little-endian bytes.
//!
//! The bytes stay in the memory map where the container allows it, so a 150 MB checkpoint is not
//! copied until a caller asks for f32 (or f16) values.

use half::{bf16, f16};
use memmap2::Mmap;
use std::sync::Arc;

/// Element types the containers we read can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    I8,
    I16,
    I32,
    I64,
    U8,
    /// ggml Q8_0: blocks of 32 along the innermost axis, one f16 scale then 32 i8 values.
    Q8_0,
}

/// Values per ggml Q8_0 block.
pub const Q8_0_BLOCK: usize = 32;
const Q8_0_BLOCK_BYTES: usize = 2 + Q8_0_BLOCK;

impl DType {
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::Q8_0 => "q8_0",
        }
    }

    /// Bytes needed for `n` elements; `None` on overflow or for a Q8_0 count that is not a whole
    /// number of blocks.
    pub fn storage_bytes(self, n: usize) -> Option<usize> {
        let size = match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 | DType::U8 => 1,
            DType::I64 => 8,
            DType::Q8_0 => {
                if !n.is_multiple_of(Q8_0_BLOCK) {
                    return None;
                }
                return (n / Q8_0_BLOCK).checked_mul(Q8_0_BLOCK_BYTES);
            }
        };
        n.checked_mul(size)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone)]
enum Storage {
    Owned(Arc<Vec<u8>>),
    Mapped {
        map: Arc<Mmap>,
        start: usize,
        len: usize,
    },
}

/// One tensor: dtype, shape (outermost first, row-major) and its raw bytes.
#[derive(Clone)]
pub struct RawTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    storage: Storage,
}

impl std::fmt::Debug for RawTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawTensor({} {:?})", self.dtype, self.shape)
    }
}

/// Element count of a shape, `None` on overflow.
pub fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl RawTensor {
    /// Takes ownership of `bytes`; the length must match dtype × shape exactly.
    pub fn from_bytes(dtype: DType, shape: Vec<usize>, bytes: Vec<u8>) -> Result<Self, String> {
        check_len(dtype, &shape, bytes.len())?;
        Ok(Self {
            dtype,
            shape,
            storage: Storage::Owned(Arc::new(bytes)),
        })
    }

    /// A view into a memory map; the range must lie inside it and match dtype × shape.
    pub fn mapped(
        dtype: DType,
        shape: Vec<usize>,
        map: Arc<Mmap>,
        start: usize,
        len: usize,
    ) -> Result<Self, String> {
        check_len(dtype, &shape, len)?;
        match start.checked_add(len) {
            Some(end) if end <= map.len() => {}
            _ => {
                return Err(format!(
                    "data range {start}+{len} lies outside the {}-byte file",
                    map.len()
                ))
            }
        }
        Ok(Self {
            dtype,
            shape,
            storage: Storage::Mapped { map, start, len },
        })
    }

    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Result<Self, String> {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::from_bytes(DType::F32, shape, bytes)
    }

    pub fn from_f16(shape: Vec<usize>, values: &[f16]) -> Result<Self, String> {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::from_bytes(DType::F16, shape, bytes)
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Owned(v) => v.as_slice(),
            Storage::Mapped { map, start, len } => &map[*start..*start + *len],
        }
    }

    pub fn numel(&self) -> usize {
        // Checked when the tensor was built.
        numel(&self.shape).unwrap_or(0)
    }

    /// Values as f32 (integers converted, Q8_0 dequantized).
    pub fn to_f32(&self) -> Vec<f32> {
        let b = self.bytes();
        match self.dtype {
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            DType::F16 => b
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::BF16 => b
                .chunks_exact(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::I8 => b.iter().map(|&x| x as i8 as f32).collect(),
            DType::U8 => b.iter().map(|&x| x as f32).collect(),
            DType::I16 => b
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as f32)
                .collect(),
            DType::I32 => b
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)
                .collect(),
            DType::I64 => b
                .chunks_exact(8)
                .map(|c| {
                    i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
                })
                .collect(),
            DType::Q8_0 => {
                let mut out = Vec::with_capacity(self.numel());
                for block in b.chunks_exact(Q8_0_BLOCK_BYTES) {
                    let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
                    out.extend(block[2..].iter().map(|&q| q as i8 as f32 * d));
                }
                out
            }
        }
    }

    /// Values as f16: f16 data is returned bit-exact, anything else is rounded.
    pub fn to_f16(&self) -> Vec<f16> {
        match self.dtype {
            DType::F16 => self
                .bytes()
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]))
                .collect(),
            _ => self.to_f32().into_iter().map(f16::from_f32).collect(),
        }
    }

    /// The value of a one-element integer or float tensor (CTranslate2 config variables).
    pub fn scalar_f64(&self) -> Option<f64> {
        if self.numel() != 1 {
            return None;
        }
        self.to_f32().first().map(|&v| v as f64)
    }

    /// Same data, another shape with the same element count.
    pub fn reshaped(&self, shape: Vec<usize>) -> Result<Self, String> {
        if numel(&shape) != Some(self.numel()) {
            return Err(format!("cannot view {:?} as {shape:?}", self.shape));
        }
        let mut t = self.clone();
        t.shape = shape;
        Ok(t)
    }

    /// Rows `[from, to)` of the outermost axis, copied (splits fused matrices).
    pub fn rows(&self, from: usize, to: usize) -> Result<Self, String> {
        let outer = *self.shape.first().ok_or("cannot slice a scalar")?;
        if from > to || to > outer {
            return Err(format!(
                "rows {from}..{to} out of range for shape {:?}",
                self.shape
            ));
        }
        let row_elems = numel(&self.shape[1..]).ok_or("shape overflows")?;
        let row_bytes = self
            .dtype
            .storage_bytes(row_elems)
            .ok_or("rows are not whole Q8_0 blocks")?;
        let bytes = self.bytes()[from * row_bytes..to * row_bytes].to_vec();
        let mut shape = self.shape.clone();
        shape[0] = to - from;
        Self::from_bytes(self.dtype, shape, bytes)
    }
}

fn check_len(dtype: DType, shape: &[usize], len: usize) -> Result<(), String> {
    let n = numel(shape).ok_or_else(|| format!("shape {shape:?} overflows"))?;
    if dtype == DType::Q8_0 && shape.last().is_some_and(|&k| !k.is_multiple_of(Q8_0_BLOCK)) {
        return Err(format!(
            "q8_0 rows of {shape:?} are not whole blocks of {Q8_0_BLOCK}"
        ));
    }
    let want = dtype
        .storage_bytes(n)
        .ok_or_else(|| format!("{n} elements cannot be stored as {dtype}"))?;
    if want != len {
        return Err(format!("{dtype} {shape:?} needs {want} bytes, found {len}"));
    }
    Ok(())
}

/// Quantizes f32 rows to ggml Q8_0 (the row length must be a multiple of 32), as ggml does:
/// `d = amax / 127`, `q = round(x / d)`.
pub fn quantize_q8_0(values: &[f32]) -> Option<Vec<u8>> {
    if !values.len().is_multiple_of(Q8_0_BLOCK) {
        return None;
    }
    let mut out = Vec::with_capacity(values.len() / Q8_0_BLOCK * Q8_0_BLOCK_BYTES);
    for block in values.chunks_exact(Q8_0_BLOCK) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        out.extend(block.iter().map(|v| ((v * id).round() as i8) as u8));
    }
    Some(out)
}
