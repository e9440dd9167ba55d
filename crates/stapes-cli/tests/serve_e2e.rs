//! `stapes serve` with a real model (whisper-tiny.en from `scripts/fetch-models.sh`): jfk.wav
//! comes back as the jfk sentence in every response format. Fails loudly when the model is
//! missing, as every real-weight test does.

mod serve_common;

use serve_common::*;
use std::time::Duration;

const T: &str = "/v1/audio/transcriptions";

fn server(extra: &[&str]) -> Server {
    let spec = tiny_en();
    let mut args = vec!["-m", spec.as_str(), "--beam-size", "1"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[test]
fn jfk_in_every_response_format() {
    let s = server(&[]);
    let wav = jfk_wav();
    let post = |fields: &[Part]| {
        let mut parts = vec![Part::File("file", "jfk.wav", &wav)];
        for f in fields {
            if let Part::Text(k, v) = f {
                parts.push(Part::Text(k, v));
            }
        }
        let r = s.post(T, &parts, &[]);
        assert_eq!(r.status, 200, "{}\n{}", r.text(), s.log());
        r
    };

    // Default json, with OpenAI's default model name.
    let r = post(&[Part::Text("model", "whisper-1")]);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json")));
    let j = r.json();
    assert_jfk(j["text"].as_str().unwrap_or_default());
    assert_eq!(j["usage"]["seconds"], 11);

    let r = post(&[
        Part::Text("model", "tiny.en"),
        Part::Text("response_format", "text"),
    ]);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/plain")));
    assert_jfk(&r.text());

    let srt = post(&[Part::Text("response_format", "srt")]).text();
    assert!(srt.starts_with("1\n00:00:0"), "{srt}");
    assert!(srt.contains(" --> "), "{srt}");
    assert_jfk(&srt);

    let vtt = post(&[Part::Text("response_format", "vtt")]).text();
    assert!(vtt.starts_with("WEBVTT\n\n00:00:0"), "{vtt}");
    assert_jfk(&vtt);

    let v = post(&[
        Part::Text("response_format", "verbose_json"),
        Part::Text("language", "en"),
    ])
    .json();
    assert_eq!(v["task"], "transcribe");
    assert_eq!(v["language"], "en");
    assert!(
        (v["duration"].as_f64().unwrap_or(0.0) - 11.0).abs() < 0.1,
        "{v}"
    );
    assert_jfk(v["text"].as_str().unwrap_or_default());
    let segs = v["segments"].as_array().cloned().unwrap_or_default();
    assert!(!segs.is_empty(), "{v}");
    assert!(
        segs.iter()
            .all(|s| s["end"].as_f64() >= s["start"].as_f64()),
        "{v}"
    );

    let v = post(&[
        Part::Text("response_format", "verbose_json"),
        Part::Text("timestamp_granularities[]", "word"),
        Part::Text("timestamp_granularities[]", "segment"),
    ])
    .json();
    let word_list = v["words"].as_array().cloned().unwrap_or_default();
    assert!(word_list.len() >= 20, "{v}");
    assert!(v["segments"].is_array());

    // Streaming: deltas per segment, then done with the whole text.
    let r = post(&[Part::Text("stream", "true")]);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream")));
    let events = sse_events(&r.text());
    let (last, deltas) = events.split_last().expect("events");
    assert_eq!(last["type"], "transcript.text.done", "{events:?}");
    assert_jfk(last["text"].as_str().unwrap_or_default());
    assert!(!deltas.is_empty() && deltas.iter().all(|e| e["type"] == "transcript.text.delta"));
    let joined: String = deltas.iter().filter_map(|e| e["delta"].as_str()).collect();
    assert_eq!(
        words(&joined),
        words(last["text"].as_str().unwrap_or_default())
    );

    // English-only model: translation to English is the transcript itself.
    let r = s.post(
        "/v1/audio/translations",
        &[
            Part::File("file", "jfk.wav", &wav),
            Part::Text("response_format", "verbose_json"),
        ],
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["task"], "translate");
    assert_jfk(v["text"].as_str().unwrap_or_default());

    let text = s.get("/metrics").text();
    assert!(
        text.contains("stapes_audio_seconds_total{model=\"tiny.en\"} 88"),
        "{text}"
    );
}

#[test]
fn sigterm_drains_a_running_transcription() {
    let mut s = server(&[]);
    let wav = jfk_wav();
    let held = SlowUpload::start(&s.addr, &[Part::File("file", "jfk.wav", &wav)]);
    s.wait_admitted(1);
    s.signal("-TERM");
    std::thread::sleep(Duration::from_millis(200));
    let r = held.finish();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_jfk(r.json()["text"].as_str().unwrap_or_default());
    assert!(
        s.wait_exit(Duration::from_secs(60)).success(),
        "{}",
        s.log()
    );
}

#[test]
fn slow_transcription_is_504() {
    let s = server(&["--timeout-s", "0.05"]);
    let wav = jfk_wav();
    let r = s.post(T, &[Part::File("file", "jfk.wav", &wav)], &[]);
    // The upload itself may also outlast 50 ms on a busy machine (408); both are timeouts.
    assert!(r.status == 504 || r.status == 408, "{}", r.text());
    let code = if r.status == 504 {
        "timeout"
    } else {
        "request_timeout"
    };
    r.assert_error(r.status, code, None);
}
