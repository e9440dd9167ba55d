use stapes::error::StapesError;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Model directory or file, or a cached model name.
    model: String,
}

#[derive(clap::Args)]
pub struct ConvertArgs {
    input: String,
    output: PathBuf,
    /// ggml | hf
    #[arg(long)]
    to: String,
}

pub fn run(_a: Args) -> Result<(), StapesError> {
    Err(StapesError::Unavailable("inspect: being wired".into()))
}

pub fn convert(_a: ConvertArgs) -> Result<(), StapesError> {
    Err(StapesError::Unavailable("convert: being wired".into()))
}
