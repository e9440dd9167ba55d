//! Converts a Whisper checkpoint between formats until `stapes convert` wires it up:
//! `cargo run --release -p stapes-models --example whisper_convert -- IN OUT ggml|hf|ct2 [f16|f32|q8_0]`

use stapes_formats::Format;
use stapes_models::whisper::weights::{convert_with, WeightType};
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: whisper_convert IN OUT ggml|hf|ct2 [f16|f32|q8_0]");
        return ExitCode::from(2);
    }
    let Some(to) = Format::parse(&args[2]) else {
        eprintln!("unknown format {}", args[2]);
        return ExitCode::from(2);
    };
    let ty = match args.get(3).map(String::as_str) {
        None | Some("f16") => WeightType::F16,
        Some("f32") => WeightType::F32,
        Some("q8_0") | Some("q8") => WeightType::Q8_0,
        Some(other) => {
            eprintln!("unknown weight type {other}");
            return ExitCode::from(2);
        }
    };
    match convert_with(Path::new(&args[0]), Path::new(&args[1]), to, ty) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(3)
        }
    }
}
