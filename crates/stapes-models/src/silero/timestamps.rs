//! Speech segments from per-window probabilities, exactly as the silero-vad package's
//! `get_speech_timestamps` (6.2.3, `get_speech_timestamps_from_probs`) computes them.
//!
//! The arithmetic follows the Python code to the letter: durations become sample counts in f64
//! (`sr * ms / 1000`), positions are integers, `0` means "unset" for the silence bookkeeping, ties
//! between candidate silences go to the earliest, and padding truncates like `int()`. A
//! probability is compared as the f64 value of its f32, as Python compares onnxruntime's output.

use super::config::VadRate;

/// The knobs of `get_speech_timestamps`, with the package's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct VadParams {
    /// Probabilities at or above this start (or continue) speech.
    pub threshold: f64,
    /// Below this, speech may end; `None` = `max(threshold − 0.15, 0.01)`.
    pub neg_threshold: Option<f64>,
    /// Shorter segments are dropped.
    pub min_speech_duration_ms: f64,
    /// Longer segments are split (at the longest silence seen, or hard at the limit).
    pub max_speech_duration_s: f64,
    /// Silence needed to end a segment.
    pub min_silence_duration_ms: f64,
    /// Added on each side of a segment (halved between close neighbours).
    pub speech_pad_ms: f64,
    /// A silence must be longer than this to be a split candidate at the max duration.
    pub min_silence_at_max_speech_ms: f64,
    /// Split at the longest candidate silence (true) or at the last one (the legacy rule).
    pub use_max_poss_sil_at_max_speech: bool,
}

impl Default for VadParams {
    fn default() -> Self {
        VadParams {
            threshold: 0.5,
            neg_threshold: None,
            min_speech_duration_ms: 250.0,
            max_speech_duration_s: f64::INFINITY,
            min_silence_duration_ms: 100.0,
            speech_pad_ms: 30.0,
            min_silence_at_max_speech_ms: 98.0,
            use_max_poss_sil_at_max_speech: true,
        }
    }
}

impl VadParams {
    /// The exit threshold actually used.
    pub fn effective_neg_threshold(&self) -> f64 {
        self.neg_threshold
            .unwrap_or_else(|| (self.threshold - 0.15).max(0.01))
    }
}

/// A speech span in samples of the audio handed in: `start .. end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpeechSegment {
    pub start: usize,
    pub end: usize,
}

impl SpeechSegment {
    pub fn start_seconds(&self, sample_rate: u32) -> f64 {
        self.start as f64 / sample_rate as f64
    }
    pub fn end_seconds(&self, sample_rate: u32) -> f64 {
        self.end as f64 / sample_rate as f64
    }
}

#[derive(Clone, Copy, Default)]
struct Open {
    start: Option<i64>,
}

/// Speech segments from the per-window probabilities of `audio_len` samples at `rate`.
/// Positions are in samples at `rate`; multiply by the decimation step for the caller's rate
/// (what [`super::SileroVad::segments`] does).
pub fn speech_timestamps(
    probs: &[f32],
    params: &VadParams,
    rate: VadRate,
    audio_len: usize,
) -> Vec<SpeechSegment> {
    let sr = rate.hz() as f64;
    let window = rate.window() as i64;
    let audio_len = audio_len as i64;
    let threshold = params.threshold;
    let neg_threshold = params.effective_neg_threshold();
    let min_speech_samples = sr * params.min_speech_duration_ms / 1000.0;
    let speech_pad_samples = sr * params.speech_pad_ms / 1000.0;
    let max_speech_samples =
        sr * params.max_speech_duration_s - window as f64 - 2.0 * speech_pad_samples;
    let min_silence_samples = sr * params.min_silence_duration_ms / 1000.0;
    let min_silence_samples_at_max_speech = sr * params.min_silence_at_max_speech_ms / 1000.0;
    let use_max = params.use_max_poss_sil_at_max_speech;

    let mut triggered = false;
    // (start, end) of finished segments before padding.
    let mut speeches: Vec<(i64, i64)> = Vec::new();
    let mut current = Open::default();
    let mut temp_end: i64 = 0;
    let mut prev_end: i64 = 0;
    let mut next_start: i64 = 0;
    let mut possible_ends: Vec<(i64, i64)> = Vec::new();

    for (i, &p) in probs.iter().enumerate() {
        let p = p as f64;
        let cur = window * i as i64;

        if p >= threshold && temp_end != 0 {
            let sil_dur = cur - temp_end;
            if sil_dur as f64 > min_silence_samples_at_max_speech {
                possible_ends.push((temp_end, sil_dur));
            }
            temp_end = 0;
            if next_start < prev_end {
                next_start = cur;
            }
        }

        if p >= threshold && !triggered {
            triggered = true;
            current.start = Some(cur);
            continue;
        }

        if triggered {
            // Triggered always comes with an open start (the Python dict lookup cannot fail).
            let start = current.start.unwrap_or(cur);
            if (cur - start) as f64 > max_speech_samples {
                if use_max && !possible_ends.is_empty() {
                    // Python's max() keeps the first of equal keys.
                    let mut best = possible_ends[0];
                    for &pe in &possible_ends[1..] {
                        if pe.1 > best.1 {
                            best = pe;
                        }
                    }
                    let (end, dur) = best;
                    prev_end = end;
                    speeches.push((start, prev_end));
                    current = Open::default();
                    next_start = prev_end + dur;
                    if next_start < prev_end + cur {
                        current.start = Some(next_start);
                    } else {
                        triggered = false;
                    }
                    prev_end = 0;
                    next_start = 0;
                    temp_end = 0;
                    possible_ends.clear();
                } else if prev_end != 0 {
                    speeches.push((start, prev_end));
                    current = Open::default();
                    if next_start < prev_end {
                        triggered = false;
                    } else {
                        current.start = Some(next_start);
                    }
                    prev_end = 0;
                    next_start = 0;
                    temp_end = 0;
                    possible_ends.clear();
                } else {
                    speeches.push((start, cur));
                    current = Open::default();
                    prev_end = 0;
                    next_start = 0;
                    temp_end = 0;
                    triggered = false;
                    possible_ends.clear();
                    continue;
                }
            }
        }

        if p < neg_threshold && triggered {
            if temp_end == 0 {
                temp_end = cur;
            }
            let sil_dur_now = cur - temp_end;
            if !use_max && sil_dur_now as f64 > min_silence_samples_at_max_speech {
                prev_end = temp_end;
            }
            if (sil_dur_now as f64) < min_silence_samples {
                continue;
            }
            if let Some(start) = current.start {
                if (temp_end - start) as f64 > min_speech_samples {
                    speeches.push((start, temp_end));
                }
            }
            current = Open::default();
            prev_end = 0;
            next_start = 0;
            temp_end = 0;
            triggered = false;
            possible_ends.clear();
            continue;
        }
    }

    if let Some(start) = current.start {
        if (audio_len - start) as f64 > min_speech_samples {
            speeches.push((start, audio_len));
        }
    }

    // Padding: `int(max(0, start - pad))`, neighbours closer than two pads share the gap.
    let n = speeches.len();
    let trunc = |v: f64| v.trunc() as i64;
    for i in 0..n {
        if i == 0 {
            speeches[0].0 = trunc((speeches[0].0 as f64 - speech_pad_samples).max(0.0));
        }
        if i + 1 != n {
            let silence = speeches[i + 1].0 - speeches[i].1;
            if (silence as f64) < 2.0 * speech_pad_samples {
                let half = silence.div_euclid(2);
                speeches[i].1 += half;
                speeches[i + 1].0 = (speeches[i + 1].0 - half).max(0);
            } else {
                speeches[i].1 =
                    trunc((speeches[i].1 as f64 + speech_pad_samples).min(audio_len as f64));
                speeches[i + 1].0 = trunc((speeches[i + 1].0 as f64 - speech_pad_samples).max(0.0));
            }
        } else {
            speeches[i].1 =
                trunc((speeches[i].1 as f64 + speech_pad_samples).min(audio_len as f64));
        }
    }

    speeches
        .into_iter()
        .map(|(s, e)| SpeechSegment {
            start: s.max(0) as usize,
            end: e.max(0) as usize,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probs(pattern: &[(f32, usize)]) -> Vec<f32> {
        pattern
            .iter()
            .flat_map(|&(p, n)| std::iter::repeat_n(p, n))
            .collect()
    }

    #[test]
    fn one_clean_segment_is_padded() {
        // 10 silent windows, 20 speech, 10 silent at 16 kHz.
        let p = probs(&[(0.1, 10), (0.9, 20), (0.1, 10)]);
        let segs = speech_timestamps(&p, &VadParams::default(), VadRate::Hz16000, 40 * 512);
        assert_eq!(
            segs,
            vec![SpeechSegment {
                start: 10 * 512 - 480,
                end: 30 * 512 + 480
            }]
        );
    }

    #[test]
    fn short_blips_and_short_gaps() {
        // A 3-window blip (96 ms < 250 ms) is dropped; a 2-window dip (64 ms < 100 ms) is bridged.
        let p = probs(&[
            (0.0, 5),
            (0.9, 3),
            (0.0, 10),
            (0.9, 15),
            (0.0, 2),
            (0.9, 15),
            (0.0, 10),
        ]);
        let segs = speech_timestamps(&p, &VadParams::default(), VadRate::Hz16000, p.len() * 512);
        assert_eq!(segs.len(), 1, "{segs:?}");
        assert_eq!(segs[0].start, 18 * 512 - 480);
    }
}
