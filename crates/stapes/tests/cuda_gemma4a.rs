//! The Gemma 4 audio tower on the CUDA home: the f16 and q8 lanes against the CPU f32 lane on the
//! parity fixtures (a tower saved alone and a whole tiny Gemma 4 checkpoint,
//! crates/stapes-models/tests/fixtures/gemma4a) under the tolerance table's `gemma4a` rows,
//! tower output and text-width embeddings.
//! Without a CUDA device every test prints `SKIPPED (no CUDA device): <name>` and returns.

use serde_json::Value;
use stapes_core::tensor::rel_l2;
use stapes_core::tolerance::family_bar;
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_cuda::CudaBackend;
use stapes_models::gemma4a::Gemma4Audio;
use std::collections::BTreeMap;
use std::path::PathBuf;

const CLIPS: [&str; 4] = ["jfk", "beckett", "lv0870", "short"];

mod family_common;
use family_common::gpu;

fn fixtures() -> PathBuf {
    family_common::dir("gemma4a")
}

fn inputs() -> BTreeMap<String, HostTensor> {
    family_common::tensors(&fixtures(), "inputs.safetensors")
}

fn expected() -> Value {
    family_common::expected(&fixtures())
}

#[test]
fn gpu_lanes_follow_the_gemma4a_family_rows() {
    let Some(_g) = gpu("gpu_lanes_follow_the_gemma4a_family_rows") else {
        return;
    };
    let exp = expected();
    let feats = inputs();
    for dir in ["model", "full"] {
        let path = fixtures().join(dir);
        let cpu = Gemma4Audio::new(CpuBackend::new(0).unwrap(), &path, Lane::F32).unwrap();
        for lane in [Lane::F16, Lane::Q8] {
            let row = family_bar("gemma4a", lane, "cuda").expect("gemma4a row");
            let m = Gemma4Audio::new(CudaBackend::new(0).expect("cuda opens"), &path, lane)
                .expect("model loads");
            for clip in CLIPS {
                let f = &feats[&format!("features.{clip}")];
                let valid = exp["results"][clip]["valid_frames"].as_u64().unwrap() as usize;
                let want = cpu.encode(f, valid).unwrap();
                let got = m.encode(f, valid).unwrap();
                // the tower's chain: the first call runs eagerly, the second captures, the
                // third replays; all three give the same bits
                for call in 2..=3 {
                    let again = m.encode(f, valid).unwrap();
                    let bits = |t: &stapes_cuda::CudaTensor| m.backend().download(t).unwrap().data;
                    assert_eq!(
                        bits(&again.tower),
                        bits(&got.tower),
                        "{dir} {clip} call {call}"
                    );
                    if let (Some(x), Some(y)) = (&again.embeddings, &got.embeddings) {
                        assert_eq!(bits(x), bits(y), "{dir} {clip} embeddings, call {call}");
                    }
                }
                let pairs = [
                    ("tower", Some(&want.tower), Some(&got.tower)),
                    (
                        "embeddings",
                        want.embeddings.as_ref(),
                        got.embeddings.as_ref(),
                    ),
                ];
                for (what, w, g) in pairs {
                    let (Some(w), Some(g)) = (w, g) else {
                        assert_eq!(w.is_some(), g.is_some(), "{dir} {clip} {what}");
                        continue;
                    };
                    let (w, g) = (
                        cpu.backend().download(w).unwrap(),
                        m.backend().download(g).unwrap(),
                    );
                    assert_eq!(w.shape, g.shape, "{dir} {clip} {what}");
                    assert!(g.data.iter().all(|v| v.is_finite()), "{dir} {clip} {what}");
                    let err = rel_l2(&g.data, &w.data);
                    eprintln!("{dir} {clip} {lane} {what}: rel L2 {err:e}");
                    assert!(
                        err <= row.encoder_rel_l2,
                        "{dir} {clip} {lane} {what}: {err:e}"
                    );
                }
            }
        }
    }
}
