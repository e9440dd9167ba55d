//! GigaAM parity with the reference package (salute-developers/GigaAM): tiny random-weight v3 CTC,
//! v3 RNNT and v1 CTC models saved as the package's `.ckpt` (`{"cfg": DictConfig, "state_dict"}`),
//! run on the log-mel of three real speech clips (fixtures from tools/reference/gigaam_ckpt.py).
//! Encoder output within 1e-4 relative L2; greedy ids, token frames, RNNT steps and text
//! identical; on the scalar reference backend and the CPU home; then from raw samples through
//! stapes' own front end, and the loader's refusals.

use serde_json::Value;
use stapes_core::reference::ReferenceBackend;
use stapes_core::tensor::rel_l2;
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cpu::CpuBackend;
use stapes_models::gigaam::{load, Gigaam};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MODELS: [&str; 3] = ["v3_ctc", "v3_rnnt", "v1_ctc"];
const CLIPS: [&str; 3] = ["jfk", "beckett", "lv0880"];
/// f32 everywhere; what remains is summation order and f32 transcendentals.
const ENCODER_BAR: f32 = 1e-4;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gigaam")
}

fn read_tensors(name: &str) -> BTreeMap<String, HostTensor> {
    let st =
        stapes_formats::safetensors_dir::read_file(&fixtures().join(name)).expect("fixture reads");
    st.tensors
        .iter()
        .map(|(k, t)| {
            (
                k.clone(),
                HostTensor::new(t.shape.clone(), t.to_f32()).unwrap(),
            )
        })
        .collect()
}

fn expected() -> Value {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json parses")
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

fn model<B: Backend>(b: B, name: &str) -> Gigaam<B> {
    Gigaam::new(b, &fixtures().join(format!("{name}.ckpt")), Lane::F32).expect("model loads")
}

/// Encoder, greedy ids, frames (RNNT: every step) and text of every clip against the package.
fn parity<B: Backend>(b: B, name: &str) {
    let exp = expected();
    let m = model(b, name);
    let e = &exp["models"][name];
    let front = e["front_end"].as_str().unwrap();
    let inputs = read_tensors("inputs.safetensors");
    let outputs = read_tensors("expected.safetensors");
    for clip in CLIPS {
        let feats = &inputs[&format!("features.{front}.{clip}")];
        let enc = m.encode_host(feats).expect("encode");
        let got = m.backend().download(&enc).expect("download");
        let want = &outputs[&format!("{name}.encoder.{clip}")];
        assert_eq!(
            &got.shape[1..],
            &want.shape[..],
            "{name} {clip}: encoder shape"
        );
        let err = rel_l2(&got.data, &want.data);
        assert!(
            err <= ENCODER_BAR,
            "{name} {clip}: encoder rel L2 {err:.2e}"
        );
        let r = &e["results"][clip];
        let d = m.greedy(&enc).expect("greedy");
        assert_eq!(d.ids(), u32s(&r["ids"]), "{name} {clip}: ids");
        let frames: Vec<usize> = d.tokens.iter().map(|s| s.frame).collect();
        assert_eq!(frames, usizes(&r["frames"]), "{name} {clip}: token frames");
        if let Some(steps) = r["steps"].as_array() {
            let want: Vec<(u32, usize)> = steps
                .iter()
                .map(|s| {
                    (
                        s[0].as_u64().unwrap() as u32,
                        s[1].as_u64().unwrap() as usize,
                    )
                })
                .collect();
            let got: Vec<(u32, usize)> = d.steps.iter().map(|s| (s.token, s.frame)).collect();
            assert_eq!(got, want, "{name} {clip}: transducer steps");
        }
        let text = m.decode_text(&d.ids()).expect("text");
        assert_eq!(text, r["text"].as_str().unwrap(), "{name} {clip}: text");
    }
}

#[test]
fn v3_ctc_matches_gigaam_on_the_reference_backend() {
    parity(ReferenceBackend::new(), "v3_ctc");
}

#[test]
fn v3_rnnt_matches_gigaam_on_the_reference_backend() {
    parity(ReferenceBackend::new(), "v3_rnnt");
}

#[test]
fn v1_ctc_matches_gigaam_on_the_reference_backend() {
    parity(ReferenceBackend::new(), "v1_ctc");
}

#[test]
fn every_model_matches_gigaam_on_the_cpu_home() {
    for name in MODELS {
        parity(CpuBackend::new(2).unwrap(), name);
    }
}

/// The three clips as one padded batch (`encode_batch`), the second and third cut short (the
/// fixtures' clips are of one length): the whole clip's rows match the package's encoder and
/// ids; each cut clip's rows match the encoder run on that cut alone (which is the path the
/// package parity above covers), ids too.
fn batched_parity<B: Backend>(b: B, name: &str) {
    let exp = expected();
    let m = model(b, name);
    let e = &exp["models"][name];
    let front = e["front_end"].as_str().unwrap();
    let inputs = read_tensors("inputs.safetensors");
    let outputs = read_tensors("expected.safetensors");
    // feature frames kept of each clip: all, then two cuts that end mid-stride
    let keep = |t: usize, i: usize| [t, t * 2 / 3 + 1, t / 3 + 2][i];
    let feats: Vec<HostTensor> = CLIPS
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = &inputs[&format!("features.{front}.{c}")];
            let (t, mels) = (f.shape[0], f.shape[1]);
            let n = keep(t, i);
            HostTensor::new(vec![n, mels], f.data[..n * mels].to_vec()).unwrap()
        })
        .collect();
    let (enc, lens) = m.encode_batch(&feats).expect("batched encode");
    assert!(
        lens[1] < lens[0] && lens[2] < lens[1],
        "{name}: the clips should differ in length, got {lens:?}"
    );
    let bk = m.backend();
    for (i, clip) in CLIPS.iter().enumerate() {
        let one = bk.slice(&enc, 0, i, 1).expect("slice");
        let one = bk.slice(&one, 1, 0, lens[i]).expect("slice");
        let got = bk.download(&one).expect("download");
        let d = m.greedy(&one).expect("greedy");
        let (want, ids) = if i == 0 {
            let r = &e["results"][*clip];
            (
                outputs[&format!("{name}.encoder.{clip}")].clone(),
                u32s(&r["ids"]),
            )
        } else {
            let alone = m.encode_host(&feats[i]).expect("alone");
            let ids = m.greedy(&alone).expect("greedy alone").ids();
            let mut h = bk.download(&alone).expect("download");
            h.shape.remove(0);
            (h, ids)
        };
        assert_eq!(&got.shape[1..], &want.shape[..], "{name} {clip}: frames");
        let err = rel_l2(&got.data, &want.data);
        assert!(
            err <= ENCODER_BAR,
            "{name} {clip} in a batch: encoder rel L2 {err:.2e}"
        );
        assert_eq!(d.ids(), ids, "{name} {clip} in a batch: ids");
    }
}

#[test]
fn batched_clips_match_gigaam_on_the_reference_backend() {
    for name in MODELS {
        batched_parity(ReferenceBackend::new(), name);
    }
}

#[test]
fn batched_clips_match_gigaam_on_the_cpu_home() {
    for name in MODELS {
        batched_parity(CpuBackend::new(2).unwrap(), name);
    }
}

/// `transcribe_batch` of jfk cut at three lengths gives what `transcribe` gives each alone;
/// a clip past the one-pass limit is refused by name, as alone.
#[test]
fn transcribe_batch_equals_one_by_one() {
    for name in ["v3_ctc", "v3_rnnt"] {
        let m = model(CpuBackend::new(2).unwrap(), name);
        let clips: Vec<Vec<f32>> = [176_000, 56_000, 112_000].iter().map(|&n| jfk(n)).collect();
        let refs: Vec<&[f32]> = clips.iter().map(Vec::as_slice).collect();
        let batched = m.transcribe_batch(&refs).expect("batch");
        assert_eq!(batched.len(), clips.len());
        for (c, got) in refs.iter().zip(&batched) {
            let want = m.transcribe(c).expect("alone");
            let ids = |t: &stapes_models::transcript::Transcript| -> Vec<u32> {
                t.segments.iter().flat_map(|s| s.tokens.clone()).collect()
            };
            assert!(
                !ids(&want).is_empty(),
                "{name}: the clip decodes to something"
            );
            assert_eq!(ids(got), ids(&want), "{name}: ids in a batch");
            assert_eq!(got.text(), want.text(), "{name}: text in a batch");
            assert_eq!(got.duration, want.duration);
        }
    }
}

/// The first `n` samples of the repo's jfk.wav, as the package's `load_audio` scales them.
fn jfk(n: usize) -> Vec<f32> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/jfk.wav");
    let mut r = hound::WavReader::open(&path).expect("samples/jfk.wav opens");
    r.samples::<i16>()
        .take(n)
        .map(|s| s.unwrap() as f32 / 32768.0)
        .collect()
}

/// From raw samples through stapes' own front end (the package's FeatureExtractor made the
/// expected features and ids from the same samples).
#[test]
fn transcribes_jfk_from_samples() {
    let exp = expected();
    let outputs = read_tensors("expected.safetensors");
    for name in ["v3_ctc", "v3_rnnt"] {
        let want = &exp["models"][name]["e2e"];
        let samples = jfk(want["samples"].as_u64().unwrap() as usize);
        let m = model(CpuBackend::new(2).unwrap(), name);
        let feats = m.features(&samples).expect("features");
        let ref_feats = &outputs["e2e_features.v3.jfk"];
        assert_eq!(feats.shape, ref_feats.shape, "{name}: feature frames");
        // the bars of stapes-audio's front-end test against the package with float32 buffers
        // (float32 FFT rounding in the quietest bins shows through the log): 1.5e-2 max, 3e-5
        // mean absolute
        let diffs: Vec<f32> = feats
            .data
            .iter()
            .zip(&ref_feats.data)
            .map(|(a, b)| (a - b).abs())
            .collect();
        let max = diffs.iter().fold(0f32, |m, &d| m.max(d));
        let mean = diffs.iter().sum::<f32>() / diffs.len() as f32;
        assert!(
            max <= 1.5e-2 && mean <= 3e-5,
            "{name}: features max {max:.2e} mean {mean:.2e}"
        );
        let t = m.transcribe(&samples).expect("transcribe");
        let ids: Vec<u32> = t.segments.iter().flat_map(|s| s.tokens.clone()).collect();
        assert_eq!(ids, u32s(&want["ids"]), "{name}: ids");
        let text = want["text"].as_str().unwrap();
        let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(squeeze(&t.text()), squeeze(text), "{name}: text");
        // Segments start at their first token's 40 ms frame and stay inside the audio; words
        // spell the text in time order.
        let first = usizes(&want["frames"])[0];
        assert!((t.segments[0].start - first as f64 * m.frame_seconds()).abs() < 1e-9);
        assert!(t
            .segments
            .iter()
            .all(|s| s.start <= s.end && s.end <= t.duration + 1e-9));
        let words: Vec<_> = t
            .segments
            .iter()
            .flat_map(|s| s.words.clone().unwrap())
            .collect();
        let joined: Vec<&str> = words.iter().map(|w| w.word.as_str()).collect();
        assert_eq!(joined.join(" "), squeeze(text), "{name}: words");
        assert!(words
            .windows(2)
            .all(|w| w[0].start <= w[1].start && w[0].start < w[0].end));
    }
}

/// The checkpoint's cfg read as the package reads it.
#[test]
fn the_checkpoint_config_is_read_from_its_omegaconf_cfg() {
    use stapes_models::gigaam::{AttentionKind, ConvNorm, Subsampling, Vocabulary};
    let exp = expected();
    for name in MODELS {
        let ck = load(&fixtures().join(format!("{name}.ckpt"))).expect("loads");
        let c = &ck.config;
        let cfg = &exp["models"][name]["cfg"];
        assert_eq!(c.name.as_deref(), cfg["model_name"].as_str());
        assert_eq!(
            c.num_classes,
            exp["models"][name]["num_classes"].as_u64().unwrap() as usize
        );
        assert_eq!(
            c.encoder.n_layers as u64,
            cfg["encoder"]["n_layers"].as_u64().unwrap()
        );
        assert_eq!(
            c.encoder.d_model as u64,
            cfg["encoder"]["d_model"].as_u64().unwrap()
        );
        let v1 = name == "v1_ctc";
        assert_eq!(c.encoder.subsampling == Subsampling::Conv2d, v1);
        assert_eq!(c.encoder.attention == AttentionKind::RelPos, v1);
        assert_eq!(c.encoder.conv_norm == ConvNorm::BatchNorm, v1);
        // v1 leaves the front end to the FeatureExtractor's defaults: n_fft 400, centred
        assert_eq!(c.frontend.n_fft, if v1 { 400 } else { 320 });
        assert_eq!(c.frontend.center, v1);
        match &c.vocabulary {
            Vocabulary::Chars(v) => {
                let want: Vec<&str> = exp["vocabulary"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_str().unwrap())
                    .collect();
                assert_eq!(v, &want);
            }
            other => panic!("{name}: vocabulary {other:?}"),
        }
    }
}

/// A damaged or foreign file is refused with an error naming the file and the problem.
#[test]
fn bad_checkpoints_are_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("stapes-gigaam-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read(fixtures().join("v3_ctc.ckpt")).unwrap();
    let err = |bytes: &[u8], what: &str| -> String {
        let p = dir.join(format!("{what}.ckpt"));
        std::fs::write(&p, bytes).unwrap();
        let e = match load(&p) {
            Ok(_) => panic!("{what}: loaded"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(&p.display().to_string()), "{what}: {e}");
        e
    };
    // cut in half: the zip directory at the end is gone
    let e = err(&good[..good.len() / 2], "truncated");
    assert!(e.contains("zip"), "{e}");
    // empty file
    let e = err(&[], "empty");
    assert!(e.contains("zip"), "{e}");
    // a tensor renamed: its name is reported
    let needle = b"encoder.layers.1.conv.pointwise_conv2.bias";
    let at = good
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the tensor name is in the pickle");
    let mut renamed = good.clone();
    renamed[at + needle.len() - 4..at + needle.len()].copy_from_slice(b"bIas");
    let e = err(&renamed, "renamed");
    assert!(
        e.contains("pointwise_conv2.bias") && e.contains("missing"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Worst encoder relative L2 over the clips of `name` in `lane` on the CPU home, against the
/// package's f32 output; `fault` zeroes one weight first.
fn lane_error(name: &str, lane: Lane, fault: Option<&str>) -> f32 {
    let exp = expected();
    let front = exp["models"][name]["front_end"]
        .as_str()
        .unwrap()
        .to_string();
    let mut ck = load(&fixtures().join(format!("{name}.ckpt"))).expect("loads");
    if let Some(t) = fault {
        ck.tensors.get_mut(t).expect("tensor").data.fill(0.0);
    }
    let m = Gigaam::from_checkpoint(CpuBackend::new(2).unwrap(), &ck, lane).expect("model");
    let (inputs, outputs) = (
        read_tensors("inputs.safetensors"),
        read_tensors("expected.safetensors"),
    );
    CLIPS
        .iter()
        .map(|clip| {
            let enc = m
                .encode_host(&inputs[&format!("features.{front}.{clip}")])
                .expect("encode");
            let got = m.backend().download(&enc).expect("download");
            rel_l2(&got.data, &outputs[&format!("{name}.encoder.{clip}")].data)
        })
        .fold(0f32, f32::max)
}

/// The CPU q8 lane's bar: weights and activations both in 32-blocks with an amax/127 step, each
/// rounding ~0.5 % rms of a Gaussian block (step/√12 against amax ≈ 2.2σ), ~0.7 % a GEMM; about 18
/// GEMM inputs in sequence over two blocks give √18 × 0.7 % ≈ 3 % undamped; bar ×1.6.
const CPU_Q8_BAR: f32 = 5e-2;

/// The CPU home's f16 and q8 lanes. f16: the fixtures' weights are f16 values, so the lane
/// stores them exactly and the f32 bar holds, and greedy ids are identical. q8: within
/// [`CPU_Q8_BAR`]; a zeroed attention output projection must break it.
#[test]
fn cpu_lanes_stay_within_their_bars() {
    for name in MODELS {
        let f16 = lane_error(name, Lane::F16, None);
        let q8 = lane_error(name, Lane::Q8, None);
        eprintln!("{name}: f16 rel L2 {f16:.2e}, q8 {q8:.2e}");
        assert!(f16 <= ENCODER_BAR, "{name}: f16 rel L2 {f16:.2e}");
        assert!(q8 <= CPU_Q8_BAR, "{name}: q8 rel L2 {q8:.2e}");
    }
    let fault = lane_error(
        "v3_ctc",
        Lane::Q8,
        Some("encoder.layers.1.self_attn.linear_out.weight"),
    );
    eprintln!("q8 with a zeroed layer-1 linear_out: rel L2 {fault:.2e}");
    assert!(
        fault > CPU_Q8_BAR,
        "a zeroed linear_out stayed under the q8 bar: {fault:.2e}"
    );
    let exp = expected();
    let inputs = read_tensors("inputs.safetensors");
    for name in MODELS {
        let m = Gigaam::new(
            CpuBackend::new(2).unwrap(),
            &fixtures().join(format!("{name}.ckpt")),
            Lane::F16,
        )
        .unwrap();
        let front = exp["models"][name]["front_end"].as_str().unwrap();
        for clip in CLIPS {
            let enc = m
                .encode_host(&inputs[&format!("features.{front}.{clip}")])
                .unwrap();
            let d = m.greedy(&enc).unwrap();
            let want = u32s(&exp["models"][name]["results"][clip]["ids"]);
            assert_eq!(d.ids(), want, "{name} {clip}: f16 ids");
        }
    }
}

/// An e2e-style checkpoint (`decoding.vocabulary` None, `decoding.model_path` a SentencePiece
/// model that is not on this machine): the tokenizer is found beside the checkpoint as
/// `<name>_tokenizer.model`, and ids and text equal gigaam's own decoding with it
/// (tools/reference/gigaam_e2e_tokenizer.py); without that file the load is refused by name.
#[test]
fn sentencepiece_vocabulary_from_beside_the_checkpoint() {
    use stapes_models::gigaam::Vocabulary;
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("expected_e2e.json")).expect("expected_e2e.json"),
    )
    .expect("parses");
    let inputs = read_tensors("inputs.safetensors");
    let m = model(CpuBackend::new(2).unwrap(), "v3_e2e_rnnt");
    assert_eq!(m.config.vocabulary, Vocabulary::SentencePiece);
    for clip in CLIPS {
        let want = &exp["clips"][clip];
        let enc = m
            .encode_host(&inputs[&format!("features.v3.{clip}")])
            .unwrap();
        let d = m.greedy(&enc).unwrap();
        assert_eq!(d.ids(), u32s(&want["ids"]), "{clip}: ids");
        let text = m.decode_text(&d.ids()).unwrap();
        assert_eq!(text, want["text"].as_str().unwrap(), "{clip}: text");
    }
    let dir = std::env::temp_dir().join(format!("stapes-gigaam-spm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let alone = dir.join("v3_e2e_rnnt.ckpt");
    std::fs::copy(fixtures().join("v3_e2e_rnnt.ckpt"), &alone).unwrap();
    let e = match load(&alone) {
        Ok(_) => panic!("loaded without its tokenizer"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("v3_e2e_rnnt_tokenizer.model"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Past the package's position table (5000 encoder frames, 200 s) one pass is refused with the
/// way out named, before any encoder work.
#[test]
fn one_pass_past_the_position_table_is_refused() {
    let m = model(CpuBackend::new(2).unwrap(), "v3_ctc");
    let e = match m.transcribe(&vec![0.0; 16_000 * 201]) {
        Ok(_) => panic!("201 s ran in one pass"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("5000") && e.contains("--vad"), "{e}");
    assert!(m.transcribe(&vec![0.0; 16_000 * 30]).is_ok(), "30 s runs");
}
