use stapes::error::StapesError;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Model directory or file, or a cached model name.
    model: String,
}

#[derive(clap::Args)]
pub struct ConvertArgs {
    /// Whisper weights in any format we read (directory, file or cached name).
    input: String,
    /// Output file (ggml) or directory (hf, ct2).
    output: PathBuf,
    /// ggml | hf | ct2
    #[arg(long)]
    to: String,
    /// Weight type of the matrices: f16 (default), f32, or q8_0 (ggml only, as whisper.cpp's
    /// `quantize` writes it).
    #[arg(long = "type", default_value = "f16")]
    ty: String,
}

pub fn run(a: Args) -> Result<(), StapesError> {
    let path = stapes::models::resolve(&a.model)?;
    print!("{}", stapes::inspect::describe(&path)?);
    Ok(())
}

pub fn convert(a: ConvertArgs) -> Result<(), StapesError> {
    let input = stapes::models::resolve(&a.input)?;
    stapes::inspect::convert(&input, &a.output, &a.to, &a.ty)?;
    eprintln!("stapes: wrote {}", a.output.display());
    Ok(())
}
