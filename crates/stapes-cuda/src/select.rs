//! [`Backend::select_tokens`](stapes_core::Backend::select_tokens) on this home: one launch of
//! `kernels/select.cu` (a block per row) over the logits where they lie; the request goes up and
//! the `k` candidates per row come back through one small pinned buffer, instead of the whole
//! `(rows, V)` row block and a host pass over it.
//!
//! On by default (round 5 on the H200: ids, text and scores equal to host selection; jfk end to
//! end faster); `STAPES_CUDA_SELECT=0` turns it off: the op then takes the composed default
//! (download, host selection) and Whisper keeps its own host path.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use cudarc::driver::{result, sys, CudaEvent, CudaStream};
use stapes_core::select::{
    select_dims, select_host, PendingSelect, SelectRequest, Selected, MAX_K, MAX_RANGES,
};
use stapes_core::{Backend, DeviceTensor, Error, Result, StepParams};

use crate::backend::{CudaBackend, CudaTensor};
use crate::pool::Block;
use crate::CudaError;

macro_rules! args {
    ($($a:expr),* $(,)?) => { &mut [$(&$a as *const _ as *mut c_void),*] };
}

/// Words of the request header and of one row's record (select.cu's SEL_HDR / SEL_ROW).
const HDR: usize = 10;
const ROW: usize = 3 + 2 * MAX_RANGES;
/// The shared disabled list lives in a shared-memory bitmap of V bits (40 KiB at most, under
/// the 48 KiB a launch gets without opting in, beside the kernel's static part).
const MAX_V: usize = 40 * 1024 * 8;
const THREADS: u32 = 1024;
/// Split form: ids per slice (one block of `SPLIT_THREADS` each), at most `MAX_SLICES` slices
/// (the final merge is one warp, a lane per slice); a thread keeps its ≤ 8 ids of the slice in
/// registers (select.cu's SEL_PER), so a row longer than `SLICE_IDS · MAX_SLICES` takes the
/// one-block form.
const SLICE_IDS: usize = 2048;
const MAX_SLICES: usize = 32;
const SPLIT_THREADS: u32 = 256;
/// Doubles of one slice's statistics (select.cu's SEL_STATS).
const STATS: usize = 9;

/// Whether the split form runs (on unless `STAPES_CUDA_SELECT_SPLIT=0`; read at every call, so a
/// test can compare both forms in one process). It passed tests/select.rs on the H200 and took
/// a turbo decoding step from 0.465 to 0.440 ms, tiny's from 0.251 to 0.218 (ledger, stop 13).
fn split_on() -> bool {
    !std::env::var("STAPES_CUDA_SELECT_SPLIT").is_ok_and(|v| v.trim() == "0")
}

/// Whether the device selection is on (`STAPES_CUDA_SELECT`, read once; on unless `0`).
pub(crate) fn select_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("STAPES_CUDA_SELECT").map_or(true, |v| !matches!(v.trim(), "0" | "off"))
    })
}

/// Pinned words: the request, then the answer.
struct Pinned {
    ptr: *mut u32,
    len: usize,
}

// SAFETY: the pointer is only dereferenced under `PINNED`'s lock.
unsafe impl Send for Pinned {}

static PINNED: Mutex<Option<Pinned>> = Mutex::new(None);

/// A selection's copies in flight: the pinned buffer's lock, the device buffers they use, and
/// the event after the answer's copy. Dropped unwaited (an error on the way, a pending
/// selection nobody collected), it drains the stream first, so no copy outlives the lock.
struct InFlight {
    done: Option<CudaEvent>,
    stream: Arc<CudaStream>,
    keep: Vec<Arc<Block>>,
    _pinned: MutexGuard<'static, Option<Pinned>>,
}

impl InFlight {
    fn wait(&mut self) -> Result<()> {
        let r = match self.done.take() {
            Some(e) => e.synchronize(),
            None => self.stream.synchronize(),
        };
        self.keep.clear();
        r.map_err(|e| Error::from(CudaError::driver("synchronize (select answer)", e)))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.done.is_some() || !self.keep.is_empty() {
            // nothing to report to here; the next selection's own wait reports a broken stream
            let _ = self.wait();
        }
    }
}

/// The request as select.cu reads it.
fn encode(req: &SelectRequest<'_>, v: usize) -> Vec<u32> {
    let mut p = Vec::with_capacity(HDR + req.disabled.len() + req.rows.len() * ROW);
    let (a, b) = req.mass.map_or(((0, 0), (0, 0)), |m| (m.a, m.b));
    p.extend_from_slice(&[
        v as u32,
        req.rows.len() as u32,
        req.k as u32,
        req.disabled.len() as u32,
        a.0,
        a.1,
        b.0,
        b.1,
        req.mass.is_some() as u32,
        req.prob_of.unwrap_or(u32::MAX),
    ]);
    p.extend_from_slice(req.disabled);
    for r in req.rows {
        let mut rec = [0u32; ROW];
        rec[0] = r.ranges.len() as u32;
        rec[1] = r.mass_rule as u32;
        rec[2] = r.offset.to_bits();
        for (q, &(lo, hi)) in r.ranges.iter().enumerate() {
            rec[3 + 2 * q] = lo;
            rec[4 + 2 * q] = hi;
        }
        p.extend_from_slice(&rec);
    }
    p
}

impl CudaBackend {
    /// [`Backend::select_tokens`]: the kernel where it is on and the request fits it, else the
    /// composed default (download, host selection).
    pub(crate) fn select_tokens_k(
        &self,
        logits: &CudaTensor,
        req: &SelectRequest<'_>,
    ) -> Result<Selected> {
        self.select_begin(logits, req, None)?.wait()
    }

    /// [`Backend::select_tokens_feed`]: as [`Self::select_tokens_k`], plus `select_feed` writing
    /// each row's best id into the step tensor `feed` on the stream, and the answer collected by
    /// the returned [`PendingSelect`] (it waits on an event after the answer's copy, not on the
    /// stream, so work queued after this call keeps running).
    pub(crate) fn select_tokens_feed_k<'a>(
        &'a self,
        logits: &CudaTensor,
        req: &SelectRequest<'_>,
        feed: &mut CudaTensor,
        position: usize,
    ) -> Result<PendingSelect<'a>> {
        let rows = req.rows.len();
        let want = [1, 1, 1 + rows];
        if feed.is_f16() || feed.shape() != want.as_slice() {
            return Err(Error::shape(
                "select_tokens_feed",
                format!("step tensor {:?}: want f32 {want:?}", feed.shape()),
            ));
        }
        if position >= 1 << 24 {
            return Err(Error::shape(
                "select_tokens_feed",
                format!("position {position}: want below 2^24"),
            ));
        }
        self.select_begin(logits, req, Some((feed, position)))
    }

    fn select_begin<'a>(
        &'a self,
        logits: &CudaTensor,
        req: &SelectRequest<'_>,
        feed: Option<(&mut CudaTensor, usize)>,
    ) -> Result<PendingSelect<'a>> {
        let (rows, v) = select_dims(logits.shape(), req)?;
        let fits = req.k <= MAX_K && v <= MAX_V && rows <= u32::MAX as usize;
        let host = |feed: Option<(&mut CudaTensor, usize)>| -> Result<PendingSelect<'a>> {
            let sel = select_host(&self.download_step(logits)?, req)?;
            if let Some((t, position)) = feed {
                let ids = sel.best_ids(rows);
                self.write_host(t, &StepParams { position, ids }.to_host()?)?;
            }
            Ok(PendingSelect::ready(sel))
        };
        if !select_on() || !fits || self.capturing.load(std::sync::atomic::Ordering::Relaxed) {
            return host(feed);
        }
        let mut params = encode(req, v);
        let slices = v.div_ceil(SLICE_IDS).clamp(1, MAX_SLICES);
        // grid y is the row: at most 65535
        let split = slices > 1 && v <= SLICE_IDS * MAX_SLICES && rows <= 65_535 && split_on();
        let counters_at = params.len();
        if split {
            // one arrival counter per row for the split form's last block, zeroed
            params.resize(params.len() + rows, 0);
        }
        let out_words = rows * (2 * req.k + 1);
        let err = |what| move |e| Error::from(CudaError::driver(what, e));
        self.bind()?;
        let dev_params = self.pool.alloc(params.len() * 4)?;
        let dev_out = self.pool.alloc(out_words * 4)?;
        let mut guard = PINNED.lock().unwrap_or_else(|p| p.into_inner());
        let need = params.len() + out_words;
        if guard.as_ref().is_none_or(|s| s.len < need) {
            if let Some(old) = guard.take() {
                // SAFETY: allocated below by malloc_host; no copy is in flight (a pending
                // selection holds the lock until its answer has arrived)
                unsafe { result::free_host(old.ptr.cast()) }
                    .map_err(err("free pinned host memory"))?;
            }
            let len = need.max(16 * 1024);
            // SAFETY: a plain allocation; CU_MEMHOSTALLOC_PORTABLE = 1
            let ptr = unsafe { result::malloc_host(len * 4, 1) }
                .map_err(err("allocate pinned host memory"))?;
            *guard = Some(Pinned {
                ptr: ptr.cast(),
                len,
            });
        }
        let Some(pin_ptr) = guard.as_ref().map(|p| p.ptr) else {
            drop(guard);
            return host(feed);
        };
        // from here on the lock is released only once the stream has passed this call's copies
        let mut flight = InFlight {
            done: None,
            stream: self.stream.clone(),
            keep: vec![dev_params.clone(), dev_out.clone()],
            _pinned: guard,
        };
        // SAFETY: `pin_ptr` holds ≥ need words, only touched under the lock, which `flight`
        // keeps until the copies below have completed
        let (up, answer) = unsafe {
            let all = std::slice::from_raw_parts_mut(pin_ptr, need);
            all.split_at_mut(params.len())
        };
        up.copy_from_slice(&params);
        // SAFETY: `dev_params` holds params.len() words; the source stays untouched until the
        // answer's event has completed
        unsafe { self.copy_htod(dev_params.ptr, &*up) }
            .map_err(err("memcpy HtoD (select request)"))?;
        let (lp, pp, op) = (self.p(&logits.buf), dev_params.ptr, dev_out.ptr);
        let dt = (logits.is_f16() as i32) << 1;
        if split {
            let per = v.div_ceil(slices);
            let smem = (per.div_ceil(32) * 4) as u32;
            let stats = self.pool.alloc(rows * slices * STATS * 8)?;
            let cand_v = self.pool.alloc(rows * slices * req.k * 4)?;
            let cand_i = self.pool.alloc(rows * slices * req.k * 4)?;
            let (sp, cv, ci) = (stats.ptr, cand_v.ptr, cand_i.ptr);
            // the split form's scratch, kept until the answer has arrived
            flight.keep.extend([stats, cand_v, cand_i]);
            let cp = dev_params.ptr + (counters_at * 4) as u64;
            let si = slices as i32;
            let grid = (slices as u32, rows as u32, 1);
            self.launch(
                "select_stats",
                grid,
                (SPLIT_THREADS, 1, 1),
                smem,
                args![lp, pp, sp, si, dt],
            )?;
            self.launch(
                "select_split",
                grid,
                (SPLIT_THREADS, 1, 1),
                smem,
                args![lp, pp, sp, cv, ci, cp, op, si, dt],
            )?;
        } else {
            let smem = (v.div_ceil(32) * 4) as u32;
            self.launch(
                "select_topk",
                (rows as u32, 1, 1),
                (THREADS, 1, 1),
                smem,
                args![lp, pp, op, dt],
            )?;
        }
        if let Some((t, position)) = feed {
            // a GEMM input prepared from the step tensor would be stale after this write
            self.forget_prep();
            let (fp, n, rec, vv) = (
                self.p(&t.buf),
                rows as i32,
                (2 * req.k + 1) as i32,
                v as i32,
            );
            let pos = position as f32;
            self.launch(
                "select_feed",
                ((rows as u32).div_ceil(256), 1, 1),
                (256, 1, 1),
                0,
                args![op, fp, n, rec, vv, pos],
            )?;
        }
        // SAFETY: `dev_out` holds out_words words written by the kernel on this stream
        unsafe { self.copy_dtoh(&mut *answer, dev_out.ptr) }
            .map_err(err("memcpy DtoH (select answer)"))?;
        let done = self
            .stream
            .context()
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(err("create event (select answer)"))?;
        done.record(&self.stream)
            .map_err(err("record event (select answer)"))?;
        flight.done = Some(done);
        let (k, want_probs) = (req.k, req.prob_of.is_some());
        Ok(PendingSelect::later(move || {
            flight.wait()?;
            let answer: &[u32] = answer;
            let mut sel = Selected {
                k,
                ids: Vec::with_capacity(rows * k),
                scores: Vec::with_capacity(rows * k),
                probs: want_probs.then(|| Vec::with_capacity(rows)),
            };
            for rec in answer.chunks(2 * k + 1) {
                sel.ids.extend_from_slice(&rec[..k]);
                sel.scores
                    .extend(rec[k..2 * k].iter().map(|&b| f32::from_bits(b)));
                if let Some(p) = sel.probs.as_mut() {
                    p.push(f32::from_bits(rec[2 * k]));
                }
            }
            drop(flight);
            if let Some(&bad) = sel.ids.iter().find(|&&id| id as usize >= v) {
                return Err(Error::Device(format!(
                    "select_topk returned id {bad} for a vocabulary of {v}"
                )));
            }
            Ok(sel)
        }))
    }
}
