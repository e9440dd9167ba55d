//! Encoder parity: stapes' encoder on faster-whisper's log-mel of jfk vs CTranslate2's float32
//! `encode` (fixture from tools/reference/whisper_fw.py). Needs the real weights.

mod whisper_common;

use stapes_core::tensor::rel_l2;
use stapes_core::{Backend, HostTensor, Lane};
use whisper_common::*;

/// (n_mels, frames) fixture → the first window `(3000, n_mels)` faster-whisper encodes: all frames
/// but the last, zero padded.
fn window(mel: &HostTensor) -> HostTensor {
    let (n_mels, frames) = (mel.shape[0], mel.shape[1]);
    let mut w = vec![0f32; 3000 * n_mels];
    for t in 0..(frames - 1).min(3000) {
        for m in 0..n_mels {
            w[t * n_mels + m] = mel.data[m * frames + t];
        }
    }
    HostTensor::new(vec![3000, n_mels], w).unwrap()
}

fn check(name: &str, lane: Lane, bar: f32) -> (f32, f32) {
    let fx = tensors();
    let mel = tensor(&fx, "jfk.mel");
    let head = tensor(&fx, &format!("{name}.enc_head"));
    let tail = tensor(&fx, &format!("{name}.enc_tail"));
    let m = model(name, lane);
    let out = m.encode_host(&window(&mel)).unwrap();
    let out = m.backend().download(&out).unwrap(); // (1, 1500, d)
    let d = head.shape[1];
    assert_eq!(out.shape, vec![1, 1500, d]);
    let n_head = head.shape[0];
    let n_tail = tail.shape[0];
    let e_head = rel_l2(&out.data[..n_head * d], &head.data);
    let e_tail = rel_l2(&out.data[(1500 - n_tail) * d..], &tail.data);
    eprintln!("{name} {lane}: rel L2 head {e_head:.2e}, tail {e_tail:.2e}");
    assert!(
        e_head <= bar && e_tail <= bar,
        "{name} {lane}: rel L2 head {e_head}, tail {e_tail} > {bar}"
    );
    (e_head, e_tail)
}

#[test]
fn encoder_f32_matches_ctranslate2_tiny_en() {
    check("whisper-tiny.en", Lane::F32, 1e-4);
}

#[test]
fn encoder_f32_matches_ctranslate2_base() {
    check("whisper-base", Lane::F32, 1e-4);
}

/// The q8 lane stays near the f32 reference. Bar 0.1: q8 weights carry ~0.4% relative error per
/// GEMM, compounding over conv + 6 blocks (measured 2.4e-2 on speech frames, 6.5e-2 on the
/// zero-padded tail whose activations are small); the q8 promise is identical text, tested in
/// whisper_decode. A zeroed block or a wrong scale lands far above 0.1.
#[test]
fn encoder_q8_near_ctranslate2_base() {
    check("whisper-base", Lane::Q8, 1e-1);
}

/// The bars catch faults: one zeroed 32-value block in one row of one f32 weight breaks the f32
/// bar; a zeroed attention output projection breaks the q8 bar.
#[test]
fn planted_faults_fail_the_bars() {
    use stapes_models::whisper::weights::load_checkpoint;
    let name = "whisper-base";
    let fx = tensors();
    let mel = window(&tensor(&fx, "jfk.mel"));
    let head = tensor(&fx, &format!("{name}.enc_head"));
    let d = head.shape[1];
    let err = |ckpt: &stapes_models::whisper::weights::WhisperCheckpoint, lane: Lane| {
        let m = stapes_models::whisper::Whisper::new(
            stapes_cpu::CpuBackend::new(0).unwrap(),
            ckpt,
            lane,
        )
        .unwrap();
        let out = m.backend().download(&m.encode_host(&mel).unwrap()).unwrap();
        rel_l2(&out.data[..head.shape[0] * d], &head.data)
    };
    let clean = load_checkpoint(&cache().join("models").join(name)).expect("weights");

    let mut block = clean.clone();
    let w = block
        .tensors
        .get_mut("model.encoder.layers.2.fc1.weight")
        .expect("fc1");
    w.data[..32].fill(0.0);
    let e = err(&block, Lane::F32);
    assert!(e > 1e-4, "a zeroed block stayed under the f32 bar: {e}");

    let mut proj = clean.clone();
    let w = proj
        .tensors
        .get_mut("model.encoder.layers.3.self_attn.out_proj.weight")
        .expect("out_proj");
    w.data.fill(0.0);
    let e = err(&proj, Lane::Q8);
    assert!(e > 1e-1, "a zeroed projection stayed under the q8 bar: {e}");
}
