//! Container-level tests on small reference files (tests/fixtures, written by
//! `tools/reference/whisper_formats_gguf.py` with llama.cpp's gguf-py: its writer, quantizers and
//! dequantizers are the reference).

use stapes_formats::gguf::{self, GgufValue};
use stapes_formats::{ggml, DType};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stapes-fmt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

#[test]
fn gguf_metadata_of_every_type() {
    let f = gguf::read(&fixture("types.gguf")).expect("read GGUF");
    assert_eq!(f.version, 3);
    assert_eq!(f.alignment, 64);
    let m = &f.metadata;
    assert_eq!(m["general.architecture"].as_str(), Some("stapes-test"));
    assert_eq!(m["test.u8"], GgufValue::U8(200));
    assert_eq!(m["test.i8"], GgufValue::I8(-5));
    assert_eq!(m["test.u16"], GgufValue::U16(60000));
    assert_eq!(m["test.i16"], GgufValue::I16(-30000));
    assert_eq!(m["test.u32"], GgufValue::U32(4_000_000_000));
    assert_eq!(m["test.i32"], GgufValue::I32(-2_000_000_000));
    assert_eq!(m["test.f32"], GgufValue::F32(0.25));
    assert_eq!(m["test.bool"], GgufValue::Bool(true));
    assert_eq!(m["test.string"].as_str(), Some("Grüße ♪"));
    assert_eq!(m["test.u64"], GgufValue::U64((1 << 40) + 3));
    assert_eq!(m["test.i64"], GgufValue::I64(-(1 << 40)));
    assert_eq!(m["test.f64"], GgufValue::F64(-1.5));
    let a: Vec<i64> = m["test.array_i32"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(a, vec![1, -2, 3]);
    let s: Vec<&str> = m["test.array_str"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(s, vec!["a", "bc", ""]);
}

/// Every ggml tensor type dequantizes to gguf-py's values.
#[test]
fn gguf_tensors_dequantize_like_gguf_py() {
    let f = gguf::read(&fixture("types.gguf")).unwrap();
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("types.gguf.json")).unwrap())
            .unwrap();
    let want = want["tensors"].as_object().unwrap();
    assert_eq!(f.tensors.len(), want.len());
    for (name, w) in want {
        let t = f.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(t.dtype.name(), w["type"].as_str().unwrap(), "{name}");
        let shape: Vec<usize> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(t.shape, shape, "{name}");
        let got = t.to_f32();
        let exp: Vec<f32> = w["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(got.len(), exp.len(), "{name}");
        for (i, (g, e)) in got.iter().zip(&exp).enumerate() {
            // gguf-py computes in f32 numpy with its own operation order: allow an ulp or so.
            assert!(
                (g - e).abs() <= 1e-6 * e.abs().max(1.0),
                "{name}[{i}]: {g} vs {e}"
            );
        }
    }
}

#[test]
fn gguf_truncations_and_garbage_are_errors() {
    let src = std::fs::read(fixture("types.gguf")).unwrap();
    let dir = scratch("gguf");
    let p = dir.join("cut.gguf");
    // Cutting only the final alignment padding leaves a valid file.
    let end = gguf::read(&fixture("types.gguf")).unwrap().data_end;
    assert!(end <= src.len() && end + 64 > src.len());
    for cut in 0..end {
        std::fs::write(&p, &src[..cut]).unwrap();
        let e = gguf::read(&p).expect_err("truncated GGUF accepted");
        assert!(e.to_string().contains("cut.gguf"), "cut {cut}: {e}");
    }
    let mut x = 0x2545_F491u32;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let mut b = src.clone();
        let at = x as usize % b.len();
        b[at] ^= (x >> 24) as u8 | 1;
        std::fs::write(&p, &b).unwrap();
        if let Ok(f) = gguf::read(&p) {
            for (_, t) in &f.tensors {
                let _ = t.to_f32(); // a flipped data byte is still data; it must not panic
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The legacy ggml container carries the same tensor types; write and read them back.
#[test]
fn ggml_round_trip_of_every_type() {
    let g = gguf::read(&fixture("types.gguf")).unwrap();
    let file = ggml::GgmlFile {
        path: PathBuf::new(),
        hparams: ggml::GgmlHparams {
            n_vocab: 3,
            n_audio_ctx: 1,
            n_audio_state: 1,
            n_audio_head: 1,
            n_audio_layer: 1,
            n_text_ctx: 1,
            n_text_state: 1,
            n_text_head: 1,
            n_text_layer: 1,
            n_mels: 2,
            ftype: 1,
        },
        mel_filters: ggml::MelFilters {
            n_mel: 2,
            n_fft: 3,
            data: vec![0.5, 0.0, -1.0, 2.0, 3.0, 4.0],
        },
        vocab: vec![b"a".to_vec(), vec![0xff, 0x00], Vec::new()],
        tensors: g.tensors.clone(),
    };
    let dir = scratch("ggml-types");
    let p = dir.join("t.bin");
    ggml::write(&p, &file).unwrap();
    assert_eq!(ggml::kind(&p).unwrap(), ggml::GgmlKind::Whisper);
    let back = ggml::read(&p).unwrap();
    assert_eq!(back.hparams, file.hparams);
    assert_eq!(back.mel_filters, file.mel_filters);
    assert_eq!(back.vocab, file.vocab);
    assert_eq!(back.tensors.len(), file.tensors.len());
    for ((n1, t1), (n2, t2)) in file.tensors.iter().zip(&back.tensors) {
        assert_eq!(n1, n2);
        assert_eq!((t1.dtype, &t1.shape), (t2.dtype, &t2.shape));
        assert_eq!(t1.bytes(), t2.bytes(), "{n1}");
    }
    assert!(back.tensors.iter().any(|(_, t)| t.dtype == DType::Q6K));
    let _ = std::fs::remove_dir_all(&dir);
}
