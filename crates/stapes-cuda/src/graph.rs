//! CUDA graphs: capture a closure of backend calls once per key (shape bucket × lane, chosen by
//! the caller) and replay it. Capture records kernels and copies against fixed addresses, so:
//! - inputs are tensors that exist before the capture (their blocks are kept alive by the
//!   graph); new data goes into them with [`CudaBackend::write_host`] or device ops before a
//!   replay;
//! - outputs are the closure's returned tensors; every replay rewrites the same blocks, so a
//!   caller that needs a result beyond the next replay copies it;
//! - inside the closure no host transfer or synchronization is allowed (ops that need one return
//!   `Error::Decline`);
//! - host-side values passed to ops are baked in: `gather_rows` ids, `gather_batch` indices,
//!   `write_rows` offsets, `kv_len`, shapes. A replay repeats them exactly, so the key must name
//!   everything that varies (a decoder step at a new position needs its own graph until step
//!   parameters can live on the device).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys};
use stapes_core::{Counters, Error, Result};

use crate::backend::{CudaBackend, CudaTensor};
use crate::pool::{Block, Pool};
use crate::CudaError;

struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    tag: u64,
    outputs: Vec<CudaTensor>,
    keep: Vec<Arc<Block>>,
    pool: Arc<Pool>,
}

// SAFETY: graph handles are only used under the `Graphs` mutex.
unsafe impl Send for Graph {}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: created by us; no replay can be in flight once the owner drops it, because
        // every replay is ordered on the backend's stream and the exec handle is destroyed after
        // the driver finishes pending launches (cuGraphExecDestroy is stream-ordered safe).
        unsafe {
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
        self.outputs.clear();
        self.keep.clear();
        self.pool.drop_capture(self.tag);
    }
}

pub(crate) struct Graphs {
    enabled: bool,
    map: Mutex<HashMap<String, Graph>>,
    /// Keys whose chain has run eagerly once: first uses pick cuBLASLt plans by timing and
    /// prepare inputs, work that must happen before a capture, not inside it.
    warmed: Mutex<std::collections::HashSet<String>>,
}

impl Graphs {
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            map: Mutex::new(HashMap::new()),
            warmed: Mutex::new(std::collections::HashSet::new()),
        }
    }
}

fn graph_err(what: &str, e: impl std::fmt::Debug) -> Error {
    CudaError::Graph(format!("{what}: {e:?}")).into()
}

impl CudaBackend {
    /// Whether capture is on (`STAPES_CUDA_GRAPHS=0` turns it off).
    pub fn graphs_enabled(&self) -> bool {
        self.graphs.enabled
    }

    /// The usual entry: replay the graph stored under `key`, or capture `f` into it first. With
    /// graphs off, `f` runs eagerly every time. Either way the outputs are `f`'s.
    pub fn run_graph<F>(&self, key: &str, f: F) -> Result<Vec<CudaTensor>>
    where
        F: FnOnce(&CudaBackend) -> Result<Vec<CudaTensor>>,
    {
        if !self.graphs.enabled {
            return f(self);
        }
        if self.has_graph(key) {
            return self.replay(key);
        }
        self.capture(key, f)
    }

    /// [`Backend::chain`]: the first call under `key` runs eagerly (warming plans and
    /// buffers), the second captures, later ones replay.
    pub(crate) fn chain_graph(
        &self,
        key: &str,
        f: &mut dyn FnMut(&CudaBackend) -> Result<Vec<CudaTensor>>,
    ) -> Result<Vec<CudaTensor>> {
        let span = tracing::info_span!("cuda.chain", key, mode = tracing::field::Empty);
        let _e = span.enter();
        if !self.graphs.enabled {
            span.record("mode", "eager");
            return f(self);
        }
        let first = self
            .graphs
            .warmed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string());
        if first {
            span.record("mode", "eager (first use)");
            return f(self);
        }
        span.record(
            "mode",
            if self.has_graph(key) {
                "replay"
            } else {
                "capture"
            },
        );
        self.run_graph(key, |b| f(b))
    }

    pub fn has_graph(&self, key: &str) -> bool {
        self.graphs
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(key)
    }

    /// Forget the graph stored under `key` (its memory returns to the pool).
    pub fn drop_graph(&self, key: &str) {
        self.graphs
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Capture `f` under `key` (replacing any graph there), then launch it once so the outputs
    /// hold results. With graphs off, runs `f` eagerly and stores nothing.
    pub fn capture<F>(&self, key: &str, f: F) -> Result<Vec<CudaTensor>>
    where
        F: FnOnce(&CudaBackend) -> Result<Vec<CudaTensor>>,
    {
        if !self.graphs.enabled {
            return f(self);
        }
        self.drop_graph(key);
        self.bind()?;
        if self.capturing.swap(true, Ordering::SeqCst) {
            return Err(CudaError::Graph("nested capture".into()).into());
        }
        // a prepared GEMM input made eagerly must not be baked into the graph, nor one made
        // inside the capture (filled only by replays) be used eagerly afterwards
        self.forget_prep();
        let tag = self.pool.begin_capture();
        self.capture_keep
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        let stream = self.stream.cu_stream();
        // Relaxed: the pool may cuMemAlloc (not stream work) while the capture is open.
        // SAFETY: our own non-default stream, not already capturing.
        let begun = unsafe {
            result::stream::begin_capture(
                stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        };
        let res = match begun {
            Ok(()) => catch_unwind(AssertUnwindSafe(|| f(self))).unwrap_or_else(|_| {
                Err(CudaError::Graph("panic inside the captured closure".into()).into())
            }),
            Err(e) => Err(graph_err("cuStreamBeginCapture", e)),
        };
        // always close the capture, or the stream stays unusable
        // SAFETY: ends the capture begun above (harmless error if it never began).
        let ended = if begun.is_ok() {
            unsafe { result::stream::end_capture(stream) }
        } else {
            Ok(std::ptr::null_mut())
        };
        self.pool.end_capture();
        self.capturing.store(false, Ordering::SeqCst);
        self.forget_prep();
        let keep =
            std::mem::take(&mut *self.capture_keep.lock().unwrap_or_else(|p| p.into_inner()));
        let fail = |e: Error| {
            self.pool.drop_capture(tag);
            Err(e)
        };
        let outputs = match res {
            Ok(o) => o,
            Err(e) => {
                if let Ok(g) = ended {
                    if !g.is_null() {
                        // SAFETY: the graph returned by end_capture, unused.
                        let _ = unsafe { result::graph::destroy(g) };
                    }
                }
                drop(keep);
                return fail(e);
            }
        };
        let graph = match ended {
            Ok(g) if !g.is_null() => g,
            Ok(_) => return fail(CudaError::Graph("capture produced no graph".into()).into()),
            Err(e) => return fail(graph_err("cuStreamEndCapture", e)),
        };
        // SAFETY: a valid graph from end_capture.
        let exec =
            match unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
                Ok(x) => x,
                Err(e) => {
                    // SAFETY: as above.
                    let _ = unsafe { result::graph::destroy(graph) };
                    return fail(graph_err("cuGraphInstantiate", e));
                }
            };
        let g = Graph {
            graph,
            exec,
            tag,
            outputs,
            keep,
            pool: self.pool.clone(),
        };
        // SAFETY: a valid exec on our stream.
        unsafe { result::graph::upload(g.exec, stream) }
            .map_err(|e| graph_err("cuGraphUpload", e))?;
        Counters::bump(&self.counters_ref().graph_captures);
        let outs = g.outputs.clone();
        self.graphs
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), g);
        self.launch_graph(key)?;
        Ok(outs)
    }

    /// Launch the graph stored under `key`; returns its outputs (rewritten by this launch).
    pub fn replay(&self, key: &str) -> Result<Vec<CudaTensor>> {
        self.launch_graph(key)
    }

    fn launch_graph(&self, key: &str) -> Result<Vec<CudaTensor>> {
        self.bind()?;
        let map = self.graphs.map.lock().unwrap_or_else(|p| p.into_inner());
        let g = map
            .get(key)
            .ok_or_else(|| CudaError::Graph(format!("no graph captured under `{key}`")))?;
        // SAFETY: a valid exec; its buffers are kept alive by the graph.
        unsafe { result::graph::launch(g.exec, self.stream.cu_stream()) }
            .map_err(|e| graph_err("cuGraphLaunch", e))?;
        Counters::bump(&self.counters_ref().graph_replays);
        // the replay rewrote its blocks in place
        self.forget_prep();
        Ok(g.outputs.clone())
    }

    /// `(edges, programmatic edges)` of the graph stored under `key`: a capture with
    /// programmatic dependent launch on (crate::pdl) records its kernel-to-kernel dependencies
    /// as programmatic edges, where replays keep the early launch.
    pub fn graph_edges(&self, key: &str) -> Result<(usize, usize)> {
        let map = self.graphs.map.lock().unwrap_or_else(|p| p.into_inner());
        let g = map
            .get(key)
            .ok_or_else(|| CudaError::Graph(format!("no graph captured under `{key}`")))?;
        let graph = g.graph;
        // cuGraphGetEdges_v2 is CUDA 12.3+; cudarc panics where the driver lacks the symbol
        catch_unwind(AssertUnwindSafe(|| -> Result<(usize, usize)> {
            let mut n = 0usize;
            // SAFETY: a live graph; a first call with null arrays only reports the count.
            unsafe {
                sys::cuGraphGetEdges_v2(
                    graph,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    &mut n,
                )
            }
            .result()
            .map_err(|e| graph_err("cuGraphGetEdges_v2", e))?;
            let mut from = vec![std::ptr::null_mut(); n];
            let mut to = vec![std::ptr::null_mut(); n];
            // SAFETY: plain-old-data, all zero is a valid value
            let mut data: Vec<sys::CUgraphEdgeData> = vec![unsafe { std::mem::zeroed() }; n];
            let mut got = n;
            // SAFETY: the three arrays hold `n` entries each
            unsafe {
                sys::cuGraphGetEdges_v2(
                    graph,
                    from.as_mut_ptr(),
                    to.as_mut_ptr(),
                    data.as_mut_ptr(),
                    &mut got,
                )
            }
            .result()
            .map_err(|e| graph_err("cuGraphGetEdges_v2", e))?;
            let programmatic = data[..got.min(n)]
                .iter()
                .filter(|d| {
                    d.type_
                        == sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8
                })
                .count();
            Ok((got.min(n), programmatic))
        }))
        .unwrap_or_else(|_| Err(CudaError::Graph("cuGraphGetEdges_v2 missing".into()).into()))
    }

    fn counters_ref(&self) -> &Counters {
        stapes_core::Backend::counters(self)
    }
}
