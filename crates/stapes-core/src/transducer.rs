//! Greedy transducer (RNNT / TDT) label looping with its per-clip state in a device tensor.
//!
//! A step of the label loop differs from the previous one only in each clip's frame index, last
//! label and prediction-network state. Keeping those in device tensors and updating them with
//! device ops (`Backend::transducer_*`) lets one captured chain serve every step of every clip
//! of a batch; the host reads back only a small log of decisions.
//!
//! The state tensor is `(1, B, STATE_FIELDS)` f32 (the layout `write_rows` refreshes), one row
//! per clip with the fields of [`field`]; the log is `(B, K, RECORD_FIELDS)` f32, one record per
//! step slot (fields of [`record`]). Every value is a small integer (exact in f32) except the
//! margin.

use crate::{Error, HostTensor, Result};

/// Fields per clip in the state tensor.
pub const STATE_FIELDS: usize = 8;
/// Fields per step in the log tensor.
pub const RECORD_FIELDS: usize = 6;
/// Most TDT duration classes a device home must take.
pub const MAX_DURATIONS: usize = 8;

/// Field indices of a clip's state row.
pub mod field {
    /// Encoder frame the next step looks at.
    pub const FRAME: usize = 0;
    /// Encoder frames of the clip.
    pub const FRAMES: usize = 1;
    /// Non-blank symbols emitted at the current frame without moving (the max-symbols guard).
    pub const AT_FRAME: usize = 2;
    /// Steps taken.
    pub const STEPS: usize = 3;
    /// Argmax token of the last step (blank included).
    pub const TOKEN: usize = 4;
    /// 1 when the last step emitted a label (the prediction network advances), else 0.
    pub const EMITTED: usize = 5;
    /// Step budget (transformers bounds the loop by max_symbols × T tokens, start included).
    pub const MAX_STEPS: usize = 6;
}

/// Field indices of a step record.
pub mod record {
    /// 1 when the clip took this step, 0 when it was already done.
    pub const VALID: usize = 0;
    pub const TOKEN: usize = 1;
    pub const FRAME: usize = 2;
    /// Frames the step advanced.
    pub const DURATION: usize = 3;
    /// Smallest top-1 − top-2 logit margin of the step's decisions.
    pub const MARGIN: usize = 4;
    /// 1 when the clip is done after this step (or was already).
    pub const DONE: usize = 5;
}

/// The decision rule of a greedy transducer step, as transformers' `generate` (and NeMo's
/// guard for runs of zero-duration TDT tokens) apply it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransducerRule {
    /// Token logits (blank included); TDT duration logits follow them.
    pub vocab: usize,
    pub blank: u32,
    /// TDT: frames each duration class advances; empty for RNNT.
    pub durations: Vec<u32>,
    pub max_symbols: usize,
}

/// Top-1 minus top-2 (infinite for fewer than two values); equal maxima give 0.
pub fn margin(v: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &x in v {
        if x > a {
            b = a;
            a = x;
        } else if x > b {
            b = x;
        }
    }
    a - b
}

/// Index of the first maximum.
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best
}

fn done(row: &[f32]) -> bool {
    row[field::FRAME] >= row[field::FRAMES] || row[field::STEPS] >= row[field::MAX_STEPS]
}

impl TransducerRule {
    /// Logits per clip: tokens, then one per duration class.
    pub fn width(&self) -> usize {
        self.vocab + self.durations.len()
    }

    /// The rule fits a device home's kernels.
    pub fn check(&self) -> Result<()> {
        if self.vocab == 0
            || self.blank as usize >= self.vocab
            || self.durations.len() > MAX_DURATIONS
            || self.max_symbols == 0
        {
            return Err(Error::shape(
                "transducer rule",
                format!(
                    "vocab {}, blank {}, {} durations (at most {MAX_DURATIONS}), max symbols {}",
                    self.vocab,
                    self.blank,
                    self.durations.len(),
                    self.max_symbols
                ),
            ));
        }
        Ok(())
    }

    /// The state `(1, B, STATE_FIELDS)` of clips of `frames` encoder frames before their
    /// first step.
    pub fn initial_state(&self, frames: &[usize]) -> Result<HostTensor> {
        let mut data = vec![0f32; frames.len() * STATE_FIELDS];
        for (row, &t) in data.chunks_mut(STATE_FIELDS).zip(frames) {
            if t >= 1 << 24 {
                return Err(Error::shape(
                    "transducer state",
                    format!("{t} frames (at most 2^24)"),
                ));
            }
            row[field::FRAMES] = t as f32;
            row[field::TOKEN] = self.blank as f32;
            row[field::MAX_STEPS] = (self.max_symbols * t).saturating_sub(1) as f32;
        }
        HostTensor::new(vec![1, frames.len(), STATE_FIELDS], data)
    }

    /// One step of one clip: `row` (its state) is updated from `logits` (`width()` values) and
    /// the step's record returned. A clip that is done keeps its state; its record is invalid
    /// and says done.
    pub fn advance(&self, row: &mut [f32], logits: &[f32]) -> [f32; RECORD_FIELDS] {
        let mut rec = [0f32; RECORD_FIELDS];
        row[field::EMITTED] = 0.0;
        if done(row) {
            rec[record::DONE] = 1.0;
            return rec;
        }
        let (toks, durs) = logits.split_at(self.vocab.min(logits.len()));
        let token = argmax(toks);
        let blank = token == self.blank as usize;
        let mut m = margin(toks);
        let mut at = row[field::AT_FRAME] as usize;
        let duration = if self.durations.is_empty() {
            if blank {
                at = 0;
                1
            } else {
                at += 1;
                if at >= self.max_symbols {
                    at = 0;
                    1
                } else {
                    0
                }
            }
        } else {
            m = m.min(margin(durs));
            let d = self.durations[argmax(durs).min(self.durations.len() - 1)] as usize;
            let d = if blank && d == 0 { 1 } else { d };
            at = if d == 0 { at + 1 } else { 0 };
            if at >= self.max_symbols {
                at = 0;
                1
            } else {
                d
            }
        };
        rec[record::VALID] = 1.0;
        rec[record::TOKEN] = token as f32;
        rec[record::FRAME] = row[field::FRAME];
        rec[record::DURATION] = duration as f32;
        rec[record::MARGIN] = m;
        row[field::FRAME] += duration as f32;
        row[field::AT_FRAME] = at as f32;
        row[field::STEPS] += 1.0;
        row[field::TOKEN] = token as f32;
        row[field::EMITTED] = if blank { 0.0 } else { 1.0 };
        rec[record::DONE] = if done(row) { 1.0 } else { 0.0 };
        rec
    }
}

/// `(B, K)` of a state `(1, B, STATE_FIELDS)` and log `(B, K, RECORD_FIELDS)` pair, checked.
pub fn loop_dims(state: &[usize], log: &[usize]) -> Result<(usize, usize)> {
    if state.len() != 3
        || state[0] != 1
        || state[2] != STATE_FIELDS
        || log.len() != 3
        || log[0] != state[1]
        || log[2] != RECORD_FIELDS
    {
        return Err(Error::shape(
            "transducer state",
            format!(
                "state {state:?}, log {log:?}: want (1, B, {STATE_FIELDS}) and (B, K, {RECORD_FIELDS})"
            ),
        ));
    }
    Ok((state[1], log[1]))
}

/// `B` of a state `(1, B, STATE_FIELDS)`, checked.
pub fn state_batch(op: &'static str, state: &[usize]) -> Result<usize> {
    if state.len() != 3 || state[0] != 1 || state[2] != STATE_FIELDS {
        return Err(Error::shape(
            op,
            format!("state {state:?}: want (1, B, {STATE_FIELDS})"),
        ));
    }
    Ok(state[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(durations: Vec<u32>) -> TransducerRule {
        TransducerRule {
            vocab: 4,
            blank: 3,
            durations,
            max_symbols: 2,
        }
    }

    #[test]
    fn rnnt_moves_on_blank_and_after_max_symbols() {
        let r = rule(vec![]);
        let mut s = r.initial_state(&[2]).unwrap().data;
        // label 1 twice at frame 0: the second hits max_symbols and moves one frame
        let a = r.advance(&mut s, &[0.0, 2.0, 0.5, 1.0]);
        assert_eq!(a, [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]);
        assert_eq!(s[field::EMITTED], 1.0);
        let a = r.advance(&mut s, &[0.0, 2.0, 0.5, 1.0]);
        assert_eq!(&a[..4], &[1.0, 1.0, 0.0, 1.0]);
        assert_eq!(s[field::FRAME], 1.0);
        // blank at frame 1 ends the clip (2 frames)
        let a = r.advance(&mut s, &[0.0, 0.0, 0.0, 1.0]);
        assert_eq!(a, [1.0, 3.0, 1.0, 1.0, 1.0, 1.0]);
        assert_eq!(s[field::EMITTED], 0.0);
        let a = r.advance(&mut s, &[9.0, 0.0, 0.0, 1.0]);
        assert_eq!(a, [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn tdt_takes_the_duration_and_raises_a_blank_zero_to_one() {
        let r = rule(vec![0, 1, 2]);
        let mut s = r.initial_state(&[5]).unwrap().data;
        let a = r.advance(&mut s, &[0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 3.0]);
        assert_eq!(&a[..4], &[1.0, 2.0, 0.0, 2.0]);
        assert_eq!(a[record::MARGIN], 1.0);
        let a = r.advance(&mut s, &[0.0, 0.0, 0.0, 1.0, 5.0, 0.0, 0.0]);
        assert_eq!(&a[..4], &[1.0, 3.0, 2.0, 1.0]);
        assert_eq!(s[field::FRAME], 3.0);
    }
}
