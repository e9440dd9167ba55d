//! `GET /v1/audio/stream`: live transcription over a WebSocket.
//!
//! Protocol (one session per connection):
//! * query: `model`, `language`, `sample_rate` (default 16000), `partial_interval_ms` (default
//!   1000), `vad_threshold` (0.5), `min_silence_ms` (500);
//! * client → server: binary frames of 16-bit little-endian mono PCM at `sample_rate`, and text
//!   frames `{"type":"end"}` (no more audio: finish and answer `done`);
//! * server → client, JSON text frames: `ready`; `partial` (the open speech region re-transcribed,
//!   at most once per `partial_interval_ms` of new audio, `"final": false`); `final` (a speech
//!   region Silero VAD closed, or forced closed at 30 s, transcribed; times in seconds on the
//!   stream's timeline); `done` (the whole text) and a normal close; or `error` (OpenAI's error
//!   object) and a close. When the server shuts down (SIGINT/SIGTERM) it reads no more audio,
//!   answers what it holds as if the client had sent `end` (`final`, `done`) and closes with
//!   1001 (going away).
//!
//! Why this shape rather than OpenAI's realtime API (`/v1/realtime`, base64 PCM inside JSON
//! session events at 24 kHz): raw binary PCM frames are what sherpa-onnx's and WhisperLive's
//! servers take and what a microphone pipe produces, with no base64 overhead; the event names
//! follow the partial/final split those servers use.
//!
//! The socket is served by an async task; the VAD and the recogniser run on one blocking thread
//! per session fed through a bounded channel, so a client that sends faster than the server
//! transcribes is slowed by TCP back-pressure instead of growing a queue. Every transcription
//! takes a `--workers` place like any other request.

use super::errors::ApiError;
use super::models::ModelEntry;
use super::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use stapes::{Engine, StapesError, TranscribeOptions};
use stapes_cpu::CpuBackend;
use stapes_models::silero::{SileroVad, VadEvent, VadParams, VadRate};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, OwnedSemaphorePermit};

const SR: usize = 16_000;
/// An open speech region is transcribed and closed at this length: one Whisper window.
const MAX_REGION: usize = 30 * SR;
/// Regions shorter than this are not transcribed (Whisper invents words for clicks).
const MIN_REGION: usize = SR / 4;
/// Audio kept before the open region (or the present, when none is open): more than the
/// VAD's start pad plus one window, so a start it reports late is still in the buffer.
const KEEP_BEFORE: usize = SR;
/// Largest WebSocket message accepted: 256 KiB is 8 s of 16 kHz PCM (clients send 20–200 ms).
const MAX_MESSAGE: usize = 256 << 10;
/// Audio messages waiting for the session thread; beyond this the socket is not read. With
/// `MAX_MESSAGE` this bounds a session's queued audio at 4 MiB of PCM.
const QUEUED_MESSAGES: usize = 16;

#[derive(Debug, Default, Deserialize)]
pub struct StreamQuery {
    model: Option<String>,
    language: Option<String>,
    sample_rate: Option<u32>,
    partial_interval_ms: Option<u64>,
    vad_threshold: Option<f64>,
    min_silence_ms: Option<f64>,
}

/// A validated session configuration.
struct Config {
    entry: Arc<ModelEntry>,
    vad_path: PathBuf,
    language: Option<String>,
    sample_rate: u32,
    partial_every: usize,
    vad: VadParams,
    beam_size: usize,
    max_samples: usize,
}

pub async fn stream(
    State(s): State<Arc<AppState>>,
    q: Result<Query<StreamQuery>, QueryRejection>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    match accept(s, q, ws) {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn bad(param: &'static str, msg: String) -> ApiError {
    ApiError::invalid(Some(param), "invalid_value", msg)
}

fn validate(s: &AppState, q: StreamQuery) -> Result<Config, ApiError> {
    let entry = s.models.lookup(q.model.as_deref()).ok_or_else(|| {
        ApiError::not_found(
            Some("model"),
            "model_not_found",
            format!(
                "the model `{}` does not exist on this server",
                q.model.as_deref().unwrap_or("")
            ),
        )
    })?;
    let sample_rate = q.sample_rate.unwrap_or(16_000);
    if !(8_000..=192_000).contains(&sample_rate) {
        return Err(bad(
            "sample_rate",
            format!("sample_rate {sample_rate} is not between 8000 and 192000 Hz"),
        ));
    }
    let partial_ms = q.partial_interval_ms.unwrap_or(1000);
    if !(200..=30_000).contains(&partial_ms) {
        return Err(bad(
            "partial_interval_ms",
            format!("partial_interval_ms {partial_ms} is not between 200 and 30000"),
        ));
    }
    let threshold = q.vad_threshold.unwrap_or(0.5);
    if !(threshold.is_finite() && (0.05..=0.95).contains(&threshold)) {
        return Err(bad(
            "vad_threshold",
            format!("vad_threshold {threshold} is not between 0.05 and 0.95"),
        ));
    }
    let min_silence = q.min_silence_ms.unwrap_or(500.0);
    if !(min_silence.is_finite() && (50.0..=10_000.0).contains(&min_silence)) {
        return Err(bad(
            "min_silence_ms",
            format!("min_silence_ms {min_silence} is not between 50 and 10000"),
        ));
    }
    let language = q
        .language
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty());
    let vad_path = vad_model_path().map_err(|e| {
        ApiError::unavailable(
            "vad_unavailable",
            format!("the streaming endpoint needs the Silero VAD model: {e}"),
        )
    })?;
    Ok(Config {
        entry,
        vad_path,
        language,
        sample_rate,
        partial_every: (partial_ms as usize) * SR / 1000,
        vad: VadParams {
            threshold,
            min_silence_duration_ms: min_silence,
            speech_pad_ms: 100.0,
            ..VadParams::default()
        },
        beam_size: s.beam_size,
        max_samples: (s.max_audio_seconds * SR as f64) as usize,
    })
}

/// The cached `silero-vad` model (a directory holding `silero_vad.onnx`).
fn vad_model_path() -> Result<PathBuf, StapesError> {
    let p = stapes::models::resolve(stapes::vad::DEFAULT_VAD_MODEL)?;
    if p.is_file() {
        return Ok(p);
    }
    let f = p.join("silero_vad.onnx");
    if f.is_file() {
        Ok(f)
    } else {
        Err(StapesError::BadInput(format!(
            "{}: no silero_vad.onnx in this directory",
            p.display()
        )))
    }
}

fn accept(
    s: Arc<AppState>,
    q: Result<Query<StreamQuery>, QueryRejection>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let ws = ws.map_err(|e| {
        ApiError::invalid(
            None,
            "websocket_required",
            format!(
                "this endpoint speaks WebSocket (GET with `Upgrade: websocket`): {}",
                e.body_text()
            ),
        )
        .with_status(e.status())
    })?;
    let Query(q) = q.map_err(|e| ApiError::invalid(None, "invalid_query", e.body_text()))?;
    let cfg = validate(&s, q)?;
    // A session is a request from its upgrade to its close: it holds an admission place.
    let admission = Arc::clone(&s.admission)
        .try_acquire_owned()
        .map_err(|_| ApiError::queue_full(s.metrics.retry_after(s.workers)))?;
    Ok(ws
        .max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |socket| session(s, socket, cfg, admission)))
}

/// What the session thread tells the socket task.
enum Out {
    Event(Value),
    /// The session is over: send this (an error, or nothing) and close.
    Close(Option<Failure>),
}

/// An error event and the close code that goes with it.
struct Failure {
    error: ApiError,
    code: u16,
}

impl Failure {
    fn client(code: &'static str, msg: impl Into<String>, close: u16) -> Self {
        Failure {
            error: ApiError::invalid(None, code, msg),
            code: close,
        }
    }
}

impl From<StapesError> for Failure {
    fn from(e: StapesError) -> Self {
        let error = ApiError::from(e);
        // 1008: the client's fault (bad language, …); 1011: ours.
        let code = if error.status.is_client_error() {
            1008
        } else {
            1011
        };
        Failure { error, code }
    }
}

enum Cmd {
    Audio(Vec<f32>),
    End,
}

async fn session(
    s: Arc<AppState>,
    mut socket: WebSocket,
    cfg: Config,
    admission: OwnedSemaphorePermit,
) {
    let _admission = admission;
    let _open = s.metrics.enter_ws_session();
    let (cmd_tx, cmd_rx) = mpsc::channel::<Cmd>(QUEUED_MESSAGES);
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Out>();
    let ready = json!({
        "type": "ready",
        "model": cfg.entry.name,
        "sample_rate": cfg.sample_rate,
        "partial_interval_ms": cfg.partial_every * 1000 / SR,
    });
    let sample_rate = cfg.sample_rate;
    let worker_state = Arc::clone(&s);
    tokio::task::spawn_blocking(move || {
        let r = run_session(&worker_state, cfg, cmd_rx, &out_tx);
        let _ = out_tx.send(Out::Close(r.err()));
    });
    let mut cmd_tx = Some(cmd_tx);
    if send_json(&mut socket, &ready).await.is_err() {
        return;
    }
    let idle = s.timeout;
    let mut stopping = s.stopping.subscribe();
    let mut going_away = false;
    loop {
        tokio::select! {
            out = out_rx.recv() => match out {
                Some(Out::Event(v)) => {
                    s.metrics.observe_ws_event(v["type"].as_str().unwrap_or("other"));
                    if send_json(&mut socket, &v).await.is_err() {
                        return;
                    }
                }
                Some(Out::Close(failure)) => {
                    close(&mut socket, &s, failure, going_away).await;
                    return;
                }
                None => return,
            },
            // The server is shutting down: no more audio is read; what has arrived is
            // transcribed and answered as if the client had sent `end`.
            stop = async { stopping.wait_for(|stop| *stop).await.is_ok() }, if cmd_tx.is_some() => {
                if stop {
                    going_away = true;
                    if let Some(tx) = cmd_tx.take() {
                        let _ = tx.send(Cmd::End).await;
                    }
                }
            }
            msg = tokio::time::timeout(idle, socket.recv()), if cmd_tx.is_some() => {
                let failure = match msg {
                    Err(_) => Some(Failure::client(
                        "stream_idle",
                        format!("no message for {} s (--timeout-s)", idle.as_secs_f64()),
                        1008,
                    )),
                    // Gone, or closed by the client: nobody is left to read results.
                    Ok(None) | Ok(Some(Err(_))) | Ok(Some(Ok(Message::Close(_)))) => return,
                    Ok(Some(Ok(Message::Binary(b)))) => match pcm16(&b, sample_rate) {
                        Ok(samples) => {
                            let sent = match cmd_tx.as_ref() {
                                Some(tx) => tx.send(Cmd::Audio(samples)).await.is_ok(),
                                None => false,
                            };
                            // A closed channel means the session thread has stopped and
                            // is about to say why.
                            if !sent {
                                cmd_tx = None;
                            }
                            None
                        }
                        Err(f) => Some(f),
                    },
                    Ok(Some(Ok(Message::Text(t)))) => match control(t.as_str()) {
                        Ok(()) => {
                            if let Some(tx) = cmd_tx.take() {
                                let _ = tx.send(Cmd::End).await;
                            }
                            None
                        }
                        Err(f) => Some(f),
                    },
                    Ok(Some(Ok(_))) => None, // pings are answered by the library
                };
                if let Some(f) = failure {
                    close(&mut socket, &s, Some(f), going_away).await;
                    return;
                }
            }
        }
    }
}

async fn send_json(socket: &mut WebSocket, v: &Value) -> Result<(), axum::Error> {
    socket.send(Message::Text(v.to_string().into())).await
}

/// Sends the failure (if any) and the close frame: 1001 "going away" when the server is
/// shutting down, else 1000 "done".
async fn close(socket: &mut WebSocket, s: &AppState, failure: Option<Failure>, going_away: bool) {
    let frame = match failure {
        Some(f) => {
            s.metrics.observe_ws_event("error");
            let mut v = f.error.body();
            v["type"] = json!("error");
            let _ = send_json(socket, &v).await;
            // A close reason is at most 123 bytes.
            let reason: String = f.error.code.chars().take(120).collect();
            CloseFrame {
                code: f.code,
                reason: reason.into(),
            }
        }
        None if going_away => CloseFrame {
            code: 1001,
            reason: "server shutting down".into(),
        },
        None => CloseFrame {
            code: 1000,
            reason: "done".into(),
        },
    };
    let _ = socket.send(Message::Close(Some(frame))).await;
}

/// 16-bit little-endian mono PCM to samples in [-1, 1).
fn pcm16(bytes: &[u8], sample_rate: u32) -> Result<Vec<f32>, Failure> {
    if !bytes.len().is_multiple_of(2) {
        return Err(Failure::client(
            "invalid_audio_frame",
            format!(
                "a binary frame of {} bytes is not whole 16-bit samples (send s16le mono PCM at {sample_rate} Hz)",
                bytes.len()
            ),
            1007,
        ));
    }
    Ok(bytes
        .chunks_exact(2)
        .map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])) / 32768.0)
        .collect())
}

/// A text frame: only `{"type":"end"}` is defined.
fn control(text: &str) -> Result<(), Failure> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        Failure::client(
            "invalid_control_message",
            format!("a text frame must be a JSON object like {{\"type\":\"end\"}}: {e}"),
            1007,
        )
    })?;
    match v.get("type").and_then(Value::as_str) {
        Some("end") => Ok(()),
        Some(other) => Err(Failure::client(
            "invalid_control_message",
            format!("unknown control message type `{other}` (the only one is `end`)"),
            1003,
        )),
        None => Err(Failure::client(
            "invalid_control_message",
            "a text frame needs a `type` field (`end`)",
            1003,
        )),
    }
}

/// One Silero model for every session: its weights are read-only and each session keeps its own
/// state in its `VadStream`. Loading it per session cost a parse and a worker thread each time.
static SHARED_VAD: Mutex<Option<Arc<SileroVad<CpuBackend>>>> = Mutex::new(None);

fn shared_vad(path: &Path) -> Result<Arc<SileroVad<CpuBackend>>, StapesError> {
    let mut slot = SHARED_VAD.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(v) = slot.as_ref() {
        return Ok(Arc::clone(v));
    }
    let v = Arc::new(SileroVad::load(CpuBackend::new(1)?, path)?);
    *slot = Some(Arc::clone(&v));
    Ok(v)
}

/// The session thread: resample, VAD, transcribe; events go to `out`. Returns when the client
/// ends the stream (after `done`), goes away (the channel closes), or on an error.
fn run_session(
    s: &Arc<AppState>,
    cfg: Config,
    mut rx: mpsc::Receiver<Cmd>,
    out: &mpsc::UnboundedSender<Out>,
) -> Result<(), Failure> {
    let engine = cfg.entry.engine().map_err(|e| Failure {
        error: ApiError::unavailable(
            "model_unavailable",
            format!("model `{}` could not be loaded: {e}", cfg.entry.name),
        ),
        code: 1011,
    })?;
    let vad_model = shared_vad(&cfg.vad_path)?;
    let vad = vad_model
        .stream(VadRate::Hz16000, &cfg.vad)
        .map_err(StapesError::from)?;
    let mut st = Stream {
        s,
        engine: &engine,
        cfg: &cfg,
        out,
        vad,
        resampler: Resampler::new(cfg.sample_rate),
        buf: Vec::new(),
        buf_start: 0,
        fed: 0,
        open: None,
        last_partial: 0,
        language: cfg.language.clone(),
        text: String::new(),
        handle: tokio::runtime::Handle::current(),
    };
    loop {
        let Some(cmd) = rx.blocking_recv() else {
            return Ok(());
        };
        let mut end = matches!(cmd, Cmd::End);
        if let Cmd::Audio(x) = cmd {
            st.push(&x)?;
        }
        // Catch up on what queued meanwhile before spending time on a partial: a session that
        // falls behind skips partials, never finals.
        while !end {
            match rx.try_recv() {
                Ok(Cmd::Audio(x)) => st.push(&x)?,
                Ok(Cmd::End) => end = true,
                Err(_) => break,
            }
        }
        if end {
            return st.finish();
        }
        st.maybe_partial()?;
    }
}

/// One session's audio and speech state. Positions are 16 kHz samples since the stream began.
struct Stream<'a> {
    s: &'a Arc<AppState>,
    engine: &'a Engine,
    cfg: &'a Config,
    out: &'a mpsc::UnboundedSender<Out>,
    vad: stapes_models::silero::VadStream<'a, CpuBackend>,
    resampler: Resampler,
    /// Samples from `buf_start` to `fed`: the open region and a little before it.
    buf: Vec<f32>,
    buf_start: usize,
    fed: usize,
    /// Start of the open speech region.
    open: Option<usize>,
    /// Where the last partial (or the region) began being heard.
    last_partial: usize,
    /// The first detected language holds for the rest of the stream.
    language: Option<String>,
    text: String,
    handle: tokio::runtime::Handle,
}

impl Stream<'_> {
    fn emit(&self, v: Value) {
        let _ = self.out.send(Out::Event(v));
    }

    fn push(&mut self, input: &[f32]) -> Result<(), Failure> {
        let x = self.resampler.push(input);
        self.push16(&x)
    }

    /// Samples at 16 kHz: buffer them, run the VAD, close regions it ends or that grew too long.
    fn push16(&mut self, x: &[f32]) -> Result<(), Failure> {
        if self.fed + x.len() > self.cfg.max_samples {
            return Err(Failure {
                error: ApiError::too_large(
                    None,
                    "audio_too_long",
                    format!(
                        "the stream passed this server's limit of {} s of audio (--max-audio-seconds)",
                        self.s.max_audio_seconds
                    ),
                ),
                code: 1009,
            });
        }
        self.buf.extend_from_slice(x);
        self.fed += x.len();
        let frames = self.vad.feed(x).map_err(StapesError::from)?;
        let window = VadRate::Hz16000.window();
        for f in frames {
            self.force_close((f.window + 1) * window)?;
            self.on_event(f.event)?;
        }
        self.force_close(self.fed)?;
        self.trim();
        Ok(())
    }

    fn on_event(&mut self, ev: Option<VadEvent>) -> Result<(), Failure> {
        match ev {
            Some(VadEvent::SpeechStart { sample }) => {
                let a = sample.max(self.buf_start);
                self.open = Some(a);
                self.last_partial = a;
            }
            Some(VadEvent::SpeechEnd { end, .. }) => {
                if let Some(a) = self.open.take() {
                    self.final_region(a, end.min(self.fed))?;
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Bounded memory and Whisper's window: a region reaching 30 s is closed there and a new one
    /// opened where it stopped.
    fn force_close(&mut self, now: usize) -> Result<(), Failure> {
        while let Some(a) = self.open {
            if now.saturating_sub(a) < MAX_REGION {
                break;
            }
            self.final_region(a, a + MAX_REGION)?;
            self.open = Some(a + MAX_REGION);
            self.last_partial = a + MAX_REGION;
        }
        Ok(())
    }

    fn trim(&mut self) {
        let keep_from = self
            .open
            .unwrap_or(self.fed)
            .min(self.fed.saturating_sub(KEEP_BEFORE));
        // Drain in steps of a few seconds, not per message.
        if keep_from > self.buf_start + 4 * SR {
            self.buf.drain(..keep_from - self.buf_start);
            self.buf_start = keep_from;
        }
    }

    fn audio(&self, a: usize, b: usize) -> &[f32] {
        let a = a.clamp(self.buf_start, self.fed) - self.buf_start;
        let b = b.clamp(self.buf_start, self.fed) - self.buf_start;
        &self.buf[a..b.max(a)]
    }

    /// Transcribe `[a, b)` with a worker place, as every request does.
    fn transcribe(&mut self, a: usize, b: usize) -> Result<stapes::Transcript, Failure> {
        let permit = {
            let _waiting = self.s.metrics.enter_queue();
            self.handle
                .block_on(Arc::clone(&self.s.worker_slots).acquire_owned())
                .map_err(|_| Failure {
                    error: ApiError::internal("the worker pool is closed"),
                    code: 1011,
                })?
        };
        let _permit = permit;
        let _running = self.s.metrics.enter_running();
        let opts = TranscribeOptions {
            language: self.language.clone(),
            beam_size: self.cfg.beam_size,
            initial_prompt: self.context(),
            ..TranscribeOptions::default()
        };
        let audio = self.audio(a, b);
        let t0 = std::time::Instant::now();
        let r = self.engine.transcribe(audio, &opts, None);
        let secs = r.is_ok().then_some(audio.len() as f64 / SR as f64);
        self.s
            .metrics
            .observe_job(&self.cfg.entry.name, t0.elapsed(), secs);
        Ok(r?)
    }

    /// The end of the text so far as the prompt of the next region, as Whisper's own long-form
    /// decoding conditions each window on the previous one: casing and punctuation carry over
    /// the cuts the VAD makes. A few words only, so a mistake cannot echo for long.
    fn context(&self) -> Option<String> {
        const WORDS: usize = 24;
        let words: Vec<&str> = self.text.split_whitespace().collect();
        let tail = &words[words.len().saturating_sub(WORDS)..];
        (!tail.is_empty()).then(|| tail.join(" "))
    }

    fn final_region(&mut self, a: usize, b: usize) -> Result<(), Failure> {
        let (a, b) = (a.max(self.buf_start), b.min(self.fed));
        if b < a + MIN_REGION {
            return Ok(());
        }
        let t = self.transcribe(a, b)?;
        if self.language.is_none() && !t.language.is_empty() {
            self.language = Some(t.language.clone());
        }
        let text = t.text();
        if text.is_empty() {
            return Ok(());
        }
        let (off, end) = (a as f64 / SR as f64, b as f64 / SR as f64);
        // Whisper's last timestamp may overshoot the audio it was given.
        let at = |x: f64| (off + x).clamp(off, end);
        let segments: Vec<Value> = t
            .segments
            .iter()
            .filter(|s| !s.text.trim().is_empty())
            .map(|s| json!({"start": at(s.start), "end": at(s.end), "text": s.text}))
            .collect();
        if !self.text.is_empty() {
            self.text.push(' ');
        }
        self.text.push_str(&text);
        self.emit(json!({
            "type": "final",
            "final": true,
            "start": off,
            "end": end,
            "text": text,
            "language": t.language,
            "segments": segments,
        }));
        Ok(())
    }

    fn maybe_partial(&mut self) -> Result<(), Failure> {
        let Some(a) = self.open else {
            return Ok(());
        };
        if self.fed < self.last_partial + self.cfg.partial_every || self.fed < a + SR / 2 {
            return Ok(());
        }
        let b = self.fed;
        self.last_partial = b;
        let t = self.transcribe(a, b)?;
        let text = t.text();
        if !text.is_empty() {
            self.emit(json!({
                "type": "partial",
                "final": false,
                "start": a as f64 / SR as f64,
                "end": b as f64 / SR as f64,
                "text": text,
            }));
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(), Failure> {
        let tail = self.resampler.finish();
        self.push16(&tail)?;
        let frames = self.vad.finish().map_err(StapesError::from)?;
        for f in frames {
            self.on_event(f.event)?;
        }
        if let Some(a) = self.open.take() {
            self.final_region(a, self.fed)?;
        }
        self.emit(json!({
            "type": "done",
            "text": self.text,
            "duration": self.fed as f64 / SR as f64,
        }));
        Ok(())
    }
}

/// Streaming windowed-sinc resampler to 16 kHz: each output sample is the band-limited input
/// interpolated at its exact time, so chunk boundaries change nothing.
pub struct Resampler {
    from: u32,
    /// Input samples from absolute index `base` on.
    hist: Vec<f32>,
    base: usize,
    /// Next output sample index.
    next: usize,
    /// Cut-off in cycles per input sample, and the kernel's half-width in input samples.
    cutoff: f64,
    half: usize,
}

/// Zero crossings of the sinc on each side of the kernel.
const SINC_LOBES: f64 = 16.0;

impl Resampler {
    pub fn new(from: u32) -> Self {
        // 0.45 of the lower Nyquist frequency leaves room for the window's transition band.
        let cutoff = 0.45 * (SR as f64 / from as f64).min(1.0);
        let half = (SINC_LOBES / (2.0 * cutoff)).ceil() as usize;
        Resampler {
            from,
            hist: Vec::new(),
            base: 0,
            next: 0,
            cutoff,
            half,
        }
    }

    fn pos(&self, n: usize) -> f64 {
        n as f64 * self.from as f64 / SR as f64
    }

    pub fn push(&mut self, x: &[f32]) -> Vec<f32> {
        if self.from as usize == SR {
            return x.to_vec();
        }
        self.hist.extend_from_slice(x);
        self.drain(false)
    }

    /// The outputs still owed for the input given (the future is taken as silence).
    pub fn finish(&mut self) -> Vec<f32> {
        if self.from as usize == SR {
            return Vec::new();
        }
        self.drain(true)
    }

    fn drain(&mut self, flush: bool) -> Vec<f32> {
        let have = self.base + self.hist.len();
        let total_out = (have * SR).div_ceil(self.from as usize);
        let mut out = Vec::new();
        loop {
            if flush && self.next >= total_out {
                break;
            }
            let t = self.pos(self.next);
            let centre = t.floor() as usize;
            if !flush && centre + self.half >= have {
                break;
            }
            out.push(self.sample_at(t));
            self.next += 1;
        }
        let oldest = (self.pos(self.next).floor() as usize).saturating_sub(self.half + 1);
        if oldest > self.base {
            let n = (oldest - self.base).min(self.hist.len());
            self.hist.drain(..n);
            self.base += n;
        }
        out
    }

    fn sample_at(&self, t: f64) -> f32 {
        let centre = t.floor() as i64;
        let h = self.half as i64;
        let (mut acc, mut norm) = (0.0f64, 0.0f64);
        for k in centre - h + 1..=centre + h {
            let d = t - k as f64;
            let w = self.kernel(d);
            norm += w;
            let i = k - self.base as i64;
            if i >= 0 && (i as usize) < self.hist.len() {
                acc += w * f64::from(self.hist[i as usize]);
            }
        }
        // Normalising by the taps' sum keeps the DC gain exactly 1 at every phase.
        if norm.abs() > 1e-12 {
            (acc / norm) as f32
        } else {
            0.0
        }
    }

    fn kernel(&self, d: f64) -> f64 {
        let x = d / self.half as f64;
        if x.abs() >= 1.0 {
            return 0.0;
        }
        let arg = 2.0 * self.cutoff * d;
        let sinc = if arg.abs() < 1e-12 {
            1.0
        } else {
            (std::f64::consts::PI * arg).sin() / (std::f64::consts::PI * arg)
        };
        // Blackman window over [-half, half].
        let w = 0.42
            + 0.5 * (std::f64::consts::PI * x).cos()
            + 0.08 * (2.0 * std::f64::consts::PI * x).cos();
        sinc * w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sine(rate: u32, hz: f64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                (0.5 * (2.0 * std::f64::consts::PI * hz * i as f64 / rate as f64).sin()) as f32
            })
            .collect()
    }

    fn resample_in_chunks(from: u32, x: &[f32], chunk: usize) -> Vec<f32> {
        let mut r = Resampler::new(from);
        let mut out = Vec::new();
        for c in x.chunks(chunk) {
            out.extend(r.push(c));
        }
        out.extend(r.finish());
        out
    }

    #[test]
    fn resampler_keeps_a_tone_and_ignores_chunking() {
        for (from, hz) in [(48_000u32, 1000.0), (44_100, 440.0), (8_000, 500.0)] {
            let x = sine(from, hz, from as usize); // one second
            let a = resample_in_chunks(from, &x, 4801);
            let b = resample_in_chunks(from, &x, 160);
            assert_eq!(a, b, "{from} Hz: chunking changed the output");
            assert_eq!(a.len(), SR, "{from} Hz");
            let want = sine(SR as u32, hz, SR);
            // Away from the edges (where the input starts and stops abruptly).
            let err = a[800..SR - 800]
                .iter()
                .zip(&want[800..SR - 800])
                .map(|(p, q)| (p - q).abs())
                .fold(0.0f32, f32::max);
            assert!(err < 5e-3, "{from} Hz: max error {err}");
        }
    }

    #[test]
    fn resampler_removes_what_16k_cannot_hold() {
        // 12 kHz at 48 kHz is above the 8 kHz Nyquist frequency of the output: it must vanish,
        // not fold back to 4 kHz.
        let x = sine(48_000, 12_000.0, 48_000);
        let y = resample_in_chunks(48_000, &x, 1000);
        let rms = (y[800..SR - 800].iter().map(|v| v * v).sum::<f32>() / (SR - 1600) as f32).sqrt();
        assert!(rms < 1e-3, "alias rms {rms}");
    }

    #[test]
    fn resampler_agrees_with_the_file_resampler_on_speech() {
        // jfk.wav at 8 kHz (2:1 average), back to 16 kHz both ways: the streaming sinc and
        // stapes_audio's rubato FFT resampler (the file decoder's) must hear the same signal.
        let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../samples/jfk.wav");
        let bytes = std::fs::read(p).expect("samples/jfk.wav");
        let x = stapes::audio::decode_bytes(bytes, Some("wav")).expect("decode");
        let down: Vec<f32> = x.chunks_exact(2).map(|p| 0.5 * (p[0] + p[1])).collect();
        let ours = resample_in_chunks(8_000, &down, 1600);
        let theirs = stapes::audio::resample(&down, 8_000).expect("rubato");
        assert_eq!(ours.len(), theirs.len());
        let mid = 1600..ours.len() - 1600;
        let sig: f64 = theirs[mid.clone()]
            .iter()
            .map(|v| f64::from(*v).powi(2))
            .sum();
        let err: f64 = ours[mid.clone()]
            .iter()
            .zip(&theirs[mid])
            .map(|(a, b)| f64::from(a - b).powi(2))
            .sum();
        let snr_db = 10.0 * (sig / err).log10();
        assert!(snr_db > 30.0, "SNR {snr_db:.1} dB");
    }

    #[test]
    fn pcm_frames_and_controls() {
        let s = pcm16(&[0x00, 0x80, 0xff, 0x7f], 16_000).ok().expect("pcm");
        assert_eq!(s, vec![-1.0, 32767.0 / 32768.0]);
        let e = pcm16(&[1, 2, 3], 16_000).expect_err("odd length");
        assert_eq!((e.code, e.error.code), (1007, "invalid_audio_frame"));
        assert!(control(r#"{"type":"end"}"#).is_ok());
        for bad in ["", "end", "{}", r#"{"type":"stop"}"#, "[1,2]", "\u{0}"] {
            assert!(control(bad).is_err(), "{bad:?}");
        }
    }
}
