use stapes::error::StapesError;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Silero VAD ONNX file, or a cached model name.
    #[arg(short = 'm', long = "model", default_value = "silero-vad")]
    model: String,
    /// json | txt
    #[arg(short = 'f', long = "format", default_value = "json")]
    format: String,
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub fn run(_a: Args) -> Result<(), StapesError> {
    Err(StapesError::Unavailable(
        "vad: being wired (issue 6)".into(),
    ))
}
