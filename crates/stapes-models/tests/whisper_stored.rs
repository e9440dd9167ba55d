//! `Whisper::from_weights` (weights built from the file's stored f16 values, what `stapes
//! transcribe` runs) against `Whisper::new` of the widened f32 checkpoint: the same encoder output
//! bit for bit and the same greedy ids per lane, and in the f32 lane faster-whisper float32's ids
//! (fixtures of tools/reference/whisper_fw.py). Needs the real weights (`$STAPES_CACHE`).

mod whisper_common;

use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::whisper::weights::{load_checkpoint, load_weights};
use stapes_models::whisper::Whisper;
use whisper_common::*;

fn ids(t: &stapes_models::transcript::Transcript) -> Vec<u32> {
    t.segments.iter().flat_map(|s| s.tokens.clone()).collect()
}

fn stored_equals_widened(name: &str) {
    let dir = cache().join("models").join(name);
    let ckpt = load_checkpoint(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch-models.sh)", dir.display()));
    let stored = load_weights(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    assert_eq!(stored.format, "ctranslate2");
    assert_eq!(stored.tensors.len(), ckpt.tensors.len());
    let r = reference();
    let samples = audio("jfk");
    // A non-constant mel window, so every weight matters.
    let n_mels = ckpt.config.n_mels;
    let mel = HostTensor::random(vec![3000, n_mels], 17, 1.0);
    for lane in [Lane::F32, Lane::Q8] {
        let wide = Whisper::new(CpuBackend::new(0).expect("cpu"), &ckpt, lane).expect("new");
        let lean = Whisper::from_weights(CpuBackend::new(0).expect("cpu"), &stored, lane)
            .expect("from_weights");
        let a = wide
            .backend()
            .download(&wide.encode_host(&mel).expect("encode"))
            .unwrap();
        let b = lean
            .backend()
            .download(&lean.encode_host(&mel).expect("encode"))
            .unwrap();
        assert_eq!(a.shape, b.shape);
        let differ = a
            .data
            .iter()
            .zip(&b.data)
            .filter(|(x, y)| x.to_bits() != y.to_bits())
            .count();
        assert_eq!(
            differ, 0,
            "{name} {lane}: encoder outputs differ in {differ} values"
        );
        let got_wide = wide
            .transcribe(&samples, &ref_options(1))
            .expect("transcribe");
        let got_lean = lean
            .transcribe(&samples, &ref_options(1))
            .expect("transcribe");
        assert_eq!(ids(&got_lean), ids(&got_wide), "{name} {lane}: greedy ids");
        if lane == Lane::F32 {
            let want: Vec<u32> = ref_segments(&r["models"][name]["clips"]["jfk"]["greedy"])
                .into_iter()
                .flat_map(|s| s.0)
                .collect();
            assert!(!want.is_empty(), "{name}: no reference ids for jfk");
            assert_eq!(
                ids(&got_lean),
                want,
                "{name} f32: ids vs faster-whisper float32"
            );
        }
    }
}

#[test]
fn stored_weights_build_the_widened_model_tiny_en() {
    stored_equals_widened("whisper-tiny.en");
}

#[test]
fn stored_weights_build_the_widened_model_base() {
    stored_equals_widened("whisper-base");
}
