//! Programmatic dependent launch (src/pdl.rs): every kernel in `PDL_SAFE` waits
//! (`griddepcontrol.wait`) before it touches produced data (checked in its sm_90 PTX, no GPU
//! needed), and on a GPU long chains of dependent small kernels give the same bits with PDL on
//! (eager and graph replays) as with plain launches; captures record programmatic edges.

mod common;

use stapes_core::{Activation, Backend, HostTensor, Lane, LinearFusion, NormRef};
use stapes_cuda::pdl;

/// The PTX body of each `.entry` (from its name to the next entry).
fn entry_bodies(ptx: &str) -> Vec<(String, &str)> {
    let starts: Vec<usize> = ptx.match_indices(".entry ").map(|(i, _)| i).collect();
    starts
        .iter()
        .enumerate()
        .map(|(n, &s)| {
            let end = starts.get(n + 1).copied().unwrap_or(ptx.len());
            let body = &ptx[s..end];
            let name = body[".entry ".len()..]
                .split(|c: char| c == '(' || c.is_whitespace())
                .next()
                .unwrap_or("")
                .to_string();
            (name, body)
        })
        .collect()
}

/// Kernels that may read their weight before the wait (ld.global.nc streaming loads and L2
/// prefetches of the weight only: kernels/step.cu).
fn prefetches_weight(name: &str) -> bool {
    name.starts_with("step_gemv_")
}

/// Kernels whose loading thread may issue TMA copies of the weight's first ring stages before
/// the wait (kernels/i8gemm.cu `f8wg_*`: x's copies come after it; the host withholds the early
/// copies where the kernel ahead may be the weight's conversion).
fn tma_loads_weight(name: &str) -> bool {
    name.starts_with("f8wg_")
}

/// A PTX line's instruction name (`st.global.v4.u32`), past a predicate guard (`@%p1`).
fn opcode(line: &str) -> &str {
    let mut words = line.split_whitespace();
    match words.next() {
        Some(w) if w.starts_with('@') => words.next().unwrap_or(""),
        Some(w) => w,
        None => "",
    }
}

#[test]
fn pdl_kernels_wait_before_touching_memory() {
    if let Err(e) = stapes_cuda::loader::ensure_nvrtc() {
        eprintln!("SKIPPED (no libnvrtc): pdl_kernels_wait_before_touching_memory: {e}");
        return;
    }
    let mut seen = 0;
    for f in stapes_cuda::kernels::FILES {
        let ptx90 = stapes_cuda::kernels::compile(f, "compute_90").expect("compute_90 PTX");
        for (name, body) in entry_bodies(&ptx90) {
            if !pdl::is_safe(&name) {
                continue;
            }
            seen += 1;
            let wait = body
                .find("griddepcontrol.wait")
                .unwrap_or_else(|| panic!("{}.cu: {name} is PDL-safe but never waits", f.name));
            let before = &body[..wait];
            for op in ["st.global", "atom.", "red.", "cp.async", "st.async"] {
                // by the instruction's name, not a substring of the line (`st.shared` holds
                // `red.`; a shared-memory store before the wait touches nothing of another grid)
                let early = before
                    .lines()
                    .filter(|l| opcode(l).starts_with(op))
                    .find(|l| {
                        !(tma_loads_weight(&name) && l.contains("cp.async.bulk.tensor.2d.shared"))
                    });
                assert!(
                    early.is_none(),
                    "{}.cu: {name} has `{op}` before its griddepcontrol.wait: {early:?}",
                    f.name
                );
            }
            for line in before.lines().filter(|l| l.contains("ld.global")) {
                assert!(
                    prefetches_weight(&name) && line.contains("ld.global.nc"),
                    "{}.cu: {name} reads global memory before its wait: {line}",
                    f.name
                );
            }
        }
        // below sm_90 the helpers compile to nothing
        let ptx80 = stapes_cuda::kernels::compile(f, "compute_80").expect("compute_80 PTX");
        assert!(
            !ptx80.contains("griddepcontrol"),
            "{}.cu: griddepcontrol in compute_80 PTX",
            f.name
        );
    }
    assert_eq!(
        seen,
        pdl::PDL_SAFE.len(),
        "every PDL_SAFE name is a kernel entry"
    );
}

/// Dependent small ops, each reading the previous one's output (a read before the previous
/// kernel finished would change the bits): layer norm, f16 step GEMVs with residual and GELU
/// (the weight-prefetching kernels), f16 and q8 small-M linears, affine, add, softmax.
fn chain(
    g: &stapes_cuda::CudaBackend,
    x: &stapes_cuda::CudaTensor,
    w: &[stapes_cuda::CudaWeight],
    q: &[stapes_cuda::CudaWeight],
    gamma: &stapes_cuda::CudaTensor,
    rounds: usize,
) -> stapes_core::Result<stapes_cuda::CudaTensor> {
    let mut h = x.clone();
    for r in 0..rounds {
        let n = g.layer_norm(&h, gamma, None, 1e-5)?;
        let f = LinearFusion {
            norm: Some(NormRef {
                gamma,
                beta: None,
                eps: 1e-5,
            }),
            act: Some(Activation::Gelu),
            residual: Some(&n),
            ..Default::default()
        };
        let y = g.norm_linear(&h, &w[r % w.len()], &f)?;
        // small-M linears: gemv_f16 and gemv_i8 (weight prefetch before the wait)
        let y = g.add(&y, &g.linear(&h, &w[(r + 1) % w.len()], None)?)?;
        let y = g.add(&y, &g.linear(&n, &q[r % q.len()], None)?)?;
        let y = g.affine(&y, 0.5, 0.25)?;
        h = g.add(&y, &n)?;
        if r % 4 == 3 {
            h = g.add(&g.softmax(&h)?, &h)?;
        }
    }
    Ok(h)
}

/// Bitwise equality, reported as a count and the first difference (not two long vectors).
fn same(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| got[i].to_bits() != want[i].to_bits())
        .collect();
    if let Some(&i) = bad.first() {
        panic!(
            "{what}: {} of {} values differ; first at {i}: {} vs {}",
            bad.len(),
            got.len(),
            got[i],
            want[i]
        );
    }
}

#[test]
fn pdl_chains_match_plain_launches_bitwise() {
    let (g, _serial) = require_gpu!("pdl_chains_match_plain_launches_bitwise");
    let (rows, d, rounds) = (2, 512, 48);
    let x = HostTensor::random(vec![rows, 1, d], 11, 1.0);
    let gamma = g
        .upload(&HostTensor::random(vec![d], 12, 1.0))
        .expect("gamma");
    let w: Vec<_> = (0..3)
        .map(|i| {
            g.weight(
                &HostTensor::random(vec![d, d], 20 + i, 1.0 / (d as f32).sqrt()),
                Lane::F16,
            )
            .expect("weight")
        })
        .collect();
    let q: Vec<_> = (0..2)
        .map(|i| {
            g.weight(
                &HostTensor::random(vec![d, d], 30 + i, 1.0 / (d as f32).sqrt()),
                Lane::Q8,
            )
            .expect("q8 weight")
        })
        .collect();
    let run = |on: bool, key: Option<&str>| {
        pdl::set_enabled(on);
        let input = g.upload(&x).expect("upload");
        let out = match key {
            Some(k) => g
                .run_graph(k, |b| Ok(vec![chain(b, &input, &w, &q, &gamma, rounds)?]))
                .expect("graph")
                .remove(0),
            None => chain(g, &input, &w, &q, &gamma, rounds).expect("eager"),
        };
        g.download(&out).expect("download").data
    };
    let plain = run(false, None);
    assert!(plain.iter().all(|v| v.is_finite()), "plain run not finite");
    for i in 0..3 {
        same(
            &run(true, None),
            &plain,
            &format!("eager with PDL, pass {i}"),
        );
    }
    if g.graphs_enabled() {
        let key = "test-pdl-chain";
        same(&run(true, Some(key)), &plain, "graph capture with PDL");
        for i in 0..3 {
            pdl::set_enabled(true);
            let out = g.replay(key).expect("replay");
            same(
                &g.download(&out[0]).expect("download").data,
                &plain,
                &format!("replay {i} with PDL"),
            );
        }
        match g.graph_edges(key) {
            Ok((edges, programmatic)) => {
                eprintln!(
                    "graph: {edges} edges, {programmatic} programmatic (PDL active: {})",
                    g.pdl_active()
                );
                if g.pdl_active() {
                    assert!(programmatic > 0, "no programmatic edge in a PDL capture");
                } else {
                    assert_eq!(programmatic, 0);
                }
            }
            Err(e) => eprintln!("graph edges unreadable here: {e}"),
        }
        g.drop_graph(key);
        // replay time of the same chain captured without and with PDL (information only)
        let input = g.upload(&x).expect("upload");
        for on in [false, true, false, true] {
            pdl::set_enabled(on);
            let k = format!("test-pdl-time-{on}");
            g.run_graph(&k, |b| Ok(vec![chain(b, &input, &w, &q, &gamma, rounds)?]))
                .expect("capture");
            g.synchronize().expect("sync");
            let reps = 50;
            let t = std::time::Instant::now();
            for _ in 0..reps {
                g.replay(&k).expect("replay");
            }
            g.synchronize().expect("sync");
            let us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
            let nodes = g.graph_edges(&k).map(|e| e.0 + 1).unwrap_or(0);
            eprintln!("time: PDL {on}: {us:.1} us per replay (~{nodes} nodes)");
            g.drop_graph(&k);
        }
    }
    pdl::set_enabled(false);
    same(&run(false, None), &plain, "plain again");
    eprintln!("ok   {rounds} rounds, PDL active: {}", g.pdl_active());
}

/// One FastConformer clip's block in an encoder chain (140 rows, d = 1024, heads of 128, q8 on
/// FP8): the norm feeding q|k|v, the few-row GEMM, the rel-attention writing e4m3 for its output
/// projection, the split projection with its norms, fc1 with SiLU and the split fc2. Under
/// `PdlMode::Linked` (our PDL-safe kernels chained inside the chain, the few-row GEMM streaming its
/// weight before its wait) it gives the bits of plain launches, eager and replayed, and its
/// capture holds programmatic edges.
#[test]
fn fastconformer_block_under_linked_pdl_matches_plain_launches_bitwise() {
    let name = "fastconformer_block_under_linked_pdl_matches_plain_launches_bitwise";
    let (g, _serial) = require_gpu!(name);
    if g.device_info().1 != "compute_90" || !g.fp8_capable() {
        eprintln!("SKIPPED (the few-row GEMM and PDL in chains are sm_90's): {name}");
        return;
    }
    let (t, d, heads) = (140, 1024, 8);
    let up = |h: &HostTensor| g.upload(h).expect("upload");
    let rnd = |shape: &[usize], seed: u64, s: f32| HostTensor::random(shape.to_vec(), seed, s);
    let q8 = |n: usize, k: usize, seed: u64| {
        g.weight(&rnd(&[n, k], seed, 1.0 / (k as f32).sqrt()), Lane::Q8)
            .expect("q8 weight")
    };
    let (wqkv, wo, w1, w2) = (q8(3 * d, d, 41), q8(d, d, 42), q8(d, d, 43), q8(d, d, 44));
    let x = up(&rnd(&[1, t, d], 40, 1.0));
    let pos = up(&rnd(&[1, 2 * t - 1, d], 45, 1.0));
    let (bu, bv) = (up(&rnd(&[d], 46, 0.3)), up(&rnd(&[d], 47, 0.3)));
    let (ga, be) = (up(&rnd(&[d], 48, 1.0)), up(&rnd(&[d], 49, 0.5)));
    let (bo, b1, b2) = (
        up(&rnd(&[d], 50, 0.5)),
        up(&rnd(&[d], 51, 0.5)),
        up(&rnd(&[d], 52, 0.5)),
    );
    let p = stapes_core::backend::RelAttnParams {
        heads,
        scale: 1.0 / ((d / heads) as f32).sqrt(),
        query_block: t,
    };
    let runs0 = g.f8wg_runs();
    let run = |mode: pdl::PdlMode, key: &str| -> Vec<Vec<f32>> {
        pdl::set_mode(mode);
        let no_count = || [0u64; 0];
        common::chain_eager_replay(g, key, &no_count, &mut |b| {
            let x16 = b.affine(&x, 1.0, 0.0)?;
            let h = b.layer_norm_feeding(&x16, &ga, Some(&be), 1e-5, &wqkv)?;
            let qkv = b.linear(&h, &wqkv, None)?;
            let a = b.rel_attention_feeding(&qkv, &pos, &bu, &bv, None, &p, &wo)?;
            let (x1, mut z) = b.linear_add_norms(
                &a,
                &wo,
                Some(&bo),
                &x16,
                &[(&ga, Some(&be))],
                1e-5,
                Some(&w1),
            )?;
            let z = z
                .pop()
                .ok_or_else(|| stapes_core::Error::shape("test", "no norm"))?;
            let f = b.linear_act_feeding(&z, &w1, Some(&b1), Activation::Silu, &w2)?;
            let (y, _) =
                b.linear_add_norms(&f, &w2, Some(&b2), &x1, &[(&ga, Some(&be))], 1e-5, None)?;
            Ok(vec![a, x1, y])
        })
        .0
    };
    let plain = run(pdl::PdlMode::Off, "test-encoder/pdl-block-off");
    let linked = run(pdl::PdlMode::Linked, "test-encoder/pdl-block-linked");
    pdl::set_mode(pdl::DEFAULT_MODE);
    assert!(g.f8wg_runs() > runs0, "the few-row GEMM did not run");
    for (j, (l, o)) in linked.iter().zip(&plain).enumerate() {
        assert!(o.iter().all(|v| v.is_finite()), "output {j} not finite");
        same(
            l,
            o,
            &format!("output {j}, linked PDL against plain launches"),
        );
    }
    for (key, want) in [("off", false), ("linked", true)] {
        match g.graph_edges(&format!("test-encoder/pdl-block-{key}|act16")) {
            Ok((edges, programmatic)) => {
                eprintln!("{key}: {edges} edges, {programmatic} programmatic");
                assert_eq!(programmatic > 0, want, "{key}: programmatic edges");
            }
            Err(e) => eprintln!("graph edges unreadable here: {e}"),
        }
    }
}
