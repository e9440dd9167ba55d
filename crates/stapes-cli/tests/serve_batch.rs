//! Cross-request batching in `stapes serve` (real whisper-tiny.en from `scripts/fetch-models.sh`,
//! clips from `$STAPES_CACHE/audio`): concurrent requests on different clips, batched, answer
//! exactly what the same requests answer one at a time on a server with batching off — segments,
//! times, token ids and statistics — and /metrics shows that they were batched.

mod serve_common;

use serde_json::Value;
use serve_common::*;

const T: &str = "/v1/audio/transcriptions";

/// (file name, bytes, prompt) of each request: jfk, four LibriVox clips, and jfk again with a
/// prompt (options differ inside one batch).
fn requests() -> Vec<(String, Vec<u8>, Option<&'static str>)> {
    let mut out = vec![("jfk.wav".to_string(), jfk_wav(), None)];
    for n in ["0870", "0880", "0890", "0920"] {
        let p = cache().join(format!(
            "audio/librivox/sense_and_sensibility_01_austen_64kb-{n}.wav"
        ));
        let b = std::fs::read(&p)
            .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch-models.sh audio)", p.display()));
        out.push((format!("{n}.wav"), b, None));
    }
    out.push(("jfk.wav".to_string(), jfk_wav(), Some("President Kennedy.")));
    out
}

fn post(addr: &str, name: &str, wav: &[u8], prompt: Option<&str>) -> Value {
    let mut parts = vec![
        Part::File("file", name, wav),
        Part::Text("response_format", "verbose_json"),
        Part::Text("timestamp_granularities[]", "segment"),
    ];
    if let Some(p) = prompt {
        parts.push(Part::Text("prompt", p));
    }
    let r = post_multipart(addr, T, &parts, &[]);
    assert_eq!(r.status, 200, "{name}: {}", r.text());
    r.json()
}

/// The parts of a verbose_json answer that must not depend on batching.
fn essence(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        // wall-clock fields, if any, are allowed to differ
        o.remove("usage");
    }
    v
}

#[test]
fn batched_answers_equal_single() {
    let spec = tiny_en();
    let reqs = requests();

    let single = Server::start(&["-m", &spec, "--beam-size", "1", "--batch-max", "1"]);
    let want: Vec<Value> = reqs
        .iter()
        .map(|(n, b, p)| essence(&post(&single.addr, n, b, *p)))
        .collect();
    assert_jfk(want[0]["text"].as_str().unwrap_or_default());
    let m = single.get("/metrics").text();
    assert!(
        !m.contains("stapes_batch_requests_count"),
        "batching off must not batch:\n{m}"
    );
    drop(single);

    // A long wait so that the concurrent requests surely meet in one batch.
    let batched = Server::start(&[
        "-m",
        &spec,
        "--beam-size",
        "1",
        "--batch-max",
        "8",
        "--batch-wait-ms",
        "3000",
    ]);
    let addr = batched.addr.clone();
    let got: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = reqs
            .iter()
            .map(|(n, b, p)| {
                let addr = addr.as_str();
                s.spawn(move || essence(&post(addr, n, b, *p)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("request thread"))
            .collect()
    });
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "request {i} ({}) differs when batched", reqs[i].0);
    }
    // The prompt changed the decoding of the same audio, so options really were per request.
    assert!(got[5]["segments"].is_array());

    // The encoder sizes are recorded when the batch ends, just after its last answer left.
    let mut m = batched.get("/metrics").text();
    for _ in 0..50 {
        if m.contains("stapes_encoder_batch_windows_count") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        m = batched.get("/metrics").text();
    }
    let count = metric(&m, "stapes_batch_requests_count{model=\"tiny.en\"}");
    let sum = metric(&m, "stapes_batch_requests_sum{model=\"tiny.en\"}");
    assert_eq!(sum, reqs.len() as f64, "{m}");
    assert!(count < sum, "no two requests shared a batch:\n{m}");
    let windows = metric(&m, "stapes_encoder_batch_windows_sum{model=\"tiny.en\"}");
    let calls = metric(&m, "stapes_encoder_batch_windows_count{model=\"tiny.en\"}");
    assert!(calls < windows, "no encoder call held two windows:\n{m}");
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing in\n{text}"))
}

#[test]
fn batch_max_is_validated() {
    let (code, err) = start_fails(&["--batch-max", "0", "-m", "x"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--batch-max"), "{err}");
}
