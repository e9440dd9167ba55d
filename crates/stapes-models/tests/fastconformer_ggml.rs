//! whisper.cpp Parakeet files (`ggml-parakeet-*.bin`): the tiny TDT fixture written in that layout
//! (tools/reference/parakeet_wcpp_ggml.py: NeMo names, squeezed shapes, LSTM gates reordered and
//! biases folded, matrices f16) gives the HF directory's weights back, and the same encoder output,
//! greedy steps and text as the HF directory with `xscaling` off (the format has no such flag and
//! whisper.cpp scales nothing). Damaged files are errors naming the file.

use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_formats::ggml::{self, GgmlKind};
use stapes_models::fastconformer::{load, load_hf, Parakeet};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fastconformer")
}

fn wcpp() -> PathBuf {
    fixtures().join("tdt-wcpp-f16.bin")
}

#[test]
fn whisper_cpp_file_has_the_hf_weights() {
    assert_eq!(ggml::kind(&wcpp()).unwrap(), GgmlKind::Parakeet);
    let g = load(&wcpp()).expect("the whisper.cpp file loads");
    let mut hf = load_hf(&fixtures().join("tdt")).unwrap();
    hf.config.encoder.scale_input = false;
    assert_eq!(g.config, hf.config);
    for (name, t) in &hf.tensors {
        let got = g
            .tensors
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(got.shape, t.shape, "{name}");
        if name.starts_with("decoder.lstm.bias_") {
            continue; // folded: checked below
        }
        assert_eq!(got.data, t.data, "{name}");
    }
    for l in 0..2 {
        let b = |m: &std::collections::BTreeMap<String, HostTensor>, k: &str| {
            m[&format!("decoder.lstm.bias_{k}_l{l}")].data.clone()
        };
        let folded: Vec<f32> = b(&hf.tensors, "ih")
            .iter()
            .zip(b(&hf.tensors, "hh"))
            .map(|(a, c)| a + c)
            .collect();
        assert_eq!(b(&g.tensors, "hh"), folded, "layer {l}: bias_ih + bias_hh");
        assert!(b(&g.tensors, "ih").iter().all(|&v| v == 0.0));
    }
}

#[test]
fn whisper_cpp_file_decodes_as_the_hf_directory() {
    let mut hf = load_hf(&fixtures().join("tdt")).unwrap();
    hf.config.encoder.scale_input = false;
    let a = Parakeet::new(CpuBackend::new(2).unwrap(), &wcpp(), Lane::F32).unwrap();
    let b = Parakeet::from_checkpoint(CpuBackend::new(2).unwrap(), &hf, Lane::F32).unwrap();
    let feats =
        stapes_formats::safetensors_dir::read_file(&fixtures().join("inputs.safetensors")).unwrap();
    let mut emitted = 0;
    for clip in ["jfk", "beckett", "lv0880"] {
        let raw = &feats.tensors[&format!("features.{clip}")];
        let f = HostTensor::new(raw.shape.clone(), raw.to_f32()).unwrap();
        let (ea, eb) = (a.encode_host(&f).unwrap(), b.encode_host(&f).unwrap());
        assert_eq!(
            a.backend().download(&ea).unwrap(),
            b.backend().download(&eb).unwrap(),
            "{clip}: encoder output"
        );
        let (da, db) = (a.greedy(&ea).unwrap(), b.greedy(&eb).unwrap());
        assert_eq!(da, db, "{clip}: greedy steps");
        assert_eq!(
            a.decode_text(&da.ids()).unwrap(),
            b.decode_text(&db.ids()).unwrap(),
            "{clip}: text from the file's pieces"
        );
        emitted += da.ids().len();
    }
    assert!(emitted > 0, "the fixture emits tokens");
}

#[test]
fn damaged_whisper_cpp_files_are_errors() {
    let bytes = std::fs::read(wcpp()).unwrap();
    let dir = std::env::temp_dir().join(format!("stapes-wcpp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("damaged.bin");
    // cut inside the header, the filterbank, the vocabulary and a tensor
    for cut in [40, 200, 90_000, bytes.len() - 7] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let e = load(&path)
            .err()
            .unwrap_or_else(|| panic!("cut at {cut} loads"));
        assert!(e.to_string().contains("damaged.bin"), "cut at {cut}: {e}");
    }
    // a vocabulary that does not match n_vocab
    let mut b = bytes.clone();
    b[4..8].copy_from_slice(&46i32.to_le_bytes());
    std::fs::write(&path, &b).unwrap();
    let e = load(&path).expect_err("n_vocab 46 loads");
    assert!(e.to_string().contains("vocabulary"), "{e}");
    // a front end stapes does not compute (n_fft 400: the filterbank no longer matches either)
    let mut b = bytes.clone();
    b[32..36].copy_from_slice(&400i32.to_le_bytes());
    std::fs::write(&path, &b).unwrap();
    assert!(load(&path).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
