//! Prometheus text exposition, written by hand: a handful of counters, gauges and histograms do
//! not justify a metrics dependency.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Upper bounds (seconds) of the latency buckets: from a rejected request (µs) to a long file.
const BOUNDS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

#[derive(Clone, Debug, Default)]
struct Histogram {
    /// Cumulative counts, one per bound (Prometheus buckets are cumulative).
    buckets: [u64; BOUNDS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, v: f64) {
        for (b, bound) in self.buckets.iter_mut().zip(BOUNDS) {
            if v <= bound {
                *b += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (b, bound) in self.buckets.iter().zip(BOUNDS) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {b}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[derive(Default)]
struct Inner {
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    compute: BTreeMap<String, Histogram>,
    audio_seconds: BTreeMap<String, f64>,
    /// Exponential moving average of one job's compute time, for Retry-After estimates.
    job_ema_s: Option<f64>,
    /// Events sent on streaming WebSocket sessions, by type.
    ws_events: BTreeMap<String, u64>,
}

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    /// Admitted requests waiting for a worker.
    queue_depth: AtomicI64,
    /// Jobs running on the blocking pool (including ones whose request already timed out).
    running: AtomicI64,
    /// Cross-request batching (scheduler.rs): batch sizes, see `observe_batch`.
    batches: Mutex<BatchSizes>,
    /// Open streaming WebSocket sessions.
    ws_sessions: AtomicI64,
    /// HTTP requests between their headers and their response headers.
    in_flight: AtomicI64,
}

/// Decrements its gauge when dropped, so cancelled futures and early returns keep gauges true.
pub struct GaugeGuard {
    metrics: Arc<Metrics>,
    which: Gauge,
}

#[derive(Clone, Copy)]
enum Gauge {
    Queue,
    Running,
    WsSessions,
    InFlight,
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.metrics
            .gauge(self.which)
            .fetch_sub(1, Ordering::Relaxed);
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves plain numbers behind; keep serving them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn gauge(&self, which: Gauge) -> &AtomicI64 {
        match which {
            Gauge::Queue => &self.queue_depth,
            Gauge::Running => &self.running,
            Gauge::WsSessions => &self.ws_sessions,
            Gauge::InFlight => &self.in_flight,
        }
    }

    fn enter(self: &Arc<Self>, which: Gauge) -> GaugeGuard {
        self.gauge(which).fetch_add(1, Ordering::Relaxed);
        GaugeGuard {
            metrics: Arc::clone(self),
            which,
        }
    }

    pub fn enter_queue(self: &Arc<Self>) -> GaugeGuard {
        self.enter(Gauge::Queue)
    }

    pub fn enter_running(self: &Arc<Self>) -> GaugeGuard {
        self.enter(Gauge::Running)
    }

    pub fn enter_ws_session(self: &Arc<Self>) -> GaugeGuard {
        self.enter(Gauge::WsSessions)
    }

    pub fn enter_in_flight(self: &Arc<Self>) -> GaugeGuard {
        self.enter(Gauge::InFlight)
    }

    pub fn ws_sessions(&self) -> i64 {
        self.ws_sessions.load(Ordering::Relaxed)
    }

    pub fn observe_ws_event(&self, kind: &str) {
        // Only the protocol's own names become labels.
        let kind = match kind {
            "ready" | "partial" | "final" | "done" | "error" => kind,
            _ => "other",
        };
        *self.lock().ws_events.entry(kind.to_owned()).or_default() += 1;
    }

    pub fn queue_depth(&self) -> i64 {
        self.queue_depth.load(Ordering::Relaxed)
    }

    pub fn running(&self) -> i64 {
        self.running.load(Ordering::Relaxed)
    }

    pub fn observe_request(&self, endpoint: &str, status: u16, elapsed: Duration) {
        let mut g = self.lock();
        *g.requests.entry((endpoint.to_owned(), status)).or_default() += 1;
        g.latency
            .entry(endpoint.to_owned())
            .or_default()
            .observe(elapsed.as_secs_f64());
    }

    /// A finished job: its compute time, and the audio it transcribed when it succeeded.
    pub fn observe_job(&self, model: &str, elapsed: Duration, audio_seconds: Option<f64>) {
        let secs = elapsed.as_secs_f64();
        let mut g = self.lock();
        g.compute.entry(model.to_owned()).or_default().observe(secs);
        if let Some(a) = audio_seconds {
            *g.audio_seconds.entry(model.to_owned()).or_default() += a;
        }
        g.job_ema_s = Some(match g.job_ema_s {
            Some(prev) => 0.8 * prev + 0.2 * secs,
            None => secs,
        });
    }

    /// Seconds a client should wait before retrying: the waiting jobs' expected compute spread
    /// over the workers; 1 s before any job has been timed.
    pub fn retry_after(&self, workers: usize) -> u64 {
        let ema = self.lock().job_ema_s.unwrap_or(0.0);
        let waiting = self.queue_depth().max(0) as f64 + 1.0;
        let est = ema * waiting / workers.max(1) as f64;
        (est.ceil() as u64).clamp(1, 3600)
    }

    pub fn render(&self, queue_capacity: usize, workers: usize, admitted: usize) -> String {
        let g = self.lock();
        let mut out = String::new();
        out.push_str(
            "# HELP stapes_http_requests_total HTTP requests answered, by endpoint and status.\n",
        );
        out.push_str("# TYPE stapes_http_requests_total counter\n");
        for ((endpoint, status), n) in &g.requests {
            let _ = writeln!(
                out,
                "stapes_http_requests_total{{endpoint=\"{}\",status=\"{status}\"}} {n}",
                escape(endpoint)
            );
        }
        out.push_str(
            "# HELP stapes_http_request_duration_seconds Time from request to response headers.\n",
        );
        out.push_str("# TYPE stapes_http_request_duration_seconds histogram\n");
        for (endpoint, h) in &g.latency {
            let labels = format!("endpoint=\"{}\"", escape(endpoint));
            h.write(&mut out, "stapes_http_request_duration_seconds", &labels);
        }
        out.push_str(
            "# HELP stapes_transcribe_duration_seconds Compute time of one transcription job.\n",
        );
        out.push_str("# TYPE stapes_transcribe_duration_seconds histogram\n");
        for (model, h) in &g.compute {
            let labels = format!("model=\"{}\"", escape(model));
            h.write(&mut out, "stapes_transcribe_duration_seconds", &labels);
        }
        out.push_str(
            "# HELP stapes_audio_seconds_total Seconds of audio transcribed successfully.\n",
        );
        out.push_str("# TYPE stapes_audio_seconds_total counter\n");
        for (model, secs) in &g.audio_seconds {
            let _ = writeln!(
                out,
                "stapes_audio_seconds_total{{model=\"{}\"}} {secs}",
                escape(model)
            );
        }
        out.push_str(
            "# HELP stapes_ws_events_total Events sent on streaming WebSocket sessions, by type.\n",
        );
        out.push_str("# TYPE stapes_ws_events_total counter\n");
        for (kind, n) in &g.ws_events {
            let _ = writeln!(out, "stapes_ws_events_total{{type=\"{kind}\"}} {n}");
        }
        drop(g);
        let gauges = [
            (
                "stapes_ws_sessions",
                "Streaming WebSocket sessions open now.",
                self.ws_sessions(),
            ),
            (
                "stapes_http_in_flight",
                "HTTP requests received and not yet answered (headers).",
                self.in_flight.load(Ordering::Relaxed),
            ),
            (
                "stapes_queue_depth",
                "Admitted requests waiting for a worker.",
                self.queue_depth(),
            ),
            (
                "stapes_jobs_running",
                "Transcription jobs running now.",
                self.running(),
            ),
            (
                "stapes_requests_admitted",
                "Transcription requests admitted and not yet answered.",
                admitted as i64,
            ),
            (
                "stapes_queue_capacity",
                "Requests that may wait for a worker (--queue).",
                queue_capacity as i64,
            ),
            (
                "stapes_workers",
                "Jobs that may run at once (--workers).",
                workers as i64,
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        self.render_batches(&mut out);
        out
    }
}

/// Upper bounds of the batch-size buckets (requests per engine batch, windows per encoder call).
const SIZE_BOUNDS: [f64; 8] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// Batch sizes by model: requests per engine batch and windows per encoder call.
#[derive(Default)]
struct BatchSizes {
    requests: BTreeMap<String, SizeHistogram>,
    encoder: BTreeMap<String, SizeHistogram>,
}

#[derive(Clone, Debug, Default)]
struct SizeHistogram {
    buckets: [u64; SIZE_BOUNDS.len()],
    sum: f64,
    count: u64,
}

impl SizeHistogram {
    fn observe(&mut self, v: usize) {
        let v = v as f64;
        for (b, bound) in self.buckets.iter_mut().zip(SIZE_BOUNDS) {
            if v <= bound {
                *b += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, model: &str) {
        let m = escape(model);
        for (b, bound) in self.buckets.iter().zip(SIZE_BOUNDS) {
            let _ = writeln!(out, "{name}_bucket{{model=\"{m}\",le=\"{bound}\"}} {b}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{model=\"{m}\",le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{{model=\"{m}\"}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{model=\"{m}\"}} {}", self.count);
    }
}

impl Metrics {
    /// One engine batch of `requests` requests; `encoder` holds the windows of each of its
    /// encoder calls (empty for families that run their inputs one by one).
    pub fn observe_batch(&self, model: &str, requests: usize, encoder: &[usize]) {
        let mut g = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        g.requests
            .entry(model.to_owned())
            .or_default()
            .observe(requests);
        let h = g.encoder.entry(model.to_owned()).or_default();
        for &n in encoder {
            h.observe(n);
        }
    }

    fn render_batches(&self, out: &mut String) {
        let g = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        out.push_str(
            "# HELP stapes_batch_requests Requests per engine batch (cross-request batching).\n",
        );
        out.push_str("# TYPE stapes_batch_requests histogram\n");
        for (model, h) in &g.requests {
            h.write(out, "stapes_batch_requests", model);
        }
        out.push_str(
            "# HELP stapes_encoder_batch_windows Audio windows per encoder call (GPU/engine batch size).\n",
        );
        out.push_str("# TYPE stapes_encoder_batch_windows histogram\n");
        for (model, h) in &g.encoder {
            h.write(out, "stapes_encoder_batch_windows", model);
        }
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;

    #[test]
    fn batch_sizes_are_histograms() {
        let m = Metrics::default();
        m.observe_batch("tiny", 3, &[3, 1]);
        m.observe_batch("tiny", 1, &[1]);
        let text = m.render(4, 1, 0);
        assert!(text.contains("stapes_batch_requests_bucket{model=\"tiny\",le=\"2\"} 1\n"));
        assert!(text.contains("stapes_batch_requests_bucket{model=\"tiny\",le=\"4\"} 2\n"));
        assert!(text.contains("stapes_batch_requests_sum{model=\"tiny\"} 4\n"));
        assert!(text.contains("stapes_encoder_batch_windows_bucket{model=\"tiny\",le=\"1\"} 2\n"));
        assert!(text.contains("stapes_encoder_batch_windows_count{model=\"tiny\"} 3\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.observe_request("/health", 200, Duration::from_millis(3));
        m.observe_request("/health", 200, Duration::from_millis(700));
        m.observe_request("/health", 404, Duration::from_secs(1000));
        let text = m.render(4, 1, 0);
        assert!(
            text.contains("stapes_http_requests_total{endpoint=\"/health\",status=\"200\"} 2\n")
        );
        assert!(
            text.contains("stapes_http_requests_total{endpoint=\"/health\",status=\"404\"} 1\n")
        );
        assert!(text.contains("le=\"0.005\"} 1\n"));
        assert!(text.contains("le=\"1\"} 2\n"));
        assert!(text.contains("le=\"600\"} 2\n"));
        assert!(text.contains("le=\"+Inf\"} 3\n"));
        assert!(
            text.contains("stapes_http_request_duration_seconds_count{endpoint=\"/health\"} 3\n")
        );
    }

    #[test]
    fn gauges_follow_guards() {
        let m = Arc::new(Metrics::default());
        let a = m.enter_queue();
        let b = m.enter_queue();
        let r = m.enter_running();
        assert_eq!((m.queue_depth(), m.running()), (2, 1));
        drop(a);
        drop(r);
        assert_eq!((m.queue_depth(), m.running()), (1, 0));
        assert!(m.render(8, 2, 0).contains("stapes_queue_depth 1\n"));
        drop(b);
        assert_eq!(m.queue_depth(), 0);
    }

    #[test]
    fn audio_seconds_and_retry_after() {
        let m = Arc::new(Metrics::default());
        assert_eq!(m.retry_after(1), 1);
        m.observe_job("tiny", Duration::from_secs(4), Some(11.0));
        m.observe_job("tiny", Duration::from_secs(4), None);
        let _q = [m.enter_queue(), m.enter_queue()];
        // 4 s per job, 2 waiting + the one asking, on 2 workers.
        assert_eq!(m.retry_after(2), 6);
        assert!(m
            .render(1, 1, 0)
            .contains("stapes_audio_seconds_total{model=\"tiny\"} 11\n"));
    }

    #[test]
    fn ws_gauge_and_events() {
        let m = Arc::new(Metrics::default());
        let g = m.enter_ws_session();
        m.observe_ws_event("partial");
        m.observe_ws_event("partial");
        m.observe_ws_event("<script>");
        let text = m.render(1, 1, 0);
        assert!(text.contains("stapes_ws_sessions 1\n"), "{text}");
        assert!(text.contains("stapes_ws_events_total{type=\"partial\"} 2\n"));
        assert!(text.contains("stapes_ws_events_total{type=\"other\"} 1\n"));
        drop(g);
        assert!(m.render(1, 1, 0).contains("stapes_ws_sessions 0\n"));
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
