//! Word timestamps: cross-attention of the alignment heads → DTW path → word boundaries, as
//! CTranslate2's `Whisper.align` and faster-whisper's `add_word_timestamps` compute them.

use super::decoder::CrossKv;
use super::decoding::{RawSegment, WhisperOptions};
use super::model::Whisper;
use crate::transcript::Word;
use crate::{ModelError, Result};
use stapes_core::Backend;

/// Encoder positions per second (mel frames are 100/s, conv2 halves them).
const TOKENS_PER_SECOND: f64 = 50.0;

/// Median filter along the last axis with reflect padding (CTranslate2's `MedianFilter`).
pub fn median_filter(x: &mut [f32], width: usize) {
    let n = x.len();
    let rank = width / 2;
    if n <= rank || width < 2 {
        return;
    }
    let src = x.to_vec();
    let mut win = vec![0f32; width];
    for (j, out) in x.iter_mut().enumerate() {
        for (k, w) in win.iter_mut().enumerate() {
            let mut read = (j as isize + k as isize - rank as isize).unsigned_abs();
            if read >= n {
                read = (2 * n).saturating_sub(read + 2);
            }
            *w = src[read.min(n - 1)];
        }
        win.select_nth_unstable_by(rank, |a, b| a.total_cmp(b));
        *out = win[rank];
    }
}

/// Monotonic alignment maximising the summed `x (n, m)` (CTranslate2's `negative_dtw`): the path
/// as (row, column) pairs from (0, 0) to (n−1, m−1).
pub fn negative_dtw(x: &[f32], n: usize, m: usize) -> Vec<(usize, usize)> {
    let w = m + 1;
    let mut cost = vec![f32::INFINITY; (n + 1) * w];
    let mut trace = vec![-1i8; (n + 1) * w];
    cost[0] = 0.0;
    for j in 1..=m {
        for i in 1..=n {
            let c0 = cost[(i - 1) * w + j - 1];
            let c1 = cost[(i - 1) * w + j];
            let c2 = cost[i * w + j - 1];
            let (c, t) = if c0 < c1 && c0 < c2 {
                (c0, 0)
            } else if c1 < c0 && c1 < c2 {
                (c1, 1)
            } else {
                (c2, 2)
            };
            cost[i * w + j] = -x[(i - 1) * m + (j - 1)] + c;
            trace[i * w + j] = t;
        }
    }
    trace[..=m].fill(2);
    for k in 0..=n {
        trace[k * w] = 1;
    }
    let (mut i, mut j) = (n, m);
    let mut path = Vec::with_capacity(n + m);
    while i > 0 || j > 0 {
        path.push((i.saturating_sub(1), j.saturating_sub(1)));
        match trace[i * w + j] {
            0 => {
                i -= 1;
                j -= 1;
            }
            1 => i -= 1,
            _ => j -= 1,
        }
    }
    path.reverse();
    path
}

/// A DTW path: (text row, encoder position) pairs.
pub type Path = Vec<(usize, usize)>;

/// One word (or punctuation run) with its tokens, before merging and offsets.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    pub word: String,
    pub tokens: Vec<u32>,
    pub start: f64,
    pub end: f64,
    pub probability: f32,
}

/// Merge leading punctuation into the next word and trailing punctuation into the previous one
/// (faster-whisper's `merge_punctuations`).
pub fn merge_punctuations(a: &mut [Timing], prepended: &str, appended: &str) {
    if a.len() >= 2 {
        let mut j = a.len() - 1;
        for i in (0..a.len() - 1).rev() {
            let prev = a[i].word.clone();
            if prev.starts_with(' ') && prepended.contains(prev.trim()) {
                let toks = std::mem::take(&mut a[i].tokens);
                a[j].word = prev + &a[j].word;
                let mut t = toks;
                t.extend_from_slice(&a[j].tokens);
                a[j].tokens = t;
                a[i].word.clear();
            } else {
                j = i;
            }
        }
    }
    let (mut i, mut j) = (0usize, 1usize);
    while j < a.len() {
        let follow = a[j].word.clone();
        // Python's `in` on strings: the empty word counts as contained
        if !a[i].word.ends_with(' ') && appended.contains(follow.as_str()) {
            a[i].word.push_str(&follow);
            let toks = std::mem::take(&mut a[j].tokens);
            a[i].tokens.extend(toks);
            a[j].word.clear();
        } else {
            i = j;
        }
        j += 1;
    }
}

/// numpy's median (mean of the two middle values for an even count).
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

impl<B: Backend> Whisper<B> {
    /// Token-level alignment of `text` (text tokens only) against one encoded window whose real
    /// content is `num_frames` mel frames: the DTW path over (text row, encoder position) and the
    /// probability of each text token (CTranslate2's `align`).
    pub fn align(
        &self,
        cross: &CrossKv<B>,
        sot_sequence: &[u32],
        text: &[u32],
        num_frames: usize,
        median_filter_width: usize,
    ) -> Result<(Path, Vec<f32>)> {
        let sp = self.tokenizer.special();
        let heads = &self.generation.alignment_heads;
        if heads.is_empty() {
            return Err(ModelError::bad_model(
                &self.path,
                "no alignment heads: word timestamps unavailable",
            ));
        }
        let mut input = sot_sequence.to_vec();
        input.push(sp.no_timestamps);
        input.extend_from_slice(text);
        input.push(sp.eot);
        let n = input.len();
        if n > self.decoder.n_ctx() {
            return Err(ModelError::BadInput(format!(
                "{} tokens are too many to align",
                text.len()
            )));
        }
        let mut layers: Vec<usize> = heads.iter().map(|&(l, _)| l).collect();
        layers.sort_unstable();
        layers.dedup();
        if let Some(&l) = layers.iter().find(|&&l| l >= self.config.decoder_layers) {
            return Err(ModelError::bad_model(
                &self.path,
                format!(
                    "alignment head in layer {l} of {}",
                    self.config.decoder_layers
                ),
            ));
        }
        let mut state = self.decoder_state(cross, 1)?;
        let (hidden, probs) =
            self.decoder
                .forward_with_probs(&self.backend, &mut state, &input, n, &layers)?;

        // probability of each next token among text tokens only
        let logits = self.logits(&hidden)?; // (1, n, V)
        let v = logits.last_dim();
        let eot = sp.eot as usize;
        let sot_len = sot_sequence.len();
        let mut token_probs = Vec::with_capacity(text.len());
        for (t, &id) in text.iter().enumerate() {
            let row = &logits.data[(sot_len + t) * v..(sot_len + t + 1) * v];
            let r = &row[..eot.min(v)];
            let m = r.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let s: f64 = r.iter().map(|&x| ((x - m) as f64).exp()).sum();
            let p = r
                .get(id as usize)
                .map_or(0.0, |&x| (((x - m) as f64).exp() / s) as f32);
            token_probs.push(p);
        }

        let frames = (num_frames / 2).min(self.config.n_audio_ctx);
        if frames == 0 || text.is_empty() {
            return Ok((Vec::new(), token_probs));
        }
        let n_heads = self.config.decoder_heads;
        // (heads, n, frames): each alignment head's probabilities over the real frames only
        let mut w = vec![0f32; heads.len() * n * frames];
        for (hi, &(l, h)) in heads.iter().enumerate() {
            let li = layers.iter().position(|&x| x == l).unwrap_or(0);
            let p = self.backend.download(&probs[li])?; // (1, H, n, Tk)
            let tk = p.last_dim();
            if h >= n_heads || p.data.len() != n_heads * n * tk {
                return Err(ModelError::bad_model(
                    &self.path,
                    format!("alignment head ({l}, {h}) out of range"),
                ));
            }
            for i in 0..n {
                let src = &p.data[(h * n + i) * tk..(h * n + i) * tk + frames];
                let s: f32 = src.iter().sum();
                let dst = &mut w[(hi * n + i) * frames..(hi * n + i + 1) * frames];
                for (d, &x) in dst.iter_mut().zip(src) {
                    *d = if s > 0.0 { x / s } else { 0.0 };
                }
            }
        }
        // standardise each frame over the tokens, then median-filter along time
        for hi in 0..heads.len() {
            for f in 0..frames {
                let col = |i: usize| (hi * n + i) * frames + f;
                let mean = (0..n).map(|i| w[col(i)] as f64).sum::<f64>() / n as f64;
                let var = (0..n)
                    .map(|i| (w[col(i)] as f64 - mean).powi(2))
                    .sum::<f64>()
                    / n as f64;
                let sd = var.sqrt();
                for i in 0..n {
                    let x = w[col(i)] as f64;
                    w[col(i)] = if sd > 0.0 {
                        ((x - mean) / sd) as f32
                    } else {
                        0.0
                    };
                }
            }
            for i in 0..n {
                median_filter(
                    &mut w[(hi * n + i) * frames..(hi * n + i + 1) * frames],
                    median_filter_width,
                );
            }
        }
        // mean over heads of rows sot_len ..= sot_len + len(text)
        let rows = text.len() + 1;
        let mut matrix = vec![0f32; rows * frames];
        for (r, mrow) in matrix.chunks_mut(frames).enumerate() {
            for hi in 0..heads.len() {
                let src = &w[(hi * n + sot_len + r) * frames..(hi * n + sot_len + r + 1) * frames];
                for (d, &x) in mrow.iter_mut().zip(src) {
                    *d += x;
                }
            }
            for d in mrow.iter_mut() {
                *d /= heads.len() as f32;
            }
        }
        Ok((negative_dtw(&matrix, rows, frames), token_probs))
    }

    /// faster-whisper's `find_alignment`: words of `text` with start/end (seconds within the
    /// window) and mean token probability.
    pub(crate) fn find_alignment(
        &self,
        cross: &CrossKv<B>,
        sot_sequence: &[u32],
        language: &str,
        text: &[u32],
        num_frames: usize,
    ) -> Result<Vec<Timing>> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        let (path, probs) = self.align(cross, sot_sequence, text, num_frames, 7)?;
        let mut with_eot = text.to_vec();
        with_eot.push(self.tokenizer.special().eot);
        let words = self.tokenizer.split_to_word_tokens(&with_eot, language);
        if words.len() <= 1 || path.is_empty() {
            return Ok(Vec::new());
        }
        let mut boundaries = vec![0usize];
        for (_, t) in &words[..words.len() - 1] {
            boundaries.push(boundaries.last().copied().unwrap_or(0) + t.len());
        }
        // times where the path enters a new text row
        let mut jump_times = Vec::new();
        let mut prev: Option<usize> = None;
        for &(i, j) in &path {
            if prev != Some(i) {
                jump_times.push(j as f64 / TOKENS_PER_SECOND);
            }
            prev = Some(i);
        }
        let mut out = Vec::new();
        for (k, (word, tokens)) in words.iter().enumerate().take(boundaries.len() - 1) {
            let (a, b) = (boundaries[k], boundaries[k + 1]);
            let (Some(&start), Some(&end)) = (jump_times.get(a), jump_times.get(b)) else {
                break;
            };
            let p = &probs[a.min(probs.len())..b.min(probs.len())];
            let probability = if p.is_empty() {
                f32::NAN
            } else {
                p.iter().sum::<f32>() / p.len() as f32
            };
            out.push(Timing {
                word: word.clone(),
                tokens: tokens.clone(),
                start,
                end,
                probability,
            });
        }
        Ok(out)
    }

    /// faster-whisper's `add_word_timestamps` for one window's segments; returns the updated
    /// last speech timestamp. Segment boundaries move to their words, as faster-whisper does.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add_word_timestamps(
        &self,
        segments: &mut [RawSegment],
        cross: &CrossKv<B>,
        sot_sequence: &[u32],
        language: &str,
        num_frames: usize,
        time_offset: f64,
        opts: &WhisperOptions,
        mut last_speech_timestamp: f64,
    ) -> Result<f64> {
        if segments.is_empty() {
            return Ok(last_speech_timestamp);
        }
        let eot = self.tokenizer.special().eot;
        let per_seg: Vec<Vec<u32>> = segments
            .iter()
            .map(|s| s.tokens.iter().copied().filter(|&t| t < eot).collect())
            .collect();
        let text: Vec<u32> = per_seg.iter().flatten().copied().collect();
        let mut alignment =
            self.find_alignment(cross, sot_sequence, language, &text, num_frames)?;

        let mut durations: Vec<f64> = alignment
            .iter()
            .map(|w| w.end - w.start)
            .filter(|&d| d != 0.0)
            .collect();
        let median_duration = median(&mut durations).min(0.7);
        let max_duration = median_duration * 2.0;
        if !durations.is_empty() {
            const SENTENCE_END: &str = ".。!！?？";
            for i in 1..alignment.len() {
                if alignment[i].end - alignment[i].start > max_duration {
                    if SENTENCE_END.contains(alignment[i].word.as_str()) {
                        alignment[i].end = alignment[i].start + max_duration;
                    } else if SENTENCE_END.contains(alignment[i - 1].word.as_str()) {
                        alignment[i].start = alignment[i].end - max_duration;
                    }
                }
            }
        }
        merge_punctuations(
            &mut alignment,
            &opts.prepend_punctuations,
            &opts.append_punctuations,
        );

        let mut wi = 0usize;
        for (si, seg) in segments.iter_mut().enumerate() {
            let mut saved = 0usize;
            let mut words: Vec<Word> = Vec::new();
            while wi < alignment.len() && saved < per_seg[si].len() {
                let t = &alignment[wi];
                if !t.word.is_empty() {
                    words.push(Word {
                        start: round2(time_offset + t.start),
                        end: round2(time_offset + t.end),
                        word: t.word.clone(),
                        probability: t.probability,
                    });
                }
                saved += t.tokens.len();
                wi += 1;
            }
            if !words.is_empty() {
                // a first word right after a pause is no longer than twice the median
                if words[0].end - last_speech_timestamp > median_duration * 4.0
                    && (words[0].end - words[0].start > max_duration
                        || (words.len() > 1 && words[1].end - words[0].start > max_duration * 2.0))
                {
                    if words.len() > 1 && words[1].end - words[1].start > max_duration {
                        let boundary = (words[1].end / 2.0).max(words[1].end - max_duration);
                        words[0].end = boundary;
                        words[1].start = boundary;
                    }
                    words[0].start = (words[0].end - max_duration).max(0.0);
                }
                if seg.start < words[0].end && seg.start - 0.5 > words[0].start {
                    words[0].start = (words[0].end - median_duration).min(seg.start).max(0.0);
                } else {
                    seg.start = words[0].start;
                }
                let last = words.len() - 1;
                if seg.end > words[last].start && seg.end + 0.5 < words[last].end {
                    words[last].end = (words[last].start + median_duration).max(seg.end);
                } else {
                    seg.end = words[last].end;
                }
                last_speech_timestamp = seg.end;
            }
            seg.words = Some(words);
        }
        // faster-whisper then takes the end of the last word (or segment) as the last speech
        if let Some(end) = segment_end(segments) {
            last_speech_timestamp = end;
        }
        Ok(last_speech_timestamp)
    }
}

/// faster-whisper's `get_end`: the last word's end, else the last segment's end.
pub(crate) fn segment_end(segments: &[RawSegment]) -> Option<f64> {
    segments
        .iter()
        .rev()
        .find_map(|s| s.words.as_ref().and_then(|w| w.last()).map(|w| w.end))
        .or_else(|| segments.last().map(|s| s.end))
}
