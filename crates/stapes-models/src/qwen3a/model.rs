//! A loaded Qwen3-ASR model: front end, audio tower, chat prompt and greedy decoding by the
//! text model, and the `language X<asr_text>…` answer read back as a transcript.

use super::config::{AudioConfig, Qwen3AsrConfig};
use super::decoder::{KvCache, StepSlot, TextModel};
use super::encoder::AudioTower;
use super::weights::{load, Qwen3AsrCheckpoint};
use crate::fastconformer::encoder::Tensors;
use crate::transcript::{Segment, Transcript};
use crate::{ModelError, Result};
use stapes_audio::features::whisper::{log_mel, HOP_LENGTH};
use stapes_core::{Backend, DeviceTensor, HostTensor, Lane};
use std::path::{Path, PathBuf};

/// Input rate of every Qwen3-ASR model.
pub const SAMPLE_RATE: u32 = 16_000;

/// Shorter input is zero-padded to this many samples (0.5 s), as the feature extractor does.
pub const MIN_SAMPLES: usize = 8_000;

/// The feature extractor pads the audio to 30 s before its STFT (so the end of a clip sees
/// zeros, not a reflection of itself).
const PAD_TO_SAMPLES: usize = 480_000;

/// Longest input of one pass. Attention in the tower is windowed, but the text model attends
/// over every audio token (12.5 a second) and keeps their K/V (1.7 GB in f32 for 300 s of the
/// 0.6B model); [`Qwen3Asr::transcribe`] cuts longer audio into windows of at most this length
/// at quiet moments (as Qwen's own pipeline does, which cuts at 20 minutes).
pub const MAX_ONE_PASS_S: f64 = 300.0;

/// New tokens the K/V cache first has room for; it doubles as the answer grows.
const ANSWER_ROOM: usize = 128;

/// Inputs of up to this many 1 s chunks run the tower as a captured chain where the home
/// captures; longer ones eagerly.
pub const CHAIN_MAX_CHUNKS: usize = 30;

/// Chains (distinct chunk counts and last-chunk lengths) one model keeps; further shapes run
/// eagerly.
pub const MAX_CHAINS: usize = 32;

/// Positions of the decoder step chain's K/V cache: the CUDA home's step attention takes at
/// most 511 cache rows (one block a head). Prompts that leave no room (about 30 s of audio and
/// more) decode eagerly, and an answer that fills the chain's cache goes on eagerly from a copy.
pub const STEP_CHAIN_ROWS: usize = 511;

/// The languages the model was trained to name after `language ` (transformers'
/// `LANGUAGE_CODE_TO_NAME`).
pub const LANGUAGES: [(&str, &str); 30] = [
    ("ar", "Arabic"),
    ("yue", "Cantonese"),
    ("zh", "Chinese"),
    ("cs", "Czech"),
    ("da", "Danish"),
    ("nl", "Dutch"),
    ("en", "English"),
    ("fil", "Filipino"),
    ("fi", "Finnish"),
    ("fr", "French"),
    ("de", "German"),
    ("el", "Greek"),
    ("hi", "Hindi"),
    ("hu", "Hungarian"),
    ("id", "Indonesian"),
    ("it", "Italian"),
    ("ja", "Japanese"),
    ("ko", "Korean"),
    ("mk", "Macedonian"),
    ("ms", "Malay"),
    ("fa", "Persian"),
    ("pl", "Polish"),
    ("pt", "Portuguese"),
    ("ro", "Romanian"),
    ("ru", "Russian"),
    ("es", "Spanish"),
    ("sv", "Swedish"),
    ("th", "Thai"),
    ("tr", "Turkish"),
    ("vi", "Vietnamese"),
];

/// The language name the model writes for code `code` (or a name given as such).
pub fn language_name(code: &str) -> Option<&'static str> {
    LANGUAGES
        .iter()
        .find(|(c, n)| c.eq_ignore_ascii_case(code) || n.eq_ignore_ascii_case(code))
        .map(|(_, n)| *n)
}

/// Runs longer than this (of one character, or of one pattern of ≤ 20 characters) are cut to
/// one occurrence.
const REPEAT_THRESHOLD: usize = 20;

/// The repetition clean-up Qwen's own pipeline and transformers' `parse_output` apply to an
/// answer (a model stuck in a loop): a character repeated more than 20 times in a row is kept
/// once; then, scanning from the start, the first pattern of 1–20 characters seen 20 times in a
/// row is kept once and the scan goes on after its last repeat.
pub fn fix_repetitions(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut once = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let run = chars[i..].iter().take_while(|&&c| c == chars[i]).count();
        match run > REPEAT_THRESHOLD {
            true => once.push(chars[i]),
            false => once.extend_from_slice(&chars[i..i + run]),
        }
        i += run;
    }
    fix_pattern_repeats(&once).into_iter().collect()
}

fn fix_pattern_repeats(s: &[char]) -> Vec<char> {
    const MAX_PATTERN: usize = 20;
    let (n, t) = (s.len(), REPEAT_THRESHOLD);
    if n < 2 * t {
        return s.to_vec();
    }
    let mut out = Vec::with_capacity(n);
    let mut i = 0;
    while i + 2 * t <= n {
        for k in 1..=MAX_PATTERN {
            if i + k * t > n {
                break;
            }
            let pattern = &s[i..i + k];
            if (1..t).all(|r| &s[i + r * k..i + r * k + k] == pattern) {
                let mut end = i + t * k;
                while end + k <= n && &s[end..end + k] == pattern {
                    end += k;
                }
                out.extend_from_slice(pattern);
                out.extend(fix_pattern_repeats(&s[end..]));
                return out;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out.extend_from_slice(&s[i..]);
    out
}

/// The chat prompt around the audio tokens: `prefix · <|audio_pad|>×N · suffix`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt {
    pub prefix: Vec<u32>,
    pub suffix: Vec<u32>,
}

/// What generation is asked for.
#[derive(Clone, Debug, Default)]
pub struct Qwen3AsrOptions {
    /// A code (`en`) or name (`English`) to force; `None`: the model names the language.
    pub language: Option<String>,
    /// `None`: 64 plus 16 a second of audio.
    pub max_new_tokens: Option<usize>,
}

/// The ids greedy decoding gave and where they came from.
#[derive(Clone, Debug)]
pub struct Generated {
    pub prompt: Vec<u32>,
    pub ids: Vec<u32>,
    /// Decoding stopped at an end-of-text id (not at the token limit).
    pub finished: bool,
}

/// A Qwen3-ASR model whose weights live on backend `B`, in one lane.
pub struct Qwen3Asr<B: Backend> {
    backend: B,
    pub config: Qwen3AsrConfig,
    lane: Lane,
    path: PathBuf,
    tower: AudioTower<B>,
    text: TextModel<B>,
    tokenizer: Option<tokenizers::Tokenizer>,
    /// The tower's chain inputs `(n_chunks, n_mels, chunk)` by (chunks, tokens of the last
    /// chunk): a captured chain reads its input by address, so each lives as long as the model.
    chains: crate::ChainSlots<(usize, usize), B::Tensor>,
    /// Whether the tower runs as chains: on the CUDA home (graphs on or off; off, a chain runs
    /// eagerly with the same f16 activations); elsewhere a chain is the eager pass.
    chained: bool,
    /// The decoder step chain's buffers, made at its first use; a generation that finds them
    /// in use by another decodes eagerly.
    /// Its chains are keyed by the slot's id: a graph is bound to the buffers it recorded.
    step_slot: std::sync::Mutex<Option<(u64, StepSlot<B>)>>,
    /// Decoder steps through the step chain: 0 = where the tower is chained (the default),
    /// 1 = always, 2 = never.
    step_chain: std::sync::atomic::AtomicU8,
    /// Positions of the step chain's cache ([`STEP_CHAIN_ROWS`] unless a test sets fewer).
    step_rows: std::sync::atomic::AtomicUsize,
    id: u64,
}

impl<B: Backend> Qwen3Asr<B> {
    /// Loads a transformers Qwen3-ASR directory onto `backend`, GEMM weights in `lane`.
    pub fn new(backend: B, path: &Path, lane: Lane) -> Result<Self> {
        Self::from_checkpoint(backend, &load(path)?, lane)
    }

    pub fn from_checkpoint(backend: B, ck: &Qwen3AsrCheckpoint, lane: Lane) -> Result<Self> {
        backend.require_lane(lane)?;
        let t = Tensors {
            map: &ck.tensors,
            path: &ck.path,
        };
        let tower = AudioTower::load(&backend, &t, &ck.config.audio, lane)?;
        let text = TextModel::load(&backend, &t, &ck.config.text, lane)?;
        let tokenizer = match &ck.tokenizer_file {
            Some(f) => Some(
                tokenizers::Tokenizer::from_file(f)
                    .map_err(|e| ModelError::bad_model(f, format!("tokenizer: {e}")))?,
            ),
            None => None,
        };
        let chained = backend.name() == "cuda";
        Ok(Self {
            backend,
            config: ck.config.clone(),
            lane,
            path: ck.path.clone(),
            tower,
            text,
            tokenizer,
            chains: crate::ChainSlots::new(MAX_CHAINS),
            chained,
            step_slot: std::sync::Mutex::new(None),
            step_chain: std::sync::atomic::AtomicU8::new(0),
            step_rows: std::sync::atomic::AtomicUsize::new(STEP_CHAIN_ROWS),
            id: crate::next_chain_id(),
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

    /// Log-mel features of 16 kHz `samples` as transformers' `Qwen3ASRFeatureExtractor` makes
    /// them, `(T, n_mels)`, and how many of the frames are audio. `T` runs to the end of the
    /// last chunk that holds audio (the frames the tower reads), not to the extractor's 30 s.
    pub fn features(&self, samples: &[f32]) -> Result<(HostTensor, usize)> {
        crate::check_finite(samples)?;
        let n_mels = self.config.audio.n_mels;
        let chunk = self.config.audio.chunk_frames();
        let len = samples.len();
        let n = len.max(MIN_SAMPLES);
        let total = n.max(PAD_TO_SAMPLES) / HOP_LENGTH;
        let valid = n.div_ceil(HOP_LENGTH).min(total);
        let keep = valid.next_multiple_of(chunk).min(total);
        // Frames from `valid + 2` on see only padding (their mel power is 0, the floor of the
        // log), so the spectrogram's maximum is among the frames computed here.
        let frames = (keep + 2).min(total);
        let f = log_mel(samples, n_mels, (frames * HOP_LENGTH).saturating_sub(len));
        let data = f.data[..keep * n_mels].to_vec();
        Ok((HostTensor::new(vec![keep, n_mels], data)?, valid))
    }

    /// The audio tower's output `(1, N, d)` and the projected audio embeddings `(1, N, hidden)`
    /// of `features (T, n_mels)` whose first `valid` frames are audio.
    pub fn encode(&self, features: &HostTensor, valid: usize) -> Result<(B::Tensor, B::Tensor)> {
        let chunks = self.backend.upload(&self.tower.chunks(features, valid)?)?;
        self.encode_chunks(&chunks, valid)
    }

    /// [`Qwen3Asr::encode`] from the tower's input chunks `(n_chunks, 1, n_mels, chunk)` on the
    /// device ([`AudioTower::chunks`]). On the CUDA home inputs of up to [`CHAIN_MAX_CHUNKS`]
    /// run as one chain per (chunks, tokens of the last chunk) — with graphs on, captured on its
    /// second call and replayed after — at most [`MAX_CHAINS`] shapes a model; elsewhere, and
    /// past those bounds, eagerly.
    pub fn encode_chunks(
        &self,
        chunks: &B::Tensor,
        valid: usize,
    ) -> Result<(B::Tensor, B::Tensor)> {
        let b = &self.backend;
        let tower = &self.tower;
        let s = chunks.shape().to_vec();
        let c = self.config.audio.chunk_frames();
        let eager = || -> Result<(B::Tensor, B::Tensor)> {
            let t = tower.forward_chunks(b, chunks, valid)?;
            let a = tower.project(b, &t)?;
            Ok((t, a))
        };
        if !self.chained || s.len() != 4 || s[0] > CHAIN_MAX_CHUNKS || valid == 0 {
            return eager();
        }
        if s[0] != valid.div_ceil(c) {
            return Err(ModelError::BadInput(format!(
                "chunks {s:?} do not hold {valid} valid frames"
            )));
        }
        let last = AudioConfig::chunk_tokens(valid - (s[0] - 1) * c);
        let flat = [s[0], s[1] * s[2], s[3]];
        let name = format!("qwen3a-encoder/m{}c{}l{last}/{}", self.id, s[0], self.lane);
        let out = self.chains.run(
            b,
            (s[0], last),
            &name,
            "qwen3a tower",
            || Ok(b.upload(&HostTensor::zeros(flat.to_vec()))?),
            |input| Ok(b.write_rows(input, &b.reshape(chunks, &flat)?, 0)?),
            &mut |be, input| {
                let x = be.reshape(input, &s)?;
                let t = tower.forward_chunks(be, &x, valid)?;
                let a = tower.project(be, &t)?;
                Ok(vec![t, a])
            },
        )?;
        match out {
            None => eager(),
            Some(out) => {
                let mut out = out.into_iter();
                match (out.next(), out.next()) {
                    (Some(t), Some(a)) => Ok((t, a)),
                    _ => Err(ModelError::BadInput(
                        "the qwen3a tower chain returned the wrong outputs".into(),
                    )),
                }
            }
        }
    }

    /// Decoder steps through the step chain (`Some(true)`), eagerly (`Some(false)`), or where
    /// the tower is chained (`None`, the default): for the tests that compare the two.
    #[doc(hidden)]
    pub fn set_step_chain(&self, on: Option<bool>) {
        let v = match on {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
        self.step_chain
            .store(v, std::sync::atomic::Ordering::Relaxed);
    }

    /// Positions of the step chain's cache, at most [`STEP_CHAIN_ROWS`] (fewer let a test fill
    /// it and see the answer go on eagerly). Takes effect for a slot made after the call.
    #[doc(hidden)]
    pub fn set_step_chain_rows(&self, rows: usize) {
        let rows = rows.clamp(1, STEP_CHAIN_ROWS);
        self.step_rows
            .store(rows, std::sync::atomic::Ordering::Relaxed);
        *self.step_slot.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The audio tower, for benches that time it from device input.
    pub fn tower(&self) -> &AudioTower<B> {
        &self.tower
    }

    /// The text model, for benches that time its steps.
    pub fn text_model(&self) -> &TextModel<B> {
        &self.text
    }

    /// Id of special token `name` in the model's tokenizer.
    fn special(&self, name: &str) -> Result<u32> {
        self.tokenizer
            .as_ref()
            .and_then(|t| t.token_to_id(name))
            .ok_or_else(|| {
                ModelError::bad_model(&self.path, format!("the tokenizer has no `{name}` token"))
            })
    }

    /// The chat prompt with an empty system turn; with `language`, the assistant's answer is
    /// begun with `language <Name><asr_text>` (as transformers' `apply_transcription_request`
    /// forces a language). Without a tokenizer.json, the ids of Qwen's own vocabulary (a model of
    /// its 151 936 entries) or an error.
    pub fn prompt(&self, language: Option<&str>) -> Result<Prompt> {
        let name = match language {
            Some(l) => Some(language_name(l).ok_or_else(|| {
                ModelError::BadOption(format!(
                    "Qwen3-ASR does not know language `{l}` ({})",
                    LANGUAGES.map(|(c, _)| c).join(", ")
                ))
            })?),
            None => None,
        };
        let Some(tok) = &self.tokenizer else {
            if self.config.text.vocab_size != 151_936 || name.is_some() {
                return Err(ModelError::bad_model(
                    &self.path,
                    "no tokenizer.json beside the weights: the prompt cannot be written",
                ));
            }
            // <|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|audio_start|> … <|audio_end|>
            // <|im_end|>\n<|im_start|>assistant\n in Qwen's vocabulary
            return Ok(Prompt {
                prefix: vec![151_644, 8948, 198, 151_645, 198, 151_644, 872, 198, 151_669],
                suffix: vec![151_670, 151_645, 198, 151_644, 77_091, 198],
            });
        };
        let encode = |s: &str| -> Result<Vec<u32>> {
            Ok(tok
                .encode(s, false)
                .map_err(|e| ModelError::bad_model(&self.path, format!("tokenizer: {e}")))?
                .get_ids()
                .to_vec())
        };
        let mut suffix = encode("<|audio_end|><|im_end|>\n<|im_start|>assistant\n")?;
        if let Some(name) = name {
            suffix.extend(encode(&format!("language {name}<asr_text>"))?);
        }
        Ok(Prompt {
            prefix: encode("<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|audio_start|>")?,
            suffix,
        })
    }

    /// Greedy decoding from `audio (1, N, hidden)` embeddings placed between the prompt's parts.
    pub fn generate(
        &self,
        audio: &B::Tensor,
        prompt: &Prompt,
        max_new_tokens: usize,
    ) -> Result<Generated> {
        self.generate_in(audio, prompt, max_new_tokens, ANSWER_ROOM)
    }

    /// [`Qwen3Asr::generate`] with the K/V cache's first room for `room` new tokens (it doubles
    /// whenever full): the same ids whatever the room.
    pub fn generate_in(
        &self,
        audio: &B::Tensor,
        prompt: &Prompt,
        max_new_tokens: usize,
        room: usize,
    ) -> Result<Generated> {
        let b = &self.backend;
        let n_audio = audio.shape()[1];
        let pad = self.config.audio_token_id;
        let full: Vec<u32> = prompt
            .prefix
            .iter()
            .copied()
            .chain(std::iter::repeat_n(pad, n_audio))
            .chain(prompt.suffix.iter().copied())
            .collect();
        if let Some(&id) = full
            .iter()
            .find(|&&id| id as usize >= self.config.text.vocab_size)
        {
            return Err(ModelError::BadInput(format!(
                "prompt id {id} is outside the vocabulary"
            )));
        }
        let capacity = full.len() + max_new_tokens;
        if capacity > self.config.text.max_positions {
            return Err(ModelError::BadInput(format!(
                "{} prompt and {max_new_tokens} new tokens pass the model's {} positions",
                full.len(),
                self.config.text.max_positions
            )));
        }
        let embed = |ids: &[u32]| match ids.is_empty() {
            true => Ok(None),
            false => self.text.embed(b, ids).map(Some),
        };
        let (prefix, suffix) = (embed(&prompt.prefix)?, embed(&prompt.suffix)?);
        let parts: Vec<&B::Tensor> = prefix.iter().chain([audio]).chain(suffix.iter()).collect();
        let x = b.concat(&parts, 1)?;
        let step_chain = match self.step_chain.load(std::sync::atomic::Ordering::Relaxed) {
            0 => self.chained,
            on => on == 1,
        };
        let rows = self.step_rows.load(std::sync::atomic::Ordering::Relaxed);
        let mut guard = match step_chain && full.len() < rows && max_new_tokens > 1 {
            true => self.step_slot.try_lock().ok(),
            false => None,
        };
        if let Some(g) = guard.as_deref_mut() {
            if g.is_none() {
                let id = crate::next_chain_id();
                *g = Some((id, self.text.step_slot(b, rows)?));
            }
        }
        let slot_id = guard.as_deref().and_then(|g| g.as_ref()).map_or(0, |g| g.0);
        let mut slot = guard
            .as_deref_mut()
            .and_then(Option::as_mut)
            .map(|g| &mut g.1);
        // room for the answer grows as it is written (a K/V row per layer is 2·H·Dh floats:
        // allocating for the limit up front would hold gigabytes a long input never uses)
        let mut own: Option<KvCache<B>> = None;
        let h = match slot.as_deref_mut() {
            Some(s) => {
                s.cache.len = 0;
                self.text.forward(b, &x, &mut s.cache)?
            }
            None => {
                let c = own.insert(
                    self.text
                        .cache(b, full.len() + max_new_tokens.min(room.max(1)))?,
                );
                self.text.forward(b, &x, c)?
            }
        };
        let rows = h.shape()[1];
        let mut logits = self.text.logits(b, &b.slice(&h, 1, rows - 1, 1)?)?;
        let key = format!("qwen3a-step/m{}s{slot_id}/{}", self.id, self.lane);
        let mut ids = Vec::new();
        let mut finished = false;
        for _ in 0..max_new_tokens {
            let id = b.argmax(&logits)?.first().copied().ok_or_else(|| {
                ModelError::Backend(stapes_core::Error::shape("argmax", "no row".to_string()))
            })?;
            if self.config.eos_ids.contains(&id) {
                finished = true;
                break;
            }
            ids.push(id);
            if ids.len() == max_new_tokens {
                break;
            }
            if let Some(s) = slot.as_deref_mut() {
                if s.cache.len < s.cache.capacity {
                    logits = self.text.step_chained(b, s, id, &key)?;
                    continue;
                }
                // the chain's cache is full: go on eagerly from a copy of it
                let room = (s.cache.capacity - full.len()) * 2;
                own = Some(self.text.copy_cache(
                    b,
                    &s.cache,
                    full.len() + room.min(max_new_tokens),
                )?);
                slot = None;
            }
            let cache = own
                .as_mut()
                .ok_or_else(|| ModelError::BadInput("the decoder lost its K/V cache".into()))?;
            if cache.len == cache.capacity {
                let room = (cache.capacity - full.len()) * 2;
                self.text
                    .grow(b, cache, full.len() + room.min(max_new_tokens))?;
            }
            let h = self.text.forward(b, &self.text.embed(b, &[id])?, cache)?;
            logits = self.text.logits(b, &h)?;
        }
        Ok(Generated {
            prompt: full,
            ids,
            finished,
        })
    }

    /// The token limit for `seconds` of audio when none is given.
    pub fn default_max_new_tokens(seconds: f64) -> usize {
        64 + (seconds.max(0.0) * 16.0).ceil() as usize
    }

    /// Features, tower and greedy decoding of 16 kHz mono `samples`: the ids.
    pub fn generate_ids(&self, samples: &[f32], opts: &Qwen3AsrOptions) -> Result<Generated> {
        let seconds = samples.len() as f64 / SAMPLE_RATE as f64;
        if seconds > MAX_ONE_PASS_S {
            return Err(ModelError::BadInput(format!(
                "{seconds:.0} s of audio is more than the {MAX_ONE_PASS_S:.0} s stapes gives \
                 Qwen3-ASR in one pass; cut it into speech pieces first (`stapes transcribe --vad`)"
            )));
        }
        let prompt = self.prompt(opts.language.as_deref())?;
        let (f, valid) = self.features(samples)?;
        let (_, audio) = self.encode(&f, valid)?;
        let max_new = opts
            .max_new_tokens
            .unwrap_or_else(|| Self::default_max_new_tokens(seconds));
        self.generate(&audio, &prompt, max_new)
    }

    /// Text of `ids` (special tokens dropped); ids written out as `<id>` without a tokenizer.
    pub fn decode_text(&self, ids: &[u32]) -> Result<String> {
        match &self.tokenizer {
            Some(t) => t
                .decode(ids, true)
                .map_err(|e| ModelError::bad_model(&self.path, format!("tokenizer decode: {e}"))),
            None => Ok(ids.iter().map(|i| format!("<{i}>")).collect()),
        }
    }

    /// The answer split at `<asr_text>`: the language code the model named before it (when it
    /// did) and the ids of the transcription after it.
    pub fn split_answer<'a>(&self, ids: &'a [u32]) -> Result<(Option<String>, &'a [u32])> {
        let Ok(marker) = self.special("<asr_text>") else {
            return Ok((None, ids));
        };
        let Some(at) = ids.iter().position(|&i| i == marker) else {
            return Ok((None, ids));
        };
        let head = self.decode_text(&ids[..at])?;
        let named = head.trim().strip_prefix("language").map(str::trim);
        let code = named.and_then(|n| {
            LANGUAGES
                .iter()
                .find(|(_, name)| name.eq_ignore_ascii_case(n))
                .map(|(c, _)| c.to_string())
        });
        Ok((code, &ids[at + 1..]))
    }

    /// Front end, tower, greedy decoding and the answer read back (loops cut by
    /// [`fix_repetitions`]): one segment per pass (the model gives no times). Audio past
    /// [`MAX_ONE_PASS_S`] is cut into near-equal windows at the quietest 100 ms near each equal
    /// split, each window its own pass and segment.
    pub fn transcribe(&self, samples: &[f32], opts: &Qwen3AsrOptions) -> Result<Transcript> {
        self.transcribe_observed(samples, opts, None, &mut |_| {})
    }

    /// [`Qwen3Asr::transcribe`], handing each window's segment to `on_segment` as soon as it is
    /// decoded and the seconds done so far to `progress`.
    pub fn transcribe_observed(
        &self,
        samples: &[f32],
        opts: &Qwen3AsrOptions,
        progress: Option<&dyn Fn(f64)>,
        on_segment: &mut dyn FnMut(&Segment),
    ) -> Result<Transcript> {
        crate::check_finite(samples)?;
        let rate = SAMPLE_RATE as f64;
        let duration = samples.len() as f64 / rate;
        let forced = opts
            .language
            .as_deref()
            .and_then(language_name)
            .and_then(|n| LANGUAGES.iter().find(|(_, name)| *name == n))
            .map(|(c, _)| c.to_string());
        let windows = match duration > MAX_ONE_PASS_S {
            true => crate::fastconformer::canary::windows_of(samples, MAX_ONE_PASS_S),
            false => std::iter::once(0..samples.len()).collect(),
        };
        let mut named = None;
        let mut segments = Vec::new();
        for w in windows {
            let g = self.generate_ids(&samples[w.clone()], opts)?;
            let (lang, text_ids) = self.split_answer(&g.ids)?;
            named = named.or(lang);
            let text = fix_repetitions(&self.decode_text(text_ids)?);
            let text = text.trim();
            if let Some(p) = progress {
                p(w.end as f64 / rate);
            }
            if text.is_empty() {
                continue;
            }
            segments.push(Segment {
                id: segments.len(),
                start: w.start as f64 / rate,
                end: w.end as f64 / rate,
                text: format!(" {text}"),
                tokens: text_ids.to_vec(),
                avg_logprob: 0.0,
                no_speech_prob: 0.0,
                compression_ratio: 0.0,
                temperature: 0.0,
                words: None,
            });
            if let Some(seg) = segments.last() {
                on_segment(seg);
            }
        }
        Ok(Transcript {
            language: forced.or(named).unwrap_or_default(),
            language_probability: 1.0,
            duration,
            segments,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::fix_repetitions;

    /// Expected outputs are what transformers 5.17's `_detect_and_fix_repetitions`
    /// (processing_qwen3_asr.py, Qwen's own post-processing) returns for the same inputs.
    #[test]
    fn repetitions_are_cut_as_qwen_cuts_them() {
        let r = |s: &str, n: usize| s.repeat(n);
        let cases = [
            ("hello world".to_string(), "hello world"),
            (r("a", 21) + "b", "ab"),
            (r("a", 20) + "b", "aaaaaaaaaaaaaaaaaaaab"),
            (r("ab", 25) + "end", "abend"),
            (
                "x".to_string() + &r("abc", 20) + "tail" + &r("yz", 30),
                "xabctailyz",
            ),
            (r("日本", 21) + "語", "日本語"),
            (
                r("no", 19) + &r("yes", 5),
                "nononononononononononononononononononoyesyesyesyesyes",
            ),
            (r("short", 8), "shortshortshortshortshortshortshortshort"),
            (r("the cat ", 22).trim().to_string(), "the cat the cat"),
            ("q".to_string() + &r("w", 50) + "e" + &r("rt", 20), "qwert"),
        ];
        for (input, want) in cases {
            assert_eq!(fix_repetitions(&input), want, "{input}");
        }
    }
}
