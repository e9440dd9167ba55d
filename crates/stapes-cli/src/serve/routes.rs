//! Handlers. The order inside a transcription request is chosen so that the cheap refusals come
//! first: auth (middleware), declared size, queue admission, then the form, then the audio, and
//! only then a worker.

use super::errors::ApiError;
use super::form::{self, ResponseFormat, Upload};
use super::models::ModelEntry;
use super::AppState;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use stapes::audio::AudioError;
use stapes::output::{self, RunInfo};
use stapes::{Task, TranscribeOptions, Transcript};
use std::path::Path;
use std::sync::Arc;
use tokio::time::{timeout_at, Instant};

type AppRef = State<Arc<AppState>>;

const SAMPLE_RATE: f64 = 16_000.0;

pub async fn transcriptions(State(s): AppRef, req: Request) -> Response {
    handle(s, req, Task::Transcribe)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub async fn translations(State(s): AppRef, req: Request) -> Response {
    handle(s, req, Task::Translate)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub async fn list_models(State(s): AppRef) -> Json<Value> {
    let data: Vec<Value> = s.models.entries().iter().map(|e| model_object(e)).collect();
    Json(json!({"object": "list", "data": data}))
}

pub async fn get_model(
    State(s): AppRef,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<Value>, ApiError> {
    s.models
        .entries()
        .iter()
        .find(|e| e.name == id)
        .map(|e| Json(model_object(e)))
        .ok_or_else(|| unknown_model(&id))
}

fn model_object(e: &ModelEntry) -> Value {
    json!({
        "id": e.name,
        "object": "model",
        "created": 0,
        "owned_by": "stapes",
        "family": e.family(),
    })
}

pub async fn health(State(s): AppRef) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "models": s.models.entries().iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        "queue_depth": s.metrics.queue_depth(),
        "jobs_running": s.metrics.running(),
        "requests_admitted": s.admitted(),
    }))
}

pub async fn metrics(State(s): AppRef) -> Response {
    let mut body = s.metrics.render(s.queue, s.workers, s.admitted());
    // Alive tasks: a number that keeps growing under steady load is a leak.
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    body.push_str(&format!(
        "# HELP stapes_tokio_alive_tasks Tasks alive on the server's runtime.\n# TYPE stapes_tokio_alive_tasks gauge\nstapes_tokio_alive_tasks {tasks}\n"
    ));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

pub async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(
        None,
        "not_found",
        format!("no route for {} {}", req.method(), req.uri().path()),
    )
}

pub async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::invalid(
        None,
        "method_not_allowed",
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
    .with_status(StatusCode::METHOD_NOT_ALLOWED)
}

/// Counts every answer by route template (never the raw path, which a client controls).
pub async fn track(State(s): AppRef, req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let start = std::time::Instant::now();
    let in_flight = s.metrics.enter_in_flight();
    let resp = next.run(req).await;
    drop(in_flight);
    s.metrics
        .observe_request(&endpoint, resp.status().as_u16(), start.elapsed());
    resp
}

pub async fn auth(State(s): AppRef, req: Request, next: Next) -> Response {
    if s.api_keys.is_empty() {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key.trim());
    match given {
        None => ApiError::unauthorized(
            "no API key given: send `Authorization: Bearer KEY` (the server runs with --api-key)",
        )
        .into_response(),
        Some(k)
            if s.api_keys
                .iter()
                .any(|want| same_secret(want.as_bytes(), k.as_bytes())) =>
        {
            next.run(req).await
        }
        Some(_) => ApiError::unauthorized("incorrect API key provided").into_response(),
    }
}

/// Compares without an early exit on the first differing byte, so response timing does not
/// reveal how much of a guessed key was right.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

fn unknown_model(name: &str) -> ApiError {
    ApiError::not_found(
        Some("model"),
        "model_not_found",
        format!("the model `{name}` does not exist on this server"),
    )
}

fn check_headers(headers: &HeaderMap, max_body: usize) -> Result<(), ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body as u64) {
        return Err(ApiError::too_large(
            None,
            "request_too_large",
            format!("the request body is larger than the server accepts ({max_body} bytes, --max-body-mb)"),
        ));
    }
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ctype
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("multipart/form-data")
    {
        return Err(ApiError::invalid(
            None,
            "invalid_content_type",
            format!("expected a multipart/form-data body with a `file` field, got `{ctype}`"),
        )
        .with_status(StatusCode::UNSUPPORTED_MEDIA_TYPE));
    }
    Ok(())
}

async fn handle(s: Arc<AppState>, req: Request, task: Task) -> Result<Response, ApiError> {
    check_headers(req.headers(), s.max_body_bytes)?;
    // Admission precedes reading the body, so a full server does not buffer uploads it will
    // refuse; the permit lives until the response (or the SSE stream) is done.
    let admission = Arc::clone(&s.admission)
        .try_acquire_owned()
        .map_err(|_| ApiError::queue_full(s.metrics.retry_after(s.workers)))?;
    let deadline = Instant::now() + s.timeout;
    let mp = Multipart::from_request(req, &())
        .await
        .map_err(|e| ApiError::invalid(None, "invalid_multipart", e.body_text()))?;
    let raw = timeout_at(deadline, form::read(mp)).await.map_err(|_| {
        ApiError::request_timeout("the request body did not arrive within the server's timeout")
    })??;
    let r = form::validate(raw)?;
    let entry = s
        .models
        .lookup(r.model.as_deref())
        .ok_or_else(|| unknown_model(r.model.as_deref().unwrap_or("")))?;
    let samples = timeout_at(deadline, decode(&s, r.file))
        .await
        .map_err(|_| too_slow())??;
    let seconds = samples.len() as f64 / SAMPLE_RATE;
    if seconds > s.max_audio_seconds {
        return Err(ApiError::too_large(
            Some("file"),
            "audio_too_long",
            format!(
                "the audio is {seconds:.1} s long; this server accepts up to {} s",
                s.max_audio_seconds
            ),
        ));
    }
    let opts = TranscribeOptions {
        language: r.language,
        task,
        beam_size: s.beam_size,
        temperature: r.temperature,
        initial_prompt: r.prompt,
        word_timestamps: r.words,
        ..TranscribeOptions::default()
    };
    if r.stream {
        return Ok(super::sse::respond(
            s, entry, samples, opts, deadline, admission,
        ));
    }
    let job = run_job(Arc::clone(&s), entry, samples, opts);
    let t = timeout_at(deadline, job).await.map_err(|_| too_slow())??;
    drop(admission);
    Ok(render(r.format, &t, task, r.segments))
}

fn too_slow() -> ApiError {
    ApiError::processing_timeout(
        "the transcription did not finish within the server's timeout (--timeout-s)",
    )
}

async fn decode(s: &AppState, file: Upload) -> Result<Vec<f32>, ApiError> {
    let slot = Arc::clone(&s.decode_slots)
        .acquire_owned()
        .await
        .map_err(|_| ApiError::internal("the decoder pool is closed"))?;
    let name = file
        .filename
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "file".to_owned());
    let ext = file
        .filename
        .as_deref()
        .and_then(|n| Path::new(n).extension())
        .and_then(|e| e.to_str())
        .map(str::to_owned);
    // The slot moves into the job: a cancelled request must not free it while decoding goes on.
    let joined = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        stapes::audio::decode_bytes(file.bytes, ext.as_deref())
    })
    .await;
    match joined {
        Ok(Ok(samples)) if samples.is_empty() => Err(ApiError::invalid(
            Some("file"),
            "invalid_audio",
            format!("{name}: no audio samples"),
        )),
        Ok(Ok(samples)) => Ok(samples),
        Ok(Err(e)) => Err(audio_error(e, &name)),
        Err(_) => Err(ApiError::internal("the audio decoder failed")),
    }
}

fn audio_error(e: AudioError, name: &str) -> ApiError {
    let msg = e.to_string().replace("<input bytes>", name);
    match e {
        AudioError::Unsupported { .. } => {
            ApiError::invalid(Some("file"), "unsupported_audio_format", msg)
                .with_status(StatusCode::UNSUPPORTED_MEDIA_TYPE)
        }
        AudioError::TooLong { .. } => ApiError::too_large(Some("file"), "audio_too_long", msg),
        AudioError::Empty { .. } => ApiError::invalid(Some("file"), "empty_file", msg),
        _ => ApiError::invalid(Some("file"), "invalid_audio", msg),
    }
}

/// Waits for a worker, then transcribes on the blocking pool. Dropping the future while it waits
/// gives the place up; once running, the job finishes (the engine has no cancellation) and keeps
/// its worker slot until then, so `--workers` really bounds the compute.
async fn run_job(
    s: Arc<AppState>,
    entry: Arc<ModelEntry>,
    samples: Vec<f32>,
    opts: TranscribeOptions,
) -> Result<Transcript, ApiError> {
    if s.scheduler.batching() {
        return super::scheduler::submit(s, entry, samples, opts).await;
    }
    run_on_worker(s, entry, samples, opts, None).await
}

/// One transcription on a worker place and the blocking pool; with `segments`, each final
/// segment is sent there the moment the engine has it (a send fails only when the client has
/// gone; the engine cannot stop early, so it finishes and the segments are dropped).
pub(super) async fn run_on_worker(
    s: Arc<AppState>,
    entry: Arc<ModelEntry>,
    samples: Vec<f32>,
    opts: TranscribeOptions,
    segments: Option<tokio::sync::mpsc::UnboundedSender<stapes::Segment>>,
) -> Result<Transcript, ApiError> {
    let permit = {
        let _waiting = s.metrics.enter_queue();
        Arc::clone(&s.worker_slots)
            .acquire_owned()
            .await
            .map_err(|_| ApiError::internal("the worker pool is closed"))?
    };
    let metrics = Arc::clone(&s.metrics);
    let joined = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let _running = metrics.enter_running();
        let engine = entry.engine().map_err(|e| {
            ApiError::unavailable(
                "model_unavailable",
                format!("model `{}` could not be loaded: {e}", entry.name),
            )
        })?;
        let t0 = std::time::Instant::now();
        let r = engine.transcribe_streaming(&samples, &opts, None, &mut |seg| {
            if let Some(tx) = &segments {
                let _ = tx.send(seg.clone());
            }
        });
        let audio = r.is_ok().then_some(samples.len() as f64 / SAMPLE_RATE);
        metrics.observe_job(&entry.name, t0.elapsed(), audio);
        r.map_err(ApiError::from)
    })
    .await;
    joined.unwrap_or_else(|e| {
        tracing::error!("transcription job failed: {e}");
        Err(ApiError::internal(
            "the transcription job failed unexpectedly",
        ))
    })
}

fn usage(t: &Transcript) -> Value {
    json!({"type": "duration", "seconds": t.duration.max(0.0).ceil() as u64})
}

fn plain(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

pub fn render(format: ResponseFormat, t: &Transcript, task: Task, segments: bool) -> Response {
    match format {
        ResponseFormat::Json => Json(json!({"text": t.text(), "usage": usage(t)})).into_response(),
        ResponseFormat::Text => plain(t.text() + "\n"),
        ResponseFormat::Srt => plain(output::srt(t)),
        ResponseFormat::Vtt => plain(output::vtt(t)),
        ResponseFormat::VerboseJson => {
            let info = RunInfo {
                task: match task {
                    Task::Transcribe => "transcribe".into(),
                    Task::Translate => "translate".into(),
                },
                ..RunInfo::default()
            };
            let mut v = output::verbose_json(t, &info);
            if let Some(obj) = v.as_object_mut() {
                if !segments {
                    obj.remove("segments");
                }
                obj.insert("usage".into(), usage(t));
            }
            Json(v).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"key", b"key"));
        assert!(!same_secret(b"key", b"ke"));
        assert!(!same_secret(b"key", b"kez"));
        assert!(!same_secret(b"", b"k"));
    }

    #[test]
    fn declared_size_and_content_type() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            "multipart/form-data; boundary=x".parse().expect("header"),
        );
        h.insert(header::CONTENT_LENGTH, "100".parse().expect("header"));
        assert!(check_headers(&h, 100).is_ok());
        assert_eq!(
            check_headers(&h, 99).err().map(|e| e.status),
            Some(StatusCode::PAYLOAD_TOO_LARGE)
        );
        h.insert(
            header::CONTENT_TYPE,
            "application/json".parse().expect("header"),
        );
        assert_eq!(
            check_headers(&h, 100).err().map(|e| e.status),
            Some(StatusCode::UNSUPPORTED_MEDIA_TYPE)
        );
    }

    #[test]
    fn audio_errors_map_to_statuses() {
        let p = std::path::PathBuf::from("<input bytes>");
        let e = audio_error(
            AudioError::Unsupported {
                path: p.clone(),
                detail: "x".into(),
            },
            "a.txt",
        );
        assert_eq!(
            (e.status, e.code),
            (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_audio_format"
            )
        );
        assert!(e.message.starts_with("a.txt: "));
        let e = audio_error(
            AudioError::Corrupt {
                path: p,
                detail: "truncated".into(),
            },
            "a.wav",
        );
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, "invalid_audio")
        );
    }
}
