//! Where a whole process's wall time goes: start-up, load, first use, transcription.
//!
//! The library marks its phases with `tracing` spans at INFO level whose target is a stapes
//! crate (`stapes_cuda`: library loading, driver init, context, NVRTC per kernel file, module
//! loads, cuBLAS/cuBLASLt handles, cuBLASLt plans and algorithm timing, chains; `stapes`: model
//! read, device open, weight upload, transcription; the CLI: audio, output, teardown). Spans cost
//! nothing while no subscriber listens. [`layer`] is a `tracing_subscriber` layer that records
//! every closed span of those targets into one process-wide list; [`snapshot`] reads it, and
//! [`Profile::render`] / [`Profile::to_json`] print it (`stapes --verbose`, `stapes bench
//! --json`). Times are wall milliseconds from [`mark_process_start`] (the first line of `main`);
//! what happened before `main` is read from `/proc` at 10 ms resolution.

use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};

/// One closed span.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    pub name: &'static str,
    /// Start, wall ms since [`mark_process_start`].
    pub start_ms: f64,
    pub ms: f64,
    /// Nesting under other recorded spans (0 = top level).
    pub depth: usize,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<&'static str, serde_json::Value>,
}

struct Open {
    name: &'static str,
    start: Instant,
    depth: usize,
    fields: BTreeMap<&'static str, serde_json::Value>,
}

#[derive(Default)]
struct Store {
    open: HashMap<u64, Open>,
    closed: Vec<Phase>,
}

fn store() -> &'static Mutex<Store> {
    static S: OnceLock<Mutex<Store>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(Store::default()))
}

fn t0() -> Instant {
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

/// Call first thing in `main`: phases are timed from here.
pub fn mark_process_start() {
    let _ = t0();
    let _ = pre_main_ms();
}

/// Wall ms between the kernel starting this process and [`mark_process_start`] (exec, dynamic
/// loading, Rust runtime start), from `/proc` clock ticks: 10 ms resolution. `None` off Linux.
pub fn pre_main_ms() -> Option<f64> {
    static PRE: OnceLock<Option<f64>> = OnceLock::new();
    *PRE.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // the command name may hold spaces: fields are counted after its closing parenthesis
        let rest = &stat[stat.rfind(')')? + 2..];
        // field 22 (starttime) is the 20th after the name
        let start_ticks: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
        let uptime: f64 = std::fs::read_to_string("/proc/uptime")
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        // USER_HZ is 100 on every Linux ABI stapes builds for
        Some(((uptime - start_ticks / 100.0) * 1000.0).max(0.0))
    })
}

/// The recording layer (spans of stapes crates at INFO or above; events are not recorded).
/// Install it beside the log formatter: `registry().with(fmt_layer).with(profile::layer())`.
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let _ = t0();
    let only_ours = tracing_subscriber::filter::filter_fn(|m| {
        m.is_span() && m.target().starts_with("stapes") && *m.level() <= tracing::Level::INFO
    })
    // tells callsites below INFO (debug! in hot paths) that this layer never wants them
    .with_max_level_hint(tracing::level_filters::LevelFilter::INFO);
    Recorder.with_filter(only_ours)
}

struct Recorder;

struct Fields<'a>(&'a mut BTreeMap<&'static str, serde_json::Value>);

impl Visit for Fields<'_> {
    fn record_f64(&mut self, f: &Field, v: f64) {
        self.0.insert(f.name(), serde_json::json!(v));
    }
    fn record_i64(&mut self, f: &Field, v: i64) {
        self.0.insert(f.name(), v.into());
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        self.0.insert(f.name(), v.into());
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        self.0.insert(f.name(), v.into());
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        self.0.insert(f.name(), v.into());
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name(), format!("{v:?}").into());
    }
}

fn lock() -> std::sync::MutexGuard<'static, Store> {
    store().lock().unwrap_or_else(|p| p.into_inner())
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = attrs
            .parent()
            .cloned()
            .or_else(|| ctx.current_span().id().cloned());
        let mut s = lock();
        let depth = parent
            .and_then(|p| s.open.get(&p.into_u64()).map(|o| o.depth + 1))
            .unwrap_or(0);
        s.open.insert(
            id.into_u64(),
            Open {
                name: attrs.metadata().name(),
                start: Instant::now(),
                depth,
                fields,
            },
        );
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some(o) = lock().open.get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut o.fields));
        }
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        let end = Instant::now();
        let mut s = lock();
        if let Some(o) = s.open.remove(&id.into_u64()) {
            let base = t0();
            s.closed.push(Phase {
                name: o.name,
                start_ms: ms(o.start.saturating_duration_since(base)),
                ms: ms(end.saturating_duration_since(o.start)),
                depth: o.depth,
                fields: o.fields,
            });
        }
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Repeated spans of one name (bench loops, per-shape plans) summed.
#[derive(Clone, Debug, Serialize)]
pub struct Total {
    pub count: usize,
    pub ms: f64,
}

/// Figures derived from the phases of one Whisper/Parakeet transcription.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Derived {
    /// Host work from the start of the first transcription to its first encoder chain (the log-mel
    /// front end, with the option checks). `None` where the home runs no chains (CPU).
    pub mel_ms: Option<f64>,
    /// Encoder chains inside the first transcription (host time; the first use of a shape
    /// includes cuBLASLt planning/timing and, from its second use, graph capture).
    pub encode_ms: Option<f64>,
    /// The rest of the first transcription: decoder steps and the host decoding rules.
    pub decode_ms: Option<f64>,
    /// Text tokens of the kept segments.
    pub tokens: Option<u64>,
    pub decode_ms_per_token: Option<f64>,
    /// Weight upload rate (host tensors in, MB/s).
    pub upload_mb_per_s: Option<f64>,
}

/// Everything recorded so far, in closing order, with per-name totals.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    /// Wall ms from the kernel's start of the process to `main` (10 ms resolution).
    pub pre_main_ms: Option<f64>,
    /// Wall ms from `main` to this snapshot.
    pub elapsed_ms: f64,
    /// At most [`Profile::MAX_PHASES`] phases and [`Profile::MAX_PER_NAME`] of one name, in
    /// start order (all are counted in `totals`).
    pub phases: Vec<Phase>,
    pub totals: BTreeMap<&'static str, Total>,
    pub derived: Derived,
}

impl Profile {
    pub const MAX_PHASES: usize = 200;
    /// Phases of one name listed at most (the rest are in `totals`).
    pub const MAX_PER_NAME: usize = 8;

    /// One line per phase, indented by nesting, then the per-name totals of repeated phases and
    /// the derived figures.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::from("profile (wall ms; start from main, duration):\n");
        if let Some(p) = self.pre_main_ms {
            let _ = writeln!(
                s,
                "  {:>8}  {p:>8.1}  before main (exec, loader; ±10 ms)",
                "-"
            );
        }
        for p in &self.phases {
            let mut fields = String::new();
            for (k, v) in &p.fields {
                let v = match v {
                    serde_json::Value::String(x) => x.clone(),
                    serde_json::Value::Number(n) => match n.as_f64() {
                        Some(f) if n.is_f64() => format!("{f:.1}"),
                        _ => n.to_string(),
                    },
                    other => other.to_string(),
                };
                let _ = write!(fields, " {k}={v}");
            }
            let _ = writeln!(
                s,
                "  {:>8.1}  {:>8.2}  {}{}{}",
                p.start_ms,
                p.ms,
                "  ".repeat(p.depth),
                p.name,
                fields
            );
        }
        let repeated: Vec<_> = self.totals.iter().filter(|(_, t)| t.count > 1).collect();
        if !repeated.is_empty() {
            let _ = writeln!(s, "  repeated phases (count, total ms):");
            for (name, t) in repeated {
                let _ = writeln!(s, "    {name:<24} {:>5} {:>9.2}", t.count, t.ms);
            }
        }
        let d = &self.derived;
        let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
        let _ = writeln!(
            s,
            "  first transcription: mel {} ms, encode {} ms, decode {} ms ({} tokens, {} ms/token); upload {} MB/s",
            f(d.mel_ms),
            f(d.encode_ms),
            f(d.decode_ms),
            d.tokens.map_or("-".to_string(), |t| t.to_string()),
            f(d.decode_ms_per_token),
            f(d.upload_mb_per_s),
        );
        let _ = write!(s, "  total {:.1} ms since main", self.elapsed_ms);
        s
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// Bytes of f32 host tensors (the `host_bytes` field of `model.read` / `model.upload`).
pub fn host_bytes<'a>(tensors: impl Iterator<Item = &'a stapes_core::HostTensor>) -> u64 {
    tensors.map(|t| t.len() as u64 * 4).sum()
}

fn number(p: &Phase, field: &str) -> Option<f64> {
    p.fields.get(field).and_then(|v| v.as_f64())
}

fn derive(phases: &[Phase]) -> Derived {
    let mut d = Derived::default();
    // the f32 host tensors read by `model.read` are what `model.upload` converts and copies
    let bytes = phases
        .iter()
        .filter(|p| p.name == "model.read" || p.name == "model.upload")
        .find_map(|p| number(p, "host_bytes"));
    if let Some(up) = phases.iter().find(|p| p.name == "model.upload") {
        if let Some(bytes) = bytes {
            if up.ms > 0.0 {
                d.upload_mb_per_s = Some(bytes / 1e6 / (up.ms / 1e3));
            }
        }
    }
    let Some(tr) = phases.iter().find(|p| p.name == "transcribe") else {
        return d;
    };
    let end = tr.start_ms + tr.ms;
    let inside = |p: &&Phase| p.start_ms >= tr.start_ms && p.start_ms + p.ms <= end + 1e-6;
    // encoder chains only: decoder steps are chains too, and belong to decode
    let chains: Vec<&Phase> = phases
        .iter()
        .filter(|p| p.name == "cuda.chain")
        .filter(|p| {
            p.fields
                .get("key")
                .and_then(|k| k.as_str())
                .is_some_and(|k| k.contains("encoder"))
        })
        .filter(inside)
        .collect();
    d.tokens = tr.fields.get("tokens").and_then(|v| v.as_u64());
    if let Some(first) = chains.iter().map(|p| p.start_ms).reduce(f64::min) {
        let mel = first - tr.start_ms;
        let encode: f64 = chains.iter().map(|p| p.ms).sum();
        let decode = (tr.ms - mel - encode).max(0.0);
        d.mel_ms = Some(mel);
        d.encode_ms = Some(encode);
        d.decode_ms = Some(decode);
        d.decode_ms_per_token = d.tokens.filter(|&t| t > 0).map(|t| decode / t as f64);
    }
    d
}

/// What has been recorded so far (spans still open are left out).
pub fn snapshot() -> Profile {
    let elapsed_ms = ms(t0().elapsed());
    let mut all = lock().closed.clone();
    all.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    let mut totals: BTreeMap<&'static str, Total> = BTreeMap::new();
    for p in &all {
        let t = totals.entry(p.name).or_insert(Total { count: 0, ms: 0.0 });
        t.count += 1;
        t.ms += p.ms;
    }
    let derived = derive(&all);
    // per-weight and per-step spans would crowd out the rest: the first few of a name are
    // listed, every one is counted in `totals`
    let mut seen: BTreeMap<&'static str, usize> = BTreeMap::new();
    all.retain(|p| {
        let n = seen.entry(p.name).or_insert(0);
        *n += 1;
        *n <= Profile::MAX_PER_NAME
    });
    all.truncate(Profile::MAX_PHASES);
    Profile {
        pre_main_ms: pre_main_ms(),
        elapsed_ms,
        phases: all,
        totals,
        derived,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    // The store is process-wide, so one test drives every assertion.
    #[test]
    fn records_nesting_fields_and_derived_split() {
        let sub = tracing_subscriber::registry().with(layer());
        tracing::subscriber::with_default(sub, || {
            {
                let up = tracing::info_span!("model.upload", host_bytes = 2_000_000u64);
                let _e = up.enter();
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let tr = tracing::info_span!("transcribe", tokens = tracing::field::Empty);
            {
                let _e = tr.enter();
                std::thread::sleep(std::time::Duration::from_millis(15));
                {
                    let key = "whisper-encoder/b1/f16";
                    let _c = tracing::info_span!("cuda.chain", key, mode = "eager").entered();
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
                {
                    // a decoder-step chain counts as decode
                    let key = "whisper-step/dec0/self0/cross0/b1";
                    let _c = tracing::info_span!("cuda.chain", key, mode = "replay").entered();
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                tr.record("tokens", 4u64);
            }
            drop(tr);
            // another crate's spans and DEBUG spans stay out
            let _ = tracing::debug_span!("debug.only").entered();
        });
        let p = snapshot();
        let names: Vec<_> = p.phases.iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            ["model.upload", "transcribe", "cuda.chain", "cuda.chain"]
        );
        let chain = &p.phases[2];
        assert_eq!(chain.depth, 1, "the chain nests under transcribe");
        assert_eq!(chain.fields["mode"], "eager");
        let d = &p.derived;
        assert_eq!(d.tokens, Some(4));
        let (mel, enc, dec) = (
            d.mel_ms.unwrap(),
            d.encode_ms.unwrap(),
            d.decode_ms.unwrap(),
        );
        assert!((14.0..40.0).contains(&mel), "mel {mel}");
        assert!((9.0..30.0).contains(&enc), "encode {enc}");
        assert!((19.0..60.0).contains(&dec), "decode {dec}");
        let rate = d.upload_mb_per_s.unwrap();
        assert!(rate > 10.0 && rate <= 100.0, "2 MB in ≥ 20 ms: {rate}");
        assert!(p
            .render()
            .contains("cuda.chain key=whisper-encoder/b1/f16 mode=eager"));
        assert_eq!(p.totals["cuda.chain"].count, 2);
        let sub = tracing_subscriber::registry().with(layer());
        tracing::subscriber::with_default(sub, || {
            for _ in 0..Profile::MAX_PER_NAME + 3 {
                let _w = tracing::info_span!("cuda.weight").entered();
            }
        });
        let p = snapshot();
        let listed = p.phases.iter().filter(|p| p.name == "cuda.weight").count();
        assert_eq!(listed, Profile::MAX_PER_NAME);
        assert_eq!(p.totals["cuda.weight"].count, Profile::MAX_PER_NAME + 3);
    }
}
