//! A loaded GigaAM ASR model: front end, encoder, head and greedy decoding to a transcript.

use super::config::{GigaamConfig, Vocabulary};
use super::encoder::{Encoder, Positions};
use super::weights::{load, GigaamCheckpoint, FRONTEND_MEL, FRONTEND_WINDOW};
use crate::fastconformer::decoder::{Decoded, Head, Step};
use crate::fastconformer::encoder::Tensors;
use crate::transcript::{batch_transcripts, segment_tokens, Segment, TimedToken, Transcript};
use crate::{ModelError, Result};
use stapes_audio::features::gigaam::{buffers, log_mel_with_buffers};
use stapes_core::{Backend, DeviceTensor, HostTensor, Lane};
use std::path::{Path, PathBuf};

/// Input rate of every GigaAM model.
pub const SAMPLE_RATE: u32 = 16_000;

/// Inputs up to this many feature frames (30 s) run as a captured chain where the home captures.
pub const CHAIN_MAX_FRAMES: usize = 3000;

/// Chains (distinct input lengths) one model keeps; further lengths run eagerly.
pub const MAX_CHAINS: usize = 32;

/// A captured chain reads these by address: they live as long as the model.
struct ChainSlot<B: Backend> {
    /// `(1, T, n_mels)`, rewritten before each call.
    input: B::Tensor,
    pos: Positions<B>,
}

/// Seconds the gigaam package transcribes in one pass; longer input it sends to its long-form
/// path (VAD segments), as `stapes transcribe --vad` does.
pub const TRAINED_MAX_S: f64 = 25.0;

enum Tokenizer {
    /// One string per id.
    Chars(Vec<String>),
    /// The checkpoint's SentencePiece model.
    Pieces(Box<tokenizers::Tokenizer>),
}

/// A GigaAM CTC or RNNT model whose weights live on backend `B`, in one lane.
pub struct Gigaam<B: Backend> {
    backend: B,
    pub config: GigaamConfig,
    lane: Lane,
    path: PathBuf,
    encoder: Encoder<B>,
    head: Head<B>,
    /// The front end's window and mel matrix: the checkpoint's own buffers when it stores them
    /// (v3 keeps them in bfloat16), else computed for its config.
    window: Vec<f32>,
    mel: Vec<f32>,
    tokenizer: Tokenizer,
    /// Encoder chains by input length (see [`Gigaam::encode`]).
    chains: crate::ChainSlots<usize, ChainSlot<B>>,
    /// Whether the encoder runs as chains: on the CUDA home, graphs on or off (off, a chain runs
    /// eagerly with the same f16 activations, which is what makes replay == eager testable);
    /// elsewhere a chain is the eager pass and a slot per length would be waste.
    chained: bool,
}

impl<B: Backend> Gigaam<B> {
    /// Loads a GigaAM `.ckpt` onto `backend`, GEMM weights in `lane`.
    pub fn new(backend: B, path: &Path, lane: Lane) -> Result<Self> {
        Self::from_checkpoint(backend, &load(path)?, lane)
    }

    pub fn from_checkpoint(backend: B, ck: &GigaamCheckpoint, lane: Lane) -> Result<Self> {
        backend.require_lane(lane)?;
        let t = Tensors {
            map: &ck.tensors,
            path: &ck.path,
        };
        let encoder = Encoder::load(&backend, &t, &ck.config.encoder, lane)?;
        let head = Head::load_head(&backend, &t, &ck.config.head, ck.config.num_classes, lane)?;
        let (mut window, mut mel) = buffers(&ck.config.frontend);
        if let (Some(w), Some(m)) = (
            ck.tensors.get(FRONTEND_WINDOW),
            ck.tensors.get(FRONTEND_MEL),
        ) {
            if w.len() != window.len() || m.len() != mel.len() {
                return Err(ModelError::bad_tensor(
                    &ck.path,
                    FRONTEND_MEL,
                    format!(
                        "front-end buffers of {} and {} values, expected {} and {}",
                        w.len(),
                        m.len(),
                        window.len(),
                        mel.len()
                    ),
                ));
            }
            window = w.data.clone();
            mel = m.data.clone();
        }
        let tokenizer = match (&ck.config.vocabulary, &ck.sentencepiece) {
            (Vocabulary::Chars(v), _) => Tokenizer::Chars(v.clone()),
            (Vocabulary::SentencePiece, Some(bytes)) => {
                let json = crate::fastconformer::nemo::sentencepiece_to_tokenizer_json(bytes)
                    .map_err(|e| ModelError::bad_model(&ck.path, format!("tokenizer: {e}")))?;
                let tk = json
                    .parse::<tokenizers::Tokenizer>()
                    .map_err(|e| ModelError::bad_model(&ck.path, format!("tokenizer: {e}")))?;
                Tokenizer::Pieces(Box::new(tk))
            }
            (Vocabulary::SentencePiece, None) => {
                return Err(ModelError::bad_model(
                    &ck.path,
                    "a SentencePiece vocabulary without its model",
                ))
            }
        };
        let chained = backend.name() == "cuda";
        Ok(Self {
            config: ck.config.clone(),
            backend,
            lane,
            path: ck.path.clone(),
            encoder,
            head,
            window,
            mel,
            tokenizer,
            chains: crate::ChainSlots::new(MAX_CHAINS),
            chained,
        })
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

    /// Seconds one encoder frame spans (40 ms).
    pub fn frame_seconds(&self) -> f64 {
        (self.config.encoder.subsampling_factor * self.config.frontend.hop_length) as f64
            / self.config.frontend.sample_rate as f64
    }

    /// Log-mel features of 16 kHz `samples`, `(T, n_mels)`.
    pub fn features(&self, samples: &[f32]) -> Result<HostTensor> {
        crate::check_finite(samples)?;
        let f = log_mel_with_buffers(samples, &self.config.frontend, &self.window, &self.mel)
            .map_err(|e| ModelError::bad_model(&self.path, e.to_string()))?;
        Ok(HostTensor::new(vec![f.n_frames, f.n_bins], f.data)?)
    }

    /// Encodes `features (T, n_mels)` → `(1, T', d)`.
    pub fn encode_host(&self, features: &HostTensor) -> Result<B::Tensor> {
        let s = &features.shape;
        if s.len() != 2 || s[1] != self.config.encoder.feat_in {
            return Err(ModelError::BadInput(format!(
                "features {s:?}, expected (T, {})",
                self.config.encoder.feat_in
            )));
        }
        self.check_encodable(s[0])?;
        let x = features.clone().reshape(vec![1, s[0], s[1]])?;
        self.encode(&self.backend.upload(&x)?)
    }

    /// Encodes device features `(1, T, n_mels)` → `(1, T', d)`. On the CUDA home inputs up to
    /// [`CHAIN_MAX_FRAMES`] run as one chain per exact length (with graphs on, captured on its
    /// second call and replayed after), at most [`MAX_CHAINS`] lengths a model; elsewhere, and
    /// past those bounds, eagerly.
    pub fn encode(&self, features: &B::Tensor) -> Result<B::Tensor> {
        let b = &self.backend;
        let s = features.shape().to_vec();
        if !self.chained || s.len() != 3 || s[1] > CHAIN_MAX_FRAMES {
            return self.encoder.forward(b, features);
        }
        let t_out = self.config.encoder.output_frames(s[1]);
        let key = format!("gigaam-encoder/t{}/{}", s[1], self.lane);
        let out = self.chains.run(
            b,
            s[1],
            &key,
            "gigaam encoder",
            || {
                Ok(ChainSlot {
                    input: b.upload(&HostTensor::zeros(s.clone()))?,
                    pos: self.encoder.positions(b, t_out)?,
                })
            },
            |slot| Ok(b.write_rows(&mut slot.input, features, 0)?),
            &mut |be, slot| {
                Ok(vec![self.encoder.forward_prepared(
                    be,
                    &slot.input,
                    &slot.pos,
                )?])
            },
        )?;
        match out {
            Some(o) => o.into_iter().next().ok_or_else(|| {
                ModelError::BadInput("the gigaam encoder chain returned nothing".into())
            }),
            None => self.encoder.forward(b, features),
        }
    }

    /// Encodes host features `(T_i, n_mels)` as one padded batch (zero past each clip, masked
    /// in every convolution and attention, [`super::encoder::Padding`]); returns `(n, T'_max,
    /// d)` and each clip's encoder frames. Eager on every home (the CUDA chains are per exact
    /// single-clip length).
    pub fn encode_batch(&self, features: &[HostTensor]) -> Result<(B::Tensor, Vec<usize>)> {
        let cfg = &self.config.encoder;
        let (x, lens) = crate::pad_features(features, cfg.feat_in)?;
        lens.iter().try_for_each(|&n| self.check_encodable(n))?;
        let b = &self.backend;
        let t = x.shape[1];
        let pad = self.encoder.padding(b, &lens, t)?;
        let pos = self.encoder.positions(b, cfg.output_frames(t))?;
        let enc = self
            .encoder
            .forward_padded(b, &b.upload(&x)?, &pos, Some(&pad))?;
        Ok((enc, pad.frames().to_vec()))
    }

    /// Transcribes several 16 kHz clips with one padded encoder pass ([`Gigaam::encode_batch`])
    /// and greedy decoding per clip: the transcripts [`Gigaam::transcribe`] gives one by one.
    /// A clip past the one-pass limit fails the whole call (the engine sends those alone).
    pub fn transcribe_batch(&self, clips: &[&[f32]]) -> Result<Vec<Transcript>> {
        batch_transcripts(
            clips,
            SAMPLE_RATE,
            |c, seconds| {
                let f = self.features(c)?;
                let frames = self.config.encoder.output_frames(f.shape[0]);
                self.check_one_pass(frames, seconds)?;
                Ok((frames > 0).then_some(f))
            },
            |feats, seconds| {
                let (enc, lens) = self.encode_batch(feats)?;
                self.head
                    .greedy_batch(&self.backend, &enc, &lens)?
                    .iter()
                    .zip(seconds)
                    .map(|(d, &s)| self.segments(&d.tokens, s))
                    .collect()
            },
        )
    }

    /// CTC logits `(1, T', classes)` of an encoder output (`None` for RNNT).
    pub fn ctc_logits(&self, enc: &B::Tensor) -> Result<Option<B::Tensor>> {
        self.head.ctc_logits(&self.backend, enc)
    }

    /// Greedy decode of one encoded sequence `(1, T', d)`.
    pub fn greedy(&self, enc: &B::Tensor) -> Result<Decoded> {
        self.head.greedy(&self.backend, enc)
    }

    /// Text of `ids` as the model's vocabulary spells it.
    pub fn decode_text(&self, ids: &[u32]) -> Result<String> {
        match &self.tokenizer {
            Tokenizer::Chars(v) => ids
                .iter()
                .map(|&i| {
                    v.get(i as usize).map(String::as_str).ok_or_else(|| {
                        ModelError::BadInput(format!("id {i} is outside the vocabulary"))
                    })
                })
                .collect(),
            Tokenizer::Pieces(t) => t
                .decode(ids, true)
                .map_err(|e| ModelError::bad_model(&self.path, format!("tokenizer decode: {e}"))),
        }
    }

    /// Whether `id` begins a word (a SentencePiece `▁` piece; for characters, the first one
    /// after a space) and its text.
    fn piece(&self, id: u32) -> (bool, String) {
        match &self.tokenizer {
            Tokenizer::Chars(v) => {
                let s = v.get(id as usize).cloned().unwrap_or_default();
                (s == " ", s)
            }
            Tokenizer::Pieces(t) => {
                let p = t.id_to_token(id).unwrap_or_default();
                (p.starts_with('\u{2581}'), p)
            }
        }
    }

    /// Front end, encoder and greedy decoding of 16 kHz mono `samples`.
    pub fn transcribe(&self, samples: &[f32]) -> Result<Transcript> {
        let duration = samples.len() as f64 / SAMPLE_RATE as f64;
        let feats = self.features(samples)?;
        let frames = self.config.encoder.output_frames(feats.shape[0]);
        self.check_one_pass(frames, duration)?;
        if frames == 0 {
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
            segments: self.segments(&decoded.tokens, duration)?,
        })
    }

    /// `feature_frames` leave the subsampling at least one encoder frame.
    fn check_encodable(&self, feature_frames: usize) -> Result<()> {
        if self.config.encoder.output_frames(feature_frames) == 0 {
            return Err(ModelError::BadInput(format!(
                "{feature_frames} feature frames are too few for the encoder"
            )));
        }
        Ok(())
    }

    /// `frames` encoder frames (of `duration` seconds of audio) fit one pass: the package's
    /// rotary table holds `pos_emb_max_len` positions and it fails past them; attention is
    /// quadratic in the frames besides, so longer input is cut first (`--vad`).
    fn check_one_pass(&self, frames: usize, duration: f64) -> Result<()> {
        let most = self.config.encoder.pos_emb_max_len;
        if frames > most {
            return Err(ModelError::BadInput(format!(
                "{duration:.0} s of audio is {frames} encoder frames, more than the {most} \
                 GigaAM attends to at once ({:.0} s); cut it into speech pieces first \
                 (`stapes transcribe --vad`)",
                most as f64 * self.frame_seconds()
            )));
        }
        Ok(())
    }

    /// Emitted tokens as segments with word timings ([`segment_tokens`]): a token's span is its
    /// frame (40 ms); words break at spaces (or `▁` pieces).
    fn segments(&self, tokens: &[Step], duration: f64) -> Result<Vec<Segment>> {
        let fs = self.frame_seconds();
        let timed: Vec<TimedToken> = tokens
            .iter()
            .map(|s| TimedToken {
                token: s.token,
                start: s.frame as f64 * fs,
                end: ((s.frame + 1) as f64 * fs).min(duration),
            })
            .collect();
        segment_tokens(&timed, |id| self.piece(id), |ids| self.decode_text(ids))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stapes_core::reference::ReferenceBackend;

    /// Character vocabularies: words break at the space id, segments at a pause of 1 s before a
    /// word; spans are 40 ms frames.
    #[test]
    fn words_break_at_spaces_and_segments_at_pauses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gigaam/v3_ctc.ckpt");
        let m = Gigaam::new(ReferenceBackend::new(), &path, Lane::F32).unwrap();
        let step = |token, frame| Step {
            token,
            frame,
            duration: 1,
        };
        // " аб в" then, 2 s later, " г"
        let tokens = [
            step(0, 0),
            step(1, 1),
            step(2, 2),
            step(0, 3),
            step(3, 4),
            step(0, 55),
            step(4, 56),
        ];
        let segs = m.segments(&tokens, 10.0).unwrap();
        assert_eq!(segs.len(), 2, "{segs:?}");
        assert_eq!(segs[0].text, " аб в");
        assert_eq!(segs[1].text, " г");
        let words: Vec<(String, f64, f64)> = segs
            .iter()
            .flat_map(|s| s.words.clone().unwrap())
            .map(|w| (w.word, w.start, w.end))
            .collect();
        let fs = m.frame_seconds();
        assert_eq!(
            words,
            vec![
                ("аб".to_string(), fs, 3.0 * fs),
                ("в".to_string(), 4.0 * fs, 5.0 * fs),
                ("г".to_string(), 56.0 * fs, 57.0 * fs),
            ]
        );
        assert!((segs[1].start - 55.0 * fs).abs() < 1e-12);
    }
}
