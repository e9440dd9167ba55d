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
    /// ggml Q4_0: 32 values, f16 scale, 16 bytes of 4-bit codes (value = (q − 8)·d).
    Q4_0,
    /// ggml Q4_1: 32 values, f16 scale and min, 16 bytes of 4-bit codes (value = q·d + m).
    Q4_1,
    /// ggml Q5_0: 32 values, f16 scale, 32 high bits, 16 bytes of low nibbles ((q − 16)·d).
    Q5_0,
    /// ggml Q5_1: 32 values, f16 scale and min, 32 high bits, 16 bytes of low nibbles.
    Q5_1,
    /// ggml Q4_K: super-blocks of 256 (8 sub-blocks with 6-bit scales and mins).
    Q4K,
    /// ggml Q5_K: super-blocks of 256, as Q4_K plus one high bit per value.
    Q5K,
    /// ggml Q6_K: super-blocks of 256 (16 sub-blocks with i8 scales, 6-bit codes).
    Q6K,
}

/// Values per ggml Q8_0 block.
pub const Q8_0_BLOCK: usize = 32;
const Q8_0_BLOCK_BYTES: usize = 2 + Q8_0_BLOCK;
/// Values per ggml k-quant super-block.
pub const QK_K: usize = 256;

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
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q5_1 => "q5_1",
            DType::Q4K => "q4_k",
            DType::Q5K => "q5_k",
            DType::Q6K => "q6_k",
        }
    }

    /// (values, bytes) of one block: (1, size) for plain types.
    pub fn block(self) -> (usize, usize) {
        match self {
            DType::F32 | DType::I32 => (1, 4),
            DType::F16 | DType::BF16 | DType::I16 => (1, 2),
            DType::I8 | DType::U8 => (1, 1),
            DType::I64 => (1, 8),
            DType::Q8_0 => (Q8_0_BLOCK, Q8_0_BLOCK_BYTES),
            DType::Q4_0 => (32, 18),
            DType::Q4_1 => (32, 20),
            DType::Q5_0 => (32, 22),
            DType::Q5_1 => (32, 24),
            DType::Q4K => (QK_K, 144),
            DType::Q5K => (QK_K, 176),
            DType::Q6K => (QK_K, 210),
        }
    }

    pub fn is_quantized(self) -> bool {
        self.block().0 > 1
    }

    /// Bytes needed for `n` elements; `None` on overflow or for a block-quantized count that is
    /// not a whole number of blocks.
    pub fn storage_bytes(self, n: usize) -> Option<usize> {
        let (per, bytes) = self.block();
        if !n.is_multiple_of(per) {
            return None;
        }
        (n / per).checked_mul(bytes)
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
    /// f32 values a loader computed (dequantized integers …), kept as they are: moving a
    /// `Vec<f32>` in costs no copy.
    OwnedF32(Arc<Vec<f32>>),
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

    /// f32 values taken over without a copy; `values.len()` must match the shape.
    pub fn from_f32_vec(shape: Vec<usize>, values: Vec<f32>) -> Result<Self, String> {
        check_len(DType::F32, &shape, values.len() * 4)?;
        Ok(Self {
            dtype: DType::F32,
            shape,
            storage: Storage::OwnedF32(Arc::new(values)),
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
            Storage::OwnedF32(v) => bytemuck::cast_slice(v.as_slice()),
            Storage::Mapped { map, start, len } => &map[*start..*start + *len],
        }
    }

    pub fn numel(&self) -> usize {
        // Checked when the tensor was built.
        numel(&self.shape).unwrap_or(0)
    }

    /// Values as f32 (integers converted, ggml block types dequantized as ggml does).
    pub fn to_f32(&self) -> Vec<f32> {
        if let Storage::OwnedF32(v) = &self.storage {
            return v.as_ref().clone();
        }
        let b = self.bytes();
        match self.dtype {
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            DType::F16 => f16_bytes_to_f32(b),
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
            q => {
                let (per, bytes) = q.block();
                let mut out = Vec::with_capacity(self.numel());
                for block in b.chunks_exact(bytes) {
                    let start = out.len();
                    out.resize(start + per, 0.0);
                    dequantize_block(q, block, &mut out[start..]);
                }
                out
            }
        }
    }

    /// What holds [`Self::bytes`] alive and unchanged (the memory map, or the owned buffer).
    pub fn owner(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        match &self.storage {
            Storage::Owned(v) => v.clone(),
            Storage::OwnedF32(v) => v.clone(),
            Storage::Mapped { map, .. } => map.clone(),
        }
    }

    /// The values as an f32 slice without a copy, where they are f32 at a 4-byte aligned address.
    pub fn as_f32_slice(&self) -> Option<&[f32]> {
        if self.dtype != DType::F32 || cfg!(target_endian = "big") {
            return None;
        }
        match &self.storage {
            Storage::OwnedF32(v) => Some(v.as_slice()),
            _ => bytemuck::try_cast_slice(self.bytes()).ok(),
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

    /// Rows `[from, to)` of the outermost axis (splits fused matrices): a view of the same map
    /// for mapped data, else a copy.
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
            .ok_or("rows are not whole quantization blocks")?;
        let mut shape = self.shape.clone();
        shape[0] = to - from;
        if let Storage::Mapped { map, start, .. } = &self.storage {
            let len = (to - from) * row_bytes;
            return Self::mapped(
                self.dtype,
                shape,
                map.clone(),
                start + from * row_bytes,
                len,
            );
        }
        let bytes = self.bytes()[from * row_bytes..to * row_bytes].to_vec();
        Self::from_bytes(self.dtype, shape, bytes)
    }
}

fn check_len(dtype: DType, shape: &[usize], len: usize) -> Result<(), String> {
    let n = numel(shape).ok_or_else(|| format!("shape {shape:?} overflows"))?;
    let per = dtype.block().0;
    if per > 1 && shape.last().is_some_and(|&k| !k.is_multiple_of(per)) {
        return Err(format!(
            "{dtype} rows of {shape:?} are not whole blocks of {per}"
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

/// f16 little-endian bytes → f32 through half's slice conversion (F16C where the CPU has it,
/// detected at run time): ~10× the per-element path on a model load. The bytes may sit at any
/// alignment in a memory map, so they pass through a small aligned buffer.
fn f16_bytes_to_f32(b: &[u8]) -> Vec<f32> {
    let n = b.len() / 2;
    let mut out = vec![0f32; n];
    // Large tensors (the embedding table) are split over the cores: most of the cost is
    // first-touch page faults on the output, which scale with threads.
    const PARALLEL_MIN: usize = 1 << 20;
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min(4);
    if n < PARALLEL_MIN || threads < 2 {
        f16_into_f32(b, &mut out);
        return out;
    }
    let per = n.div_ceil(threads);
    std::thread::scope(|s| {
        for (src, dst) in b.chunks(2 * per).zip(out.chunks_mut(per)) {
            s.spawn(move || f16_into_f32(src, dst));
        }
    });
    out
}

fn f16_into_f32(b: &[u8], out: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    const CHUNK: usize = 4096;
    let mut buf = [f16::ZERO; CHUNK];
    for (src, dst) in b.chunks(2 * CHUNK).zip(out.chunks_mut(CHUNK)) {
        let k = dst.len();
        for (h, c) in buf[..k].iter_mut().zip(src.chunks_exact(2)) {
            *h = f16::from_bits(u16::from_le_bytes([c[0], c[1]]));
        }
        buf[..k].convert_to_f32_slice(dst);
    }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// 6-bit scale and min `j` of a k-quant super-block (ggml's `get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Dequantizes one ggml block into `y` (`y.len()` = the block's value count), following ggml's
/// `dequantize_row_*` reference code.
fn dequantize_block(dtype: DType, b: &[u8], y: &mut [f32]) {
    match dtype {
        DType::Q8_0 => {
            let d = f16_at(b, 0);
            for (o, &q) in y.iter_mut().zip(&b[2..34]) {
                *o = q as i8 as f32 * d;
            }
        }
        DType::Q4_0 | DType::Q4_1 => {
            let d = f16_at(b, 0);
            let (m, qs) = if dtype == DType::Q4_1 {
                (f16_at(b, 2), &b[4..20])
            } else {
                (0.0, &b[2..18])
            };
            let off = if dtype == DType::Q4_0 { 8 } else { 0 };
            for j in 0..16 {
                y[j] = ((qs[j] & 0xF) as i32 - off) as f32 * d + m;
                y[j + 16] = ((qs[j] >> 4) as i32 - off) as f32 * d + m;
            }
        }
        DType::Q5_0 | DType::Q5_1 => {
            let d = f16_at(b, 0);
            let (m, rest) = if dtype == DType::Q5_1 {
                (f16_at(b, 2), &b[4..])
            } else {
                (0.0, &b[2..])
            };
            let qh = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
            let qs = &rest[4..20];
            let off = if dtype == DType::Q5_0 { 16 } else { 0 };
            for j in 0..16 {
                let h0 = (((qh >> j) << 4) & 0x10) as u8;
                let h1 = ((qh >> (j + 12)) & 0x10) as u8;
                y[j] = (((qs[j] & 0xF) | h0) as i32 - off) as f32 * d + m;
                y[j + 16] = (((qs[j] >> 4) | h1) as i32 - off) as f32 * d + m;
            }
        }
        DType::Q4K | DType::Q5K => {
            let d = f16_at(b, 0);
            let dmin = f16_at(b, 2);
            let scales = &b[4..16];
            let (qh, qs) = if dtype == DType::Q5K {
                (&b[16..48], &b[48..176])
            } else {
                (&b[0..0], &b[16..144])
            };
            let mut is = 0;
            let mut k = 0;
            let (mut u1, mut u2) = (1u8, 2u8);
            for j in (0..QK_K).step_by(64) {
                let q = &qs[j / 2..j / 2 + 32];
                let (sc, m) = scale_min_k4(is, scales);
                let (d1, m1) = (d * sc as f32, dmin * m as f32);
                let (sc, m) = scale_min_k4(is + 1, scales);
                let (d2, m2) = (d * sc as f32, dmin * m as f32);
                for l in 0..32 {
                    let hi = if dtype == DType::Q5K && qh[l] & u1 != 0 {
                        16
                    } else {
                        0
                    };
                    y[k + l] = d1 * ((q[l] & 0xF) + hi) as f32 - m1;
                }
                for l in 0..32 {
                    let hi = if dtype == DType::Q5K && qh[l] & u2 != 0 {
                        16
                    } else {
                        0
                    };
                    y[k + 32 + l] = d2 * ((q[l] >> 4) + hi) as f32 - m2;
                }
                k += 64;
                is += 2;
                u1 <<= 2;
                u2 <<= 2;
            }
        }
        DType::Q6K => {
            let ql = &b[0..128];
            let qh = &b[128..192];
            let sc = &b[192..208];
            let d = f16_at(b, 208);
            for n in 0..2 {
                let (ql, qh, sc) = (&ql[n * 64..], &qh[n * 32..], &sc[n * 8..]);
                let y = &mut y[n * 128..];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                    y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                    y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                    y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                }
            }
        }
        _ => {}
    }
}
