//! Canary (FastConformer encoder + Transformer decoder) on the CUDA home, against the CPU f32
//! lane and transformers' expected ids on the Canary fixture (three real clips): f16 greedy and
//! beam-4 ids identical; q8 under the family bar of `stapes_core::tolerance::FAMILY`; the
//! encoder chain replayed as a graph equals the eager run bitwise; the decoder's preallocated
//! KV cache equals re-running the prefix.
//! Without a CUDA device every test prints `SKIPPED (no CUDA device): <name>` and returns.
//! Fixtures: `crates/stapes-models/tests/fixtures/fastconformer` (found from the build tree, the
//! working directory, or `STAPES_FC_FIXTURES`).

use serde_json::Value;
use stapes_core::tensor::rel_l2;
use stapes_core::tolerance::{family_bar, IdsRule};
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_cuda::CudaBackend;
use stapes_models::fastconformer::Canary;

mod fc_common;
use fc_common::{fixtures, gpu, read, CLIPS};

fn expected() -> Value {
    let path = fixtures().join("expected_canary.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    serde_json::from_str(&text).expect("expected_canary.json parses")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an id list")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

fn cuda() -> CudaBackend {
    CudaBackend::new(0).expect("cuda opens")
}

fn canary<B: Backend>(backend: B, lane: Lane) -> Canary<B> {
    Canary::new(backend, &fixtures().join("canary"), lane).expect("canary fixture loads")
}

/// The largest logit change of the CUDA home's q8 arithmetic on the Canary fixture, emulated on
/// its weights along the f32 decisions (`expected_canary_lanes.json`, written by
/// `tools/reference/fastconformer_canary.py lanes`).
fn q8_logit_error() -> f32 {
    let path = fixtures().join("expected_canary_lanes.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("lanes json"))
        .expect("expected_canary_lanes.json parses");
    v["lane_logit_error"]["q8"]
        .as_f64()
        .expect("lane_logit_error.q8") as f32
}

/// f16: encoder within the family bar, greedy and beam-4 ids identical to CPU f32 and to
/// transformers'. q8: encoder within its bar, greedy ids identical until the first step whose
/// CPU f32 margin is under the family rule's threshold. Every clip is checked before failing.
#[test]
fn canary_f16_ids_equal_cpu_f32_and_transformers() {
    let Some(_g) = gpu("canary_f16_ids_equal_cpu_f32_and_transformers") else {
        return;
    };
    let exp = expected();
    let prompt = ids(&exp["prompt"]);
    let max_new = exp["max_new_tokens"].as_u64().expect("max_new_tokens") as usize;
    let inputs = read("inputs.safetensors");
    let cpu = canary(CpuBackend::new(2).expect("cpu"), Lane::F32);
    let mut failures = Vec::new();
    for lane in [Lane::F16, Lane::Q8] {
        let bar = family_bar("fastconformer", lane, "cuda").expect("family bar");
        let m = canary(cuda(), lane);
        for clip in CLIPS {
            let f = &inputs[&format!("features.{clip}")];
            let enc_cpu = cpu.encode_host(f).expect("cpu encode");
            let (want, margins) = cpu
                .generate_with_margins(&enc_cpu, &prompt, max_new)
                .expect("cpu greedy");
            let want_beam = cpu
                .generate_beam(&enc_cpu, &prompt, max_new, 4, 1.0)
                .expect("cpu beam");
            let hf = ids(&exp["results"][clip]["generated"]);
            let hf_beam = ids(&exp["results"][clip]["beam4"]);
            if want != hf || want_beam != hf_beam {
                failures.push(format!("cpu f32 {clip}: ids differ from transformers"));
            }
            // twice: the first call runs eagerly, the second captures this shape bucket
            let _ = m.encode_host(f).expect("gpu encode");
            let enc = m.encode_host(f).expect("gpu encode");
            let host = m.backend().download(&enc).expect("download");
            let e = rel_l2(&host.data, &cpu.backend().download(&enc_cpu).unwrap().data);
            let got = m.generate(&enc, &prompt, max_new).expect("gpu greedy");
            let got_beam = m
                .generate_beam(&enc, &prompt, max_new, 4, 1.0)
                .expect("gpu beam");
            eprintln!(
                "{lane} canary/{clip}: encoder rel L2 vs cpu f32 {e:.2e} (bar {}); greedy {got:?} \
                 vs {want:?}; beam {got_beam:?} vs {want_beam:?}; min cpu margin {:.3}",
                bar.encoder_rel_l2,
                margins.iter().copied().fold(f32::INFINITY, f32::min)
            );
            if e > bar.encoder_rel_l2 {
                failures.push(format!("{lane} {clip}: encoder rel L2 {e}"));
            }
            match bar.ids {
                IdsRule::Identical => {
                    if got != want {
                        failures.push(format!("{lane} {clip}: greedy {got:?} vs {want:?}"));
                    }
                    if got_beam != want_beam {
                        failures.push(format!("{lane} {clip}: beam {got_beam:?} vs {want_beam:?}"));
                    }
                }
                IdsRule::UntilMarginBelow { factor } => {
                    let floor = factor * q8_logit_error();
                    let safe = margins.iter().take_while(|&&m| m >= floor).count();
                    let same = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
                    eprintln!(
                        "  {lane} {clip}: {same} leading ids equal; the first {safe} steps have \
                         cpu margins ≥ {floor:.3}"
                    );
                    if same < safe.min(want.len()) {
                        failures.push(format!(
                            "{lane} {clip}: step {same} differs with a cpu f32 margin of {}",
                            margins[same]
                        ));
                    }
                }
                IdsRule::SameText => panic!("{lane}: the fixtures' margins judge ids, not text"),
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The encoder as a replayed graph equals the eager run bitwise (f16 and q8), on new data per
/// call; the preallocated decoder cache equals re-running the whole prefix on the device.
#[test]
fn canary_graph_equals_eager_and_cache_equals_prefix_on_the_gpu() {
    let Some(_g) = gpu("canary_graph_equals_eager_and_cache_equals_prefix_on_the_gpu") else {
        return;
    };
    let exp = expected();
    let prompt = ids(&exp["prompt"]);
    let inputs = read("inputs.safetensors");
    let f = &inputs["features.jfk"];
    let singles: Vec<HostTensor> = (0..4)
        .map(|i| HostTensor::random(f.shape.clone(), 70 + i, 2.0))
        .collect();
    for lane in [Lane::F16, Lane::Q8] {
        std::env::set_var("STAPES_CUDA_GRAPHS", "0");
        let eager = canary(cuda(), lane);
        std::env::remove_var("STAPES_CUDA_GRAPHS");
        let graphed = canary(cuda(), lane);
        assert!(!eager.backend().graphs_enabled() && graphed.backend().graphs_enabled());
        for (i, x) in singles.iter().enumerate() {
            let a = eager.backend().download(&eager.encode_host(x).unwrap());
            let b = graphed.backend().download(&graphed.encode_host(x).unwrap());
            let (a, b) = (a.unwrap().data, b.unwrap().data);
            assert!(
                a == b,
                "{lane}: call {i}: graph differs from eager (rel L2 {})",
                rel_l2(&b, &a)
            );
        }
        let c = graphed.backend().counters().snapshot();
        eprintln!("{lane}: graphed counters {c:?}");
        assert_eq!(c.graph_captures, 1, "{lane}: one shape bucket: {c:?}");
        assert!(c.graph_replays >= 2, "{lane}: replays ran: {c:?}");
        let enc = graphed.encode_host(f).unwrap();
        let cached = graphed.generate(&enc, &prompt, 12).unwrap();
        let again = graphed.generate_uncached(&enc, &prompt, 12).unwrap();
        assert_eq!(cached, again, "{lane}: cached vs re-run prefix");
    }
}

/// The decoder's step chain (ids and position in a device step tensor, the step captured once
/// per cache and replayed) gives the ids of the host-parameter steps and of CPU f32, greedy and
/// beam 4, on every clip (f16); it is what runs by default with graphs on; its logits replayed
/// from the graph equal the same chain run eagerly (graphs off) bitwise.
#[test]
fn canary_step_chain_equals_host_steps_cpu_f32_and_eager() {
    let Some(_g) = gpu("canary_step_chain_equals_host_steps_cpu_f32_and_eager") else {
        return;
    };
    let exp = expected();
    let prompt = ids(&exp["prompt"]);
    let max_new = exp["max_new_tokens"].as_u64().expect("max_new_tokens") as usize;
    let inputs = read("inputs.safetensors");
    let cpu = canary(CpuBackend::new(2).expect("cpu"), Lane::F32);
    let m = canary(cuda(), Lane::F16);
    assert!(m.device_steps(), "graphs on: the step chain is the default");
    std::env::set_var("STAPES_CUDA_GRAPHS", "0");
    let eager = canary(cuda(), Lane::F16);
    std::env::remove_var("STAPES_CUDA_GRAPHS");
    assert!(!eager.device_steps(), "graphs off: host steps by default");
    eager.set_device_steps(Some(true));
    let mut failures = Vec::new();
    for clip in CLIPS {
        let f = &inputs[&format!("features.{clip}")];
        let enc_cpu = cpu.encode_host(f).expect("cpu encode");
        let want = cpu
            .generate(&enc_cpu, &prompt, max_new)
            .expect("cpu greedy");
        let want_beam = cpu
            .generate_beam(&enc_cpu, &prompt, max_new, 4, 1.0)
            .expect("cpu beam");
        let enc = m.encode_host(f).expect("gpu encode");
        m.set_device_steps(Some(false));
        let host = m.generate(&enc, &prompt, max_new).expect("host greedy");
        let host_beam = m
            .generate_beam(&enc, &prompt, max_new, 4, 1.0)
            .expect("host beam");
        m.set_device_steps(None);
        let before = m.backend().counters().snapshot();
        let dev = m.generate(&enc, &prompt, max_new).expect("chain greedy");
        let dev_beam = m
            .generate_beam(&enc, &prompt, max_new, 4, 1.0)
            .expect("chain beam");
        // again: the chains captured above are replayed from the first step
        let dev2 = m.generate(&enc, &prompt, max_new).expect("chain greedy");
        let dev2_beam = m
            .generate_beam(&enc, &prompt, max_new, 4, 1.0)
            .expect("chain beam");
        let after = m.backend().counters().snapshot();
        eprintln!(
            "f16 canary/{clip}: chain greedy {dev:?} / host {host:?} / cpu f32 {want:?}; beam \
             {dev_beam:?} / {host_beam:?} / {want_beam:?}; captures {} replays {}",
            after.graph_captures - before.graph_captures,
            after.graph_replays - before.graph_replays
        );
        for (what, got, exp) in [
            ("chain greedy vs cpu f32", &dev, &want),
            ("chain greedy (replayed) vs cpu f32", &dev2, &want),
            ("host greedy vs cpu f32", &host, &want),
            ("chain beam vs cpu f32", &dev_beam, &want_beam),
            ("chain beam (replayed) vs cpu f32", &dev2_beam, &want_beam),
            ("host beam vs cpu f32", &host_beam, &want_beam),
        ] {
            if got != exp {
                failures.push(format!("{clip}: {what}: {got:?} vs {exp:?}"));
            }
        }
        if after.graph_replays <= before.graph_replays {
            failures.push(format!("{clip}: no step replayed: {before:?} -> {after:?}"));
        }
        // the same encoder output into the eager model
        let host_enc = m.backend().download(&enc).expect("download");
        let enc_e = eager.backend().upload(&host_enc).expect("upload");
        let (ids_g, lg) = m
            .generate_with_logits(&enc, &prompt, max_new)
            .expect("replayed logits");
        let (ids_e, le) = eager
            .generate_with_logits(&enc_e, &prompt, max_new)
            .expect("eager logits");
        if ids_g != ids_e || lg.len() != le.len() {
            failures.push(format!("{clip}: replayed ids {ids_g:?} vs eager {ids_e:?}"));
        }
        for (s, (a, b)) in lg.iter().zip(&le).enumerate() {
            if a.data != b.data {
                failures.push(format!(
                    "{clip}: step {s}: replayed logits differ from eager (rel L2 {:.2e})",
                    rel_l2(&a.data, &b.data)
                ));
            }
        }
    }
    let c = eager.backend().counters().snapshot();
    assert_eq!(c.graph_captures, 0, "graphs off captured: {c:?}");
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The fused form of the step chain (`STAPES_CANARY_FUSED_STEPS=1`: norms, biases, ReLU and
/// residuals inside the projections) gives CPU f32's ids, greedy and beam 4, on every clip
/// (f16), and its replayed logits equal the same fused chain run eagerly bitwise.
#[test]
#[ignore = "on the H200 (2026-11-30, round 4) the fused form's replayed logits differ from its eager run by ~1e-7 rel L2 (ids equal CPU f32); the fused form is off by default until that is explained"]
fn canary_fused_step_chain_equals_cpu_f32_and_eager() {
    let Some(_g) = gpu("canary_fused_step_chain_equals_cpu_f32_and_eager") else {
        return;
    };
    let exp = expected();
    let prompt = ids(&exp["prompt"]);
    let max_new = exp["max_new_tokens"].as_u64().expect("max_new_tokens") as usize;
    let inputs = read("inputs.safetensors");
    let cpu = canary(CpuBackend::new(2).expect("cpu"), Lane::F32);
    let m = canary(cuda(), Lane::F16);
    m.set_fused_steps(true);
    std::env::set_var("STAPES_CUDA_GRAPHS", "0");
    let eager = canary(cuda(), Lane::F16);
    std::env::remove_var("STAPES_CUDA_GRAPHS");
    eager.set_device_steps(Some(true));
    eager.set_fused_steps(true);
    let mut failures = Vec::new();
    for clip in CLIPS {
        let f = &inputs[&format!("features.{clip}")];
        let enc_cpu = cpu.encode_host(f).expect("cpu encode");
        let want = cpu
            .generate(&enc_cpu, &prompt, max_new)
            .expect("cpu greedy");
        let want_beam = cpu
            .generate_beam(&enc_cpu, &prompt, max_new, 4, 1.0)
            .expect("cpu beam");
        let enc = m.encode_host(f).expect("gpu encode");
        let got = m.generate(&enc, &prompt, max_new).expect("fused greedy");
        let got_beam = m
            .generate_beam(&enc, &prompt, max_new, 4, 1.0)
            .expect("fused beam");
        let host_enc = m.backend().download(&enc).expect("download");
        let enc_e = eager.backend().upload(&host_enc).expect("upload");
        let (ids_g, lg) = m
            .generate_with_logits(&enc, &prompt, max_new)
            .expect("replayed logits");
        let (ids_e, le) = eager
            .generate_with_logits(&enc_e, &prompt, max_new)
            .expect("eager logits");
        eprintln!(
            "f16 canary/{clip}: fused chain greedy {got:?} / cpu f32 {want:?}; beam {got_beam:?} \
             / {want_beam:?}"
        );
        if got != want {
            failures.push(format!("{clip}: fused greedy {got:?} vs {want:?}"));
        }
        if got_beam != want_beam {
            failures.push(format!("{clip}: fused beam {got_beam:?} vs {want_beam:?}"));
        }
        if ids_g != ids_e || lg.len() != le.len() {
            failures.push(format!("{clip}: replayed ids {ids_g:?} vs eager {ids_e:?}"));
        }
        for (s, (a, b)) in lg.iter().zip(&le).enumerate() {
            if a.data != b.data {
                failures.push(format!(
                    "{clip}: step {s}: fused replayed logits differ from eager (rel L2 {:.2e})",
                    rel_l2(&a.data, &b.data)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
