//! Does cuBLASLt's heuristic list (what the tuner in `gemm.rs` chooses from) hold the fastest
//! kernel for our encoder GEMMs? For each shape this times, inside a CUDA graph, the heuristic's
//! first 32 picks and every configuration cuBLASLt accepts when asked directly (each algorithm id
//! × tile × cluster shape, then the fastest of those with every stage count, CTA swizzle and
//! custom option). Weights rotate over copies larger than L2, so each run reads them cold as in
//! an encoder; activations stay hot. f16 operands, f32 accumulation, f16 out and bias, the
//! encoder's epilogues. Prints a line per timed candidate and a summary per shape.
//!
//! `cargo run --release -p stapes-cuda --example lt_search -- [SECONDS_PER_SHAPE] [GROUP...]`
//! with GROUP among `turbo`, `turbo16`, `parakeet` (default: all, 20 s a shape).

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

use cudarc::cublaslt::{result as ltr, sys as lts};
use cudarc::driver::{result as dr, sys as ds, CudaContext, CudaStream};

type R<T> = Result<T, String>;

#[derive(Clone, Copy, PartialEq)]
enum Epi {
    Bias,
    BiasC,
    GeluBias,
}

struct Shape {
    group: &'static str,
    name: &'static str,
    /// output features (cuBLAS's m)
    m: usize,
    /// activation rows (cuBLAS's n)
    n: usize,
    k: usize,
    epi: Epi,
}

const SHAPES: &[Shape] = &[
    Shape {
        group: "turbo",
        name: "qkv",
        m: 3840,
        n: 1500,
        k: 1280,
        epi: Epi::Bias,
    },
    Shape {
        group: "turbo",
        name: "out",
        m: 1280,
        n: 1500,
        k: 1280,
        epi: Epi::BiasC,
    },
    Shape {
        group: "turbo",
        name: "fc1",
        m: 5120,
        n: 1500,
        k: 1280,
        epi: Epi::GeluBias,
    },
    Shape {
        group: "turbo",
        name: "fc2",
        m: 1280,
        n: 1500,
        k: 5120,
        epi: Epi::BiasC,
    },
    Shape {
        group: "turbo16",
        name: "qkv",
        m: 3840,
        n: 24000,
        k: 1280,
        epi: Epi::Bias,
    },
    Shape {
        group: "turbo16",
        name: "out",
        m: 1280,
        n: 24000,
        k: 1280,
        epi: Epi::BiasC,
    },
    Shape {
        group: "turbo16",
        name: "fc1",
        m: 5120,
        n: 24000,
        k: 1280,
        epi: Epi::GeluBias,
    },
    Shape {
        group: "turbo16",
        name: "fc2",
        m: 1280,
        n: 24000,
        k: 5120,
        epi: Epi::BiasC,
    },
    Shape {
        group: "parakeet",
        name: "fc1",
        m: 4096,
        n: 140,
        k: 1024,
        epi: Epi::Bias,
    },
    Shape {
        group: "parakeet",
        name: "fc2",
        m: 1024,
        n: 140,
        k: 4096,
        epi: Epi::BiasC,
    },
    Shape {
        group: "parakeet",
        name: "qkv",
        m: 3072,
        n: 140,
        k: 1024,
        epi: Epi::Bias,
    },
    Shape {
        group: "parakeet",
        name: "out",
        m: 1024,
        n: 140,
        k: 1024,
        epi: Epi::BiasC,
    },
    Shape {
        group: "parakeet",
        name: "pw1",
        m: 2048,
        n: 140,
        k: 1024,
        epi: Epi::Bias,
    },
];

const WORKSPACE: usize = 32 << 20;
const CLUSTERS: &[u16] = &[0, 2, 3, 5, 6, 4, 8]; // auto, 1x1, 2x1, 1x2, 2x2, 4x1, 1x4

fn st(s: lts::cublasStatus_t, what: &str) -> R<()> {
    if s == lts::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {s:?}"))
    }
}

/// Random f16 values in about (-1, 1) (a fixed LCG: both runs of a candidate see the same bits).
fn upload_random(n: usize, seed: u64) -> R<u64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let v: Vec<u16> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            half::f16::from_f32(u).to_bits()
        })
        .collect();
    // SAFETY: a fresh allocation of the copied size.
    unsafe {
        let p = dr::malloc_sync(n * 2).map_err(|e| format!("malloc: {e:?}"))?;
        dr::memcpy_htod_sync(p, &v).map_err(|e| format!("copy: {e:?}"))?;
        Ok(p)
    }
}

struct Problem {
    h: lts::cublasLtHandle_t,
    desc: lts::cublasLtMatmulDesc_t,
    la: lts::cublasLtMatrixLayout_t,
    lb: lts::cublasLtMatrixLayout_t,
    lc: lts::cublasLtMatrixLayout_t,
    w: Vec<u64>,
    x: u64,
    c: u64,
    d: u64,
    ws: u64,
    beta: f32,
}

impl Problem {
    fn new(h: lts::cublasLtHandle_t, s: &Shape) -> R<Self> {
        let f16 = lts::cudaDataType_t::CUDA_R_16F;
        let (m, n, k) = (s.m as u64, s.n as u64, s.k as u64);
        let desc = ltr::create_matmul_desc(
            lts::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            lts::cudaDataType_t::CUDA_R_32F,
        )
        .map_err(|e| format!("desc: {e:?}"))?;
        let wbytes = s.m * s.k * 2;
        let copies = (120_000_000 / wbytes + 1).clamp(2, 16);
        let w = (0..copies)
            .map(|i| upload_random(s.m * s.k, 7 + i as u64))
            .collect::<R<Vec<_>>>()?;
        let x = upload_random(s.n * s.k, 3)?;
        let c = upload_random(s.m * s.n, 5)?;
        // an f16 bias: the F16Out16BiasF16 kind the encoder's f16 chain runs
        let bias: Vec<u16> = (0..s.m)
            .map(|i| half::f16::from_f32((i % 17) as f32 * 0.01).to_bits())
            .collect();
        // SAFETY: fresh allocations of the copied or stated sizes.
        let (d, ws, bp) = unsafe {
            let d = dr::malloc_sync(s.m * s.n * 2).map_err(|e| format!("malloc: {e:?}"))?;
            let ws = dr::malloc_sync(WORKSPACE).map_err(|e| format!("malloc: {e:?}"))?;
            let bp = dr::malloc_sync(s.m * 2).map_err(|e| format!("malloc: {e:?}"))?;
            dr::memcpy_htod_sync(bp, &bias).map_err(|e| format!("copy: {e:?}"))?;
            (d, ws, bp)
        };
        let t: i32 = 1;
        let epi = match s.epi {
            Epi::GeluBias => lts::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
            _ => lts::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
        };
        let bt = lts::cudaDataType_t::CUDA_R_16F;
        {
            use lts::cublasLtMatmulDescAttributes_t as A;
            set_desc(desc, A::CUBLASLT_MATMUL_DESC_TRANSA, &t, "TRANSA")?;
            set_desc(desc, A::CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, "EPILOGUE")?;
            set_desc(
                desc,
                A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                &bt,
                "BIAS_DATA_TYPE",
            )?;
            set_desc(
                desc,
                A::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                &bp,
                "BIAS_POINTER",
            )?;
        }
        let la =
            ltr::create_matrix_layout(f16, k, m, k as i64).map_err(|e| format!("layout: {e:?}"))?;
        let lb =
            ltr::create_matrix_layout(f16, k, n, k as i64).map_err(|e| format!("layout: {e:?}"))?;
        let lc =
            ltr::create_matrix_layout(f16, m, n, m as i64).map_err(|e| format!("layout: {e:?}"))?;
        Ok(Self {
            h,
            desc,
            la,
            lb,
            lc,
            w,
            x,
            c,
            d,
            ws,
            beta: if s.epi == Epi::BiasC { 1.0 } else { 0.0 },
        })
    }

    /// The algorithm as cuBLASLt accepts it here: its wave count, or `None`.
    fn check(&self, algo: &lts::cublasLtMatmulAlgo_t) -> Option<f32> {
        // SAFETY: live descriptors; the result is plain data.
        unsafe {
            let mut r: lts::cublasLtMatmulHeuristicResult_t = std::mem::zeroed();
            let s = lts::cublasLtMatmulAlgoCheck(
                self.h, self.desc, self.la, self.lb, self.lc, self.lc, algo, &mut r,
            );
            (s == lts::cublasStatus_t::CUBLAS_STATUS_SUCCESS && r.workspaceSize <= WORKSPACE)
                .then_some(r.wavesCount)
        }
    }

    fn run(&self, stream: &Arc<CudaStream>, algo: &lts::cublasLtMatmulAlgo_t, i: usize) -> bool {
        let (alpha, beta) = (1f32, self.beta);
        let cp = if self.beta != 0.0 { self.c } else { self.d };
        // SAFETY: buffers sized for this shape, descriptors live, the stream belongs to the context.
        unsafe {
            ltr::matmul(
                self.h,
                self.desc,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                self.w[i % self.w.len()] as *const c_void,
                self.la,
                self.x as *const c_void,
                self.lb,
                cp as *const c_void,
                self.lc,
                self.d as *mut c_void,
                self.lc,
                algo,
                self.ws as *mut c_void,
                WORKSPACE,
                stream.cu_stream() as lts::cudaStream_t,
            )
            .is_ok()
        }
    }

    /// µs a run: `runs` runs (rotating the weight copies) captured in a graph, the best of three
    /// replays after a warm one. The eager first run loads the kernel (not allowed in a capture).
    fn time(
        &self,
        stream: &Arc<CudaStream>,
        algo: &lts::cublasLtMatmulAlgo_t,
        runs: usize,
    ) -> Option<f32> {
        if !self.run(stream, algo, 0) || stream.synchronize().is_err() {
            return None;
        }
        stream
            .begin_capture(ds::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .ok()?;
        let all = (0..runs).all(|i| self.run(stream, algo, i));
        let graph = stream
            .end_capture(ds::CUgraphInstantiate_flags(0))
            .ok()
            .flatten()?;
        if !all {
            return None;
        }
        graph.launch().ok()?;
        let ctx = stream.context();
        let mut best = f32::MAX;
        for _ in 0..3 {
            let e0 = ctx
                .new_event(Some(ds::CUevent_flags::CU_EVENT_DEFAULT))
                .ok()?;
            let e1 = ctx
                .new_event(Some(ds::CUevent_flags::CU_EVENT_DEFAULT))
                .ok()?;
            e0.record(stream).ok()?;
            graph.launch().ok()?;
            e1.record(stream).ok()?;
            e1.synchronize().ok()?;
            best = best.min(e0.elapsed_ms(&e1).ok()? * 1000.0 / runs as f32);
        }
        Some(best)
    }

    /// µs a run from 5 eager launches between events: the tuner's timing for large shapes.
    fn time_eager(
        &self,
        stream: &Arc<CudaStream>,
        algo: &lts::cublasLtMatmulAlgo_t,
    ) -> Option<f32> {
        if !self.run(stream, algo, 0) {
            return None;
        }
        let ctx = stream.context();
        let e0 = ctx
            .new_event(Some(ds::CUevent_flags::CU_EVENT_DEFAULT))
            .ok()?;
        let e1 = ctx
            .new_event(Some(ds::CUevent_flags::CU_EVENT_DEFAULT))
            .ok()?;
        e0.record(stream).ok()?;
        let all = (0..5).all(|i| self.run(stream, algo, i));
        e1.record(stream).ok()?;
        e1.synchronize().ok()?;
        all.then(|| e0.elapsed_ms(&e1).ok().map(|ms| ms * 200.0))
            .flatten()
    }

    fn heuristic(&self, want: usize) -> Vec<lts::cublasLtMatmulAlgo_t> {
        let mut res: Vec<lts::cublasLtMatmulHeuristicResult_t> = Vec::with_capacity(want);
        let mut count = 0i32;
        // SAFETY: `res` has room for `want`; the count says how many were written.
        unsafe {
            let Ok(pref) = ltr::create_matmul_pref() else {
                return Vec::new();
            };
            let ws = WORKSPACE;
            let _ = ltr::set_matmul_pref_attribute(
                pref,
                lts::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const usize as *const c_void,
                8,
            );
            let s = lts::cublasLtMatmulAlgoGetHeuristic(
                self.h,
                self.desc,
                self.la,
                self.lb,
                self.lc,
                self.lc,
                pref,
                want as i32,
                res.as_mut_ptr(),
                &mut count,
            );
            let _ = ltr::destroy_matmul_pref(pref);
            if s != lts::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                println!("heuristic: {s:?}");
                return Vec::new();
            }
            res.set_len(count.clamp(0, want as i32) as usize);
        }
        res.iter()
            .filter(|r| r.state == lts::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .collect()
    }
}

/// Sets a matmul descriptor attribute from a value of its documented type.
fn set_desc<T>(
    desc: lts::cublasLtMatmulDesc_t,
    attr: lts::cublasLtMatmulDescAttributes_t,
    v: &T,
    what: &str,
) -> R<()> {
    // SAFETY: `v` is a live value of the size passed; cuBLASLt copies it.
    unsafe {
        ltr::set_matmul_desc_attribute(
            desc,
            attr,
            v as *const T as *const c_void,
            std::mem::size_of::<T>(),
        )
    }
    .map_err(|e| format!("{what}: {e:?}"))
}

/// A config attribute in its documented width (cuBLASLt refuses any other size).
fn cfg_get(algo: &lts::cublasLtMatmulAlgo_t, a: lts::cublasLtMatmulAlgoConfigAttributes_t) -> u32 {
    use lts::cublasLtMatmulAlgoConfigAttributes_t as C;
    let size = match a {
        C::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID | C::CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID => 2,
        _ => 4,
    };
    let mut v = 0u32;
    let mut w = 0usize;
    // SAFETY: a 4-byte buffer, told `size` <= 4.
    unsafe {
        lts::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            a,
            &mut v as *mut u32 as *mut c_void,
            size,
            &mut w,
        );
    }
    v
}

/// Sets a config attribute in its own width (u16 for cluster and inner shape ids, u32 else).
fn cfg_set(
    algo: &mut lts::cublasLtMatmulAlgo_t,
    a: lts::cublasLtMatmulAlgoConfigAttributes_t,
    v: u32,
) -> bool {
    use lts::cublasLtMatmulAlgoConfigAttributes_t as C;
    // SAFETY: a buffer of the attribute's documented width.
    unsafe {
        let s = match a {
            C::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID | C::CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID => {
                let x = v as u16;
                lts::cublasLtMatmulAlgoConfigSetAttribute(
                    algo,
                    a,
                    &x as *const u16 as *const c_void,
                    2,
                )
            }
            _ => lts::cublasLtMatmulAlgoConfigSetAttribute(
                algo,
                a,
                &v as *const u32 as *const c_void,
                4,
            ),
        };
        s == lts::cublasStatus_t::CUBLAS_STATUS_SUCCESS
    }
}

fn cap_list(
    algo: &lts::cublasLtMatmulAlgo_t,
    a: lts::cublasLtMatmulAlgoCapAttributes_t,
) -> Vec<u32> {
    let mut buf = vec![0u32; 1024];
    let mut w = 0usize;
    // SAFETY: the buffer holds 4096 bytes, as told.
    let s = unsafe {
        lts::cublasLtMatmulAlgoCapGetAttribute(
            algo,
            a,
            buf.as_mut_ptr() as *mut c_void,
            4096,
            &mut w,
        )
    };
    if s != lts::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Vec::new();
    }
    buf.truncate((w / 4).min(1024));
    buf
}

fn cap_u32(algo: &lts::cublasLtMatmulAlgo_t, a: lts::cublasLtMatmulAlgoCapAttributes_t) -> u32 {
    let v = cap_list(algo, a);
    v.first().copied().unwrap_or(0)
}

fn describe(algo: &lts::cublasLtMatmulAlgo_t) -> String {
    use lts::cublasLtMatmulAlgoConfigAttributes_t as C;
    format!(
        "id={} tile={} stages={} cluster={} splitk={} red={} swz={} opt={} inner={}",
        cfg_get(algo, C::CUBLASLT_ALGO_CONFIG_ID) as i32,
        cfg_get(algo, C::CUBLASLT_ALGO_CONFIG_TILE_ID),
        cfg_get(algo, C::CUBLASLT_ALGO_CONFIG_STAGES_ID),
        cfg_get(algo, C::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
        cfg_get(algo, C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
        cfg_get(algo, C::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
        cfg_get(algo, C::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
        cfg_get(algo, C::CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
        cfg_get(algo, C::CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
    )
}

fn search(stream: &Arc<CudaStream>, h: lts::cublasLtHandle_t, s: &Shape, budget_s: f64) -> R<()> {
    use lts::cublasLtMatmulAlgoConfigAttributes_t as C;
    let p = Problem::new(h, s)?;
    let heur = p.heuristic(32);
    let runs = (2_000_000_000 / (s.m * s.n * s.k)).clamp(4, 40);
    let tag = format!("{}/{}", s.group, s.name);
    println!(
        "== {tag} m={} n={} k={} runs={runs} weight copies={}",
        s.m,
        s.n,
        s.k,
        p.w.len()
    );

    let mut heur_t = Vec::new();
    for (i, a) in heur.iter().enumerate() {
        let t = p.time(stream, a, runs);
        println!(
            "{tag} heur #{i:<2} {:>9} us  {}",
            t.map_or("fail".into(), |t| format!("{t:.2}")),
            describe(a)
        );
        heur_t.push(t.unwrap_or(f32::MAX));
    }
    // the tuner: the first 8 picks, 5 eager runs each, the fastest
    let tuner = (0..heur.len().min(8))
        .filter_map(|i| p.time_eager(stream, &heur[i]).map(|t| (t, i)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, i)| i);

    let t0 = Instant::now();
    let mut ids = vec![0i32; 512];
    let mut nid = 0i32;
    let f16 = lts::cudaDataType_t::CUDA_R_16F;
    let (ct, sc) = (
        lts::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        lts::cudaDataType_t::CUDA_R_32F,
    );
    // SAFETY: `ids` holds 512 entries, as told.
    st(
        unsafe {
            lts::cublasLtMatmulAlgoGetIds(
                h,
                ct,
                sc,
                f16,
                f16,
                f16,
                f16,
                512,
                ids.as_mut_ptr(),
                &mut nid,
            )
        },
        "AlgoGetIds",
    )?;
    ids.truncate(nid.max(0) as usize);
    // the heuristic's algorithm ids first: the listing stops at 40 % of the budget
    let mut first: Vec<i32> = heur
        .iter()
        .map(|a| cfg_get(a, C::CUBLASLT_ALGO_CONFIG_ID) as i32)
        .collect();
    first.dedup();
    ids.sort_by_key(|id| first.iter().position(|f| f == id).unwrap_or(usize::MAX));
    let mut valid: Vec<(f32, lts::cublasLtMatmulAlgo_t)> = Vec::new();
    let mut checks = 0usize;
    for &id in &ids {
        if t0.elapsed().as_secs_f64() > budget_s * 0.4 {
            println!("{tag}: listing stopped at id {id} (time)");
            break;
        }
        // SAFETY: a zeroed algorithm struct for the call to fill.
        let mut base: lts::cublasLtMatmulAlgo_t = unsafe { std::mem::zeroed() };
        if st(
            unsafe { lts::cublasLtMatmulAlgoInit(h, ct, sc, f16, f16, f16, f16, id, &mut base) },
            "init",
        )
        .is_err()
        {
            continue;
        }
        let mut tiles = cap_list(
            &base,
            lts::cublasLtMatmulAlgoCapAttributes_t::CUBLASLT_ALGO_CAP_TILE_IDS,
        );
        if tiles.is_empty() {
            tiles.push(0);
        }
        let mut stages = cap_list(
            &base,
            lts::cublasLtMatmulAlgoCapAttributes_t::CUBLASLT_ALGO_CAP_STAGES_IDS,
        );
        stages.insert(0, 0);
        for &tile in &tiles {
            for &cl in CLUSTERS {
                for &sg in &stages {
                    let mut a = base;
                    if !cfg_set(&mut a, C::CUBLASLT_ALGO_CONFIG_TILE_ID, tile)
                        || !cfg_set(&mut a, C::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cl as u32)
                        || !cfg_set(&mut a, C::CUBLASLT_ALGO_CONFIG_STAGES_ID, sg)
                    {
                        continue;
                    }
                    checks += 1;
                    if let Some(w) = p.check(&a) {
                        valid.push((w, a));
                        break; // the first stage count accepted; the rest in the refinement
                    }
                }
            }
        }
    }
    println!(
        "{tag}: {} algorithm ids, {checks} checks, {} accepted (id, tile, cluster) forms, {:.1} s to list",
        ids.len(),
        valid.len(),
        t0.elapsed().as_secs_f64()
    );
    // fuller last waves first: the forms most likely to beat the heuristic's
    let fill = |w: f32| if w <= 0.0 { 0.0 } else { w / w.ceil() };
    valid.sort_by(|a, b| fill(b.0).total_cmp(&fill(a.0)));
    let mut timed: Vec<(f32, lts::cublasLtMatmulAlgo_t)> = Vec::new();
    for (w, a) in &valid {
        if t0.elapsed().as_secs_f64() > budget_s * 0.7 {
            break;
        }
        if let Some(t) = p.time(stream, a, runs) {
            println!("{tag} all  {t:>9.2} us  waves={w:.2}  {}", describe(a));
            timed.push((t, *a));
        }
    }
    println!("{tag}: timed {} of {}", timed.len(), valid.len());
    timed.sort_by(|a, b| a.0.total_cmp(&b.0));
    // refine the fastest few: every stage count, swizzle and custom option
    let mut refined = timed.clone();
    for (_, a0) in timed.iter().take(6) {
        let stages = cap_list(
            a0,
            lts::cublasLtMatmulAlgoCapAttributes_t::CUBLASLT_ALGO_CAP_STAGES_IDS,
        );
        let swz = cap_u32(
            a0,
            lts::cublasLtMatmulAlgoCapAttributes_t::CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT,
        );
        let opts = cap_u32(
            a0,
            lts::cublasLtMatmulAlgoCapAttributes_t::CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX,
        )
        .min(3);
        for &sg in &stages {
            for sw in 0..=swz.min(1) {
                for op in 0..=opts {
                    if t0.elapsed().as_secs_f64() > budget_s {
                        break;
                    }
                    let mut a = *a0;
                    if !cfg_set(&mut a, C::CUBLASLT_ALGO_CONFIG_STAGES_ID, sg)
                        || !cfg_set(&mut a, C::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, sw)
                        || !cfg_set(&mut a, C::CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, op)
                        || p.check(&a).is_none()
                    {
                        continue;
                    }
                    if let Some(t) = p.time(stream, &a, runs) {
                        println!("{tag} ref  {t:>9.2} us  {}", describe(&a));
                        refined.push((t, a));
                    }
                }
            }
        }
    }
    refined.sort_by(|a, b| a.0.total_cmp(&b.0));
    // confirmation: the tuner's pick, the heuristic's best and the search's best, alternating
    let mut cands: Vec<(&str, lts::cublasLtMatmulAlgo_t)> = Vec::new();
    if let Some(i) = tuner {
        cands.push(("tuner", heur[i]));
    }
    if let Some(i) = (0..heur_t.len()).min_by(|&a, &b| heur_t[a].total_cmp(&heur_t[b])) {
        cands.push(("heur-best", heur[i]));
    }
    for (_, a) in refined.iter().take(3) {
        cands.push(("search", *a));
    }
    let mut sums = vec![Vec::new(); cands.len()];
    for _ in 0..3 {
        for (j, (_, a)) in cands.iter().enumerate() {
            if let Some(t) = p.time(stream, a, runs) {
                sums[j].push(t);
            }
        }
    }
    for (j, (what, a)) in cands.iter().enumerate() {
        let v = &sums[j];
        let best = v.iter().copied().fold(f32::MAX, f32::min);
        let worst = v.iter().copied().fold(0f32, f32::max);
        println!(
            "SUMMARY {tag} {what:<9} {best:>9.2} .. {worst:>9.2} us  {}",
            describe(a)
        );
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let budget: f64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(20.0);
    let groups: Vec<&str> = args.iter().skip(1).map(|s| s.as_str()).collect();
    let run = || -> R<()> {
        let ctx = CudaContext::new(0).map_err(|e| format!("context: {e:?}"))?;
        ctx.bind_to_thread().map_err(|e| format!("bind: {e:?}"))?;
        let stream = ctx.new_stream().map_err(|e| format!("stream: {e:?}"))?;
        let h = ltr::create_handle().map_err(|e| format!("cublasLtCreate: {e:?}"))?;
        for s in SHAPES {
            if !groups.is_empty() && !groups.contains(&s.group) {
                continue;
            }
            if let Err(e) = search(&stream, h, s, budget) {
                println!("{}/{}: {e}", s.group, s.name);
            }
        }
        Ok(())
    };
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lt_search: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
