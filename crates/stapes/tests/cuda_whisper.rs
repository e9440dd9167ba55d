//! Whisper on the CUDA home against the CPU f32 lane, and graph replay against eager.
//! Without a CUDA device every test prints `SKIPPED (no CUDA device): <name>` and returns.
//! On the GPU machine `STAPES_GPU_MODEL` names real Whisper weights (any format we read).

#[path = "../../stapes-models/tests/support/ahead.rs"]
mod ahead;

use stapes_core::tolerance::{family_bar, IdsRule};
use stapes_core::{tensor::rel_l2, Backend, DeviceTensor, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_cuda::CudaBackend;
use stapes_models::whisper::config::WhisperConfig;
use stapes_models::whisper::weights::{
    load_checkpoint, load_weights, synthetic_checkpoint, write_ct2, WeightType, WhisperCheckpoint,
};
use stapes_models::whisper::{Whisper, WhisperOptions};

fn gpu(name: &str) -> bool {
    if stapes_cuda::available() {
        true
    } else {
        eprintln!("SKIPPED (no CUDA device): {name}");
        false
    }
}

fn mel(cfg: &WhisperConfig, seed: u64) -> HostTensor {
    HostTensor::random(vec![2 * cfg.n_audio_ctx, cfg.n_mels], seed, 1.0)
}

fn encode<B: Backend>(m: &Whisper<B>, mel: &HostTensor) -> Vec<f32> {
    let e = m.encode_host(mel).expect("encode");
    m.backend().download(&e).expect("download").data
}

#[test]
fn graph_replay_is_bit_identical_to_eager_whisper_encoder() {
    if !gpu("graph_replay_is_bit_identical_to_eager_whisper_encoder") {
        return;
    }
    let cfg = WhisperConfig::published("whisper-tiny").expect("shape");
    let ck = synthetic_checkpoint(&cfg, 3).expect("synthetic");
    let mels: Vec<HostTensor> = (0..4).map(|i| mel(&cfg, 10 + i)).collect();
    for lane in [Lane::F16, Lane::Q8] {
        std::env::set_var("STAPES_CUDA_GRAPHS", "0");
        let eager = Whisper::new(CudaBackend::new(0).expect("cuda"), &ck, lane).expect("model");
        std::env::remove_var("STAPES_CUDA_GRAPHS");
        let graphed = Whisper::new(CudaBackend::new(0).expect("cuda"), &ck, lane).expect("model");
        // call 1 warms (eager), call 2 captures, calls 3 and 4 replay with new inputs
        for (i, m) in mels.iter().enumerate() {
            let a = encode(&eager, m);
            let b = encode(&graphed, m);
            assert!(
                a == b,
                "{lane}: call {i}: graph output differs from eager (rel L2 {})",
                rel_l2(&b, &a)
            );
        }
        let c = graphed.backend().counters().snapshot();
        assert_eq!(c.graph_captures, 1, "{lane}: {c:?}");
        assert!(c.graph_replays >= 2, "{lane}: replays actually ran: {c:?}");
        assert_eq!(eager.backend().counters().snapshot().graph_replays, 0);
    }
}

#[test]
fn batched_windows_equal_one_at_a_time() {
    if !gpu("batched_windows_equal_one_at_a_time") {
        return;
    }
    let cfg = WhisperConfig::published("whisper-tiny").expect("shape");
    let ck = synthetic_checkpoint(&cfg, 4).expect("synthetic");
    let m = Whisper::new(CudaBackend::new(0).expect("cuda"), &ck, Lane::F16).expect("model");
    let (a, b) = (mel(&cfg, 21), mel(&cfg, 22));
    let mut both = a.data.clone();
    both.extend_from_slice(&b.data);
    let x = m
        .backend()
        .upload(&HostTensor::new(vec![2, 2 * cfg.n_audio_ctx, cfg.n_mels], both).expect("t"))
        .expect("up");
    let e = m.encode(&x).expect("batched encode");
    assert_eq!(e.shape(), &[2, cfg.n_audio_ctx, cfg.d_model]);
    let e = m.backend().download(&e).expect("download").data;
    let (ea, eb) = e.split_at(e.len() / 2);
    // cuBLAS may pick another algorithm for 2× the rows, so equality is within f32 rounding of
    // the accumulation order, not bitwise.
    for (got, single) in [(ea, encode(&m, &a)), (eb, encode(&m, &b))] {
        let d = rel_l2(got, &single);
        assert!(d < 1e-5, "batched vs single rel L2 {d}");
    }
}

/// Encoder output and four decoder-step logits of `m` (greedy from SOT over a fixed encoding).
fn encoder_and_steps<B: Backend>(m: &Whisper<B>, cfg: &WhisperConfig) -> Vec<Vec<f32>> {
    let mut out = vec![encode(m, &mel(cfg, 31))];
    let b = m.backend();
    let enc = b
        .upload(&HostTensor::random(
            vec![1, cfg.n_audio_ctx, cfg.d_model],
            33,
            1.0,
        ))
        .expect("up");
    let cross = m.cross_kv(&enc).expect("cross");
    let mut st = m.decoder_state(&cross, 1).expect("state");
    let sot = m.tokenizer.sot();
    for s in 0..4u32 {
        let id = if s == 0 { sot } else { 100 + 7 * s };
        out.push(m.decode_step(&mut st, &[id]).expect("step").data);
    }
    out
}

/// `Whisper::from_weights` on a CTranslate2 f16 directory (how `stapes transcribe` loads one:
/// the f16 lane uploads the file's halves as they are, q8 widens a row at a time) builds the
/// model `Whisper::new` builds from the widened checkpoint: encoder output and decoder-step
/// logits the same bit for bit, f16 and q8.
#[test]
fn stored_f16_weights_build_the_widened_model() {
    if !gpu("stored_f16_weights_build_the_widened_model") {
        return;
    }
    let cfg = WhisperConfig::published("whisper-tiny").expect("shape");
    let dir = std::env::temp_dir().join(format!("stapes-cuda-stored-{}", std::process::id()));
    let ck = synthetic_checkpoint(&cfg, 8).expect("synthetic");
    write_ct2(&ck, &dir, WeightType::F16).expect("write_ct2");
    let wide = load_checkpoint(&dir).expect("load_checkpoint");
    let stored = load_weights(&dir).expect("load_weights");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(stored.format, "ctranslate2");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for lane in [Lane::F16, Lane::Q8] {
        let a = Whisper::new(CudaBackend::new(0).expect("cuda"), &wide, lane).expect("new");
        let b = Whisper::from_weights(CudaBackend::new(0).expect("cuda"), &stored, lane)
            .expect("from_weights");
        let (want, got) = (encoder_and_steps(&a, &cfg), encoder_and_steps(&b, &cfg));
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert!(
                bits(g) == bits(w),
                "{lane}: output {i} (0 = encoder, then steps) differs (rel L2 {})",
                rel_l2(g, w)
            );
        }
    }
}

fn real_checkpoint(name: &str) -> Option<WhisperCheckpoint> {
    match std::env::var("STAPES_GPU_MODEL") {
        Ok(p) if !p.is_empty() => {
            Some(load_checkpoint(std::path::Path::new(&p)).expect("STAPES_GPU_MODEL loads"))
        }
        _ => {
            eprintln!("SKIPPED (STAPES_GPU_MODEL not set): {name}");
            None
        }
    }
}

fn jfk() -> Vec<f32> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/jfk.wav");
    stapes_audio::load_file(&p).expect("jfk.wav")
}

fn greedy() -> WhisperOptions {
    WhisperOptions {
        beam_size: 1,
        temperatures: vec![0.0],
        ..Default::default()
    }
}

#[test]
fn real_weights_f16_ids_equal_cpu_f32_and_q8_text_equal() {
    if !gpu("real_weights_f16_ids_equal_cpu_f32_and_q8_text_equal") {
        return;
    }
    let Some(ck) = real_checkpoint("real_weights_f16_ids_equal_cpu_f32_and_q8_text_equal") else {
        return;
    };
    let audio = jfk();
    let cpu = Whisper::new(CpuBackend::new(0).expect("cpu"), &ck, Lane::F32).expect("cpu model");
    let want = cpu.transcribe(&audio, &greedy()).expect("cpu transcribe");
    let ids = |t: &stapes_models::transcript::Transcript| {
        t.segments
            .iter()
            .flat_map(|s| s.tokens.clone())
            .collect::<Vec<_>>()
    };
    let mel = stapes_audio::features::whisper::log_mel(&audio, ck.config.n_mels, 160);
    let mut window = vec![0f32; 2 * ck.config.n_audio_ctx * ck.config.n_mels];
    let n = window.len().min(mel.data.len());
    window[..n].copy_from_slice(&mel.data[..n]);
    let window =
        HostTensor::new(vec![2 * ck.config.n_audio_ctx, ck.config.n_mels], window).expect("mel");
    let enc_cpu = encode(&cpu, &window);
    for lane in [Lane::F16, Lane::Q8] {
        let row = family_bar("whisper", lane, "cuda").expect("whisper row");
        let bar = row.encoder_rel_l2;
        let gpu = Whisper::new(CudaBackend::new(0).expect("cuda"), &ck, lane).expect("gpu model");
        let got = gpu.transcribe(&audio, &greedy()).expect("gpu transcribe");
        println!("{lane}: {:?}", got.text());
        match row.ids {
            IdsRule::Identical => {
                assert_eq!(
                    ids(&got),
                    ids(&want),
                    "{lane} greedy ids differ from CPU f32"
                )
            }
            IdsRule::SameText => {
                assert_eq!(got.text(), want.text(), "{lane} text differs from CPU f32")
            }
            IdsRule::UntilMarginBelow { .. } => {
                panic!("{lane}: no margins beside real weights to judge ids by")
            }
        }
        let d = rel_l2(&encode(&gpu, &window), &enc_cpu);
        println!("{lane}: encoder rel L2 vs CPU f32 = {d:.3e} (bar {bar})");
        assert!(d <= bar, "{lane}: encoder rel L2 {d} over the bar {bar}");
        let c = gpu.backend().counters().snapshot();
        assert!(c.gemm_f16 + c.gemm_q8 > 0, "the GPU GEMMs ran: {c:?}");
    }
}

fn librivox_clip() -> Vec<f32> {
    let cache = std::env::var_os("STAPES_CACHE")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache/stapes"))
        })
        .expect("STAPES_CACHE or HOME");
    let p = cache.join("audio/librivox/sense_and_sensibility_01_austen_64kb-0870.wav");
    assert!(
        p.exists(),
        "{} missing: run scripts/fetch-models.sh all (or set STAPES_CACHE)",
        p.display()
    );
    stapes_audio::load_file(&p).expect("librivox clip")
}

fn all_ids(t: &stapes_models::transcript::Transcript) -> Vec<u32> {
    t.segments.iter().flat_map(|s| s.tokens.clone()).collect()
}

/// The decoder's step chain (ids and position on the device, captured once per batch size and
/// replayed) computes the same logits, bit for bit, as the host-parameter step it replaces, and
/// so does the same chain run eagerly (`STAPES_CUDA_GRAPHS=0`); across batch changes (a reorder
/// into another batch's buffers) and two windows sharing the captured graphs.
#[test]
fn step_graph_logits_bit_identical_to_host_params() {
    if !gpu("step_graph_logits_bit_identical_to_host_params") {
        return;
    }
    let cfg = WhisperConfig::published("whisper-tiny").expect("shape");
    let ck = synthetic_checkpoint(&cfg, 6).expect("synthetic");
    for lane in [Lane::F16, Lane::Q8] {
        std::env::set_var("STAPES_CUDA_GRAPHS", "0");
        let eager = Whisper::new(CudaBackend::new(0).expect("cuda"), &ck, lane).expect("model");
        std::env::remove_var("STAPES_CUDA_GRAPHS");
        let graphed = Whisper::new(CudaBackend::new(0).expect("cuda"), &ck, lane).expect("model");
        let sot = graphed.tokenizer.sot();
        let run = |m: &Whisper<CudaBackend>, device: bool, window: u64| -> Vec<Vec<f32>> {
            m.set_device_steps(Some(device));
            let b = m.backend();
            let enc = b
                .upload(&HostTensor::random(
                    vec![1, cfg.n_audio_ctx, cfg.d_model],
                    60 + window,
                    1.0,
                ))
                .expect("up");
            let cross = m.cross_kv(&enc).expect("cross");
            let mut st = m.decoder_state(&cross, 1).expect("state");
            let mut out = vec![m.decode_step(&mut st, &[sot]).expect("step").data];
            m.reorder_state(&mut st, &[0, 0, 0, 0, 0]).expect("expand");
            for s in 0..12u32 {
                let ids: Vec<u32> = (0..5).map(|r| 100 + 7 * s + r).collect();
                out.push(m.decode_step(&mut st, &ids).expect("step").data);
                if s == 6 {
                    m.reorder_state(&mut st, &[4, 4, 1, 0, 2]).expect("permute");
                }
            }
            m.reorder_state(&mut st, &[3, 1]).expect("shrink");
            for s in 0..6u32 {
                out.push(
                    m.decode_step(&mut st, &[200 + s, 300 + s])
                        .expect("step")
                        .data,
                );
            }
            out
        };
        for window in 0..2 {
            let want = run(&graphed, false, window);
            let before = graphed.backend().counters().snapshot().graph_replays;
            let got = run(&graphed, true, window);
            let replays = graphed.backend().counters().snapshot().graph_replays - before;
            let eager_steps = run(&eager, true, window);
            for (i, w) in want.iter().enumerate() {
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert!(
                    bits(&got[i]) == bits(w),
                    "{lane} window {window} step {i}: step graph logits differ (rel L2 {})",
                    rel_l2(&got[i], w)
                );
                assert!(
                    bits(&eager_steps[i]) == bits(w),
                    "{lane} window {window} step {i}: eager step chain differs (rel L2 {})",
                    rel_l2(&eager_steps[i], w)
                );
            }
            // window 0: every batch size warms, captures, then replays; window 1 replays only
            assert!(
                replays > 0,
                "{lane} window {window}: no step graph replayed"
            );
            if window == 1 {
                assert_eq!(
                    replays as usize,
                    want.len(),
                    "{lane}: every step of window 1 replays"
                );
            }
            println!(
                "{lane} window {window}: {} steps, {replays} replays",
                want.len()
            );
        }
        assert_eq!(eager.backend().counters().snapshot().graph_replays, 0);
    }
}

/// Real tiny.en: transcripts decoded with the step graph have the ids of the host-parameter
/// steps, greedy and beam 5, on jfk and a LibriVox clip, f16 and q8; the step graph replayed.
#[test]
fn real_weights_step_graph_ids_equal_host_params() {
    let name = "real_weights_step_graph_ids_equal_host_params";
    if !gpu(name) {
        return;
    }
    let Some(ck) = real_checkpoint(name) else {
        return;
    };
    let clips = [("jfk", jfk()), ("librivox-0870", librivox_clip())];
    for lane in [Lane::F16, Lane::Q8] {
        let m = Whisper::new(CudaBackend::new(0).expect("cuda"), &ck, lane).expect("gpu model");
        for (clip, audio) in &clips {
            for beam in [1, 5] {
                let o = WhisperOptions {
                    beam_size: beam,
                    ..Default::default()
                };
                m.set_device_steps(Some(false));
                let want = m.transcribe(audio, &o).expect("host-parameter steps");
                m.set_device_steps(None);
                let before = m.backend().counters().snapshot().graph_replays;
                let got = m.transcribe(audio, &o).expect("step graph");
                let replays = m.backend().counters().snapshot().graph_replays - before;
                println!(
                    "{lane} {clip} beam {beam}: {replays} replays: {:?}",
                    got.text()
                );
                assert_eq!(
                    all_ids(&got),
                    all_ids(&want),
                    "{lane} {clip} beam {beam}: step-graph ids differ"
                );
                assert!(!all_ids(&got).is_empty(), "{lane} {clip}: empty transcript");
                assert!(replays > 0, "{lane} {clip} beam {beam}: no graph replayed");
            }
        }
    }
}

/// Steps queued ahead with the ids written by `select_feed` on the device choose the ids and
/// scores, bit for bit, of steps run in turn with host-written parameters: synthetic tiny through
/// a fed-back, a substituted and a batch-expanded step (the CPU test's script), f16 and q8; and
/// real tiny.en's greedy transcripts of jfk and a LibriVox clip.
#[test]
fn steps_queued_ahead_equal_steps_in_turn() {
    let name = "steps_queued_ahead_equal_steps_in_turn";
    if !gpu(name) {
        return;
    }
    let cfg = WhisperConfig::published("whisper-tiny").expect("shape");
    let ck = synthetic_checkpoint(&cfg, 6).expect("synthetic");
    for lane in [Lane::F16, Lane::Q8] {
        let m = Whisper::new(CudaBackend::new(0).expect("cuda"), &ck, lane).expect("model");
        let want = ahead::script(&m, false);
        let got = ahead::script(&m, true);
        ahead::check(&want, &got, &format!("synthetic tiny {lane}"));
    }
    let Some(ck) = real_checkpoint(name) else {
        return;
    };
    let o = WhisperOptions {
        beam_size: 1,
        ..Default::default()
    };
    for lane in [Lane::F16, Lane::Q8] {
        let m = Whisper::new(CudaBackend::new(0).expect("cuda"), &ck, lane).expect("gpu model");
        for (clip, audio) in [("jfk", jfk()), ("librivox-0870", librivox_clip())] {
            m.set_decode_ahead(Some(false));
            let want = m.transcribe(&audio, &o).expect("steps in turn");
            m.set_decode_ahead(Some(true));
            let got = m.transcribe(&audio, &o).expect("steps ahead");
            println!("{lane} {clip}: {:?}", got.text());
            assert!(
                !all_ids(&want).is_empty(),
                "{lane} {clip}: empty transcript"
            );
            assert_eq!(all_ids(&got), all_ids(&want), "{lane} {clip}: ids differ");
        }
    }
}
