//! Helpers for the `stapes serve` tests: start the built binary on a free loopback port and talk
//! HTTP/1.1 to it over plain sockets (no client dependency; the tests also need to send
//! malformed, slow and oversized requests that a client library would not).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const JFK_WORDS: [&str; 2] = [
    "and so my fellow americans ask not what your country can do for you",
    "ask what you can do for your country",
];

/// `$STAPES_CACHE` (default `~/.cache/stapes`), where `scripts/fetch-models.sh` puts models and clips.
pub fn cache() -> PathBuf {
    std::env::var_os("STAPES_CACHE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/stapes")
        })
}

/// `-m` spec of the fetched whisper-tiny.en, named `tiny.en`; a missing model fails loudly.
pub fn tiny_en() -> String {
    let p = cache().join("models/whisper-tiny.en");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh whisper-tiny.en",
        p.display()
    );
    format!("tiny.en={}", p.display())
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn jfk_wav() -> Vec<u8> {
    let p = repo_root().join("samples/jfk.wav");
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Lowercase words only, for comparing transcripts without punctuation.
pub fn words(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                ' '
            }
        })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn assert_jfk(text: &str) {
    let w = words(text);
    for phrase in JFK_WORDS {
        assert!(w.contains(phrase), "expected `{phrase}` in `{text}`");
    }
}

/// A directory that exists but holds no model: with `--lazy-load` the server starts, and only a
/// request that reaches the engine finds out (503).
pub fn empty_model_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("stapes-serve-test-empty-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

pub struct Server {
    child: Child,
    pub addr: String,
    log: Arc<Mutex<String>>,
    /// The thread copying stderr into `log`: joined once the process has exited, so the log
    /// holds its last lines before a test reads it.
    reader: Option<std::thread::JoinHandle<()>>,
}

type Spawned = (
    Child,
    mpsc::Receiver<String>,
    Arc<Mutex<String>>,
    std::thread::JoinHandle<()>,
);

fn spawn(args: &[&str], envs: &[(&str, &str)]) -> Spawned {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stapes"))
        .arg("serve")
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(args)
        .env_remove("STAPES_API_KEY")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stapes serve");
    let stderr = child.stderr.take().expect("stderr piped");
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel();
    let sink = Arc::clone(&log);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(i) = line.find("listening on http://") {
                let rest = &line[i + "listening on http://".len()..];
                let addr = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let _ = tx.send(addr);
            }
            if let Ok(mut l) = sink.lock() {
                l.push_str(&line);
                l.push('\n');
            }
        }
    });
    (child, rx, log, reader)
}

impl Server {
    pub fn start(args: &[&str]) -> Server {
        Self::start_with_env(args, &[])
    }

    pub fn start_with_env(args: &[&str], envs: &[(&str, &str)]) -> Server {
        let (mut child, rx, log, reader) = spawn(args, envs);
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(addr) => Server {
                child,
                addr,
                log,
                reader: Some(reader),
            },
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "stapes serve {args:?} did not start:\n{}",
                    log.lock().map(|l| l.clone()).unwrap_or_default()
                );
            }
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .map(|s| s.success());
        assert_eq!(ok.ok(), Some(true), "kill {sig} failed");
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                // stderr closes with the process: the reader ends after its last line
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                return st;
            }
            assert!(
                start.elapsed() < limit,
                "server still running after {limit:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn get(&self, path: &str) -> Resp {
        get(&self.addr, path, &[])
    }

    pub fn post(&self, path: &str, parts: &[Part], headers: &[(&str, &str)]) -> Resp {
        post_multipart(&self.addr, path, parts, headers)
    }

    /// Polls `/health` until `requests_admitted` reaches `n`.
    pub fn wait_admitted(&self, n: u64) {
        let start = Instant::now();
        loop {
            let h = self.get("/health").json();
            if h["requests_admitted"].as_u64() == Some(n) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "admitted never reached {n}: {h}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `stapes serve` expecting it to fail at start-up; returns its exit code and stderr.
pub fn start_fails(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stapes"))
        .arg("serve")
        .args(["--port", "0"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run stapes serve");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                self.text()
            )
        })
    }

    /// Asserts an OpenAI-shaped error with this status and code (and `param`, when given).
    pub fn assert_error(&self, status: u16, code: &str, param: Option<&str>) {
        assert_eq!(self.status, status, "body: {}", self.text());
        assert!(
            self.header("content-type")
                .is_some_and(|c| c.starts_with("application/json")),
            "error content-type: {:?}",
            self.header("content-type")
        );
        let v = self.json();
        let e = &v["error"];
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "message in {v}"
        );
        assert!(
            e["type"].as_str().is_some_and(|t| !t.is_empty()),
            "type in {v}"
        );
        assert!(
            e.get("param").is_some_and(|p| p.is_null() || p.is_string()),
            "param in {v}"
        );
        assert_eq!(e["code"], code, "{v}");
        if let Some(p) = param {
            assert_eq!(e["param"], p, "{v}");
        }
    }
}

pub enum Part<'a> {
    Text(&'a str, &'a str),
    File(&'a str, &'a str, &'a [u8]),
}

pub const BOUNDARY: &str = "----stapes-test-boundary-7MA4YWxkTrZu0gW";

pub fn multipart(parts: &[Part]) -> Vec<u8> {
    let mut b = Vec::new();
    for p in parts {
        b.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        match p {
            Part::Text(name, value) => {
                b.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
                );
                b.extend_from_slice(value.as_bytes());
            }
            Part::File(name, filename, data) => {
                b.extend_from_slice(
                    format!(
                        "Content-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n\
                         Content-Type: application/octet-stream\r\n\r\n"
                    )
                    .as_bytes(),
                );
                b.extend_from_slice(data);
            }
        }
        b.extend_from_slice(b"\r\n");
    }
    b.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    b
}

pub fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(300))).ok();
    s
}

pub fn request_head(method: &str, path: &str, addr: &str, headers: &[(&str, &str)]) -> String {
    let mut h = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h
}

/// Sends a request (write errors are ignored: the server may answer and close before the body
/// is all sent) and reads the response to the end of the connection.
pub fn send(addr: &str, head: &str, body: &[u8]) -> Resp {
    let mut s = connect(addr);
    let _ = s.write_all(head.as_bytes()).and_then(|_| s.write_all(body));
    read_response(&mut s)
}

pub fn read_response(s: &mut TcpStream) -> Resp {
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            // A reset after the response arrived (the server closed with request bytes unread).
            Err(_) if !raw.is_empty() => break,
            Err(e) => panic!("reading the response: {e}"),
        }
    }
    parse_response(&raw)
}

pub fn parse_response(raw: &[u8]) -> Resp {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size_str = String::from_utf8_lossy(&b[..eol]).into_owned();
        let size = usize::from_str_radix(size_str.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or_else(|_| panic!("bad chunk size {size_str:?}"));
        b = &b[eol + 2..];
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[..size.min(b.len())]);
        b = &b[(size + 2).min(b.len())..];
    }
    out
}

pub fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    send(addr, &request_head("GET", path, addr, headers), b"")
}

pub fn post_multipart(addr: &str, path: &str, parts: &[Part], headers: &[(&str, &str)]) -> Resp {
    let body = multipart(parts);
    let ctype = format!("multipart/form-data; boundary={BOUNDARY}");
    let len = body.len().to_string();
    let mut h: Vec<(&str, &str)> = vec![("Content-Type", &ctype), ("Content-Length", &len)];
    h.extend_from_slice(headers);
    send(addr, &request_head("POST", path, addr, &h), &body)
}

/// Starts an upload and stops half-way, holding the connection (and the server's admission
/// place) open until the caller finishes or drops it.
pub struct SlowUpload {
    pub stream: TcpStream,
    rest: Vec<u8>,
}

impl SlowUpload {
    pub fn start(addr: &str, parts: &[Part]) -> SlowUpload {
        let body = multipart(parts);
        let ctype = format!("multipart/form-data; boundary={BOUNDARY}");
        let len = body.len().to_string();
        let head = request_head(
            "POST",
            "/v1/audio/transcriptions",
            addr,
            &[("Content-Type", &ctype), ("Content-Length", &len)],
        );
        let mut stream = connect(addr);
        let half = body.len() / 2;
        stream.write_all(head.as_bytes()).expect("write head");
        stream.write_all(&body[..half]).expect("write first half");
        SlowUpload {
            stream,
            rest: body[half..].to_vec(),
        }
    }

    pub fn finish(mut self) -> Resp {
        let _ = self.stream.write_all(&self.rest);
        read_response(&mut self.stream)
    }

    /// The response the server sent without waiting for the rest of the body.
    pub fn response(mut self) -> Resp {
        read_response(&mut self.stream)
    }
}

/// Server-sent events' `data:` payloads, parsed as JSON.
pub fn sse_events(body: &str) -> Vec<serde_json::Value> {
    body.split("\n\n")
        .filter_map(|ev| {
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .map(|d| {
            serde_json::from_str(&d).unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {d}"))
        })
        .collect()
}
