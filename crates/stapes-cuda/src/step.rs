//! The decoder-step ops of the `Backend` contract (`embed_step`, `write_rows_step`,
//! `attention_step`) on this home: kernels (`kernels/step.cu`) that read the step's position and
//! ids from the device tensor of [`stapes_core::StepParams`], so a captured step graph replays
//! for every token instead of baking one position into each launch.
//!
//! The kernels take f32 activations only and refuse anything else with a shape error naming the
//! op and tensor: they were written for the f32 `CudaTensor` layout.

use std::ffi::c_void;

use stapes_core::{AttnParams, DeviceTensor, Error, Result};

use crate::backend::{CudaBackend, CudaTensor};

/// Key rows the attention kernel takes: it runs 128 threads per block, as the eager row kernel
/// does below 512 keys, which is what makes the two bit-identical.
const MAX_KEYS: usize = 511;

macro_rules! args {
    ($($a:expr),* $(,)?) => { &mut [$(&$a as *const _ as *mut c_void),*] };
}

/// The tensor holds f32 values (what these kernels read and write).
fn check_f32(op: &'static str, name: &str, t: &CudaTensor) -> Result<()> {
    if t.is_f16() {
        return Err(Error::shape(
            op,
            format!(
                "{name} {:?} holds f16 values (the step kernels take f32 activations only)",
                t.shape()
            ),
        ));
    }
    Ok(())
}

/// `step` is `(1, 1, 1 + batch)`; returns nothing but the check.
fn check_step(op: &'static str, step: &CudaTensor, batch: usize) -> Result<()> {
    check_f32(op, "step", step)?;
    if step.shape() != [1, 1, 1 + batch] {
        return Err(Error::shape(
            op,
            format!(
                "step tensor {:?} for a batch of {batch}: want (1, 1, {})",
                step.shape(),
                1 + batch
            ),
        ));
    }
    Ok(())
}

fn grid_1d(n: usize) -> (u32, u32, u32) {
    (n.div_ceil(256).clamp(1, 132 * 32) as u32, 1, 1)
}

/// `table (V, D)`, `positions (P, D)` → `out (B, 1, D)`, B from the step tensor.
pub(crate) fn embed(
    b: &CudaBackend,
    table: &CudaTensor,
    positions: &CudaTensor,
    step: &CudaTensor,
    alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
) -> Result<CudaTensor> {
    const OP: &str = "embed_step";
    let (ts, ps) = (table.shape(), positions.shape());
    if ts.len() != 2 || ps.len() != 2 || ts[1] != ps[1] || step.shape().len() != 3 {
        return Err(Error::shape(
            OP,
            format!(
                "table {ts:?}, positions {ps:?}, step {:?}: want (V, D), (P, D), (1, 1, 1 + B)",
                step.shape()
            ),
        ));
    }
    let batch = step.shape()[2].saturating_sub(1);
    check_step(OP, step, batch)?;
    check_f32(OP, "table", table)?;
    check_f32(OP, "positions", positions)?;
    let (v, d, p) = (ts[0], ts[1], ps[0]);
    let out = alloc(&[batch, 1, d])?;
    let (o, tp, pp, sp) = (
        b.p(&out.buf),
        b.p(&table.buf),
        b.p(&positions.buf),
        b.p(&step.buf),
    );
    let (bi, di, vi, pi) = (batch as i32, d as i32, v as i32, p as i32);
    b.launch(
        "embed_step_f32",
        grid_1d(batch * d),
        (256, 1, 1),
        0,
        args![o, tp, pp, sp, bi, di, vi, pi],
    )?;
    Ok(out)
}

/// `src (B, n, C)` into `dst (B, T, C)` at the step's position.
pub(crate) fn write_rows(
    b: &CudaBackend,
    dst: &mut CudaTensor,
    src: &CudaTensor,
    step: &CudaTensor,
) -> Result<()> {
    const OP: &str = "write_rows_step";
    let (ds, ss) = (dst.shape(), src.shape());
    if ds.len() != 3 || ss.len() != 3 || ds[0] != ss[0] || ds[2] != ss[2] || ss[1] > ds[1] {
        return Err(Error::shape(
            OP,
            format!("{ss:?} into {ds:?}: want (B, n, C) into (B, T, C), n ≤ T"),
        ));
    }
    check_step(OP, step, ds[0])?;
    check_f32(OP, "dst", dst)?;
    check_f32(OP, "src", src)?;
    // a GEMM input prepared from `dst` would be stale after this write
    b.forget_prep();
    let (bs, t, c, n) = (ds[0], ds[1], ds[2], ss[1]);
    if bs * n * c == 0 {
        return Ok(());
    }
    let (dp, sp, stp) = (b.p(&dst.buf), b.p(&src.buf), b.p(&step.buf));
    let (bi, ti, ci, ni) = (bs as i32, t as i32, c as i32, n as i32);
    b.launch(
        "write_rows_step_f32",
        grid_1d(bs * n * c),
        (256, 1, 1),
        0,
        args![dp, sp, stp, bi, ti, ci, ni],
    )
}

/// One query row per sequence, `q (B, 1, H·Dh)`, over the first `pos + 1` rows of
/// `k, v (B, T, H·Dh)`.
pub(crate) fn attention(
    b: &CudaBackend,
    q: &CudaTensor,
    k: &CudaTensor,
    v: &CudaTensor,
    p: &AttnParams,
    step: &CudaTensor,
    alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
) -> Result<CudaTensor> {
    const OP: &str = "attention_step";
    let (qs, ks) = (q.shape(), k.shape());
    let ok = qs.len() == 3
        && ks.len() == 3
        && qs[1] == 1
        && ks[0] == qs[0]
        && ks[2] == qs[2]
        && v.shape() == ks
        && p.n_heads > 0
        && qs[2].is_multiple_of(p.n_heads);
    if !ok {
        return Err(Error::shape(
            OP,
            format!(
                "q {qs:?}, k {ks:?}, v {:?}, {} heads: want (B, 1, H·Dh) over (B, T, H·Dh)",
                v.shape(),
                p.n_heads
            ),
        ));
    }
    let (bs, tk, hd, h) = (qs[0], ks[1], qs[2], p.n_heads);
    if tk > MAX_KEYS {
        return Err(Error::shape(
            OP,
            format!("a cache of {tk} rows; the step kernel takes at most {MAX_KEYS}"),
        ));
    }
    check_step(OP, step, bs)?;
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        check_f32(OP, name, t)?;
    }
    let d = hd / h;
    let threads = 128usize;
    let smem = (d.div_ceil(4) * 4 + (threads / 32) * d + tk) * 4;
    if smem > 48 * 1024 {
        return Err(Error::shape(
            OP,
            format!("head size {d} with {tk} cache rows needs {smem} bytes of shared memory"),
        ));
    }
    let out = alloc(qs)?;
    if bs * h == 0 {
        return Ok(out);
    }
    let (o, qp, kp, vp, sp) = (
        b.p(&out.buf),
        b.p(&q.buf),
        b.p(&k.buf),
        b.p(&v.buf),
        b.p(&step.buf),
    );
    let (tki, hi, di, scale) = (tk as i32, h as i32, d as i32, p.scale);
    b.launch(
        "attn_step_f32",
        (1, h as u32, bs as u32),
        (threads as u32, 1, 1),
        smem as u32,
        args![o, qp, kp, vp, sp, tki, hi, di, scale],
    )?;
    Ok(out)
}

/// Keys per block of the split cross-attention.
const SPLIT_CHUNK: usize = 64;

/// [`stapes_core::Backend::attention_decode`]: `q (B, Tq, H·Dh)` with Tq ≤ 16 over
/// `k, v (B, T, H·Dh)`, not causal, head size a multiple of 4 up to 128, split over the keys.
/// `None` for any other case (the caller runs the ordinary attention).
pub(crate) fn attention_split(
    b: &CudaBackend,
    q: &CudaTensor,
    k: &CudaTensor,
    v: &CudaTensor,
    p: &AttnParams,
    alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
) -> Result<Option<CudaTensor>> {
    const OP: &str = "attention_decode";
    let (qs, ks) = (q.shape(), k.shape());
    let fits = qs.len() == 3
        && ks.len() == 3
        && qs[0] == ks[0]
        && qs[2] == ks[2]
        && v.shape() == ks
        && !p.causal
        && qs[1] <= 16
        && p.n_heads > 0
        && qs[2].is_multiple_of(p.n_heads)
        && (qs[2] / p.n_heads).is_multiple_of(4)
        && qs[2] / p.n_heads <= 128;
    if !fits {
        return Ok(None);
    }
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        check_f32(OP, name, t)?;
    }
    let (bs, tq, tk, h) = (qs[0], qs[1], ks[1], p.n_heads);
    let d = qs[2] / h;
    let kv_len = p.kv_len.unwrap_or(tk);
    if kv_len > tk {
        return Err(Error::shape(OP, format!("kv_len {kv_len} of {tk} keys")));
    }
    let out = alloc(qs)?;
    let rows = bs * tq;
    if rows * h == 0 || kv_len == 0 {
        return Ok(Some(out));
    }
    let n_split = kv_len.div_ceil(SPLIT_CHUNK);
    let part = b
        .pool
        .alloc(rows * h * n_split * (d + 2) * 4)
        .map_err(Error::from)?;
    let threads = 128usize;
    let smem = ((1 + threads / 32) * d + SPLIT_CHUNK) * 4;
    let (pp, qp, kp, vp) = (b.p(&part), b.p(&q.buf), b.p(&k.buf), b.p(&v.buf));
    let (tqi, tki, hi, di, kvi, ci, scale) = (
        tq as i32,
        tk as i32,
        h as i32,
        d as i32,
        kv_len as i32,
        SPLIT_CHUNK as i32,
        p.scale,
    );
    b.launch(
        "attn_split_f32",
        (n_split as u32, h as u32, rows as u32),
        (threads as u32, 1, 1),
        smem as u32,
        args![pp, qp, kp, vp, tqi, tki, hi, di, kvi, ci, scale],
    )?;
    let (o, nsi) = (b.p(&out.buf), n_split as i32);
    b.launch(
        "attn_combine_f32",
        (h as u32, rows as u32, 1),
        (d.div_ceil(32) as u32 * 32, 1, 1),
        0,
        args![o, pp, hi, di, nsi],
    )?;
    Ok(Some(out))
}
