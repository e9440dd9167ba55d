//! GigaAM on the CUDA home: the f16 and q8 lanes against the CPU f32 lane on the parity fixtures
//! (tiny v3 CTC, v3 RNNT and v1 CTC checkpoints, crates/stapes-models/tests/fixtures/gigaam),
//! under the tolerance table's `gigaam` family rows, and a published-shape v3 model's encoder
//! finite and within the q8 bar of f16; a planted fault fails the q8 bar; the encoder chain's
//! replays bit-identical to its eager passes; a padded batch of clips within the f16 bar of
//! each clip alone.
//! Without a CUDA device every test prints `SKIPPED (no CUDA device): <name>` and returns.

use serde_json::Value;
use stapes_core::tensor::rel_l2;
use stapes_core::tolerance::{family_bar, IdsRule};
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_cuda::CudaBackend;
use stapes_models::gigaam::{load, weights::synthetic_checkpoint, Gigaam, GigaamConfig};
use std::collections::BTreeMap;
use std::path::PathBuf;

const MODELS: [&str; 3] = ["v3_ctc", "v3_rnnt", "v1_ctc"];
const CLIPS: [&str; 3] = ["jfk", "beckett", "lv0880"];

mod family_common;
use family_common::gpu;

fn fixtures() -> PathBuf {
    family_common::dir("gigaam")
}

fn inputs() -> BTreeMap<String, HostTensor> {
    family_common::tensors(&fixtures(), "inputs.safetensors")
}

fn expected() -> Value {
    family_common::expected(&fixtures())
}

fn model<B: Backend>(b: B, name: &str, lane: Lane) -> Gigaam<B> {
    Gigaam::new(b, &fixtures().join(format!("{name}.ckpt")), lane).expect("model loads")
}

#[test]
fn gpu_lanes_follow_the_gigaam_family_rows() {
    let Some(_g) = gpu("gpu_lanes_follow_the_gigaam_family_rows") else {
        return;
    };
    let exp = expected();
    let feats = inputs();
    for name in MODELS {
        let e = &exp["models"][name];
        let front = e["front_end"].as_str().unwrap();
        let cpu = model(CpuBackend::new(0).unwrap(), name, Lane::F32);
        for lane in [Lane::F16, Lane::Q8] {
            let row = family_bar("gigaam", lane, "cuda").expect("gigaam row");
            let m = model(CudaBackend::new(0).expect("cuda opens"), name, lane);
            for clip in CLIPS {
                let f = &feats[&format!("features.{front}.{clip}")];
                let want_enc = cpu.encode_host(f).unwrap();
                let want = cpu.backend().download(&want_enc).unwrap();
                let got_enc = m.encode_host(f).unwrap();
                let got = m.backend().download(&got_enc).unwrap();
                let err = rel_l2(&got.data, &want.data);
                eprintln!("{name} {clip} {lane}: encoder rel L2 {err:.2e}");
                assert!(
                    err <= row.encoder_rel_l2,
                    "{name} {clip} {lane}: encoder rel L2 {err:.2e} > {}",
                    row.encoder_rel_l2
                );
                let ids = m.greedy(&got_enc).unwrap().ids();
                let r = &e["results"][clip];
                let want_ids: Vec<u32> = r["ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as u32)
                    .collect();
                match row.ids {
                    IdsRule::Identical => assert_eq!(ids, want_ids, "{name} {clip} {lane}"),
                    IdsRule::UntilMarginBelow { factor } => {
                        // ids are compared up to the first decision whose f32 margin is below
                        // factor × the emulated q8 logit error (one margin per CTC frame or per
                        // transducer step, in order; the emitted ids before it must agree)
                        let bound = factor * e["lane_logit_error"]["q8"].as_f64().unwrap() as f32;
                        let margins: Vec<f32> = r["margins"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|v| v.as_f64().unwrap() as f32)
                            .collect();
                        let safe = margins
                            .iter()
                            .position(|&m| m < bound)
                            .unwrap_or(margins.len());
                        let frames: Vec<usize> = r["frames"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|v| v.as_u64().unwrap() as usize)
                            .collect();
                        // CTC margins are per frame: the ids emitted before frame `safe`;
                        // transducer margins are per step: the non-blank steps before `safe`
                        let keep = match r["steps"].as_array() {
                            None => frames.iter().take_while(|&&f| f < safe).count(),
                            Some(steps) => {
                                let blank = e["blank_id"].as_u64().unwrap();
                                steps[..safe.min(steps.len())]
                                    .iter()
                                    .filter(|s| s[0].as_u64() != Some(blank))
                                    .count()
                            }
                        };
                        assert_eq!(
                            &ids[..keep.min(ids.len())],
                            &want_ids[..keep],
                            "{name} {clip} {lane}: ids before the first narrow margin"
                        );
                    }
                    IdsRule::SameText => {
                        panic!("{lane}: the fixtures' margins judge ids, not text")
                    }
                }
            }
        }
    }
}

/// The q8 bar can fail: with one weight block zeroed (layer 1's attention output projection of
/// the v3 CTC fixture) the GPU's q8 encoder lands above it against the clean CPU f32 model.
#[test]
fn a_planted_fault_fails_the_q8_bar_on_the_gpu() {
    let Some(_g) = gpu("a_planted_fault_fails_the_q8_bar_on_the_gpu") else {
        return;
    };
    let name = "v3_ctc";
    let front = expected()["models"][name]["front_end"]
        .as_str()
        .unwrap()
        .to_string();
    let feats = inputs();
    let cpu = model(CpuBackend::new(0).unwrap(), name, Lane::F32);
    let mut ck = load(&fixtures().join(format!("{name}.ckpt"))).expect("loads");
    ck.tensors
        .get_mut("encoder.layers.1.self_attn.linear_out.weight")
        .expect("layer 1 linear_out")
        .data
        .fill(0.0);
    let faulty =
        Gigaam::from_checkpoint(CudaBackend::new(0).expect("cuda"), &ck, Lane::Q8).unwrap();
    let bar = family_bar("gigaam", Lane::Q8, "cuda")
        .unwrap()
        .encoder_rel_l2;
    let worst = CLIPS
        .iter()
        .map(|clip| {
            let f = &feats[&format!("features.{front}.{clip}")];
            let want = cpu
                .backend()
                .download(&cpu.encode_host(f).unwrap())
                .unwrap();
            let got = faulty
                .backend()
                .download(&faulty.encode_host(f).unwrap())
                .unwrap();
            rel_l2(&got.data, &want.data)
        })
        .fold(0f32, f32::max);
    eprintln!("q8 with a zeroed layer-1 linear_out: worst rel L2 {worst:.2e} (bar {bar})");
    assert!(
        worst > bar,
        "a zeroed linear_out stayed under the q8 bar: {worst:.2e}"
    );
}

/// The published v3 shape (16 × d768, rotary, head size 48) on the GPU: the q8 lane within the
/// q8 row of the f16 lane's output, both finite.
#[test]
fn published_v3_shape_runs_on_the_gpu() {
    let Some(_g) = gpu("published_v3_shape_runs_on_the_gpu") else {
        return;
    };
    let cfg = GigaamConfig::published("gigaam-v3-ctc").expect("published");
    let ck = synthetic_checkpoint(&cfg, 7).unwrap();
    let f = HostTensor::random(vec![1100, 64], 3, 1.0);
    let run = |lane| {
        let m = Gigaam::from_checkpoint(CudaBackend::new(0).expect("cuda"), &ck, lane).unwrap();
        let e = m.encode_host(&f).unwrap();
        m.backend().download(&e).unwrap()
    };
    let (a, b) = (run(Lane::F16), run(Lane::Q8));
    assert!(a.data.iter().chain(&b.data).all(|v| v.is_finite()));
    let err = rel_l2(&b.data, &a.data);
    eprintln!("published v3: q8 vs f16 rel L2 {err:.2e}");
    assert!(
        err <= family_bar("gigaam", Lane::Q8, "cuda")
            .unwrap()
            .encoder_rel_l2
    );
}

/// The encoder as a captured chain: replays bit-identical to eager passes on new data of the
/// same length, one capture per length.
#[test]
fn graph_replay_is_bit_identical_to_eager_gigaam_encoder() {
    let Some(_g) = gpu("graph_replay_is_bit_identical_to_eager_gigaam_encoder") else {
        return;
    };
    let singles: Vec<HostTensor> = (0..4)
        .map(|i| HostTensor::random(vec![299, 64], 60 + i, 2.0))
        .collect();
    for lane in [Lane::F16, Lane::Q8] {
        std::env::set_var("STAPES_CUDA_GRAPHS", "0");
        let eager = model(CudaBackend::new(0).expect("cuda"), "v3_rnnt", lane);
        std::env::remove_var("STAPES_CUDA_GRAPHS");
        let graphed = model(CudaBackend::new(0).expect("cuda"), "v3_rnnt", lane);
        assert!(!eager.backend().graphs_enabled() && graphed.backend().graphs_enabled());
        for (i, f) in singles.iter().enumerate() {
            let a = eager.encode_host(f).unwrap();
            let a = eager.backend().download(&a).unwrap().data;
            let b = graphed.encode_host(f).unwrap();
            let b = graphed.backend().download(&b).unwrap().data;
            assert!(a == b, "{lane} call {i}: rel L2 {}", rel_l2(&b, &a));
        }
        let c = graphed.backend().counters().snapshot();
        eprintln!("{lane}: {c:?}");
        assert_eq!(
            c.graph_captures, 1,
            "{lane}: one length, one capture: {c:?}"
        );
        assert!(c.graph_replays >= 2, "{lane}: {c:?}");
    }
}

/// A padded batch on the GPU (`encode_batch`, f16 lane): the three fixture clips, the second
/// and third cut short, each clip's rows within the f16 row's bar of the CPU f32 encoder run on
/// that clip alone; the whole clip's greedy ids equal the CPU's.
#[test]
fn padded_batch_follows_the_f16_row_on_the_gpu() {
    let Some(_g) = gpu("padded_batch_follows_the_f16_row_on_the_gpu") else {
        return;
    };
    let exp = expected();
    let feats = inputs();
    let row = family_bar("gigaam", Lane::F16, "cuda").expect("gigaam row");
    for name in MODELS {
        let front = exp["models"][name]["front_end"].as_str().unwrap();
        let cpu = model(CpuBackend::new(0).unwrap(), name, Lane::F32);
        let m = model(CudaBackend::new(0).expect("cuda opens"), name, Lane::F16);
        let cut: Vec<HostTensor> = CLIPS
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let f = &feats[&format!("features.{front}.{c}")];
                let (t, mels) = (f.shape[0], f.shape[1]);
                let n = [t, t * 2 / 3 + 1, t / 3 + 2][i];
                HostTensor::new(vec![n, mels], f.data[..n * mels].to_vec()).unwrap()
            })
            .collect();
        let (enc, lens) = m.encode_batch(&cut).unwrap();
        let g = m.backend();
        for (i, f) in cut.iter().enumerate() {
            let one = g.slice(&enc, 0, i, 1).unwrap();
            let one = g.slice(&one, 1, 0, lens[i]).unwrap();
            let got = g.download(&one).unwrap();
            let want_enc = cpu.encode_host(f).unwrap();
            let want = cpu.backend().download(&want_enc).unwrap();
            let err = rel_l2(&got.data, &want.data);
            eprintln!("{name} clip {i} in a batch, f16: encoder rel L2 {err:.2e}");
            assert!(
                err <= row.encoder_rel_l2,
                "{name} clip {i} in a batch: encoder rel L2 {err:.2e} > {}",
                row.encoder_rel_l2
            );
            // the fixtures' margins are made for whole clips: the cut ones are held to the bar
            if i == 0 {
                let ids = m.greedy(&one).unwrap().ids();
                assert_eq!(ids, cpu.greedy(&want_enc).unwrap().ids(), "{name} clip {i}");
            }
        }
    }
}
