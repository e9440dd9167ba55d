//! The scalar reference backend: the specification of every op.
//!
//! Every op is a plain loop over the definition in `backend.rs`, written to be read, not to be
//! fast. Dot products and reductions accumulate in f64 so that the reference is (to f32
//! precision) the exact value of the op on its f32 inputs; a home's deviation from it is then the
//! home's own error, which is what the tolerance table bounds.
//!
//! A lane's meaning is "f32 math on the lane-rounded weight": [`Backend::weight`] stores each row
//! of the `(N, K)` matrix after [`lane::round_trip`].

use crate::backend::{Activation, AttnParams, Backend, Conv1dParams, Conv2dParams, DeviceTensor};
use crate::counters::Counters;
use crate::lane::{self, Lane};
use crate::shapes::{
    around, attn_dims, check_slice, check_vec, concat_shape, conv1d_dims, conv2d_dims,
    depthwise_dims, matmul_dims, write_rows_dims, AttnDims, Conv2dDims,
};
use crate::{Error, HostTensor, Result};

/// A tensor of the reference backend: host memory, nothing else.
#[derive(Clone, Debug, PartialEq)]
pub struct RefTensor {
    pub host: HostTensor,
}

impl RefTensor {
    fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        RefTensor {
            host: HostTensor { shape, data },
        }
    }
}

impl DeviceTensor for RefTensor {
    fn shape(&self) -> &[usize] {
        &self.host.shape
    }
}

/// A `(N, K)` GEMM weight after the lane's round trip, kept as f32.
#[derive(Clone, Debug, PartialEq)]
pub struct RefWeight {
    pub lane: Lane,
    pub n: usize,
    pub k: usize,
    /// `(N, K)` row-major, each row already `lane::round_trip`ped.
    pub data: Vec<f32>,
}

/// The scalar f32 reference backend. Supports every lane.
#[derive(Default, Debug)]
pub struct ReferenceBackend {
    counters: Counters,
}

impl ReferenceBackend {
    pub fn new() -> Self {
        Self::default()
    }

    fn op(&self) {
        Counters::bump(&self.counters.ops);
    }

    fn gemm(&self, lane: Lane) {
        Counters::bump(match lane {
            Lane::F32 => &self.counters.gemm_f32,
            Lane::F16 => &self.counters.gemm_f16,
            Lane::Q8 => &self.counters.gemm_q8,
        });
    }
}

/// Complementary error function in f64 (series below 2, Lentz continued fraction above):
/// accurate to ~1e-15, far below f32 resolution, so GELU's reference is exact to f32.
fn erfc(z: f64) -> f64 {
    if z < 0.0 {
        return 2.0 - erfc(-z);
    }
    if z < 2.0 {
        // erf z = 2/√π Σ (−1)ⁿ z^(2n+1) / (n! (2n+1))
        let mut term = z;
        let mut sum = z;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -z * z / n;
            sum += term / (2.0 * n + 1.0);
        }
        return 1.0 - sum * 2.0 / std::f64::consts::PI.sqrt();
    }
    // erfc z = e^(−z²)/√π · 1/(z + (1/2)/(z + 1/(z + (3/2)/(z + 2/(z + …)))))
    let tiny = 1e-300;
    let mut f = z;
    let mut c = z;
    let mut d = 0.0;
    for i in 1..300 {
        let a = i as f64 / 2.0;
        d = z + a * d;
        d = if d.abs() < tiny { 1.0 / tiny } else { 1.0 / d };
        c = z + a / c;
        if c.abs() < tiny {
            c = tiny;
        }
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-z * z).exp() / std::f64::consts::PI.sqrt() / f
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The definition of each activation, in f64.
pub fn activation_scalar(act: Activation, x: f32) -> f32 {
    let x = x as f64;
    let y = match act {
        // x·Φ(x) with Φ(x) = erfc(−x/√2)/2
        Activation::Gelu => x * 0.5 * erfc(-x / std::f64::consts::SQRT_2),
        Activation::GeluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        Activation::Silu => x * sigmoid(x),
        Activation::Relu => x.max(0.0),
        Activation::Sigmoid => sigmoid(x),
        Activation::Tanh => x.tanh(),
    };
    y as f32
}

/// Shared by `add` and `mul`: `b`'s shape equals `a`'s or is a suffix of it.
fn broadcast(
    op: &'static str,
    a: &RefTensor,
    b: &RefTensor,
    f: impl Fn(f32, f32) -> f32,
) -> Result<RefTensor> {
    let (sa, sb) = (&a.host.shape, &b.host.shape);
    if sb.len() > sa.len() || sa[sa.len() - sb.len()..] != sb[..] {
        return Err(Error::shape(
            op,
            format!("{sb:?} is not a suffix of {sa:?}"),
        ));
    }
    let nb = b.host.data.len();
    let data = if nb == 0 {
        Vec::new()
    } else {
        a.host
            .data
            .iter()
            .enumerate()
            .map(|(i, &x)| f(x, b.host.data[i % nb]))
            .collect()
    };
    Ok(RefTensor::new(sa.clone(), data))
}

/// Softmax probabilities `(B, H, Tq, kv_len)`; masked (future) keys get exactly 0.
fn attn_probs(q: &RefTensor, k: &RefTensor, d: &AttnDims, p: &AttnParams) -> Vec<f32> {
    let c = d.h * d.dh;
    let mut out = vec![0f32; d.b * d.h * d.tq * d.kv_len];
    for b in 0..d.b {
        for h in 0..d.h {
            for i in 0..d.tq {
                // Query i sees keys 0 ..= kv_len − Tq + i when causal.
                let visible = if p.causal {
                    d.kv_len - d.tq + i + 1
                } else {
                    d.kv_len
                };
                let qrow = &q.host.data[(b * d.tq + i) * c + h * d.dh..][..d.dh];
                let mut logits = vec![0f64; visible];
                for (j, l) in logits.iter_mut().enumerate() {
                    let krow = &k.host.data[(b * d.tk + j) * c + h * d.dh..][..d.dh];
                    let dot: f64 = qrow
                        .iter()
                        .zip(krow)
                        .map(|(&x, &y)| x as f64 * y as f64)
                        .sum();
                    *l = dot * p.scale as f64;
                }
                let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = logits.iter().map(|l| (l - max).exp()).sum();
                let row = &mut out[((b * d.h + h) * d.tq + i) * d.kv_len..][..d.kv_len];
                for (o, l) in row.iter_mut().zip(&logits) {
                    *o = ((l - max).exp() / sum) as f32;
                }
            }
        }
    }
    out
}

impl Backend for ReferenceBackend {
    type Tensor = RefTensor;
    type Weight = RefWeight;

    fn name(&self) -> &'static str {
        "reference"
    }

    fn supports_lane(&self, _lane: Lane) -> bool {
        true
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn upload(&self, t: &HostTensor) -> Result<RefTensor> {
        HostTensor::new(t.shape.clone(), t.data.clone()).map(|host| RefTensor { host })
    }

    fn download(&self, t: &RefTensor) -> Result<HostTensor> {
        Ok(t.host.clone())
    }

    fn weight(&self, w: &HostTensor, lane: Lane) -> Result<RefWeight> {
        if w.rank() < 2 {
            return Err(Error::shape(
                "weight",
                format!("need (N, K) or (N, ..), got {:?}", w.shape),
            ));
        }
        let n = w.shape[0];
        let k: usize = w.shape[1..].iter().product();
        if n * k != w.data.len() || k == 0 || n == 0 {
            return Err(Error::shape(
                "weight",
                format!("shape {:?} vs {} values", w.shape, w.data.len()),
            ));
        }
        let data = w
            .data
            .chunks(k)
            .flat_map(|row| lane::round_trip(lane, row))
            .collect();
        Ok(RefWeight { lane, n, k, data })
    }

    fn weight_shape(&self, w: &RefWeight) -> (usize, usize) {
        (w.n, w.k)
    }

    fn reshape(&self, t: &RefTensor, shape: &[usize]) -> Result<RefTensor> {
        self.op();
        Ok(RefTensor {
            host: t.host.clone().reshape(shape.to_vec())?,
        })
    }

    fn transpose_last2(&self, t: &RefTensor) -> Result<RefTensor> {
        self.op();
        let s = &t.host.shape;
        if s.len() < 2 {
            return Err(Error::shape(
                "transpose_last2",
                format!("need rank ≥ 2, got {s:?}"),
            ));
        }
        let (a, b) = (s[s.len() - 2], s[s.len() - 1]);
        let batch = t.host.data.len() / (a * b).max(1);
        let mut out = vec![0f32; t.host.data.len()];
        for n in 0..batch {
            for i in 0..a {
                for j in 0..b {
                    out[n * a * b + j * a + i] = t.host.data[n * a * b + i * b + j];
                }
            }
        }
        let mut shape = s.clone();
        let r = shape.len();
        shape.swap(r - 2, r - 1);
        Ok(RefTensor::new(shape, out))
    }

    fn slice(&self, t: &RefTensor, dim: usize, start: usize, len: usize) -> Result<RefTensor> {
        self.op();
        let s = &t.host.shape;
        check_slice(s, dim, start, len)?;
        let (outer, d, inner) = around(s, dim);
        let mut out = Vec::with_capacity(outer * len * inner);
        for o in 0..outer {
            out.extend_from_slice(
                &t.host.data[(o * d + start) * inner..(o * d + start + len) * inner],
            );
        }
        let mut shape = s.clone();
        shape[dim] = len;
        Ok(RefTensor::new(shape, out))
    }

    fn concat(&self, ts: &[&RefTensor], dim: usize) -> Result<RefTensor> {
        self.op();
        let shapes: Vec<&[usize]> = ts.iter().map(|t| &t.host.shape[..]).collect();
        let shape = concat_shape(&shapes, dim)?;
        let (outer, total, inner) = around(&shape, dim);
        let mut out = Vec::with_capacity(outer * total * inner);
        for o in 0..outer {
            for t in ts {
                let d = t.host.shape[dim];
                out.extend_from_slice(&t.host.data[o * d * inner..(o + 1) * d * inner]);
            }
        }
        Ok(RefTensor::new(shape, out))
    }

    fn write_rows(&self, dst: &mut RefTensor, src: &RefTensor, offset: usize) -> Result<()> {
        self.op();
        let (b, t, c, n) = write_rows_dims(dst, src, offset)?;
        for bi in 0..b {
            for r in 0..n {
                for ci in 0..c {
                    dst.host.data[(bi * t + offset + r) * c + ci] =
                        src.host.data[(bi * n + r) * c + ci];
                }
            }
        }
        Ok(())
    }

    fn gather_batch(&self, t: &RefTensor, idx: &[usize]) -> Result<RefTensor> {
        self.op();
        let s = &t.host.shape;
        let b = *s
            .first()
            .ok_or_else(|| Error::shape("gather_batch", "scalar input"))?;
        let per = t.host.data.len() / b.max(1);
        let mut out = Vec::with_capacity(idx.len() * per);
        for &i in idx {
            if i >= b {
                return Err(Error::shape(
                    "gather_batch",
                    format!("index {i} ≥ batch {b}"),
                ));
            }
            out.extend_from_slice(&t.host.data[i * per..(i + 1) * per]);
        }
        let mut shape = s.clone();
        shape[0] = idx.len();
        Ok(RefTensor::new(shape, out))
    }

    fn gather_rows(&self, table: &RefTensor, ids: &[u32]) -> Result<RefTensor> {
        self.op();
        let [v, d] = table.host.shape[..] else {
            return Err(Error::shape(
                "gather_rows",
                format!("table must be (V, D), got {:?}", table.host.shape),
            ));
        };
        let mut out = Vec::with_capacity(ids.len() * d);
        for &id in ids {
            let id = id as usize;
            if id >= v {
                return Err(Error::shape(
                    "gather_rows",
                    format!("id {id} ≥ vocabulary {v}"),
                ));
            }
            out.extend_from_slice(&table.host.data[id * d..(id + 1) * d]);
        }
        Ok(RefTensor::new(vec![ids.len(), d], out))
    }

    fn linear(&self, x: &RefTensor, w: &RefWeight, bias: Option<&RefTensor>) -> Result<RefTensor> {
        self.op();
        self.gemm(w.lane);
        let k = x.host.last_dim();
        if x.host.rank() == 0 || k != w.k {
            return Err(Error::shape(
                "linear",
                format!("x {:?} vs weight ({}, {})", x.host.shape, w.n, w.k),
            ));
        }
        check_vec("linear", "bias", bias, w.n)?;
        let rows = x.host.rows();
        let mut out = vec![0f32; rows * w.n];
        for r in 0..rows {
            let xr = &x.host.data[r * k..(r + 1) * k];
            for j in 0..w.n {
                let wr = &w.data[j * k..(j + 1) * k];
                let mut acc: f64 = xr.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum();
                if let Some(b) = bias {
                    acc += b.host.data[j] as f64;
                }
                out[r * w.n + j] = acc as f32;
            }
        }
        let mut shape = x.host.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = w.n;
        Ok(RefTensor::new(shape, out))
    }

    fn matmul(&self, a: &RefTensor, b: &RefTensor, trans_b: bool) -> Result<RefTensor> {
        self.op();
        let (sa, sb) = (&a.host.shape, &b.host.shape);
        let (batch, m, k, n) = matmul_dims(sa, sb, trans_b)?;
        let r = sa.len();
        let mut out = vec![0f32; batch * m * n];
        for bi in 0..batch {
            let ad = &a.host.data[bi * m * k..];
            let bd = &b.host.data[bi * k * n..];
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0f64;
                    for l in 0..k {
                        let bv = if trans_b {
                            bd[j * k + l]
                        } else {
                            bd[l * n + j]
                        };
                        acc += ad[i * k + l] as f64 * bv as f64;
                    }
                    out[(bi * m + i) * n + j] = acc as f32;
                }
            }
        }
        let mut shape = sa.clone();
        shape[r - 1] = n;
        Ok(RefTensor::new(shape, out))
    }

    fn conv1d(
        &self,
        x: &RefTensor,
        w: &RefWeight,
        bias: Option<&RefTensor>,
        p: Conv1dParams,
    ) -> Result<RefTensor> {
        self.op();
        self.gemm(w.lane);
        let (b, t, cin, tout) = conv1d_dims(x, w.n, w.k, bias, p)?;
        let kk = p.kernel;
        let cout = w.n;
        let mut out = vec![0f32; b * tout * cout];
        for bi in 0..b {
            for to in 0..tout {
                for co in 0..cout {
                    let mut acc = bias.map_or(0.0, |bv| bv.host.data[co] as f64);
                    for ci in 0..cin {
                        for kj in 0..kk {
                            // Input frame in padded coordinates; outside [0, T) is zero padding.
                            let ti = (to * p.stride + kj) as isize - p.padding as isize;
                            if ti < 0 || ti >= t as isize {
                                continue;
                            }
                            let xv = x.host.data[(bi * t + ti as usize) * cin + ci];
                            acc += xv as f64 * w.data[co * w.k + ci * kk + kj] as f64;
                        }
                    }
                    out[(bi * tout + to) * cout + co] = acc as f32;
                }
            }
        }
        Ok(RefTensor::new(vec![b, tout, cout], out))
    }

    fn depthwise_conv1d(
        &self,
        x: &RefTensor,
        w: &RefTensor,
        bias: Option<&RefTensor>,
        stride: usize,
        padding: usize,
    ) -> Result<RefTensor> {
        self.op();
        let (b, t, c, kk, tout) = depthwise_dims(x, w, bias, stride, padding)?;
        let mut out = vec![0f32; b * tout * c];
        for bi in 0..b {
            for to in 0..tout {
                for ci in 0..c {
                    let mut acc = bias.map_or(0.0, |bv| bv.host.data[ci] as f64);
                    for kj in 0..kk {
                        let ti = (to * stride + kj) as isize - padding as isize;
                        if ti < 0 || ti >= t as isize {
                            continue;
                        }
                        acc += x.host.data[(bi * t + ti as usize) * c + ci] as f64
                            * w.host.data[ci * kk + kj] as f64;
                    }
                    out[(bi * tout + to) * c + ci] = acc as f32;
                }
            }
        }
        Ok(RefTensor::new(vec![b, tout, c], out))
    }

    fn conv2d(
        &self,
        x: &RefTensor,
        w: &RefTensor,
        bias: Option<&RefTensor>,
        p: Conv2dParams,
    ) -> Result<RefTensor> {
        self.op();
        let Conv2dDims {
            b,
            cin,
            h: hh,
            w: ww,
            cout,
            cin_g,
            kh,
            kw,
            ho,
            wo,
        } = conv2d_dims(x, w, bias, p)?;
        let g = p.groups;
        let cout_g = cout / g;
        let mut out = vec![0f32; b * cout * ho * wo];
        for bi in 0..b {
            for co in 0..cout {
                let grp = co / cout_g;
                for oy in 0..ho {
                    for ox in 0..wo {
                        let mut acc = bias.map_or(0.0, |bv| bv.host.data[co] as f64);
                        for cl in 0..cin_g {
                            let ci = grp * cin_g + cl;
                            for i in 0..kh {
                                let y = (oy * p.stride.0 + i) as isize - p.padding.0 as isize;
                                if y < 0 || y >= hh as isize {
                                    continue;
                                }
                                for j in 0..kw {
                                    let xx = (ox * p.stride.1 + j) as isize - p.padding.1 as isize;
                                    if xx < 0 || xx >= ww as isize {
                                        continue;
                                    }
                                    let xv = x.host.data
                                        [((bi * cin + ci) * hh + y as usize) * ww + xx as usize];
                                    let wv = w.host.data[((co * cin_g + cl) * kh + i) * kw + j];
                                    acc += xv as f64 * wv as f64;
                                }
                            }
                        }
                        out[((bi * cout + co) * ho + oy) * wo + ox] = acc as f32;
                    }
                }
            }
        }
        Ok(RefTensor::new(vec![b, cout, ho, wo], out))
    }

    fn attention(
        &self,
        q: &RefTensor,
        k: &RefTensor,
        v: &RefTensor,
        p: &AttnParams,
    ) -> Result<RefTensor> {
        self.op();
        let d = attn_dims("attention", q, k, Some(v), p)?;
        let probs = attn_probs(q, k, &d, p);
        let cv = d.h * d.dv;
        let mut out = vec![0f32; d.b * d.tq * cv];
        for b in 0..d.b {
            for h in 0..d.h {
                for i in 0..d.tq {
                    let pr = &probs[((b * d.h + h) * d.tq + i) * d.kv_len..][..d.kv_len];
                    for e in 0..d.dv {
                        let mut acc = 0f64;
                        for (j, &pj) in pr.iter().enumerate() {
                            acc +=
                                pj as f64 * v.host.data[(b * d.tk + j) * cv + h * d.dv + e] as f64;
                        }
                        out[(b * d.tq + i) * cv + h * d.dv + e] = acc as f32;
                    }
                }
            }
        }
        Ok(RefTensor::new(vec![d.b, d.tq, cv], out))
    }

    fn attention_probs(&self, q: &RefTensor, k: &RefTensor, p: &AttnParams) -> Result<RefTensor> {
        self.op();
        let d = attn_dims("attention_probs", q, k, None, p)?;
        let probs = attn_probs(q, k, &d, p);
        Ok(RefTensor::new(vec![d.b, d.h, d.tq, d.kv_len], probs))
    }

    fn layer_norm(
        &self,
        x: &RefTensor,
        gamma: &RefTensor,
        beta: Option<&RefTensor>,
        eps: f32,
    ) -> Result<RefTensor> {
        self.op();
        let c = x.host.last_dim();
        check_vec("layer_norm", "gamma", Some(gamma), c)?;
        check_vec("layer_norm", "beta", beta, c)?;
        let mut out = Vec::with_capacity(x.host.data.len());
        for row in x.host.data.chunks(c.max(1)) {
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / c as f64;
            // Biased (population) variance, as PyTorch's LayerNorm.
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / c as f64;
            let inv = 1.0 / (var + eps as f64).sqrt();
            for (i, &v) in row.iter().enumerate() {
                let mut y = (v as f64 - mean) * inv * gamma.host.data[i] as f64;
                if let Some(b) = beta {
                    y += b.host.data[i] as f64;
                }
                out.push(y as f32);
            }
        }
        Ok(RefTensor::new(x.host.shape.clone(), out))
    }

    fn rms_norm(&self, x: &RefTensor, gamma: &RefTensor, eps: f32) -> Result<RefTensor> {
        self.op();
        let c = x.host.last_dim();
        check_vec("rms_norm", "gamma", Some(gamma), c)?;
        let mut out = Vec::with_capacity(x.host.data.len());
        for row in x.host.data.chunks(c.max(1)) {
            let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / c as f64;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            for (i, &v) in row.iter().enumerate() {
                out.push((v as f64 * inv * gamma.host.data[i] as f64) as f32);
            }
        }
        Ok(RefTensor::new(x.host.shape.clone(), out))
    }

    fn activation(&self, x: &RefTensor, act: Activation) -> Result<RefTensor> {
        self.op();
        let data = x
            .host
            .data
            .iter()
            .map(|&v| activation_scalar(act, v))
            .collect();
        Ok(RefTensor::new(x.host.shape.clone(), data))
    }

    fn glu(&self, x: &RefTensor) -> Result<RefTensor> {
        self.op();
        let c = x.host.last_dim();
        if x.host.rank() == 0 || !c.is_multiple_of(2) {
            return Err(Error::shape(
                "glu",
                format!("last dim of {:?} must be even", x.host.shape),
            ));
        }
        let half = c / 2;
        let mut out = Vec::with_capacity(x.host.data.len() / 2);
        for row in x.host.data.chunks(c.max(1)) {
            for i in 0..half {
                out.push((row[i] as f64 * sigmoid(row[half + i] as f64)) as f32);
            }
        }
        let mut shape = x.host.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = half;
        Ok(RefTensor::new(shape, out))
    }

    fn softmax(&self, x: &RefTensor) -> Result<RefTensor> {
        self.op();
        let c = x.host.last_dim().max(1);
        let mut out = Vec::with_capacity(x.host.data.len());
        for row in x.host.data.chunks(c) {
            let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
            let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
            out.extend(row.iter().map(|&v| ((v as f64 - max).exp() / sum) as f32));
        }
        Ok(RefTensor::new(x.host.shape.clone(), out))
    }

    fn log_softmax(&self, x: &RefTensor) -> Result<RefTensor> {
        self.op();
        let c = x.host.last_dim().max(1);
        let mut out = Vec::with_capacity(x.host.data.len());
        for row in x.host.data.chunks(c) {
            let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
            let lse = max
                + row
                    .iter()
                    .map(|&v| (v as f64 - max).exp())
                    .sum::<f64>()
                    .ln();
            out.extend(row.iter().map(|&v| (v as f64 - lse) as f32));
        }
        Ok(RefTensor::new(x.host.shape.clone(), out))
    }

    fn add(&self, a: &RefTensor, b: &RefTensor) -> Result<RefTensor> {
        self.op();
        broadcast("add", a, b, |x, y| x + y)
    }

    fn mul(&self, a: &RefTensor, b: &RefTensor) -> Result<RefTensor> {
        self.op();
        broadcast("mul", a, b, |x, y| x * y)
    }

    fn affine(&self, x: &RefTensor, s: f32, t: f32) -> Result<RefTensor> {
        self.op();
        let data = x
            .host
            .data
            .iter()
            .map(|&v| (v as f64 * s as f64 + t as f64) as f32)
            .collect();
        Ok(RefTensor::new(x.host.shape.clone(), data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], data: &[f32]) -> RefTensor {
        RefTensor {
            host: HostTensor::new(shape.to_vec(), data.to_vec()).unwrap(),
        }
    }

    fn close(got: &[f32], want: &[f32], tol: f32) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tol,
                "element {i}: {g} vs {w} (all: {got:?})"
            );
        }
    }

    #[test]
    fn linear_2x3_by_hand() {
        let be = ReferenceBackend::new();
        // x (2, 3), W (2, 3): y[r][j] = Σ_k x[r][k]·W[j][k] + b[j]
        let x = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let w = be
            .weight(
                &HostTensor::new(vec![2, 3], vec![1., 0., -1., 0.5, 0.5, 0.5]).unwrap(),
                Lane::F32,
            )
            .unwrap();
        let b = t(&[2], &[10., 20.]);
        let y = be.linear(&x, &w, Some(&b)).unwrap();
        assert_eq!(y.host.shape, vec![2, 2]);
        // row 0: 1−3+10 = 8, (1+2+3)/2+20 = 23; row 1: 4−6+10 = 8, (4+5+6)/2+20 = 27.5
        close(&y.host.data, &[8., 23., 8., 27.5], 0.0);
        let c = be.counters().snapshot();
        assert_eq!((c.gemm_f32, c.gemm_f16, c.gemm_q8), (1, 0, 0));
        assert!(c.ops >= 1);
    }

    #[test]
    fn linear_rejects_wrong_k() {
        let be = ReferenceBackend::new();
        let x = t(&[2, 4], &[0.; 8]);
        let w = be
            .weight(
                &HostTensor::new(vec![2, 3], vec![0.; 6]).unwrap(),
                Lane::F32,
            )
            .unwrap();
        assert!(matches!(be.linear(&x, &w, None), Err(Error::Shape { .. })));
    }

    #[test]
    fn q8_weight_is_the_round_trip() {
        let be = ReferenceBackend::new();
        // One block with amax 127 makes the scale exactly 1, so integers survive and 0.4 → 0.
        let mut row = vec![0f32; 40];
        row[0] = 127.0;
        row[1] = 0.4;
        row[2] = -3.6;
        row[33] = 2.0;
        let w = be
            .weight(&HostTensor::new(vec![1, 40], row).unwrap(), Lane::Q8)
            .unwrap();
        assert_eq!((w.data[0], w.data[1], w.data[2]), (127.0, 0.0, -4.0));
        // The second block's amax is 2: scale 2/127 rounds through f16 but 2 maps back to ±q·scale.
        assert!((w.data[33] - 2.0).abs() < 2e-3);
        let f16w = be
            .weight(
                &HostTensor::new(vec![1, 2], vec![1.0 / 3.0, 1e-8]).unwrap(),
                Lane::F16,
            )
            .unwrap();
        assert_eq!(f16w.data[0], half::f16::from_f32(1.0 / 3.0).to_f32());
        assert_ne!(f16w.data[0], 1.0 / 3.0);
    }

    #[test]
    fn softmax_of_known_values() {
        let be = ReferenceBackend::new();
        let y = be
            .softmax(&t(&[1, 3], &[0.0, (2f32).ln(), (5f32).ln()]))
            .unwrap();
        // exp: 1, 2, 5 → /8
        close(&y.host.data, &[0.125, 0.25, 0.625], 1e-7);
        let l = be
            .log_softmax(&t(&[3], &[0.0, (2f32).ln(), (5f32).ln()]))
            .unwrap();
        close(
            &l.host.data,
            &[-(8f32).ln(), (0.25f32).ln(), (0.625f32).ln()],
            1e-6,
        );
    }

    #[test]
    fn causal_attention_two_keys() {
        let be = ReferenceBackend::new();
        // One head, Dh = 1, Tq = Tk = 2. q = [1, 1], k = [0, ln 3], v = [10, 20], scale 1.
        let q = t(&[1, 2, 1], &[1., 1.]);
        let k = t(&[1, 2, 1], &[0., (3f32).ln()]);
        let v = t(&[1, 2, 1], &[10., 20.]);
        let p = AttnParams {
            n_heads: 1,
            scale: 1.0,
            kv_len: None,
            causal: true,
        };
        let y = be.attention(&q, &k, &v, &p).unwrap();
        // Query 0 sees key 0 only → 10. Query 1 sees both, weights 1:3 → 10/4 + 60/4 = 17.5.
        close(&y.host.data, &[10.0, 17.5], 1e-5);
        let pr = be.attention_probs(&q, &k, &p).unwrap();
        assert_eq!(pr.host.shape, vec![1, 1, 2, 2]);
        close(&pr.host.data, &[1.0, 0.0, 0.25, 0.75], 1e-6);
        // Non-causal with kv_len 1: both queries see only key 0.
        let p1 = AttnParams {
            causal: false,
            kv_len: Some(1),
            ..p
        };
        close(
            &be.attention(&q, &k, &v, &p1).unwrap().host.data,
            &[10.0, 10.0],
            0.0,
        );
    }

    #[test]
    fn attention_splits_heads_of_the_last_dim() {
        let be = ReferenceBackend::new();
        // Two heads of Dh = 1: head 0 prefers key 1 strongly, head 1 has equal logits.
        let q = t(&[1, 1, 2], &[10., 0.]);
        let k = t(&[1, 2, 2], &[0., 5., 10., 5.]);
        let v = t(&[1, 2, 2], &[1., 2., 3., 4.]);
        let p = AttnParams {
            n_heads: 2,
            scale: 1.0,
            kv_len: None,
            causal: false,
        };
        let y = be.attention(&q, &k, &v, &p).unwrap();
        // head 0: logits 0, 100 → v = 3; head 1: logits 0, 0 → (2 + 4)/2 = 3
        close(&y.host.data, &[3.0, 3.0], 1e-5);
        let bad = AttnParams { n_heads: 3, ..p };
        assert!(matches!(
            be.attention(&q, &k, &v, &bad),
            Err(Error::Shape { .. })
        ));
    }

    #[test]
    fn conv1d_stride2_pad1_by_hand() {
        let be = ReferenceBackend::new();
        // x (1, 4, 1) = [1, 2, 3, 4]; padded: [0, 1, 2, 3, 4, 0]; K = 3, stride 2 → T_out = (4+2−3)/2+1 = 2
        // w = [1, 10, 100]: out0 = 0·1 + 1·10 + 2·100 = 210, out1 = 2·1 + 3·10 + 4·100 = 432
        let x = t(&[1, 4, 1], &[1., 2., 3., 4.]);
        let w = be
            .weight(
                &HostTensor::new(vec![1, 3], vec![1., 10., 100.]).unwrap(),
                Lane::F32,
            )
            .unwrap();
        let p = Conv1dParams {
            kernel: 3,
            stride: 2,
            padding: 1,
        };
        let y = be.conv1d(&x, &w, Some(&t(&[1], &[0.5])), p).unwrap();
        assert_eq!(y.host.shape, vec![1, 2, 1]);
        close(&y.host.data, &[210.5, 432.5], 0.0);
    }

    #[test]
    fn conv1d_weight_layout_is_cout_cin_k() {
        let be = ReferenceBackend::new();
        // C_in = 2, K = 2, no padding: out = Σ_ci Σ_k w[ci][k]·x[t+k][ci]
        // x frames: (1, 100), (2, 200), (3, 300); w[c_in=0] = [1, 2], w[c_in=1] = [3, 4]
        let x = t(&[1, 3, 2], &[1., 100., 2., 200., 3., 300.]);
        let w = be
            .weight(
                &HostTensor::new(vec![1, 4], vec![1., 2., 3., 4.]).unwrap(),
                Lane::F32,
            )
            .unwrap();
        let y = be
            .conv1d(
                &x,
                &w,
                None,
                Conv1dParams {
                    kernel: 2,
                    stride: 1,
                    padding: 0,
                },
            )
            .unwrap();
        // t0: 1·1 + 2·2 + 100·3 + 200·4 = 1105; t1: 2 + 6 + 600 + 1200 = 1808
        close(&y.host.data, &[1105., 1808.], 0.0);
    }

    #[test]
    fn depthwise_and_conv2d_by_hand() {
        let be = ReferenceBackend::new();
        // Depthwise: 2 channels, K = 2, stride 1, pad 0. ch0 w [1, 1], ch1 w [1, −1]
        let x = t(&[1, 3, 2], &[1., 5., 2., 7., 3., 11.]);
        let w = t(&[2, 2], &[1., 1., 1., -1.]);
        let y = be.depthwise_conv1d(&x, &w, None, 1, 0).unwrap();
        close(&y.host.data, &[3., -2., 5., -4.], 0.0);
        // conv2d 1→1 channel, 3×3 input, 2×2 kernel of ones, stride 1, pad 0: sums of 2×2 windows
        let x2 = t(&[1, 1, 3, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
        let w2 = t(&[1, 1, 2, 2], &[1., 1., 1., 1.]);
        let p = Conv2dParams {
            kernel: (2, 2),
            stride: (1, 1),
            padding: (0, 0),
            groups: 1,
        };
        let y2 = be.conv2d(&x2, &w2, None, p).unwrap();
        assert_eq!(y2.host.shape, vec![1, 1, 2, 2]);
        close(&y2.host.data, &[12., 16., 24., 28.], 0.0);
        // stride 2, pad 1: windows at (−1,−1), (−1,1), (1,−1), (1,1)
        let p2 = Conv2dParams {
            stride: (2, 2),
            padding: (1, 1),
            ..p
        };
        close(
            &be.conv2d(&x2, &w2, None, p2).unwrap().host.data,
            &[1., 5., 11., 28.],
            0.0,
        );
    }

    #[test]
    fn norms_and_activations_by_hand() {
        let be = ReferenceBackend::new();
        // mean 2, var 2/3 → (x−2)/sqrt(2/3)
        let y = be
            .layer_norm(
                &t(&[1, 3], &[1., 2., 3.]),
                &t(&[3], &[1., 1., 2.]),
                Some(&t(&[3], &[0., 1., 0.])),
                0.0,
            )
            .unwrap();
        let s = (1.5f32).sqrt();
        close(&y.host.data, &[-s, 1.0, 2.0 * s], 1e-6);
        // rms of [3, 4] = sqrt(12.5)
        let r = be
            .rms_norm(&t(&[2], &[3., 4.]), &t(&[2], &[1., 1.]), 0.0)
            .unwrap();
        close(
            &r.host.data,
            &[3.0 / 12.5f32.sqrt(), 4.0 / 12.5f32.sqrt()],
            1e-6,
        );
        let x = t(&[3], &[-1.0, 0.0, 2.0]);
        // GELU(−1) = −Φ(−1) = −0.158655…, GELU(2) = 2·Φ(2) = 2·0.977250…
        let g = be.activation(&x, Activation::Gelu).unwrap();
        close(&g.host.data, &[-0.158_655_25, 0.0, 1.954_499_7], 1e-6);
        let sg = be.activation(&x, Activation::Sigmoid).unwrap();
        close(
            &sg.host.data,
            &[1.0 / (1.0 + 1f32.exp()), 0.5, 1.0 / (1.0 + (-2f32).exp())],
            1e-7,
        );
        let relu = be.activation(&x, Activation::Relu).unwrap();
        close(&relu.host.data, &[0.0, 0.0, 2.0], 0.0);
        // GLU: [a, b] → a·σ(b); σ(0) = 1/2
        close(
            &be.glu(&t(&[1, 2], &[6.0, 0.0])).unwrap().host.data,
            &[3.0],
            0.0,
        );
        // Φ far in the tail: erfc(5) = 1.5374597944e-12
        assert!((erfc(5.0) - 1.537_459_794_4e-12).abs() < 1e-20);
        assert!((erfc(0.5) - 0.479_500_122_186_953_5).abs() < 1e-15);
    }

    #[test]
    fn layout_ops_by_hand() {
        let be = ReferenceBackend::new();
        let a = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        close(
            &be.transpose_last2(&a).unwrap().host.data,
            &[1., 4., 2., 5., 3., 6.],
            0.0,
        );
        let s = be.slice(&a, 1, 1, 2).unwrap();
        assert_eq!(s.host.shape, vec![2, 2]);
        close(&s.host.data, &[2., 3., 5., 6.], 0.0);
        assert!(be.slice(&a, 1, 2, 2).is_err());
        let c = be.concat(&[&a, &s], 1).unwrap();
        close(&c.host.data, &[1., 2., 3., 2., 3., 4., 5., 6., 5., 6.], 0.0);
        let g = be.gather_rows(&a, &[1, 1, 0]).unwrap();
        close(&g.host.data, &[4., 5., 6., 4., 5., 6., 1., 2., 3.], 0.0);
        assert!(be.gather_rows(&a, &[2]).is_err());
        let mut dst = t(&[1, 3, 1], &[0., 0., 0.]);
        be.write_rows(&mut dst, &t(&[1, 2, 1], &[7., 8.]), 1)
            .unwrap();
        close(&dst.host.data, &[0., 7., 8.], 0.0);
        assert!(be
            .write_rows(&mut dst, &t(&[1, 2, 1], &[7., 8.]), 2)
            .is_err());
        let m = be
            .matmul(&t(&[1, 1, 2], &[1., 2.]), &t(&[1, 2, 1], &[3., 4.]), false)
            .unwrap();
        close(&m.host.data, &[11.], 0.0);
        let added = be.add(&a, &t(&[3], &[10., 20., 30.])).unwrap();
        close(&added.host.data, &[11., 22., 33., 14., 25., 36.], 0.0);
        assert!(be.add(&a, &t(&[2], &[1., 1.])).is_err());
    }
}
