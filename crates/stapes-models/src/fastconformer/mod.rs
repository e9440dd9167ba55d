//! FastConformer family: Parakeet with a CTC, RNNT or TDT head (transformers' `ParakeetFor*`)
//! and Canary (AED, transformers' `CanaryForConditionalGeneration`), one encoder for both.
//!
//! ```text
//! Parakeet::new(backend, path, lane)      path: HF directory, .nemo archive or whisper.cpp file
//!   .transcribe(&samples_16k) -> Transcript (sentence segments, word timings from frames and
//!                                            TDT durations, text via tokenizer.json or the
//!                                            .nemo's SentencePiece model; ids without one)
//!   .features / .encode_host / .greedy     the stages, for tests and benches
//! Canary::new(backend, path, lane)          path: HF directory or .nemo archive
//!   .transcribe_request(&samples_16k, &CanaryRequest{source, target, pnc, ..}, beam_size)
//!   .prompt(&req) -> ids                   special tokens by name from the model's tokenizer
//!   .generate / .generate_beam(enc, prompt, max_new, beam, length_penalty)
//! ParakeetConfig::published(name) + synthetic_checkpoint(cfg, seed) -> random weights of a
//!   published shape (`--synthetic`)
//! ```
//!
//! Long inputs run in bounded memory ([`Chunking`]); the attention work is still O(T'²).

pub mod canary;
pub mod canary_prompt;
pub mod config;
pub mod decoder;
pub mod encoder;
pub mod ggml;
mod label_loop;
pub mod model;
pub mod nemo;
pub mod weights;

pub use canary::{load_canary, Canary, CanaryCheckpoint, CanaryConfig};
pub use canary_prompt::{CanaryRequest, CanaryTokenizer, PromptFormat};
pub use config::{EncoderConfig, HeadConfig, ParakeetConfig, TransducerConfig};
pub use decoder::{ctc_collapse, Decoded, Step};
pub use encoder::Chunking;
pub use model::{Parakeet, SAMPLE_RATE};
pub use nemo::{load_canary_nemo, load_nemo, load_nemo_any, NemoModel};
pub use weights::{expected_shapes, load, load_hf, synthetic_checkpoint, ParakeetCheckpoint};
