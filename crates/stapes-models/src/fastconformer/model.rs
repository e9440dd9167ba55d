//! `Parakeet<B>`: a FastConformer with its head on a backend, and transcription from samples.

use super::config::ParakeetConfig;
use super::decoder::{ctc_collapse, Decoded, Head};
use super::encoder::{Chunking, Encoder, Linear, Prepared, Tensors};
use super::weights::{load, ParakeetCheckpoint};
use crate::transcript::{batch_transcripts, segment_tokens, Segment, TimedToken, Transcript};
use crate::{ModelError, Result};
use stapes_audio::features::nemo::{log_mel, NemoConfig};
use stapes_core::{Backend, DeviceTensor, HostTensor, Lane};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::sync::Mutex;

/// Audio rate every Parakeet front end expects.
pub const SAMPLE_RATE: u32 = 16_000;

/// Inputs up to this many feature frames (30 s) run as one chain per shape bucket (captured as
/// a graph on the CUDA home); longer ones run eagerly, their buffers freed after the call.
pub const CHAIN_MAX_FRAMES: usize = 3000;

/// One encoder chain's storage: a captured graph reads these by address, so they outlive it
/// and are refreshed in place before each call.
pub(crate) struct ChainSlot<B: Backend> {
    /// `(B, T_bucket, n_mels)`
    input: B::Tensor,
    prep: Prepared<B>,
    /// Feature frames per sequence that `prep`'s masks hold (`None`: unmasked), so a call with
    /// the same lengths as the last one rewrites nothing.
    lengths: Option<Vec<usize>>,
}

/// The FastConformer encoder run as one chain per shape bucket (see
/// [`Parakeet::encode_padded`]); Parakeet and Canary share it.
pub(crate) struct ChainedEncoder<'a, B: Backend> {
    pub encoder: &'a Encoder<B>,
    pub chains: &'a Mutex<BTreeMap<String, ChainSlot<B>>>,
    pub bucket: usize,
    pub lane: Lane,
    /// Names the chain keys ("parakeet", "canary").
    pub name: &'static str,
    /// Names the chain in errors ("parakeet encoder").
    pub label: &'static str,
}

impl<B: Backend> ChainedEncoder<'_, B> {
    pub(crate) fn encode_padded(
        &self,
        b: &B,
        features: &B::Tensor,
        lengths: Option<&[usize]>,
    ) -> Result<(B::Tensor, Vec<usize>)> {
        let s = features.shape().to_vec();
        let mels = self.encoder.cfg.num_mel_bins;
        if s.len() != 3 || s[2] != mels || s[0] == 0 {
            return Err(ModelError::BadInput(format!(
                "encoder input must be (B, T, {mels}), got {s:?}"
            )));
        }
        let (batch, t) = (s[0], s[1]);
        let enc_cfg = &self.encoder.cfg;
        if let Some(l) = lengths {
            if l.len() != batch || l.iter().any(|&n| n > t) {
                return Err(ModelError::BadInput(format!(
                    "lengths {l:?} for a batch of {batch} × {t} frames"
                )));
            }
        }
        let shortest = lengths.map_or(t, |l| l.iter().copied().min().unwrap_or(0));
        if enc_cfg.output_frames(shortest) == 0 {
            return Err(ModelError::BadInput(format!(
                "{shortest} feature frames are too few to subsample"
            )));
        }
        let out_lens: Vec<usize> = match lengths {
            Some(l) => l.iter().map(|&n| enc_cfg.output_frames(n)).collect(),
            None => vec![enc_cfg.output_frames(t); batch],
        };
        let t_out = out_lens.iter().copied().max().unwrap_or(0);
        // A home that runs chains eagerly with exact shapes (the CPU) gains nothing from a slot
        // per length, and a server would keep one for every length it ever saw.
        let no_capture = self.bucket <= 1 && !b.captures_chains();
        if t > CHAIN_MAX_FRAMES || no_capture {
            let prep = self.encoder.prepare(b, batch, t, lengths)?;
            return Ok((self.encoder.forward_prepared(b, features, &prep)?, out_lens));
        }
        let bucket = self.bucket.max(1);
        let tb = t.div_ceil(bucket) * bucket;
        let full;
        let lengths = match lengths {
            Some(l) => Some(l),
            None if tb > t => {
                full = vec![t; batch];
                Some(full.as_slice())
            }
            None => None,
        };
        let ch = self.encoder.chunking;
        let key = format!(
            "{}-encoder/b{batch}/t{tb}/{}/c{}x{}/{}",
            self.name,
            if lengths.is_some() { "masked" } else { "full" },
            ch.subsampling_frames,
            ch.attention_queries,
            self.lane
        );
        let mut chains = self.chains.lock().unwrap_or_else(|p| p.into_inner());
        let slot = match chains.entry(key.clone()) {
            std::collections::btree_map::Entry::Occupied(e) => {
                let slot = e.into_mut();
                if let Some(l) = lengths {
                    if slot.lengths.as_deref() != Some(l) {
                        let fresh = self.encoder.masks(b, batch, tb, l)?;
                        slot.prep.refresh_masks(b, &fresh)?;
                        slot.lengths = Some(l.to_vec());
                    }
                }
                slot
            }
            std::collections::btree_map::Entry::Vacant(e) => e.insert(ChainSlot {
                input: b.upload(&HostTensor::zeros(vec![batch, tb, mels]))?,
                prep: self.encoder.prepare(b, batch, tb, lengths)?,
                lengths: lengths.map(<[usize]>::to_vec),
            }),
        };
        // Rows past T keep an earlier call's values: the masks zero them.
        b.write_rows(&mut slot.input, features, 0)?;
        let slot = &*slot;
        let enc = crate::chain_one(b, &key, self.label, &mut |be| {
            self.encoder.forward_prepared(be, &slot.input, &slot.prep)
        })?;
        // A copy: the next replay overwrites the chain's output.
        Ok((b.slice(&enc, 1, 0, t_out)?, out_lens))
    }
}

/// A Parakeet (CTC, RNNT or TDT) model whose weights live on backend `B`, in one lane.
pub struct Parakeet<B: Backend> {
    backend: B,
    pub config: ParakeetConfig,
    pub frontend: NemoConfig,
    lane: Lane,
    path: PathBuf,
    encoder: Encoder<B>,
    head: Head<B>,
    tokenizer: Option<tokenizers::Tokenizer>,
    /// Chain inputs by key (see [`Parakeet::encode_padded`]).
    chains: Mutex<BTreeMap<String, ChainSlot<B>>>,
    /// Feature frames are padded (and masked) up to a multiple of this before a chain, so few
    /// shapes — few captured graphs — serve all lengths; 1 = exact shapes.
    pub graph_bucket: usize,
}

impl<B: Backend> Parakeet<B> {
    /// Loads an HF `ParakeetFor{CTC,RNNT,TDT}` directory or a NeMo `.nemo` archive onto
    /// `backend`, GEMM weights in `lane`.
    pub fn new(backend: B, path: &Path, lane: Lane) -> Result<Self> {
        Self::from_checkpoint(backend, &load(path)?, lane)
    }

    pub fn from_checkpoint(backend: B, ck: &ParakeetCheckpoint, lane: Lane) -> Result<Self> {
        backend.require_lane(lane)?;
        let t = Tensors {
            map: &ck.tensors,
            path: &ck.path,
        };
        let encoder = Encoder::load(&backend, &t, &ck.config.encoder, lane)?;
        let head = Head::load(&backend, &t, &ck.config, lane)?;
        let tokenizer = match (&ck.tokenizer_file, &ck.tokenizer_json) {
            (Some(p), _) => Some(
                tokenizers::Tokenizer::from_file(p)
                    .map_err(|e| ModelError::bad_model(p, format!("tokenizer.json: {e}")))?,
            ),
            (None, Some(json)) => Some(
                json.parse::<tokenizers::Tokenizer>()
                    .map_err(|e| ModelError::bad_model(&ck.path, format!("tokenizer: {e}")))?,
            ),
            (None, None) => None,
        };
        // Only a home that captures chains gains from shape buckets; elsewhere padding is waste.
        let graph_bucket = if backend.name() == "cuda" { 32 } else { 1 };
        Ok(Self {
            chains: Mutex::new(BTreeMap::new()),
            graph_bucket,
            frontend: NemoConfig::parakeet(ck.config.encoder.num_mel_bins),
            config: ck.config.clone(),
            backend,
            lane,
            path: ck.path.clone(),
            encoder,
            head,
            tokenizer,
        })
    }

    /// How long inputs are cut (memory bound); outputs do not depend on it.
    pub fn chunking(&self) -> Chunking {
        self.encoder.chunking
    }

    pub fn set_chunking(&mut self, c: Chunking) {
        self.encoder.chunking = c;
    }

    /// Where the attention layers' position projections run: `true` (the default; set at load
    /// from `STAPES_FC_POS_ONCE=0|1`) = once per prepared shape, before the pass (up to a
    /// memory bound); `false` = one GEMM per layer inside every pass. Results do not depend on
    /// it beyond the rounding of the form a home keeps them in.
    pub fn set_positions_once(&mut self, on: bool) {
        self.encoder.pos_once = on;
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn lane(&self) -> Lane {
        self.lane
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Seconds one encoder frame spans.
    pub fn frame_seconds(&self) -> f64 {
        (self.config.encoder.subsampling_factor * self.frontend.hop_length) as f64
            / self.frontend.sample_rate as f64
    }

    /// NeMo log-mel features of 16 kHz `samples`, `(T, n_mels)`. A NaN or infinite sample is
    /// refused (it would turn every frame it reaches into NaN and the transcript into noise).
    pub fn features(&self, samples: &[f32]) -> Result<HostTensor> {
        crate::check_finite(samples)?;
        let f = log_mel(samples, &self.frontend);
        Ok(HostTensor::new(vec![f.n_frames, f.n_bins], f.data)?)
    }

    /// Encodes `features (B, T, n_mels)` (every sequence full length) → `(B, T', d)`.
    pub fn encode(&self, features: &B::Tensor) -> Result<B::Tensor> {
        Ok(self.encode_padded(features, None)?.0)
    }

    /// Encodes a padded batch `features (B, T, n_mels)` whose sequence `i` has `lengths[i]`
    /// feature frames (`None`: all `T`; padding need not be zero). Returns `(B, T'_max, d)` and
    /// the encoder frames of each sequence; each sequence's frames equal its own unpadded pass
    /// (to rounding), frames past its length are unspecified.
    ///
    /// Up to [`CHAIN_MAX_FRAMES`] the encoder is one [`Backend::chain`] per
    /// (batch, bucket of `graph_bucket` frames, masked or not, chunking, lane), reading a
    /// per-key input buffer and precomputed positions and masks; the result is a copy the next
    /// call does not overwrite.
    pub fn encode_padded(
        &self,
        features: &B::Tensor,
        lengths: Option<&[usize]>,
    ) -> Result<(B::Tensor, Vec<usize>)> {
        let run = ChainedEncoder {
            encoder: &self.encoder,
            chains: &self.chains,
            bucket: self.graph_bucket,
            lane: self.lane,
            name: "parakeet",
            label: "parakeet encoder",
        };
        run.encode_padded(&self.backend, features, lengths)
    }

    /// Encodes host feature matrices `(T_i, n_mels)` as one padded batch; returns
    /// `(n, T'_max, d)` and each clip's encoder frames.
    pub fn encode_batch(&self, features: &[HostTensor]) -> Result<(B::Tensor, Vec<usize>)> {
        let (x, lens) = crate::pad_features(features, self.config.encoder.num_mel_bins)?;
        self.encode_padded(&self.backend.upload(&x)?, Some(&lens))
    }

    /// Encodes one host feature matrix `(T, n_mels)` → `(1, T', d)` on the backend.
    pub fn encode_host(&self, features: &HostTensor) -> Result<B::Tensor> {
        if features.rank() != 2 {
            return Err(ModelError::BadInput(format!(
                "features must be (T, n_mels), got {:?}",
                features.shape
            )));
        }
        let x = self.backend.upload(features)?;
        let x = self
            .backend
            .reshape(&x, &[1, features.shape[0], features.shape[1]])?;
        self.encode(&x)
    }

    /// CTC logits `(B, T', V)` of an encoder output (`None` for transducers).
    pub fn ctc_logits(&self, enc: &B::Tensor) -> Result<Option<B::Tensor>> {
        self.head.ctc_logits(&self.backend, enc)
    }

    /// Greedy decode of one encoded sequence `(1, T', d)`.
    pub fn greedy(&self, enc: &B::Tensor) -> Result<Decoded> {
        self.head.greedy(&self.backend, enc)
    }

    /// Text of `ids` (empty when the model directory has no tokenizer).
    pub fn decode_text(&self, ids: &[u32]) -> Result<String> {
        match &self.tokenizer {
            Some(t) => t
                .decode(ids, true)
                .map_err(|e| ModelError::bad_model(&self.path, format!("tokenizer decode: {e}"))),
            None => Ok(String::new()),
        }
    }

    /// Front end, encoder and greedy decoding of 16 kHz mono `samples`.
    pub fn transcribe(&self, samples: &[f32]) -> Result<Transcript> {
        let duration = samples.len() as f64 / SAMPLE_RATE as f64;
        let feats = self.features(samples)?;
        if self.config.encoder.output_frames(feats.shape[0]) == 0 {
            return Ok(Transcript {
                duration,
                language_probability: 1.0,
                ..Default::default()
            });
        }
        let enc = self.encode_host(&feats)?;
        let decoded = self.greedy(&enc)?;
        Ok(Transcript {
            language: String::new(),
            language_probability: 1.0,
            duration,
            segments: self.segments(&decoded, duration)?,
        })
    }

    /// Greedy decode of every sequence of a padded batch `enc (B, T, d)` cut to its `lens`:
    /// CTC projects and argmaxes the whole batch at once (one download of `B·T` ids), each
    /// clip collapsed over its own frames; transducer label loops on the device decode the
    /// clips together (see [`Parakeet::set_device_decode`]), else one at a time. The same
    /// decisions as [`Parakeet::greedy_at`] of each.
    pub fn greedy_batch(&self, enc: &B::Tensor, lens: &[usize]) -> Result<Vec<Decoded>> {
        match &self.head {
            Head::Ctc { proj, blank } => self.ctc_greedy_batch(proj, *blank, enc, lens),
            Head::Transducer(_) => self.head.greedy_batch(&self.backend, enc, lens),
        }
    }

    /// CTC over a padded batch: the projection and argmax see padded frames too (each frame's
    /// logits depend on that frame alone), which are dropped before collapsing.
    fn ctc_greedy_batch(
        &self,
        proj: &Linear<B>,
        blank: u32,
        enc: &B::Tensor,
        lens: &[usize],
    ) -> Result<Vec<Decoded>> {
        let s = enc.shape();
        if s.len() != 3 || s[0] != lens.len() || lens.iter().any(|&n| n > s[1]) {
            return Err(ModelError::BadInput(format!(
                "greedy batch: encoder output {s:?} with lengths {lens:?}"
            )));
        }
        let t = s[1];
        if t == 0 {
            return Ok(lens.iter().map(|_| ctc_collapse(&[], blank)).collect());
        }
        let b = &self.backend;
        // (B, T, V) → B·T frame ids, row-major by clip then frame.
        let ids = b.argmax(&proj.forward(b, enc)?)?;
        if ids.len() != lens.len() * t {
            return Err(ModelError::BadInput(format!(
                "CTC argmax gave {} ids for a batch of {} × {t} frames",
                ids.len(),
                lens.len()
            )));
        }
        Ok(ids
            .chunks(t)
            .zip(lens)
            .map(|(clip, &n)| ctc_collapse(&clip[..n], blank))
            .collect())
    }

    /// Where RNNT/TDT label loops run: `None` = on the device where the backend captures chains
    /// (the default: one captured step chain per batch shape, a few ints read back per step),
    /// `Some(true)` = on the device anyway (eagerly where nothing is captured), `Some(false)` =
    /// on the host (logits downloaded every step).
    pub fn set_device_decode(&self, on: Option<bool>) {
        self.head.set_device_loop(on);
    }

    /// Device label-loop steps per chain call (default 8): the host synchronizes and reads the
    /// steps' records once per call; a clip that finishes mid-call idles for the rest of it.
    pub fn set_device_decode_steps(&self, k: usize) {
        self.head.set_device_loop_steps(k);
    }

    /// Greedy decode of sequence `i` of a batched encoder output, cut to its `frames`.
    pub fn greedy_at(&self, enc: &B::Tensor, i: usize, frames: usize) -> Result<Decoded> {
        let b = &self.backend;
        let one = b.slice(enc, 0, i, 1)?;
        self.greedy(&b.slice(&one, 1, 0, frames)?)
    }

    /// Transcribes several 16 kHz clips with one batched (padded, masked) encoder pass, then
    /// greedy decoding per clip; the same transcripts as [`Parakeet::transcribe`] one by one.
    pub fn transcribe_batch(&self, clips: &[&[f32]]) -> Result<Vec<Transcript>> {
        batch_transcripts(
            clips,
            SAMPLE_RATE,
            |c, _| {
                let f = self.features(c)?;
                Ok((self.config.encoder.output_frames(f.shape[0]) > 0).then_some(f))
            },
            |feats, seconds| {
                let (enc, lens) = self.encode_batch(feats)?;
                self.greedy_batch(&enc, &lens)?
                    .iter()
                    .zip(seconds)
                    .map(|(d, &s)| self.segments(d, s))
                    .collect()
            },
        )
    }

    /// Emitted tokens as segments with word timings ([`segment_tokens`]): a token's span is its
    /// frames (TDT durations); words start at `▁` pieces. One segment of ids, without words, when
    /// there is no tokenizer.
    fn segments(&self, d: &Decoded, duration: f64) -> Result<Vec<Segment>> {
        let fs = self.frame_seconds();
        let timed: Vec<TimedToken> = d
            .tokens
            .iter()
            .map(|s| TimedToken {
                token: s.token,
                start: s.frame as f64 * fs,
                end: ((s.frame + s.duration.max(1)) as f64 * fs).min(duration),
            })
            .collect();
        let Some(tok) = &self.tokenizer else {
            let (Some(first), Some(last)) = (timed.first(), timed.last()) else {
                return Ok(Vec::new());
            };
            let ids = timed.iter().map(|s| s.token).collect();
            return Ok(vec![Segment::plain(
                0,
                first.start,
                last.end,
                "",
                ids,
                None,
            )]);
        };
        let piece = |id| {
            let p = tok.id_to_token(id).unwrap_or_default();
            let text = self.decode_text(&[id]).unwrap_or_default();
            (p.starts_with('\u{2581}'), text)
        };
        segment_tokens(&timed, piece, |ids| self.decode_text(ids))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastconformer::decoder::Step;
    use crate::transcript::SEGMENT_MAX_S;
    use stapes_core::reference::ReferenceBackend;

    /// Segments end at a pause before a word and before a word that would take them past the
    /// length cap; never inside a word; their texts and ids put together are the whole.
    #[test]
    fn segments_split_at_pauses_and_at_the_length_cap() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fastconformer/tdt");
        let m = Parakeet::new(ReferenceBackend::new(), &dir, Lane::F32).unwrap();
        let vocab = m.tokenizer.as_ref().unwrap().get_vocab(false);
        let plain = |p: &str| !matches!(p.chars().last(), Some('.' | '?' | '!'));
        let mut word: Vec<u32> = vocab
            .iter()
            .filter(|(p, _)| p.starts_with('\u{2581}') && p.chars().count() > 1 && plain(p))
            .map(|(_, &i)| i)
            .collect();
        word.sort();
        let inner = vocab
            .iter()
            .filter(|(p, _)| !p.starts_with('\u{2581}') && !p.starts_with('<') && plain(p))
            .map(|(_, &i)| i)
            .min()
            .unwrap();
        let fs = m.frame_seconds();
        let frames = |s: f64| (s / fs).round() as usize;
        let step = |token, frame| Step {
            token,
            frame,
            duration: 1,
        };
        // word, inner piece after a long pause (same word: no split), word after a short
        // pause, word after a long one (split), then words every 0.8 s up to 40 s
        let mut tokens = vec![
            step(word[0], 0),
            step(inner, frames(2.0)),
            step(word[1], frames(2.5)),
            step(word[2], frames(4.0)),
        ];
        let mut t = 4.8;
        while t < 40.0 {
            tokens.push(step(word[tokens.len() % word.len()], frames(t)));
            t += 0.8;
        }
        let d = Decoded {
            steps: tokens.clone(),
            tokens: tokens.clone(),
            frames: frames(41.0),
            margins: Vec::new(),
        };
        let segs = m.segments(&d, 41.0).unwrap();
        let starts: Vec<usize> = segs
            .iter()
            .map(|s| {
                tokens
                    .iter()
                    .position(|t| t.token == s.tokens[0] && t.frame as f64 * fs == s.start)
                    .unwrap()
            })
            .collect();
        assert_eq!(&starts[..2], &[0, 3], "split after the long pause only");
        for s in &segs {
            assert!(
                s.end - s.start <= SEGMENT_MAX_S + 1.0,
                "{} .. {}",
                s.start,
                s.end
            );
        }
        assert!(segs.len() >= 3, "the 35 s of steady words are cut");
        let ids: Vec<u32> = segs.iter().flat_map(|s| s.tokens.clone()).collect();
        assert_eq!(ids, tokens.iter().map(|t| t.token).collect::<Vec<_>>());
        let all: String = segs.iter().map(|s| s.text.as_str()).collect();
        let ids: Vec<u32> = tokens.iter().map(|t| t.token).collect();
        assert_eq!(all.trim(), m.decode_text(&ids).unwrap().trim());
    }
}
