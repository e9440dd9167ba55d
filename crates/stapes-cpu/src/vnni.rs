//! q8 GEMM for large M (the encoder) on AVX-512 VNNI: `vpdpbusd` does 64 int8 multiply-adds per
//! instruction where an f32 FMA does 16, so the q8 lane's encoder no longer runs at f32 speed.
//!
//! Semantics are the q8 lane's small-M kernel (ggml Q8_0×Q8_0): activations are quantized per
//! row into 32-blocks (±127, one scale each), every block's int32 dot is scaled by
//! `x_scale · w_scale` and summed in f32.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes, so activations are stored as `x + 128` (u8)
//! and the excess `128 · Σ w` of each (column, block) is subtracted by starting that block's
//! int32 accumulator at `−128 · Σ w` (precomputed at packing).

use rayon::prelude::*;

/// Columns per packed panel (two 16-lane vectors).
pub const NR: usize = 32;
/// Activation rows per micro-tile.
const MR: usize = 4;
/// Output rows per parallel task: the task's activations (ROWS·K bytes) stay in L1/L2 while
/// every weight panel streams past once.
const ROWS: usize = 32;

/// Proof that AVX-512F, AVX-512BW and AVX-512 VNNI are available on this CPU.
#[derive(Clone, Copy, Debug)]
pub struct Vnni(());

impl Vnni {
    pub fn new() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vnni")
            {
                return Some(Vnni(()));
            }
        }
        None
    }
}

/// A q8 `(N, K)` weight re-laid for the kernel. Per 32-column panel `p` and K-block `b`:
/// `q[((p·kb + b)·8 + quad)·128 + col·4 + t]` = weight `(32p + col, 32b + 4·quad + t)`,
/// and 32 scales / 32 start values (`−128 · Σ` of the block) at `(p·kb + b)·32 + col`.
/// Columns past N are zero (their outputs are never stored).
#[derive(Clone, Debug)]
pub struct Packed {
    kb: usize,
    q: Vec<i8>,
    s: Vec<f32>,
    start: Vec<i32>,
}

impl Packed {
    /// From the q8 store's row-major blocks (`q`: N·kb·32, `s`: N·kb).
    pub fn new(q: &[i8], s: &[f32], n: usize, kb: usize) -> Self {
        let panels = n.div_ceil(NR);
        let mut pq = vec![0i8; panels * kb * 8 * 128];
        let mut ps = vec![0f32; panels * kb * NR];
        let mut pstart = vec![0i32; panels * kb * NR];
        for j in 0..n {
            let (p, col) = (j / NR, j % NR);
            for b in 0..kb {
                let blk = &q[(j * kb + b) * 32..][..32];
                let base = (p * kb + b) * 8 * 128;
                for (i, &v) in blk.iter().enumerate() {
                    pq[base + (i / 4) * 128 + col * 4 + i % 4] = v;
                }
                let at = (p * kb + b) * NR + col;
                ps[at] = s[j * kb + b];
                pstart[at] = -128 * blk.iter().map(|&v| v as i32).sum::<i32>();
            }
        }
        Packed {
            kb,
            q: pq,
            s: ps,
            start: pstart,
        }
    }
}

/// Rows of `x (m, k)` quantized like the q8 lane's activations (as `linalg::QuantRows`), each
/// value stored `+128` as u8: `u8` is `m·kb·32`, `s` is `m·kb`.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline(always)]
fn quantize_row_u8(xr: &[f32], ur: &mut [u8], sr: &mut [f32]) {
    for ((chunk, ub), sb) in xr.chunks(32).zip(ur.chunks_exact_mut(32)).zip(sr) {
        let amax = chunk.iter().fold(0f32, |a, v| a.max(v.abs()));
        let scale = amax / 127.0;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        for (d, v) in ub.iter_mut().zip(chunk) {
            *d = ((v * inv).round() as i32 + 128) as u8;
        }
        // zero padding past K is 0 + 128
        ub[chunk.len()..].fill(128);
        *sb = scale;
    }
}

/// [`quantize_row_u8`] in AVX-512, bit for bit: 32 values per block in two masked loads (the
/// zero fill past K quantizes to the 128 padding), the scale computed in scalar exactly as
/// there, and round-half-away-from-zero as truncation plus a ±1 where |fraction| ≥ ½.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_row_u8_avx512(xr: &[f32], ur: &mut [u8], sr: &mut [f32]) {
    use std::arch::x86_64::*;
    let k = xr.len();
    let half = _mm512_set1_ps(0.5);
    let one = _mm512_set1_ps(1.0);
    let sign = _mm512_set1_epi32(i32::MIN);
    let bias = _mm512_set1_epi32(128);
    for (b, sb) in sr.iter_mut().enumerate() {
        let at = b * 32;
        let n = (k - at).min(32);
        let m0: __mmask16 = if n >= 16 {
            0xFFFF
        } else {
            ((1u32 << n) - 1) as u16
        };
        let m1: __mmask16 = if n >= 32 {
            0xFFFF
        } else if n > 16 {
            ((1u32 << (n - 16)) - 1) as u16
        } else {
            0
        };
        let v0 = _mm512_maskz_loadu_ps(m0, xr.as_ptr().add(at));
        let v1 = _mm512_maskz_loadu_ps(m1, xr.as_ptr().add(at + 16));
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        let scale = amax / 127.0;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        let iv = _mm512_set1_ps(inv);
        let q = |v: __m512| -> __m128i {
            let t = _mm512_mul_ps(v, iv);
            let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(t);
            let away = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_abs_ps(_mm512_sub_ps(t, r)), half);
            let step = _mm512_castsi512_ps(_mm512_or_si512(
                _mm512_and_si512(_mm512_castps_si512(t), sign),
                _mm512_castps_si512(one),
            ));
            let r = _mm512_mask_add_ps(r, away, r, step);
            _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(r), bias))
        };
        let dst = ur.as_mut_ptr().add(at) as *mut __m128i;
        _mm_storeu_si128(dst, q(v0));
        _mm_storeu_si128(dst.add(1), q(v1));
        *sb = scale;
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn quantize_row_u8_avx512(xr: &[f32], ur: &mut [u8], sr: &mut [f32]) {
    quantize_row_u8(xr, ur, sr)
}

fn quantize_u8(x: &[f32], m: usize, k: usize, kb: usize, par: bool) -> (Vec<u8>, Vec<f32>) {
    let mut u = vec![0u8; m * kb * 32];
    let mut s = vec![0f32; m * kb];
    let row = |(r, (ur, sr)): (usize, (&mut [u8], &mut [f32]))| {
        // SAFETY: only reached through a `Vnni` token (AVX-512F/BW proven).
        unsafe { quantize_row_u8_avx512(&x[r * k..(r + 1) * k], ur, sr) }
    };
    if par {
        u.par_chunks_mut(kb * 32)
            .zip(s.par_chunks_mut(kb))
            .enumerate()
            .for_each(row);
    } else {
        u.chunks_mut(kb * 32)
            .zip(s.chunks_mut(kb))
            .enumerate()
            .for_each(row);
    }
    (u, s)
}

impl Vnni {
    /// `out (m, n) = x (m, k) · Wᵀ` for a packed q8 weight; with `par` the caller is inside the
    /// backend's pool and row chunks are split across it.
    pub fn linear(
        self,
        x: &[f32],
        m: usize,
        k: usize,
        w: &Packed,
        n: usize,
        par: bool,
    ) -> Vec<f32> {
        let kb = w.kb;
        assert!(x.len() >= m * k && k <= kb * 32 && w.q.len() >= n.div_ceil(NR) * kb * 1024);
        let (xu, xs) = quantize_u8(x, m, k, kb, par);
        let mut out = vec![0f32; m * n];
        let task = |(c, o): (usize, &mut [f32])| {
            let r0 = c * ROWS;
            let rows = o.len() / n;
            for p in 0..n.div_ceil(NR) {
                let cols = (n - p * NR).min(NR);
                for t0 in (0..rows).step_by(MR) {
                    let tr = (rows - t0).min(MR);
                    // SAFETY: the token proves AVX-512F/BW/VNNI; the assert above and the
                    // chunking bound every read (rows r0+t0 .. +tr of xu/xs, panel p of w) and
                    // write (tr rows × cols of this chunk).
                    unsafe {
                        tile(
                            &xu[(r0 + t0) * kb * 32..],
                            &xs[(r0 + t0) * kb..],
                            tr,
                            kb,
                            &w.q[p * kb * 1024..],
                            &w.s[p * kb * NR..],
                            &w.start[p * kb * NR..],
                            &mut o[t0 * n + p * NR..],
                            n,
                            cols,
                        )
                    }
                }
            }
        };
        if n > 0 {
            if par {
                out.par_chunks_mut(ROWS * n).enumerate().for_each(task);
            } else {
                out.chunks_mut(ROWS * n).enumerate().for_each(task);
            }
        }
        out
    }
}

/// One `tr ≤ MR` rows × `cols ≤ NR` tile over all K-blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    xu: &[u8],
    xs: &[f32],
    tr: usize,
    kb: usize,
    wq: &[i8],
    ws: &[f32],
    wstart: &[i32],
    out: &mut [f32],
    out_rs: usize,
    cols: usize,
) {
    use std::arch::x86_64::*;
    let rs = kb * 32;
    // Rows past `tr` re-read the last real row; their results are dropped.
    let xr: [*const u8; MR] = std::array::from_fn(|r| xu.as_ptr().add(r.min(tr - 1) * rs));
    let sr: [*const f32; MR] = std::array::from_fn(|r| xs.as_ptr().add(r.min(tr - 1) * kb));
    let mut f = [[_mm512_setzero_ps(); 2]; MR];
    let wp = wq.as_ptr();
    for b in 0..kb {
        let st0 = _mm512_loadu_si512(wstart.as_ptr().add(b * NR) as *const _);
        let st1 = _mm512_loadu_si512(wstart.as_ptr().add(b * NR + 16) as *const _);
        let mut a = [[st0, st1]; MR];
        for quad in 0..8 {
            let wb = wp.add((b * 8 + quad) * 128);
            let w0 = _mm512_loadu_si512(wb as *const _);
            let w1 = _mm512_loadu_si512(wb.add(64) as *const _);
            for r in 0..MR {
                let xv = _mm512_set1_epi32(
                    (xr[r].add(b * 32 + quad * 4) as *const i32).read_unaligned(),
                );
                a[r][0] = _mm512_dpbusd_epi32(a[r][0], xv, w0);
                a[r][1] = _mm512_dpbusd_epi32(a[r][1], xv, w1);
            }
        }
        let ws0 = _mm512_loadu_ps(ws.as_ptr().add(b * NR));
        let ws1 = _mm512_loadu_ps(ws.as_ptr().add(b * NR + 16));
        for r in 0..MR {
            let sx = _mm512_set1_ps(*sr[r].add(b));
            f[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[r][0]), _mm512_mul_ps(sx, ws0), f[r][0]);
            f[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[r][1]), _mm512_mul_ps(sx, ws1), f[r][1]);
        }
    }
    let m0: __mmask16 = if cols >= 16 {
        0xFFFF
    } else {
        (1u32 << cols) as u16 - 1
    };
    let m1: __mmask16 = if cols >= 32 {
        0xFFFF
    } else if cols > 16 {
        (1u32 << (cols - 16)) as u16 - 1
    } else {
        0
    };
    for (r, fr) in f.iter().enumerate().take(tr) {
        let o = out.as_mut_ptr().add(r * out_rs);
        _mm512_mask_storeu_ps(o, m0, fr[0]);
        _mm512_mask_storeu_ps(o.add(16), m1, fr[1]);
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    _xu: &[u8],
    _xs: &[f32],
    _tr: usize,
    _kb: usize,
    _wq: &[i8],
    _ws: &[f32],
    _wstart: &[i32],
    _out: &mut [f32],
    _out_rs: usize,
    _cols: usize,
) {
    unreachable!("Vnni::new returns None off x86_64")
}

#[cfg(test)]
mod tests {
    #[test]
    fn avx512_activation_quantizer_is_the_scalar_one() {
        if super::Vnni::new().is_none() {
            return;
        }
        for k in [1usize, 31, 32, 45, 384] {
            let mut x: Vec<f32> = (0..k)
                .map(|i| ((i * 7919 % 211) as f32 - 105.0) * 0.37)
                .collect();
            // amax 127 gives inv = 1, so these hit the ½ ties both ways
            x[0] = 127.0;
            if k > 3 {
                x[1] = 2.5;
                x[2] = -3.5;
                x[3] = -0.5;
            }
            let kb = k.div_ceil(32);
            let (mut u1, mut s1) = (vec![0u8; kb * 32], vec![0f32; kb]);
            let (mut u2, mut s2) = (vec![0u8; kb * 32], vec![0f32; kb]);
            super::quantize_row_u8(&x, &mut u1, &mut s1);
            // SAFETY: Vnni::new proved AVX-512F/BW.
            unsafe { super::quantize_row_u8_avx512(&x, &mut u2, &mut s2) };
            assert_eq!(u1, u2, "k = {k}");
            assert_eq!(s1, s2, "k = {k}");
        }
    }
}
