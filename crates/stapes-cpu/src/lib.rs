//! The CPU home: every op of the contract on host memory, multi-threaded on a rayon pool owned by
//! the backend, with AVX2/FMA/F16C kernels where the CPU has them (checked at run time).
//!
//! GEMMs: f32 through the `gemm` crate; f16 weights widened exactly (F16C) inside the dot
//! kernels or per cache panel; q8 as ggml's Q8_0×Q8_0 (activations quantized to 32-blocks,
//! int8 dots with `maddubs`). Shapes with M ≤ [`linalg::SMALL_M`] (decoder steps) take
//! GEMV-style kernels that stream each weight row once.

pub mod linalg;
pub mod math;
pub mod mem;
pub mod simd;
pub mod vnni;

use linalg::{sgemm, F16Buf, Kernels, Mat, Store};
use rayon::prelude::*;
use stapes_core::shapes::{
    around, attn_dims, check_slice, check_vec, concat_shape, conv1d_dims, conv2d_dims,
    depthwise_dims, matmul_dims, write_rows_dims, AttnDims, Conv2dDims,
};
use stapes_core::{
    Activation, AttnParams, Backend, Conv1dParams, Conv2dParams, Counters, DeviceTensor, Error,
    HostTensor, Lane, Result, WeightData, WeightView,
};

/// Elements per task in element-wise ops: below this, splitting costs more than it saves.
const ELEM_CHUNK: usize = 1 << 14;
/// Below this many scalar operations an op runs on the caller's thread (see `for_chunks`).
const PAR_MIN_WORK: usize = 1 << 16;
/// Query rows per attention task: a (128, 1500) score block (768 KB) stays in L2 between the
/// q·kᵀ GEMM, the softmax and the P·v GEMM, where a whole head's (1500, 1500) scores did not.
const ATTN_QBLOCK: usize = 128;
/// Up to this many query rows (decoder steps, beams included) attention runs row by row: dot
/// each key, softmax, sum the weighted value rows, with no GEMM packing of K and V per call.
const ATTN_ROWS_MAX_TQ: usize = 16;
/// Weight elements per task when storing or quantizing a weight.
const STORE_CHUNK: usize = 1 << 16;

/// An activation tensor in host memory, row-major. The values are shared between a tensor and
/// its reshapes (a reshape copies nothing); the ops that write into a tensor copy shared values
/// first (`Arc::make_mut`), so every tensor keeps its own values.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTensor {
    shape: Vec<usize>,
    data: std::sync::Arc<Vec<f32>>,
}

impl CpuTensor {
    fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        CpuTensor {
            shape,
            data: std::sync::Arc::new(data),
        }
    }

    /// The values, row-major (no copy).
    pub fn data(&self) -> &[f32] {
        &self.data
    }

    fn last_dim(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }
}

impl DeviceTensor for CpuTensor {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
}

/// A `(N, K)` GEMM weight in its lane.
#[derive(Clone, Debug)]
pub struct CpuWeight {
    lane: Lane,
    n: usize,
    k: usize,
    store: Store,
    /// The store holds the values the weight was built from, exactly (see `weight_rows`).
    exact: bool,
}

impl CpuWeight {
    pub fn lane(&self) -> Lane {
        self.lane
    }
}

/// The CPU backend. All three lanes; f32 is the CPU's default.
pub struct CpuBackend {
    pool: rayon::ThreadPool,
    kernels: Kernels,
    counters: Counters,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("threads", &self.kernels.threads)
            .field("avx2", &self.kernels.avx2.is_some())
            .finish()
    }
}

impl CpuBackend {
    /// A backend running on `threads` worker threads (0 = one per available core).
    pub fn new(threads: usize) -> Result<Self> {
        let avx2 = simd::Avx2::new();
        Self::build(threads, avx2, avx2.and(vnni::Vnni::new()))
    }

    /// As [`CpuBackend::new`] but with the portable kernels only, even where AVX2 is present:
    /// lets the fallback path be tested (and timed) on machines that would never pick it.
    pub fn new_portable(threads: usize) -> Result<Self> {
        Self::build(threads, None, None)
    }

    /// As [`CpuBackend::new`] without the AVX-512 VNNI kernel (q8 at large M then runs W8A32
    /// through the f32 GEMM, as on AVX2-only CPUs): for tests and timings of that path.
    pub fn new_without_vnni(threads: usize) -> Result<Self> {
        Self::build(threads, simd::Avx2::new(), None)
    }

    /// Whether the AVX-512 VNNI q8 GEMM is in use.
    pub fn has_vnni(&self) -> bool {
        self.kernels.vnni.is_some()
    }

    fn build(threads: usize, avx2: Option<simd::Avx2>, vnni: Option<vnni::Vnni>) -> Result<Self> {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        mem::keep_freed_buffers();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("stapes-cpu-{i}"))
            .build()
            .map_err(|e| {
                Error::Device(format!("cannot start {threads} CPU worker threads: {e}"))
            })?;
        Ok(CpuBackend {
            pool,
            kernels: Kernels {
                avx2,
                vnni,
                threads,
            },
            counters: Counters::default(),
        })
    }

    /// Worker threads in the pool.
    pub fn threads(&self) -> usize {
        self.kernels.threads
    }

    /// Whether the AVX2/FMA/F16C kernels are in use (else the portable ones).
    pub fn has_avx2(&self) -> bool {
        self.kernels.avx2.is_some()
    }

    fn op(&self) {
        Counters::bump(&self.counters.ops);
    }

    fn gemm_lane(&self, lane: Lane) {
        Counters::bump(match lane {
            Lane::F32 => &self.counters.gemm_f32,
            Lane::F16 => &self.counters.gemm_f16,
            Lane::Q8 => &self.counters.gemm_q8,
        });
    }

    /// `f(chunk index, chunk)` over `chunk`-sized pieces of `data`: on the pool when `work`
    /// (≈ scalar operations) pays for the hand-off to it (~10–20 µs, measured), else on the
    /// caller's thread, so decoder-step ops on a few hundred values stay cheap.
    fn for_chunks<T: Send>(
        &self,
        work: usize,
        data: &mut [T],
        chunk: usize,
        f: impl Fn(usize, &mut [T]) + Sync + Send,
    ) {
        if chunk == 0 {
            return;
        }
        if self.parallel(work) {
            self.pool.install(|| {
                data.par_chunks_mut(chunk)
                    .enumerate()
                    .for_each(|(i, c)| f(i, c))
            });
        } else {
            data.chunks_mut(chunk)
                .enumerate()
                .for_each(|(i, c)| f(i, c));
        }
    }

    fn parallel(&self, work: usize) -> bool {
        self.kernels.threads > 1 && work >= PAR_MIN_WORK
    }

    /// Element-wise map in parallel chunks, vectorised with AVX2 where present.
    fn map(&self, x: &CpuTensor, f: impl Fn(f32) -> f32 + Sync + Send + Copy) -> CpuTensor {
        let mut data = x.data.to_vec();
        let avx2 = self.kernels.avx2;
        // Transcendental bodies cost ~20 operations per element.
        self.for_chunks(data.len() * 20, &mut data, ELEM_CHUNK, |_, c| match avx2 {
            Some(a) => a.map(c, f),
            None => c.iter_mut().for_each(|v| *v = f(*v)),
        });
        CpuTensor::new(x.shape.clone(), data)
    }

    fn broadcast(
        &self,
        op: &'static str,
        a: &CpuTensor,
        b: &CpuTensor,
        f: impl Fn(f32, f32) -> f32 + Sync,
    ) -> Result<CpuTensor> {
        let (sa, sb) = (&a.shape, &b.shape);
        if sb.len() > sa.len() || sa[sa.len() - sb.len()..] != sb[..] {
            return Err(Error::shape(
                op,
                format!("{sb:?} is not a suffix of {sa:?}"),
            ));
        }
        let nb = b.data.len();
        let mut data = a.data.to_vec();
        if nb > 0 {
            // Chunks are whole multiples of b so every chunk starts at b's first element.
            let chunk = nb * ELEM_CHUNK.div_ceil(nb);
            self.for_chunks(data.len(), &mut data, chunk, |_, c| {
                for seg in c.chunks_mut(nb) {
                    seg.iter_mut()
                        .zip(b.data.iter())
                        .for_each(|(x, &y)| *x = f(*x, y));
                }
            });
        }
        Ok(CpuTensor::new(sa.clone(), data))
    }

    /// `data` as f16 when every value survives the round trip bit for bit, else `None`.
    fn exact_f16(&self, data: &[f32]) -> Option<Vec<half::f16>> {
        use half::slice::HalfFloatSliceExt;
        use std::sync::atomic::{AtomicBool, Ordering};
        let exact = AtomicBool::new(true);
        // Written straight into spare capacity, so the first touch of the new pages happens in
        // the pool's tasks rather than in a serial zero fill.
        let mut h = mem::with_capacity::<half::f16>(data.len());
        let spare = &mut h.spare_capacity_mut()[..data.len()];
        self.for_chunks(data.len(), spare, STORE_CHUNK, |i, dst| {
            let src = &data[i * STORE_CHUNK..][..dst.len()];
            let (mut half_buf, mut back) = ([half::f16::ZERO; 1024], [0f32; 1024]);
            for (ds, ss) in dst.chunks_mut(1024).zip(src.chunks(1024)) {
                if !exact.load(Ordering::Relaxed) {
                    return;
                }
                let (hb, b) = (&mut half_buf[..ss.len()], &mut back[..ss.len()]);
                hb.convert_from_f32_slice(ss);
                hb.convert_to_f32_slice(b);
                if b.iter().zip(ss).any(|(x, y)| x.to_bits() != y.to_bits()) {
                    exact.store(false, Ordering::Relaxed);
                    return;
                }
                ds.iter_mut().zip(hb.iter()).for_each(|(d, &v)| {
                    d.write(v);
                });
            }
        });
        if !exact.load(Ordering::Relaxed) {
            return None;
        }
        // SAFETY: every chunk ran to the end (an early return clears `exact`, handled above),
        // so all data.len() slots were written.
        unsafe { h.set_len(data.len()) };
        Some(h)
    }

    /// `(n, k)` row-major values in the q8 lane, bit-identical to the lane's reference
    /// quantizer (`stapes_core::lane::quantize_row_q8`), rows split over the pool.
    fn quantize_q8(&self, data: &[f32], n: usize, k: usize) -> Store {
        self.quantize_q8_by(n, k, |r, quantize| quantize(&data[r.start * k..r.end * k]))
    }

    /// [`Self::quantize_q8`] of f16 values (little-endian byte pairs at any alignment): each
    /// task widens its rows (exactly) into a scratch buffer, so the result is bit-identical to
    /// quantizing the widened matrix without ever holding it whole.
    fn quantize_q8_f16(&self, bytes: &[u8], n: usize, k: usize) -> Store {
        use half::slice::HalfFloatSliceExt;
        self.quantize_q8_by(n, k, |r, quantize| {
            let src = &bytes[2 * r.start * k..2 * r.end * k];
            let h: Vec<half::f16> = src
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]))
                .collect();
            let mut wide = vec![0f32; h.len()];
            h.convert_to_f32_slice(&mut wide);
            quantize(&wide)
        })
    }

    /// The q8 store of an `(n, k)` matrix: `rows_of(range, quantize)` hands the f32 values of
    /// rows `range` to `quantize`, one chunk of rows per task.
    fn quantize_q8_by(
        &self,
        n: usize,
        k: usize,
        rows_of: impl Fn(std::ops::Range<usize>, &mut dyn FnMut(&[f32])) + Sync,
    ) -> Store {
        let kb = k.div_ceil(32);
        let mut q = mem::filled(n * kb * 32, 0i8);
        let mut s = mem::filled(n * kb, 0f32);
        let rows = STORE_CHUNK.div_ceil(k).max(1);
        let avx2 = self.kernels.avx2;
        let work = |i: usize, qc: &mut [i8], sc: &mut [f32]| {
            let r0 = i * rows;
            let nr = sc.len() / kb;
            rows_of(r0..r0 + nr, &mut |src: &[f32]| match avx2 {
                Some(a) => a.quantize_q8_rows(src, k, qc, sc),
                None => simd::quantize_q8_rows(src, k, qc, sc),
            });
        };
        if self.parallel(n * k * 4) {
            self.pool.install(|| {
                q.par_chunks_mut(rows * kb * 32)
                    .zip(s.par_chunks_mut(rows * kb))
                    .enumerate()
                    .for_each(|(i, (qc, sc))| work(i, qc, sc))
            });
        } else {
            q.chunks_mut(rows * kb * 32)
                .zip(s.chunks_mut(rows * kb))
                .enumerate()
                .for_each(|(i, (qc, sc))| work(i, qc, sc));
        }
        Store::Q8 {
            q,
            s,
            kb,
            packed: Default::default(),
        }
    }

    /// Little-endian f16 byte pairs (any alignment) as f16 values, copied on the pool so the
    /// destination's first-touch page faults split over the threads.
    fn f16_from_le(&self, bytes: &[u8]) -> Vec<half::f16> {
        let n = bytes.len() / 2;
        let mut h = mem::with_capacity::<half::f16>(n);
        let spare = &mut h.spare_capacity_mut()[..n];
        self.for_chunks(n, spare, STORE_CHUNK, |i, dst| {
            let src = &bytes[2 * i * STORE_CHUNK..][..2 * dst.len()];
            dst.iter_mut().zip(src.chunks_exact(2)).for_each(|(d, c)| {
                d.write(half::f16::from_le_bytes([c[0], c[1]]));
            });
        });
        // SAFETY: the chunks cover all n slots and each wrote every slot of its chunk.
        unsafe { h.set_len(n) };
        h
    }

    fn linear_raw(&self, x: &[f32], m: usize, w: &CpuWeight, bias: Option<&CpuTensor>) -> Vec<f32> {
        let bias = bias.map(|b| b.data.as_slice());
        if self.parallel(m * w.n * w.k / 16) {
            self.pool
                .install(|| self.kernels.linear(x, m, w.k, &w.store, w.n, bias, true))
        } else {
            self.kernels.linear(x, m, w.k, &w.store, w.n, bias, false)
        }
    }

    /// [`Self::attend`] for a few query rows (Tq ≤ [`ATTN_ROWS_MAX_TQ`] < [`ATTN_QBLOCK`], so
    /// one block per (batch, head) task, in the same order): each query dots the keys where
    /// they lie, the softmaxed row weights the value rows directly. A GEMM here would pack the
    /// whole (kv_len, Dh) K and V of every head on every decoder step.
    fn attend_rows(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: Option<&CpuTensor>,
        d: &AttnDims,
        p: &AttnParams,
    ) -> Vec<Vec<f32>> {
        let c = d.h * d.dh;
        let cv = d.h * d.dv;
        let avx2 = self.kernels.avx2;
        let task = |bh: usize| {
            let (b, h) = (bh / d.h, bh % d.h);
            let keys = &k.data[b * d.tk * c + h * d.dh..];
            let mut scores = vec![0f32; d.tq * d.kv_len]; // (Tq, kv_len)
            let mut out = vec![0f32; if v.is_some() { d.tq * d.dv } else { 0 }]; // (Tq, Dv)
            for (i, row) in scores.chunks_mut(d.kv_len).enumerate() {
                let visible = if p.causal {
                    d.kv_len - d.tq + i + 1
                } else {
                    d.kv_len
                };
                let qi = &q.data[(b * d.tq + i) * c + h * d.dh..][..d.dh];
                let (live, dead) = row.split_at_mut(visible);
                match avx2 {
                    Some(a) => {
                        a.scores_row(qi, keys, c, p.scale, live);
                        a.softmax_row(live);
                    }
                    None => {
                        simd::scalar::scores_row(qi, keys, c, p.scale, live);
                        math::softmax_row(live);
                    }
                }
                dead.fill(0.0);
                if let Some(v) = v {
                    let vals = &v.data[b * d.tk * cv + h * d.dv..];
                    let o = &mut out[i * d.dv..(i + 1) * d.dv];
                    match avx2 {
                        Some(a) => a.weighted_rows(live, vals, cv, o),
                        None => simd::scalar::weighted_rows(live, vals, cv, o),
                    }
                }
            }
            if v.is_some() {
                out
            } else {
                scores
            }
        };
        let tasks = d.b * d.h;
        if self.parallel(tasks * d.tq * d.kv_len * (d.dh + d.dv + 20)) {
            self.pool
                .install(|| (0..tasks).into_par_iter().map(task).collect())
        } else {
            (0..tasks).map(task).collect()
        }
    }

    /// Attention core shared by `attention` and `attention_probs`: per (batch, head) task, the
    /// scores `(Tq, kv_len)` = scale·q_h·k_hᵀ, masked softmax, then (when `v` is given) P·v_h.
    fn attend(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: Option<&CpuTensor>,
        d: &AttnDims,
        p: &AttnParams,
    ) -> Vec<Vec<f32>> {
        if d.tq <= ATTN_ROWS_MAX_TQ {
            return self.attend_rows(q, k, v, d, p);
        }
        let c = d.h * d.dh;
        let cv = d.h * d.dv;
        let nqb = d.tq.div_ceil(ATTN_QBLOCK);
        // Task t: (batch·head, query block); outputs come back in that order, so the blocks of
        // one head concatenate to its rows.
        let task = |t: usize| {
            let (bh, qb) = (t / nqb, t % nqb);
            let (b, h) = (bh / d.h, bh % d.h);
            let q0 = qb * ATTN_QBLOCK;
            let qn = (d.tq - q0).min(ATTN_QBLOCK);
            let mut scores = vec![0f32; qn * d.kv_len]; // (qn, kv_len)
            let qh = Mat {
                data: &q.data[(b * d.tq + q0) * c + h * d.dh..],
                rs: c,
                cs: 1,
            };
            let kt = Mat {
                data: &k.data[b * d.tk * c + h * d.dh..],
                rs: 1,
                cs: c,
            };
            sgemm(
                qn,
                d.kv_len,
                d.dh,
                &mut scores,
                d.kv_len,
                false,
                qh,
                kt,
                p.scale,
                gemm::Parallelism::None,
            );
            for (li, row) in scores.chunks_mut(d.kv_len).enumerate() {
                // Query i sees keys 0 ..= kv_len − Tq + i when causal.
                let visible = if p.causal {
                    d.kv_len - d.tq + q0 + li + 1
                } else {
                    d.kv_len
                };
                match self.kernels.avx2 {
                    Some(a) => a.softmax_row(&mut row[..visible]),
                    None => math::softmax_row(&mut row[..visible]),
                }
                row[visible..].fill(0.0);
            }
            let Some(v) = v else { return scores };
            let mut out = vec![0f32; qn * d.dv]; // (qn, Dv)
            let pm = Mat {
                data: &scores,
                rs: d.kv_len,
                cs: 1,
            };
            let vh = Mat {
                data: &v.data[b * d.tk * cv + h * d.dv..],
                rs: cv,
                cs: 1,
            };
            sgemm(
                qn,
                d.dv,
                d.kv_len,
                &mut out,
                d.dv,
                false,
                pm,
                vh,
                1.0,
                gemm::Parallelism::None,
            );
            out
        };
        let tasks = d.b * d.h * nqb;
        if self.parallel(d.b * d.h * d.tq * d.kv_len * (d.dh + d.dv + 20)) {
            self.pool
                .install(|| (0..tasks).into_par_iter().map(task).collect())
        } else {
            (0..tasks).map(task).collect()
        }
    }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Weight = CpuWeight;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn supports_lane(&self, _lane: Lane) -> bool {
        true
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn upload(&self, t: &HostTensor) -> Result<CpuTensor> {
        let data = if self.parallel(t.data.len()) {
            // The embedding table (20–50 M values) at load: most of a big copy's cost is the
            // first-touch page faults of the destination, which split over the pool.
            let mut v = mem::with_capacity::<f32>(t.data.len());
            let spare = &mut v.spare_capacity_mut()[..t.data.len()];
            self.for_chunks(t.data.len(), spare, 1 << 18, |i, dst| {
                let src = &t.data[i << 18..][..dst.len()];
                dst.iter_mut().zip(src).for_each(|(d, &x)| {
                    d.write(x);
                });
            });
            // SAFETY: the chunks above cover all t.data.len() slots and wrote every one.
            unsafe { v.set_len(t.data.len()) };
            v
        } else {
            mem::copied(&t.data)
        };
        let h = HostTensor::new(t.shape.clone(), data)?;
        Ok(CpuTensor::new(h.shape, h.data))
    }

    fn download(&self, t: &CpuTensor) -> Result<HostTensor> {
        HostTensor::new(t.shape.clone(), t.data.to_vec())
    }

    fn weight(&self, w: &HostTensor, lane: Lane) -> Result<CpuWeight> {
        if w.rank() < 2 {
            return Err(Error::shape(
                "weight",
                format!("need (N, K) or (N, ..), got {:?}", w.shape),
            ));
        }
        let n = w.shape[0];
        let k: usize = w.shape[1..].iter().product();
        if n == 0 || k == 0 || n * k != w.data.len() {
            return Err(Error::shape(
                "weight",
                format!("shape {:?} vs {} values", w.shape, w.data.len()),
            ));
        }
        let exact = lane == Lane::F32;
        let store = match lane {
            // Checkpoints shipped in f16 (CTranslate2, ggml, most HF files) arrive widened to
            // f32; kept as f16 when that is exact they take half the memory and half the
            // bandwidth of every decoder-step GEMV, and the kernels widen them back exactly, so
            // the f32 lane's results are unchanged.
            Lane::F32 => match self.exact_f16(&w.data) {
                Some(h) => Store::F16(F16Buf::Owned(h)),
                None => Store::F32(mem::copied(&w.data)),
            },
            Lane::F16 => {
                let mut h = mem::filled(w.data.len(), half::f16::ZERO);
                self.for_chunks(h.len(), &mut h, STORE_CHUNK, |i, dst| {
                    use half::slice::HalfFloatSliceExt;
                    dst.convert_from_f32_slice(&w.data[i * STORE_CHUNK..][..dst.len()]);
                });
                Store::F16(F16Buf::Owned(h))
            }
            Lane::Q8 => self.quantize_q8(&w.data, n, k),
        };
        Ok(CpuWeight {
            lane,
            n,
            k,
            store,
            exact,
        })
    }

    fn weight_from(&self, w: &WeightView<'_>, lane: Lane) -> Result<CpuWeight> {
        let (n, k) = (w.n, w.k);
        if n == 0 || k == 0 {
            return Err(Error::shape("weight_from", format!("({n}, {k})")));
        }
        let WeightData::F16Le(bytes) = w.data else {
            return self.weight(&w.to_host(), lane);
        };
        let store = match lane {
            // f16 values are what both lanes store: the file's own bytes where they can be
            // referred to in place, else a copy; no rounding check either way.
            Lane::F32 | Lane::F16 => Store::F16(
                match w.keep.as_ref().and_then(|k| F16Buf::mapped(bytes, k)) {
                    Some(m) => m,
                    None => F16Buf::Owned(self.f16_from_le(bytes)),
                },
            ),
            Lane::Q8 => self.quantize_q8_f16(bytes, n, k),
        };
        Ok(CpuWeight {
            lane,
            n,
            k,
            store,
            exact: lane != Lane::Q8,
        })
    }

    fn weight_rows(&self, w: &CpuWeight, ids: &[u32]) -> Result<Option<CpuTensor>> {
        if !w.exact {
            return Ok(None);
        }
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= w.n) {
            return Err(Error::shape(
                "weight_rows",
                format!("id {bad} ≥ {} rows", w.n),
            ));
        }
        let k = w.k;
        let mut out = vec![0f32; ids.len() * k]; // (len(ids), K)
        for (dst, &id) in out.chunks_mut(k).zip(ids) {
            let r = id as usize * k..(id as usize + 1) * k;
            match &w.store {
                Store::F32(v) => dst.copy_from_slice(&v[r]),
                Store::F16(h) => {
                    use half::slice::HalfFloatSliceExt;
                    h[r].convert_to_f32_slice(dst);
                }
                Store::Q8 { .. } => return Ok(None),
            }
        }
        Ok(Some(CpuTensor::new(vec![ids.len(), k], out)))
    }

    fn upload_owned(&self, t: HostTensor) -> Result<CpuTensor> {
        let t = HostTensor::new(t.shape, t.data)?;
        Ok(CpuTensor::new(t.shape, t.data))
    }

    fn weight_shape(&self, w: &CpuWeight) -> (usize, usize) {
        (w.n, w.k)
    }

    fn reshape(&self, t: &CpuTensor, shape: &[usize]) -> Result<CpuTensor> {
        self.op();
        if shape.iter().product::<usize>() != t.data.len() {
            return Err(Error::shape(
                "reshape",
                format!("{:?} -> {shape:?} changes the element count", t.shape),
            ));
        }
        Ok(CpuTensor {
            shape: shape.to_vec(),
            data: t.data.clone(),
        })
    }

    fn transpose_last2(&self, t: &CpuTensor) -> Result<CpuTensor> {
        self.op();
        let s = &t.shape;
        if s.len() < 2 {
            return Err(Error::shape(
                "transpose_last2",
                format!("need rank ≥ 2, got {s:?}"),
            ));
        }
        let (a, b) = (s[s.len() - 2], s[s.len() - 1]);
        let mut out = vec![0f32; t.data.len()];
        if a * b > 0 {
            self.for_chunks(out.len(), &mut out, a * b, |n, o| {
                let i = &t.data[n * a * b..(n + 1) * a * b];
                // 32×32 tiles keep both the read and the write side in cache.
                for i0 in (0..a).step_by(32) {
                    for j0 in (0..b).step_by(32) {
                        for ii in i0..(i0 + 32).min(a) {
                            for jj in j0..(j0 + 32).min(b) {
                                o[jj * a + ii] = i[ii * b + jj];
                            }
                        }
                    }
                }
            });
        }
        let mut shape = s.clone();
        let r = shape.len();
        shape.swap(r - 2, r - 1);
        Ok(CpuTensor::new(shape, out))
    }

    /// One pass (each head's `Dh` run copied whole) where the default transposes the tensor
    /// twice; pure data movement, so the default's values.
    fn split_heads(
        &self,
        x: &CpuTensor,
        heads: usize,
        bias: Option<&CpuTensor>,
    ) -> Result<CpuTensor> {
        let (bs, t, c) = stapes_core::backend::heads_dims(&x.shape, heads)?;
        let biased = stapes_core::backend::plus_bias(self, x, bias)?;
        let x = biased.as_ref().unwrap_or(x);
        self.op();
        let dh = c / heads;
        let mut out = vec![0f32; bs * t * c];
        // a chunk is one (b, h) batch of out: (T, Dh), rows gathered from x's (T, C) rows
        self.for_chunks(out.len(), &mut out, t * dh, |bh, o| {
            let (b, h) = (bh / heads, bh % heads);
            let xb = &x.data[b * t * c..(b + 1) * t * c];
            for (ti, orow) in o.chunks_exact_mut(dh).enumerate() {
                orow.copy_from_slice(&xb[ti * c + h * dh..ti * c + (h + 1) * dh]);
            }
        });
        Ok(CpuTensor::new(vec![bs * heads, t, dh], out))
    }

    /// The inverse in one pass, as [`CpuBackend::split_heads`].
    fn merge_heads(&self, x: &CpuTensor, batch: usize) -> Result<CpuTensor> {
        let (bh, t, dh) = stapes_core::backend::merged_dims(&x.shape, batch)?;
        self.op();
        let heads = bh / batch;
        let c = heads * dh;
        let mut out = vec![0f32; x.data.len()];
        // a chunk is one (b, t) row of out: (C), each head's Dh run from its batch
        self.for_chunks(out.len(), &mut out, c, |bt, o| {
            let (b, ti) = (bt / t.max(1), bt % t.max(1));
            for (h, orun) in o.chunks_exact_mut(dh.max(1)).enumerate() {
                let src = ((b * heads + h) * t + ti) * dh;
                orun.copy_from_slice(&x.data[src..src + dh]);
            }
        });
        Ok(CpuTensor::new(vec![batch, t, c], out))
    }

    fn slice(&self, t: &CpuTensor, dim: usize, start: usize, len: usize) -> Result<CpuTensor> {
        self.op();
        let s = &t.shape;
        check_slice(s, dim, start, len)?;
        let (outer, d, inner) = around(s, dim);
        let mut out = Vec::with_capacity(outer * len * inner);
        for o in 0..outer {
            out.extend_from_slice(&t.data[(o * d + start) * inner..(o * d + start + len) * inner]);
        }
        let mut shape = s.clone();
        shape[dim] = len;
        Ok(CpuTensor::new(shape, out))
    }

    fn concat(&self, ts: &[&CpuTensor], dim: usize) -> Result<CpuTensor> {
        self.op();
        let shapes: Vec<&[usize]> = ts.iter().map(|t| &t.shape[..]).collect();
        let shape = concat_shape(&shapes, dim)?;
        let (outer, total, inner) = around(&shape, dim);
        let mut out = Vec::with_capacity(outer * total * inner);
        for o in 0..outer {
            for t in ts {
                let d = t.shape[dim];
                out.extend_from_slice(&t.data[o * d * inner..(o + 1) * d * inner]);
            }
        }
        Ok(CpuTensor::new(shape, out))
    }

    fn write_rows(&self, dst: &mut CpuTensor, src: &CpuTensor, offset: usize) -> Result<()> {
        self.op();
        let (b, t, c, n) = write_rows_dims(dst, src, offset)?;
        // a cache shared with a reshape of it is copied first: the reshape keeps its values
        let data = std::sync::Arc::make_mut(&mut dst.data);
        for bi in 0..b {
            data[(bi * t + offset) * c..(bi * t + offset + n) * c]
                .copy_from_slice(&src.data[bi * n * c..(bi + 1) * n * c]);
        }
        Ok(())
    }

    fn gather_batch(&self, t: &CpuTensor, idx: &[usize]) -> Result<CpuTensor> {
        self.op();
        let b = *t
            .shape
            .first()
            .ok_or_else(|| Error::shape("gather_batch", "scalar input"))?;
        let per = t.data.len() / b.max(1);
        let mut out = Vec::with_capacity(idx.len() * per);
        for &i in idx {
            if i >= b {
                return Err(Error::shape(
                    "gather_batch",
                    format!("index {i} ≥ batch {b}"),
                ));
            }
            out.extend_from_slice(&t.data[i * per..(i + 1) * per]);
        }
        let mut shape = t.shape.clone();
        shape[0] = idx.len();
        Ok(CpuTensor::new(shape, out))
    }

    fn gather_rows(&self, table: &CpuTensor, ids: &[u32]) -> Result<CpuTensor> {
        self.op();
        let [v, d] = table.shape[..] else {
            return Err(Error::shape(
                "gather_rows",
                format!("table must be (V, D), got {:?}", table.shape),
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
            out.extend_from_slice(&table.data[id * d..(id + 1) * d]);
        }
        Ok(CpuTensor::new(vec![ids.len(), d], out))
    }

    fn linear(&self, x: &CpuTensor, w: &CpuWeight, bias: Option<&CpuTensor>) -> Result<CpuTensor> {
        self.op();
        self.gemm_lane(w.lane);
        if x.shape.is_empty() || x.last_dim() != w.k {
            return Err(Error::shape(
                "linear",
                format!("x {:?} vs weight ({}, {})", x.shape, w.n, w.k),
            ));
        }
        check_vec("linear", "bias", bias, w.n)?;
        let m = x.data.len() / w.k;
        let out = self.linear_raw(&x.data, m, w, bias);
        let mut shape = x.shape.clone();
        let r = shape.len();
        shape[r - 1] = w.n;
        Ok(CpuTensor::new(shape, out))
    }

    fn matmul(&self, a: &CpuTensor, b: &CpuTensor, trans_b: bool) -> Result<CpuTensor> {
        self.op();
        let (sa, sb) = (&a.shape, &b.shape);
        let (batch, m, k, n) = matmul_dims(sa, sb, trans_b)?;
        let r = sa.len();
        let mut out = vec![0f32; batch * m * n];
        if m * n > 0 {
            // Many small products run one per task; one big product uses the threads inside gemm.
            let work = batch * m * n * k;
            let inner = if batch >= self.kernels.threads || !self.parallel(work) {
                gemm::Parallelism::None
            } else {
                gemm::Parallelism::Rayon(self.kernels.threads)
            };
            self.for_chunks(work, &mut out, m * n, |bi, o| {
                let am = Mat {
                    data: &a.data[bi * m * k..(bi + 1) * m * k],
                    rs: k,
                    cs: 1,
                };
                let bm = if trans_b {
                    Mat {
                        data: &b.data[bi * k * n..(bi + 1) * k * n],
                        rs: 1,
                        cs: k,
                    }
                } else {
                    Mat {
                        data: &b.data[bi * k * n..(bi + 1) * k * n],
                        rs: n,
                        cs: 1,
                    }
                };
                sgemm(m, n, k, o, n, false, am, bm, 1.0, inner);
            });
        }
        let mut shape = sa.clone();
        shape[r - 1] = n;
        Ok(CpuTensor::new(shape, out))
    }

    fn conv1d(
        &self,
        x: &CpuTensor,
        w: &CpuWeight,
        bias: Option<&CpuTensor>,
        p: Conv1dParams,
    ) -> Result<CpuTensor> {
        self.op();
        self.gemm_lane(w.lane);
        let (b, t, cin, tout) = conv1d_dims(x, w.n, w.k, bias, p)?;
        let kk = p.kernel;
        // im2col: row (b, t_out) holds [c_in][k], the weight's own layout, so the GEMM is linear.
        let mut col = vec![0f32; b * tout * w.k]; // (B·T_out, C_in·K)
        self.for_chunks(col.len(), &mut col, w.k, |row, dst| {
            let (bi, to) = (row / tout, row % tout);
            for kj in 0..kk {
                let ti = (to * p.stride + kj) as isize - p.padding as isize;
                if ti < 0 || ti >= t as isize {
                    continue;
                }
                let src = &x.data[(bi * t + ti as usize) * cin..][..cin];
                for (ci, &v) in src.iter().enumerate() {
                    dst[ci * kk + kj] = v;
                }
            }
        });
        let out = self.linear_raw(&col, b * tout, w, bias);
        Ok(CpuTensor::new(vec![b, tout, w.n], out))
    }

    fn depthwise_conv1d(
        &self,
        x: &CpuTensor,
        w: &CpuTensor,
        bias: Option<&CpuTensor>,
        stride: usize,
        padding: usize,
    ) -> Result<CpuTensor> {
        self.op();
        let (b, t, c, kk, tout) = depthwise_dims(x, w, bias, stride, padding)?;
        // (K, C) copy of the taps so the inner loop runs over contiguous channels.
        let mut wt = vec![0f32; kk * c];
        for ci in 0..c {
            for kj in 0..kk {
                wt[kj * c + ci] = w.data[ci * kk + kj];
            }
        }
        let mut out = vec![0f32; b * tout * c];
        if c > 0 {
            self.for_chunks(out.len() * kk, &mut out, c, |row, o| {
                let (bi, to) = (row / tout, row % tout);
                match bias {
                    Some(bv) => o.copy_from_slice(&bv.data),
                    None => o.fill(0.0),
                }
                for kj in 0..kk {
                    let ti = (to * stride + kj) as isize - padding as isize;
                    if ti < 0 || ti >= t as isize {
                        continue;
                    }
                    let src = &x.data[(bi * t + ti as usize) * c..][..c];
                    for ((ov, &xv), &wv) in o.iter_mut().zip(src).zip(&wt[kj * c..(kj + 1) * c]) {
                        *ov += xv * wv;
                    }
                }
            });
        }
        Ok(CpuTensor::new(vec![b, tout, c], out))
    }

    fn conv2d(
        &self,
        x: &CpuTensor,
        w: &CpuTensor,
        bias: Option<&CpuTensor>,
        p: Conv2dParams,
    ) -> Result<CpuTensor> {
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
        let (cout_g, kdim, npix) = (cout / g, cin_g * kh * kw, ho * wo);
        let mut out = vec![0f32; b * cout * npix];
        // One task per (batch, group): im2col (C_in/g·kh·kw, Ho·Wo), then W_g · col; with fewer
        // tasks than threads the GEMM itself is split.
        let work = b * cout * npix * kdim;
        let inner = if b * g >= self.kernels.threads || !self.parallel(work) {
            gemm::Parallelism::None
        } else {
            gemm::Parallelism::Rayon(self.kernels.threads)
        };
        self.for_chunks(work, &mut out, cout_g * npix, |task, o| {
            let (bi, grp) = (task / g, task % g);
            let mut col = vec![0f32; kdim * npix];
            for cl in 0..cin_g {
                let plane = &x.data[(bi * cin + grp * cin_g + cl) * hh * ww..][..hh * ww];
                for i in 0..kh {
                    for j in 0..kw {
                        let crow = &mut col[((cl * kh + i) * kw + j) * npix..][..npix];
                        for oy in 0..ho {
                            let y = (oy * p.stride.0 + i) as isize - p.padding.0 as isize;
                            if y < 0 || y >= hh as isize {
                                continue;
                            }
                            for ox in 0..wo {
                                let xx = (ox * p.stride.1 + j) as isize - p.padding.1 as isize;
                                if xx >= 0 && xx < ww as isize {
                                    crow[oy * wo + ox] = plane[y as usize * ww + xx as usize];
                                }
                            }
                        }
                    }
                }
            }
            let wm = Mat {
                data: &w.data[grp * cout_g * kdim..(grp + 1) * cout_g * kdim],
                rs: kdim,
                cs: 1,
            };
            let cm = Mat {
                data: &col,
                rs: npix,
                cs: 1,
            };
            sgemm(cout_g, npix, kdim, o, npix, false, wm, cm, 1.0, inner);
            if let Some(bv) = bias {
                for (co, plane) in o.chunks_mut(npix).enumerate() {
                    let bval = bv.data[grp * cout_g + co];
                    plane.iter_mut().for_each(|v| *v += bval);
                }
            }
        });
        Ok(CpuTensor::new(vec![b, cout, ho, wo], out))
    }

    fn attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        p: &AttnParams,
    ) -> Result<CpuTensor> {
        self.op();
        let d = attn_dims("attention", q, k, Some(v), p)?;
        let blocks = self.attend(q, k, Some(v), &d, p);
        let cv = d.h * d.dv;
        let nqb = d.tq.div_ceil(ATTN_QBLOCK);
        let mut out = vec![0f32; d.b * d.tq * cv];
        for (t, hout) in blocks.iter().enumerate() {
            let (bh, qb) = (t / nqb, t % nqb);
            let (b, h) = (bh / d.h, bh % d.h);
            for (li, row) in hout.chunks(d.dv.max(1)).enumerate() {
                let i = qb * ATTN_QBLOCK + li;
                out[(b * d.tq + i) * cv + h * d.dv..][..d.dv].copy_from_slice(row);
            }
        }
        Ok(CpuTensor::new(vec![d.b, d.tq, cv], out))
    }

    fn attention_probs(&self, q: &CpuTensor, k: &CpuTensor, p: &AttnParams) -> Result<CpuTensor> {
        self.op();
        let d = attn_dims("attention_probs", q, k, None, p)?;
        let probs = self.attend(q, k, None, &d, p).concat();
        Ok(CpuTensor::new(vec![d.b, d.h, d.tq, d.kv_len], probs))
    }

    fn layer_norm(
        &self,
        x: &CpuTensor,
        gamma: &CpuTensor,
        beta: Option<&CpuTensor>,
        eps: f32,
    ) -> Result<CpuTensor> {
        self.op();
        let c = x.last_dim();
        check_vec("layer_norm", "gamma", Some(gamma), c)?;
        check_vec("layer_norm", "beta", beta, c)?;
        let mut out = x.data.to_vec();
        if c > 0 {
            self.for_chunks(out.len() * 4, &mut out, c, |_, row| {
                let mean = row.iter().sum::<f32>() / c as f32;
                let var = row.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / c as f32;
                let inv = 1.0 / (var + eps).sqrt();
                match beta {
                    Some(b) => row
                        .iter_mut()
                        .zip(gamma.data.iter())
                        .zip(b.data.iter())
                        .for_each(|((v, &g), &bb)| *v = (*v - mean) * inv * g + bb),
                    None => row
                        .iter_mut()
                        .zip(gamma.data.iter())
                        .for_each(|(v, &g)| *v = (*v - mean) * inv * g),
                }
            });
        }
        Ok(CpuTensor::new(x.shape.clone(), out))
    }

    fn rms_norm(&self, x: &CpuTensor, gamma: &CpuTensor, eps: f32) -> Result<CpuTensor> {
        self.op();
        let c = x.last_dim();
        check_vec("rms_norm", "gamma", Some(gamma), c)?;
        let mut out = x.data.to_vec();
        if c > 0 {
            self.for_chunks(out.len() * 3, &mut out, c, |_, row| {
                let ms = row.iter().map(|&v| v * v).sum::<f32>() / c as f32;
                let inv = 1.0 / (ms + eps).sqrt();
                row.iter_mut()
                    .zip(gamma.data.iter())
                    .for_each(|(v, &g)| *v *= inv * g);
            });
        }
        Ok(CpuTensor::new(x.shape.clone(), out))
    }

    fn activation(&self, x: &CpuTensor, act: Activation) -> Result<CpuTensor> {
        self.op();
        Ok(self.map(x, move |v| math::apply(act, v)))
    }

    fn glu(&self, x: &CpuTensor) -> Result<CpuTensor> {
        self.op();
        let c = x.last_dim();
        if x.shape.is_empty() || !c.is_multiple_of(2) {
            return Err(Error::shape(
                "glu",
                format!("last dim of {:?} must be even", x.shape),
            ));
        }
        let half = c / 2;
        let mut out = vec![0f32; x.data.len() / 2];
        if half > 0 {
            self.for_chunks(out.len() * 20, &mut out, half, |r, o| {
                let (a, g) = x.data[r * c..(r + 1) * c].split_at(half);
                o.iter_mut()
                    .zip(a)
                    .zip(g)
                    .for_each(|((o, &a), &g)| *o = a * math::sigmoid(g));
            });
        }
        let mut shape = x.shape.clone();
        let r = shape.len();
        shape[r - 1] = half;
        Ok(CpuTensor::new(shape, out))
    }

    fn softmax(&self, x: &CpuTensor) -> Result<CpuTensor> {
        self.op();
        let c = x.last_dim();
        let mut out = x.data.to_vec();
        if c > 0 {
            self.for_chunks(out.len() * 20, &mut out, c, |_, row| {
                match self.kernels.avx2 {
                    Some(a) => a.softmax_row(row),
                    None => math::softmax_row(row),
                }
            });
        }
        Ok(CpuTensor::new(x.shape.clone(), out))
    }

    fn log_softmax(&self, x: &CpuTensor) -> Result<CpuTensor> {
        self.op();
        let c = x.last_dim();
        let mut out = x.data.to_vec();
        if c > 0 {
            self.for_chunks(out.len() * 20, &mut out, c, |_, row| {
                let max = math::max8(row);
                // f64 sum: rows are vocabulary-long (51864), where an f32 running sum drifts
                // by ~1e-5 relative.
                let sum: f64 = row.iter().map(|&v| math::exp(v - max) as f64).sum();
                let lse = max + sum.ln() as f32;
                row.iter_mut().for_each(|v| *v -= lse);
            });
        }
        Ok(CpuTensor::new(x.shape.clone(), out))
    }

    fn add(&self, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        self.op();
        self.broadcast("add", a, b, |x, y| x + y)
    }

    fn mul(&self, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        self.op();
        self.broadcast("mul", a, b, |x, y| x * y)
    }

    fn affine(&self, x: &CpuTensor, s: f32, t: f32) -> Result<CpuTensor> {
        self.op();
        Ok(self.map(x, move |v| v.mul_add(s, t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_exact(n: usize, seed: u64) -> HostTensor {
        let mut t = HostTensor::random(vec![n], seed, 1.0);
        t.data
            .iter_mut()
            .for_each(|v| *v = half::f16::from_f32(*v).to_f32());
        t
    }

    /// One thread, two threads, and two threads without the SIMD kernels: each store path.
    fn store_backends() -> Vec<CpuBackend> {
        [(1, false), (2, false), (2, true)]
            .into_iter()
            .map(|(threads, portable)| {
                if portable {
                    CpuBackend::new_portable(threads)
                } else {
                    CpuBackend::new(threads)
                }
                .expect("cpu")
            })
            .collect()
    }

    #[test]
    fn q8_store_is_the_lane_quantizer_bit_for_bit() {
        for be in store_backends() {
            // Awkward K (partial last block), a zero row, ties at ±0.5 steps, big N for the pool.
            for (n, k) in [(3usize, 45usize), (700, 384), (5, 32), (2, 1)] {
                let mut w = HostTensor::random(vec![n, k], 7 + k as u64, 3.0);
                w.data[..k].fill(0.0);
                if n > 1 && k >= 32 {
                    // amax 127 makes inv = 1: values x.5 exercise round-half-away-from-zero
                    w.data[k] = 127.0;
                    w.data[k + 1] = 2.5;
                    w.data[k + 2] = -3.5;
                }
                let got = be.weight(&w, Lane::Q8).expect("weight");
                let Store::Q8 { q, s, kb, .. } = &got.store else {
                    panic!("q8 lane stored as {:?}", got.lane)
                };
                for (r, row) in w.data.chunks(k).enumerate() {
                    for (b, blk) in stapes_core::lane::quantize_row_q8(row).iter().enumerate() {
                        let at = r * kb + b;
                        assert_eq!(
                            &q[at * 32..at * 32 + 32],
                            &blk.q,
                            "({n},{k}) row {r} blk {b}"
                        );
                        assert_eq!(s[at].to_bits(), blk.scale.to_f32().to_bits());
                    }
                }
            }
        }
    }

    #[test]
    fn weight_from_f16_bytes_is_the_weight_of_the_widened_matrix() {
        use stapes_core::{WeightData, WeightView};
        for be in store_backends() {
            // Partial last q8 block, many chunks for the pool, a single value.
            for (n, k) in [(3usize, 45usize), (700, 384), (1, 1)] {
                let wide =
                    HostTensor::new(vec![n, k], f16_exact(n * k, 5 + k as u64).data).expect("w");
                // One byte in front: the pairs sit at an odd address, as in a memory map.
                let mut bytes = vec![0u8];
                for v in &wide.data {
                    bytes.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes());
                }
                let view = WeightView::new(n, k, WeightData::F16Le(&bytes[1..])).expect("view");
                for lane in [Lane::F32, Lane::F16, Lane::Q8] {
                    let a = be.weight_from(&view, lane).expect("weight_from");
                    let b = be.weight(&wide, lane).expect("weight");
                    assert_eq!((a.lane, a.n, a.k), (b.lane, b.n, b.k));
                    let same = match (&a.store, &b.store) {
                        (Store::F16(x), Store::F16(y)) => x
                            .iter()
                            .zip(y.iter())
                            .all(|(p, q)| p.to_bits() == q.to_bits()),
                        (Store::Q8 { q: qa, s: sa, .. }, Store::Q8 { q: qb, s: sb, .. }) => {
                            qa == qb && sa.iter().zip(sb).all(|(p, q)| p.to_bits() == q.to_bits())
                        }
                        _ => false,
                    };
                    assert!(same, "({n}, {k}) {lane} on {be:?}");
                }
                // With an owner to keep them alive, aligned bytes are used in place, odd ones
                // copied; the values are the same either way.
                for (at, in_place) in [(0usize, true), (1, false)] {
                    // `at` bytes of padding in front of the values, in a buffer the view keeps.
                    let mut buf = vec![0u8; at];
                    buf.extend_from_slice(&bytes[1..]);
                    let keep: std::sync::Arc<dyn std::any::Any + Send + Sync> =
                        std::sync::Arc::new(buf);
                    let held = keep.downcast_ref::<Vec<u8>>().expect("vec");
                    let view = WeightView::new(n, k, WeightData::F16Le(&held[at..]))
                        .expect("view")
                        .kept_by(keep.clone());
                    let a = be.weight_from(&view, Lane::F32).expect("weight_from");
                    let Store::F16(got) = &a.store else {
                        panic!("f32 lane from f16 bytes stores f16")
                    };
                    assert_eq!(
                        matches!(got, F16Buf::Mapped { .. }),
                        in_place,
                        "offset {at}"
                    );
                    let want = wide.data.iter().map(|v| half::f16::from_f32(*v).to_bits());
                    assert!(got.iter().map(|h| h.to_bits()).eq(want), "offset {at}");
                }
            }
        }
    }

    #[test]
    fn weight_rows_give_back_exactly_what_the_weight_was_built_from() {
        use stapes_core::{WeightData, WeightView};
        let be = CpuBackend::new(2).expect("cpu");
        let (n, k) = (40usize, 45usize);
        let ids = [39u32, 0, 7, 7];
        let rows_of = |w: &HostTensor| -> Vec<f32> {
            ids.iter()
                .flat_map(|&i| w.data[i as usize * k..(i as usize + 1) * k].to_vec())
                .collect()
        };
        let same = |t: &CpuTensor, want: &[f32]| {
            t.shape == [ids.len(), k]
                && t.data
                    .iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
        };
        // f32 lane: any values (kept as f32), and f16-exact ones (kept as f16).
        for w in [
            HostTensor::random(vec![n, k], 3, 2.0),
            HostTensor::new(vec![n, k], f16_exact(n * k, 4).data).expect("w"),
        ] {
            let sw = be.weight(&w, Lane::F32).expect("weight");
            let got = be
                .weight_rows(&sw, &ids)
                .expect("rows")
                .expect("exact lane");
            assert!(same(&got, &rows_of(&w)));
            assert!(be.weight_rows(&sw, &[n as u32]).is_err(), "id out of range");
        }
        // From f16 bytes, f32 and f16 lanes hold the values; q8 does not.
        let w = HostTensor::new(vec![n, k], f16_exact(n * k, 5).data).expect("w");
        let bytes: Vec<u8> = w
            .data
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        let view = WeightView::new(n, k, WeightData::F16Le(&bytes)).expect("view");
        for lane in [Lane::F32, Lane::F16] {
            let sw = be.weight_from(&view, lane).expect("weight_from");
            let got = be.weight_rows(&sw, &ids).expect("rows").expect("exact");
            assert!(same(&got, &rows_of(&w)), "{lane}");
        }
        let q8 = be.weight_from(&view, Lane::Q8).expect("q8");
        assert!(be.weight_rows(&q8, &ids).expect("rows").is_none());
        // f16 lane from values off the f16 grid rounds them: no rows.
        let rounded = be
            .weight(&HostTensor::random(vec![n, k], 6, 2.0), Lane::F16)
            .expect("f16");
        assert!(be.weight_rows(&rounded, &ids).expect("rows").is_none());
    }

    #[test]
    fn f32_lane_keeps_f16_exact_weights_as_f16_with_identical_results() {
        let be = CpuBackend::new(2).expect("cpu");
        // N above the 1024-row panel of the large-M path, so panels are cut too.
        let (n, k) = (1100usize, 200usize);
        let w = HostTensor::new(vec![n, k], f16_exact(n * k, 3).data).expect("w");
        let stored = be.weight(&w, Lane::F32).expect("weight");
        assert!(
            matches!(stored.store, Store::F16(_)),
            "f16-exact weights kept as f16"
        );
        assert_eq!(stored.lane(), Lane::F32);
        let plain = CpuWeight {
            lane: Lane::F32,
            n,
            k,
            store: Store::F32(w.data.to_vec()),
            exact: true,
        };
        for m in [1usize, 3, 8, 9, 257] {
            let x = be
                .upload(&HostTensor::random(vec![m, k], 11 + m as u64, 1.0))
                .expect("x");
            let a = be.linear(&x, &stored, None).expect("f16 store");
            let b = be.linear(&x, &plain, None).expect("f32 store");
            let same = a
                .data
                .iter()
                .zip(b.data.iter())
                .all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(
                same,
                "m = {m}: f16-stored f32 lane differs from the f32 store"
            );
        }
        // One value off the f16 grid: the f32 copy is kept.
        let mut w2 = w.clone();
        w2.data[n * k - 1] = 1.0 + f32::EPSILON;
        let stored = be.weight(&w2, Lane::F32).expect("weight");
        assert!(matches!(stored.store, Store::F32(_)));
    }
}
