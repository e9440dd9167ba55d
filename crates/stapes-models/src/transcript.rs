//! What every family returns: timed segments of text (family-agnostic; output writers use these).

use serde::Serialize;

/// One word with its time span (seconds from the start of the input) and probability.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Word {
    pub start: f64,
    pub end: f64,
    pub word: String,
    pub probability: f32,
}

/// One decoded segment. `tokens` are the ids the decoder emitted for it, in order, without the
/// prompt and without end-of-text (Whisper keeps timestamp tokens; transducers/CTC: non-blank ids).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Segment {
    pub id: usize,
    /// Seconds from the start of the input.
    pub start: f64,
    pub end: f64,
    pub text: String,
    pub tokens: Vec<u32>,
    /// Mean log-probability of the sampled tokens (Whisper); 0 where the family has none.
    pub avg_logprob: f32,
    /// Probability of `<|nospeech|>` at the first step (Whisper); 0 where the family has none.
    pub no_speech_prob: f32,
    /// gzip compression ratio of the text (Whisper's repetition check); 0 where unused.
    pub compression_ratio: f32,
    /// Sampling temperature that produced this segment.
    pub temperature: f32,
    /// Present when word timestamps were asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub words: Option<Vec<Word>>,
}

impl Segment {
    /// A segment of a family without Whisper's decoding statistics (transducers, CTC, Canary):
    /// those stay 0 and the text gets the leading space every segment text carries.
    pub fn plain(
        id: usize,
        start: f64,
        end: f64,
        text: &str,
        tokens: Vec<u32>,
        words: Option<Vec<Word>>,
    ) -> Segment {
        Segment {
            id,
            start,
            end,
            text: if text.is_empty() {
                String::new()
            } else {
                format!(" {}", text.trim())
            },
            tokens,
            avg_logprob: 0.0,
            no_speech_prob: 0.0,
            compression_ratio: 0.0,
            temperature: 0.0,
            words,
        }
    }
}

/// The result of transcribing one input.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Transcript {
    /// Language code ("en"), detected or given; empty where the family has no notion of it.
    pub language: String,
    /// Probability of the detected language (1 when given).
    pub language_probability: f32,
    /// Input length in seconds.
    pub duration: f64,
    pub segments: Vec<Segment>,
}

impl Transcript {
    /// The whole text: segment texts joined as they were decoded (each carries its leading space).
    pub fn text(&self) -> String {
        let s: String = self.segments.iter().map(|s| s.text.as_str()).collect();
        s.trim().to_string()
    }
}
