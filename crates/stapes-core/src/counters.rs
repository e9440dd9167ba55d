//! Engagement counters: tests and `--verbose` use them to prove which path actually ran.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Default, Debug)]
pub struct Counters {
    /// Ops executed (CPU) or kernels launched eagerly (GPU).
    pub ops: AtomicU64,
    /// GEMMs by lane: f32, f16, q8.
    pub gemm_f32: AtomicU64,
    pub gemm_f16: AtomicU64,
    pub gemm_q8: AtomicU64,
    /// Of the q8 GEMMs, those a GPU home ran on the f16 tensor cores over an f16 copy of the
    /// weight's q8 values (CUDA `q8_mix.rs`).
    pub gemm_q8_f16: AtomicU64,
    /// Of the q8 GEMMs, those a GPU home ran on the e4m3 (FP8) tensor cores over an e4m3 copy of
    /// the weight (CUDA `fp8.rs`).
    pub gemm_q8_fp8: AtomicU64,
    /// Graph captures and replays (GPU homes).
    pub graph_captures: AtomicU64,
    pub graph_replays: AtomicU64,
    declines: Mutex<BTreeMap<String, u64>>,
}

impl Counters {
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Record a decline; returns true the first time this reason is seen (log it then).
    pub fn decline(&self, reason: &str) -> bool {
        let mut m = self.declines.lock().unwrap_or_else(|p| p.into_inner());
        let e = m.entry(reason.to_string()).or_insert(0);
        *e += 1;
        *e == 1
    }

    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            ops: self.ops.load(Ordering::Relaxed),
            gemm_f32: self.gemm_f32.load(Ordering::Relaxed),
            gemm_f16: self.gemm_f16.load(Ordering::Relaxed),
            gemm_q8: self.gemm_q8.load(Ordering::Relaxed),
            gemm_q8_f16: self.gemm_q8_f16.load(Ordering::Relaxed),
            gemm_q8_fp8: self.gemm_q8_fp8.load(Ordering::Relaxed),
            graph_captures: self.graph_captures.load(Ordering::Relaxed),
            graph_replays: self.graph_replays.load(Ordering::Relaxed),
            declines: self
                .declines
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CounterSnapshot {
    pub ops: u64,
    pub gemm_f32: u64,
    pub gemm_f16: u64,
    pub gemm_q8: u64,
    pub gemm_q8_f16: u64,
    pub gemm_q8_fp8: u64,
    pub graph_captures: u64,
    pub graph_replays: u64,
    pub declines: BTreeMap<String, u64>,
}
