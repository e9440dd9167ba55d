//! Heads on the encoder and their greedy decoders: CTC (collapse repeats, drop blank) and the
//! transducers — RNNT (one frame per blank) and TDT (the joint also predicts how many frames
//! to skip) — with an LSTM prediction network and a joint network, decoded by label looping.

use super::config::{HeadConfig, ParakeetConfig, TransducerConfig};
use super::encoder::{Linear, Tensors};
use super::label_loop::{DeviceLoop, LoopSlots};
use super::weights::{lstm, CTC_HEAD, DEC_PROJ, EMBEDDING, ENC_PROJ, JOINT_HEAD};
use crate::{ModelError, Result};
use stapes_core::transducer::{argmax, margin};
use stapes_core::{Backend, DeviceTensor, HostTensor, Lane};

/// One decoder step. For CTC a step is an encoder frame; for transducers one joint evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Argmax token (blank included).
    pub token: u32,
    /// Encoder frame the step looked at.
    pub frame: usize,
    /// Frames the step advanced (CTC and RNNT: 0 or 1; TDT: the predicted duration, a blank's
    /// 0 raised to 1).
    pub duration: usize,
}

/// What a greedy pass produced. Equality compares the decisions (steps, tokens, frames), not
/// the diagnostic margins.
#[derive(Clone, Debug, Default)]
pub struct Decoded {
    /// Every step, blanks included (transducers: in emission order).
    pub steps: Vec<Step>,
    /// Emitted ids (blanks dropped; CTC repeats collapsed), each with its frame and duration.
    pub tokens: Vec<Step>,
    /// Encoder frames decoded.
    pub frames: usize,
    /// Transducers: per step, the smallest top-1 − top-2 logit margin of its decisions (the
    /// token, and for TDT the duration), to tell near-ties from errors when lanes differ.
    /// Empty for CTC (its argmax runs on the device).
    pub margins: Vec<f32>,
}

impl PartialEq for Decoded {
    fn eq(&self, o: &Self) -> bool {
        self.steps == o.steps && self.tokens == o.tokens && self.frames == o.frames
    }
}

impl Decoded {
    pub fn ids(&self) -> Vec<u32> {
        self.tokens.iter().map(|s| s.token).collect()
    }
}

pub(crate) enum Head<B: Backend> {
    Ctc { proj: Linear<B>, blank: u32 },
    Transducer(Transducer<B>),
}

pub(crate) struct Transducer<B: Backend> {
    pub(super) cfg: TransducerConfig,
    pub(super) vocab: usize,
    pub(super) enc_proj: Linear<B>,
    /// `(V, H)`
    pub(super) embedding: B::Tensor,
    /// Per layer: `w_ih (4H, H)`, `w_hh (4H, H)`, `b_ih + b_hh (4H)`.
    pub(super) lstm: Vec<(B::Weight, B::Weight, B::Tensor)>,
    pub(super) dec_proj: Linear<B>,
    pub(super) joint: Linear<B>,
    /// When the label loop runs on the device ([`super::label_loop`]).
    pub(super) device_loop: DeviceLoop,
    /// The device loop's buffers per (batch, frame bucket); its chains read them by address.
    pub(super) slots: LoopSlots<B>,
}

impl<B: Backend> Head<B> {
    pub fn load(b: &B, t: &Tensors<'_>, c: &ParakeetConfig, lane: Lane) -> Result<Self> {
        Self::load_head(b, t, &c.head, c.vocab_size, lane)
    }

    /// A head of `head`'s kind over `vocab_size` classes (blank included), its tensors under
    /// this family's names (another family maps its own names onto these).
    pub fn load_head(
        b: &B,
        t: &Tensors<'_>,
        head: &HeadConfig,
        vocab_size: usize,
        lane: Lane,
    ) -> Result<Self> {
        Ok(match head {
            HeadConfig::Ctc { blank } => Head::Ctc {
                proj: Linear::load(b, t, CTC_HEAD, lane)?,
                blank: *blank,
            },
            HeadConfig::Transducer(tc) => {
                let mut layers = Vec::with_capacity(tc.num_decoder_layers);
                for l in 0..tc.num_decoder_layers {
                    let (bi, bh) = (t.get(&lstm("bias_ih", l))?, t.get(&lstm("bias_hh", l))?);
                    let sum: Vec<f32> = bi.data.iter().zip(&bh.data).map(|(x, y)| x + y).collect();
                    layers.push((
                        t.weight(b, &lstm("weight_ih", l), lane)?,
                        t.weight(b, &lstm("weight_hh", l), lane)?,
                        b.upload(&HostTensor::new(vec![sum.len()], sum)?)?,
                    ));
                }
                Head::Transducer(Transducer {
                    cfg: tc.clone(),
                    vocab: vocab_size,
                    enc_proj: Linear::load(b, t, ENC_PROJ, lane)?,
                    embedding: t.tensor(b, EMBEDDING)?,
                    lstm: layers,
                    dec_proj: Linear::load(b, t, DEC_PROJ, lane)?,
                    joint: Linear::load(b, t, JOINT_HEAD, lane)?,
                    device_loop: DeviceLoop::default(),
                    slots: LoopSlots::default(),
                })
            }
        })
    }

    /// CTC logits `(B, T, V)` of an encoder output; `None` for transducers.
    pub fn ctc_logits(&self, b: &B, enc: &B::Tensor) -> Result<Option<B::Tensor>> {
        match self {
            Head::Ctc { proj, .. } => Ok(Some(proj.forward(b, enc)?)),
            Head::Transducer(_) => Ok(None),
        }
    }

    /// Greedy decode of one encoded sequence `enc (1, T, d)`.
    pub fn greedy(&self, b: &B, enc: &B::Tensor) -> Result<Decoded> {
        let s = enc.shape();
        if s.len() != 3 || s[0] != 1 {
            return Err(ModelError::BadInput(format!(
                "greedy decoding takes one sequence (1, T, d), got {s:?}"
            )));
        }
        match self {
            Head::Ctc { proj, blank } => {
                let ids = b.argmax(&proj.forward(b, enc)?)?;
                Ok(ctc_collapse(&ids, *blank))
            }
            Head::Transducer(td) if td.device_loop.on(b) => td
                .greedy_device(b, enc, &[s[1]])?
                .pop()
                .ok_or_else(|| ModelError::BadInput("the label loop decoded nothing".into())),
            Head::Transducer(td) => td.greedy(b, enc),
        }
    }

    /// Greedy decode of every sequence of a padded batch `enc (B, T, d)`, sequence `i` cut to
    /// its `lens[i]` frames. Transducers whose label loop runs on the device decode the batch
    /// together (one step chain for all clips); otherwise one sequence at a time.
    pub fn greedy_batch(&self, b: &B, enc: &B::Tensor, lens: &[usize]) -> Result<Vec<Decoded>> {
        let s = enc.shape();
        if s.len() != 3 || s[0] != lens.len() || lens.iter().any(|&n| n > s[1]) {
            return Err(ModelError::BadInput(format!(
                "greedy batch: encoder output {s:?} with lengths {lens:?}"
            )));
        }
        match self {
            Head::Transducer(td) if td.device_loop.on(b) => td.greedy_device(b, enc, lens),
            _ => lens
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let one = b.slice(enc, 0, i, 1)?;
                    self.greedy(b, &b.slice(&one, 1, 0, n)?)
                })
                .collect(),
        }
    }

    /// Label-loop steps per chain call on the device (records read back once per call).
    pub fn set_device_loop_steps(&self, k: usize) {
        if let Head::Transducer(td) = self {
            td.device_loop.set_steps(k);
        }
    }

    /// Where transducer label loops run: `None` = on the device where the home captures chains
    /// (the default), `Some(on)` = forced (CTC heads ignore it).
    pub fn set_device_loop(&self, on: Option<bool>) {
        if let Head::Transducer(td) = self {
            td.device_loop.set(on);
        }
    }
}

/// Frame-wise argmax ids → emitted tokens: repeats collapsed, blanks dropped.
pub fn ctc_collapse(frame_ids: &[u32], blank: u32) -> Decoded {
    let steps: Vec<Step> = frame_ids
        .iter()
        .enumerate()
        .map(|(frame, &token)| Step {
            token,
            frame,
            duration: 1,
        })
        .collect();
    let mut tokens: Vec<Step> = Vec::new();
    let mut prev = None;
    for s in &steps {
        if Some(s.token) == prev {
            // A repeat extends the token it continues.
            if let Some(last) = tokens.last_mut().filter(|t| t.token == s.token) {
                last.duration += 1;
            }
        } else if s.token != blank {
            tokens.push(*s);
        }
        prev = Some(s.token);
    }
    Decoded {
        frames: steps.len(),
        steps,
        tokens,
        margins: Vec::new(),
    }
}

/// The prediction network's state: per layer `h, c (1, H)`, and its projected output `(1, H)`.
struct PredState<B: Backend> {
    h: Vec<B::Tensor>,
    c: Vec<B::Tensor>,
    out: B::Tensor,
}

impl<B: Backend> Transducer<B> {
    /// Feeds `token` to the prediction network from `state` (zeros when `None`).
    fn predict(&self, b: &B, token: u32, state: Option<&PredState<B>>) -> Result<PredState<B>> {
        let hid = self.cfg.decoder_hidden_size;
        let x0 = b.gather_rows(&self.embedding, &[token])?; // (1, H)
        let zeros;
        let (hs, cs): (Vec<&B::Tensor>, Vec<&B::Tensor>) = match state {
            Some(s) => (s.h.iter().collect(), s.c.iter().collect()),
            None => {
                zeros = b.upload(&HostTensor::zeros(vec![1, hid]))?;
                (vec![&zeros; self.lstm.len()], vec![&zeros; self.lstm.len()])
            }
        };
        let (mut h2, mut c2): (Vec<B::Tensor>, Vec<B::Tensor>) = (Vec::new(), Vec::new());
        for (l, (w_ih, w_hh, bias)) in self.lstm.iter().enumerate() {
            let input = if l == 0 { &x0 } else { &h2[l - 1] };
            let (h, c) = b.lstm_cell(input, hs[l], cs[l], w_ih, w_hh, Some(bias))?;
            h2.push(h);
            c2.push(c);
        }
        let out = self.dec_proj.forward(b, h2.last().unwrap_or(&x0))?;
        Ok(PredState { h: h2, c: c2, out })
    }

    /// Greedy label looping over `enc (1, T, d)` as transformers' `generate` does it: the
    /// prediction network advances only on non-blank tokens; RNNT moves one frame on blank (or
    /// after `max_symbols_per_step` tokens on one frame); TDT moves by the predicted duration
    /// (a blank's 0 counts as 1). A TDT run of `max_symbols_per_step` zero-duration tokens on one
    /// frame also forces a one-frame move, as NeMo does (transformers has no such guard).
    pub(super) fn greedy(&self, b: &B, enc: &B::Tensor) -> Result<Decoded> {
        let t_len = enc.shape()[1];
        let proj = self.enc_proj.forward(b, enc)?; // (1, T, H)
        let hid = self.cfg.decoder_hidden_size;
        let blank = self.cfg.blank as usize;
        let tdt = !self.cfg.durations.is_empty();
        let max_sym = self.cfg.max_symbols_per_step;
        let mut state = self.predict(b, self.cfg.start_token, None)?;
        let mut out = Decoded {
            frames: t_len,
            ..Default::default()
        };
        let (mut t, mut at_frame) = (0usize, 0usize);
        // transformers bounds the loop by max_symbols_per_step × T tokens, start token included.
        let max_steps = (max_sym * t_len).saturating_sub(1);
        while t < t_len && out.steps.len() < max_steps {
            let e = b.reshape(&b.slice(&proj, 1, t, 1)?, &[1, hid])?;
            let j = b.activation(&b.add(&e, &state.out)?, self.cfg.joint_activation)?;
            let logits = b.download(&self.joint.forward(b, &j)?)?;
            let token = argmax(&logits.data[..self.vocab]);
            let mut m = margin(&logits.data[..self.vocab]);
            if tdt {
                m = m.min(margin(&logits.data[self.vocab..]));
            }
            out.margins.push(m);
            let duration = if tdt {
                let d = self.cfg.durations[argmax(&logits.data[self.vocab..])];
                let d = if token == blank && d == 0 { 1 } else { d };
                at_frame = if d == 0 { at_frame + 1 } else { 0 };
                if at_frame >= max_sym {
                    at_frame = 0;
                    1
                } else {
                    d
                }
            } else if token == blank {
                at_frame = 0;
                1
            } else {
                at_frame += 1;
                if at_frame >= max_sym {
                    at_frame = 0;
                    1
                } else {
                    0
                }
            };
            let step = Step {
                token: token as u32,
                frame: t,
                duration,
            };
            out.steps.push(step);
            if token != blank {
                out.tokens.push(step);
                state = self.predict(b, token as u32, Some(&state))?;
            }
            t += duration;
        }
        Ok(out)
    }
}
