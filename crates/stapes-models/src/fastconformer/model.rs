//! `Parakeet<B>`: a FastConformer with its head on a backend, and transcription from samples.

use super::config::ParakeetConfig;
use super::decoder::{Decoded, Head};
use super::encoder::{Chunking, Encoder, Tensors};
use super::weights::{load, ParakeetCheckpoint};
use crate::transcript::{Segment, Transcript, Word};
use crate::{ModelError, Result};
use stapes_audio::features::nemo::{log_mel, NemoConfig};
use stapes_core::{Backend, DeviceTensor, HostTensor, Lane};
use std::path::{Path, PathBuf};

/// Audio rate every Parakeet front end expects.
pub const SAMPLE_RATE: u32 = 16_000;

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
}

impl<B: Backend> Parakeet<B> {
    /// Loads an HF `ParakeetFor{CTC,RNNT,TDT}` directory or a NeMo `.nemo` archive onto
    /// `backend`, GEMM weights in `lane`.
    pub fn new(backend: B, path: &Path, lane: Lane) -> Result<Self> {
        Self::from_checkpoint(backend, &load(path)?, lane)
    }

    pub fn from_checkpoint(backend: B, ck: &ParakeetCheckpoint, lane: Lane) -> Result<Self> {
        if !backend.supports_lane(lane) {
            return Err(stapes_core::Error::LaneUnavailable {
                lane,
                backend: backend.name(),
            }
            .into());
        }
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
        Ok(Self {
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

    /// NeMo log-mel features of 16 kHz `samples`, `(T, n_mels)`.
    pub fn features(&self, samples: &[f32]) -> Result<HostTensor> {
        let f = log_mel(samples, &self.frontend);
        Ok(HostTensor::new(vec![f.n_frames, f.n_bins], f.data)?)
    }

    /// Encodes `features (B, T, n_mels)` → `(B, T', d)`.
    pub fn encode(&self, features: &B::Tensor) -> Result<B::Tensor> {
        let s = features.shape();
        let mels = self.config.encoder.num_mel_bins;
        if s.len() != 3 || s[2] != mels || s[0] == 0 {
            return Err(ModelError::BadInput(format!(
                "encoder input must be (B, T, {mels}), got {s:?}"
            )));
        }
        if self.config.encoder.output_frames(s[1]) == 0 {
            return Err(ModelError::BadInput(format!(
                "{} feature frames are too few to subsample",
                s[1]
            )));
        }
        self.encoder.forward(&self.backend, features)
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

    /// Splits emitted tokens into sentences (after `.`, `?`, `!` pieces) with word timings; one
    /// segment of ids when there is no tokenizer.
    fn segments(&self, d: &Decoded, duration: f64) -> Result<Vec<Segment>> {
        let fs = self.frame_seconds();
        let end_of =
            |s: &super::decoder::Step| ((s.frame + s.duration.max(1)) as f64 * fs).min(duration);
        let mut groups: Vec<Vec<super::decoder::Step>> = vec![Vec::new()];
        let mut words: Vec<Vec<Word>> = vec![Vec::new()];
        for s in &d.tokens {
            let piece = self
                .tokenizer
                .as_ref()
                .and_then(|t| t.id_to_token(s.token))
                .unwrap_or_default();
            let text = self.decode_text(&[s.token])?;
            if let Some(ws) = words.last_mut() {
                if piece.starts_with('\u{2581}') || ws.is_empty() {
                    ws.push(Word {
                        start: s.frame as f64 * fs,
                        end: end_of(s),
                        word: text.trim().to_string(),
                        probability: 1.0,
                    });
                } else if let Some(w) = ws.last_mut() {
                    w.word.push_str(text.trim());
                    w.end = end_of(s);
                }
            }
            if let Some(g) = groups.last_mut() {
                g.push(*s);
            }
            if matches!(piece.chars().last(), Some('.' | '?' | '!')) {
                groups.push(Vec::new());
                words.push(Vec::new());
            }
        }
        let mut out = Vec::new();
        for (g, w) in groups.into_iter().zip(words) {
            let (Some(first), Some(last)) = (g.first(), g.last()) else {
                continue;
            };
            let ids: Vec<u32> = g.iter().map(|s| s.token).collect();
            let text = self.decode_text(&ids)?;
            out.push(Segment {
                id: out.len(),
                start: first.frame as f64 * fs,
                end: end_of(last),
                text: if text.is_empty() {
                    text
                } else {
                    format!(" {}", text.trim())
                },
                tokens: ids,
                avg_logprob: 0.0,
                no_speech_prob: 0.0,
                compression_ratio: 0.0,
                temperature: 0.0,
                words: self.tokenizer.is_some().then_some(w),
            });
        }
        Ok(out)
    }
}
