//! Parakeet (FastConformer) on the CUDA home: graph replay against eager, padded batches against
//! one clip at a time, f16 ids against the CPU f32 lane (and transformers) on the TDT, RNNT, CTC
//! and `.nemo` fixtures, and a 20-minute input in bounded device memory.
//! Without a CUDA device every test prints `SKIPPED (no CUDA device): <name>` and returns.
//! Fixtures: `crates/stapes-models/tests/fixtures/fastconformer` (found from the build tree, the
//! working directory, or `STAPES_FC_FIXTURES`).

use serde_json::Value;
use stapes_core::tensor::rel_l2;
use stapes_core::tolerance::{compare, family_bar, lookup, IdsRule, Op};
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_cuda::CudaBackend;
use stapes_models::fastconformer::{synthetic_checkpoint, Decoded, Parakeet, ParakeetConfig};

mod fc_common;
use fc_common::{fixtures, gpu, read, CLIPS};

fn features() -> Vec<HostTensor> {
    let inputs = read("inputs.safetensors");
    CLIPS
        .iter()
        .map(|c| inputs[&format!("features.{c}")].clone())
        .collect()
}

fn cuda() -> CudaBackend {
    CudaBackend::new(0).expect("cuda opens")
}

fn encode_host<B: Backend>(m: &Parakeet<B>, f: &HostTensor) -> Vec<f32> {
    let e = m.encode_host(f).expect("encode");
    m.backend().download(&e).expect("download").data
}

/// Rows `0..frames` of sequence `i` of `(B, T, d)`.
fn rows(enc: &HostTensor, i: usize, frames: usize) -> Vec<f32> {
    let (t, d) = (enc.shape[1], enc.shape[2]);
    enc.data[i * t * d..(i * t + frames) * d].to_vec()
}

/// Builds the same model twice on the GPU: graphs off, then on.
fn eager_and_graphed(
    dir: &std::path::Path,
    lane: Lane,
) -> (Parakeet<CudaBackend>, Parakeet<CudaBackend>) {
    std::env::set_var("STAPES_CUDA_GRAPHS", "0");
    let eager = Parakeet::new(cuda(), dir, lane).expect("model");
    std::env::remove_var("STAPES_CUDA_GRAPHS");
    let graphed = Parakeet::new(cuda(), dir, lane).expect("model");
    assert!(!eager.backend().graphs_enabled() && graphed.backend().graphs_enabled());
    (eager, graphed)
}

#[test]
fn graph_replay_is_bit_identical_to_eager_parakeet_encoder() {
    let Some(_g) = gpu("graph_replay_is_bit_identical_to_eager_parakeet_encoder") else {
        return;
    };
    let dir = fixtures().join("tdt");
    let feats = features();
    let t = feats[0].shape[0];
    let mels = feats[0].shape[1];
    let longest = (0..feats.len())
        .max_by_key(|&k| feats[k].shape[0])
        .unwrap_or(0);
    // Four inputs of one length: call 1 warms (eager), 2 captures, 3 and 4 replay new data.
    let singles: Vec<HostTensor> = (0..4)
        .map(|i| HostTensor::random(vec![t, mels], 40 + i, 2.0))
        .collect();
    for lane in [Lane::F16, Lane::Q8] {
        let (eager, graphed) = eager_and_graphed(&dir, lane);
        for (i, f) in singles.iter().enumerate() {
            let (a, b) = (encode_host(&eager, f), encode_host(&graphed, f));
            assert!(
                a == b,
                "{lane}: single call {i}: graph differs from eager (rel L2 {})",
                rel_l2(&b, &a)
            );
        }
        // A padded batch: the longest clip fixes the bucket, the others' lengths change per call
        // (masks refreshed in place on the device).
        for call in 0..4 {
            let batch: Vec<HostTensor> = feats
                .iter()
                .enumerate()
                .map(|(k, f)| {
                    let keep = if k == longest {
                        f.shape[0]
                    } else {
                        f.shape[0] - 8 * call
                    };
                    HostTensor::new(vec![keep, mels], f.data[..keep * mels].to_vec()).unwrap()
                })
                .collect();
            let (ea, la) = eager.encode_batch(&batch).expect("eager batch");
            let (eb, lb) = graphed.encode_batch(&batch).expect("graphed batch");
            assert_eq!(la, lb);
            let a = eager.backend().download(&ea).unwrap().data;
            let b = graphed.backend().download(&eb).unwrap().data;
            assert!(
                a == b,
                "{lane}: batch call {call}: graph differs from eager (rel L2 {})",
                rel_l2(&b, &a)
            );
        }
        let c = graphed.backend().counters().snapshot();
        eprintln!("{lane}: graphed counters {c:?}");
        assert_eq!(
            c.graph_captures, 2,
            "{lane}: one single and one batch bucket: {c:?}"
        );
        assert!(c.graph_replays >= 4, "{lane}: replays actually ran: {c:?}");
        assert_eq!(eager.backend().counters().snapshot().graph_replays, 0);
    }
}

#[test]
fn batched_clips_equal_one_at_a_time_on_the_gpu() {
    let Some(_g) = gpu("batched_clips_equal_one_at_a_time_on_the_gpu") else {
        return;
    };
    let feats = features();
    let tol = lookup(Op::Linear, Lane::F16, "cuda")
        .expect("f16 cuda row")
        .tol;
    for model in ["tdt", "rnnt", "ctc"] {
        for lane in [Lane::F16, Lane::Q8] {
            let m = Parakeet::new(cuda(), &fixtures().join(model), lane).expect("model");
            let (enc, lens) = m.encode_batch(&feats).expect("batch");
            let host = m.backend().download(&enc).unwrap();
            for (i, f) in feats.iter().enumerate() {
                let one = m.encode_host(f).expect("single");
                let single = m.backend().download(&one).unwrap();
                assert_eq!(single.shape[1], lens[i]);
                let got = rows(&host, i, lens[i]);
                let r = compare(&got, &single.data, &tol);
                eprintln!("{lane} {model}/{}: batched vs single {r:?}", CLIPS[i]);
                assert!(r.is_ok(), "{lane} {model}/{}: {r:?}", CLIPS[i]);
                let ids_b = m.greedy_at(&enc, i, lens[i]).unwrap().ids();
                let ids_s = m.greedy(&one).unwrap().ids();
                assert_eq!(ids_b, ids_s, "{lane} {model}/{}", CLIPS[i]);
            }
        }
    }
}

fn lcs(a: &[u32], b: &[u32]) -> usize {
    let mut t = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in 0..a.len() {
        for j in 0..b.len() {
            t[i + 1][j + 1] = if a[i] == b[j] {
                t[i][j] + 1
            } else {
                t[i][j + 1].max(t[i + 1][j])
            };
        }
    }
    t[a.len()][b.len()]
}

/// The bars are the family rows of `stapes_core::tolerance::FAMILY`, derived from the fixture
/// (tools/reference/fastconformer_hf.py): every f32 decision's margin is ≥ 0.05 logits and ≥ 4×
/// the emulated f16 logit error, so f16 steps (ids, frames, TDT durations) must equal CPU f32's
/// (which equal transformers', `fastconformer_parity.rs`) with no near-tie allowance; CUDA q8
/// moves logits by up to `lane_logit_error.q8` (recorded per model), so q8 steps must equal CPU
/// f32's until the first step whose CPU f32 margin is below `factor ×` that bound. Encoders:
/// relative L2 against CPU f32 under each row's bar. Every model and clip is checked before the
/// test fails.
#[test]
fn f16_ids_equal_cpu_f32_on_every_parakeet_fixture() {
    let Some(_g) = gpu("f16_ids_equal_cpu_f32_on_every_parakeet_fixture") else {
        return;
    };
    let feats = features();
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected.json")).expect("expected.json"),
    )
    .expect("json");
    let mut failures = Vec::new();
    for model in ["tdt", "rnnt", "ctc", "tdt.nemo"] {
        let path = fixtures().join(model);
        let hf_model = model.trim_end_matches(".nemo");
        let q8_error = exp["models"][hf_model]["lane_logit_error"]["q8"]
            .as_f64()
            .expect("lane_logit_error.q8 in expected.json") as f32;
        let cpu = Parakeet::new(CpuBackend::new(2).unwrap(), &path, Lane::F32).expect("cpu model");
        let gpus: Vec<(Lane, Parakeet<CudaBackend>)> = [Lane::F16, Lane::Q8]
            .into_iter()
            .map(|lane| (lane, Parakeet::new(cuda(), &path, lane).expect("gpu model")))
            .collect();
        for (i, f) in feats.iter().enumerate() {
            let clip = CLIPS[i];
            let enc_cpu = cpu.encode_host(f).unwrap();
            let want = cpu.greedy(&enc_cpu).unwrap();
            let enc_cpu = cpu.backend().download(&enc_cpu).unwrap().data;
            let hf: Vec<u32> = exp["models"][hf_model]["results"][clip]["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            if want.ids() != hf {
                failures.push(format!(
                    "cpu f32 {model}/{clip}: ids differ from transformers"
                ));
            }
            // CTC's margins are per frame (the fixture's), transducers' per step (the CPU's).
            let margins: Vec<f32> = if want.margins.is_empty() {
                exp["models"][hf_model]["results"][clip]["margins"]
                    .as_array()
                    .expect("margins")
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
                    .collect()
            } else {
                want.margins.clone()
            };
            for (lane, m) in &gpus {
                let bar = family_bar("fastconformer", *lane, "cuda").expect("family bar");
                // twice: warm, then the capture of this shape bucket
                let _ = m.greedy(&m.encode_host(f).unwrap()).unwrap();
                let enc = m.encode_host(f).unwrap();
                let got = m.greedy(&enc).unwrap();
                let e = rel_l2(&m.backend().download(&enc).unwrap().data, &enc_cpu);
                let same = lcs(&got.ids(), &want.ids());
                eprintln!(
                    "{lane} {model}/{clip}: encoder rel L2 vs cpu f32 {e:.2e} (bar {}); {same}/{} \
                     ids in order ({} emitted)",
                    bar.encoder_rel_l2,
                    want.ids().len(),
                    got.ids().len()
                );
                if e > bar.encoder_rel_l2 {
                    failures.push(format!("{lane} {model}/{clip}: encoder rel L2 {e}"));
                }
                let floor = match bar.ids {
                    IdsRule::Identical => f32::INFINITY,
                    IdsRule::UntilMarginBelow { factor } => factor * q8_error,
                    IdsRule::SameText => {
                        panic!("{lane}: the fixtures' margins judge ids, not text")
                    }
                };
                if let Some(e) = steps_rule(&got, &want, &margins, floor) {
                    failures.push(format!("{lane} {model}/{clip}: {e}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The q8 lane past the few-row FP8 GEMM's 512 rows, where fc1 runs on cuBLASLt and its SiLU
/// is a pass of its own: a batch of the six orders of the fixtures' three clips joined (6 × 113
/// encoder frames, one captured encoder chain as 16 clips run). The TDT fixture's encoder holds
/// the family bar against CPU f32 with the hidden in f16 and in e4m3 (`set_hidden_e4m3`, a
/// backend each: a captured chain keeps the form it was captured with), the e4m3 form ran (its
/// counter) and the f16 one did not, and the e4m3 form's error stays within 1.5× the f16
/// one's (op level, tests/fp8.rs: ×1.15 of fc2's).
#[test]
fn q8_past_512_rows_holds_the_family_bar_with_the_e4m3_hidden() {
    let name = "q8_past_512_rows_holds_the_family_bar_with_the_e4m3_hidden";
    let Some(_g) = gpu(name) else {
        return;
    };
    let feats = features();
    let mels = feats[0].shape[1];
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    let joined: Vec<HostTensor> = orders
        .iter()
        .map(|o| {
            let data: Vec<f32> = o.iter().flat_map(|&i| feats[i].data.clone()).collect();
            HostTensor::new(vec![data.len() / mels, mels], data).expect("joined features")
        })
        .collect();
    let path = fixtures().join("tdt");
    let cpu = Parakeet::new(CpuBackend::new(2).unwrap(), &path, Lane::F32).expect("cpu model");
    let want: Vec<Vec<f32>> = joined.iter().map(|f| encode_host(&cpu, f)).collect();
    let bar = family_bar("fastconformer", Lane::Q8, "cuda").expect("family bar");
    let mut errs = Vec::new();
    for mode in ["0", "lut"] {
        let m = Parakeet::new(cuda(), &path, Lane::Q8).expect("gpu model");
        m.backend().set_hidden_e4m3(mode);
        let r0 = m.backend().hidden_e4m3_runs();
        // twice: warm, then the capture of this shape bucket
        let _ = m.encode_batch(&joined).expect("batch");
        let (enc, lens) = m.encode_batch(&joined).expect("batch");
        let ran = m.backend().hidden_e4m3_runs() - r0;
        let host = m.backend().download(&enc).expect("download");
        let rows_all = host.shape[0] * host.shape[1];
        assert!(rows_all > 512, "{rows_all} rows: not past the few-row GEMM");
        let (mut got, mut exp) = (Vec::new(), Vec::new());
        for (i, w) in want.iter().enumerate() {
            got.extend(rows(&host, i, lens[i]));
            exp.extend_from_slice(w);
        }
        assert_eq!(got.len(), exp.len(), "hidden {mode}: encoder frames");
        let e = rel_l2(&got, &exp);
        eprintln!(
            "q8 tdt, {rows_all} rows, hidden {mode}: encoder rel L2 vs cpu f32 {e:.3e} (bar {}), \
             {ran} e4m3 hidden passes",
            bar.encoder_rel_l2
        );
        assert!(e <= bar.encoder_rel_l2, "hidden {mode}: encoder rel L2 {e}");
        assert_eq!(
            ran > 0,
            mode != "0",
            "hidden {mode}: {ran} e4m3 hidden passes"
        );
        errs.push(e);
    }
    assert!(
        errs[1] <= 1.5 * errs[0],
        "the e4m3 hidden's encoder error {} is over 1.5× the f16 hidden's {}",
        errs[1],
        errs[0]
    );
}

/// Steps (token, frame, duration) identical to CPU f32's, except that from the first step
/// whose CPU f32 margin is below `floor` on, nothing is compared (`floor` infinite: every
/// step must match).
fn steps_rule(got: &Decoded, want: &Decoded, margins: &[f32], floor: f32) -> Option<String> {
    let at_risk = if floor.is_finite() {
        margins.iter().position(|&m| m < floor)
    } else {
        None
    };
    let k = got
        .steps
        .iter()
        .zip(&want.steps)
        .position(|(a, b)| a != b)
        .or((got.steps.len() != want.steps.len()).then(|| got.steps.len().min(want.steps.len())))?;
    match at_risk {
        Some(r) if k >= r => {
            eprintln!(
                "  parts from cpu f32 at step {k}; steps from {r} on have margins < {floor:.3}"
            );
            None
        }
        _ => Some(format!(
            "step {k} differs with a cpu f32 margin of {:?} (first step under {floor}: {at_risk:?})",
            margins.get(k)
        )),
    }
}

/// 20 minutes through the parakeet-tdt-0.6b-v2 encoder shape (random weights, f16): chunked
/// subsampling and query-blocked attention keep device memory bounded; reports the pool's
/// high-water mark. Run by name with `--ignored` (a few seconds on an H200).
#[test]
#[ignore]
fn twenty_minutes_on_the_gpu_in_bounded_memory() {
    let Some(_g) = gpu("twenty_minutes_on_the_gpu_in_bounded_memory") else {
        return;
    };
    let cfg = ParakeetConfig::published("parakeet-tdt-0.6b-v2").expect("shape");
    let ck = synthetic_checkpoint(&cfg, 5).expect("synthetic");
    let m = Parakeet::from_checkpoint(cuda(), &ck, Lane::F16).expect("model");
    let after_load = m.backend().memory_usage();
    let frames = 20 * 60 * 100;
    let feats = HostTensor::random(vec![frames, cfg.encoder.num_mel_bins], 11, 1.0);
    m.backend().reset_memory_peak();
    let t0 = std::time::Instant::now();
    let enc = m.encode_host(&feats).expect("20-minute encode");
    m.backend().synchronize().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let (peak_reserved, peak_live) = m.backend().memory_peak();
    let t_out = cfg.encoder.output_frames(frames);
    assert_eq!(stapes_core::DeviceTensor::shape(&enc)[1], t_out);
    let mib = |b: usize| b as f64 / (1u64 << 20) as f64;
    let unchunked = cfg.encoder.num_heads * t_out * t_out * 4;
    eprintln!(
        "20 min ({t_out} encoder frames), 0.6b f16: encode {secs:.2} s; device pool after load \
         {:.0} MiB live; peak during the encode {:.0} MiB reserved, {:.0} MiB live; one unchunked \
         score tensor would be {:.0} MiB",
        mib(after_load.1),
        mib(peak_reserved),
        mib(peak_live),
        mib(unchunked)
    );
    assert!(
        peak_reserved < unchunked,
        "peak {peak_reserved} B not below one score tensor {unchunked} B"
    );
}
