//! Lanes: how a GEMM weight is stored. The lane is a property of a loaded weight.

use half::f16;
use std::fmt;
use std::str::FromStr;

/// Weight storage per GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// f32 weights: exact, CPU only.
    F32,
    /// f16 weights, f32 accumulate.
    F16,
    /// int8 weights in blocks of [`Q8_BLOCK`] along K, one f16 scale per block (ggml Q8_0).
    Q8,
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Lane::F32 => "f32",
            Lane::F16 => "f16",
            Lane::Q8 => "q8",
        })
    }
}

impl FromStr for Lane {
    type Err = String;
    /// Accepts `f32|f16|q8` and the `STAPES_AUDIO_LANE` spellings `32|16|8`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "32" => Ok(Lane::F32),
            "f16" | "16" => Ok(Lane::F16),
            "q8" | "8" => Ok(Lane::Q8),
            other => Err(format!("unknown lane `{other}` (expected f32, f16 or q8)")),
        }
    }
}

/// Values per q8 block along K.
pub const Q8_BLOCK: usize = 32;

/// One q8 block: `value[i] = scale * q[i]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Q8Block {
    pub scale: f16,
    pub q: [i8; Q8_BLOCK],
}

/// Quantize one row of K values into ⌈K/32⌉ blocks; a partial last block is zero-padded.
/// `scale = amax/127`, round to nearest, symmetric ±127 (so AVX2's sign trick stays exact).
pub fn quantize_row_q8(row: &[f32]) -> Vec<Q8Block> {
    row.chunks(Q8_BLOCK)
        .map(|chunk| {
            let amax = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = amax / 127.0;
            let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            let mut q = [0i8; Q8_BLOCK];
            for (dst, v) in q.iter_mut().zip(chunk) {
                *dst = (v * inv).round().clamp(-127.0, 127.0) as i8;
            }
            Q8Block {
                scale: f16::from_f32(scale),
                q,
            }
        })
        .collect()
}

/// Inverse of [`quantize_row_q8`], truncated to `k` values.
pub fn dequantize_row_q8(blocks: &[Q8Block], k: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(blocks.len() * Q8_BLOCK);
    for b in blocks {
        let s = b.scale.to_f32();
        out.extend(b.q.iter().map(|&q| q as f32 * s));
    }
    out.truncate(k);
    out
}

/// What a weight's values become after storage in `lane` (the reference semantics of a lane).
pub fn round_trip(lane: Lane, row: &[f32]) -> Vec<f32> {
    match lane {
        Lane::F32 => row.to_vec(),
        Lane::F16 => row.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
        Lane::Q8 => dequantize_row_q8(&quantize_row_q8(row), row.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_round_trip_is_within_half_a_step() {
        let row: Vec<f32> = (0..70)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.173)
            .collect();
        let back = round_trip(Lane::Q8, &row);
        assert_eq!(back.len(), 70);
        for (blk, (a, b)) in row.chunks(32).zip(back.chunks(32)).enumerate() {
            let amax = a.iter().fold(0f32, |m, v| m.max(v.abs()));
            let step = amax / 127.0;
            for (x, y) in a.iter().zip(b) {
                // half a step from rounding plus the f16 rounding of the scale (2^-11 relative)
                assert!(
                    (x - y).abs() <= step * 0.5 + amax * 1e-3,
                    "block {blk}: {x} vs {y}"
                );
            }
        }
    }

    #[test]
    fn lane_parses_env_spellings() {
        assert_eq!("16".parse::<Lane>().unwrap(), Lane::F16);
        assert_eq!("q8".parse::<Lane>().unwrap(), Lane::Q8);
        assert_eq!("F32".parse::<Lane>().unwrap(), Lane::F32);
        assert!("int4".parse::<Lane>().is_err());
    }
}
