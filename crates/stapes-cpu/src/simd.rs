//! Hand-written x86 kernels behind a capability token.
//!
//! [`Avx2`] can only be obtained through [`Avx2::new`], which checks the CPU at run time, so every
//! safe method on it may call the `#[target_feature]` functions soundly: a kernel that cannot run
//! here is never constructed.

/// Proof that AVX2, FMA and F16C are available on this CPU.
#[derive(Clone, Copy, Debug)]
pub struct Avx2(());

impl Avx2 {
    pub fn new() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return Some(Avx2(()));
            }
        }
        None
    }
}

/// Up to this many activation rows share one pass over a weight row in the GEMV-style kernels.
pub const MR: usize = 4;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Avx2, MR};
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// One row: four named accumulators (32 values per step) so the FMA latency (4 cycles,
    /// 2 per cycle) is covered when the weight is cache-resident (decoder layers).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot1_f32(x: &[f32], w: &[f32]) -> f32 {
        let k = w.len();
        let (xp, wp) = (x.as_ptr(), w.as_ptr());
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut i = 0;
        while i + 32 <= k {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(i)), _mm256_loadu_ps(wp.add(i)), a0);
            a1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(xp.add(i + 8)),
                _mm256_loadu_ps(wp.add(i + 8)),
                a1,
            );
            a2 = _mm256_fmadd_ps(
                _mm256_loadu_ps(xp.add(i + 16)),
                _mm256_loadu_ps(wp.add(i + 16)),
                a2,
            );
            a3 = _mm256_fmadd_ps(
                _mm256_loadu_ps(xp.add(i + 24)),
                _mm256_loadu_ps(wp.add(i + 24)),
                a3,
            );
            i += 32;
        }
        while i + 8 <= k {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(i)), _mm256_loadu_ps(wp.add(i)), a0);
            i += 8;
        }
        let mut s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for j in i..k {
            s += x[j] * w[j];
        }
        s
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot1_f16(x: &[f32], w: &[half::f16]) -> f32 {
        let k = w.len();
        let (xp, wp) = (x.as_ptr(), w.as_ptr() as *const u16);
        let ld = |i: usize| _mm256_cvtph_ps(_mm_loadu_si128(wp.add(i) as *const __m128i));
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut i = 0;
        while i + 32 <= k {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(i)), ld(i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(i + 8)), ld(i + 8), a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(i + 16)), ld(i + 16), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(i + 24)), ld(i + 24), a3);
            i += 32;
        }
        while i + 8 <= k {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(i)), ld(i), a0);
            i += 8;
        }
        let mut s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for j in i..k {
            s += x[j] * w[j].to_f32();
        }
        s
    }

    /// `out[r] = x[r] · w` for `rows ≤ MR` activation rows of length `k` (f32 weights).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_f32(x: &[&[f32]; MR], rows: usize, w: &[f32]) -> [f32; MR] {
        let k = w.len();
        if rows == 1 {
            let mut out = [0f32; MR];
            out[0] = dot1_f32(x[0], w);
            return out;
        }
        let mut acc = [_mm256_setzero_ps(); MR];
        let mut acc2 = [_mm256_setzero_ps(); MR];
        let mut i = 0;
        // Two accumulators per row hide the FMA latency when only one row is active.
        while i + 16 <= k {
            let w0 = _mm256_loadu_ps(w.as_ptr().add(i));
            let w1 = _mm256_loadu_ps(w.as_ptr().add(i + 8));
            for r in 0..MR {
                if r < rows {
                    let xp = x[r].as_ptr().add(i);
                    acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xp), w0, acc[r]);
                    acc2[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(8)), w1, acc2[r]);
                }
            }
            i += 16;
        }
        while i + 8 <= k {
            let w0 = _mm256_loadu_ps(w.as_ptr().add(i));
            for r in 0..rows.min(MR) {
                acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x[r].as_ptr().add(i)), w0, acc[r]);
            }
            i += 8;
        }
        let mut out = [0f32; MR];
        for r in 0..rows.min(MR) {
            let mut s = hsum(_mm256_add_ps(acc[r], acc2[r]));
            for j in i..k {
                s += x[r][j] * w[j];
            }
            out[r] = s;
        }
        out
    }

    /// As [`dot_f32`] with an f16 weight row, widened by F16C (exact).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_f16(x: &[&[f32]; MR], rows: usize, w: &[half::f16]) -> [f32; MR] {
        let k = w.len();
        if rows == 1 {
            let mut out = [0f32; MR];
            out[0] = dot1_f16(x[0], w);
            return out;
        }
        let wp = w.as_ptr() as *const u16;
        let mut acc = [_mm256_setzero_ps(); MR];
        let mut acc2 = [_mm256_setzero_ps(); MR];
        let mut i = 0;
        while i + 16 <= k {
            let w0 = _mm256_cvtph_ps(_mm_loadu_si128(wp.add(i) as *const __m128i));
            let w1 = _mm256_cvtph_ps(_mm_loadu_si128(wp.add(i + 8) as *const __m128i));
            for r in 0..MR {
                if r < rows {
                    let xp = x[r].as_ptr().add(i);
                    acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xp), w0, acc[r]);
                    acc2[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(8)), w1, acc2[r]);
                }
            }
            i += 16;
        }
        while i + 8 <= k {
            let w0 = _mm256_cvtph_ps(_mm_loadu_si128(wp.add(i) as *const __m128i));
            for r in 0..rows.min(MR) {
                acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x[r].as_ptr().add(i)), w0, acc[r]);
            }
            i += 8;
        }
        let mut out = [0f32; MR];
        for r in 0..rows.min(MR) {
            let mut s = hsum(_mm256_add_ps(acc[r], acc2[r]));
            for j in i..k {
                s += x[r][j] * w[j].to_f32();
            }
            out[r] = s;
        }
        out
    }

    /// q8×q8 block dot for `rows ≤ MR` quantized activation rows against one weight row.
    /// `xq[r]`/`wq` hold `kb` blocks of 32 int8 in ±127 and `xs[r]`/`ws` one scale per block.
    /// `maddubs` needs an unsigned operand: |x| against sign(x)·w keeps each product exact
    /// (±127 both sides, so no −128 edge case and the pair sums stay under i16::MAX).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_q8(
        xq: &[&[i8]; MR],
        xs: &[&[f32]; MR],
        rows: usize,
        wq: &[i8],
        ws: &[f32],
    ) -> [f32; MR] {
        let kb = ws.len();
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); MR];
        for b in 0..kb {
            let w = _mm256_loadu_si256(wq.as_ptr().add(b * 32) as *const __m256i);
            let wsb = *ws.get_unchecked(b);
            for r in 0..MR {
                if r < rows {
                    let x = _mm256_loadu_si256(xq[r].as_ptr().add(b * 32) as *const __m256i);
                    let ax = _mm256_sign_epi8(x, x);
                    let sw = _mm256_sign_epi8(w, x);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sw), ones);
                    let s = _mm256_set1_ps(wsb * *xs[r].get_unchecked(b));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[r]);
                }
            }
        }
        let mut out = [0f32; MR];
        for r in 0..rows.min(MR) {
            out[r] = hsum(acc[r]);
        }
        out
    }

    /// One activation row against 4 consecutive weight rows (`w` holds 4·k values): the
    /// decoder's M = 1 case, where four independent streams keep more loads in flight and the
    /// horizontal sums are amortised.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot4_f32(x: &[f32], w: &[f32]) -> [f32; 4] {
        // Named accumulators, not an array: LLVM keeps them in registers (an array indexed in
        // a loop was spilled, costing 4× here).
        let k = x.len();
        let (xp, w0, w1, w2, w3) = (
            x.as_ptr(),
            w.as_ptr(),
            w.as_ptr().add(k),
            w.as_ptr().add(2 * k),
            w.as_ptr().add(3 * k),
        );
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut i = 0;
        while i + 8 <= k {
            let xv = _mm256_loadu_ps(xp.add(i));
            a0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w0.add(i)), a0);
            a1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w1.add(i)), a1);
            a2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w2.add(i)), a2);
            a3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w3.add(i)), a3);
            i += 8;
        }
        let mut out = [hsum(a0), hsum(a1), hsum(a2), hsum(a3)];
        for j in i..k {
            for (r, o) in out.iter_mut().enumerate() {
                *o += x[j] * w[r * k + j];
            }
        }
        out
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot4_f16(x: &[f32], w: &[half::f16]) -> [f32; 4] {
        let k = x.len();
        let wp = w.as_ptr() as *const u16;
        let (xp, w0, w1, w2, w3) = (x.as_ptr(), wp, wp.add(k), wp.add(2 * k), wp.add(3 * k));
        let ld = |p: *const u16| _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut i = 0;
        while i + 8 <= k {
            let xv = _mm256_loadu_ps(xp.add(i));
            a0 = _mm256_fmadd_ps(xv, ld(w0.add(i)), a0);
            a1 = _mm256_fmadd_ps(xv, ld(w1.add(i)), a1);
            a2 = _mm256_fmadd_ps(xv, ld(w2.add(i)), a2);
            a3 = _mm256_fmadd_ps(xv, ld(w3.add(i)), a3);
            i += 8;
        }
        let mut out = [hsum(a0), hsum(a1), hsum(a2), hsum(a3)];
        for j in i..k {
            for (r, o) in out.iter_mut().enumerate() {
                *o += x[j] * w[r * k + j].to_f32();
            }
        }
        out
    }

    /// q8 version: `wq` holds 4·kb blocks, `ws` 4·kb scales.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot4_q8(xq: &[i8], xs: &[f32], wq: &[i8], ws: &[f32]) -> [f32; 4] {
        let kb = xs.len();
        let ones = _mm256_set1_epi16(1);
        let wp = wq.as_ptr();
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        for b in 0..kb {
            let x = _mm256_loadu_si256(xq.as_ptr().add(b * 32) as *const __m256i);
            let ax = _mm256_sign_epi8(x, x);
            let xsb = *xs.get_unchecked(b);
            let term = |r: usize| {
                let w = _mm256_loadu_si256(wp.add((r * kb + b) * 32) as *const __m256i);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w, x)), ones);
                (
                    _mm256_cvtepi32_ps(p),
                    _mm256_set1_ps(xsb * *ws.get_unchecked(r * kb + b)),
                )
            };
            let (p0, s0) = term(0);
            a0 = _mm256_fmadd_ps(p0, s0, a0);
            let (p1, s1) = term(1);
            a1 = _mm256_fmadd_ps(p1, s1, a1);
            let (p2, s2) = term(2);
            a2 = _mm256_fmadd_ps(p2, s2, a2);
            let (p3, s3) = term(3);
            a3 = _mm256_fmadd_ps(p3, s3, a3);
        }
        [hsum(a0), hsum(a1), hsum(a2), hsum(a3)]
    }

    /// `out[j] = scale · q · k_j` for `n` keys, key j at `k[j·stride..][..q.len()]`: four keys
    /// per step, their sums reduced together by one `hadd` tree.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn scores_row(q: &[f32], k: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
        let (d, n) = (q.len(), out.len());
        let d8 = d - d % 8;
        let (qp, kp) = (q.as_ptr(), k.as_ptr());
        let tail = |j: usize| -> f32 {
            let kr = kp.add(j * stride);
            let mut s = 0f32;
            for c in d8..d {
                s += *qp.add(c) * *kr.add(c);
            }
            s
        };
        let mut j = 0;
        while j + 4 <= n {
            let (k0, k1, k2, k3) = (
                kp.add(j * stride),
                kp.add((j + 1) * stride),
                kp.add((j + 2) * stride),
                kp.add((j + 3) * stride),
            );
            let (mut a0, mut a1, mut a2, mut a3) = (
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
            );
            let mut c = 0;
            while c < d8 {
                let qv = _mm256_loadu_ps(qp.add(c));
                a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0.add(c)), a0);
                a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1.add(c)), a1);
                a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2.add(c)), a2);
                a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3.add(c)), a3);
                c += 8;
            }
            let t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
            let s4 = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
            let mut s = [0f32; 4];
            _mm_storeu_ps(s.as_mut_ptr(), s4);
            for (i, sv) in s.iter().enumerate() {
                *out.get_unchecked_mut(j + i) = (sv + tail(j + i)) * scale;
            }
            j += 4;
        }
        while j < n {
            let kr = kp.add(j * stride);
            let mut a = _mm256_setzero_ps();
            let mut c = 0;
            while c < d8 {
                a = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(c)), _mm256_loadu_ps(kr.add(c)), a);
                c += 8;
            }
            *out.get_unchecked_mut(j) = (hsum(a) + tail(j)) * scale;
            j += 1;
        }
    }

    /// `out = Σ_j p[j] · v_j`, row j at `v[j·stride..][..out.len()]`: 32 output columns stay
    /// in registers while every row streams past.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn weighted_rows(p: &[f32], v: &[f32], stride: usize, out: &mut [f32]) {
        let d = out.len();
        let (vp, op) = (v.as_ptr(), out.as_mut_ptr());
        let mut c = 0;
        while c + 32 <= d {
            let (mut a0, mut a1, mut a2, mut a3) = (
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
            );
            for (j, &pj) in p.iter().enumerate() {
                let pv = _mm256_set1_ps(pj);
                let r = vp.add(j * stride + c);
                a0 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r), a0);
                a1 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r.add(8)), a1);
                a2 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r.add(16)), a2);
                a3 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r.add(24)), a3);
            }
            _mm256_storeu_ps(op.add(c), a0);
            _mm256_storeu_ps(op.add(c + 8), a1);
            _mm256_storeu_ps(op.add(c + 16), a2);
            _mm256_storeu_ps(op.add(c + 24), a3);
            c += 32;
        }
        while c + 8 <= d {
            let mut a = _mm256_setzero_ps();
            for (j, &pj) in p.iter().enumerate() {
                a = _mm256_fmadd_ps(
                    _mm256_set1_ps(pj),
                    _mm256_loadu_ps(vp.add(j * stride + c)),
                    a,
                );
            }
            _mm256_storeu_ps(op.add(c), a);
            c += 8;
        }
        while c < d {
            let mut s = 0f32;
            for (j, &pj) in p.iter().enumerate() {
                s += pj * *vp.add(j * stride + c);
            }
            *op.add(c) = s;
            c += 1;
        }
    }

    impl Avx2 {
        pub fn dot4_f32(self, x: &[f32], w: &[f32]) -> [f32; 4] {
            assert!(w.len() >= 4 * x.len());
            // SAFETY: the token proves AVX2+FMA; w covers 4 rows of x.len().
            unsafe { dot4_f32(x, w) }
        }

        pub fn dot4_f16(self, x: &[f32], w: &[half::f16]) -> [f32; 4] {
            assert!(w.len() >= 4 * x.len());
            // SAFETY: as dot4_f32, plus F16C.
            unsafe { dot4_f16(x, w) }
        }

        pub fn dot4_q8(self, xq: &[i8], xs: &[f32], wq: &[i8], ws: &[f32]) -> [f32; 4] {
            let kb = xs.len();
            assert!(xq.len() >= kb * 32 && wq.len() >= 4 * kb * 32 && ws.len() >= 4 * kb);
            // SAFETY: the token proves AVX2+FMA; the assert covers every block read.
            unsafe { dot4_q8(xq, xs, wq, ws) }
        }
        pub fn dot_f32(self, x: &[&[f32]; MR], rows: usize, w: &[f32]) -> [f32; MR] {
            // Checked in release too: these are safe public fns over raw-pointer kernels.
            assert!(x[..rows].iter().all(|r| r.len() >= w.len()));
            // SAFETY: the token proves AVX2+FMA; the assert shows every x row covers w.
            unsafe { dot_f32(x, rows, w) }
        }

        pub fn dot_f16(self, x: &[&[f32]; MR], rows: usize, w: &[half::f16]) -> [f32; MR] {
            assert!(x[..rows].iter().all(|r| r.len() >= w.len()));
            // SAFETY: as dot_f32, plus F16C.
            unsafe { dot_f16(x, rows, w) }
        }

        pub fn dot_q8(
            self,
            xq: &[&[i8]; MR],
            xs: &[&[f32]; MR],
            rows: usize,
            wq: &[i8],
            ws: &[f32],
        ) -> [f32; MR] {
            assert!(wq.len() >= ws.len() * 32);
            assert!(xq[..rows].iter().all(|r| r.len() >= ws.len() * 32));
            assert!(xs[..rows].iter().all(|r| r.len() >= ws.len()));
            // SAFETY: the token proves AVX2+FMA; the asserts cover every block and scale read.
            unsafe { dot_q8(xq, xs, rows, wq, ws) }
        }

        /// `out[j] = scale · q · k_j` for `out.len()` keys; key j is `k[j·stride..][..q.len()]`.
        pub fn scores_row(self, q: &[f32], k: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
            let n = out.len();
            assert!(n == 0 || (n - 1) * stride + q.len() <= k.len());
            // SAFETY: the token proves AVX2+FMA; the assert covers the last key's row.
            unsafe { scores_row(q, k, stride, scale, out) }
        }

        /// `out = Σ_j p[j] · v_j`; row j is `v[j·stride..][..out.len()]`.
        pub fn weighted_rows(self, p: &[f32], v: &[f32], stride: usize, out: &mut [f32]) {
            let n = p.len();
            assert!(n == 0 || (n - 1) * stride + out.len() <= v.len());
            // SAFETY: the token proves AVX2+FMA; the assert covers the last row.
            unsafe { weighted_rows(p, v, stride, out) }
        }

        /// [`super::quantize_q8_rows`] compiled with AVX2 (rounding inlined and vectorised
        /// instead of a `roundf` call per value); bit-identical to it.
        pub fn quantize_q8_rows(self, src: &[f32], k: usize, q: &mut [i8], s: &mut [f32]) {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn inner(src: &[f32], k: usize, q: &mut [i8], s: &mut [f32]) {
                super::quantize_q8_rows(src, k, q, s)
            }
            // SAFETY: the token proves AVX2+FMA.
            unsafe { inner(src, k, q, s) }
        }

        /// [`crate::math::softmax_row`] compiled with AVX2/FMA (8-wide exp).
        pub fn softmax_row(self, row: &mut [f32]) {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn inner(row: &mut [f32]) {
                crate::math::softmax_row(row)
            }
            // SAFETY: the token proves AVX2+FMA.
            unsafe { inner(row) }
        }

        /// Apply `f` to every element with AVX2/FMA enabled, so the branch-free polynomial
        /// bodies of `math` vectorise 8-wide.
        pub fn map(self, xs: &mut [f32], f: impl Fn(f32) -> f32) {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn inner(xs: &mut [f32], f: impl Fn(f32) -> f32) {
                for v in xs {
                    *v = f(*v);
                }
            }
            // SAFETY: the token proves AVX2+FMA.
            unsafe { inner(xs, f) }
        }
    }
}

/// Quantize rows of `k` values (`src` holds whole rows) as the q8 lane does
/// (`stapes_core::lane::quantize_row_q8`, bit for bit): per row ⌈k/32⌉ blocks of 32 int8 in `q`
/// (a partial block zero padded) and one scale per block in `s`, the f16 scale widened.
#[inline(always)]
pub fn quantize_q8_rows(src: &[f32], k: usize, q: &mut [i8], s: &mut [f32]) {
    let kb = k.div_ceil(32);
    if k == 0 {
        return;
    }
    for ((row, qr), sr) in src
        .chunks_exact(k)
        .zip(q.chunks_exact_mut(kb * 32))
        .zip(s.chunks_exact_mut(kb))
    {
        for ((chunk, qb), sb) in row.chunks(32).zip(qr.chunks_exact_mut(32)).zip(sr) {
            let amax = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = amax / 127.0;
            let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            for (d, v) in qb.iter_mut().zip(chunk) {
                *d = (v * inv).round().clamp(-127.0, 127.0) as i8;
            }
            qb[chunk.len()..].fill(0);
            *sb = half::f16::from_f32(scale).to_f32();
        }
    }
}

/// Portable versions of the kernels above (the fallback where AVX2 is absent).
pub mod scalar {
    use super::MR;

    pub fn dot_f32(x: &[&[f32]; MR], rows: usize, w: &[f32]) -> [f32; MR] {
        let mut out = [0f32; MR];
        for r in 0..rows.min(MR) {
            out[r] = x[r].iter().zip(w).map(|(a, b)| a * b).sum();
        }
        out
    }

    pub fn scores_row(q: &[f32], k: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
        for (j, o) in out.iter_mut().enumerate() {
            let kr = &k[j * stride..][..q.len()];
            *o = q.iter().zip(kr).map(|(a, b)| a * b).sum::<f32>() * scale;
        }
    }

    pub fn weighted_rows(p: &[f32], v: &[f32], stride: usize, out: &mut [f32]) {
        out.fill(0.0);
        for (j, &pj) in p.iter().enumerate() {
            let vr = &v[j * stride..][..out.len()];
            out.iter_mut().zip(vr).for_each(|(o, &x)| *o += pj * x);
        }
    }

    pub fn dot_f16(x: &[&[f32]; MR], rows: usize, w: &[half::f16]) -> [f32; MR] {
        let mut out = [0f32; MR];
        for r in 0..rows.min(MR) {
            out[r] = x[r].iter().zip(w).map(|(a, b)| a * b.to_f32()).sum();
        }
        out
    }

    pub fn dot_q8(
        xq: &[&[i8]; MR],
        xs: &[&[f32]; MR],
        rows: usize,
        wq: &[i8],
        ws: &[f32],
    ) -> [f32; MR] {
        let mut out = [0f32; MR];
        for r in 0..rows.min(MR) {
            let mut acc = 0f32;
            for (b, &s) in ws.iter().enumerate() {
                let xb = &xq[r][b * 32..b * 32 + 32];
                let wb = &wq[b * 32..b * 32 + 32];
                let d: i32 = xb.iter().zip(wb).map(|(&a, &c)| a as i32 * c as i32).sum();
                acc += d as f32 * s * xs[r][b];
            }
            out[r] = acc;
        }
        out
    }
}
