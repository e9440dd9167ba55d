//! Whisper on the CUDA home against the CPU f32 lane, and graph replay against eager.
//! Without a CUDA device every test prints `SKIPPED (no CUDA device): <name>` and returns.
//! On the GPU machine `STAPES_GPU_MODEL` names real Whisper weights (any format we read).

use stapes_core::{tensor::rel_l2, Backend, DeviceTensor, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_cuda::CudaBackend;
use stapes_models::whisper::config::WhisperConfig;
use stapes_models::whisper::weights::{load_checkpoint, synthetic_checkpoint, WhisperCheckpoint};
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
    for (lane, bar) in [(Lane::F16, 5e-3f32), (Lane::Q8, 0.1)] {
        let gpu = Whisper::new(CudaBackend::new(0).expect("cuda"), &ck, lane).expect("gpu model");
        let got = gpu.transcribe(&audio, &greedy()).expect("gpu transcribe");
        println!("{lane}: {:?}", got.text());
        if lane == Lane::F16 {
            assert_eq!(ids(&got), ids(&want), "f16 greedy ids differ from CPU f32");
        } else {
            assert_eq!(got.text(), want.text(), "q8 text differs from CPU f32");
        }
        let d = rel_l2(&encode(&gpu, &window), &enc_cpu);
        println!("{lane}: encoder rel L2 vs CPU f32 = {d:.3e} (bar {bar})");
        assert!(d <= bar, "{lane}: encoder rel L2 {d} over the bar {bar}");
        let c = gpu.backend().counters().snapshot();
        assert!(c.gemm_f16 + c.gemm_q8 > 0, "the GPU GEMMs ran: {c:?}");
    }
}
