use indicatif::{ProgressBar, ProgressStyle};
use stapes::canary::CanaryOptions;
use stapes::engine::{Engine, EngineOptions, Task, TranscribeOptions};
use stapes::error::StapesError;
use stapes::output::{self, OutputFormat, RunInfo};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Model directory or file (format sniffed), or a cached model name.
    #[arg(short = 'm', long = "model", default_value = stapes::models::DEFAULT_MODEL)]
    model: String,
    /// auto | cpu | cuda[:N] | vulkan
    #[arg(long, default_value = "auto")]
    device: String,
    /// auto | f32 | f16 | q8 (also STAPES_AUDIO_LANE=32|16|8)
    #[arg(long, default_value = "auto")]
    lane: String,
    /// Spoken language code, or auto to detect it.
    #[arg(long, default_value = "auto")]
    language: String,
    /// transcribe | translate (to English)
    #[arg(long, default_value = "transcribe")]
    task: String,
    /// Beam width; 1 is greedy. Default 5 (Canary: 1, NeMo's default).
    #[arg(long)]
    beam_size: Option<usize>,
    /// Canary: language of the output text; one other than --language translates (default:
    /// the spoken language, or en with --task translate).
    #[arg(long)]
    target_language: Option<String>,
    /// Canary: punctuation and capitalization (the default).
    #[arg(long, overrides_with = "no_pnc")]
    pnc: bool,
    /// Canary: no punctuation or capitalization.
    #[arg(long, overrides_with = "pnc")]
    no_pnc: bool,
    /// A single sampling temperature (0 = one greedy/beam pass, no fallback). Default: the
    /// fallback schedule 0, 0.2, … 1.0.
    #[arg(long)]
    temperature: Option<f32>,
    /// Decode without timestamp tokens.
    #[arg(long)]
    no_timestamps: bool,
    /// Initial prompt text.
    #[arg(long)]
    prompt: Option<String>,
    /// Condition each window on the previous window's text.
    #[arg(long)]
    condition_on_previous_text: bool,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// txt | srt | vtt | json | verbose_json
    #[arg(short = 'f', long = "format", default_value = "txt")]
    format: String,
    /// Output file (one input) or directory (several inputs); default stdout.
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    /// Cut the audio at silences with Silero VAD first.
    #[arg(long)]
    vad: bool,
    /// VAD model for --vad (file, directory or cached name).
    #[arg(long, default_value = stapes::vad::DEFAULT_VAD_MODEL)]
    vad_model: String,
    /// Seconds of speech per recogniser call with --vad (default 30; Whisper takes at most 30).
    #[arg(long, requires = "vad")]
    vad_max_span: Option<f64>,
    /// Word-level timestamps (cross-attention alignment).
    #[arg(long)]
    word_timestamps: bool,
    /// Audio files (WAV, FLAC, MP3, OGG/Vorbis; `-` for stdin).
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

fn usage(e: String) -> StapesError {
    StapesError::Usage(e)
}

pub fn run(a: Args, verbose: bool) -> Result<(), StapesError> {
    let format: OutputFormat = a.format.parse().map_err(usage)?;
    let task = match a.task.as_str() {
        "transcribe" => Task::Transcribe,
        "translate" => Task::Translate,
        t => {
            return Err(usage(format!(
                "unknown task `{t}` (expected transcribe or translate)"
            )))
        }
    };
    if a.beam_size == Some(0) {
        return Err(usage("--beam-size must be at least 1".into()));
    }
    if let Some(t) = a.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(usage(format!("--temperature {t} is outside 0 ..= 2")));
        }
    }
    if a.threads == Some(0) {
        return Err(usage("--threads must be at least 1".into()));
    }
    let opts = EngineOptions {
        device: a.device.parse().map_err(usage)?,
        lane: stapes::runtime::requested_lane(Some(&a.lane)).map_err(usage)?,
        threads: a.threads,
    };
    let mut topts = TranscribeOptions {
        language: (a.language != "auto").then(|| a.language.clone()),
        task,
        beam_size: a.beam_size.unwrap_or(5),
        temperature: a.temperature,
        without_timestamps: a.no_timestamps,
        initial_prompt: a.prompt.clone(),
        condition_on_previous_text: a.condition_on_previous_text,
        word_timestamps: a.word_timestamps,
    };
    if let (true, Some(dir)) = (a.files.len() > 1, &a.output) {
        // two inputs named alike (a/x.wav and b/x.wav, x.wav and x.mp3) would write one file
        // and lose the first transcript: refuse before the model loads
        let mut seen: std::collections::HashMap<PathBuf, &PathBuf> = Default::default();
        for file in &a.files {
            let dest = dir.join(output_name(file, format));
            if let Some(first) = seen.insert(dest.clone(), file) {
                return Err(StapesError::Usage(format!(
                    "{} and {} would both be written to {}; transcribe them in separate runs \
                     or rename one",
                    first.display(),
                    file.display(),
                    dest.display()
                )));
            }
        }
    }
    let model = stapes::models::resolve(&a.model)?;
    let engine = Engine::load(&model, &opts)?;
    let canary = CanaryOptions {
        target_language: a.target_language.clone(),
        pnc: match (a.pnc, a.no_pnc) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
    };
    if engine.family() == "canary" {
        if a.beam_size.is_none() {
            topts.beam_size = 1;
        }
        if a.vad && canary != CanaryOptions::default() {
            return Err(usage(
                "--target-language / --pnc / --no-pnc do not combine with --vad yet".into(),
            ));
        }
    } else if canary != CanaryOptions::default() {
        return Err(usage(format!(
            "--target-language / --pnc / --no-pnc are Canary options; {} is a {} model",
            model.display(),
            engine.family()
        )));
    }
    let vad = match a.vad {
        true => Some((
            stapes::vad::Vad::load(&a.vad_model)?,
            stapes::vad::VadOptions {
                max_span: a.vad_max_span,
                ..Default::default()
            },
        )),
        false => None,
    };
    if let Some((_, o)) = &vad {
        o.span_for(engine.family())?;
    }
    if verbose {
        eprintln!(
            "stapes: {} ({}) on {} in lane {}",
            model.display(),
            engine.family(),
            engine.device(),
            engine.lane()
        );
    }
    let several = a.files.len() > 1;
    if let (true, Some(dir)) = (several, &a.output) {
        std::fs::create_dir_all(dir)
            .map_err(|e| StapesError::BadInput(format!("{}: {e}", dir.display())))?;
    }
    let mut failures = Vec::new();
    for file in &a.files {
        match transcribe_one(
            &engine,
            vad.as_ref().map(|(v, o)| (v, o)),
            file,
            &topts,
            format,
            a.output.as_ref(),
            several,
            &canary,
        ) {
            Ok(()) => {}
            Err(e) if several => {
                eprintln!("stapes: {e}");
                failures.push(e);
            }
            Err(e) => return Err(e),
        }
    }
    if verbose {
        eprintln!("stapes: counters {:?}", engine.counters());
        // dropping the engine (device context, memory) is part of the process's time
        {
            let _s = tracing::info_span!("teardown").entered();
            drop(engine);
        }
        eprintln!("stapes: {}", stapes::profile::snapshot().render());
    }
    match failures.into_iter().next() {
        Some(first) => Err(first),
        None => Ok(()),
    }
}

// One file's run: the engine, its per-request settings and where the output goes.
#[allow(clippy::too_many_arguments)]
fn transcribe_one(
    engine: &Engine,
    vad: Option<(&stapes::vad::Vad, &stapes::vad::VadOptions)>,
    file: &std::path::Path,
    topts: &TranscribeOptions,
    format: OutputFormat,
    output: Option<&PathBuf>,
    several: bool,
    canary: &CanaryOptions,
) -> Result<(), StapesError> {
    let samples = {
        let _s = tracing::info_span!("audio.load").entered();
        stapes_audio_load(file)?
    };
    let total = samples.len() as f64 / 16_000.0;
    let bar = progress_bar(total);
    let on_progress = |done: f64| {
        if let Some(b) = &bar {
            b.set_position((done * 10.0) as u64);
        }
    };
    let transcript = match vad {
        Some((v, o)) => {
            engine.transcribe_vad(&samples, v, o, topts, Some(&on_progress), &mut |_| {})?
        }
        None if *canary != CanaryOptions::default() => {
            engine.transcribe_canary(&samples, topts, canary, Some(&on_progress), &mut |_| {})?
        }
        None => engine.transcribe(&samples, topts, Some(&on_progress))?,
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let info = RunInfo {
        file: file.display().to_string(),
        family: engine.family().to_string(),
        device: engine.device().to_string(),
        lane: engine.lane().to_string(),
        task: match topts.task {
            Task::Transcribe => "transcribe".into(),
            Task::Translate => "translate".into(),
        },
    };
    let _out = tracing::info_span!("output").entered();
    let text = output::render(format, &transcript, &info);
    let dest = match output {
        None => None,
        Some(p) if several => Some(p.join(output_name(file, format))),
        Some(p) => Some(p.clone()),
    };
    match dest {
        Some(path) => std::fs::write(&path, text)
            .map_err(|e| StapesError::BadInput(format!("{}: {e}", path.display()))),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|_| out.flush())
                .map_err(|e| StapesError::Internal(format!("stdout: {e}")))
        }
    }
}

/// The file name an input's transcript gets in the `-o` directory of a several-input run.
fn output_name(file: &std::path::Path, format: OutputFormat) -> String {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "stdin".into());
    format!("{stem}.{}", format.extension())
}

fn stapes_audio_load(file: &std::path::Path) -> Result<Vec<f32>, StapesError> {
    Ok(stapes::audio::load_file(file)?)
}

/// A bar over audio seconds (tenths), only when stderr is a terminal and the input is long.
fn progress_bar(total_seconds: f64) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() || total_seconds < 60.0 {
        return None;
    }
    let bar = ProgressBar::new((total_seconds * 10.0) as u64);
    let style = ProgressStyle::with_template("{bar:40} {percent:>3}% of the audio, eta {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    Some(bar)
}
