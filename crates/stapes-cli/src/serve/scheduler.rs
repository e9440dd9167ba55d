//! Cross-request batching: transcription jobs for the same model that arrive close together run
//! as one `Engine::transcribe_batch_with` on one worker, their encoder windows batched (one
//! encoder call per round for every live request; see `stapes_models::whisper::batch`).
//!
//! One dispatcher task takes the first waiting job, waits for a worker place, then gathers more
//! jobs for the same model: whatever is already queued, plus what arrives until `--batch-wait-ms`
//! after the first job arrived, up to `--batch-max`. Under load the queue fills while the workers
//! are busy, so batches form without waiting; an idle server adds at most `--batch-wait-ms` to a
//! lone request. `--batch-max 1` bypasses all this (routes.rs runs each job alone).
//!
//! Options may differ inside a batch (only the encoder is shared, and it takes no options), so
//! "batch-compatible" is "same model". Each reply leaves as soon as its own input is done.
//! A job whose request went away (timeout, closed connection) before its batch started is dropped.

use super::errors::ApiError;
use super::metrics::{GaugeGuard, Metrics};
use super::models::ModelEntry;
use super::AppState;
use stapes::batch::EngineInput;
use stapes::{TranscribeOptions, Transcript};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::{timeout_at, Instant};

const SAMPLE_RATE: f64 = 16_000.0;

type Reply = Result<Transcript, ApiError>;

struct Job {
    entry: Arc<ModelEntry>,
    samples: Vec<f32>,
    opts: TranscribeOptions,
    reply: oneshot::Sender<Reply>,
    arrived: Instant,
    /// Counts the job in the queue-depth gauge until its batch starts.
    _queued: GaugeGuard,
}

pub struct Scheduler {
    max: usize,
    wait: Duration,
    tx: mpsc::UnboundedSender<Job>,
    /// Taken by the dispatcher task, started with the first job (inside the runtime).
    rx: Mutex<Option<mpsc::UnboundedReceiver<Job>>>,
}

impl Scheduler {
    pub fn new(max: usize, wait: Duration) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            max: max.max(1),
            wait,
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }

    /// Whether jobs go through the batcher (`--batch-max` > 1).
    pub fn batching(&self) -> bool {
        self.max > 1
    }
}

/// Queue one job for batching and wait for its result. The queue itself is bounded by the
/// server's admission semaphore (`--queue` + `--workers`), so the channel needs no bound.
pub async fn submit(
    s: Arc<AppState>,
    entry: Arc<ModelEntry>,
    samples: Vec<f32>,
    opts: TranscribeOptions,
) -> Result<Transcript, ApiError> {
    let rx = s
        .scheduler
        .rx
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    if let Some(rx) = rx {
        let cfg = Dispatch {
            max: s.scheduler.max,
            wait: s.scheduler.wait,
            workers: Arc::clone(&s.worker_slots),
            metrics: Arc::clone(&s.metrics),
        };
        tokio::spawn(cfg.run(rx));
    }
    let (reply, answer) = oneshot::channel();
    let job = Job {
        entry,
        samples,
        opts,
        reply,
        arrived: Instant::now(),
        _queued: s.metrics.enter_queue(),
    };
    s.scheduler
        .tx
        .send(job)
        .map_err(|_| ApiError::internal("the batch scheduler has stopped"))?;
    answer.await.unwrap_or_else(|_| {
        Err(ApiError::internal(
            "the transcription job failed unexpectedly",
        ))
    })
}

struct Dispatch {
    max: usize,
    wait: Duration,
    workers: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl Dispatch {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Job>) {
        // Jobs for another model than the batch being gathered, oldest first.
        let mut backlog: VecDeque<Job> = VecDeque::new();
        loop {
            let first = match backlog.pop_front() {
                Some(j) => j,
                None => match rx.recv().await {
                    Some(j) => j,
                    None => return,
                },
            };
            if first.reply.is_closed() {
                continue;
            }
            let Ok(permit) = Arc::clone(&self.workers).acquire_owned().await else {
                return;
            };
            let deadline = first.arrived + self.wait;
            let mut batch = vec![first];
            // Same-model jobs from the backlog first (they are older), then the channel.
            let mut i = 0;
            while i < backlog.len() && batch.len() < self.max {
                if Arc::ptr_eq(&backlog[i].entry, &batch[0].entry) {
                    if let Some(j) = backlog.remove(i) {
                        batch.push(j);
                    }
                } else {
                    i += 1;
                }
            }
            while batch.len() < self.max {
                let next = match rx.try_recv() {
                    Ok(j) => j,
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        match timeout_at(deadline, rx.recv()).await {
                            Ok(Some(j)) => j,
                            _ => break,
                        }
                    }
                };
                if Arc::ptr_eq(&next.entry, &batch[0].entry) {
                    batch.push(next);
                } else {
                    backlog.push_back(next);
                }
            }
            batch.retain(|j| !j.reply.is_closed());
            if batch.is_empty() {
                continue;
            }
            let metrics = Arc::clone(&self.metrics);
            let max = self.max;
            // Not awaited: the dispatcher gathers the next batch while this one runs. A panic
            // drops the reply senders, which their requests report as an internal error.
            drop(tokio::task::spawn_blocking(move || {
                run_batch(batch, max, &metrics, permit)
            }));
        }
    }
}

fn run_batch(jobs: Vec<Job>, max: usize, metrics: &Arc<Metrics>, _permit: OwnedSemaphorePermit) {
    let entry = Arc::clone(&jobs[0].entry);
    let mut inputs = Vec::with_capacity(jobs.len());
    let mut replies = Vec::with_capacity(jobs.len());
    let mut running = Vec::with_capacity(jobs.len());
    for j in jobs {
        // moving the job apart drops its queue guard: it counts as running from here
        inputs.push((j.samples, j.opts));
        replies.push(Mutex::new(Some(j.reply)));
        running.push(Mutex::new(Some(metrics.enter_running())));
    }
    let engine = match entry.engine() {
        Ok(e) => e,
        Err(e) => {
            let err = ApiError::unavailable(
                "model_unavailable",
                format!("model `{}` could not be loaded: {e}", entry.name),
            );
            for r in replies {
                if let Some(tx) = r.into_inner().unwrap_or_else(|p| p.into_inner()) {
                    let _ = tx.send(Err(err.clone()));
                }
            }
            return;
        }
    };
    let each: Vec<EngineInput<'_>> = inputs
        .iter()
        .map(|(samples, options)| EngineInput { samples, options })
        .collect();
    let t0 = std::time::Instant::now();
    let stats = engine.transcribe_batch_with(&each, max, &|i, r| {
        let audio = r
            .as_ref()
            .ok()
            .and_then(|_| inputs.get(i))
            .map(|(s, _)| s.len() as f64 / SAMPLE_RATE);
        // compute time of this request: from the batch's start to its own result
        metrics.observe_job(&entry.name, t0.elapsed(), audio);
        if let Some(g) = running.get(i) {
            g.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
        let tx = replies
            .get(i)
            .and_then(|m| m.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(tx) = tx {
            let _ = tx.send(r.map_err(ApiError::from));
        }
    });
    metrics.observe_batch(&entry.name, each.len(), &stats.encoder_batches);
}
