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
