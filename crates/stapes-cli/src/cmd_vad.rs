use stapes::error::StapesError;
use stapes::vad::VadParams;
use stapes::vad::{Vad, DEFAULT_VAD_MODEL};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Silero VAD ONNX file or directory, or a cached model name.
    #[arg(short = 'm', long = "model", default_value = DEFAULT_VAD_MODEL)]
    model: String,
    /// json | txt
    #[arg(short = 'f', long = "format", default_value = "json")]
    format: String,
    /// Speech probability threshold.
    #[arg(long, default_value_t = 0.5)]
    threshold: f64,
    /// Shortest speech kept, ms.
    #[arg(long, default_value_t = 250.0)]
    min_speech_ms: f64,
    /// Silence that ends speech, ms.
    #[arg(long, default_value_t = 100.0)]
    min_silence_ms: f64,
    /// Padding added around speech, ms.
    #[arg(long, default_value_t = 30.0)]
    speech_pad_ms: f64,
    /// Longest speech segment, s: longer ones are split at their longest silence (default: none).
    #[arg(long)]
    max_speech_s: Option<f64>,
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub fn run(a: Args) -> Result<(), StapesError> {
    let json = match a.format.as_str() {
        "json" => true,
        "txt" => false,
        f => {
            return Err(StapesError::Usage(format!(
                "unknown VAD output format `{f}` (json or txt)"
            )))
        }
    };
    if !(0.0..=1.0).contains(&a.threshold) {
        return Err(StapesError::Usage(format!(
            "--threshold {} is outside 0 ..= 1",
            a.threshold
        )));
    }
    if let Some(m) = a.max_speech_s {
        if m.is_nan() || m <= 0.0 {
            return Err(StapesError::Usage(format!(
                "--max-speech-s {m} must be above 0"
            )));
        }
    }
    let params = VadParams {
        max_speech_duration_s: a.max_speech_s.unwrap_or(f64::INFINITY),
        threshold: a.threshold,
        min_speech_duration_ms: a.min_speech_ms,
        min_silence_duration_ms: a.min_silence_ms,
        speech_pad_ms: a.speech_pad_ms,
        ..VadParams::default()
    };
    let vad = Vad::load(&a.model)?;
    for file in &a.files {
        let samples = stapes::audio::load_file(file)?;
        let speech = vad.speech(&samples, &params)?;
        if json {
            let v = serde_json::json!({
                "file": file.display().to_string(),
                "duration": samples.len() as f64 / 16_000.0,
                "segments": speech.iter().map(|s| serde_json::json!({
                    "start": (s.start * 1000.0).round() / 1000.0,
                    "end": (s.end * 1000.0).round() / 1000.0,
                })).collect::<Vec<_>>(),
            });
            println!("{v}");
        } else {
            for s in &speech {
                println!("{:.3}\t{:.3}", s.start, s.end);
            }
        }
    }
    Ok(())
}
