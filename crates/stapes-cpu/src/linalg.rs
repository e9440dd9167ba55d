//! GEMM plumbing: a bounds-checked wrapper over the `gemm` crate, and the lane-specific linear
//! kernels (f32 / f16 / q8) with their small-M (decoder step) and large-M (encoder) paths.

use crate::simd::{self, Avx2, MR};
use crate::vnni::{self, Vnni};
use gemm::Parallelism;
use half::f16;
use rayon::prelude::*;

/// A strided read-only matrix view: element (i, j) is `data[i·rs + j·cs]`.
#[derive(Clone, Copy)]
pub struct Mat<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl Mat<'_> {
    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// `dst (m, n) [+]= scale · a (m, k) · b (k, n)`; `dst` is row-major with row stride `dst_rs`.
/// Panics only on an internal indexing bug (views that do not cover their shapes).
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    a: Mat,
    b: Mat,
    scale: f32,
    par: Parallelism,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        a.fits(m, k) && b.fits(k, n) && (m - 1) * dst_rs + n <= dst.len() && dst_rs >= n,
        "sgemm views do not cover ({m}, {k}) · ({k}, {n})"
    );
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                dst[r * dst_rs..r * dst_rs + n].fill(0.0);
            }
        }
        return;
    }
    // SAFETY: the assert above proves every index gemm touches lies inside the three slices, and
    // `dst` is borrowed mutably so nothing aliases it.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            scale,
            false,
            false,
            false,
            par,
        );
    }
}

/// Activations quantized like the q8 lane: per row, ⌈K/32⌉ blocks of 32 int8 in ±127
/// (zero padded) with one f32 scale each.
pub struct QuantRows {
    pub q: Vec<i8>,
    pub s: Vec<f32>,
    pub kb: usize,
}

impl QuantRows {
    pub fn new(x: &[f32], m: usize, k: usize) -> Self {
        let kb = k.div_ceil(32);
        let mut q = vec![0i8; m * kb * 32];
        let mut s = vec![0f32; m * kb];
        // Serial: only the M ≤ SMALL_M path quantizes activations, a few rows.
        q.chunks_mut(kb * 32)
            .zip(s.chunks_mut(kb))
            .enumerate()
            .for_each(|(r, (qr, sr))| {
                let row = &x[r * k..(r + 1) * k];
                for (b, chunk) in row.chunks(32).enumerate() {
                    let amax = chunk.iter().fold(0f32, |a, v| a.max(v.abs()));
                    let scale = amax / 127.0;
                    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
                    for (d, v) in qr[b * 32..].iter_mut().zip(chunk) {
                        *d = (v * inv).round() as i8;
                    }
                    sr[b] = scale;
                }
            });
        QuantRows { q, s, kb }
    }

    fn row(&self, r: usize) -> (&[i8], &[f32]) {
        (
            &self.q[r * self.kb * 32..(r + 1) * self.kb * 32],
            &self.s[r * self.kb..(r + 1) * self.kb],
        )
    }
}

/// `f(chunk index, chunk)` over `data`, in parallel on the current rayon pool when `par`.
fn for_chunks<T: Send>(
    par: bool,
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    if chunk == 0 {
        return;
    }
    if par {
        data.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    } else {
        data.chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    }
}

/// `f` with a scratch buffer of at least `len` floats, kept per thread between calls: the
/// encoder's weight panels (1.5–6 MB each) were a fresh allocation per linear call, i.e. fresh
/// pages to fault in every time.
fn with_panel<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    thread_local! {
        static PANEL: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    PANEL.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
            f(&mut buf[..len])
        }
        // Re-entered on this thread (a pool task running a nested linear): a private buffer.
        Err(_) => f(&mut vec![0f32; len]),
    })
}

/// f16 weight values: a buffer of our own, or the checkpoint's own bytes in a read-only memory
/// map (its page cache), which `keep` holds open: no copy, no fresh pages to fault in.
#[derive(Clone)]
pub enum F16Buf {
    Owned(Vec<f16>),
    Mapped {
        keep: std::sync::Arc<dyn std::any::Any + Send + Sync>,
        ptr: *const f16,
        len: usize,
    },
}

// SAFETY: `Mapped` points into memory `keep` owns, which nothing writes while it is shared
// (a read-only map, or a buffer behind an `Arc`); reading it from any thread is fine.
unsafe impl Send for F16Buf {}
// SAFETY: as for Send: shared, read-only data.
unsafe impl Sync for F16Buf {}

impl F16Buf {
    /// A view of `bytes` (little-endian f16 pairs) kept alive by `keep`, where the bytes are
    /// 2-byte aligned and the host is little-endian; else `None` (the caller copies).
    pub fn mapped(
        bytes: &[u8],
        keep: &std::sync::Arc<dyn std::any::Any + Send + Sync>,
    ) -> Option<Self> {
        let aligned = (bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<f16>());
        if !aligned || cfg!(target_endian = "big") {
            return None;
        }
        Some(F16Buf::Mapped {
            keep: keep.clone(),
            ptr: bytes.as_ptr().cast::<f16>(),
            len: bytes.len() / 2,
        })
    }
}

impl std::ops::Deref for F16Buf {
    type Target = [f16];
    fn deref(&self) -> &[f16] {
        match self {
            F16Buf::Owned(v) => v,
            // SAFETY: `ptr` is 2-byte aligned and `len` f16 values lie behind it (checked in
            // `mapped`), inside memory `keep` holds alive and unchanged; every bit pattern is a
            // valid f16.
            F16Buf::Mapped { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }
}

impl std::fmt::Debug for F16Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            F16Buf::Owned(_) => "owned",
            F16Buf::Mapped { .. } => "mapped",
        };
        write!(f, "F16Buf({kind}, {} values)", self.len())
    }
}

/// A lane-stored `(N, K)` weight as the CPU keeps it.
#[derive(Debug, Clone)]
pub enum Store {
    F32(Vec<f32>),
    F16(F16Buf),
    /// `q`: N·kb blocks of 32 int8; `s`: N·kb scales (the f16 scales widened once);
    /// `packed`: the VNNI layout, made at the weight's first large-M use (encoder and cross-K/V
    /// weights only, so decoder-only weights never pay for a second copy).
    Q8 {
        q: Vec<i8>,
        s: Vec<f32>,
        kb: usize,
        packed: std::sync::OnceLock<vnni::Packed>,
    },
}

/// Rows of M at or below this take the GEMV-style path (weight streamed once, parallel over N).
pub const SMALL_M: usize = 8;
/// f32/f16 weights up to this many elements (4 MB as f32, within L2 + L3 reach) are dotted four
/// rows at a time at M = 1.
const DOT4_MAX_ELEMS: usize = 1 << 20;
/// Weight rows per task in the GEMV-style path: big enough to amortise task overhead, small
/// enough that 2+ threads share the logits projection evenly.
const GEMV_ROWS: usize = 256;

/// The linear kernels, dispatched once at construction on what the CPU can run.
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    pub avx2: Option<Avx2>,
    /// AVX-512 VNNI: the q8 lane's large-M GEMM in int8 (else W8A32 through the f32 GEMM).
    pub vnni: Option<Vnni>,
    pub threads: usize,
}

impl Kernels {
    fn dot_f32(&self, x: &[&[f32]; MR], rows: usize, w: &[f32]) -> [f32; MR] {
        match self.avx2 {
            Some(a) => a.dot_f32(x, rows, w),
            None => simd::scalar::dot_f32(x, rows, w),
        }
    }

    fn dot_f16(&self, x: &[&[f32]; MR], rows: usize, w: &[f16]) -> [f32; MR] {
        match self.avx2 {
            Some(a) => a.dot_f16(x, rows, w),
            None => simd::scalar::dot_f16(x, rows, w),
        }
    }

    fn dot_q8(
        &self,
        xq: &[&[i8]; MR],
        xs: &[&[f32]; MR],
        rows: usize,
        wq: &[i8],
        ws: &[f32],
    ) -> [f32; MR] {
        match self.avx2 {
            Some(a) => a.dot_q8(xq, xs, rows, wq, ws),
            None => simd::scalar::dot_q8(xq, xs, rows, wq, ws),
        }
    }

    fn par(&self) -> Parallelism {
        if self.threads > 1 {
            Parallelism::Rayon(self.threads)
        } else {
            Parallelism::None
        }
    }

    /// `x (m, k) · Wᵀ + b -> (m, n)`. Shapes were validated by the caller. With `parallel`
    /// the caller is inside the backend's pool and the work is split across it; without, it all
    /// runs on the calling thread.
    #[allow(clippy::too_many_arguments)]
    pub fn linear(
        &self,
        x: &[f32],
        m: usize,
        k: usize,
        w: &Store,
        n: usize,
        bias: Option<&[f32]>,
        parallel: bool,
    ) -> Vec<f32> {
        if !parallel && self.threads > 1 {
            return Kernels {
                threads: 1,
                ..*self
            }
            .linear(x, m, k, w, n, bias, false);
        }
        let mut out = if m <= SMALL_M {
            self.linear_small(x, m, k, w, n)
        } else {
            match w {
                Store::F32(wd) => {
                    let mut out = vec![0f32; m * n];
                    let a = Mat {
                        data: x,
                        rs: k,
                        cs: 1,
                    };
                    // Wᵀ as a (k, n) view of the row-major (n, k) weight.
                    let b = Mat {
                        data: wd,
                        rs: 1,
                        cs: k,
                    };
                    sgemm(m, n, k, &mut out, n, false, a, b, 1.0, self.par());
                    out
                }
                Store::F16(wd) => self.linear_f16_large(x, m, k, wd, n),
                Store::Q8 {
                    q, s, kb, packed, ..
                } => match self.vnni {
                    Some(v) => {
                        let pw = packed.get_or_init(|| vnni::Packed::new(q, s, n, *kb));
                        v.linear(x, m, k, pw, n, self.threads > 1)
                    }
                    None => self.linear_q8_large(x, m, k, q, s, *kb, n),
                },
            }
        };
        if let Some(b) = bias {
            for_chunks(self.threads > 1, &mut out, n, |_, row| {
                row.iter_mut().zip(b).for_each(|(o, &v)| *o += v)
            });
        }
        out
    }

    /// Decoder-step shapes: every weight row is read once and dotted with all (≤ SMALL_M)
    /// activation rows; tasks split N, writing a transposed (n, m) buffer.
    fn linear_small(&self, x: &[f32], m: usize, k: usize, w: &Store, n: usize) -> Vec<f32> {
        let xq = match w {
            Store::Q8 { .. } => Some(QuantRows::new(x, m, k)),
            _ => None,
        };
        let mut out_t = vec![0f32; n * m];
        for_chunks(
            self.threads > 1,
            &mut out_t,
            GEMV_ROWS * m.max(1),
            |chunk, o| {
                let n0 = chunk * GEMV_ROWS;
                // M = 1 with AVX2: four weight rows per step (`dot4_*`); the tail falls through.
                // For f32/f16 weights streamed from DRAM four concurrent row streams measured ~2×
                // slower than one, so only cache-sized f32/f16 weights take it.
                let mut done = 0;
                let four = match w {
                    Store::Q8 { .. } => true,
                    _ => n * k <= DOT4_MAX_ELEMS,
                };
                if let (1, Some(a), true) = (m, self.avx2, four) {
                    let quads = o.len() / 4;
                    for (i4, o4) in o.chunks_exact_mut(4).enumerate() {
                        let j = n0 + 4 * i4;
                        let res = match w {
                            Store::F32(wd) => a.dot4_f32(&x[..k], &wd[j * k..(j + 4) * k]),
                            Store::F16(wd) => a.dot4_f16(&x[..k], &wd[j * k..(j + 4) * k]),
                            Store::Q8 { q, s, kb, .. } => {
                                let Some(xq) = xq.as_ref() else { return };
                                let (xqr, xsr) = xq.row(0);
                                a.dot4_q8(
                                    xqr,
                                    xsr,
                                    &q[j * kb * 32..(j + 4) * kb * 32],
                                    &s[j * kb..(j + 4) * kb],
                                )
                            }
                        };
                        o4.copy_from_slice(&res);
                    }
                    done = quads * 4;
                }
                for (i, orow) in o.chunks_mut(m.max(1)).enumerate().skip(done) {
                    let j = n0 + i;
                    for r0 in (0..m).step_by(MR) {
                        let rows = (m - r0).min(MR);
                        let res = match w {
                            Store::F32(wd) => {
                                let xr: [&[f32]; MR] =
                                    std::array::from_fn(|r| &x[(r0 + r.min(rows - 1)) * k..][..k]);
                                self.dot_f32(&xr, rows, &wd[j * k..(j + 1) * k])
                            }
                            Store::F16(wd) => {
                                let xr: [&[f32]; MR] =
                                    std::array::from_fn(|r| &x[(r0 + r.min(rows - 1)) * k..][..k]);
                                self.dot_f16(&xr, rows, &wd[j * k..(j + 1) * k])
                            }
                            Store::Q8 { q, s, kb, .. } => {
                                let Some(xq) = xq.as_ref() else { return };
                                let rq: [(&[i8], &[f32]); MR] =
                                    std::array::from_fn(|r| xq.row(r0 + r.min(rows - 1)));
                                let xqs: [&[i8]; MR] = std::array::from_fn(|r| rq[r].0);
                                let xss: [&[f32]; MR] = std::array::from_fn(|r| rq[r].1);
                                self.dot_q8(
                                    &xqs,
                                    &xss,
                                    rows,
                                    &q[j * kb * 32..(j + 1) * kb * 32],
                                    &s[j * kb..(j + 1) * kb],
                                )
                            }
                        };
                        orow[r0..r0 + rows].copy_from_slice(&res[..rows]);
                    }
                }
            },
        );
        let mut out = vec![0f32; m * n];
        for j in 0..n {
            for r in 0..m {
                out[r * n + j] = out_t[j * m + r];
            }
        }
        out
    }

    /// Encoder shapes, f16 lane: widen a panel of weight rows to f32 (exact), then the f32 GEMM
    /// writes that panel's columns. Panels bound the scratch to 1024·K floats without a full f32
    /// copy of the weight; each panel costs the GEMM one more packing pass over x, so they are
    /// kept large.
    fn linear_f16_large(&self, x: &[f32], m: usize, k: usize, wd: &[f16], n: usize) -> Vec<f32> {
        use half::slice::HalfFloatSliceExt;
        const PANEL: usize = 1024;
        let mut out = vec![0f32; m * n];
        let a = Mat {
            data: x,
            rs: k,
            cs: 1,
        };
        with_panel(PANEL.min(n) * k, |panel| {
            for n0 in (0..n).step_by(PANEL) {
                let nc = (n - n0).min(PANEL);
                let p = &mut panel[..nc * k];
                let src = &wd[n0 * k..(n0 + nc) * k];
                // 64 rows per task: the widening is split over the pool like the GEMM after it.
                for_chunks(self.threads > 1, p, 64 * k, |i, c| {
                    src[i * 64 * k..][..c.len()].convert_to_f32_slice(c)
                });
                let b = Mat {
                    data: p,
                    rs: 1,
                    cs: k,
                };
                sgemm(m, nc, k, &mut out[n0..], n, false, a, b, 1.0, self.par());
            }
        });
        out
    }

    /// Encoder shapes, q8 lane: dequantize a panel of weight rows to f32 and run the f32 GEMM
    /// on it (W8A32). On AVX2 without VNNI an int8 `maddubs` GEMM measured ~1.6× slower than the
    /// f32 GEMM at these shapes (docs/perf-ledger.md), and this path is also exact to the lane's
    /// meaning (f32 math on the q8-rounded weight). The int8 kernel serves the memory-bound
    /// M ≤ SMALL_M shapes, where reading 1/4 of the bytes is what counts.
    #[allow(clippy::too_many_arguments)]
    fn linear_q8_large(
        &self,
        x: &[f32],
        m: usize,
        k: usize,
        q: &[i8],
        s: &[f32],
        kb: usize,
        n: usize,
    ) -> Vec<f32> {
        const PANEL: usize = 1024;
        let mut out = vec![0f32; m * n];
        let a = Mat {
            data: x,
            rs: k,
            cs: 1,
        };
        with_panel(PANEL.min(n) * k, |panel| {
            for n0 in (0..n).step_by(PANEL) {
                let nc = (n - n0).min(PANEL);
                let p = &mut panel[..nc * k];
                for_chunks(self.threads > 1, p, k, |i, row| {
                    let j = n0 + i;
                    let (qr, sr) = (&q[j * kb * 32..(j + 1) * kb * 32], &s[j * kb..(j + 1) * kb]);
                    for (c, (dst, &sc)) in row.chunks_mut(32).zip(sr).enumerate() {
                        for (d, &v) in dst.iter_mut().zip(&qr[c * 32..]) {
                            *d = v as f32 * sc;
                        }
                    }
                });
                let b = Mat {
                    data: p,
                    rs: 1,
                    cs: k,
                };
                sgemm(m, nc, k, &mut out[n0..], n, false, a, b, 1.0, self.par());
            }
        });
        out
    }
}
