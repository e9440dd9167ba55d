use crate::{Error, Result};

/// A dense row-major f32 tensor in host memory. Loaders produce these; backends upload them.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl HostTensor {
    pub fn new(shape: impl Into<Vec<usize>>, data: Vec<f32>) -> Result<Self> {
        let shape = shape.into();
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::shape(
                "HostTensor::new",
                format!("shape {shape:?} holds {n} values, got {}", data.len()),
            ));
        }
        Ok(Self { shape, data })
    }

    pub fn zeros(shape: impl Into<Vec<usize>>) -> Self {
        let shape = shape.into();
        let n = shape.iter().product();
        Self {
            shape,
            data: vec![0.0; n],
        }
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Size of the last dimension (1 for a scalar).
    pub fn last_dim(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// Product of all dimensions but the last.
    pub fn rows(&self) -> usize {
        self.data.len() / self.last_dim().max(1)
    }

    pub fn reshape(mut self, shape: impl Into<Vec<usize>>) -> Result<Self> {
        let shape = shape.into();
        let n: usize = shape.iter().product();
        if n != self.data.len() {
            return Err(Error::shape(
                "reshape",
                format!("{:?} -> {shape:?} changes the element count", self.shape),
            ));
        }
        self.shape = shape;
        Ok(self)
    }

    /// Deterministic pseudo-random values in [-scale, scale) (xorshift; tests and synthetic models).
    pub fn random(shape: impl Into<Vec<usize>>, seed: u64, scale: f32) -> Self {
        let shape = shape.into();
        let n: usize = shape.iter().product();
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let data = (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect();
        Self { shape, data }
    }
}

/// A `(N, K)` GEMM weight borrowed as a checkpoint stores it, for [`crate::Backend::weight_from`]:
/// a home builds its lane's storage straight from these values, without an f32 copy of the
/// whole model first.
#[derive(Clone)]
pub struct WeightView<'a> {
    pub n: usize,
    pub k: usize,
    pub data: WeightData<'a>,
    /// What keeps `data` alive and unchanged (a checkpoint's memory map), where the caller
    /// lets the home keep referring to the values instead of copying them.
    pub keep: Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for WeightView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeightView")
            .field("n", &self.n)
            .field("k", &self.k)
            .field("data", &self.data)
            .field("keep", &self.keep.is_some())
            .finish()
    }
}

/// The values of a [`WeightView`], row-major.
#[derive(Clone, Copy, Debug)]
pub enum WeightData<'a> {
    F32(&'a [f32]),
    /// IEEE binary16 values as little-endian byte pairs, at any alignment (a memory map).
    F16Le(&'a [u8]),
}

impl<'a> WeightView<'a> {
    /// Checks that `data` holds exactly `n·k` values.
    pub fn new(n: usize, k: usize, data: WeightData<'a>) -> Result<Self> {
        let have = match data {
            WeightData::F32(v) => v.len(),
            WeightData::F16Le(b) if b.len() % 2 == 0 => b.len() / 2,
            WeightData::F16Le(b) => {
                return Err(Error::shape(
                    "WeightView::new",
                    format!("{} bytes of f16 is not a whole number of values", b.len()),
                ))
            }
        };
        if n.checked_mul(k) != Some(have) {
            return Err(Error::shape(
                "WeightView::new",
                format!(
                    "({n}, {k}) needs {} values, got {have}",
                    n.saturating_mul(k)
                ),
            ));
        }
        Ok(Self {
            n,
            k,
            data,
            keep: None,
        })
    }

    /// The same view, with `keep` holding its values alive (see [`WeightView::keep`]).
    pub fn kept_by(mut self, keep: std::sync::Arc<dyn std::any::Any + Send + Sync>) -> Self {
        self.keep = Some(keep);
        self
    }

    /// The values widened to f32 (exact for every variant), as `(N, K)`.
    pub fn to_host(&self) -> HostTensor {
        let data = match self.data {
            WeightData::F32(v) => v.to_vec(),
            WeightData::F16Le(b) => {
                let mut out = vec![0f32; b.len() / 2];
                widen_f16le(b, &mut out);
                out
            }
        };
        HostTensor {
            shape: vec![self.n, self.k],
            data,
        }
    }

    /// Row `r` (`k` values) widened to f32 (exact): f32 values as stored, f16 converted into
    /// `buf`. Lets a home build a weight a row at a time, with no f32 copy of the matrix.
    pub fn row<'s>(&'s self, r: usize, buf: &'s mut Vec<f32>) -> &'s [f32] {
        let k = self.k;
        match self.data {
            WeightData::F32(v) => &v[r * k..(r + 1) * k],
            WeightData::F16Le(b) => {
                buf.resize(k, 0.0);
                widen_f16le(&b[r * k * 2..(r + 1) * k * 2], buf);
                buf
            }
        }
    }
}

/// Little-endian f16 pairs (any alignment) into `dst`, through an aligned buffer: half's slice
/// conversion uses F16C where present.
fn widen_f16le(src: &[u8], dst: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    let mut buf = [half::f16::ZERO; 1024];
    for (src, dst) in src.chunks(2048).zip(dst.chunks_mut(1024)) {
        let h = &mut buf[..dst.len()];
        for (v, c) in h.iter_mut().zip(src.chunks_exact(2)) {
            *v = half::f16::from_le_bytes([c[0], c[1]]);
        }
        h.convert_to_f32_slice(dst);
    }
}

/// Relative L2 distance ‖a − b‖ / ‖b‖ (b is the reference).
pub fn rel_l2(a: &[f32], b: &[f32]) -> f32 {
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        num += ((x - y) as f64).powi(2);
        den += (*y as f64).powi(2);
    }
    if den == 0.0 {
        return num.sqrt() as f32;
    }
    (num / den).sqrt() as f32
}

/// Largest absolute element-wise difference.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_view_widens_f16_bytes_exactly_at_any_alignment() {
        let vals: Vec<half::f16> = (0..2500)
            .map(|i| half::f16::from_f32((i as f32 - 1250.0) * 0.37))
            .collect();
        // One leading byte puts the pairs at an odd address, as in a memory map.
        let mut bytes = vec![0u8];
        vals.iter()
            .for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
        let w = WeightView::new(50, 50, WeightData::F16Le(&bytes[1..])).unwrap();
        let h = w.to_host();
        assert_eq!(h.shape, vec![50, 50]);
        for (a, b) in h.data.iter().zip(&vals) {
            assert_eq!(a.to_bits(), b.to_f32().to_bits());
        }
        // a row at a time gives the same values, from f16 bytes and from f32
        let wide = WeightView::new(50, 50, WeightData::F32(&h.data)).unwrap();
        let mut buf = Vec::new();
        for r in [0, 7, 49] {
            let want: Vec<u32> = h.data[r * 50..(r + 1) * 50]
                .iter()
                .map(|v| v.to_bits())
                .collect();
            let got: Vec<u32> = w.row(r, &mut buf).iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "f16 row {r}");
            let got: Vec<u32> = wide.row(r, &mut buf).iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "f32 row {r}");
        }
    }

    #[test]
    fn weight_view_checks_the_count() {
        assert!(WeightView::new(2, 3, WeightData::F32(&[0.0; 5])).is_err());
        assert!(WeightView::new(2, 3, WeightData::F16Le(&[0u8; 11])).is_err());
        assert!(WeightView::new(2, 3, WeightData::F16Le(&[0u8; 13])).is_err());
        assert!(WeightView::new(2, 3, WeightData::F16Le(&[0u8; 12])).is_ok());
    }
}
