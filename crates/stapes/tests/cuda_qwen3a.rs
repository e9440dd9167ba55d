//! Qwen3-ASR on the CUDA home: the f16 and q8 lanes against the CPU f32 lane on the parity
//! fixture (a tiny transformers model, crates/stapes-models/tests/fixtures/qwen3a) under the
//! tolerance table's `qwen3a` rows: the audio tower within the row's relative L2, and the text
//! model teacher-forced along the CPU's greedy ids, choosing the same id wherever the CPU's
//! top-1/top-2 margin is more than twice the largest logit change the GPU shows at that step.
//! Without a CUDA device every test prints `SKIPPED (no CUDA device): <name>` and returns.

use serde_json::Value;
use stapes_core::tensor::rel_l2;
use stapes_core::tolerance::{family_bar, IdsRule};
use stapes_core::{Backend, DeviceTensor, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_cuda::CudaBackend;
use stapes_models::qwen3a::Qwen3Asr;
use std::collections::BTreeMap;
use std::path::PathBuf;

const CLIPS: [&str; 4] = ["jfk", "beckett", "lv0870", "short"];

mod family_common;
use family_common::gpu;

fn fixtures() -> PathBuf {
    family_common::dir("qwen3a")
}

fn inputs() -> BTreeMap<String, HostTensor> {
    family_common::tensors(&fixtures(), "inputs.safetensors")
}

fn expected() -> Value {
    family_common::expected(&fixtures())
}

fn model<B: Backend>(b: B, lane: Lane) -> Qwen3Asr<B> {
    Qwen3Asr::new(b, &fixtures().join("model"), lane).expect("model loads")
}

/// Logits `(steps + 1)` rows of the prompt around `audio` and then each of `ids` fed back.
fn forced_logits<B: Backend>(m: &Qwen3Asr<B>, audio: &B::Tensor, ids: &[u32]) -> Vec<Vec<f32>> {
    let b = m.backend();
    let text = m.text_model();
    let p = m.prompt(None).expect("prompt");
    let parts = [
        text.embed(b, &p.prefix).unwrap(),
        b.reshape(audio, audio.shape()).unwrap(),
        text.embed(b, &p.suffix).unwrap(),
    ];
    let x = b.concat(&parts.iter().collect::<Vec<_>>(), 1).unwrap();
    let n = x.shape()[1];
    let mut cache = text.cache(b, n + ids.len() + 1).unwrap();
    let mut h = text.forward(b, &x, &mut cache).unwrap();
    let mut out = Vec::new();
    for step in 0..=ids.len() {
        let rows = h.shape()[1];
        let last = b.slice(&h, 1, rows - 1, 1).unwrap();
        out.push(b.download(&text.logits(b, &last).unwrap()).unwrap().data);
        if step < ids.len() {
            h = text
                .forward(b, &text.embed(b, &[ids[step]]).unwrap(), &mut cache)
                .unwrap();
        }
    }
    out
}

fn top2(v: &[f32]) -> (u32, f32) {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
    (idx[0] as u32, v[idx[0]] - v[idx[1]])
}

#[test]
fn gpu_lanes_follow_the_qwen3a_family_rows() {
    let Some(_g) = gpu("gpu_lanes_follow_the_qwen3a_family_rows") else {
        return;
    };
    let exp = expected();
    let feats = inputs();
    let cpu = model(CpuBackend::new(0).unwrap(), Lane::F32);
    for lane in [Lane::F16, Lane::Q8] {
        let row = family_bar("qwen3a", lane, "cuda").expect("qwen3a row");
        let IdsRule::UntilMarginBelow { factor } = row.ids else {
            panic!("the qwen3a rows judge ids by margin");
        };
        let m = model(CudaBackend::new(0).expect("cuda opens"), lane);
        for clip in CLIPS {
            let f = &feats[&format!("features.{clip}")];
            let valid = exp["results"][clip]["valid_frames"].as_u64().unwrap() as usize;
            let (ct, ca) = cpu.encode(f, valid).unwrap();
            let (gt, ga) = m.encode(f, valid).unwrap();
            let (ct, gt) = (
                cpu.backend().download(&ct).unwrap(),
                m.backend().download(&gt).unwrap(),
            );
            let err = rel_l2(&gt.data, &ct.data);
            eprintln!(
                "{clip} {lane}: tower rel L2 {err:e} (bar {:e})",
                row.encoder_rel_l2
            );
            // the tower's chain: the first call runs eagerly, the second captures, the third
            // replays; all three give the same bits
            for call in 2..=3 {
                let (t, a) = m.encode(f, valid).unwrap();
                let (t, a) = (
                    m.backend().download(&t).unwrap(),
                    m.backend().download(&a).unwrap(),
                );
                assert_eq!(t.data, gt.data, "{clip} {lane}: tower of call {call}");
                let a0 = m.backend().download(&ga).unwrap();
                assert_eq!(a.data, a0.data, "{clip} {lane}: embeddings of call {call}");
            }
            assert!(
                err <= row.encoder_rel_l2,
                "{clip} {lane}: tower rel L2 {err:e}"
            );
            let ids = cpu
                .generate(&ca, &cpu.prompt(None).unwrap(), 16)
                .unwrap()
                .ids;
            let want = forced_logits(&cpu, &ca, &ids);
            let got = forced_logits(&m, &ga, &ids);
            for (step, (w, g)) in want.iter().zip(&got).enumerate() {
                let change = w
                    .iter()
                    .zip(g)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                let (best, margin) = top2(w);
                if margin > factor * change {
                    assert_eq!(
                        top2(g).0,
                        best,
                        "{clip} {lane} step {step}: margin {margin} > {factor} × change {change}"
                    );
                }
                eprintln!("{clip} {lane} step {step}: margin {margin:.3}, change {change:.4}");
            }
            // the decoder step chain (captured on its second step, replayed after) against
            // eager steps on the same GPU: the same greedy ids, also when the chain's cache
            // fills and the answer goes on eagerly
            let p = m.prompt(None).unwrap();
            m.set_step_chain(Some(false));
            let eager = m.generate(&ga, &p, 24).unwrap();
            m.set_step_chain(None);
            let chained = m.generate(&ga, &p, 24).unwrap();
            let again = m.generate(&ga, &p, 24).unwrap();
            eprintln!(
                "{clip} {lane}: {} ids eager, chained {:?}",
                eager.ids.len(),
                chained.ids == eager.ids
            );
            assert_eq!(chained.ids, eager.ids, "{clip} {lane}: step chain");
            assert_eq!(again.ids, eager.ids, "{clip} {lane}: step chain replayed");
            m.set_step_chain_rows(eager.prompt.len() + 5);
            let spilled = m.generate(&ga, &p, 24).unwrap();
            assert_eq!(spilled.ids, eager.ids, "{clip} {lane}: chain, then eager");
            m.set_step_chain_rows(stapes_models::qwen3a::STEP_CHAIN_ROWS);
        }
    }
}
