//! Kernel launches per FastConformer block on the CUDA home: the parakeet-tdt-0.6b-v2 shapes
//! (d 1024, 8 heads, conv kernel 9) with random weights, an 11 s input (1100 feature frames),
//! one eager pass (graphs off, so every launch is counted), at 1 and 3 blocks: the difference
//! is the work of two blocks, the rest the subsampling and chain plumbing. Launches = the
//! backend's `ops` (its own kernels and batched matmuls) + its GEMM calls (one cuBLASLt kernel
//! each; a q8 GEMM's quantize and scaling kernels are in `ops`). The bar is what the fused
//! block needs in the f16 lane: 9 GEMMs (2 per feed-forward, q|k|v, positions, out-projection,
//! 2 pointwise convs; the residual adds in their epilogues) and 9 kernels (5 layer norms, 2
//! feed-forward activations, GLU+mask+depthwise+SiLU, the attention).
//! Without a CUDA device the test prints `SKIPPED (no CUDA device): <name>` and returns.

use stapes_core::{Backend, HostTensor, Lane};
use stapes_cuda::CudaBackend;
use stapes_models::fastconformer::{synthetic_checkpoint, Parakeet, ParakeetConfig};

#[allow(dead_code)] // the helpers the other FastConformer GPU tests use
mod fc_common;
use fc_common::gpu;

/// The f16 lane's launches per block (module docs): 9 GEMMs + 9 kernels.
const F16_BLOCK_BAR: f64 = 18.0;

/// Eager launches of one encoder pass over `(batch, 1100, mels)` features (after a warm pass).
fn launches(m: &Parakeet<CudaBackend>, batch: usize, mels: usize) -> u64 {
    let be = m.backend();
    let x = be
        .upload(&HostTensor::random(vec![batch, 1100, mels], 7, 1.0))
        .expect("upload");
    m.encode(&x).expect("warm pass");
    be.synchronize().expect("sync");
    let launches =
        |s: &stapes_core::counters::CounterSnapshot| s.ops + s.gemm_f32 + s.gemm_f16 + s.gemm_q8;
    let s0 = launches(&be.counters().snapshot());
    m.encode(&x).expect("counted pass");
    be.synchronize().expect("sync");
    launches(&be.counters().snapshot()) - s0
}

#[test]
fn parakeet_block_kernel_launches() {
    let Some(_g) = gpu("parakeet_block_kernel_launches") else {
        return;
    };
    let published = ParakeetConfig::published("parakeet-tdt-0.6b-v2").expect("published shape");
    let mels = published.encoder.num_mel_bins;
    std::env::set_var("STAPES_CUDA_GRAPHS", "0");
    let mut f16_per_block = Vec::new();
    for lane in [Lane::F16, Lane::Q8] {
        for batch in [1usize, 16] {
            let mut counts = Vec::new();
            for layers in [1usize, 3] {
                let mut cfg = published.clone();
                cfg.encoder.num_layers = layers;
                let ck = synthetic_checkpoint(&cfg, 0x5EED).expect("synthetic weights");
                let be = CudaBackend::new(0).expect("cuda opens");
                let m = Parakeet::from_checkpoint(be, &ck, lane).expect("model");
                assert!(!m.backend().graphs_enabled(), "graphs must be off to count");
                counts.push(launches(&m, batch, mels));
            }
            let per_block = (counts[1] as f64 - counts[0] as f64) / 2.0;
            let rest = counts[0] as f64 - per_block;
            eprintln!(
                "parakeet-tdt-0.6b-v2 shapes, {lane}, batch {batch}: {per_block} launches per \
                 block, {rest} outside the blocks; 24 blocks → {} per pass",
                rest + 24.0 * per_block
            );
            if lane == Lane::F16 {
                f16_per_block.push((batch, per_block));
            }
        }
    }
    std::env::remove_var("STAPES_CUDA_GRAPHS");
    for (batch, n) in f16_per_block {
        assert!(
            n <= F16_BLOCK_BAR,
            "f16, batch {batch}: {n} launches per block, the fused block needs {F16_BLOCK_BAR}"
        );
    }
}
