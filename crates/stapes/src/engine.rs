//! `Engine`: a loaded model on a home, in a lane. The one entry point the CLI and server use.

use crate::error::StapesError;
use crate::runtime::resolve_lane;
use crate::runtime::{Device, DeviceRequest};
use stapes_core::counters::CounterSnapshot;
use stapes_core::{Backend, Lane};
use stapes_cpu::CpuBackend;
use stapes_cuda::CudaBackend;
use stapes_formats::Format;
use stapes_models::fastconformer::{Canary, CanaryCheckpoint, CanaryConfig, NemoModel, Parakeet};
use stapes_models::gemma4a::Gemma4Audio;
use stapes_models::gigaam::Gigaam;
use stapes_models::qwen3a::Qwen3Asr;
use stapes_models::transcript::{Segment, Transcript};
use stapes_models::whisper::config::WhisperConfig;
use stapes_models::whisper::decoding::{Task as WhisperTask, WhisperOptions};
use stapes_models::whisper::model::Whisper;
use stapes_models::whisper::weights::{load_weights, synthetic_checkpoint, WhisperWeights};
use std::path::Path;

/// How to load a model.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub device: DeviceRequest,
    /// Pinned lane; `None` = the policy (CPU f32, GPU q8).
    pub lane: Option<Lane>,
    /// CPU worker threads; `None` = all cores.
    pub threads: Option<usize>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            device: DeviceRequest::Auto,
            lane: None,
            threads: None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Task {
    #[default]
    Transcribe,
    /// Translate to English (Whisper multilingual models).
    Translate,
}

/// Per-request decoding options (family-agnostic; each family uses what applies to it).
#[derive(Clone, Debug)]
pub struct TranscribeOptions {
    /// Language code; `None` = detect.
    pub language: Option<String>,
    pub task: Task,
    /// 1 = greedy.
    pub beam_size: usize,
    /// One fixed temperature (no fallback); `None` = the fallback schedule 0, 0.2, … 1.0.
    pub temperature: Option<f32>,
    pub without_timestamps: bool,
    pub initial_prompt: Option<String>,
    pub condition_on_previous_text: bool,
    pub word_timestamps: bool,
}

impl Default for TranscribeOptions {
    fn default() -> Self {
        Self {
            language: None,
            task: Task::Transcribe,
            beam_size: 5,
            temperature: None,
            without_timestamps: false,
            initial_prompt: None,
            condition_on_previous_text: false,
            word_timestamps: false,
        }
    }
}

/// A loaded model. `Send + Sync`: share it behind an `Arc`.
pub struct Engine {
    family: &'static str,
    device: Device,
    lane: Lane,
    pub(crate) inner: Inner,
    /// One call at a time on a GPU home: a graph recorded on the first use of a shape would
    /// capture another thread's launches on the same stream. Work inside one call (a batch's
    /// streams) is coordinated by the model code; the CPU home needs no turn.
    gpu_turn: std::sync::Mutex<()>,
}

/// One variant per (family, home); the model code itself is generic over the home.
pub(crate) enum Inner {
    WhisperCpu(Box<Whisper<CpuBackend>>),
    WhisperCuda(Box<Whisper<CudaBackend>>),
    ParakeetCpu(Box<Parakeet<CpuBackend>>),
    ParakeetCuda(Box<Parakeet<CudaBackend>>),
    CanaryCpu(Box<Canary<CpuBackend>>),
    CanaryCuda(Box<Canary<CudaBackend>>),
    GigaamCpu(Box<Gigaam<CpuBackend>>),
    GigaamCuda(Box<Gigaam<CudaBackend>>),
    Qwen3aCpu(Box<Qwen3Asr<CpuBackend>>),
    Qwen3aCuda(Box<Qwen3Asr<CudaBackend>>),
    /// An audio tower alone: embeddings for a text model stapes does not run (bench, inspect).
    Gemma4aCpu(Box<Gemma4Audio<CpuBackend>>),
    Gemma4aCuda(Box<Gemma4Audio<CudaBackend>>),
}

/// Run the same expression on whichever (family, home) is loaded.
macro_rules! with_model {
    ($inner:expr, $m:ident => $body:expr) => {
        match $inner {
            Inner::WhisperCpu($m) => $body,
            Inner::WhisperCuda($m) => $body,
            Inner::ParakeetCpu($m) => $body,
            Inner::ParakeetCuda($m) => $body,
            Inner::CanaryCpu($m) => $body,
            Inner::CanaryCuda($m) => $body,
            Inner::GigaamCpu($m) => $body,
            Inner::GigaamCuda($m) => $body,
            Inner::Qwen3aCpu($m) => $body,
            Inner::Qwen3aCuda($m) => $body,
            Inner::Gemma4aCpu($m) => $body,
            Inner::Gemma4aCuda($m) => $body,
        }
    };
}

/// The family of an HF transformers directory, from its config.json `architectures`.
pub(crate) fn hf_family(model: &Path) -> &'static str {
    let config = if model.is_dir() {
        model.join("config.json")
    } else {
        model.with_file_name("config.json")
    };
    let text = std::fs::read_to_string(config).unwrap_or_default();
    if text.contains("\"ParakeetFor") {
        "parakeet"
    } else if text.contains("\"CanaryFor") {
        "canary"
    } else if text.contains("\"Qwen3ASRFor") || text.contains("\"model_type\": \"qwen3_asr\"") {
        "qwen3a"
    } else if text.contains("\"Gemma4AudioModel\"")
        || text.contains("\"model_type\": \"gemma4_audio\"")
        || text.contains("\"model_type\": \"gemma4\"")
    {
        "gemma4a"
    } else {
        "whisper"
    }
}

impl Engine {
    /// Load a model (format and family sniffed from content) onto the requested home.
    pub fn load(model: &Path, opts: &EngineOptions) -> Result<Engine, StapesError> {
        let format = stapes_formats::sniff(model)?;
        let family = match format {
            Format::Ggml
                if stapes_formats::ggml::kind(model)?
                    == stapes_formats::ggml::GgmlKind::Parakeet =>
            {
                "parakeet"
            }
            Format::Ct2 | Format::Ggml => "whisper",
            Format::Safetensors => hf_family(model),
            Format::Nemo => "nemo",
            Format::Torch => "gigaam",
            Format::Onnx => {
                return Err(StapesError::BadInput(format!(
                    "{}: an ONNX voice-activity model; use `stapes vad`",
                    model.display()
                )))
            }
            other => {
                return Err(StapesError::BadInput(format!(
                    "{}: {other} models are not supported for transcription yet",
                    model.display()
                )))
            }
        };
        // the GPU's process-wide start-up runs while the file is read (dropped, i.e. joined,
        // once the engine is built)
        let _warm = match opts.device {
            DeviceRequest::Auto => Some(stapes_cuda::prewarm(0)),
            DeviceRequest::Cuda(n) => Some(stapes_cuda::prewarm(n)),
            _ => None,
        };
        let engine = match family {
            "whisper" => {
                let ck = {
                    let span = tracing::info_span!(
                        "model.read",
                        tensors = tracing::field::Empty,
                        host_bytes = tracing::field::Empty
                    );
                    let _e = span.enter();
                    let ck = load_weights(model)?;
                    span.record("tensors", ck.tensors.len());
                    // as stored (CTranslate2: f16 in the file's memory map, not copied)
                    let stored: usize = ck.tensors.values().map(|t| t.bytes().len()).sum();
                    span.record("host_bytes", stored as u64);
                    ck
                };
                let engine = Self::from_whisper(&ck, opts)?;
                // the host copy of every tensor goes back to the allocator (tens of ms)
                let _s = tracing::info_span!("model.free").entered();
                drop(ck);
                engine
            }
            "parakeet" => Self::from_parakeet(model, opts)?,
            "gigaam" => Self::from_gigaam(&stapes_models::gigaam::load(model)?, opts)?,
            "qwen3a" => Self::from_qwen3a(&stapes_models::qwen3a::load(model)?, opts)?,
            "gemma4a" => Self::from_gemma4a(&stapes_models::gemma4a::load(model)?, opts)?,
            "canary" => Self::from_canary(
                stapes_models::fastconformer::canary::load_canary_hf(
                    if model.is_dir() {
                        model
                    } else {
                        model.parent().unwrap_or(Path::new("."))
                    },
                )?,
                opts,
            )?,
            // One read of the archive; its config says which family it holds.
            "nemo" => match stapes_models::fastconformer::load_nemo_any(model)? {
                NemoModel::Parakeet(ck) => Self::from_parakeet_checkpoint(&ck, opts)?,
                NemoModel::Canary(ck) => Self::from_canary(ck, opts)?,
            },
            f => {
                return Err(StapesError::BadInput(format!(
                    "{}: {f} models run from the library (stapes_models::fastconformer) but not from `stapes transcribe` yet",
                    model.display()
                )))
            }
        };
        tracing::info!(model = %model.display(), %format, family = engine.family, device = %engine.device, lane = %engine.lane, "model loaded");
        Ok(engine)
    }

    fn from_parakeet(model: &Path, opts: &EngineOptions) -> Result<Engine, StapesError> {
        Self::from_parakeet_checkpoint(&stapes_models::fastconformer::weights::load(model)?, opts)
    }

    fn from_parakeet_checkpoint(
        ckpt: &stapes_models::fastconformer::weights::ParakeetCheckpoint,
        opts: &EngineOptions,
    ) -> Result<Engine, StapesError> {
        Self::on_home(
            "parakeet",
            opts,
            |be, lane| {
                Ok(Inner::ParakeetCpu(Box::new(Parakeet::from_checkpoint(
                    be, ckpt, lane,
                )?)))
            },
            |be, lane| {
                Ok(Inner::ParakeetCuda(Box::new(Parakeet::from_checkpoint(
                    be, ckpt, lane,
                )?)))
            },
        )
    }

    fn from_gigaam(
        ck: &stapes_models::gigaam::GigaamCheckpoint,
        opts: &EngineOptions,
    ) -> Result<Engine, StapesError> {
        Self::on_home(
            "gigaam",
            opts,
            |be, lane| {
                Ok(Inner::GigaamCpu(Box::new(Gigaam::from_checkpoint(
                    be, ck, lane,
                )?)))
            },
            |be, lane| {
                Ok(Inner::GigaamCuda(Box::new(Gigaam::from_checkpoint(
                    be, ck, lane,
                )?)))
            },
        )
    }

    fn from_qwen3a(
        ck: &stapes_models::qwen3a::Qwen3AsrCheckpoint,
        opts: &EngineOptions,
    ) -> Result<Engine, StapesError> {
        Self::on_home(
            "qwen3a",
            opts,
            |be, lane| {
                Ok(Inner::Qwen3aCpu(Box::new(Qwen3Asr::from_checkpoint(
                    be, ck, lane,
                )?)))
            },
            |be, lane| {
                Ok(Inner::Qwen3aCuda(Box::new(Qwen3Asr::from_checkpoint(
                    be, ck, lane,
                )?)))
            },
        )
    }

    fn from_gemma4a(
        ck: &stapes_models::gemma4a::Gemma4AudioCheckpoint,
        opts: &EngineOptions,
    ) -> Result<Engine, StapesError> {
        Self::on_home(
            "gemma4a",
            opts,
            |be, lane| {
                Ok(Inner::Gemma4aCpu(Box::new(Gemma4Audio::from_checkpoint(
                    be, ck, lane,
                )?)))
            },
            |be, lane| {
                Ok(Inner::Gemma4aCuda(Box::new(Gemma4Audio::from_checkpoint(
                    be, ck, lane,
                )?)))
            },
        )
    }

    fn from_canary(ck: CanaryCheckpoint, opts: &EngineOptions) -> Result<Engine, StapesError> {
        // The checkpoint moves into whichever home is picked.
        let ck = std::cell::Cell::new(Some(ck));
        let take = || {
            ck.take()
                .ok_or_else(|| StapesError::Internal("the Canary checkpoint was used twice".into()))
        };
        Self::on_home(
            "canary",
            opts,
            |be, lane| {
                Ok(Inner::CanaryCpu(Box::new(Canary::from_checkpoint(
                    be,
                    take()?,
                    lane,
                )?)))
            },
            |be, lane| {
                Ok(Inner::CanaryCuda(Box::new(Canary::from_checkpoint(
                    be,
                    take()?,
                    lane,
                )?)))
            },
        )
    }

    fn synthetic_canary(config: CanaryConfig, opts: &EngineOptions) -> Result<Engine, StapesError> {
        const SEED: u64 = 0x5EED;
        let cfg = config.clone();
        Self::on_home(
            "canary",
            opts,
            |be, lane| {
                Ok(Inner::CanaryCpu(Box::new(Canary::synthetic(
                    be, config, SEED, lane,
                )?)))
            },
            |be, lane| {
                Ok(Inner::CanaryCuda(Box::new(Canary::synthetic(
                    be, cfg, SEED, lane,
                )?)))
            },
        )
    }

    /// Random weights of a published shape (`whisper-large-v3-turbo`, `whisper-tiny`, …), for
    /// speed measurements where the real weights are not at hand.
    pub fn synthetic(name: &str, opts: &EngineOptions) -> Result<Engine, StapesError> {
        if let Some(config) = stapes_models::fastconformer::ParakeetConfig::published(name) {
            let ckpt =
                stapes_models::fastconformer::weights::synthetic_checkpoint(&config, 0x5EED)?;
            return Self::from_parakeet_checkpoint(&ckpt, opts);
        }
        if let Some(config) = CanaryConfig::published(name) {
            return Self::synthetic_canary(config, opts);
        }
        if let Some(config) = stapes_models::gigaam::GigaamConfig::published(name) {
            let ckpt = stapes_models::gigaam::weights::synthetic_checkpoint(&config, 0x5EED)?;
            return Self::from_gigaam(&ckpt, opts);
        }
        if let Some(config) = stapes_models::gemma4a::Gemma4AudioConfig::published(name) {
            let ckpt = stapes_models::gemma4a::synthetic_checkpoint(&config, 0x5EED)?;
            return Self::from_gemma4a(&ckpt, opts);
        }
        if let Some(config) = stapes_models::qwen3a::Qwen3AsrConfig::published(name) {
            let ckpt = stapes_models::qwen3a::weights::synthetic_checkpoint(&config, 0x5EED)?;
            return Self::from_qwen3a(&ckpt, opts);
        }
        let config = WhisperConfig::published(name).ok_or_else(|| {
            StapesError::Usage(format!(
                "unknown synthetic model `{name}` (whisper-tiny, whisper-base, whisper-small, whisper-medium, whisper-large-v3, whisper-large-v3-turbo, {}, {}, {}, {}, {})",
                stapes_models::fastconformer::ParakeetConfig::PUBLISHED.join(", "),
                CanaryConfig::PUBLISHED.join(", "),
                stapes_models::gigaam::GigaamConfig::PUBLISHED.join(", "),
                stapes_models::qwen3a::Qwen3AsrConfig::PUBLISHED.join(", "),
                stapes_models::gemma4a::Gemma4AudioConfig::PUBLISHED.join(", ")
            ))
        })?;
        let ckpt = synthetic_checkpoint(&config, 0x5EED)?;
        Self::from_whisper(&WhisperWeights::from_checkpoint(ckpt)?, opts)
    }

    fn from_whisper(w: &WhisperWeights, opts: &EngineOptions) -> Result<Engine, StapesError> {
        Self::on_home(
            "whisper",
            opts,
            |be, lane| {
                Ok(Inner::WhisperCpu(Box::new(Whisper::from_weights(
                    be, w, lane,
                )?)))
            },
            |be, lane| {
                Ok(Inner::WhisperCuda(Box::new(Whisper::from_weights(
                    be, w, lane,
                )?)))
            },
        )
    }

    /// Picks the device and lane of `opts`, opens that home and builds the model on it.
    fn on_home(
        family: &'static str,
        opts: &EngineOptions,
        cpu: impl FnOnce(CpuBackend, Lane) -> Result<Inner, StapesError>,
        cuda: impl FnOnce(CudaBackend, Lane) -> Result<Inner, StapesError>,
    ) -> Result<Engine, StapesError> {
        let device = pick_device(opts.device)?;
        let lane = resolve_lane(device, opts.lane).map_err(StapesError::Unavailable)?;
        let open = tracing::info_span!("device.open", %device).entered();
        let inner = match device {
            Device::Cpu => {
                let be = CpuBackend::new(opts.threads.unwrap_or(0))?;
                drop(open);
                let _up = tracing::info_span!("model.upload", %lane).entered();
                cpu(be, lane)?
            }
            Device::Cuda(n) => {
                let be = CudaBackend::new(n)
                    .map_err(|e| StapesError::Unavailable(format!("cuda:{n}: {e}")))?;
                drop(open);
                let up = tracing::info_span!(
                    "model.upload",
                    %lane,
                    device_bytes = tracing::field::Empty
                );
                let _e = up.enter();
                let inner = cuda(be, lane)?;
                if let Inner::WhisperCuda(m) = &inner {
                    up.record("device_bytes", m.backend().memory_usage().1);
                }
                inner
            }
        };
        Ok(Engine {
            gpu_turn: std::sync::Mutex::new(()),
            family,
            device,
            lane,
            inner,
        })
    }

    pub fn family(&self) -> &'static str {
        self.family
    }
    pub fn device(&self) -> Device {
        self.device
    }
    pub fn lane(&self) -> Lane {
        self.lane
    }

    /// Held for the length of one GPU call; `None` on the CPU (calls run side by side there).
    pub(crate) fn gpu_turn(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        match self.device {
            Device::Cpu => None,
            _ => Some(self.gpu_turn.lock().unwrap_or_else(|p| p.into_inner())),
        }
    }
    /// Text of token ids of this model's vocabulary (Whisper: timestamp and control ids
    /// skipped). `--vad` uses it to split a segment's ids where it splits the segment.
    pub fn decode_ids(&self, ids: &[u32]) -> Result<String, StapesError> {
        Ok(match &self.inner {
            Inner::WhisperCpu(m) => m.tokenizer.decode(ids),
            Inner::WhisperCuda(m) => m.tokenizer.decode(ids),
            Inner::ParakeetCpu(m) => m.decode_text(ids)?,
            Inner::ParakeetCuda(m) => m.decode_text(ids)?,
            Inner::CanaryCpu(m) => m.decode_text(ids)?,
            Inner::CanaryCuda(m) => m.decode_text(ids)?,
            Inner::GigaamCpu(m) => m.decode_text(ids)?,
            Inner::GigaamCuda(m) => m.decode_text(ids)?,
            Inner::Qwen3aCpu(m) => m.decode_text(ids)?,
            Inner::Qwen3aCuda(m) => m.decode_text(ids)?,
            Inner::Gemma4aCpu(_) | Inner::Gemma4aCuda(_) => return Err(tower_only()),
        })
    }
    /// Engagement counters of the home (ops, GEMMs per lane, graph replays, declines).
    pub fn counters(&self) -> CounterSnapshot {
        with_model!(&self.inner, m => m.backend().counters().snapshot())
    }

    /// Transcribe 16 kHz mono samples. `progress` receives seconds of audio done.
    pub fn transcribe(
        &self,
        samples: &[f32],
        opts: &TranscribeOptions,
        progress: Option<&dyn Fn(f64)>,
    ) -> Result<Transcript, StapesError> {
        self.transcribe_streaming(samples, opts, progress, &mut |_| {})
    }

    /// [`Self::transcribe`], handing each segment to `on_segment` as soon as it is final
    /// (Whisper: after its 30 s window; one-pass families: at the end).
    pub fn transcribe_streaming(
        &self,
        samples: &[f32],
        opts: &TranscribeOptions,
        progress: Option<&dyn Fn(f64)>,
        on_segment: &mut dyn FnMut(&Segment),
    ) -> Result<Transcript, StapesError> {
        check_samples(samples)?;
        if matches!(self.inner, Inner::CanaryCpu(_) | Inner::CanaryCuda(_)) {
            let canary = crate::canary::CanaryOptions::default();
            return self.transcribe_canary(samples, opts, &canary, progress, on_segment);
        }
        let w = whisper_options(opts);
        let _turn = self.gpu_turn();
        let span = tracing::info_span!(
            "transcribe",
            audio_s = samples.len() as f64 / 16_000.0,
            tokens = tracing::field::Empty
        );
        let _e = span.enter();
        let t = match &self.inner {
            Inner::WhisperCpu(m) => m.transcribe_observed(samples, &w, progress, on_segment)?,
            Inner::WhisperCuda(m) => m.transcribe_observed(samples, &w, progress, on_segment)?,
            // Transducers and CTC take no language, task or prompt: one pass over the input.
            Inner::ParakeetCpu(m) => {
                check_one_pass_options("Parakeet", opts)?;
                m.transcribe(samples)?
            }
            Inner::ParakeetCuda(m) => {
                check_one_pass_options("Parakeet", opts)?;
                m.transcribe(samples)?
            }
            Inner::GigaamCpu(m) => {
                check_gigaam_input(opts, samples)?;
                m.transcribe(samples)?
            }
            Inner::GigaamCuda(m) => {
                check_gigaam_input(opts, samples)?;
                m.transcribe(samples)?
            }
            Inner::Qwen3aCpu(m) => {
                m.transcribe_observed(samples, &qwen3a_options(opts)?, progress, on_segment)?
            }
            Inner::Qwen3aCuda(m) => {
                m.transcribe_observed(samples, &qwen3a_options(opts)?, progress, on_segment)?
            }
            Inner::Gemma4aCpu(_) | Inner::Gemma4aCuda(_) => return Err(tower_only()),
            Inner::CanaryCpu(_) | Inner::CanaryCuda(_) => {
                return Err(StapesError::Internal(
                    "Canary is routed to transcribe_canary above".into(),
                ))
            }
        };
        span.record(
            "tokens",
            t.segments.iter().map(|s| s.tokens.len()).sum::<usize>(),
        );
        // Whisper and Qwen3-ASR hand their segments over as they finish them
        if !matches!(
            self.inner,
            Inner::WhisperCpu(_)
                | Inner::WhisperCuda(_)
                | Inner::Qwen3aCpu(_)
                | Inner::Qwen3aCuda(_)
        ) {
            t.segments.iter().for_each(on_segment);
        }
        if let Some(p) = progress {
            p(samples.len() as f64 / 16_000.0);
        }
        Ok(t)
    }
}

/// What a one-pass model (Parakeet, GigaAM: no prompt) can do with the request: translation is
/// a usage error (it would silently return a transcript); a language or prompt is ignored with
/// a warning.
pub(crate) fn check_one_pass_options(
    family: &str,
    opts: &TranscribeOptions,
) -> Result<(), StapesError> {
    if opts.task == Task::Translate {
        return Err(StapesError::Usage(format!(
            "translation needs a Whisper or Canary model; {family} models only transcribe"
        )));
    }
    if opts.language.is_some() || opts.initial_prompt.is_some() {
        tracing::warn!("{family} models take no language or prompt: ignored");
    }
    Ok(())
}

/// What transcribing with an audio tower alone says: it gives embeddings for its multimodal
/// model's text half, which stapes does not run.
fn tower_only() -> StapesError {
    StapesError::BadInput(
        "a Gemma 4 audio tower gives audio embeddings for Gemma 4's text model, not text; \
         stapes runs the tower (`stapes bench`, the library's stapes_models::gemma4a) but not \
         Gemma 4's text model"
            .into(),
    )
}

/// What Qwen3-ASR takes of a request: a language to force (`auto`/none: the model names it);
/// no translation; a prompt or word timestamps are ignored with a warning. Greedy only, like
/// the transformers pipeline's default.
pub(crate) fn qwen3a_options(
    opts: &TranscribeOptions,
) -> Result<stapes_models::qwen3a::Qwen3AsrOptions, StapesError> {
    if opts.task == Task::Translate {
        return Err(StapesError::Usage(
            "translation needs a Whisper or Canary model; Qwen3-ASR only transcribes".into(),
        ));
    }
    if opts.initial_prompt.is_some() {
        tracing::warn!("Qwen3-ASR models take no prompt here: ignored");
    }
    if opts.word_timestamps {
        tracing::warn!(
            "Qwen3-ASR gives no times: one segment per pass (with --vad, per speech span), no words"
        );
    }
    Ok(stapes_models::qwen3a::Qwen3AsrOptions {
        language: opts.language.clone().filter(|l| l != "auto"),
        max_new_tokens: None,
    })
}

/// GigaAM's request check, and a warning past the length its package transcribes in one pass.
pub(crate) fn check_gigaam_input(
    opts: &TranscribeOptions,
    samples: &[f32],
) -> Result<(), StapesError> {
    check_one_pass_options("GigaAM", opts)?;
    let seconds = samples.len() as f64 / 16_000.0;
    if seconds > stapes_models::gigaam::TRAINED_MAX_S {
        tracing::warn!(
            "{seconds:.0} s in one pass: GigaAM is trained on up to {} s pieces; `--vad` cuts \
             long audio into speech pieces",
            stapes_models::gigaam::TRAINED_MAX_S
        );
    }
    Ok(())
}

/// Samples every family accepts: some, and all finite (one NaN turns every feature frame it
/// reaches into NaN and the transcript into nothing).
pub(crate) fn check_samples(samples: &[f32]) -> Result<(), StapesError> {
    if samples.is_empty() {
        return Err(StapesError::BadInput("the audio holds no samples".into()));
    }
    Ok(stapes_models::check_finite(samples)?)
}

impl Engine {
    /// Time this engine's stages (encode, batched encode, decode step, end to end).
    pub fn bench(
        &self,
        o: &crate::bench::BenchOptions,
    ) -> Result<crate::bench::BenchReport, StapesError> {
        let _turn = self.gpu_turn();
        match &self.inner {
            Inner::WhisperCpu(m) => crate::bench::whisper(m, o),
            Inner::WhisperCuda(m) => crate::bench::whisper(m, o),
            Inner::ParakeetCpu(m) => crate::bench::parakeet(m, o),
            Inner::ParakeetCuda(m) => crate::bench::parakeet(m, o),
            Inner::CanaryCpu(m) => crate::bench::canary(m, o),
            Inner::CanaryCuda(m) => crate::bench::canary(m, o),
            Inner::GigaamCpu(m) => crate::bench::gigaam(m, o),
            Inner::GigaamCuda(m) => crate::bench::gigaam(m, o),
            Inner::Qwen3aCpu(m) => crate::bench::qwen3a(m, o),
            Inner::Qwen3aCuda(m) => crate::bench::qwen3a(m, o),
            Inner::Gemma4aCpu(m) => crate::bench::gemma4a(m, o),
            Inner::Gemma4aCuda(m) => crate::bench::gemma4a(m, o),
        }
    }
}

pub(crate) fn whisper_options(o: &TranscribeOptions) -> WhisperOptions {
    let mut w = WhisperOptions {
        language: o.language.clone(),
        task: match o.task {
            Task::Transcribe => WhisperTask::Transcribe,
            Task::Translate => WhisperTask::Translate,
        },
        beam_size: o.beam_size,
        without_timestamps: o.without_timestamps,
        initial_prompt: o.initial_prompt.clone(),
        condition_on_previous_text: o.condition_on_previous_text,
        word_timestamps: o.word_timestamps,
        ..WhisperOptions::default()
    };
    if let Some(t) = o.temperature {
        w.temperatures = vec![t];
    }
    w
}

/// `auto` takes CUDA device 0 when it is usable, else the CPU; an explicit GPU must exist.
fn pick_device(req: DeviceRequest) -> Result<Device, StapesError> {
    match req {
        DeviceRequest::Cpu => Ok(Device::Cpu),
        DeviceRequest::Auto => Ok(if stapes_cuda::available() {
            Device::Cuda(0)
        } else {
            Device::Cpu
        }),
        DeviceRequest::Cuda(n) => {
            if stapes_cuda::available() {
                Ok(Device::Cuda(n))
            } else {
                Err(StapesError::Unavailable(format!(
                    "cuda:{n}: no usable CUDA driver, libraries or device on this machine"
                )))
            }
        }
        DeviceRequest::Vulkan => Err(StapesError::Unavailable(
            "vulkan: the Vulkan home is not built yet; use --device cpu or cuda".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_must_be_present_and_finite() {
        assert!(check_samples(&[0.0, -1.0, 1.0]).is_ok());
        let msg = |s: &[f32]| match check_samples(s) {
            Err(StapesError::BadInput(m)) => m,
            other => panic!("want BadInput, got {other:?}"),
        };
        assert!(msg(&[]).contains("no samples"));
        let m = msg(&[0.0, 0.5, f32::NAN, f32::INFINITY]);
        assert!(m.contains("sample 2 of 4 is NaN"), "{m}");
        let m = msg(&[0.0, f32::NEG_INFINITY]);
        assert!(m.contains("sample 1 of 2 is -inf"), "{m}");
    }
}
