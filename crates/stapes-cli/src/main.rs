//! `stapes`: the command line. Thin: parsing, progress and I/O; everything else is the library.

mod cmd_bench;
mod cmd_inspect;
mod cmd_transcribe;
mod cmd_vad;
mod serve;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

#[derive(Parser)]
#[command(
    name = "stapes",
    version,
    about = "Speech recognition for every open ASR family, CPU and GPU"
)]
struct Cli {
    /// Log what the engine does (device, lane, counters) to stderr.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Transcribe (or translate) audio files.
    Transcribe(cmd_transcribe::Args),
    /// Print speech segments (seconds) found by the voice activity detector.
    Vad(cmd_vad::Args),
    /// Show a model's format, family, hyper-parameters and tensors.
    Inspect(cmd_inspect::Args),
    /// Convert Whisper weights between formats (ctranslate2 → ggml | hf).
    Convert(cmd_inspect::ConvertArgs),
    /// Serve the OpenAI-compatible HTTP API.
    Serve(serve::Args),
    /// Time encode / decode / end to end.
    Bench(cmd_bench::Args),
}

fn main() -> ExitCode {
    stapes::profile::mark_process_start();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let level = if cli.verbose {
        tracing::Level::DEBUG
    } else {
        tracing::Level::WARN
    };
    // the log lines, and the phase recorder behind `--verbose`'s profile and `bench --json`
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_filter(tracing_subscriber::filter::LevelFilter::from_level(level));
    tracing_subscriber::registry()
        .with(log)
        .with(stapes::profile::layer())
        .init();
    let result = match cli.command {
        Command::Transcribe(a) => cmd_transcribe::run(a, cli.verbose),
        Command::Vad(a) => cmd_vad::run(a),
        Command::Inspect(a) => cmd_inspect::run(a),
        Command::Convert(a) => cmd_inspect::convert(a),
        Command::Serve(a) => serve::run(a),
        Command::Bench(a) => cmd_bench::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if cli.verbose {
                // where a failing run spent its time is as useful as a passing one's
                eprintln!("stapes: {}", stapes::profile::snapshot().render());
            }
            eprintln!("stapes: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
