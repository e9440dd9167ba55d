//! The attention layers' position projections made once per prepared shape
//! (`Parakeet::set_positions_once(true)`) against one GEMM per layer inside the pass: the
//! same GEMMs on the same inputs, so the encoder output must be bit-identical, and still match
//! transformers' encoder output (the bar of `fastconformer_parity.rs`), for a full clip and a
//! padded batch. A layer given another layer's projection moves the output far past the bar.

use stapes_core::tensor::rel_l2;
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::fastconformer::Parakeet;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The f32 parity bar of `fastconformer_parity.rs` (against transformers).
const BAR: f32 = 1e-4;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fastconformer")
}

fn read(name: &str) -> BTreeMap<String, HostTensor> {
    let st = stapes_formats::safetensors_dir::read_file(&fixtures().join(name)).expect("fixture");
    st.tensors
        .iter()
        .map(|(k, t)| {
            (
                k.clone(),
                HostTensor::new(t.shape.clone(), t.to_f32()).expect("fixture tensor"),
            )
        })
        .collect()
}

#[test]
fn positions_once_equal_positions_per_layer() {
    let inputs = read("inputs.safetensors");
    let want = read("expected.safetensors");
    let mut m = Parakeet::new(
        CpuBackend::new(2).expect("cpu"),
        &fixtures().join("tdt"),
        Lane::F32,
    )
    .expect("model");
    let jfk = &inputs["features.jfk"];
    let beckett = &inputs["features.beckett"];
    let short = HostTensor::new(
        vec![123, beckett.shape[1]],
        beckett.data[..123 * beckett.shape[1]].to_vec(),
    )
    .expect("cut");
    let mut outs = Vec::new();
    for once in [false, true] {
        m.set_positions_once(once);
        let one = m.encode_host(jfk).expect("encode");
        let one = m.backend().download(&one).expect("download");
        let e = rel_l2(&one.data, &want["tdt.encoder.jfk"].data);
        eprintln!("positions once = {once}: jfk vs transformers rel L2 {e:.2e}");
        assert!(e <= BAR, "positions once = {once}: rel L2 {e}");
        let (batch, _) = m
            .encode_batch(&[jfk.clone(), short.clone()])
            .expect("batch");
        outs.push((
            one.data,
            m.backend().download(&batch).expect("download").data,
        ));
    }
    assert!(outs[0].0 == outs[1].0, "single clip: once != per layer");
    assert!(outs[0].1 == outs[1].1, "padded batch: once != per layer");
}
