//! Qwen3-ASR (transformers' `Qwen3ASRForConditionalGeneration`): a Whisper-style audio tower
//! over 1 s chunks with windowed attention, projected into a Qwen3 text model that answers a chat
//! prompt with `language <Name><asr_text><transcription>`.
//!
//! ```text
//! Qwen3Asr::new(backend, dir, lane)
//!   .transcribe(&samples_16k, &opts) -> Transcript (one segment; the model gives no times)
//!   .features / .encode / .prompt / .generate   the stages, for tests and benches
//! ```

pub mod config;
pub mod decoder;
pub mod encoder;
pub mod model;
pub mod weights;

pub use config::{AudioConfig, Qwen3AsrConfig, TextConfig};
pub use model::{
    language_name, Generated, Prompt, Qwen3Asr, Qwen3AsrOptions, LANGUAGES, MAX_ONE_PASS_S,
    SAMPLE_RATE, STEP_CHAIN_ROWS,
};
pub use weights::{expected_shapes, load, Qwen3AsrCheckpoint};
