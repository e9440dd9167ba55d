use stapes::bench::BenchOptions;
use stapes::engine::{Engine, EngineOptions};
use stapes::error::StapesError;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Model directory or file, or a cached model name.
    #[arg(short = 'm', long = "model", conflicts_with = "synthetic")]
    model: Option<String>,
    /// Random weights of a published shape: whisper-tiny, whisper-base, whisper-large-v3-turbo, …
    #[arg(long)]
    synthetic: Option<String>,
    #[arg(long, default_value = "auto")]
    device: String,
    #[arg(long, default_value = "auto")]
    lane: String,
    /// Audio for the end-to-end timing (default: none for synthetic models, else samples/jfk.wav
    /// when it exists).
    #[arg(long)]
    audio: Option<PathBuf>,
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Windows in the batched-encode timing (0 or 1 = skip).
    #[arg(long, default_value_t = 16)]
    batch: usize,
    #[arg(long, default_value_t = 40)]
    decode_tokens: usize,
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON object (with the engagement counters) instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<(), StapesError> {
    if a.iters == 0 {
        return Err(StapesError::Usage("--iters must be at least 1".into()));
    }
    let opts = EngineOptions {
        device: a.device.parse().map_err(StapesError::Usage)?,
        lane: stapes::runtime::requested_lane(Some(&a.lane)).map_err(StapesError::Usage)?,
        threads: a.threads,
    };
    let (label, engine) = match (&a.synthetic, &a.model) {
        (Some(name), _) => (format!("synthetic {name}"), Engine::synthetic(name, &opts)?),
        (None, m) => {
            let path =
                stapes::models::resolve(m.as_deref().unwrap_or(stapes::models::DEFAULT_MODEL))?;
            (path.display().to_string(), Engine::load(&path, &opts)?)
        }
    };
    let audio = match &a.audio {
        Some(p) => Some(stapes::audio::load_file(p)?),
        None => None,
    };
    // A whole-model bench on a CPU runs for minutes: show it is alive (on a terminal only).
    let spinner = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
        let s = indicatif::ProgressBar::new_spinner();
        s.set_message(format!(
            "benchmarking {label} on {} lane {}: {} iterations per stage",
            engine.device(),
            engine.lane(),
            a.iters
        ));
        s.enable_steady_tick(std::time::Duration::from_millis(120));
        s
    });
    let report = engine.bench(&BenchOptions {
        iters: a.iters,
        batch: a.batch,
        decode_tokens: a.decode_tokens,
        audio,
    });
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    let report = report?;
    if a.json {
        let v = serde_json::json!({
            "model": label,
            "family": engine.family(),
            "device": engine.device().to_string(),
            "lane": engine.lane().to_string(),
            "report": report,
            "counters": format!("{:?}", engine.counters()),
            // load and first-use phases of this process (stapes::profile)
            "profile": stapes::profile::snapshot().to_json(),
        });
        println!("{v}");
    } else {
        println!("{label} on {} lane {}", engine.device(), engine.lane());
        let row = |what: &str, s: &stapes::bench::Stats| {
            println!(
                "{what:<28} {:>9.3} ms  (min {:.3}, max {:.3}, n {})",
                s.median_ms, s.min_ms, s.max_ms, s.n
            )
        };
        row("encode, one window", &report.encode);
        row("  features on the device", &report.encode_device);
        if let Some(s) = &report.encode_batched {
            row(&format!("encode, {} windows", report.batch), s);
        }
        if let Some(s) = &report.decode_token {
            row("decode, per token", s);
        }
        if let Some(s) = &report.end_to_end {
            row("end to end (greedy)", s);
        }
        if let Some(t) = &report.transcript {
            println!("transcript: {t}");
        }
    }
    Ok(())
}
