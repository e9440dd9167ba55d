//! `linear` and `linear_add` (`x · Wᵀ + b + r`) on the CUDA home. The residual goes into the
//! GEMM itself: cuBLASLt with C = r and beta = 1 for f16 weights, the i32 → f16/f32 scaling
//! epilogue for q8 weights; decoder-sized GEMVs (≤ 8 rows) add it in one pass after the GEMV.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use stapes_core::{DeviceTensor, Error, Result};

use super::{grid_1d, CudaBackend, CudaTensor, CudaWeight, Dtype, WeightData, GEMV_MAX_M};

impl CudaBackend {
    /// `x (.., K) · Wᵀ + bias (+ r)`, `r` exactly the output's shape (no broadcast: a residual
    /// stream has one value per output element).
    pub(super) fn linear_with(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        r: Option<&CudaTensor>,
    ) -> Result<CudaTensor> {
        let op = if r.is_some() { "linear_add" } else { "linear" };
        let k = *x.shape.last().unwrap_or(&0);
        if k != w.k || x.shape.is_empty() {
            return Err(Error::shape(
                op,
                format!("x {:?} with W ({}, {})", x.shape, w.n, w.k),
            ));
        }
        if let Some(b) = bias {
            if b.numel() != w.n {
                return Err(Error::shape(
                    op,
                    format!("bias {:?} for N = {}", b.shape, w.n),
                ));
            }
        }
        let m = x.numel() / k.max(1);
        let mut shape = x.shape.clone();
        *shape.last_mut().unwrap_or(&mut 0) = w.n;
        if let Some(r) = r {
            if r.shape() != shape.as_slice() {
                return Err(Error::shape(
                    op,
                    format!(
                        "residual {:?} for output {shape:?}: it must have the output's shape",
                        r.shape()
                    ),
                ));
            }
        }
        let out = self.alloc(&shape, self.out_dt())?;
        if m == 0 || w.n == 0 {
            return Ok(out);
        }
        let bias32 = self.param(bias)?;
        let bp = self.opt(bias32.as_ref());
        let bp16 = match (bias, &w.data) {
            (Some(b), WeightData::F16(_))
                if self.bias16_on.load(Ordering::Relaxed)
                    && out.dtype == Dtype::F16
                    && m > GEMV_MAX_M =>
            {
                // an f16 bias is used as it is; f32 parameters get one cached copy each
                match b.dtype {
                    Dtype::F16 => self.t(b),
                    Dtype::F32 => self.bias_f16(b)?,
                }
            }
            _ => 0,
        };
        // the GEMM reads the residual in the output's type (cuBLASLt wants C's type = D's)
        let r = r.map(|r| self.as_dtype(r, out.dtype)).transpose()?;
        let rp = self.opt(r.as_ref());
        self.linear_raw(out.buf.ptr, out.dtype, &x.buf, x.dtype, m, w, bp, bp16, rp)?;
        Ok(out)
    }

    /// `y += resid` over `len` elements of type `dt` (no-op for `resid = 0`): the residual of
    /// the paths whose GEMM cannot take it.
    pub(super) fn add_in_place(&self, y: u64, resid: u64, len: usize, dt: Dtype) -> Result<()> {
        if resid == 0 || len == 0 {
            return Ok(());
        }
        let n = len as i64;
        let (opcode, bits) = (0i32, dt.bit() * 0b111);
        self.launch(
            "binary",
            grid_1d(len),
            (256, 1, 1),
            0,
            args![y, y, resid, n, n, opcode, bits],
        )
    }
}
