//! `stapes serve` request handling that needs no model: every refusal gets its status and an
//! OpenAI-shaped error. The server runs `--lazy-load` on an empty directory, so a request that
//! got as far as the engine would answer 503 instead — which the tests below would catch.

mod serve_common;

use serve_common::*;
use std::time::{Duration, Instant};

const T: &str = "/v1/audio/transcriptions";

fn lazy_server(extra: &[&str]) -> Server {
    let dir = empty_model_dir();
    let spec = format!("tiny={}", dir.display());
    let mut args = vec!["--lazy-load", "-m", spec.as_str()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[test]
fn missing_file_is_400() {
    let s = lazy_server(&[]);
    s.post(T, &[Part::Text("model", "tiny")], &[])
        .assert_error(400, "missing_file", Some("file"));
    s.post(T, &[Part::File("file", "a.wav", b"")], &[])
        .assert_error(400, "empty_file", Some("file"));
}

#[test]
fn not_audio_is_415_and_truncated_audio_is_400() {
    let s = lazy_server(&[]);
    let text = b"this is a text file, not audio at all; it is long enough to be probed.".repeat(20);
    s.post(T, &[Part::File("file", "notes.wav", &text)], &[])
        .assert_error(415, "unsupported_audio_format", Some("file"));
    let wav = jfk_wav();
    let r = s.post(T, &[Part::File("file", "jfk.wav", &wav[..5000])], &[]);
    r.assert_error(400, "invalid_audio", Some("file"));
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("truncated"),
        "{}",
        r.text()
    );
}

#[test]
fn bad_fields_are_400_before_any_decoding() {
    let s = lazy_server(&[]);
    let wav = jfk_wav();
    let cases: [(&str, &str, &str); 6] = [
        ("response_format", "xml", "response_format"),
        ("temperature", "hot", "temperature"),
        ("temperature", "1.5", "temperature"),
        ("language", "english please", "language"),
        (
            "timestamp_granularities[]",
            "syllable",
            "timestamp_granularities",
        ),
        ("stream", "perhaps", "stream"),
    ];
    for (field, value, param) in cases {
        let r = s.post(
            T,
            &[
                Part::File("file", "jfk.wav", &wav),
                Part::Text(field, value),
            ],
            &[],
        );
        r.assert_error(400, "invalid_value", Some(param));
    }
}

#[test]
fn unknown_model_is_404() {
    let s = lazy_server(&[]);
    let wav = jfk_wav();
    let r = s.post(
        T,
        &[
            Part::File("file", "jfk.wav", &wav),
            Part::Text("model", "no-such-model"),
        ],
        &[],
    );
    r.assert_error(404, "model_not_found", Some("model"));
    s.get("/v1/models/no-such-model")
        .assert_error(404, "model_not_found", Some("model"));
}

#[test]
fn not_multipart_is_415() {
    let s = lazy_server(&[]);
    let body = br#"{"file": "jfk.wav"}"#;
    let len = body.len().to_string();
    let head = request_head(
        "POST",
        T,
        &s.addr,
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &len),
        ],
    );
    send(&s.addr, &head, body).assert_error(415, "invalid_content_type", None);
}

#[test]
fn oversized_bodies_are_413() {
    let s = lazy_server(&["--max-body-mb", "1"]);
    // Declared too large: refused from the headers, before any of the body is read.
    let ctype = format!("multipart/form-data; boundary={BOUNDARY}");
    let head = request_head(
        "POST",
        T,
        &s.addr,
        &[("Content-Type", &ctype), ("Content-Length", "2000000")],
    );
    send(&s.addr, &head, b"").assert_error(413, "request_too_large", None);
    // Chunked, so the size is only known while reading.
    let big = vec![7u8; 1_500_000];
    let body = multipart(&[Part::File("file", "big.wav", &big)]);
    let mut chunked = Vec::new();
    for c in body.chunks(65536) {
        chunked.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        chunked.extend_from_slice(c);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let head = request_head(
        "POST",
        T,
        &s.addr,
        &[("Content-Type", &ctype), ("Transfer-Encoding", "chunked")],
    );
    send(&s.addr, &head, &chunked).assert_error(413, "request_too_large", None);
}

#[test]
fn audio_over_the_duration_limit_is_413() {
    let s = lazy_server(&["--max-audio-seconds", "5"]);
    let wav = jfk_wav(); // 11 s
    s.post(T, &[Part::File("file", "jfk.wav", &wav)], &[])
        .assert_error(413, "audio_too_long", Some("file"));
}

#[test]
fn api_key_is_required_on_v1_only() {
    let s = lazy_server(&["--api-key", "sekrit"]);
    let wav = jfk_wav();
    let parts = [Part::File("file", "jfk.wav", &wav[..5000])];
    let r = s.post(T, &parts, &[]);
    r.assert_error(401, "invalid_api_key", None);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    s.post(T, &parts, &[("Authorization", "Bearer wrong")])
        .assert_error(401, "invalid_api_key", None);
    s.post(T, &parts, &[("Authorization", "Basic sekrit")])
        .assert_error(401, "invalid_api_key", None);
    get(&s.addr, "/v1/models", &[]).assert_error(401, "invalid_api_key", None);
    // The right key gets through to validation (the truncated file is then refused).
    s.post(T, &parts, &[("Authorization", "Bearer sekrit")])
        .assert_error(400, "invalid_audio", Some("file"));
    assert_eq!(
        get(&s.addr, "/v1/models", &[("Authorization", "bearer sekrit")]).status,
        200
    );
    assert_eq!(s.get("/health").status, 200);
    assert_eq!(s.get("/metrics").status, 200);
}

#[test]
fn api_key_from_the_environment() {
    let dir = empty_model_dir();
    let spec = format!("tiny={}", dir.display());
    let s = Server::start_with_env(
        &["--lazy-load", "-m", &spec],
        &[("STAPES_API_KEY", "from-env")],
    );
    get(&s.addr, "/v1/models", &[]).assert_error(401, "invalid_api_key", None);
    assert_eq!(
        get(
            &s.addr,
            "/v1/models",
            &[("Authorization", "Bearer from-env")]
        )
        .status,
        200
    );
}

#[test]
fn full_queue_is_429_with_retry_after() {
    let s = lazy_server(&["--queue", "0", "--workers", "1"]);
    let wav = jfk_wav();
    let held = SlowUpload::start(&s.addr, &[Part::File("file", "jfk.wav", &wav)]);
    s.wait_admitted(1);
    let r = s.post(T, &[Part::File("file", "jfk.wav", &wav)], &[]);
    r.assert_error(429, "queue_full", None);
    let retry: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After seconds");
    assert!(retry >= 1);
    // The held request still completes (the empty model directory then answers 503), and its
    // place is free again afterwards.
    held.finish().assert_error(503, "model_unavailable", None);
    s.wait_admitted(0);
    s.post(T, &[Part::Text("model", "tiny")], &[])
        .assert_error(400, "missing_file", Some("file"));
}

#[test]
fn stalled_upload_times_out_with_408() {
    let s = lazy_server(&["--timeout-s", "1"]);
    let wav = jfk_wav();
    let t0 = Instant::now();
    let r = SlowUpload::start(&s.addr, &[Part::File("file", "jfk.wav", &wav)]).response();
    r.assert_error(408, "request_timeout", None);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(20),
        "{took:?}"
    );
    s.wait_admitted(0);
}

#[test]
fn engine_failures_are_openai_shaped_5xx_also_when_streaming() {
    let s = lazy_server(&[]);
    let wav = jfk_wav();
    let r = s.post(T, &[Part::File("file", "jfk.wav", &wav)], &[]);
    r.assert_error(503, "model_unavailable", None);
    assert_eq!(r.json()["error"]["type"], "server_error");
    // With stream=true the failure arrives as an `error` event on a 200 event stream.
    let r = s.post(
        T,
        &[
            Part::File("file", "jfk.wav", &wav),
            Part::Text("stream", "true"),
        ],
        &[],
    );
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream")));
    let events = sse_events(&r.text());
    assert_eq!(events.len(), 1, "{}", r.text());
    assert_eq!(events[0]["type"], "error");
    assert_eq!(events[0]["error"]["code"], "model_unavailable");
}

#[test]
fn unknown_routes_and_methods_are_json_errors() {
    let s = lazy_server(&[]);
    s.get("/v1/nothing-here")
        .assert_error(404, "not_found", None);
    s.get(T).assert_error(405, "method_not_allowed", None);
}

#[test]
fn models_health_and_metrics() {
    let s = lazy_server(&[]);
    let m = s.get("/v1/models").json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "tiny");
    assert_eq!(s.get("/v1/models/tiny").json()["id"], "tiny");
    let h = s.get("/health").json();
    assert_eq!(h["status"], "ok");
    s.post(T, &[Part::File("file", "x.mp3", b"not audio at all")], &[]);
    s.get("/v1/nothing-here");
    let text = s.get("/metrics").text();
    for want in [
        "stapes_http_requests_total{endpoint=\"/v1/audio/transcriptions\",status=\"415\"} 1\n",
        "stapes_http_requests_total{endpoint=\"/v1/models\",status=\"200\"} 1\n",
        "stapes_http_requests_total{endpoint=\"unmatched\",status=\"404\"} 1\n",
        "stapes_http_request_duration_seconds_count{endpoint=\"/v1/audio/transcriptions\"} 1\n",
        "# TYPE stapes_http_request_duration_seconds histogram\n",
        "stapes_queue_depth 0\n",
        "stapes_queue_capacity 64\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

#[test]
fn bad_start_up_flags_exit_with_the_usage_and_input_codes() {
    let dir = empty_model_dir();
    let spec = format!("a={}", dir.display());
    let (code, err) = start_fails(&["-m", "/definitely/not/a/model"]);
    assert_eq!(code, Some(3), "{err}");
    let (code, err) = start_fails(&["--lazy-load", "-m", &spec, "-m", &spec]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("two models are named `a`"), "{err}");
    for bad in [
        ["--workers", "0"],
        ["--timeout-s", "-1"],
        ["--timeout-s", "NaN"],
        ["--max-body-mb", "0"],
    ] {
        let mut args = vec!["--lazy-load", "-m", &spec];
        args.extend_from_slice(&bad);
        let (code, err) = start_fails(&args);
        assert_eq!(code, Some(2), "{bad:?}: {err}");
    }
}

#[test]
fn sigterm_drains_the_request_in_flight_then_exits_0() {
    let mut s = lazy_server(&[]);
    let held = SlowUpload::start(
        &s.addr,
        &[
            Part::Text("model", "tiny"),
            Part::Text("prompt", &"x".repeat(4000)),
        ],
    );
    s.wait_admitted(1);
    s.signal("-TERM");
    // The listener closes; the request already in flight is still answered.
    let start = Instant::now();
    while std::net::TcpStream::connect(&s.addr).is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "still accepting after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    held.finish()
        .assert_error(400, "missing_file", Some("file"));
    let status = s.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{status:?}\n{}", s.log());
    assert!(s.log().contains("draining"), "{}", s.log());
}
