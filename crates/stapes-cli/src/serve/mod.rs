//! `stapes serve`: OpenAI's audio API (`/v1/audio/transcriptions`, `/v1/audio/translations`,
//! `/v1/models`) plus `/health` and Prometheus `/metrics`, on axum.
//!
//! Thin by design: the model work is `stapes::Engine`; this module only admits, validates,
//! queues and formats. Transcriptions run on tokio's blocking pool behind two semaphores:
//! `--workers` jobs at once, and at most `--queue` more admitted and waiting (429 beyond).

mod errors;
mod form;
mod metrics;
mod models;
mod routes;
mod scheduler;
mod sse;
mod ws;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::{middleware, Router};
use metrics::Metrics;
use models::Registry;
use stapes::{EngineOptions, StapesError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A model to serve: NAME=PATH, or a path / cached model name (served under its file name).
    /// Repeatable; the first is the default (also answers to OpenAI's `whisper-1`).
    #[arg(short = 'm', long = "model")]
    models: Vec<String>,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port (the chosen address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on /v1/*. Repeatable. Default: $STAPES_API_KEY.
    #[arg(long = "api-key")]
    api_keys: Vec<String>,
    /// Largest request body accepted, in MB (OpenAI's limit is 25).
    #[arg(long, default_value_t = 25)]
    max_body_mb: u64,
    /// Longest audio accepted, in seconds.
    #[arg(long, default_value_t = 3600.0)]
    max_audio_seconds: f64,
    /// Requests that may wait for a worker; more get 429 with Retry-After.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Transcriptions run at once (each uses --threads CPU threads, or the GPU).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Per-request limit (upload, queue and transcription), in seconds.
    #[arg(long, default_value_t = 600.0)]
    timeout_s: f64,
    /// CPU threads per transcription (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// auto | cpu | cuda[:N] | vulkan
    #[arg(long, default_value = "auto")]
    device: String,
    /// auto | f32 | f16 | q8 (also STAPES_AUDIO_LANE=32|16|8)
    #[arg(long, default_value = "auto")]
    lane: String,
    /// Beam width for every request (OpenAI's API has no field for it); 1 is greedy.
    #[arg(long, default_value_t = 5)]
    beam_size: usize,
    /// Load models on their first request instead of at start-up.
    #[arg(long)]
    lazy_load: bool,
    /// Cross-request batching: requests for one model run together, their encoder windows in
    /// one batch, up to this many (1 turns batching off).
    #[arg(long, default_value_t = 8)]
    batch_max: usize,
    /// How long the first request of a batch waits for company, in milliseconds.
    #[arg(long, default_value_t = 10)]
    batch_wait_ms: u64,
}

pub struct AppState {
    models: Registry,
    api_keys: Vec<String>,
    max_body_bytes: usize,
    max_audio_seconds: f64,
    timeout: Duration,
    beam_size: usize,
    queue: usize,
    workers: usize,
    /// `queue + workers` places: every request from its headers to its last byte out.
    admission: Arc<Semaphore>,
    worker_slots: Arc<Semaphore>,
    /// Audio decoding is CPU work too; bound it by the cores rather than by the queue.
    decode_slots: Arc<Semaphore>,
    metrics: Arc<Metrics>,
    scheduler: scheduler::Scheduler,
    /// Turns true on the first shutdown signal: WebSocket sessions (which the HTTP server's
    /// graceful shutdown does not track once upgraded) finish their audio and close.
    stopping: tokio::sync::watch::Sender<bool>,
}

impl AppState {
    /// Transcription requests holding an admission place now.
    fn admitted(&self) -> usize {
        (self.queue + self.workers).saturating_sub(self.admission.available_permits())
    }
}

fn usage(msg: impl Into<String>) -> StapesError {
    StapesError::Usage(msg.into())
}

/// A week: longer limits are a typo, and `Instant + Duration` must not overflow.
const MAX_TIMEOUT_S: f64 = 7.0 * 86_400.0;

fn build_state(a: &Args) -> Result<AppState, StapesError> {
    if a.workers == 0 {
        return Err(usage("--workers must be at least 1"));
    }
    if a.batch_max == 0 || a.batch_max > 256 {
        return Err(usage("--batch-max must be between 1 and 256"));
    }
    if a.batch_wait_ms > 60_000 {
        return Err(usage("--batch-wait-ms must be at most 60000"));
    }
    if a.beam_size == 0 {
        return Err(usage("--beam-size must be at least 1"));
    }
    if a.threads == Some(0) {
        return Err(usage("--threads must be at least 1"));
    }
    if a.max_body_mb == 0 || a.max_body_mb > 4096 {
        return Err(usage("--max-body-mb must be between 1 and 4096"));
    }
    if !(a.max_audio_seconds.is_finite() && a.max_audio_seconds > 0.0) {
        return Err(usage("--max-audio-seconds must be a positive number"));
    }
    if !(a.timeout_s.is_finite() && a.timeout_s > 0.0 && a.timeout_s <= MAX_TIMEOUT_S) {
        return Err(usage(format!(
            "--timeout-s must be a positive number of seconds up to {MAX_TIMEOUT_S}"
        )));
    }
    // Semaphore::new panics above this; nobody queues that many transcriptions.
    if a.queue > 1_000_000 || a.workers > 10_000 {
        return Err(usage(
            "--queue must be at most 1000000 and --workers at most 10000",
        ));
    }
    let mut api_keys: Vec<String> = a.api_keys.iter().map(|k| k.trim().to_owned()).collect();
    if api_keys.is_empty() {
        if let Ok(k) = std::env::var("STAPES_API_KEY") {
            api_keys.push(k.trim().to_owned());
        }
    }
    if api_keys.iter().any(String::is_empty) {
        return Err(usage("--api-key must not be empty"));
    }
    let opts = EngineOptions {
        device: a.device.parse().map_err(usage)?,
        lane: stapes::runtime::requested_lane(Some(&a.lane)).map_err(usage)?,
        threads: a.threads,
    };
    let models = Registry::build(&a.models, &opts, a.lazy_load)?;
    let cores = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(2);
    Ok(AppState {
        models,
        api_keys,
        max_body_bytes: (a.max_body_mb * 1024 * 1024) as usize,
        max_audio_seconds: a.max_audio_seconds,
        timeout: Duration::from_secs_f64(a.timeout_s),
        beam_size: a.beam_size,
        queue: a.queue,
        workers: a.workers,
        admission: Arc::new(Semaphore::new(a.queue + a.workers)),
        worker_slots: Arc::new(Semaphore::new(a.workers)),
        decode_slots: Arc::new(Semaphore::new(cores)),
        metrics: Arc::new(Metrics::default()),
        scheduler: scheduler::Scheduler::new(a.batch_max, Duration::from_millis(a.batch_wait_ms)),
        stopping: tokio::sync::watch::Sender::new(false),
    })
}

fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/audio/transcriptions", post(routes::transcriptions))
        .route("/v1/audio/translations", post(routes::translations))
        .route("/v1/audio/stream", get(ws::stream))
        .route("/v1/models", get(routes::list_models))
        .route("/v1/models/{id}", get(routes::get_model))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            routes::auth,
        ));
    Router::new()
        .merge(v1)
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics))
        .method_not_allowed_fallback(routes::method_not_allowed)
        .fallback(routes::not_found)
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            routes::track,
        ))
        .with_state(state)
}

/// Resolves on the first SIGINT or SIGTERM.
async fn signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

async fn serve(state: Arc<AppState>, host: &str, port: u16) -> Result<(), StapesError> {
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .map_err(|e| StapesError::Internal(format!("cannot listen on {host}:{port}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| StapesError::Internal(e.to_string()))?;
    let names: Vec<&str> = state
        .models
        .entries()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    eprintln!(
        "stapes serve: listening on http://{addr} (models: {})",
        names.join(", ")
    );
    // Draining waits for in-flight requests; a second signal, or a request still running long
    // after its own timeout, ends the wait.
    let drain_limit = state.timeout + Duration::from_secs(10);
    let mut rx = state.stopping.subscribe();
    let on_signal = Arc::clone(&state);
    let server =
        axum::serve(listener, router(Arc::clone(&state))).with_graceful_shutdown(async move {
            signal().await;
            eprintln!("stapes serve: shutting down; draining in-flight requests and streams");
            on_signal.stopping.send_replace(true);
        });
    let drained = async {
        server
            .await
            .map_err(|e| StapesError::Internal(format!("server: {e}")))?;
        // The HTTP connections are done; upgraded WebSocket sessions are not among them: they
        // transcribe what they hold, send `final` and `done`, and close.
        while state.metrics.ws_sessions() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    };
    let forced = async move {
        if rx.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
        tokio::select! {
            _ = signal() => "a second signal",
            _ = tokio::time::sleep(drain_limit) => "the drain limit",
        }
    };
    tokio::select! {
        r = drained => r,
        why = forced => Err(StapesError::Internal(format!("stopped by {why} with requests still in flight"))),
    }
}

pub fn run(a: Args) -> Result<(), StapesError> {
    let state = Arc::new(build_state(&a)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("stapes-serve")
        .build()
        .map_err(|e| StapesError::Internal(format!("tokio runtime: {e}")))?;
    let result = rt.block_on(serve(state, &a.host, a.port));
    // A job whose request timed out may still be computing; do not wait for it at exit.
    rt.shutdown_timeout(Duration::from_secs(1));
    if result.is_ok() {
        eprintln!("stapes serve: stopped");
    }
    result
}
