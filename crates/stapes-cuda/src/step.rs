//! The decoder-step ops of the `Backend` contract (`embed_step`, `write_rows_step`,
//! `attention_step`) on this home: kernels (`kernels/step.cu`) that read the step's position and
//! ids from the device tensor of [`stapes_core::StepParams`], so a captured step graph replays
//! for every token instead of baking one position into each launch.
//!
//! The kernels take f32 activations only and refuse anything else with a shape error naming the
//! op and tensor: they were written for the f32 `CudaTensor` layout.

use std::ffi::c_void;

use stapes_core::{Activation, AttnParams, Backend, DeviceTensor, Error, LinearFusion, Result};

use crate::backend::{CudaBackend, CudaTensor, CudaWeight, WeightData};

/// Key rows the attention kernel takes: below 512 keys `Backend::attention` of one row runs the
/// same code (`attn_one_f32`, or the row kernel at 128 threads a block), which is what makes the
/// two bit-identical.
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
    let query = StepQuery {
        name: "q",
        t: q,
        kernel: "attn_step_f32",
    };
    launch_step_attention(b, OP, query, k, v, p, step, alloc)
}

/// Where a step attention's query rows come from: their tensor and the kernel that reads them.
struct StepQuery<'a> {
    name: &'static str,
    t: &'a CudaTensor,
    kernel: &'static str,
}

/// Whether [`Backend::attention`] of one query row of head size `d` over `kv_len` keys runs
/// `attn_one_f32`: the code the step kernels run for every cache they take (≤ [`MAX_KEYS`]
/// rows) where step.cu's `attn_one_ok(d)` holds, so a step graph and the host-parameter step
/// agree bit for bit. Longer rows keep the row kernel's 512 threads a block.
pub(crate) fn one_row_attention_fits(d: usize, kv_len: usize) -> bool {
    d.is_multiple_of(4) && d <= 128 && kv_len <= MAX_KEYS
}

/// The checks and launch both step-attention forms share once their shapes are known: one block
/// per (row, head) over the `T` cached keys of `k, v (B, T, H·Dh)`; output `(B, 1, H·Dh)`.
#[allow(clippy::too_many_arguments)]
fn launch_step_attention(
    b: &CudaBackend,
    op: &'static str,
    q: StepQuery<'_>,
    k: &CudaTensor,
    v: &CudaTensor,
    p: &AttnParams,
    step: &CudaTensor,
    alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
) -> Result<CudaTensor> {
    let ks = k.shape();
    let (bs, tk, hd, h) = (ks[0], ks[1], ks[2], p.n_heads);
    if tk > MAX_KEYS {
        return Err(Error::shape(
            op,
            format!("a cache of {tk} rows; the step kernel takes at most {MAX_KEYS}"),
        ));
    }
    check_step(op, step, bs)?;
    for (name, t) in [(q.name, q.t), ("k", k), ("v", v)] {
        check_f32(op, name, t)?;
    }
    let d = hd / h;
    let threads = 128usize;
    let smem = (d.div_ceil(4) * 4 + (threads / 32) * d + tk) * 4;
    if smem > 48 * 1024 {
        return Err(Error::shape(
            op,
            format!("head size {d} with {tk} cache rows needs {smem} bytes of shared memory"),
        ));
    }
    let out = alloc(&[bs, 1, hd])?;
    if bs * h == 0 {
        return Ok(out);
    }
    let (o, qp, kp, vp, sp) = (
        b.p(&out.buf),
        b.p(&q.t.buf),
        b.p(&k.buf),
        b.p(&v.buf),
        b.p(&step.buf),
    );
    let (tki, hi, di, scale) = (tk as i32, h as i32, d as i32, p.scale);
    b.launch(
        q.kernel,
        (1, h as u32, bs as u32),
        (threads as u32, 1, 1),
        smem as u32,
        args![o, qp, kp, vp, sp, tki, hi, di, scale],
    )?;
    Ok(out)
}

/// Keys per block of the split cross-attention (step.cu's SPLIT_KEYS).
const SPLIT_CHUNK: usize = 64;
/// Threads of the split attention's combine (step.cu: attn_combine_f32).
const COMBINE_THREADS: usize = 256;

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
    check_f32(OP, "q", q)?;
    // K/V both f32, or both f16 (`compact_copy`)
    let kernel = match (k.is_f16(), v.is_f16()) {
        (false, false) => "attn_split_f32",
        (true, true) => "attn_split_kv16",
        _ => return Ok(None),
    };
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
    // the combine kernel stages one weight per split and its 256 partial sums in shared memory,
    // beside its static 128 bytes, within the 48 KiB a block gets without opting in
    const COMBINE_SMEM_MAX: usize = 48 * 1024 - 128;
    let combine_smem = (n_split + COMBINE_THREADS) * 4;
    if combine_smem > COMBINE_SMEM_MAX {
        return Err(Error::shape(
            OP,
            format!(
                "{kv_len} keys: the split step attention takes at most {}",
                (COMBINE_SMEM_MAX / 4 - COMBINE_THREADS) * SPLIT_CHUNK
            ),
        ));
    }
    let part = b
        .pool
        .alloc(rows * h * n_split * (d + 2) * 4)
        .map_err(Error::from)?;
    let (pp, qp, kp, vp) = (b.p(&part), b.p(&q.buf), b.p(&k.buf), b.p(&v.buf));
    let (tqi, tki, hi, di, kvi, scale) = (
        tq as i32,
        tk as i32,
        h as i32,
        d as i32,
        kv_len as i32,
        p.scale,
    );
    b.launch(
        kernel,
        (n_split as u32, h as u32, rows as u32),
        (128, 1, 1),
        0,
        args![pp, qp, kp, vp, tqi, tki, hi, di, kvi, scale],
    )?;
    let (o, nsi) = (b.p(&out.buf), n_split as i32);
    b.launch(
        "attn_combine_f32",
        (h as u32, rows as u32, 1),
        (COMBINE_THREADS as u32, 1, 1),
        combine_smem as u32,
        args![o, pp, hi, di, nsi],
    )?;
    Ok(Some(out))
}

/// [`compact_copy`] keeps f16 copies (a window's cross K/V, read by `attn_split_kv16` at every
/// step) unless `STAPES_CUDA_CROSS_F16=0`, which keeps the tensor itself.
pub(crate) fn cross_f16_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("STAPES_CUDA_CROSS_F16").map_or(CROSS_F16_DEFAULT, |v| v.trim() != "0")
    })
}

/// Whether [`compact_copy`] makes f16 copies when `STAPES_CUDA_CROSS_F16` is unset: half the
/// bytes each step's cross-attention reads (tests/cross_f16.rs: the kernel's bits over the
/// rounded values; the real-weights id tests hold with it; ledger stop 13).
const CROSS_F16_DEFAULT: bool = true;

/// [`Backend::compact_copy`]: an f16 copy (values rounded to nearest even, as every f16
/// activation here) unless `STAPES_CUDA_CROSS_F16=0`, else `t` itself.
pub(crate) fn compact_copy(b: &CudaBackend, t: &CudaTensor) -> Result<CudaTensor> {
    if !cross_f16_on() {
        return Ok(t.clone());
    }
    b.as_dtype(t, crate::backend::Dtype::F16)
}

/// `STAPES_CUDA_PDL_PREFETCH=1`: the step GEMVs also pull the rest of their weight towards L2
/// before the PDL wait (off by default: H200, stop 17, turbo decode 0.297-0.301 -> 0.279-0.282
/// ms a token without it, and the GEMV shapes back to back faster too; kept for A/B timing).
fn l2_prefetch_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_PDL_PREFETCH").is_ok_and(|v| v.trim() == "1"))
}

/// Rows the fused step GEMV takes (batch × beams of a decoder step).
const GEMV_MAX_ROWS: usize = 32;
/// Warps per block of `step_gemv_*`.
const GEMV_WARPS: usize = 8;
/// The step GEMV's forms: the wide one (4 features a warp, one wave of blocks walking the tiles,
/// x staged and normed once a block, a whole batch of each weight row's loads in flight for 1-2
/// rows) everywhere except for 1-2 rows without a norm below this many features, which take
/// one feature per group of warps splitting K (more blocks: H200, stop 17, turbo's out and fc2
/// projections 3.5 / 5.8 us back to back in that form vs 4.6 / 7.3 wide). The norm is what
/// the split form pays for (every one of its many blocks norms x: qkv 9.4 vs 4.4 us, fc1 7.9
/// vs 5.0), and so are beams (5 rows: qkv 35 vs 14 us, fc2 22 vs 12, whatever rows a block
/// takes: fc2's K of 5120 leaves room for 2).
const GEMV_WIDE_N: usize = 16384;
/// Blocks the split-K form aims at (4 per SM of an H100/H200).
const GEMV_TARGET_BLOCKS: usize = 528;

/// `(wide form, features per warp group, warps splitting K)` of the step GEMV.
/// `STAPES_CUDA_STEP_GEMV_FORM` = `wide` (4 features per warp everywhere), `c1` (one per warp
/// group, K split as below, everywhere), `c1k1` (one per warp, no split), else the choice below:
/// for same-binary timing of the forms.
fn forced_form() -> u8 {
    static F: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    *F.get_or_init(
        || match std::env::var("STAPES_CUDA_STEP_GEMV_FORM").as_deref() {
            Ok("wide") => 1,
            Ok("c1") => 2,
            Ok("c1k1") => 3,
            _ => 0,
        },
    )
}

fn gemv_form(n: usize, k: usize, m: usize, norm: bool) -> (bool, usize, usize) {
    let forced = forced_form();
    if forced == 3 {
        return (false, 1, 1);
    }
    if forced == 1 || (forced == 0 && (n >= GEMV_WIDE_N || norm || m > 2)) {
        return (true, 4, 1);
    }
    let want = (GEMV_TARGET_BLOCKS * GEMV_WARPS)
        .div_ceil(n)
        .next_power_of_two();
    // every K slice should get at least one 256-wide chunk
    let chunks = k.div_ceil(256).next_power_of_two();
    let ks = want.min(chunks).clamp(1, GEMV_WARPS);
    (false, 1, ks)
}

/// Shared memory the GEMV's x rows (and where they fit, a norm's gamma and beta) may use: 48 KB
/// per block without opting into more, less the kernel's static buffers (the reduction's 8
/// warps × 4 features × 8 rows of f32, the norm's two sums of 8 warps × 8 rows).
const GEMV_SMEM: usize = 48 * 1024 - 1024 - 512;

/// The wide form's grid is one wave of resident blocks walking the tiles, unless
/// `STAPES_CUDA_GEMV_WAVE=0` (a block per tile; A/B timing).
fn wave_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_GEMV_WAVE").map_or(true, |v| v.trim() != "0"))
}

/// `STAPES_CUDA_STEP_GEMV=0` sends `norm_linear` / `qkv_step` to their composed defaults (A/B
/// timing, and a way around the kernel should it misbehave).
fn step_gemv_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_STEP_GEMV").map_or(true, |v| v.trim() != "0"))
}

/// Whether `t` is absent or an f32 tensor of `numel` values.
fn f32_of(t: Option<&CudaTensor>, numel: usize) -> bool {
    t.is_none_or(|t| !t.is_f16() && t.numel() == numel)
}

/// Where a step GEMV also writes the k and v thirds of its output: the caches `(B, T, C)` and
/// the step tensor.
pub(crate) struct KvAppend<'a> {
    pub k: &'a mut CudaTensor,
    pub v: &'a mut CudaTensor,
    pub step: &'a CudaTensor,
}

/// [`Backend::norm_linear`] (and with `kv`, [`Backend::qkv_step`]) in one `step_gemv_*` kernel:
/// `x (.., K)` f32 with at most 32 rows, an f16 weight with K a multiple of 8, f32 parameters,
/// activation none or GELU (erf). `None` for anything else (the caller composes other ops).
pub(crate) fn norm_linear(
    b: &CudaBackend,
    x: &CudaTensor,
    w: &CudaWeight,
    f: &LinearFusion<'_, CudaTensor>,
    kv: Option<KvAppend<'_>>,
    alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
) -> Result<Option<CudaTensor>> {
    let (n, k) = b.weight_shape(w);
    let xs = x.shape();
    let WeightData::F16(wb) = &w.data else {
        return Ok(None);
    };
    if !step_gemv_on() {
        return Ok(None);
    }
    if xs.last() != Some(&k) || k == 0 || !k.is_multiple_of(8) || x.is_f16() || n == 0 {
        return Ok(None);
    }
    let m = x.numel() / k;
    let mut shape = xs.to_vec();
    if let Some(l) = shape.last_mut() {
        *l = n;
    }
    let act = match f.act {
        None => 0i32,
        Some(Activation::Gelu) => 1,
        Some(_) => return Ok(None),
    };
    let (gamma, beta, eps) = match &f.norm {
        Some(nr) => (Some(nr.gamma), nr.beta, nr.eps),
        None => (None, None, 0.0),
    };
    let params_ok = f32_of(gamma, k)
        && f32_of(beta, k)
        && f32_of(f.bias, n)
        && f.residual
            .is_none_or(|r| !r.is_f16() && r.shape() == shape.as_slice());
    if m == 0 || m > GEMV_MAX_ROWS || !params_ok {
        return Ok(None);
    }
    // rows of x per block: all of them where shared memory allows, in the kernels' sizes
    let fit = GEMV_SMEM / (k * 4);
    let Some(mg) = [1usize, 2, 4, 8]
        .into_iter()
        .filter(|&g| g <= fit)
        .find(|&g| g >= m)
        .or_else(|| [8usize, 4, 2, 1].into_iter().find(|&g| g <= fit))
    else {
        return Ok(None);
    };
    let (kc, vc, sp, kv_c, t) = match &kv {
        Some(a) => {
            let (ks, c) = (a.k.shape(), n / 3);
            let ok = n.is_multiple_of(3)
                && xs.len() == 3
                && xs[1] == 1
                && ks.len() == 3
                && ks[0] == xs[0]
                && ks[2] == c
                && a.v.shape() == ks;
            if !ok {
                return Err(Error::shape(
                    "qkv_step",
                    format!(
                        "x {xs:?}, W ({n}, {k}), caches {ks:?} / {:?}: want (B, 1, d), (3C, d), (B, T, C)",
                        a.v.shape()
                    ),
                ));
            }
            check_step("qkv_step", a.step, xs[0])?;
            check_f32("qkv_step", "k cache", a.k)?;
            check_f32("qkv_step", "v cache", a.v)?;
            // a GEMM input prepared from a cache would be stale after this write
            b.forget_prep();
            (
                b.p(&a.k.buf),
                b.p(&a.v.buf),
                b.p(&a.step.buf),
                c as i32,
                ks[1] as i32,
            )
        }
        None => (0, 0, 0, 0, 0),
    };
    let out = alloc(&shape)?;
    let opt = |t: Option<&CudaTensor>| t.map_or(0, |t| b.p(&t.buf));
    let (y, xp, wp) = (b.p(&out.buf), b.p(&x.buf), b.p(wb));
    let (bp, rp, gp, bt) = (opt(f.bias), opt(f.residual), opt(gamma), opt(beta));
    let (mi, ni, ki) = (m as i32, n as i32, k as i32);
    let (wide, cols, ks) = gemv_form(n, k, m, gamma.is_some());
    let name = match (mg, wide) {
        (1, true) => "step_gemv_1",
        (2, true) => "step_gemv_2",
        (4, true) => "step_gemv_4",
        (_, true) => "step_gemv_8",
        (1, false) => "step_gemv_1_c1",
        (2, false) => "step_gemv_2_c1",
        (4, false) => "step_gemv_4_c1",
        (_, false) => "step_gemv_8_c1",
    };
    let per_block = GEMV_WARPS / ks * cols;
    let (tiles, grid_y) = (n.div_ceil(per_block), m.div_ceil(mg));
    // a norm's gamma and beta go to shared memory behind the rows where they fit (`gsm`)
    let gsm = gamma.is_some() && (mg + 2) * k * 4 <= GEMV_SMEM;
    let smem = ((mg + if gsm { 2 } else { 0 }) * k * 4) as u32;
    // the wide form walks its tiles with one wave of resident blocks, each taking the same
    // number of tiles (the kernel's tile loop); the others launch a block per tile
    let grid_x = if wide && wave_on() {
        let threads = (GEMV_WARPS * 32) as u32;
        let wave = (b.sm_count() * b.resident_blocks(name, threads, smem)? / grid_y).max(1);
        tiles.div_ceil(tiles.div_ceil(wave))
    } else {
        tiles
    };
    let ksi = ks as i32;
    let pf = i32::from(l2_prefetch_on());
    let gsm = i32::from(gsm);
    b.launch(
        name,
        (grid_x as u32, grid_y as u32, 1),
        ((GEMV_WARPS * 32) as u32, 1, 1),
        smem,
        args![y, xp, wp, bp, rp, gp, bt, eps, mi, ni, ki, act, kc, vc, sp, kv_c, t, ksi, pf, gsm],
    )?;
    Ok(Some(out))
}

/// [`Backend::attention_step_packed`]: q read in place from `qkv (B, 1, 3C)` over the caches
/// `k, v (B, T, C)` that already hold the step's rows.
pub(crate) fn attention_packed(
    b: &CudaBackend,
    qkv: &CudaTensor,
    k: &CudaTensor,
    v: &CudaTensor,
    p: &AttnParams,
    step: &CudaTensor,
    alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
) -> Result<CudaTensor> {
    const OP: &str = "attention_step_packed";
    let (qs, ks) = (qkv.shape(), k.shape());
    let c = stapes_core::backend::packed_width(OP, qs)?;
    let ok = qs[1] == 1
        && ks.len() == 3
        && ks[0] == qs[0]
        && ks[2] == c
        && v.shape() == ks
        && p.n_heads > 0
        && c.is_multiple_of(p.n_heads);
    if !ok {
        return Err(Error::shape(
            OP,
            format!(
                "qkv {qs:?}, k {ks:?}, v {:?}, {} heads: want (B, 1, 3·H·Dh) over (B, T, H·Dh)",
                v.shape(),
                p.n_heads
            ),
        ));
    }
    let query = StepQuery {
        name: "qkv",
        t: qkv,
        kernel: "attn_step_packed_f32",
    };
    launch_step_attention(b, OP, query, k, v, p, step, alloc)
}

/// [`Backend::norm_linear`]: the fused kernel where it applies, else the composed default.
pub(crate) fn norm_linear_op(
    b: &CudaBackend,
    x: &CudaTensor,
    w: &CudaWeight,
    f: &LinearFusion<'_, CudaTensor>,
    alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
) -> Result<CudaTensor> {
    match norm_linear(b, x, w, f, None, alloc)? {
        Some(y) => Ok(y),
        None => stapes_core::backend::norm_linear_composed(b, x, w, f),
    }
}

/// [`Backend::qkv_step`]: the fused kernel (K/V append in its epilogue) where it applies, else
/// the composed default.
pub(crate) fn qkv_step_op(
    b: &CudaBackend,
    x: &CudaTensor,
    w: &CudaWeight,
    f: &LinearFusion<'_, CudaTensor>,
    (k, v): (&mut CudaTensor, &mut CudaTensor),
    step: &CudaTensor,
    alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
) -> Result<CudaTensor> {
    if !k.is_f16() && !v.is_f16() {
        let kv = KvAppend {
            k: &mut *k,
            v: &mut *v,
            step,
        };
        // the kernel declines (None) before it writes anything
        if let Some(y) = norm_linear(b, x, w, f, Some(kv), alloc)? {
            return Ok(y);
        }
    }
    stapes_core::backend::qkv_step_composed(b, x, w, f, (k, v), step)
}

/// Page-locked host memory that step outputs come back through: a copy from pageable memory
/// goes through the driver's own staging buffer in pieces, one from pinned memory is one DMA.
/// Allocated portable (any context may copy into it) and grown on demand; one for the process,
/// held under the lock for the length of a copy.
struct Staging {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the pointer is only dereferenced under `STAGING`'s lock.
unsafe impl Send for Staging {}

static STAGING: std::sync::Mutex<Option<Staging>> = std::sync::Mutex::new(None);

/// `STAPES_CUDA_PINNED=0` turns the staging off (plain `download`), for A/B timing.
fn pinned_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("STAPES_CUDA_PINNED").map_or(true, |v| v.trim() != "0"))
}

/// [`Backend::download_step`]: an f32 tensor through the pinned staging buffer (the stream
/// synchronized), `None` where the caller should take the plain download (f16 values, staging
/// off).
pub(crate) fn download_pinned(
    b: &CudaBackend,
    t: &CudaTensor,
) -> Result<Option<stapes_core::HostTensor>> {
    use cudarc::driver::result;
    if t.is_f16() || !pinned_on() {
        return Ok(None);
    }
    let n = t.numel();
    let err = |what| move |e| Error::from(crate::CudaError::driver(what, e));
    b.bind()?;
    let mut guard = STAGING.lock().unwrap_or_else(|p| p.into_inner());
    if guard.as_ref().is_none_or(|s| s.len < n) {
        if let Some(old) = guard.take() {
            // SAFETY: allocated below by malloc_host; no copy into it is in flight (every
            // copy synchronizes before the lock is released)
            unsafe { result::free_host(old.ptr.cast()) }.map_err(err("free pinned host memory"))?;
        }
        let len = n.max(64 * 1024);
        // SAFETY: a plain allocation; CU_MEMHOSTALLOC_PORTABLE = 1
        let ptr = unsafe { result::malloc_host(len * 4, 1) }
            .map_err(err("allocate pinned host memory"))?;
        *guard = Some(Staging {
            ptr: ptr.cast(),
            len,
        });
    }
    let Some(st) = guard.as_ref() else {
        return Ok(None);
    };
    let data = {
        // SAFETY: `st.ptr` holds `st.len ≥ n` f32 and is only touched under the lock; the
        // stream is synchronized before the slice is read
        let dst = unsafe { std::slice::from_raw_parts_mut(st.ptr, n) };
        if n > 0 {
            unsafe { b.copy_dtoh(dst, t.buf.ptr) }.map_err(err("memcpy DtoH (pinned)"))?;
        }
        b.stream()
            .synchronize()
            .map_err(err("stream synchronize"))?;
        dst.to_vec()
    };
    Ok(Some(stapes_core::HostTensor::new(
        t.shape().to_vec(),
        data,
    )?))
}

/// [`Backend::write_host`]: `src` copied straight into `dst` (f32, same shape) on the stream,
/// `Ok(false)` where the caller should take the default.
pub(crate) fn write_host(
    b: &CudaBackend,
    dst: &mut CudaTensor,
    src: &stapes_core::HostTensor,
) -> Result<bool> {
    if dst.is_f16() || dst.shape() != src.shape.as_slice() {
        return Ok(false);
    }
    if src.data.is_empty() {
        return Ok(true);
    }
    b.bind()?;
    // a GEMM input prepared from `dst` would be stale after this write
    b.forget_prep();
    // SAFETY: dst holds numel f32; a copy from pageable memory returns once the driver has
    // taken the source, so `src` may go afterwards
    unsafe { b.copy_htod(dst.buf.ptr, &src.data) }
        .map_err(|e| Error::from(crate::CudaError::driver("memcpy HtoD (step)", e)))?;
    Ok(true)
}
