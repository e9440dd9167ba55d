//! `stream=true` on the transcription endpoints: OpenAI's transcription events sent as each
//! segment becomes final (Whisper: after each 30 s window), not when the whole file is done.
//!
//! The engine runs on the blocking pool and hands its segments through a channel; the response
//! stream polls that channel and the job together, so a client that goes away drops the job's
//! future (giving up its queue place) and the engine's later sends simply find nobody listening.

use super::errors::ApiError;
use super::models::ModelEntry;
use super::AppState;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde_json::json;
use stapes::{Segment, TranscribeOptions, Transcript};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::time::{timeout_at, Instant};

type Job = Pin<Box<dyn Future<Output = Result<Transcript, ApiError>> + Send>>;

/// The event stream of one `stream=true` request. `admission` is held until the last event.
pub fn respond(
    s: Arc<AppState>,
    entry: Arc<ModelEntry>,
    samples: Vec<f32>,
    opts: TranscribeOptions,
    deadline: Instant,
    admission: OwnedSemaphorePermit,
) -> Response {
    let (tx, rx) = mpsc::unbounded_channel();
    let job: Job = Box::pin(super::routes::run_on_worker(
        s,
        entry,
        samples,
        opts,
        Some(tx),
    ));
    let state = Pump {
        job: Some(job),
        rx,
        sent_any: false,
        result: None,
        deadline,
        finished: false,
        _admission: admission,
    };
    let events = futures_util::stream::unfold(state, Pump::next).map(Ok::<_, Infallible>);
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
        .into_response()
}

struct Pump {
    job: Option<Job>,
    rx: mpsc::UnboundedReceiver<Segment>,
    /// Whether a delta has been sent (the first one loses its leading space).
    sent_any: bool,
    result: Option<Result<Transcript, ApiError>>,
    deadline: Instant,
    finished: bool,
    _admission: OwnedSemaphorePermit,
}

impl Pump {
    async fn next(mut self) -> Option<(Event, Pump)> {
        if self.finished {
            return None;
        }
        loop {
            if let Some(job) = self.job.as_mut() {
                tokio::select! {
                    biased;
                    Some(seg) = self.rx.recv() => {
                        if let Some(ev) = self.delta(&seg) {
                            return Some((ev, self));
                        }
                    }
                    r = timeout_at(self.deadline, job) => {
                        self.job = None;
                        self.result = Some(r.unwrap_or_else(|_| Err(too_slow())));
                    }
                }
            } else {
                // The job has returned, so every segment it found is already in the channel.
                if let Ok(seg) = self.rx.try_recv() {
                    if let Some(ev) = self.delta(&seg) {
                        return Some((ev, self));
                    }
                    continue;
                }
                self.finished = true;
                let r = self
                    .result
                    .take()
                    .unwrap_or_else(|| Err(ApiError::internal("the transcription job vanished")));
                let ev = match r {
                    Ok(t) => done_event(&t.text()),
                    Err(e) => error_event(&e),
                };
                return Some((ev, self));
            }
        }
    }

    /// OpenAI's delta for one segment. The first drops the leading space Whisper puts on every
    /// segment, so the deltas concatenate to the transcript's text (up to trailing space).
    fn delta(&mut self, seg: &Segment) -> Option<Event> {
        let delta = if !self.sent_any {
            seg.text.trim_start()
        } else {
            seg.text.as_str()
        };
        if delta.is_empty() {
            return None;
        }
        self.sent_any = true;
        Some(delta_event(seg, delta))
    }
}

/// `transcript.text.delta`, with the segment's times as an extra field (clients ignore it).
pub fn delta_event(seg: &Segment, delta: &str) -> Event {
    let v = json!({
        "type": "transcript.text.delta",
        "delta": delta,
        "segment_id": seg.id.to_string(),
        "segment": {"id": seg.id, "start": seg.start, "end": seg.end, "text": seg.text},
    });
    Event::default().data(v.to_string())
}

/// `transcript.text.done`; no `usage`: OpenAI's done event knows token usage, not duration.
pub fn done_event(text: &str) -> Event {
    let v = json!({"type": "transcript.text.done", "text": text});
    Event::default().data(v.to_string())
}

pub fn error_event(e: &ApiError) -> Event {
    let mut v = e.body();
    v["type"] = json!("error");
    Event::default().data(v.to_string())
}

fn too_slow() -> ApiError {
    ApiError::processing_timeout(
        "the transcription did not finish within the server's timeout (--timeout-s)",
    )
}
