//! The device memory arena: a caching allocator keyed by rounded size.
//!
//! Freed blocks go back to a free list and are handed out again for the same size class, so the
//! hot path does no `cuMemAlloc` after the first pass, and a repeated sequence of allocations
//! gets the same addresses. Blocks allocated while a CUDA graph is being captured carry that
//! capture's tag: while the graph lives they never return to the shared free lists (replays
//! write into them), and blocks freed inside the capture are reused only inside it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys, CudaContext};

use crate::CudaError;

/// Rounding keeps size classes few: 512 B steps up to 1 MiB, then 1 MiB steps.
fn size_class(bytes: usize) -> usize {
    let b = bytes.max(1);
    if b <= 1 << 20 {
        b.div_ceil(512) * 512
    } else {
        b.div_ceil(1 << 20) << 20
    }
}

#[derive(Default)]
struct Inner {
    free: HashMap<usize, Vec<u64>>,
    /// Free lists private to live graphs, by capture tag.
    private: HashMap<u64, HashMap<usize, Vec<u64>>>,
    /// The capture in progress, if any.
    active: Option<u64>,
    next_tag: u64,
    reserved: usize,
    in_use: usize,
    peak_reserved: usize,
    peak_in_use: usize,
}

pub struct Pool {
    ctx: Arc<CudaContext>,
    inner: Mutex<Inner>,
}

/// One device allocation; returns itself to the pool when the last reference drops.
pub struct Block {
    pub ptr: u64,
    pub bytes: usize,
    tag: u64,
    pool: Arc<Pool>,
    /// Its values were never written: a norm left only the e4m3 rows of the FP8 GEMM that is
    /// its one reader (`Feeds::only`). The backend turns any other read into an error.
    elided: AtomicBool,
}

impl Block {
    pub(crate) fn elided(&self) -> bool {
        self.elided.load(Ordering::Relaxed)
    }

    pub(crate) fn set_elided(&self) {
        self.elided.store(true, Ordering::Relaxed);
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        self.pool.release(self.ptr, self.bytes, self.tag);
    }
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Block({:#x}, {} B)", self.ptr, self.bytes)
    }
}

impl Pool {
    pub fn new(ctx: Arc<CudaContext>) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            inner: Mutex::new(Inner {
                next_tag: 1,
                ..Default::default()
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<Arc<Block>, CudaError> {
        let class = size_class(bytes);
        let mut g = self.lock();
        let tag = g.active.unwrap_or(0);
        let reused = if tag != 0 {
            g.private
                .get_mut(&tag)
                .and_then(|m| m.get_mut(&class))
                .and_then(Vec::pop)
        } else {
            None
        };
        let ptr = match reused.or_else(|| g.free.get_mut(&class).and_then(Vec::pop)) {
            Some(p) => p,
            None => {
                let p = match self.raw_alloc(class) {
                    Ok(p) => p,
                    Err(_) if tag == 0 => {
                        // out of memory: give the cached blocks back to the driver and retry once
                        self.trim_locked(&mut g);
                        self.raw_alloc(class)?
                    }
                    Err(e) => return Err(e),
                };
                g.reserved += class;
                g.peak_reserved = g.peak_reserved.max(g.reserved);
                p
            }
        };
        g.in_use += class;
        g.peak_in_use = g.peak_in_use.max(g.in_use);
        Ok(Arc::new(Block {
            ptr,
            bytes: class,
            tag,
            pool: self.clone(),
            elided: AtomicBool::new(false),
        }))
    }

    fn raw_alloc(&self, bytes: usize) -> Result<u64, CudaError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("bind context", e))?;
        // SAFETY: a plain device allocation in the bound context.
        unsafe { result::malloc_sync(bytes) }
            .map_err(|e| CudaError::OutOfMemory(format!("{bytes} bytes: {e:?}")))
    }

    fn trim_locked(&self, g: &mut Inner) {
        let _ = self.ctx.bind_to_thread();
        for (class, ptrs) in g.free.drain() {
            for p in ptrs {
                // SAFETY: the block is free (no tensor refers to it) and was allocated by us.
                let _ = unsafe { result::free_sync(p as sys::CUdeviceptr) };
                g.reserved -= class;
            }
        }
    }

    fn release(&self, ptr: u64, class: usize, tag: u64) {
        let mut g = self.lock();
        g.in_use -= class;
        if tag != 0 {
            if let Some(m) = g.private.get_mut(&tag) {
                m.entry(class).or_default().push(ptr);
                return;
            }
        }
        g.free.entry(class).or_default().push(ptr);
    }

    /// Start tagging allocations for a capture; returns the tag.
    pub fn begin_capture(&self) -> u64 {
        let mut g = self.lock();
        let tag = g.next_tag;
        g.next_tag += 1;
        g.private.insert(tag, HashMap::new());
        g.active = Some(tag);
        tag
    }

    pub fn end_capture(&self) {
        self.lock().active = None;
    }

    /// The graph with `tag` is gone: its private blocks become ordinary free blocks.
    pub fn drop_capture(&self, tag: u64) {
        let mut g = self.lock();
        if g.active == Some(tag) {
            g.active = None;
        }
        if let Some(m) = g.private.remove(&tag) {
            for (class, ptrs) in m {
                g.free.entry(class).or_default().extend(ptrs);
            }
        }
    }

    /// (bytes reserved from the driver, bytes handed out).
    pub fn usage(&self) -> (usize, usize) {
        let g = self.lock();
        (g.reserved, g.in_use)
    }

    /// High-water marks of [`Pool::usage`].
    pub fn peak(&self) -> (usize, usize) {
        let g = self.lock();
        (g.peak_reserved, g.peak_in_use)
    }

    pub fn reset_peak(&self) {
        let mut g = self.lock();
        g.peak_reserved = g.reserved;
        g.peak_in_use = g.in_use;
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let g = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = self.ctx.bind_to_thread();
        let all = g
            .free
            .drain()
            .chain(g.private.drain().flat_map(|(_, m)| m.into_iter()));
        for (_, ptrs) in all {
            for p in ptrs {
                // SAFETY: every block refers to the pool, so none is alive when the pool drops.
                let _ = unsafe { result::free_sync(p as sys::CUdeviceptr) };
            }
        }
    }
}
