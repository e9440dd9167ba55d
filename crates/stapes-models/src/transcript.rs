//! What every family returns: timed segments of text (family-agnostic; output writers use these).

use crate::Result;
use serde::Serialize;
use stapes_core::HostTensor;

/// A silence this long (seconds, from a token's end to the next word) starts a new segment.
pub const SEGMENT_PAUSE_S: f64 = 1.0;
/// A segment that has run this long (seconds) ends before its next word.
pub const SEGMENT_MAX_S: f64 = 15.0;

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

/// One emitted token of a frame-synchronous decoder (CTC, transducers) with its span in seconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TimedToken {
    pub token: u32,
    pub start: f64,
    pub end: f64,
}

/// Emitted tokens as segments with word timings, for families whose decoders give no segment
/// boundaries of their own (CTC, transducers). `piece(id)` is (whether the token starts a word,
/// its visible text); a token with no visible text (a space id, a lone `▁`) makes the next one
/// start a word. `text(ids)` decodes a segment's ids.
///
/// Segments end after a sentence's last piece (`.`, `?`, `!`), and before a word that follows a
/// pause of [`SEGMENT_PAUSE_S`] or would take the segment past [`SEGMENT_MAX_S`]: models without
/// punctuation (parakeet-ctc, GigaAM) would otherwise give a whole file as one subtitle. Never
/// inside a word; the segments' ids put together are `tokens`.
pub(crate) fn segment_tokens(
    tokens: &[TimedToken],
    piece: impl Fn(u32) -> (bool, String),
    text: impl Fn(&[u32]) -> Result<String>,
) -> Result<Vec<Segment>> {
    let mut out = Vec::new();
    let mut group: Vec<TimedToken> = Vec::new();
    let mut words: Vec<Word> = Vec::new();
    let mut new_word = true;
    let flush = |out: &mut Vec<Segment>, group: &mut Vec<TimedToken>, words: &mut Vec<Word>| {
        if let (Some(first), Some(last)) = (group.first(), group.last()) {
            let ids: Vec<u32> = group.iter().map(|s| s.token).collect();
            let seg_text = text(&ids)?;
            out.push(Segment::plain(
                out.len(),
                first.start,
                last.end,
                &seg_text,
                ids,
                Some(std::mem::take(words)),
            ));
        }
        group.clear();
        words.clear();
        Ok::<(), crate::ModelError>(())
    };
    for s in tokens {
        let (starts_word, visible) = piece(s.token);
        let visible = visible.trim_start_matches('\u{2581}').trim().to_string();
        let word_start = starts_word || new_word;
        if let (true, Some(first), Some(last)) = (word_start, group.first(), group.last()) {
            if s.start - last.end >= SEGMENT_PAUSE_S || s.start - first.start >= SEGMENT_MAX_S {
                flush(&mut out, &mut group, &mut words)?;
            }
        }
        group.push(*s);
        if word_start || words.is_empty() {
            new_word = visible.is_empty();
            if !new_word {
                words.push(Word {
                    start: s.start,
                    end: s.end,
                    word: visible.clone(),
                    probability: 1.0,
                });
            }
        } else if let Some(w) = words.last_mut() {
            w.word.push_str(&visible);
            w.end = s.end;
        }
        if matches!(visible.chars().last(), Some('.' | '?' | '!')) {
            flush(&mut out, &mut group, &mut words)?;
            new_word = true;
        }
    }
    flush(&mut out, &mut group, &mut words)?;
    Ok(out)
}

/// Transcripts of 16 kHz `clips` encoded as one batch (the one-pass families' `transcribe_batch`):
/// `prepare(clip, seconds)` gives a clip's features, or `None` for one too short to encode (its
/// transcript stays empty), or the error that fails the call; `run(features, seconds)` gives
/// the kept clips' segments, in order.
pub(crate) fn batch_transcripts(
    clips: &[&[f32]],
    sample_rate: u32,
    mut prepare: impl FnMut(&[f32], f64) -> Result<Option<HostTensor>>,
    run: impl FnOnce(&[HostTensor], &[f64]) -> Result<Vec<Vec<Segment>>>,
) -> Result<Vec<Transcript>> {
    let mut out: Vec<Transcript> = clips
        .iter()
        .map(|c| Transcript {
            duration: c.len() as f64 / sample_rate as f64,
            language_probability: 1.0,
            ..Default::default()
        })
        .collect();
    let (mut feats, mut which, mut seconds) = (Vec::new(), Vec::new(), Vec::new());
    for (i, c) in clips.iter().enumerate() {
        if let Some(f) = prepare(c, out[i].duration)? {
            feats.push(f);
            which.push(i);
            seconds.push(out[i].duration);
        }
    }
    if feats.is_empty() {
        return Ok(out);
    }
    for (segs, &i) in run(&feats, &seconds)?.into_iter().zip(&which) {
        out[i].segments = segs;
    }
    Ok(out)
}
