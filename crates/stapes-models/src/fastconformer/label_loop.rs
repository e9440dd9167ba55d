//! Greedy RNNT/TDT label looping with every clip's state on the device.
//!
//! The host loop ([`Transducer::greedy`]) downloads the joint's logits and decides on the host at
//! every step. Here each clip's frame index, step count and last label live in a state tensor
//! ([`stapes_core::transducer`]), its prediction-network state (LSTM `h`, `c` per layer and the
//! projected output) in per-batch device buffers, and one step of every clip of a batch is:
//! gather each clip's encoder frame, joint, decide and update the state on the device
//! (`Backend::transducer_advance`), run the prediction network on every clip's new label and
//! keep its new state only where a label was emitted. [`STEPS_PER_CALL`] steps (by default)
//! form one
//! [`Backend::chain`] per (batch, frame bucket), which a GPU home captures once and replays; the
//! host reads back only the steps' records (token, frame, duration, margin) once per call.
//! Decisions follow the same rule as the host loop (`TransducerRule::advance`).

use super::decoder::{Decoded, Step, Transducer};
use crate::{ModelError, Result};
use stapes_core::transducer::{record, TransducerRule, RECORD_FIELDS};
use stapes_core::{Backend, DeviceTensor, HostTensor};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Steps per chain call: the host synchronizes and reads the records once per call; a clip
/// that finishes mid-call idles for the rest of it.
pub const STEPS_PER_CALL: usize = 8;

/// The loop's encoder-frame buffer is this many frames longer than needed at most: few buffer
/// shapes, so few captured graphs.
const FRAME_BUCKET: usize = 128;

/// `STAPES_PARAKEET_BATCH_EXACT=0`: the former batch forms (one encoder-projection GEMM for the
/// batch; the home's `linear` in the loop), whose rounding of a clip may depend on the batch
/// size; for before/after comparisons.
fn batch_exact() -> bool {
    !std::env::var("STAPES_PARAKEET_BATCH_EXACT").is_ok_and(|v| v.trim() == "0")
}

/// Whether the label loop runs on the device: 0 = where the home captures chains (unless
/// `STAPES_PARAKEET_DEVICE_LOOP=0` was set when the model loaded: the host loop, for
/// before/after comparisons), 1 = always, 2 = never. Also the loop's id for chain keys.
pub(crate) struct DeviceLoop {
    mode: AtomicU8,
    env_off: bool,
    /// Steps per chain call.
    steps: AtomicUsize,
    id: u64,
}

impl Default for DeviceLoop {
    fn default() -> Self {
        Self {
            mode: AtomicU8::new(0),
            steps: AtomicUsize::new(STEPS_PER_CALL),
            env_off: std::env::var("STAPES_PARAKEET_DEVICE_LOOP").is_ok_and(|v| v.trim() == "0"),
            id: crate::next_chain_id(),
        }
    }
}

impl DeviceLoop {
    pub fn set(&self, on: Option<bool>) {
        let v = match on {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
        self.mode.store(v, Ordering::Relaxed);
    }

    /// Steps per chain call (at least 1).
    pub fn set_steps(&self, k: usize) {
        self.steps.store(k.max(1), Ordering::Relaxed);
    }

    pub fn on<B: Backend>(&self, b: &B) -> bool {
        match self.mode.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => !self.env_off && b.captures_chains(),
        }
    }
}

/// One batch shape's device buffers. A captured chain reads and writes them by address, so they
/// outlive it and are refreshed in place before each decode.
pub(crate) struct LoopSlot<B: Backend> {
    /// `(B, T_cap, J)` encoder frames through the joint's encoder projection.
    proj: B::Tensor,
    /// `(1, B, STATE_FIELDS)`
    state: B::Tensor,
    /// `(B, steps per call, RECORD_FIELDS)`
    log: B::Tensor,
    /// Per LSTM layer `(B, 1, H)`.
    h: Vec<B::Tensor>,
    c: Vec<B::Tensor>,
    /// `(B, 1, J)` the prediction network's projected output.
    out: B::Tensor,
}

/// Per LSTM layer `h` and `c`, then the projected output.
type StartState<T> = (Vec<T>, Vec<T>, T);

pub(crate) type LoopSlots<B> = Mutex<BTreeMap<String, LoopSlot<B>>>;

impl<B: Backend> Transducer<B> {
    fn rule(&self) -> TransducerRule {
        TransducerRule {
            vocab: self.vocab,
            blank: self.cfg.blank,
            durations: self.cfg.durations.iter().map(|&d| d as u32).collect(),
            max_symbols: self.cfg.max_symbols_per_step,
        }
    }

    /// The prediction network fed `start_token` from a zero state, for `batch` clips: per layer
    /// `h`, `c (batch, 1, H)` and the projected output `(batch, 1, J)`. Every clip starts alike,
    /// so one row is computed (as a clip alone computes it) and repeated.
    fn start_state(&self, b: &B, batch: usize) -> Result<StartState<B::Tensor>> {
        let hid = self.cfg.decoder_hidden_size;
        let x = b.gather_rows(&self.embedding, &[self.cfg.start_token])?;
        let e = *x.shape().last().unwrap_or(&0);
        let x = b.reshape(&x, &[1, 1, e])?;
        let zeros = b.upload(&HostTensor::zeros(vec![1, 1, hid]))?;
        let (mut hs, mut cs): (Vec<B::Tensor>, Vec<B::Tensor>) = (Vec::new(), Vec::new());
        for (l, (w_ih, w_hh, bias)) in self.lstm.iter().enumerate() {
            let input = if l == 0 { &x } else { &hs[l - 1] };
            let (h, c) = b.lstm_cell(input, &zeros, &zeros, w_ih, w_hh, Some(bias))?;
            hs.push(h);
            cs.push(c);
        }
        let out = self.dec_proj.forward(b, hs.last().unwrap_or(&x))?;
        let every = vec![0; batch];
        let rep = |t: &B::Tensor| b.gather_batch(t, &every);
        Ok((
            hs.iter().map(rep).collect::<std::result::Result<_, _>>()?,
            cs.iter().map(rep).collect::<std::result::Result<_, _>>()?,
            rep(&out)?,
        ))
    }

    /// The joint's encoder projection of every clip over its own frames alone, padded to
    /// `enc`'s `T` (padding rows are never read): `(B, T, J)`. One GEMM per clip rather than one
    /// for the batch, because a GEMM's rounding of a row may depend on how many rows it has
    /// (library algorithm choice), and a clip must decode in a batch as it does alone.
    fn project_clips(&self, b: &B, enc: &B::Tensor, lens: &[usize]) -> Result<B::Tensor> {
        let t = enc.shape()[1];
        if (lens.len() == 1 && lens[0] == t) || !batch_exact() {
            return self.enc_proj.forward(b, enc);
        }
        let (j, _) = b.weight_shape(&self.enc_proj.w);
        let zeros = b.upload(&HostTensor::zeros(vec![1, t, j]))?;
        let mut rows = Vec::with_capacity(lens.len());
        for (i, &n) in lens.iter().enumerate() {
            let mut parts = Vec::with_capacity(2);
            if n > 0 {
                let one = b.slice(enc, 0, i, 1)?;
                parts.push(self.enc_proj.forward(b, &b.slice(&one, 1, 0, n)?)?);
            }
            if n < t {
                parts.push(b.slice(&zeros, 1, 0, t - n)?);
            }
            let row = if parts.len() == 1 {
                parts.remove(0)
            } else {
                b.concat(&parts.iter().collect::<Vec<_>>(), 1)?
            };
            rows.push(row);
        }
        Ok(b.concat(&rows.iter().collect::<Vec<_>>(), 0)?)
    }

    /// Greedy label looping of every sequence of `enc (B, T, d)` (sequence `i` cut to `lens[i]`
    /// frames) with the loop on the device; the same decisions as [`Transducer::greedy`] of each
    /// sequence alone: the encoder projection runs per clip, the joint and prediction network
    /// through [`Backend::transducer_linear`], so a clip's values do not depend on the batch.
    pub(super) fn greedy_device(
        &self,
        b: &B,
        enc: &B::Tensor,
        lens: &[usize],
    ) -> Result<Vec<Decoded>> {
        let s = enc.shape().to_vec();
        if s.len() != 3
            || s[0] != lens.len()
            || s[0] == 0
            || s[1] == 0
            || lens.iter().any(|&n| n > s[1])
        {
            return Err(ModelError::BadInput(format!(
                "label loop: encoder output {s:?} with lengths {lens:?}"
            )));
        }
        let rule = self.rule();
        if rule.check().is_err() {
            // a rule the device kernels do not take (more duration classes than they hold)
            return lens
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let one = b.slice(enc, 0, i, 1)?;
                    self.greedy(b, &b.slice(&one, 1, 0, n)?)
                })
                .collect();
        }
        let (bs, t) = (s[0], s[1]);
        let proj = self.project_clips(b, enc, lens)?; // (B, T, J)
        let j = *proj.shape().last().unwrap_or(&0);
        let hid = self.cfg.decoder_hidden_size;
        let cap = t.div_ceil(FRAME_BUCKET) * FRAME_BUCKET;
        let k = self.device_loop.steps.load(Ordering::Relaxed).max(1);
        // the two forms capture different chains
        let key = format!(
            "parakeet-label-loop/m{}/b{bs}/t{cap}/k{k}/x{}",
            self.device_loop.id,
            batch_exact() as u8
        );
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = match slots.entry(key.clone()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let zeros = |shape: Vec<usize>| b.upload(&HostTensor::zeros(shape));
                let layers = self.lstm.len();
                e.insert(LoopSlot {
                    proj: zeros(vec![bs, cap, j])?,
                    state: zeros(vec![1, bs, stapes_core::transducer::STATE_FIELDS])?,
                    log: zeros(vec![bs, k, RECORD_FIELDS])?,
                    h: (0..layers)
                        .map(|_| zeros(vec![bs, 1, hid]))
                        .collect::<std::result::Result<_, _>>()?,
                    c: (0..layers)
                        .map(|_| zeros(vec![bs, 1, hid]))
                        .collect::<std::result::Result<_, _>>()?,
                    out: zeros(vec![bs, 1, j])?,
                })
            }
        };
        // Rows past T keep an earlier call's values: no clip's frame index reaches them.
        b.write_rows(&mut slot.proj, &proj, 0)?;
        b.write_rows(&mut slot.state, &b.upload(&rule.initial_state(lens)?)?, 0)?;
        let (h0, c0, out0) = self.start_state(b, bs)?;
        for (dst, src) in slot.h.iter_mut().zip(&h0).chain(slot.c.iter_mut().zip(&c0)) {
            b.write_rows(dst, src, 0)?;
        }
        b.write_rows(&mut slot.out, &out0, 0)?;

        let mut decoded: Vec<Decoded> = lens
            .iter()
            .map(|&n| Decoded {
                frames: n,
                ..Default::default()
            })
            .collect();
        let mut done: Vec<bool> = lens
            .iter()
            .map(|&n| (rule.max_symbols * n).saturating_sub(1) == 0 || n == 0)
            .collect();
        let budget = lens
            .iter()
            .map(|&n| rule.max_symbols * n)
            .max()
            .unwrap_or(0);
        let act = self.cfg.joint_activation;
        let blank = self.cfg.blank;
        let LoopSlot {
            proj: sproj,
            state,
            log,
            h,
            c,
            out,
        } = slot;
        for _ in 0..budget.div_ceil(k) + 1 {
            if done.iter().all(|&d| d) {
                break;
            }
            let records = crate::chain_one(b, &key, "parakeet label loop", &mut |b| {
                for i in 0..k {
                    let x = b.transducer_joint_input(sproj, state, out, act)?;
                    // x (B, 1, J) → (B, 1, V + durations), each row as the clip alone gets it
                    let logits = b.transducer_linear(&x, &self.joint.w, self.joint.b.as_ref())?;
                    b.transducer_advance(state, &logits, &rule, log, i)?;
                    // (B, 1, H): each clip's new label into the prediction network
                    let x = b.transducer_embed(&self.embedding, state)?;
                    // The layers advance in place, and only where a label was emitted. A layer
                    // above reads its input from the kept state: the new values where the clip
                    // emitted, stale ones (whose results are dropped) elsewhere.
                    for (l, (w_ih, w_hh, bias)) in self.lstm.iter().enumerate() {
                        let (below, here) = h.split_at_mut(l);
                        let input = below.last().unwrap_or(&x);
                        b.transducer_lstm(
                            input,
                            &mut here[0],
                            &mut c[l],
                            w_ih,
                            w_hh,
                            Some(bias),
                            state,
                        )?;
                    }
                    let o = b.transducer_linear(
                        h.last().unwrap_or(&x),
                        &self.dec_proj.w,
                        self.dec_proj.b.as_ref(),
                    )?;
                    b.transducer_keep(out, &o, state)?;
                }
                Ok(b.reshape(log, &[bs, k, RECORD_FIELDS])?)
            })?;
            // the next call overwrites the records
            let r = b.download(&records)?;
            for (i, d) in decoded.iter_mut().enumerate() {
                for rec in
                    r.data[i * k * RECORD_FIELDS..(i + 1) * k * RECORD_FIELDS].chunks(RECORD_FIELDS)
                {
                    if rec[record::VALID] != 0.0 {
                        let step = Step {
                            token: rec[record::TOKEN] as u32,
                            frame: rec[record::FRAME] as usize,
                            duration: rec[record::DURATION] as usize,
                        };
                        d.steps.push(step);
                        if step.token != blank {
                            d.tokens.push(step);
                        }
                        d.margins.push(rec[record::MARGIN]);
                    }
                    if rec[record::DONE] != 0.0 {
                        done[i] = true;
                    }
                }
            }
        }
        if let Some(i) = done.iter().position(|&d| !d) {
            return Err(ModelError::BadInput(format!(
                "label loop: clip {i} of {bs} not done within its step budget"
            )));
        }
        Ok(decoded)
    }
}
