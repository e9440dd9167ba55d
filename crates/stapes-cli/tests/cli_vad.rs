//! `stapes vad` and `stapes transcribe --vad` through the binary: the span limit flag, and
//! `--vad` on a family other than Whisper (the tiny random-weight Parakeet TDT fixture).

mod cli_common;

use cli_common::*;
use std::path::PathBuf;
use std::process::Output;

fn cached(rel: &str) -> String {
    let p = cache().join(rel);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh all",
        p.display()
    );
    p.display().to_string()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stapes-cli-vad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

fn ids(v: &serde_json::Value) -> Vec<u64> {
    v["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .flat_map(|s| s["tokens"].as_array().cloned().unwrap_or_default())
        .map(|t| t.as_u64().expect("id"))
        .collect()
}

/// `--vad` with a Parakeet model: exits 0, transcribes only the speech of a clip padded with 2 s
/// of silence on each side (the same ids as the plain path on the audio the VAD kept), and puts
/// every segment inside the clip on the padded file's timeline. A span limit above Whisper's is
/// accepted for this family.
#[test]
fn vad_with_parakeet_transcribes_the_speech_and_keeps_the_padded_timeline() {
    cached("models/silero-vad");
    let tdt = repo().join("crates/stapes-models/tests/fixtures/fastconformer/tdt");
    let jfk = stapes::audio::load_file(&repo().join("samples/jfk.wav")).expect("jfk");
    let pad = vec![0f32; 32_000];
    let padded: Vec<f32> = [&pad[..], &jfk[..], &pad[..]].concat();
    let padded_wav = tmp("jfk-padded.wav");
    write_wav_16k(&padded_wav, &padded);

    // What the VAD keeps, through the library, heard by the plain path.
    let vad = stapes::vad::Vad::load("silero-vad").expect("silero-vad");
    let params = stapes::vad::VadParams {
        max_speech_duration_s: 45.0,
        ..Default::default()
    };
    let speech = vad.speech(&padded, &params).expect("speech");
    let groups = stapes::vad::groups(&speech, 45.0);
    assert_eq!(groups.len(), 1, "{groups:?}");
    let kept_wav = tmp("jfk-kept.wav");
    write_wav_16k(&kept_wav, &groups[0].samples(&padded));

    let model = tdt.display().to_string();
    let plain = stapes(&[
        "transcribe",
        "-m",
        &model,
        "--device",
        "cpu",
        "-f",
        "json",
        &kept_wav.display().to_string(),
    ]);
    assert!(plain.status.success(), "plain: {}", stderr(&plain));
    let with_vad = stapes(&[
        "transcribe",
        "--vad",
        "--vad-max-span",
        "45",
        "-m",
        &model,
        "--device",
        "cpu",
        "-f",
        "json",
        &padded_wav.display().to_string(),
    ]);
    assert!(with_vad.status.success(), "--vad: {}", stderr(&with_vad));
    let (p, v) = (json(&plain), json(&with_vad));
    assert_eq!(v["family"], "parakeet");
    assert!(!ids(&p).is_empty(), "the fixture emits ids on jfk");
    assert_eq!(ids(&v), ids(&p), "--vad ids differ from the plain path's");
    let text = |v: &serde_json::Value| -> String {
        v["segments"]
            .as_array()
            .expect("segments")
            .iter()
            .filter_map(|s| s["text"].as_str())
            .collect()
    };
    assert_eq!(text(&v), text(&p));
    for s in v["segments"].as_array().expect("segments") {
        let (a, b) = (
            s["start"].as_f64().expect("start"),
            s["end"].as_f64().expect("end"),
        );
        assert!(
            a >= 2.0 && b <= 13.0 && a <= b,
            "segment {a}-{b} outside the clip (2 s .. 13 s)"
        );
    }
}

/// The span limit: Whisper refuses more than 30 s (exit 2, one line naming it); the flag needs
/// `--vad`.
#[test]
fn vad_max_span_is_checked() {
    let jfk = repo().join("samples/jfk.wav").display().to_string();
    let tiny = cached("models/whisper-tiny.en");
    let o = stapes(&[
        "transcribe",
        "--vad",
        "--vad-max-span",
        "45",
        "-m",
        &tiny,
        "--device",
        "cpu",
        &jfk,
    ]);
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
    assert!(stderr(&o).contains("30"), "stderr: {}", stderr(&o));
    assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));
    let o = stapes(&["transcribe", "--vad-max-span", "20", "-m", &tiny, &jfk]);
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
    let o = stapes(&[
        "transcribe",
        "--vad",
        "--vad-max-span",
        "0",
        "-m",
        &tiny,
        "--device",
        "cpu",
        &jfk,
    ]);
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
}

/// `stapes vad --max-speech-s 3` splits long speech where the silero-vad package does
/// (tools/reference/silero_ort.py, the `max_speech_duration_s: 3.0` case).
#[test]
fn vad_max_speech_splits_like_the_package() {
    cached("models/silero-vad");
    let fx = repo().join("crates/stapes-models/tests/fixtures/silero/silero_ort.json");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&fx).expect("silero_ort.json")).expect("json");
    let case = v["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["name"] == "lv-0870" && c["model_rate"] == 16000)
        .expect("lv-0870 case");
    let want: Vec<(f64, f64)> = case["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .find(|s| s["params"]["max_speech_duration_s"] == 3.0)
        .expect("3 s case")["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .map(|p| {
            let f = |i: usize| p[i].as_f64().expect("sample") / 16_000.0;
            (f(0), f(1))
        })
        .collect();
    assert!(want.len() > 1, "the reference splits this clip");
    let clip = cached("audio/librivox/sense_and_sensibility_01_austen_64kb-0870.wav");
    let o = stapes(&["vad", "-f", "txt", "--max-speech-s", "3", &clip]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got: Vec<(f64, f64)> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let mut it = l.split('\t').map(|x| x.parse::<f64>().expect("seconds"));
            (it.next().expect("start"), it.next().expect("end"))
        })
        .collect();
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g.0 - w.0).abs() < 6e-4 && (g.1 - w.1).abs() < 6e-4,
            "{got:?} vs {want:?}"
        );
    }
    let o = stapes(&["vad", "--max-speech-s", "-1", &clip]);
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
}
