//! The FastConformer encoder on the CUDA home at the published parakeet-tdt-0.6b-v2 shapes
//! (d 1024, 8 heads of 128, 256 subsampling channels, 128 mels; random weights, 2 blocks) against
//! the CPU f32 lane on the same checkpoint: an 11 s clip (1100 feature frames) and a padded batch
//! of that clip and a 700-frame one, through the encoder chain (eager, captured, replayed: the
//! replay must equal the eager pass bitwise). The fixtures' heads of 16 and 16 channels leave the
//! fused kernels for heads of 64/128 and the channel-last subsampling at 256 channels to these
//! shapes; run it with the switches of the paths under test set (STAPES_CUDA_FC_SUB, ...).
//! Without a CUDA device the test prints `SKIPPED (no CUDA device): <name>` and returns.

use stapes_core::tensor::rel_l2;
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_cuda::CudaBackend;
use stapes_models::fastconformer::{synthetic_checkpoint, Parakeet, ParakeetConfig};

#[allow(dead_code)] // the helpers the other FastConformer GPU tests use
mod fc_common;
use fc_common::gpu;

/// f16 activations and weights against f32 over two blocks (the fixtures' f16 encoder bar is
/// 5e-3 of rel L2; random weights of the published shapes sit in the same range).
const BAR: f32 = 1e-2;

/// Rows `0..frames` of sequence `i` of `(B, T, d)`.
fn rows(enc: &HostTensor, i: usize, frames: usize) -> Vec<f32> {
    let (t, d) = (enc.shape[1], enc.shape[2]);
    enc.data[i * t * d..(i * t + frames) * d].to_vec()
}

#[test]
fn published_shapes_f16_match_cpu_f32_and_replay_equals_eager() {
    let Some(_g) = gpu("published_shapes_f16_match_cpu_f32_and_replay_equals_eager") else {
        return;
    };
    let mut cfg = ParakeetConfig::published("parakeet-tdt-0.6b-v2").expect("published shape");
    cfg.encoder.num_layers = 2;
    let mels = cfg.encoder.num_mel_bins;
    let ck = synthetic_checkpoint(&cfg, 0x5EED).expect("synthetic weights");
    let cpu = Parakeet::from_checkpoint(CpuBackend::new(8).expect("cpu"), &ck, Lane::F32)
        .expect("cpu model");
    let gpu = Parakeet::from_checkpoint(CudaBackend::new(0).expect("cuda"), &ck, Lane::F16)
        .expect("gpu model");
    let long = HostTensor::random(vec![1100, mels], 11, 1.0);
    let short = HostTensor::new(vec![700, mels], long.data[..700 * mels].to_vec()).expect("cut");
    let want: Vec<HostTensor> = [&long, &short]
        .iter()
        .map(|f| {
            let e = cpu.encode_host(f).expect("cpu encode");
            cpu.backend().download(&e).expect("download")
        })
        .collect();
    // single clip: eager (first), captured, replayed
    let runs: Vec<HostTensor> = (0..3)
        .map(|_| {
            let e = gpu.encode_host(&long).expect("gpu encode");
            gpu.backend().download(&e).expect("download")
        })
        .collect();
    assert_eq!(runs[0].shape, want[0].shape, "single clip shape");
    assert!(
        runs[0].data == runs[2].data,
        "single clip: replay differs from eager"
    );
    let e = rel_l2(&runs[0].data, &want[0].data);
    eprintln!("0.6b shapes, 2 blocks, 1100 frames: f16 vs cpu f32 rel L2 {e:.2e} (bar {BAR})");
    assert!(e <= BAR, "single clip: rel L2 {e}");
    // padded batch, each clip against its own CPU pass
    let batch: Vec<HostTensor> = (0..3)
        .map(|_| {
            let (enc, _) = gpu
                .encode_batch(&[long.clone(), short.clone()])
                .expect("batch");
            gpu.backend().download(&enc).expect("download")
        })
        .collect();
    assert!(
        batch[0].data == batch[2].data,
        "batch: replay differs from eager"
    );
    for (i, w) in want.iter().enumerate() {
        let got = rows(&batch[0], i, w.shape[1]);
        let e = rel_l2(&got, &w.data);
        eprintln!("  batch clip {i} ({} frames): rel L2 {e:.2e}", w.shape[1]);
        assert!(e <= BAR, "batch clip {i}: rel L2 {e}");
    }
}
