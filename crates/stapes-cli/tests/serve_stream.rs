//! Streaming from `stapes serve` with a real model (whisper-tiny.en from
//! `scripts/fetch-models.sh`): `stream=true` events arrive while the file is still being
//! transcribed, and the WebSocket endpoint turns jfk.wav sent in 100 ms chunks into the jfk
//! sentence with partials on the way. Fails loudly when the model is missing.

mod cli_common;
mod serve_common;

use serve_common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

const T: &str = "/v1/audio/transcriptions";

/// tiny.en's `-m` spec; the WebSocket endpoint also needs the fetched Silero model.
fn tiny_en_with_vad() -> String {
    let vad = cache().join("models/silero-vad");
    assert!(
        vad.exists(),
        "{} is missing: run scripts/fetch-models.sh silero-vad",
        vad.display()
    );
    tiny_en()
}

fn server(extra: &[&str]) -> Server {
    let spec = tiny_en_with_vad();
    let mut args = vec!["-m", spec.as_str(), "--beam-size", "1"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn jfk_samples() -> Vec<f32> {
    stapes::audio::decode_bytes(jfk_wav(), Some("wav")).expect("decode jfk.wav")
}

fn wav_bytes(samples: &[f32]) -> Vec<u8> {
    cli_common::wav_16k_from_pcm(&pcm_bytes(samples))
}

fn pcm_bytes(samples: &[f32]) -> Vec<u8> {
    samples
        .iter()
        .flat_map(|v| ((v.clamp(-1.0, 1.0) * 32767.0).round() as i16).to_le_bytes())
        .collect()
}

/// One server-sent event and when its last byte arrived.
struct Timed {
    at: Duration,
    data: serde_json::Value,
}

/// POSTs a multipart body and reads the chunked SSE response as it comes, timing each event.
fn sse_timed(addr: &str, body: &[u8]) -> Vec<Timed> {
    let mut s = connect(addr);
    let ctype = format!("multipart/form-data; boundary={BOUNDARY}");
    let len = body.len().to_string();
    let head = request_head(
        "POST",
        T,
        addr,
        &[
            ("Content-Type", ctype.as_str()),
            ("Content-Length", len.as_str()),
        ],
    );
    let t0 = Instant::now();
    s.write_all(head.as_bytes()).expect("send head");
    s.write_all(body).expect("send body");
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    // Response head.
    let body_start = loop {
        let n = s.read(&mut buf).expect("read response");
        assert!(n > 0, "connection closed before the response head");
        raw.extend_from_slice(&buf[..n]);
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&raw[..body_start]).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let mut pending: Vec<u8> = raw[body_start..].to_vec();
    let mut text = Vec::new(); // de-chunked body not yet split into events
    let mut out = Vec::new();
    let mut done = false;
    while !done {
        // Take every whole chunk in `pending`.
        while let Some(eol) = pending.windows(2).position(|w| w == b"\r\n") {
            let size_line = String::from_utf8_lossy(&pending[..eol]).to_string();
            let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                .unwrap_or_else(|_| panic!("bad chunk size line {size_line:?}"));
            if pending.len() < eol + 2 + size + 2 {
                break;
            }
            text.extend_from_slice(&pending[eol + 2..eol + 2 + size]);
            pending.drain(..eol + 2 + size + 2);
            if size == 0 {
                done = true;
                break;
            }
        }
        // Whole events are separated by a blank line.
        while let Some(i) = text.windows(2).position(|w| w == b"\n\n") {
            let ev = String::from_utf8_lossy(&text[..i]).to_string();
            text.drain(..i + 2);
            let data: String = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if data.is_empty() {
                continue; // keep-alive comment
            }
            out.push(Timed {
                at: t0.elapsed(),
                data: serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {data}")),
            });
        }
        if done {
            break;
        }
        let n = s.read(&mut buf).expect("read events");
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&buf[..n]);
    }
    out
}

#[test]
fn sse_deltas_arrive_before_the_file_is_done() {
    let s = server(&[]);
    // jfk and 14 s of silence, five times: 125 s, five Whisper windows or more.
    let jfk = jfk_samples();
    let mut long = Vec::new();
    for _ in 0..5 {
        long.extend_from_slice(&jfk);
        long.extend(std::iter::repeat_n(0.0f32, 14 * 16_000));
    }
    let wav = wav_bytes(&long);

    let plain = s.post(
        T,
        &[
            Part::File("file", "long.wav", &wav),
            Part::Text("response_format", "json"),
        ],
        &[],
    );
    assert_eq!(plain.status, 200, "{}", plain.text());
    let want = plain.json()["text"].as_str().unwrap_or_default().to_owned();
    assert_jfk(&want);

    let body = multipart(&[
        Part::File("file", "long.wav", &wav),
        Part::Text("stream", "true"),
    ]);
    let events = sse_timed(&s.addr, &body);
    let (last, deltas) = events.split_last().expect("events");
    assert_eq!(last.data["type"], "transcript.text.done", "{}", last.data);
    assert!(
        deltas.len() >= 5,
        "one delta per jfk at least: {}",
        deltas.len()
    );
    assert!(deltas
        .iter()
        .all(|e| e.data["type"] == "transcript.text.delta"));
    let joined: String = deltas
        .iter()
        .filter_map(|e| e.data["delta"].as_str())
        .collect();
    assert_eq!(joined.trim_end(), want, "deltas vs the non-streaming text");
    assert_eq!(last.data["text"], want.as_str());
    // Segment times only grow, and the first segment was sent while most of the file was
    // still ahead: well before the done event.
    let starts: Vec<f64> = deltas
        .iter()
        .filter_map(|e| e.data["segment"]["start"].as_f64())
        .collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
    let (first, end) = (deltas[0].at.as_secs_f64(), last.at.as_secs_f64());
    eprintln!(
        "first delta at {first:.2} s, done at {end:.2} s, {} deltas",
        deltas.len()
    );
    assert!(
        first < 0.6 * end,
        "first delta at {first:.2} s, done at {end:.2} s: not incremental"
    );
}

type Ws = WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>;

fn ws_connect(addr: &str, query: &str, key: Option<&str>) -> Result<Ws, tungstenite::Error> {
    let mut req = format!("ws://{addr}/v1/audio/stream?{query}")
        .into_client_request()
        .expect("request");
    if let Some(k) = key {
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {k}").parse().expect("header"),
        );
    }
    let (ws, _) = tungstenite::connect(req)?;
    if let tungstenite::stream::MaybeTlsStream::Plain(t) = ws.get_ref() {
        t.set_read_timeout(Some(Duration::from_millis(5))).ok();
    }
    Ok(ws)
}

/// Every message waiting now (returns at once when none is).
fn drain(ws: &mut Ws, into: &mut Vec<Message>) -> bool {
    loop {
        match ws.read() {
            Ok(m) => into.push(m),
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return true
            }
            Err(_) => return false, // closed
        }
    }
}

/// Reads until the server closes (or `limit` passes).
fn read_to_close(ws: &mut Ws, into: &mut Vec<Message>, limit: Duration) {
    let start = Instant::now();
    while drain(ws, into) {
        assert!(start.elapsed() < limit, "no close within {limit:?}");
    }
}

fn json_events(msgs: &[Message]) -> Vec<serde_json::Value> {
    msgs.iter()
        .filter_map(|m| match m {
            Message::Text(t) => serde_json::from_str(t.as_str()).ok(),
            _ => None,
        })
        .collect()
}

fn close_code(msgs: &[Message]) -> Option<CloseCode> {
    msgs.iter().find_map(|m| match m {
        Message::Close(Some(f)) => Some(f.code),
        _ => None,
    })
}

#[test]
fn websocket_jfk_in_100ms_chunks() {
    let s = server(&["--api-key", "k1"]);
    let pcm = pcm_bytes(&jfk_samples());
    let mut ws = ws_connect(&s.addr, "model=tiny.en&language=en", Some("k1")).expect("connect");
    let mut msgs = Vec::new();
    // Real time: 100 ms of audio every 100 ms, reading whatever the server sent meanwhile.
    for chunk in pcm.chunks(3200) {
        ws.send(Message::Binary(chunk.to_vec().into()))
            .expect("send");
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(100) {
            assert!(drain(&mut ws, &mut msgs), "closed early: {msgs:?}");
        }
    }
    let before_end = json_events(&msgs);
    ws.send(Message::Text(r#"{"type":"end"}"#.into()))
        .expect("send end");
    read_to_close(&mut ws, &mut msgs, Duration::from_secs(120));
    let events = json_events(&msgs);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    eprintln!("events: {kinds:?}");
    assert_eq!(kinds.first(), Some(&"ready"), "{events:?}");
    assert_eq!(kinds.last(), Some(&"done"), "{events:?}");
    assert_eq!(close_code(&msgs), Some(CloseCode::Normal), "{msgs:?}");
    let partials: Vec<_> = before_end
        .iter()
        .filter(|e| e["type"] == "partial")
        .collect();
    assert!(
        !partials.is_empty(),
        "no partial before the end of the audio: {kinds:?}"
    );
    assert!(partials.iter().all(|p| p["final"] == false));
    let finals: Vec<_> = events.iter().filter(|e| e["type"] == "final").collect();
    assert!(!finals.is_empty(), "{kinds:?}");
    // Times on the stream's timeline: in order, inside the 11 s sent.
    let mut prev_end = 0.0;
    for f in &finals {
        let (a, b) = (
            f["start"].as_f64().unwrap_or(-1.0),
            f["end"].as_f64().unwrap_or(-1.0),
        );
        assert!(prev_end <= a + 1e-6 && a < b && b <= 11.1, "{f}");
        prev_end = b;
    }
    let done = events.last().expect("done");
    assert_jfk(done["text"].as_str().unwrap_or_default());
    let joined: Vec<&str> = finals.iter().filter_map(|f| f["text"].as_str()).collect();
    assert_eq!(done["text"].as_str(), Some(joined.join(" ").as_str()));
    let metrics = s.get("/metrics").text();
    assert!(
        metrics.contains("stapes_ws_events_total{type=\"done\"} 1"),
        "{metrics}"
    );
}

/// SIGTERM while a WebSocket client is mid-sentence: the server stops reading audio, transcribes
/// what it holds, sends `final` and `done` and closes with 1001 (going away), then exits 0. The
/// HTTP server's graceful shutdown alone does not wait for upgraded connections.
#[test]
fn sigterm_finishes_an_open_websocket_stream() {
    let mut s = server(&[]);
    let samples = jfk_samples();
    // the first 7 s of jfk, cut mid-sentence
    let pcm = pcm_bytes(&samples[..7 * 16_000]);
    let mut ws = ws_connect(&s.addr, "model=tiny.en&language=en", None).expect("connect");
    let mut msgs = Vec::new();
    for chunk in pcm.chunks(16_000) {
        ws.send(Message::Binary(chunk.to_vec().into()))
            .expect("send");
        assert!(drain(&mut ws, &mut msgs), "closed early: {msgs:?}");
    }
    // wait until the server holds the audio (a partial, or a second of quiet)
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30)
        && !json_events(&msgs).iter().any(|e| e["type"] == "partial")
    {
        assert!(drain(&mut ws, &mut msgs), "closed early: {msgs:?}");
    }
    s.signal("-TERM");
    read_to_close(&mut ws, &mut msgs, Duration::from_secs(60));
    let events = json_events(&msgs);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds.last(), Some(&"done"), "{kinds:?}");
    assert!(kinds.contains(&"final"), "{kinds:?}");
    assert_eq!(close_code(&msgs), Some(CloseCode::Away), "{msgs:?}");
    let text = words(events.last().and_then(|e| e["text"].as_str()).unwrap_or(""));
    assert!(text.starts_with("and so my fellow americans"), "{text}");
    let status = s.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{}", s.log());
}

#[test]
fn websocket_resamples_8khz() {
    let s = server(&[]);
    // 2:1 decimation after a short moving average (speech is mostly below 4 kHz).
    let x = jfk_samples();
    let down: Vec<f32> = x.chunks_exact(2).map(|p| 0.5 * (p[0] + p[1])).collect();
    // One region for the whole clip (2 s of silence to close one): tiny.en mishears narrowband
    // "and so my fellow americans" heard alone, as a 16 kHz region it hears it right.
    let mut ws =
        ws_connect(&s.addr, "sample_rate=8000&min_silence_ms=2000", None).expect("connect");
    let mut msgs = Vec::new();
    for chunk in pcm_bytes(&down).chunks(1600) {
        ws.send(Message::Binary(chunk.to_vec().into()))
            .expect("send");
    }
    ws.send(Message::Text(r#"{"type":"end"}"#.into()))
        .expect("send end");
    read_to_close(&mut ws, &mut msgs, Duration::from_secs(120));
    let events = json_events(&msgs);
    let done = events.last().expect("events");
    assert_eq!(done["type"], "done", "{events:?}");
    assert!(
        (done["duration"].as_f64().unwrap_or(0.0) - 11.0).abs() < 0.1,
        "{done}"
    );
    assert_jfk(done["text"].as_str().unwrap_or_default());
}

#[test]
fn websocket_refuses_garbage_without_dying() {
    let s = server(&["--api-key", "k1"]);
    // No key, wrong key, unknown model, bad sample rate: refused before the upgrade.
    for (query, key, status) in [
        ("", None, 401),
        ("", Some("nope"), 401),
        ("model=nope", Some("k1"), 404),
        ("sample_rate=12", Some("k1"), 400),
        ("sample_rate=abc", Some("k1"), 400),
    ] {
        match ws_connect(&s.addr, query, key) {
            Err(tungstenite::Error::Http(r)) => {
                assert_eq!(r.status().as_u16(), status, "{query} {key:?}");
                let body = r.body().as_deref().unwrap_or_default();
                let v: serde_json::Value = serde_json::from_slice(body).expect("json error");
                assert!(v["error"]["message"].is_string(), "{v}");
            }
            Err(e) => panic!("{query} {key:?}: {e}"),
            Ok(_) => panic!("{query} {key:?}: accepted"),
        }
    }
    // A plain GET (no upgrade) is a JSON error too.
    let r = get(
        &s.addr,
        "/v1/audio/stream",
        &[("Authorization", "Bearer k1")],
    );
    assert!(r.status >= 400, "{}", r.text());
    assert!(r.json()["error"]["message"].is_string());

    let cases: [(Message, &str, CloseCode); 4] = [
        (
            Message::Binary(vec![1u8, 2, 3].into()),
            "invalid_audio_frame",
            CloseCode::Invalid,
        ),
        (
            Message::Text("hello".into()),
            "invalid_control_message",
            CloseCode::Invalid,
        ),
        (
            Message::Text(r#"{"type":"launch"}"#.into()),
            "invalid_control_message",
            CloseCode::Unsupported,
        ),
        (
            Message::Text("{\"type\":".into()),
            "invalid_control_message",
            CloseCode::Invalid,
        ),
    ];
    for (msg, code, close) in cases {
        let mut ws = ws_connect(&s.addr, "", Some("k1")).expect("connect");
        // Good audio first, so the session is mid-stream when the garbage comes.
        ws.send(Message::Binary(vec![0u8; 3200].into()))
            .expect("send");
        ws.send(msg).expect("send garbage");
        let mut msgs = Vec::new();
        read_to_close(&mut ws, &mut msgs, Duration::from_secs(60));
        let events = json_events(&msgs);
        let err = events
            .iter()
            .find(|e| e["type"] == "error")
            .unwrap_or_else(|| panic!("no error event: {events:?}"));
        assert_eq!(err["error"]["code"], code, "{err}");
        assert_eq!(close_code(&msgs), Some(close), "{msgs:?}");
    }
    // Still serving.
    assert_eq!(s.get("/health").status, 200, "{}", s.log());
    let mut ws = ws_connect(&s.addr, "", Some("k1")).expect("connect");
    ws.send(Message::Text(r#"{"type":"end"}"#.into()))
        .expect("send end");
    let mut msgs = Vec::new();
    read_to_close(&mut ws, &mut msgs, Duration::from_secs(60));
    let events = json_events(&msgs);
    assert_eq!(
        events.last().map(|e| e["type"].clone()),
        Some("done".into())
    );
    assert_eq!(events.last().map(|e| e["text"].clone()), Some("".into()));
}
