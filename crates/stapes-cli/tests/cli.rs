//! The CLI contract of design.md §6: outputs, exit codes, one clear line per error.

mod cli_common;

use cli_common::*;
use std::path::PathBuf;
use std::process::Command;

fn sample(name: &str) -> String {
    repo().join("samples").join(name).display().to_string()
}

/// The real weights these tests need; missing weights fail the test with the command to run.
fn model(name: &str) -> String {
    let p = cache().join("models").join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh all",
        p.display()
    );
    p.display().to_string()
}

const JFK: &str = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country.";

fn normalise(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace())
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

#[test]
fn default_transcribe_prints_the_jfk_sentence() {
    model("whisper-base");
    let o = stapes(&["transcribe", &sample("jfk.wav")]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert_eq!(
        normalise(&String::from_utf8_lossy(&o.stdout)),
        normalise(JFK)
    );
}

#[test]
fn json_output_has_the_contract_fields() {
    let m = model("whisper-tiny.en");
    let o = stapes(&[
        "transcribe",
        "-m",
        &m,
        "--beam-size",
        "1",
        "-f",
        "json",
        &sample("jfk.mp3"),
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    for key in [
        "file", "text", "language", "family", "device", "lane", "segments",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["family"], "whisper");
    assert_eq!(v["device"], "cpu");
    assert_eq!(v["lane"], "f32");
    let segs = v["segments"].as_array().expect("segments array");
    assert!(!segs.is_empty());
    let eot = 50256; // tiny.en's end-of-text: never part of a segment's tokens
    for s in segs {
        let toks = s["tokens"].as_array().expect("tokens");
        assert!(!toks.is_empty());
        assert!(toks.iter().all(|t| t.as_u64() != Some(eot)));
        assert!(s["end"].as_f64() >= s["start"].as_f64());
    }
}

fn write_tmp(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stapes-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write temp file");
    p
}

/// One second of 16 kHz mono float32 WAV, sample 8000 a NaN.
fn float_wav_with_nan() -> Vec<u8> {
    let n: u32 = 16_000;
    let mut b = Vec::new();
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + 4 * n).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    for v in [16u32, 3 | (1 << 16), 16_000, 64_000, 4 | (32 << 16)] {
        b.extend_from_slice(&v.to_le_bytes()); // size, (float, mono), rate, bytes/s, (align, bits)
    }
    b.extend_from_slice(b"data");
    b.extend_from_slice(&(4 * n).to_le_bytes());
    for i in 0..n {
        let v = if i == 8000 { f32::NAN } else { 0.01 };
        b.extend_from_slice(&v.to_le_bytes());
    }
    b
}

/// Bad audio: exit 3 and exactly one line on stderr naming the problem.
#[test]
fn bad_audio_exits_3_with_one_line() {
    let m = model("whisper-tiny.en");
    let wav = std::fs::read(repo().join("samples/jfk.wav")).expect("jfk.wav");
    let mut noise = Vec::new();
    let mut s = 0x2545F4914F6CDD1Du64;
    for _ in 0..50_000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        noise.push((s >> 32) as u8);
    }
    let mut zero_rate = wav.clone();
    zero_rate[24..28].copy_from_slice(&0u32.to_le_bytes());
    let cases: Vec<(&str, PathBuf)> = vec![
        ("truncated wav", write_tmp("trunc.wav", &wav[..30])),
        ("0 Hz header", write_tmp("zero-rate.wav", &zero_rate)),
        ("a NaN sample", write_tmp("nan.wav", &float_wav_with_nan())),
        ("random bytes", write_tmp("noise.bin", &noise)),
        ("empty file", write_tmp("empty.wav", b"")),
        (
            "text file",
            write_tmp("notes.txt", b"this is not audio, it is a note\n"),
        ),
        ("directory", std::env::temp_dir()),
        (
            "missing file",
            PathBuf::from("/nonexistent/stapes/audio.wav"),
        ),
    ];
    for (what, path) in cases {
        let o = stapes(&["transcribe", "-m", &m, &path.display().to_string()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{what}: stderr: {err}");
        assert_eq!(
            err.trim().lines().count(),
            1,
            "{what}: want one line, got: {err}"
        );
        assert!(err.starts_with("stapes: "), "{what}: {err}");
    }
}

/// An English-only model transcribes English whatever language is asked, with a warning (as
/// whisper.cpp), but an unknown language code is a usage error (exit 2).
#[test]
fn english_only_model_and_the_language_flag() {
    let m = model("whisper-tiny.en");
    let o = stapes(&[
        "transcribe",
        "-m",
        &m,
        "--language",
        "xx",
        &sample("jfk.wav"),
    ]);
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
    assert!(
        stderr(&o).contains("unknown language `xx`"),
        "{}",
        stderr(&o)
    );
    let o = stapes(&[
        "transcribe",
        "-m",
        &m,
        "--language",
        "de",
        &sample("jfk.wav"),
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert!(stderr(&o).contains("English-only"), "{}", stderr(&o));
    let text = normalise(&String::from_utf8_lossy(&o.stdout));
    assert!(
        text.contains("ask not what your country can do for you"),
        "{text}"
    );
}

#[test]
fn bad_model_exits_3() {
    let junk = write_tmp("model.bin", b"\x06\x00\x00\x00garbage");
    let o = stapes(&[
        "transcribe",
        "-m",
        &junk.display().to_string(),
        &sample("jfk.wav"),
    ]);
    assert_eq!(o.status.code(), Some(3), "stderr: {}", stderr(&o));
    let o = stapes(&["transcribe", "-m", "no-such-model", &sample("jfk.wav")]);
    assert_eq!(o.status.code(), Some(3), "stderr: {}", stderr(&o));
    assert!(stderr(&o).contains("fetch-models"));
}

#[test]
fn bad_flags_exit_2() {
    for args in [
        vec!["transcribe", "--lane", "int4", "x.wav"],
        vec!["transcribe", "-f", "docx", "x.wav"],
        vec!["transcribe", "--task", "summarise", "x.wav"],
        vec!["transcribe", "--device", "tpu", "x.wav"],
        vec!["transcribe", "--beam-size", "0", "x.wav"],
        vec!["transcribe"],
        vec!["frobnicate"],
    ] {
        let o = stapes(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: stderr: {}", stderr(&o));
    }
}

#[test]
fn f32_on_a_gpu_or_a_missing_gpu_exits_4() {
    let m = model("whisper-tiny.en");
    let o = stapes(&[
        "transcribe",
        "-m",
        &m,
        "--device",
        "cuda",
        "--lane",
        "f32",
        &sample("jfk.wav"),
    ]);
    assert_eq!(o.status.code(), Some(4), "stderr: {}", stderr(&o));
    let o = stapes(&[
        "transcribe",
        "-m",
        &m,
        "--device",
        "vulkan",
        &sample("jfk.wav"),
    ]);
    assert_eq!(o.status.code(), Some(4), "stderr: {}", stderr(&o));
}

/// Several inputs with `-o DIR`: one transcript per input, named by its stem; two inputs whose
/// transcripts would share a name are refused (exit 2) before anything is written.
#[test]
fn several_inputs_into_a_directory_and_name_clashes() {
    let m = model("whisper-tiny.en");
    let root = std::env::temp_dir().join(format!("stapes-several-{}", std::process::id()));
    let (a, b) = (root.join("a"), root.join("b"));
    std::fs::create_dir_all(&a).expect("temp dir");
    std::fs::create_dir_all(&b).expect("temp dir");
    let wav = std::fs::read(repo().join("samples/jfk.wav")).expect("jfk.wav");
    for p in [a.join("x.wav"), b.join("x.wav"), a.join("y.wav")] {
        std::fs::write(&p, &wav).expect("write wav");
    }
    let out = root.join("out");
    let s = |p: PathBuf| p.display().to_string();
    let o = stapes(&[
        "transcribe",
        "-m",
        &m,
        "--beam-size",
        "1",
        "-o",
        &s(out.clone()),
        &s(a.join("x.wav")),
        &s(b.join("x.wav")),
    ]);
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
    assert!(stderr(&o).contains("x.txt"), "{}", stderr(&o));
    assert!(!out.exists(), "nothing is written");
    let o = stapes(&[
        "transcribe",
        "-m",
        &m,
        "--beam-size",
        "1",
        "-o",
        &s(out.clone()),
        &s(a.join("x.wav")),
        &s(a.join("y.wav")),
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    for name in ["x.txt", "y.txt"] {
        let text = std::fs::read_to_string(out.join(name)).expect(name);
        assert!(
            normalise(&text).contains("ask not what your country"),
            "{name}: {text}"
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// srt / vtt / json written for a multi-segment file parse with independent parsers (the `srt` and
/// `webvtt-py` PyPI packages, json by Python's), with monotonic timestamps. `.ci/run` installs
/// them; a missing package fails this test with the pip command.
#[test]
fn subtitle_outputs_parse_with_independent_parsers() {
    let m = model("whisper-tiny.en");
    let dir = std::env::temp_dir().join(format!("stapes-subs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let beckett = cache().join("audio/beckett.wav").display().to_string();
    for (fmt, ext) in [("srt", "srt"), ("vtt", "vtt"), ("verbose_json", "json")] {
        let out = dir.join(format!("out.{ext}"));
        let o = stapes(&[
            "transcribe",
            "-m",
            &m,
            "--beam-size",
            "1",
            "-f",
            fmt,
            "-o",
            &out.display().to_string(),
            &beckett,
        ]);
        assert!(o.status.success(), "{fmt}: {}", stderr(&o));
    }
    let script = r#"
import json, sys
d = sys.argv[1]
try:
    import srt, webvtt
except ImportError as e:
    sys.exit(f"missing parser ({e}): python3 -m pip install srt==3.5.3 webvtt-py==0.5.1")
subs = list(srt.parse(open(d + "/out.srt").read()))
assert len(subs) >= 2, subs
starts = [s.start.total_seconds() for s in subs]
assert starts == sorted(starts), starts
assert all(s.end >= s.start for s in subs)
cues = webvtt.read(d + "/out.vtt")
assert len(cues) == len(subs), (len(cues), len(subs))
vs = [c.start_in_seconds for c in cues]
assert vs == sorted(vs) and all(c.end_in_seconds >= c.start_in_seconds for c in cues)
j = json.load(open(d + "/out.json"))
js = [s["start"] for s in j["segments"]]
assert js == sorted(js) and all(s["end"] >= s["start"] for s in j["segments"])
assert [c.text for c in cues] == [s.content for s in subs]
print(len(subs), "cues")
"#;
    let o = Command::new("python3")
        .args(["-c", script, &dir.display().to_string()])
        .output()
        .expect("python3 runs");
    assert!(
        o.status.success(),
        "independent parsers rejected the output: {}{}",
        String::from_utf8_lossy(&o.stdout),
        stderr(&o)
    );
}

/// `stapes transcribe` on a Parakeet TDT model (the tiny random-weight HF fixture and the `.nemo`
/// of the same weights): the ids transformers' `generate` produced for the same audio.
#[test]
fn parakeet_tdt_through_the_cli_matches_transformers() {
    let fx = repo().join("crates/stapes-models/tests/fixtures/fastconformer");
    let exp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fx.join("expected.json")).expect("expected.json"))
            .expect("json");
    let n = exp["clips"]["jfk"]["samples"].as_u64().expect("samples") as usize;
    let want: Vec<u64> = exp["models"]["tdt"]["end_to_end_jfk"]["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_u64().expect("id"))
        .collect();
    let jfk = stapes::audio::load_file(&repo().join("samples/jfk.wav")).expect("jfk");
    let clip = write_tmp("jfk-cut.wav", b"");
    write_wav_16k(&clip, &jfk[..n.min(jfk.len())]);
    for model in [fx.join("tdt"), fx.join("tdt.nemo")] {
        let o = stapes(&[
            "transcribe",
            "-m",
            &model.display().to_string(),
            "-f",
            "json",
            &clip.display().to_string(),
        ]);
        assert!(o.status.success(), "{}: {}", model.display(), stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(v["family"], "parakeet");
        let got: Vec<u64> = v["segments"]
            .as_array()
            .expect("segments")
            .iter()
            .flat_map(|s| s["tokens"].as_array().cloned().unwrap_or_default())
            .map(|t| t.as_u64().expect("id"))
            .collect();
        assert_eq!(got, want, "{}", model.display());
    }
}

/// A Parakeet model cannot translate: `--task translate` is a usage error (exit 2) instead of a
/// transcript in the spoken language; a language or prompt is ignored with a warning.
#[test]
fn parakeet_refuses_translation_and_warns_on_a_language() {
    let tdt = repo()
        .join("crates/stapes-models/tests/fixtures/fastconformer/tdt")
        .display()
        .to_string();
    let o = stapes(&[
        "transcribe",
        "-m",
        &tdt,
        "--task",
        "translate",
        &sample("jfk.wav"),
    ]);
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
    assert!(stderr(&o).contains("translation needs"), "{}", stderr(&o));
    let o = stapes(&[
        "transcribe",
        "-m",
        &tdt,
        "--language",
        "de",
        &sample("jfk.wav"),
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert!(
        stderr(&o).contains("no language or prompt"),
        "{}",
        stderr(&o)
    );
}

/// A GigaAM `.ckpt` through the CLI (format sniffed from content): the ids the gigaam package
/// produced from the same audio, `gigaam` as the family; translation refused like Parakeet's;
/// `inspect` names the family and the checkpoint's layout.
#[test]
fn gigaam_checkpoints_through_the_cli() {
    let fx = repo().join("crates/stapes-models/tests/fixtures/gigaam");
    let exp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fx.join("expected.json")).expect("expected.json"))
            .expect("json");
    let jfk = stapes::audio::load_file(&repo().join("samples/jfk.wav")).expect("jfk");
    for name in ["v3_ctc", "v3_rnnt"] {
        let e2e = &exp["models"][name]["e2e"];
        let n = e2e["samples"].as_u64().expect("samples") as usize;
        let want: Vec<u64> = e2e["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_u64().expect("id"))
            .collect();
        let clip = write_tmp(&format!("gigaam-{name}.wav"), b"");
        write_wav_16k(&clip, &jfk[..n.min(jfk.len())]);
        let ckpt = fx.join(format!("{name}.ckpt")).display().to_string();
        let o = stapes(&[
            "transcribe",
            "-m",
            &ckpt,
            "-f",
            "json",
            &clip.display().to_string(),
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(v["family"], "gigaam");
        let got: Vec<u64> = v["segments"]
            .as_array()
            .expect("segments")
            .iter()
            .flat_map(|s| s["tokens"].as_array().cloned().unwrap_or_default())
            .map(|t| t.as_u64().expect("id"))
            .collect();
        assert_eq!(got, want, "{name}");
        let o = stapes(&[
            "transcribe",
            "-m",
            &ckpt,
            "--task",
            "translate",
            &sample("jfk.wav"),
        ]);
        assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
        assert!(
            stderr(&o).contains("GigaAM models only transcribe"),
            "{}",
            stderr(&o)
        );
    }
    let o = stapes(&["inspect", &fx.join("v1_ctc.ckpt").to_string_lossy()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    for want in [
        "format:  torch",
        "family:  gigaam (v1_ctc, ctc head",
        "RelPos attention",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    // a truncated checkpoint: exit 3 with the file named
    let cut = write_tmp(
        "cut.ckpt",
        &std::fs::read(fx.join("v3_ctc.ckpt")).expect("ckpt")[..100],
    );
    let o = stapes(&[
        "transcribe",
        "-m",
        &cut.display().to_string(),
        &sample("jfk.wav"),
    ]);
    assert_eq!(o.status.code(), Some(3), "stderr: {}", stderr(&o));
    assert!(stderr(&o).contains("cut.ckpt"), "{}", stderr(&o));
}

/// A transformers Qwen3-ASR directory through the CLI (family from config.json): one segment
/// over the clip, the forced language reported; translation and unknown languages refused with
/// exit 2; `inspect` names the family and both halves. (Ids against transformers:
/// stapes-models' qwen3a_parity.)
#[test]
fn qwen3_asr_directories_through_the_cli() {
    let dir = repo().join("crates/stapes-models/tests/fixtures/qwen3a/model");
    let m = dir.display().to_string();
    let jfk = sample("jfk.wav");
    let o = stapes(&[
        "transcribe",
        "-m",
        &m,
        "-f",
        "json",
        "--language",
        "en",
        &jfk,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["family"], "qwen3a");
    assert_eq!(v["language"], "en");
    let segs = v["segments"].as_array().expect("segments");
    assert!(segs.len() <= 1, "{v}");
    for s in segs {
        assert_eq!(s["start"], 0.0);
        assert_eq!(s["end"], 11.0);
        assert!(!s["tokens"].as_array().expect("tokens").is_empty());
    }
    for (flags, want) in [
        (&["--task", "translate"][..], "Qwen3-ASR only transcribes"),
        (&["--language", "tlh"][..], "does not know language `tlh`"),
    ] {
        let mut args = vec!["transcribe", "-m", &m];
        args.extend(flags);
        args.push(&jfk);
        let o = stapes(&args);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{}", stderr(&o));
    }
    let o = stapes(&["inspect", &m]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "family:  qwen3a",
        "attention windows of 104 tokens",
        "4 heads / 2 kv heads",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
}

/// A Gemma 4 audio tower (alone, or inside a whole Gemma 4 checkpoint) through the CLI: it
/// gives embeddings, not text, so `transcribe` exits 3 saying so; `bench` times it and
/// `inspect` names it. (Outputs against transformers: stapes-models' gemma4a_parity.)
#[test]
fn gemma4_audio_towers_through_the_cli() {
    let fx = repo().join("crates/stapes-models/tests/fixtures/gemma4a");
    for (dir, layout) in [("model", "Tower"), ("full", "Full")] {
        let m = fx.join(dir).display().to_string();
        let o = stapes(&["transcribe", "-m", &m, &sample("jfk.wav")]);
        assert_eq!(o.status.code(), Some(3), "{dir}: {}", stderr(&o));
        assert!(stderr(&o).contains("audio embeddings"), "{}", stderr(&o));
        let o = stapes(&["inspect", &m]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("family:  gemma4a") && out.contains(layout),
            "{out}"
        );
        let o = stapes(&[
            "bench", "-m", &m, "--device", "cpu", "--iters", "1", "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert!(
            v["report"]["encode"]["median_ms"].as_f64().expect("encode") > 0.0,
            "{v}"
        );
    }
}

#[test]
fn inspect_names_the_family_of_nemo_archives_and_whisper_cpp_parakeet_files() {
    let fx = repo().join("crates/stapes-models/tests/fixtures/fastconformer");
    for (file, family, format) in [
        ("canary-agg.nemo", "family:  canary", "format:  nemo"),
        ("tdt.nemo", "family:  parakeet", "format:  nemo"),
        ("tdt-wcpp-f16.bin", "family:  parakeet", "format:  ggml"),
    ] {
        let p = fx.join(file);
        if !p.exists() {
            panic!("fixture {} is missing", p.display());
        }
        let o = stapes(&["inspect", &p.to_string_lossy()]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{file}: {}", stderr(&o));
        assert!(out.contains(family), "{file}: {out}");
        assert!(out.contains(format), "{file}: {out}");
    }
}

/// `stapes convert --type q8_0` writes a ggml file whisper.cpp's `quantize` would (q8_0 matrices)
/// that transcribes jfk like the source weights; bad types exit 2 before anything is written.
#[test]
fn convert_to_ggml_q8_0_transcribes_jfk() {
    let m = model("whisper-tiny.en");
    let out = write_tmp("tiny-q8_0.bin", b"");
    let path = out.display().to_string();
    let o = stapes(&["convert", "--to", "ggml", "--type", "q8_0", &m, &path]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    // ggml header: magic, ten hyper-parameters, then ftype = MOSTLY_Q8_0 (7) + 1000 x version 2
    let bytes = std::fs::read(&out).expect("converted file");
    let ftype = i32::from_le_bytes([bytes[44], bytes[45], bytes[46], bytes[47]]);
    assert_eq!(ftype, 2007, "ggml ftype");
    let o = stapes(&[
        "transcribe",
        "-m",
        &path,
        "--beam-size",
        "1",
        &sample("jfk.wav"),
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert_eq!(
        normalise(&String::from_utf8_lossy(&o.stdout)),
        normalise(JFK)
    );
    for args in [
        vec!["convert", "--to", "ggml", "--type", "q4_0", &m, &path],
        vec!["convert", "--to", "hf", "--type", "q8_0", &m, &path],
    ] {
        let o = stapes(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: stderr: {}", stderr(&o));
    }
}
