//! Decoding as faster-whisper 1.x drives CTranslate2: logits rules (suppression, timestamp rules),
//! greedy / sampling / beam search with CTranslate2's bookkeeping, temperature fallback, language
//! detection and the 30 s seek loop.
//!
//! CTranslate2 behaviours faster-whisper's output depends on, reproduced here because the parity
//! tests showed they matter:
//! - The prompt up to the last start-of-transcript control token is one prefill pass; decoding
//!   starts from that token and may add at most `min(448/2, 448 − prefill)` tokens.
//! - `P(<|nospeech|>)` is the softmax of the unfiltered logits at the `<|startoftranscript|>`
//!   row: from the prefill when previous text precedes it, else from the first decoding step.
//! - Disabled logits are set to `f32::MIN`, not −∞; rules run in the order suppress tokens,
//!   suppress-at-begin (`[220, eot]` at the first sampled step), timestamp rules; the
//!   timestamp-mass rule reads the log-softmax after every earlier rule (end-of-text counts as
//!   text there), and the first step allows only timestamps up to `max_initial_timestamp`.
//! - Scores are cumulative log-probs including end-of-text, divided by `len^length_penalty`
//!   where `len` excludes end-of-text; faster-whisper turns that back into
//!   `avg_logprob = score·len^lp / (len + 1)`.
//! - Beam search: the first step runs one row; each step takes the best 2·beam (row, token)
//!   candidates; an end-of-text among the first `beam` is a finished hypothesis and its slot goes
//!   to the next non-end candidate; the search stops after `round(beam·patience)` finished
//!   hypotheses (or at the length limit, where every live beam finishes).
//! - Sampling at temperature T draws from `softmax(logprob/T)` over the full vocabulary
//!   (`sampling_topk=0`), `best_of` independent candidates, the best normalised score wins.
//!   (The random stream is ours, so sampled text differs from CTranslate2's.)

use super::decoder::{CrossKv, DecoderState};
use super::model::Whisper;
use crate::transcript::{Segment, Transcript};
use crate::{ModelError, Result};
use stapes_core::select::{MassRule, RowSelect, SelectRequest, Selected};
use stapes_core::{Backend, DeviceTensor, HostTensor};

/// Sample rate every Whisper front end consumes.
pub const SAMPLE_RATE: usize = 16_000;
/// Mel hop: 100 frames per second.
const HOP: usize = 160;
/// Seconds per timestamp token.
pub const TIME_PRECISION: f64 = 0.02;
/// Mel frames per encoder position (conv2 stride).
const INPUT_STRIDE: usize = 2;
/// Value CTranslate2 writes over disabled logits (`numeric_limits<float>::lowest()`).
const DISABLED: f32 = f32::MIN;

/// What the model is asked to do with the speech.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Task {
    #[default]
    Transcribe,
    /// Speech in any language to English text.
    Translate,
}

/// Options of [`Whisper::transcribe`]; `Default` is faster-whisper's `transcribe` defaults except
/// `condition_on_previous_text`, which stapes leaves off.
#[derive(Clone, Debug, PartialEq)]
pub struct WhisperOptions {
    /// Language code ("en", "de", …); `None` detects it on the first 30 s (multilingual models).
    pub language: Option<String>,
    pub task: Task,
    /// 1 = greedy.
    pub beam_size: usize,
    /// Candidates sampled at each temperature > 0.
    pub best_of: usize,
    pub patience: f32,
    pub length_penalty: f32,
    /// Tried in order until a result passes the thresholds; `[0.0]` is one greedy/beam pass.
    pub temperatures: Vec<f32>,
    pub compression_ratio_threshold: Option<f32>,
    pub log_prob_threshold: Option<f32>,
    pub no_speech_threshold: Option<f32>,
    pub condition_on_previous_text: bool,
    pub prompt_reset_on_temperature: f32,
    pub initial_prompt: Option<String>,
    /// Text forced at the start of the first window.
    pub prefix: Option<String>,
    pub suppress_blank: bool,
    /// Ids never sampled; `-1` stands for the model's default set (non-speech symbols).
    pub suppress_tokens: Vec<i64>,
    pub without_timestamps: bool,
    /// Seconds: the first timestamp cannot be later than this.
    pub max_initial_timestamp: f32,
    pub word_timestamps: bool,
    pub prepend_punctuations: String,
    pub append_punctuations: String,
    /// Cap on new tokens per window (`None`: the model's context).
    pub max_new_tokens: Option<usize>,
    /// Seed of the sampler used at temperatures > 0.
    pub seed: u64,
}

impl Default for WhisperOptions {
    fn default() -> Self {
        Self {
            language: None,
            task: Task::Transcribe,
            beam_size: 5,
            best_of: 5,
            patience: 1.0,
            length_penalty: 1.0,
            temperatures: vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
            compression_ratio_threshold: Some(2.4),
            log_prob_threshold: Some(-1.0),
            no_speech_threshold: Some(0.6),
            condition_on_previous_text: false,
            prompt_reset_on_temperature: 0.5,
            initial_prompt: None,
            prefix: None,
            suppress_blank: true,
            suppress_tokens: vec![-1],
            without_timestamps: false,
            max_initial_timestamp: 1.0,
            word_timestamps: false,
            prepend_punctuations: "\"'“¿([{-".into(),
            append_punctuations: "\"'.。,，!！?？:：”)]}、".into(),
            max_new_tokens: None,
            seed: 0,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Logits rules (CTranslate2's SuppressTokens, SuppressTokensBegin, ApplyTimestampRules)

/// Timestamp-mode constraints, CTranslate2's `ApplyTimestampRules`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimestampRules {
    pub eot: u32,
    pub no_timestamps: u32,
    pub timestamp_begin: u32,
    /// Last id of the vocabulary.
    pub timestamp_end: u32,
    /// Largest timestamp id allowed as the first token.
    pub max_initial_timestamp: u32,
}

impl TimestampRules {
    /// The rules of a Whisper vocabulary of `vocab_size` ids (its timestamps run to the last
    /// id), the first timestamp at most `max_initial_index` steps past the first one.
    pub fn whisper(
        sp: &super::tokenizer::SpecialTokens,
        vocab_size: usize,
        max_initial_index: u32,
    ) -> Self {
        Self {
            eot: sp.eot,
            no_timestamps: sp.no_timestamps,
            timestamp_begin: sp.timestamp_begin,
            timestamp_end: (vocab_size - 1) as u32,
            max_initial_timestamp: sp.timestamp_begin + max_initial_index,
        }
    }
}

/// Everything applied to one row of logits before a token is chosen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogitRules {
    pub suppress: Vec<u32>,
    /// Suppressed at the first sampled step only (blank and end-of-text).
    pub suppress_begin: Vec<u32>,
    pub timestamps: Option<TimestampRules>,
}

impl LogitRules {
    /// Apply to `row` (one sequence's logits) at decoding `step` (0 = the first token after the
    /// prompt); `seq` holds the tokens chosen so far (forced prefix included), `sample_begin` the
    /// length of that forced prefix.
    pub fn apply(&self, row: &mut [f32], step: usize, sample_begin: usize, seq: &[u32]) {
        let _ = self.apply_lse(row, step, sample_begin, seq);
    }

    /// [`Self::apply`], returning the log-sum-exp of the whole row where the rules computed it
    /// and left the row as it was then: `log_softmax` can take it instead of a second pass of
    /// exponentials over the vocabulary (the bulk of a step's host time at 51866 ids).
    pub fn apply_lse(
        &self,
        row: &mut [f32],
        step: usize,
        sample_begin: usize,
        seq: &[u32],
    ) -> Option<f32> {
        let v = row.len();
        let disable = |row: &mut [f32], id: u32| {
            if let Some(x) = row.get_mut(id as usize) {
                *x = DISABLED;
            }
        };
        for &id in &self.suppress {
            disable(row, id);
        }
        if step == sample_begin {
            for &id in &self.suppress_begin {
                disable(row, id);
            }
        }
        let Some(ts) = &self.timestamps else {
            return None;
        };
        let tb = (ts.timestamp_begin as usize).min(v);
        let te = (ts.timestamp_end as usize).min(v.saturating_sub(1));
        disable(row, ts.no_timestamps);
        let mut check = false;
        if step == sample_begin && step == 0 {
            // the first token is a timestamp, not later than max_initial_timestamp
            row[..tb].fill(DISABLED);
            let lo = (ts.max_initial_timestamp as usize + 1).min(v);
            if lo <= te {
                row[lo..=te].fill(DISABLED);
            }
        } else if step > sample_begin {
            let last = seq.get(step - 1).copied().unwrap_or(0);
            if last >= ts.timestamp_begin {
                let penultimate = if step - 1 > sample_begin {
                    seq.get(step - 2).copied().unwrap_or(0)
                } else {
                    last
                };
                if penultimate >= ts.timestamp_begin {
                    // a closed pair: text or end-of-text must follow
                    if tb <= te {
                        row[tb..=te].fill(DISABLED);
                    }
                } else {
                    // an open timestamp: its closing timestamp (not earlier) or end-of-text
                    row[..(ts.eot as usize).min(v)].fill(DISABLED);
                    row[tb..(last as usize).min(v)].fill(DISABLED);
                    check = true;
                }
            } else {
                check = true;
                // timestamps never decrease
                if let Some(&t) = seq[sample_begin.min(seq.len())..step.min(seq.len())]
                    .iter()
                    .rev()
                    .find(|&&t| t >= ts.timestamp_begin)
                {
                    row[tb..=(t as usize).min(te)].fill(DISABLED);
                }
            }
        }
        if !check {
            return None;
        }
        // if the timestamps together outweigh every single text token, sample a timestamp
        let lse = log_sum_exp(row);
        let max_text = row[..tb].iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) - lse;
        let ts_mass = log_sum_exp(&row[tb..=te]) - lse;
        if ts_mass > max_text {
            row[..tb].fill(DISABLED);
            return None;
        }
        Some(lse)
    }
}

impl LogitRules {
    /// Ids [`Self::apply`] disables in every row at `step` (the shared list of a
    /// `Backend::select_tokens` request).
    pub fn disabled_ids(&self, step: usize, sample_begin: usize) -> Vec<u32> {
        let mut ids = self.suppress.clone();
        if step == sample_begin {
            ids.extend_from_slice(&self.suppress_begin);
        }
        if let Some(ts) = &self.timestamps {
            ids.push(ts.no_timestamps);
        }
        ids
    }

    /// The timestamp rule "timestamps together outweigh every text token" as a mass rule over
    /// a vocabulary of `v`: A = the text ids, B = the timestamps.
    pub fn mass_rule(&self, v: usize) -> Option<MassRule> {
        let ts = self.timestamps.as_ref()?;
        let (tb, te1) = ts_bounds(ts, v);
        Some(MassRule {
            a: (0, tb),
            b: (tb, te1),
        })
    }

    /// One row's part of [`Self::apply`] at `step` as ranges (the timestamp rules' fills) and
    /// whether the mass rule is checked there; the same cases as `apply_lse`.
    pub fn row_select(&self, step: usize, sample_begin: usize, seq: &[u32], v: usize) -> RowSelect {
        let mut rs = RowSelect::default();
        let Some(ts) = &self.timestamps else {
            return rs;
        };
        let (tb, te1) = ts_bounds(ts, v);
        let clip = |x: u32| x.min(v as u32);
        if step == sample_begin && step == 0 {
            rs.ranges.push((0, tb));
            let lo = clip(ts.max_initial_timestamp.saturating_add(1));
            if lo < te1 {
                rs.ranges.push((lo, te1));
            }
        } else if step > sample_begin {
            let last = seq.get(step - 1).copied().unwrap_or(0);
            if last >= ts.timestamp_begin {
                let penultimate = if step - 1 > sample_begin {
                    seq.get(step - 2).copied().unwrap_or(0)
                } else {
                    last
                };
                if penultimate >= ts.timestamp_begin {
                    if tb < te1 {
                        rs.ranges.push((tb, te1));
                    }
                } else {
                    rs.ranges.push((0, clip(ts.eot)));
                    rs.ranges.push((tb, clip(last).max(tb)));
                    rs.mass_rule = true;
                }
            } else {
                rs.mass_rule = true;
                if let Some(&t) = seq[sample_begin.min(seq.len())..step.min(seq.len())]
                    .iter()
                    .rev()
                    .find(|&&t| t >= ts.timestamp_begin)
                {
                    rs.ranges
                        .push((tb, (t.min(te1.saturating_sub(1)) + 1).max(tb)));
                }
            }
        }
        rs
    }
}

/// `(timestamp_begin, timestamp_end + 1)` within a vocabulary of `v`, as `apply_lse` clips them.
fn ts_bounds(ts: &TimestampRules, v: usize) -> (u32, u32) {
    let tb = (ts.timestamp_begin as usize).min(v);
    let te = (ts.timestamp_end as usize).min(v.saturating_sub(1));
    (tb as u32, (te + 1).max(tb) as u32)
}

fn log_sum_exp(x: &[f32]) -> f32 {
    let m = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    if !m.is_finite() {
        return m;
    }
    // f32 exponentials (the bulk of a beam step's host time), summed in 8 f64 lanes
    let mut acc = [0f64; 8];
    for c in x.chunks(8) {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += (v - m).exp() as f64;
        }
    }
    m + (acc.iter().sum::<f64>()).ln() as f32
}

/// In place: `x ← x − logsumexp(x)` (decoding calls [`log_softmax_with`]).
#[cfg(test)]
fn log_softmax(x: &mut [f32]) {
    log_softmax_with(x, None)
}

/// [`log_softmax`] with `logsumexp(x)` already known (`Some`, from [`LogitRules::apply_lse`]):
/// the same values without recomputing it.
fn log_softmax_with(x: &mut [f32], lse: Option<f32>) {
    let lse = lse.unwrap_or_else(|| log_sum_exp(x));
    for v in x.iter_mut() {
        *v -= lse;
    }
}

/// `f(r, row r)` over the `v`-wide rows of `data`, results in row order. Several rows of a wide
/// vocabulary go to scoped threads: a row's rules and log-softmax cost ~0.2 ms at 51866 ids and
/// rows are independent, so this gives the same values as one thread.
fn per_row<T: Send>(
    data: &mut [f32],
    v: usize,
    f: impl Fn(usize, &mut [f32]) -> T + Sync,
) -> Vec<T> {
    let rows = data.len() / v.max(1);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if rows < 2 || v < 8192 || threads < 2 {
        return data
            .chunks_mut(v.max(1))
            .enumerate()
            .map(|(r, x)| f(r, x))
            .collect();
    }
    let per = rows.div_ceil(threads.min(rows));
    std::thread::scope(|sc| {
        let f = &f;
        let handles: Vec<_> = data
            .chunks_mut(v * per)
            .enumerate()
            .map(|(c, chunk)| {
                sc.spawn(move || {
                    chunk
                        .chunks_mut(v)
                        .enumerate()
                        .map(|(j, x)| f(c * per + j, x))
                        .collect::<Vec<T>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Insert `(s, flat)` into `top`, best first, at most `n` kept; equal scores keep the order they
/// came in (so feeding candidates in flat order breaks ties by flat index).
fn push_top(top: &mut Vec<(f32, usize)>, n: usize, s: f32, flat: usize) {
    if top.len() == n && s <= top[n - 1].0 {
        return;
    }
    let pos = top.partition_point(|&(t, _)| t >= s);
    top.insert(pos, (s, flat));
    top.truncate(n);
}

fn softmax_at(x: &[f32], id: usize) -> f32 {
    let lse = log_sum_exp(x);
    x.get(id).map_or(0.0, |&v| (v - lse).exp())
}

fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// Deterministic xorshift64* for temperature sampling.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    /// A draw from `softmax(logprobs / t)`.
    fn sample(&mut self, logprobs: &[f32], t: f32) -> usize {
        let m = logprobs.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let w: Vec<f64> = logprobs
            .iter()
            .map(|&v| (((v - m) / t) as f64).exp())
            .collect();
        let total: f64 = w.iter().sum();
        let mut u = self.uniform() * total;
        for (i, &p) in w.iter().enumerate() {
            if u < p {
                return i;
            }
            u -= p;
        }
        argmax(logprobs)
    }
}

// ---------------------------------------------------------------------------------------------
// One window: CTranslate2's Whisper `generate`

/// Settings of one `generate` call.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub beam_size: usize,
    pub patience: f32,
    pub length_penalty: f32,
    /// Independent sampled candidates (temperature > 0).
    pub num_hypotheses: usize,
    /// 0 = take the best token.
    pub temperature: f32,
    /// Prompt plus new tokens (CTranslate2 decodes at most half of it).
    pub max_length: usize,
    pub rules_suppress: Vec<u32>,
    pub suppress_blank: bool,
    /// In timestamp steps (0.02 s).
    pub max_initial_timestamp_index: u32,
    pub seed: u64,
}

/// Result of one window.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    /// Chosen tokens (forced prefix included, end-of-text excluded).
    pub tokens: Vec<u32>,
    /// Cumulative log-probability (end-of-text included) over `len^length_penalty`.
    pub score: f32,
    /// P(`<|nospeech|>`) at the start-of-transcript position.
    pub no_speech_prob: f32,
}

struct Hyp {
    tokens: Vec<u32>,
    score: f32,
}

impl<B: Backend> Whisper<B> {
    fn special(&self) -> &super::tokenizer::SpecialTokens {
        self.tokenizer.special()
    }

    /// One decoding step of every row of `state`: `tokens (rows)` at the state's position →
    /// logits `(rows, V)` on the host. Runs as the decoder's step chain (captured once and
    /// replayed on a GPU home) unless [`Self::set_device_steps`] turned that off.
    pub fn decode_step(
        &self,
        state: &mut DecoderState<'_, B>,
        tokens: &[u32],
    ) -> Result<HostTensor> {
        self.decoder.step_logits(&self.backend, state, tokens)
    }

    /// Per-token steps as one device-parameter chain (`Some(true)`) or as the host-parameter
    /// forward pass (`Some(false)`; same ops and values, one op call per kernel); `None` (the
    /// default) = the chain where the backend captures chains (CUDA with graphs on).
    pub fn set_device_steps(&self, on: Option<bool>) {
        self.decoder.set_device_steps(on);
    }

    /// The setting of [`Self::set_device_steps`].
    pub fn device_steps_setting(&self) -> Option<bool> {
        self.decoder.device_steps_setting()
    }

    /// Whether decoding steps run as the step chain now.
    pub fn device_steps(&self) -> bool {
        self.decoder.device_steps(&self.backend)
    }

    /// Where greedy (temperature 0) and beam search choose tokens: `Some(true)` on the device
    /// (`Backend::select_tokens`: only the candidates come back), `Some(false)` on the host
    /// (the whole logits row comes back); `None` (the default) = the device where the backend
    /// selects there ([`Backend::selects_on_device`]). Both give the same ids and scores.
    pub fn set_device_select(&self, on: Option<bool>) {
        let v = match on {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
        self.select.store(v, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether greedy steps queue the next step behind each selection with its tokens fed on
    /// the device (`None`: yes unless `STAPES_DECODE_AHEAD=0`); see
    /// [`Self::decode_step_select_ahead`]. Both give the same ids and scores.
    pub fn set_decode_ahead(&self, on: Option<bool>) {
        self.decoder.set_ahead(on);
    }

    /// Whether greedy steps may be queued ahead now ([`Self::set_decode_ahead`]; they are where
    /// the step chain runs and tokens are chosen on the device).
    pub fn decode_ahead(&self) -> bool {
        self.decoder.ahead_enabled()
    }

    /// Whether greedy and beam steps choose tokens on the device now.
    pub fn device_select(&self) -> bool {
        match self.select.load(std::sync::atomic::Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => self.backend.selects_on_device(),
        }
    }

    /// One decoding step with the tokens chosen where the logits are: `rules` at `step` for
    /// rows continuing `seqs`, each row's log-probs plus `offsets[r]` (none: 0), the best `k`
    /// per row; with `prob_of`, the raw softmax probability of that id per row.
    #[allow(clippy::too_many_arguments)]
    pub fn decode_step_select(
        &self,
        state: &mut DecoderState<'_, B>,
        tokens: &[u32],
        rules: &LogitRules,
        step: usize,
        sample_begin: usize,
        seqs: &[&[u32]],
        offsets: Option<&[f32]>,
        k: usize,
        prob_of: Option<u32>,
    ) -> Result<Selected> {
        let sel = (offsets, k, prob_of);
        self.decode_step_select_ahead(state, tokens, rules, step, sample_begin, seqs, sel, false)
    }

    /// [`Self::decode_step_select`] with `more` (another step follows, fed this step's best
    /// ids): where the decoder can, that next step is queued on the device behind this
    /// selection ([`super::decoder::Decoder::select_step_ahead`]), and the next call with those
    /// ids finds it done. `sel` = `(offsets, k, prob_of)` as in [`Self::decode_step_select`].
    #[allow(clippy::too_many_arguments)]
    pub fn decode_step_select_ahead(
        &self,
        state: &mut DecoderState<'_, B>,
        tokens: &[u32],
        rules: &LogitRules,
        step: usize,
        sample_begin: usize,
        seqs: &[&[u32]],
        sel: (Option<&[f32]>, usize, Option<u32>),
        more: bool,
    ) -> Result<Selected> {
        let (offsets, k, prob_of) = sel;
        let logits = self
            .decoder
            .step_logits_device(&self.backend, state, tokens)?; // (rows, 1, V)
        let v = logits.shape().last().copied().unwrap_or(0);
        let rows: Vec<RowSelect> = seqs
            .iter()
            .enumerate()
            .map(|(r, seq)| RowSelect {
                offset: offsets.and_then(|o| o.get(r)).copied().unwrap_or(0.0),
                ..rules.row_select(step, sample_begin, seq, v)
            })
            .collect();
        let disabled = rules.disabled_ids(step, sample_begin);
        let req = SelectRequest {
            disabled: &disabled,
            rows: &rows,
            mass: rules.mass_rule(v),
            k,
            prob_of,
        };
        self.decoder
            .select_step_ahead(&self.backend, state, &logits, &req, more)
    }

    /// Reorder (and possibly resize) a state's batch: row `i` continues row `idx[i]` (what beam
    /// search and sampling do between steps).
    pub fn reorder_state(&self, state: &mut DecoderState<'_, B>, idx: &[usize]) -> Result<()> {
        self.decoder.reorder(&self.backend, state, idx)
    }

    /// Logits `(rows, V)` of the last position of each row of `hidden (rows, n, d)`.
    fn last_logits(&self, hidden: &B::Tensor, n: usize) -> Result<HostTensor> {
        if n > 1 {
            let h = self.backend.slice(hidden, 1, n - 1, 1)?; // (rows, 1, d)
            self.logits(&h)
        } else {
            self.logits(hidden)
        }
    }

    /// Decode one window (its cross K/V) from `prompt`, as CTranslate2's `Whisper.generate` does.
    pub fn generate(
        &self,
        cross: &CrossKv<B>,
        prompt: &[u32],
        o: &GenerateOptions,
    ) -> Result<Generated> {
        let sp = self.special().clone();
        let sot_index = prompt
            .iter()
            .position(|&t| t == sp.sot)
            .ok_or_else(|| ModelError::BadInput("prompt has no <|startoftranscript|>".into()))?;
        let mut prompt_length = sot_index;
        while prompt_length < prompt.len()
            && (sp.sot..=sp.no_timestamps).contains(&prompt[prompt_length])
        {
            prompt_length += 1;
        }
        let ctx = self.decoder.n_ctx();
        if prompt.len() >= ctx {
            return Err(ModelError::BadInput(format!(
                "prompt of {} tokens exceeds the context",
                prompt.len()
            )));
        }
        let mut state = self.decoder_state(cross, 1)?;
        let prefill = &prompt[..prompt_length - 1];
        let start = &prompt[prompt_length - 1..];
        let sot_is_start = sot_index == prompt_length - 1;
        let mut no_speech_prob = 0.0;
        if !prefill.is_empty() {
            let hidden = self.decode(&mut state, prefill, prefill.len())?; // (1, n, d)
            if !sot_is_start {
                let h = self.backend.slice(&hidden, 1, sot_index, 1)?;
                let l = self.logits(&h)?;
                no_speech_prob = softmax_at(&l.data, sp.no_speech as usize);
            }
        }
        let start_step = prefill.len();
        let max_len = (o.max_length / 2)
            .min(o.max_length.saturating_sub(start_step))
            .max(1);
        let max_len = max_len.min(ctx - start_step);
        let start_id = start[0];
        let prefix = &start[1..];
        let rules = LogitRules {
            suppress: o.rules_suppress.clone(),
            suppress_begin: if o.suppress_blank {
                self.generation.begin_suppress_tokens.clone()
            } else {
                Vec::new()
            },
            timestamps: (prompt[prompt_length - 1] != sp.no_timestamps).then(|| {
                TimestampRules::whisper(&sp, self.config.vocab_size, o.max_initial_timestamp_index)
            }),
        };
        let first_step_no_speech = sot_is_start.then_some(sp.no_speech as usize);
        let (mut hyps, ns) = if o.beam_size <= 1 {
            self.greedy(
                &mut state,
                start_id,
                prefix,
                max_len,
                &rules,
                o,
                first_step_no_speech,
            )?
        } else {
            self.beam(
                &mut state,
                start_id,
                prefix,
                max_len,
                &rules,
                o,
                first_step_no_speech,
            )?
        };
        if let Some(p) = ns {
            no_speech_prob = p;
        }
        for h in &mut hyps {
            h.score /= (h.tokens.len() as f32).powf(o.length_penalty);
        }
        hyps.sort_by(|a, b| b.score.total_cmp(&a.score));
        let best = hyps
            .into_iter()
            .next()
            .ok_or_else(|| ModelError::BadInput("decoding produced no hypothesis".into()))?;
        Ok(Generated {
            tokens: best.tokens,
            score: best.score,
            no_speech_prob,
        })
    }

    /// Greedy search, or `num_hypotheses` independent samples at `temperature`.
    #[allow(clippy::too_many_arguments)]
    fn greedy(
        &self,
        state: &mut DecoderState<'_, B>,
        start_id: u32,
        prefix: &[u32],
        max_len: usize,
        rules: &LogitRules,
        o: &GenerateOptions,
        no_speech_id: Option<usize>,
    ) -> Result<(Vec<Hyp>, Option<f32>)> {
        let eot = self.special().eot;
        let n = if o.temperature > 0.0 {
            o.num_hypotheses.max(1)
        } else {
            1
        };
        if n > 1 {
            self.decoder.reorder(&self.backend, state, &vec![0; n])?;
        }
        let mut rng = Rng::new(o.seed);
        let mut hyps: Vec<Hyp> = (0..n)
            .map(|_| Hyp {
                tokens: Vec::new(),
                score: 0.0,
            })
            .collect();
        // row r of the batch decodes hypothesis alive[r]
        let mut alive: Vec<usize> = (0..n).collect();
        let mut input = vec![start_id; n];
        let mut no_speech = None;
        let on_device = o.temperature <= 0.0 && self.device_select();
        for step in 0..max_len {
            let mut keep = Vec::with_capacity(alive.len());
            // each row's (id, log-prob)
            let picks: Vec<(usize, f32)> = if on_device {
                let seqs: Vec<&[u32]> = alive.iter().map(|&h| hyps[h].tokens.as_slice()).collect();
                let prob_of = no_speech_id.filter(|_| step == 0).map(|id| id as u32);
                // the next input is this step's pick only past the forced prefix
                let more = step + 1 < max_len && step >= prefix.len();
                let sel = self.decode_step_select_ahead(
                    state,
                    &input,
                    rules,
                    step,
                    prefix.len(),
                    &seqs,
                    (None, 1, prob_of),
                    more,
                )?;
                if let Some(&p) = sel.probs.as_ref().and_then(|p| p.first()) {
                    no_speech = Some(p);
                }
                (0..seqs.len())
                    .map(|r| {
                        let (id, lp) = sel.row(r).next().unwrap_or((eot, 0.0));
                        if step < prefix.len() {
                            (prefix[step] as usize, 0.0)
                        } else {
                            (id as usize, lp)
                        }
                    })
                    .collect()
            } else {
                let mut logits = self.decode_step(state, &input)?; // (rows, V)
                let v = logits.last_dim();
                if step == 0 {
                    if let (Some(id), Some(row)) = (no_speech_id, logits.data.get(..v)) {
                        no_speech = Some(softmax_at(row, id));
                    }
                }
                per_row(&mut logits.data, v, |r, row| {
                    let lse = rules.apply_lse(row, step, prefix.len(), &hyps[alive[r]].tokens);
                    log_softmax_with(row, lse);
                });
                logits
                    .data
                    .chunks_mut(v)
                    .map(|row| {
                        if step < prefix.len() {
                            (prefix[step] as usize, 0.0)
                        } else if o.temperature > 0.0 {
                            let id = rng.sample(row, o.temperature);
                            (id, row[id])
                        } else {
                            let id = argmax(row);
                            (id, row[id])
                        }
                    })
                    .collect()
            };
            for (r, (id, lp)) in picks.into_iter().enumerate() {
                let h = &mut hyps[alive[r]];
                let id = id as u32;
                h.score += lp;
                if id != eot {
                    h.tokens.push(id);
                }
                let finished = (id == eot && step >= prefix.len()) || step + 1 == max_len;
                if !finished {
                    keep.push(r);
                    input[keep.len() - 1] = id;
                }
            }
            if keep.is_empty() {
                break;
            }
            if keep.len() != alive.len() {
                self.decoder.reorder(&self.backend, state, &keep)?;
                alive = keep.iter().map(|&r| alive[r]).collect();
                input.truncate(keep.len());
            }
        }
        Ok((hyps, no_speech))
    }

    /// CTranslate2's beam search (batch of one): 2·beam candidates per step, finished
    /// hypotheses replaced by the next unfinished candidates, stop after round(beam·patience)
    /// hypotheses.
    #[allow(clippy::too_many_arguments)]
    fn beam(
        &self,
        state: &mut DecoderState<'_, B>,
        start_id: u32,
        prefix: &[u32],
        max_len: usize,
        rules: &LogitRules,
        o: &GenerateOptions,
        no_speech_id: Option<usize>,
    ) -> Result<(Vec<Hyp>, Option<f32>)> {
        let eot = self.special().eot;
        let k_beam = o.beam_size;
        let n_cand = 2 * k_beam;
        let max_candidates = ((k_beam as f32) * o.patience).round().max(1.0) as usize;
        let early_exit = o.length_penalty == 0.0;
        let mut finished: Vec<Hyp> = Vec::new();
        let mut top_beam_finished = false;
        // live beams: their tokens and cumulative scores; one row before the first step
        let mut seqs: Vec<Vec<u32>> = vec![Vec::new()];
        let mut scores: Vec<f32> = vec![0.0];
        let mut input = vec![start_id];
        let mut no_speech = None;
        let mut top: Vec<(f32, usize)> = Vec::with_capacity(n_cand + 1);
        let on_device = self.device_select();
        for step in 0..max_len {
            top.clear();
            // per row: rules, log-softmax and the row's own top-n_cand of (score, flat index);
            // the global top-n_cand lies within their union
            let (v, row_tops) = if on_device {
                let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
                let prob_of = no_speech_id.filter(|_| step == 0).map(|id| id as u32);
                let sel = self.decode_step_select(
                    state,
                    &input,
                    rules,
                    step,
                    prefix.len(),
                    &refs,
                    Some(&scores),
                    n_cand,
                    prob_of,
                )?;
                if let Some(&p) = sel.probs.as_ref().and_then(|p| p.first()) {
                    no_speech = Some(p);
                }
                let v = self.config.vocab_size;
                let tops: Vec<Vec<(f32, usize)>> = (0..refs.len())
                    .map(|r| sel.row(r).map(|(id, s)| (s, r * v + id as usize)).collect())
                    .collect();
                (v, tops)
            } else {
                let mut logits = self.decode_step(state, &input)?; // (rows, V)
                let v = logits.last_dim();
                if step == 0 {
                    if let (Some(id), Some(row)) = (no_speech_id, logits.data.get(..v)) {
                        no_speech = Some(softmax_at(row, id));
                    }
                }
                // threads for several rows
                let tops = per_row(&mut logits.data, v, |r, row| {
                    let lse = rules.apply_lse(row, step, prefix.len(), &seqs[r]);
                    log_softmax_with(row, lse);
                    let base = scores[r];
                    let mut t = Vec::with_capacity(n_cand + 1);
                    for (i, &lp) in row.iter().enumerate() {
                        push_top(&mut t, n_cand, lp + base, r * v + i);
                    }
                    t
                });
                (v, tops)
            };
            // fed in flat order, as one running list over every row would see them: equal
            // scores rank by flat index
            for mut t in row_tops {
                t.sort_by_key(|&(_, f)| f);
                for (sc, f) in t {
                    push_top(&mut top, n_cand, sc, f);
                }
            }
            let mut cand: Vec<(usize, u32, f32)> = top
                .iter()
                .map(|&(s, f)| (f / v, (f % v) as u32, s))
                .collect();
            if step < prefix.len() {
                for (k, c) in cand.iter_mut().enumerate() {
                    *c = (0, prefix[step], if k == 0 { 0.0 } else { -1e10 });
                }
            } else if step == prefix.len() && !prefix.is_empty() {
                for c in cand.iter_mut().skip(1) {
                    if c.1 == eot {
                        *c = (c.0, 0, -1e10);
                    }
                }
            }
            let is_last = step + 1 == max_len;
            let mut secondary = k_beam;
            let mut active = Vec::with_capacity(k_beam);
            for k in 0..k_beam.min(cand.len()) {
                let (origin, id, score) = cand[k];
                let mut next = k;
                if (id == eot && step >= prefix.len()) || is_last {
                    if k == 0 {
                        top_beam_finished = true;
                    }
                    let mut tokens = seqs[origin].clone();
                    if id != eot {
                        tokens.push(id);
                    }
                    finished.push(Hyp { tokens, score });
                    if let Some(j) = (secondary..cand.len()).find(|&j| cand[j].1 != eot) {
                        next = j;
                        secondary = j + 1;
                    }
                }
                active.push(next);
            }
            let done = is_last
                || if early_exit {
                    top_beam_finished && !finished.is_empty()
                } else {
                    finished.len() >= max_candidates
                };
            if done {
                break;
            }
            let origins: Vec<usize> = active.iter().map(|&a| cand[a].0).collect();
            seqs = active
                .iter()
                .map(|&a| {
                    let mut s = seqs[cand[a].0].clone();
                    s.push(cand[a].1);
                    s
                })
                .collect();
            scores = active.iter().map(|&a| cand[a].2).collect();
            input = active.iter().map(|&a| cand[a].1).collect();
            self.decoder.reorder(&self.backend, state, &origins)?;
        }
        Ok((finished, no_speech))
    }

    /// Language probabilities on a window, best first (CTranslate2's `detect_language`: one step
    /// from `<|startoftranscript|>`, softmax over the language tokens).
    pub fn detect_language(&self, cross: &CrossKv<B>) -> Result<Vec<(String, f32)>> {
        let langs = self.tokenizer.languages();
        if !self.tokenizer.is_multilingual() || langs.is_empty() {
            return Err(ModelError::BadInput(
                "language detection needs a multilingual model".into(),
            ));
        }
        let mut state = self.decoder_state(cross, 1)?;
        let hidden = self.decode(&mut state, &[self.special().sot], 1)?;
        let logits = self.last_logits(&hidden, 1)?;
        let sel: Vec<f32> = langs
            .iter()
            .map(|(_, id)| logits.data.get(*id as usize).copied().unwrap_or(DISABLED))
            .collect();
        let lse = log_sum_exp(&sel);
        let mut out: Vec<(String, f32)> = langs
            .iter()
            .zip(&sel)
            .map(|((c, _), &x)| (c.clone(), (x - lse).exp()))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// The seek loop: faster-whisper's `transcribe` / `generate_segments`

/// gzip-style compression ratio of the text (zlib level 6, as Python's `zlib.compress`).
pub fn compression_ratio(text: &str) -> f32 {
    use std::io::Write;
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return 0.0;
    }
    let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
    let compressed = enc
        .write_all(bytes)
        .and_then(|_| enc.finish())
        .map(|v| v.len())
        .unwrap_or(bytes.len());
    bytes.len() as f32 / compressed.max(1) as f32
}

struct WindowResult {
    gen: Generated,
    avg_logprob: f32,
    temperature: f32,
    compression_ratio: f32,
}

/// A segment cut out of one window before its text is known to be kept.
pub(crate) struct RawSegment {
    pub start: f64,
    pub end: f64,
    pub tokens: Vec<u32>,
    pub words: Option<Vec<crate::transcript::Word>>,
}

impl<B: Backend> Whisper<B> {
    /// Transcribe 16 kHz mono samples.
    pub fn transcribe(&self, samples: &[f32], opts: &WhisperOptions) -> Result<Transcript> {
        self.transcribe_with_progress(samples, opts, None)
    }

    /// [`Self::transcribe`], calling `progress(seconds done)` after every window.
    pub fn transcribe_with_progress(
        &self,
        samples: &[f32],
        opts: &WhisperOptions,
        progress: Option<&dyn Fn(f64)>,
    ) -> Result<Transcript> {
        self.transcribe_observed(samples, opts, progress, &mut |_| {})
    }

    /// [`Self::transcribe_with_progress`], also handing every kept segment to `on_segment` as
    /// soon as its window is decoded (streaming responses send it before the file is done).
    pub fn transcribe_observed(
        &self,
        samples: &[f32],
        opts: &WhisperOptions,
        progress: Option<&dyn Fn(f64)>,
        on_segment: &mut dyn FnMut(&Segment),
    ) -> Result<Transcript> {
        self.transcribe_windows(samples, opts, progress, on_segment, &|w| {
            self.encode_host(&w)
        })
    }

    /// The seek loop with the encoder call handed in: `encode` takes one padded mel window
    /// `(n_frames, n_mels)` and returns its encoding `(1, n_audio_ctx, d)`. The batched
    /// transcription (`batch.rs`) runs one of these per input and batches the encoder calls.
    pub(crate) fn transcribe_windows(
        &self,
        samples: &[f32],
        opts: &WhisperOptions,
        progress: Option<&dyn Fn(f64)>,
        on_segment: &mut dyn FnMut(&Segment),
        encode: &dyn Fn(HostTensor) -> Result<B::Tensor>,
    ) -> Result<Transcript> {
        validate(opts)?;
        let duration = samples.len() as f64 / SAMPLE_RATE as f64;
        let n_mels = self.config.n_mels;
        let feats = stapes_audio::features::whisper::log_mel(samples, n_mels, HOP);
        if feats.n_bins != n_mels || feats.data.len() != feats.n_frames * n_mels {
            return Err(ModelError::BadInput(format!(
                "front end returned {} frames × {} bins for a {n_mels}-mel model",
                feats.n_frames, feats.n_bins
            )));
        }
        let window = self.encoder.n_frames;
        let sp = self.special().clone();
        let tok = &self.tokenizer;

        let content_frames = feats.n_frames.saturating_sub(1);
        // The first window is encoded once, for language detection and for decoding.
        // faster-whisper detects on all frames of the first 30 s, the transcription window holds
        // one frame fewer when the audio is shorter than 30 s; stapes uses the transcription
        // window for both (language probabilities move by ~1e-4, the encoder runs once).
        let mut first: Option<CrossKv<B>> = None;
        let (language, language_probability) = match &opts.language {
            // English-only models speak English whatever is asked (as faster-whisper and
            // whisper.cpp do), but a code no Whisper knows is still a mistake worth naming.
            Some(code) if !tok.is_multilingual() => {
                if !super::tokenizer::LANGUAGES.contains(&code.as_str()) {
                    return Err(ModelError::BadOption(format!("unknown language `{code}`")));
                }
                if code != "en" || opts.task == Task::Translate {
                    tracing::warn!(
                        language = %code,
                        "the model is English-only: transcribing in English"
                    );
                }
                ("en".to_string(), 1.0)
            }
            _ if !tok.is_multilingual() => ("en".to_string(), 1.0),
            Some(code) => {
                if tok.language_token(code).is_none() {
                    return Err(ModelError::BadOption(format!("unknown language `{code}`")));
                }
                (code.clone(), 1.0)
            }
            None => {
                let cross =
                    self.window_cross(&feats.data, 0, window.min(content_frames), encode)?;
                let probs = self.detect_language(&cross)?;
                first = Some(cross);
                probs.into_iter().next().unwrap_or(("en".into(), 0.0))
            }
        };

        let mut sot_sequence = vec![sp.sot];
        if tok.is_multilingual() {
            let lang = tok
                .language_token(&language)
                .ok_or_else(|| ModelError::BadOption(format!("unknown language `{language}`")))?;
            sot_sequence.push(lang);
            sot_sequence.push(match opts.task {
                Task::Transcribe => sp.transcribe,
                Task::Translate => sp.translate,
            });
        }
        let suppress = self.suppress_set(&opts.suppress_tokens);
        let max_length = self.decoder.n_ctx();

        let mut seek = 0usize;
        let mut all_tokens: Vec<u32> = Vec::new();
        let mut prompt_reset_since = 0usize;
        if let Some(p) = &opts.initial_prompt {
            all_tokens.extend(tok.encode(&format!(" {}", p.trim()))?);
        }
        let prefix_tokens = match &opts.prefix {
            Some(p) if !p.trim().is_empty() => {
                let mut t = tok.encode(&format!(" {}", p.trim()))?;
                t.truncate((max_length / 2).saturating_sub(1));
                t
            }
            _ => Vec::new(),
        };
        let mut segments: Vec<Segment> = Vec::new();
        let mut last_speech_timestamp = 0.0f64;
        let mut window_index = 0u64;
        while seek < content_frames {
            let time_offset = seek as f64 / 100.0;
            let segment_size = window.min(content_frames - seek);
            let segment_duration = segment_size as f64 / 100.0;
            let cross = match first.take() {
                Some(c) if seek == 0 => c,
                _ => self.window_cross(&feats.data, seek, segment_size, encode)?,
            };

            let previous = &all_tokens[prompt_reset_since.min(all_tokens.len())..];
            let mut prompt = Vec::new();
            if !previous.is_empty() {
                prompt.push(sp.sot_prev);
                let keep = previous.len().min((max_length / 2).saturating_sub(1));
                prompt.extend_from_slice(&previous[previous.len() - keep..]);
            }
            prompt.extend_from_slice(&sot_sequence);
            if opts.without_timestamps {
                prompt.push(sp.no_timestamps);
            }
            if seek == 0 && !prefix_tokens.is_empty() {
                if !opts.without_timestamps {
                    prompt.push(sp.timestamp_begin);
                }
                prompt.extend_from_slice(&prefix_tokens);
            }

            let res = self.generate_with_fallback(
                &cross,
                &prompt,
                opts,
                &suppress,
                max_length,
                window_index,
            )?;
            window_index += 1;

            if let Some(thr) = opts.no_speech_threshold {
                let mut skip = res.gen.no_speech_prob > thr;
                if let Some(lp) = opts.log_prob_threshold {
                    if res.avg_logprob > lp {
                        skip = false;
                    }
                }
                if skip {
                    seek += segment_size;
                    if let Some(cb) = progress {
                        cb((seek.min(content_frames)) as f64 / 100.0);
                    }
                    continue;
                }
            }

            let tokens = &res.gen.tokens;
            let (mut current, new_seek, single_timestamp_ending) = split_by_timestamps(
                tokens,
                sp.timestamp_begin,
                time_offset,
                seek,
                segment_size,
                segment_duration,
            );
            seek = new_seek;

            if opts.word_timestamps {
                last_speech_timestamp = self.add_word_timestamps(
                    &mut current,
                    &cross,
                    &sot_sequence,
                    &language,
                    segment_size,
                    time_offset,
                    opts,
                    last_speech_timestamp,
                )?;
                if !single_timestamp_ending {
                    if let Some(end) = super::timing::segment_end(&current) {
                        if end > time_offset {
                            seek = (end * 100.0).round() as usize;
                        }
                    }
                }
            }

            for s in current {
                let text = tok.decode(&s.tokens);
                if s.start == s.end || text.trim().is_empty() {
                    continue;
                }
                all_tokens.extend_from_slice(&s.tokens);
                segments.push(Segment {
                    id: segments.len(),
                    start: s.start,
                    end: s.end,
                    text,
                    tokens: s.tokens,
                    avg_logprob: res.avg_logprob,
                    no_speech_prob: res.gen.no_speech_prob,
                    compression_ratio: res.compression_ratio,
                    temperature: res.temperature,
                    words: s.words,
                });
                if let Some(seg) = segments.last() {
                    on_segment(seg);
                }
            }
            if !opts.condition_on_previous_text
                || res.temperature > opts.prompt_reset_on_temperature
            {
                prompt_reset_since = all_tokens.len();
            }
            if let Some(cb) = progress {
                cb((seek.min(content_frames)) as f64 / 100.0);
            }
        }
        Ok(Transcript {
            language,
            language_probability,
            duration,
            segments,
        })
    }

    /// Encode a window and compute its cross-attention K/V (the encoder output itself is not
    /// needed afterwards).
    fn window_cross(
        &self,
        data: &[f32],
        start: usize,
        len: usize,
        encode: &dyn Fn(HostTensor) -> Result<B::Tensor>,
    ) -> Result<CrossKv<B>> {
        let enc = encode(self.mel_window(data, start, len)?)?;
        self.cross_kv(&enc)
    }

    /// Mel frames `[start, start+len)` of frames-major `data`, zero-padded to a window
    /// `(n_frames, n_mels)`.
    fn mel_window(&self, data: &[f32], start: usize, len: usize) -> Result<HostTensor> {
        let n_mels = self.config.n_mels;
        let window = self.encoder.n_frames;
        let mut w = vec![0f32; window * n_mels]; // (3000, n_mels)
        let len = len.min(window);
        let src = data
            .get(start * n_mels..(start + len) * n_mels)
            .ok_or_else(|| ModelError::BadInput("mel window outside the features".into()))?;
        w[..src.len()].copy_from_slice(src);
        Ok(HostTensor::new(vec![window, n_mels], w)?)
    }

    /// faster-whisper's `get_suppressed_tokens`: `-1` expands to the model's default set; the
    /// task, start and no-speech controls are always added.
    pub fn suppress_set(&self, requested: &[i64]) -> Vec<u32> {
        let sp = self.special();
        let mut out: Vec<u32> = Vec::new();
        if requested.is_empty() {
            return out;
        }
        for &t in requested {
            if t >= 0 && (t as usize) < self.config.vocab_size {
                out.push(t as u32);
            } else if t == -1 {
                out.extend_from_slice(&self.generation.suppress_tokens);
            }
        }
        out.extend([
            sp.transcribe,
            sp.translate,
            sp.sot,
            sp.sot_prev,
            sp.sot_lm,
            sp.no_speech,
        ]);
        out.sort_unstable();
        out.dedup();
        out
    }

    fn generate_with_fallback(
        &self,
        cross: &CrossKv<B>,
        prompt: &[u32],
        opts: &WhisperOptions,
        suppress: &[u32],
        max_length: usize,
        window_index: u64,
    ) -> Result<WindowResult> {
        let max_length = match opts.max_new_tokens {
            Some(n) => prompt.len() + n,
            None => max_length,
        };
        if max_length > self.decoder.n_ctx() {
            return Err(ModelError::BadInput(format!(
                "prompt ({}) plus max_new_tokens exceeds the {} positions of the decoder",
                prompt.len(),
                self.decoder.n_ctx()
            )));
        }
        let mut all: Vec<WindowResult> = Vec::new();
        let mut below_cr: Vec<usize> = Vec::new();
        let temps = if opts.temperatures.is_empty() {
            vec![0.0]
        } else {
            opts.temperatures.clone()
        };
        for &t in &temps {
            let o = GenerateOptions {
                beam_size: if t > 0.0 { 1 } else { opts.beam_size.max(1) },
                patience: opts.patience,
                length_penalty: opts.length_penalty,
                num_hypotheses: if t > 0.0 { opts.best_of.max(1) } else { 1 },
                temperature: t,
                max_length,
                rules_suppress: suppress.to_vec(),
                suppress_blank: opts.suppress_blank,
                max_initial_timestamp_index: (opts.max_initial_timestamp as f64 / TIME_PRECISION)
                    .round() as u32,
                seed: opts.seed ^ (window_index << 8) ^ (t * 1000.0) as u64,
            };
            let gen = self.generate(cross, prompt, &o)?;
            let n = gen.tokens.len() as f32;
            let cum = gen.score * n.powf(opts.length_penalty);
            let avg_logprob = cum / (n + 1.0);
            let text = self.tokenizer.decode(&gen.tokens);
            let cr = compression_ratio(text.trim());
            let (needs_fallback, passes_cr) =
                fallback_verdict(opts, cr, avg_logprob, gen.no_speech_prob);
            if passes_cr {
                below_cr.push(all.len());
            }
            let r = WindowResult {
                gen,
                avg_logprob,
                temperature: t,
                compression_ratio: cr,
            };
            if !needs_fallback {
                return Ok(r);
            }
            all.push(r);
        }
        // every temperature failed: the best average log-probability, preferring results that
        // passed the compression check; the last temperature is reported (prompt reset rule)
        let pool: Vec<usize> = if below_cr.is_empty() {
            (0..all.len()).collect()
        } else {
            below_cr
        };
        // Python's max keeps the first of equal candidates
        let mut best = *pool
            .first()
            .ok_or_else(|| ModelError::BadInput("no decoding result".into()))?;
        for &i in &pool {
            if all[i].avg_logprob > all[best].avg_logprob {
                best = i;
            }
        }
        let last_t = *temps.last().unwrap_or(&0.0);
        let mut r = all.swap_remove(best);
        r.temperature = last_t;
        Ok(r)
    }
}

/// faster-whisper's verdict on one decoding: `(needs_fallback, passes the compression check)`.
/// Too repetitive (compression ratio above the threshold) or too unlikely (average log-prob
/// below it) falls back to the next temperature, unless the window is silence (no-speech
/// probability above its threshold together with a low log-prob).
pub fn fallback_verdict(
    opts: &WhisperOptions,
    compression_ratio: f32,
    avg_logprob: f32,
    no_speech_prob: f32,
) -> (bool, bool) {
    let mut needs = false;
    let mut passes_cr = false;
    if let Some(thr) = opts.compression_ratio_threshold {
        if compression_ratio > thr {
            needs = true;
        } else {
            passes_cr = true;
        }
    }
    if let Some(lp) = opts.log_prob_threshold {
        if avg_logprob < lp {
            needs = true;
        }
    }
    if let (Some(ns), Some(lp)) = (opts.no_speech_threshold, opts.log_prob_threshold) {
        if no_speech_prob > ns && avg_logprob < lp {
            needs = false;
        }
    }
    (needs, passes_cr)
}

fn validate(o: &WhisperOptions) -> Result<()> {
    if o.beam_size == 0 || o.beam_size > 64 {
        return Err(ModelError::BadInput(format!(
            "beam size must be 1..=64, got {}",
            o.beam_size
        )));
    }
    if o.best_of == 0 || o.best_of > 64 {
        return Err(ModelError::BadInput(format!(
            "best_of must be 1..=64, got {}",
            o.best_of
        )));
    }
    if o.patience.is_nan() || o.patience <= 0.0 {
        return Err(ModelError::BadInput("patience must be > 0".into()));
    }
    if o.temperatures.iter().any(|t| !t.is_finite() || *t < 0.0) {
        return Err(ModelError::BadInput(
            "temperatures must be finite and ≥ 0".into(),
        ));
    }
    if !o.length_penalty.is_finite()
        || !o.max_initial_timestamp.is_finite()
        || o.max_initial_timestamp < 0.0
    {
        return Err(ModelError::BadInput(
            "length_penalty and max_initial_timestamp must be finite".into(),
        ));
    }
    Ok(())
}

/// faster-whisper's `_split_segments_by_timestamps`: cut at consecutive timestamp pairs and
/// return the next seek (in mel frames).
pub(crate) fn split_by_timestamps(
    tokens: &[u32],
    timestamp_begin: u32,
    time_offset: f64,
    seek: usize,
    segment_size: usize,
    segment_duration: f64,
) -> (Vec<RawSegment>, usize, bool) {
    let is_ts = |t: u32| t >= timestamp_begin;
    let n = tokens.len();
    let single_timestamp_ending = n >= 2 && !is_ts(tokens[n - 2]) && is_ts(tokens[n - 1]);
    let consecutive: Vec<usize> = (1..n)
        .filter(|&i| is_ts(tokens[i]) && is_ts(tokens[i - 1]))
        .collect();
    let mut out = Vec::new();
    let mut seek = seek;
    let pos = |t: u32| (t - timestamp_begin) as f64;
    if !consecutive.is_empty() {
        let mut slices = consecutive;
        if single_timestamp_ending {
            slices.push(n);
        }
        let mut last = 0;
        for &cur in &slices {
            let sliced = &tokens[last..cur];
            if let (Some(&a), Some(&b)) = (sliced.first(), sliced.last()) {
                out.push(RawSegment {
                    start: time_offset + pos(a) * TIME_PRECISION,
                    end: time_offset + pos(b) * TIME_PRECISION,
                    tokens: sliced.to_vec(),
                    words: None,
                });
            }
            last = cur;
        }
        if single_timestamp_ending {
            seek += segment_size;
        } else {
            let last_ts = tokens[last - 1];
            seek += (last_ts.saturating_sub(timestamp_begin)) as usize * INPUT_STRIDE;
        }
    } else {
        let mut duration = segment_duration;
        if let Some(&t) = tokens.iter().rev().find(|&&t| is_ts(t)) {
            if t != timestamp_begin {
                duration = pos(t) * TIME_PRECISION;
            }
        }
        out.push(RawSegment {
            start: time_offset,
            end: time_offset + duration,
            tokens: tokens.to_vec(),
            words: None,
        });
        seek += segment_size;
    }
    (out, seek, single_timestamp_ending)
}

#[cfg(test)]
mod host_cost {
    use super::*;

    /// Timing, not a check (run with `--ignored --nocapture`): the host part of one greedy step
    /// on a 51866-wide row (large-v3's vocabulary) as `greedy` runs it: the logit rules in
    /// timestamp mode after a text token (the path that takes a log-sum-exp), `log_softmax`,
    /// `argmax`.
    #[test]
    #[ignore]
    fn host_part_of_a_greedy_step() {
        let v = 51866usize;
        let rules = LogitRules {
            suppress: (0..90u32).map(|i| 1 + i * 500).collect(),
            suppress_begin: vec![220, 50257],
            timestamps: Some(TimestampRules {
                eot: 50257,
                no_timestamps: 50363,
                timestamp_begin: 50365,
                timestamp_end: v as u32 - 1,
                max_initial_timestamp: 50365 + 50,
            }),
        };
        // text tokens outweigh the timestamps (the usual case: no fill, the sum is handed over)
        let base: Vec<f32> = (0..v)
            .map(|i| ((i as f32 * 0.618).fract() - 0.5) * 8.0 - if i >= 50365 { 20.0 } else { 0.0 })
            .collect();
        let seq = [50365u32, 400, 401, 402];
        let reps = 200;
        for reuse in [false, true] {
            let mut row = base.clone();
            let (mut t_rules, mut t_lsm, mut t_arg, mut t_copy) = (0f64, 0f64, 0f64, 0f64);
            let mut sink = 0usize;
            for _ in 0..reps {
                let t = std::time::Instant::now();
                row.copy_from_slice(&base);
                t_copy += t.elapsed().as_secs_f64();
                let t = std::time::Instant::now();
                let lse = rules.apply_lse(&mut row, 4, 0, &seq);
                t_rules += t.elapsed().as_secs_f64();
                let t = std::time::Instant::now();
                if reuse {
                    log_softmax_with(&mut row, lse);
                } else {
                    log_softmax(&mut row);
                }
                t_lsm += t.elapsed().as_secs_f64();
                let t = std::time::Instant::now();
                sink += argmax(&row);
                t_arg += t.elapsed().as_secs_f64();
            }
            let us = |s: f64| s * 1e6 / reps as f64;
            println!(
            "host part per greedy step, V {v}, lse reused {reuse}: rules {:.1} us, log_softmax \
             {:.1} us, argmax {:.1} us (row copy {:.1} us) [{sink}]",
            us(t_rules),
            us(t_lsm),
            us(t_arg),
            us(t_copy)
        );
        }
    }

    /// Per-row top lists merged in flat order equal one running list over every row, ties
    /// included (scores drawn from a few values, so many are equal), on threads (wide rows).
    #[test]
    fn per_row_top_lists_merge_to_the_running_list() {
        let (rows, v, n) = (5usize, 9000usize, 10usize);
        let mut data: Vec<f32> = (0..rows * v)
            .map(|i| ((i as u32).wrapping_mul(2654435761) >> 28) as f32 * 0.25)
            .collect();
        let mut want = Vec::new();
        for (r, row) in data.chunks(v).enumerate() {
            for (i, &x) in row.iter().enumerate() {
                push_top(&mut want, n, x - r as f32 * 0.25, r * v + i);
            }
        }
        let tops = per_row(&mut data, v, |r, row| {
            let mut t = Vec::new();
            for (i, &x) in row.iter().enumerate() {
                push_top(&mut t, n, x - r as f32 * 0.25, r * v + i);
            }
            t
        });
        let mut got = Vec::new();
        for mut t in tops {
            t.sort_by_key(|&(_, f)| f);
            for (s, f) in t {
                push_top(&mut got, n, s, f);
            }
        }
        assert_eq!(got, want);
        assert!(want.windows(2).any(|w| w[0].0 == w[1].0), "no ties tested");
    }

    /// The rules' log-sum-exp handed to `log_softmax` gives the same bits as recomputing it,
    /// and it is only handed over where the row did not change after it was taken.
    #[test]
    fn reused_lse_gives_the_same_log_probs() {
        let v = 2000usize;
        let rules = LogitRules {
            suppress: vec![3, 7],
            suppress_begin: vec![],
            timestamps: Some(TimestampRules {
                eot: 1500,
                no_timestamps: 1502,
                timestamp_begin: 1504,
                timestamp_end: v as u32 - 1,
                max_initial_timestamp: 1554,
            }),
        };
        let mut handed = 0;
        for (seed, boost) in [(1u32, -20.0f32), (2, 6.0), (3, -12.0)] {
            let base: Vec<f32> = (0..v)
                .map(|i| (((i as u32 * 2654435761u32) ^ seed) % 1000) as f32 / 100.0)
                .map(|x| x - 5.0)
                .enumerate()
                .map(|(i, x)| if i >= 1504 { x + boost } else { x })
                .collect();
            for seq in [vec![1504u32, 10, 11], vec![1504, 10, 1600]] {
                let step = seq.len();
                let (mut a, mut b) = (base.clone(), base.clone());
                rules.apply(&mut a, step, 0, &seq);
                log_softmax(&mut a);
                let lse = rules.apply_lse(&mut b, step, 0, &seq);
                handed += lse.is_some() as usize;
                log_softmax_with(&mut b, lse);
                let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "seed {seed} seq {seq:?}: log-probs differ");
            }
        }
        assert!(handed > 0, "no case handed its log-sum-exp over");
        assert!(
            handed < 6,
            "every case handed it over (the fill path never ran)"
        );
    }
}

/// The logit rules as a `Backend::select_tokens` request ([`LogitRules::disabled_ids`],
/// [`LogitRules::row_select`], [`LogitRules::mass_rule`]) through the host composed default
/// give what `apply_lse`, `log_softmax` and `argmax` / `push_top` give, in every rule branch.
#[cfg(test)]
mod select_request {
    use super::*;
    use stapes_core::select::select_host;

    const V: usize = 2000;

    fn rules() -> LogitRules {
        LogitRules {
            suppress: vec![3, 7, 1501],
            suppress_begin: vec![220, 1500],
            timestamps: Some(TimestampRules {
                eot: 1500,
                no_timestamps: 1502,
                timestamp_begin: 1504,
                timestamp_end: V as u32 - 1,
                max_initial_timestamp: 1554,
            }),
        }
    }

    /// Values on a 1/16 grid (ties common); `boost` raises the timestamps.
    fn row(seed: u32, boost: f32) -> Vec<f32> {
        (0..V)
            .map(|i| ((((i as u32) ^ seed).wrapping_mul(2654435761) >> 20) % 160) as f32 / 16.0)
            .enumerate()
            .map(|(i, x)| if i >= 1504 { x - 5.0 + boost } else { x - 5.0 })
            .collect()
    }

    /// (step, sample_begin, seq) of every branch of `apply_lse`.
    fn branches() -> Vec<(&'static str, usize, usize, Vec<u32>)> {
        vec![
            ("first step", 0, 0, vec![]),
            ("first sampled step after a prefix", 2, 2, vec![40, 41]),
            ("closed pair", 3, 0, vec![1504, 1510, 1520]),
            ("open timestamp", 2, 0, vec![10, 1530]),
            ("open timestamp, first after the prefix", 1, 0, vec![1530]),
            ("text after a timestamp", 3, 0, vec![1504, 10, 11]),
            ("text, no timestamp yet", 2, 1, vec![1504, 10]),
        ]
    }

    #[test]
    fn request_equals_logit_rules_in_every_branch() {
        let mut fired = 0;
        let mut checked = 0;
        for rules in [
            rules(),
            LogitRules {
                timestamps: None,
                ..rules()
            },
        ] {
            for (name, step, sb, seq) in branches() {
                for (seed, boost) in [(1u32, -20.0f32), (2, 6.0), (3, 0.0)] {
                    let x = row(seed, boost);
                    let mut want = x.clone();
                    let lse = rules.apply_lse(&mut want, step, sb, &seq);
                    log_softmax_with(&mut want, lse);
                    let disabled = rules.disabled_ids(step, sb);
                    let mut rs = rules.row_select(step, sb, &seq, V);
                    rs.offset = -0.75;
                    let rows = [rs];
                    let logits = HostTensor::new(vec![1, V], x.clone()).expect("row");
                    for k in [1usize, 10] {
                        let req = SelectRequest {
                            disabled: &disabled,
                            rows: &rows,
                            mass: rules.mass_rule(V),
                            k,
                            prob_of: Some(1503),
                        };
                        let got = select_host(&logits, &req).expect("select");
                        let mut top = Vec::new();
                        for (i, &lp) in want.iter().enumerate() {
                            push_top(&mut top, k, lp - 0.75, i);
                        }
                        let top: Vec<(u32, f32)> =
                            top.into_iter().map(|(s, i)| (i as u32, s)).collect();
                        let got_row: Vec<(u32, f32)> = got.row(0).collect();
                        assert_eq!(got_row, top, "{name}, seed {seed}, k {k}");
                        let am = argmax(&want);
                        assert_eq!(got_row[0].0 as usize, am, "{name}: argmax");
                        let p = got.probs.as_ref().expect("probability")[0];
                        assert_eq!(p.to_bits(), softmax_at(&x, 1503).to_bits(), "{name}");
                        let plain = select_host(&logits, &SelectRequest { mass: None, ..req })
                            .expect("select without the mass rule");
                        fired += usize::from(plain.ids != got.ids);
                        checked += 1;
                    }
                }
            }
        }
        assert!(fired > 0, "the mass rule never fired");
        assert!(fired < checked, "the mass rule always fired");
    }
}
