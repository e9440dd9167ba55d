//! A Gemma 4 audio tower's configuration: the `config.json` of a transformers `Gemma4AudioModel`
//! save (model_type `gemma4_audio`) or the `audio_config` of a whole Gemma 4 checkpoint
//! (model_type `gemma4`), and the front end's `preprocessor_config.json`.

use crate::json_config::{bad, boolean, float, uint};
use crate::{ModelError, Result};
use serde_json::Value;
use stapes_core::Activation;
use std::path::Path;

/// Where the tower's tensors live in the checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `Gemma4AudioModel.save_pretrained`: the tower's names with no prefix, no projection into
    /// a text model.
    Tower,
    /// A whole `Gemma4ForConditionalGeneration` checkpoint: the tower under
    /// `model.audio_tower.`, its projection into the text model under `model.embed_audio.`;
    /// every other tensor (text and vision models) is left unread.
    Full {
        /// The text model's hidden size: the width `embed_audio` projects into.
        text_hidden: usize,
    },
}

/// The audio tower (`Gemma4AudioConfig`): two stride-2 conv2d + layer norm + ReLU, then
/// conformer layers (macaron feed-forwards, chunked local attention with relative positions,
/// a causal light conv), then `output_proj`.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma4AudioConfig {
    pub layout: Layout,
    pub hidden: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub act: Activation,
    /// Output channels of the two subsampling convs.
    pub conv_channels: [usize; 2],
    /// Kernel of the light conv's causal depthwise conv.
    pub conv_kernel: usize,
    /// Scale of a feed-forward's output before it joins the residual (the macaron ½).
    pub residual_weight: f32,
    /// Query rows per attention block.
    pub chunk: usize,
    /// `attention_context_left`: a query sees itself and `context_left − 2` earlier tokens
    /// (transformers' sliding mask is `0 ≤ q − k < context_left − 1`).
    pub context_left: usize,
    pub context_right: usize,
    /// The tanh soft cap of the attention logits.
    pub logit_cap: f32,
    /// The logit masked keys take (a finite value: a row with no key left is uniform).
    pub invalid_logit: f32,
    /// Whether the linears carry clip bounds (`input_min` … `output_max`).
    pub clipped_linears: bool,
    pub rms_eps: f32,
    /// Bound of the residual-stream clamps (`gradient_clipping`).
    pub grad_clip: f32,
    pub output_dims: usize,
    /// Mel bins of the features (the front end's `feature_size`).
    pub n_mels: usize,
}

/// Output length of a `(k 3, s 2, p 1)` convolution.
pub fn conv_out(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n - 1) / 2 + 1
    }
}

impl Gemma4AudioConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden / self.n_heads.max(1)
    }

    /// Keys before the block a block's context reaches back (`max_past_horizon`).
    pub fn past(&self) -> usize {
        self.context_left.saturating_sub(1)
    }

    /// Keys one block of queries reads: `chunk + past + context_right`.
    pub fn context(&self) -> usize {
        self.chunk + self.past() + self.context_right
    }

    /// Relative positions of the sinusoid table: distances `context/2 … 0`, where transformers'
    /// table counts `chunk + context_left − 1 + context_right` as its context.
    pub fn n_positions(&self) -> usize {
        (self.chunk + self.context_left.saturating_sub(1) + self.context_right) / 2 + 1
    }

    /// Tokens out of the subsampling for `frames` feature frames.
    pub fn tokens(frames: usize) -> usize {
        conv_out(conv_out(frames))
    }

    /// Width of the tower's output: `output_proj_dims`, or the text model's hidden size after
    /// `embed_audio` in a whole checkpoint.
    pub fn embed_dims(&self) -> Option<usize> {
        match self.layout {
            Layout::Tower => None,
            Layout::Full { text_hidden } => Some(text_hidden),
        }
    }
}

/// transformers' `ACT2FN` names stapes has an activation for.
fn activation(name: &str, path: &Path) -> Result<Activation> {
    Ok(match name {
        "silu" | "swish" => Activation::Silu,
        "gelu" => Activation::Gelu,
        "gelu_pytorch_tanh" | "gelu_new" => Activation::GeluTanh,
        "relu" => Activation::Relu,
        _ => {
            return Err(bad(
                path,
                format!(
                    "`hidden_act` is `{name}`; stapes reads silu, gelu, gelu_pytorch_tanh, relu"
                ),
            ))
        }
    })
}

impl Gemma4AudioConfig {
    /// Defaults are transformers 5.17's `Gemma4AudioConfig` (the published tower's shape).
    pub fn from_json(v: &Value, path: &Path) -> Result<Self> {
        let model_type = v.get("model_type").and_then(Value::as_str).unwrap_or("");
        let empty = Value::Object(Default::default());
        let (a, layout) = match model_type {
            "gemma4_audio" => (v, Layout::Tower),
            "gemma4" => {
                let a =
                    match v.get("audio_config") {
                        Some(a @ Value::Object(_)) => a,
                        _ => return Err(bad(
                            path,
                            "a Gemma 4 checkpoint without an `audio_config`: it has no audio tower",
                        )),
                    };
                let t = v.get("text_config").unwrap_or(&empty);
                let text_hidden = uint(t, "hidden_size", 2304, path)?;
                (a, Layout::Full { text_hidden })
            }
            _ => {
                return Err(bad(
                    path,
                    format!("model_type `{model_type}`, expected `gemma4_audio` or `gemma4`"),
                ))
            }
        };
        let act = activation(
            a.get("hidden_act")
                .and_then(Value::as_str)
                .unwrap_or("silu"),
            path,
        )?;
        let channels = match a.get("subsampling_conv_channels") {
            None | Some(Value::Null) => [128, 32],
            Some(Value::Array(x)) if x.len() == 2 => {
                let c = |i: usize| {
                    x[i].as_u64().map(|n| n as usize).ok_or_else(|| {
                        bad(path, "`subsampling_conv_channels` must hold two integers")
                    })
                };
                [c(0)?, c(1)?]
            }
            Some(x) => {
                return Err(bad(
                    path,
                    format!("`subsampling_conv_channels` must hold two integers, got {x}"),
                ))
            }
        };
        let cfg = Self {
            layout,
            hidden: uint(a, "hidden_size", 1024, path)?,
            n_layers: uint(a, "num_hidden_layers", 12, path)?,
            n_heads: uint(a, "num_attention_heads", 8, path)?,
            act,
            conv_channels: channels,
            conv_kernel: uint(a, "conv_kernel_size", 5, path)?,
            residual_weight: float(a, "residual_weight", 0.5, path)? as f32,
            chunk: uint(a, "attention_chunk_size", 12, path)?,
            context_left: uint(a, "attention_context_left", 13, path)?,
            context_right: uint(a, "attention_context_right", 0, path)?,
            logit_cap: float(a, "attention_logit_cap", 50.0, path)? as f32,
            invalid_logit: float(a, "attention_invalid_logits_value", -1e9, path)? as f32,
            clipped_linears: boolean(a, "use_clipped_linears", true, path)?,
            rms_eps: float(a, "rms_norm_eps", 1e-6, path)? as f32,
            // transformers clamps with min(gradient_clipping, the dtype's max): f32's here
            grad_clip: float(a, "gradient_clipping", 1e10, path)?.min(f32::MAX as f64) as f32,
            output_dims: uint(a, "output_proj_dims", 1536, path)?,
            n_mels: 128,
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        Self::from_json(&crate::json_config::read(path)?, path)
    }

    pub(crate) fn validate(&self, path: &Path) -> Result<()> {
        let positive = [
            ("hidden_size", self.hidden),
            ("num_hidden_layers", self.n_layers),
            ("num_attention_heads", self.n_heads),
            ("subsampling_conv_channels[0]", self.conv_channels[0]),
            ("subsampling_conv_channels[1]", self.conv_channels[1]),
            ("conv_kernel_size", self.conv_kernel),
            ("attention_chunk_size", self.chunk),
            ("attention_context_left", self.context_left),
            ("output_proj_dims", self.output_dims),
            ("feature_size", self.n_mels),
        ];
        if let Some((k, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(bad(path, format!("`{k}` must be positive")));
        }
        if let Layout::Full { text_hidden: 0 } = self.layout {
            return Err(bad(path, "`text_config.hidden_size` must be positive"));
        }
        if !self.hidden.is_multiple_of(self.n_heads) || !self.hidden.is_multiple_of(2) {
            return Err(bad(
                path,
                format!(
                    "hidden_size {} is not an even multiple of its {} heads",
                    self.hidden, self.n_heads
                ),
            ));
        }
        // transformers sizes the input projection as (C0 / 4)·C1 inputs, while the subsampling
        // hands it (mel bins after two stride-2 convs)·C1: the two agree only for these C0.
        let bins = conv_out(conv_out(self.n_mels));
        if self.conv_channels[0] / 4 != bins {
            return Err(bad(
                path,
                format!(
                    "subsampling_conv_channels[0] = {}: transformers' input projection then \
                     reads {}·C1 values a token, but {} mel bins leave {bins}·C1",
                    self.conv_channels[0],
                    self.conv_channels[0] / 4,
                    self.n_mels
                ),
            ));
        }
        if !(self.logit_cap.is_finite() && self.logit_cap > 0.0) {
            return Err(bad(
                path,
                format!("attention_logit_cap {} must be positive", self.logit_cap),
            ));
        }
        if self.grad_clip.is_nan()
            || self.grad_clip <= 0.0
            || !self.rms_eps.is_finite()
            || !self.invalid_logit.is_finite()
        {
            return Err(bad(
                path,
                "gradient_clipping must be positive, rms_norm_eps and \
                 attention_invalid_logits_value finite",
            ));
        }
        Ok(())
    }

    /// The published shapes, for `--synthetic` (random weights).
    pub const PUBLISHED: [&'static str; 1] = ["gemma4-audio"];

    /// `gemma4-audio`: transformers 5.17's `Gemma4AudioConfig` defaults (its docstring's
    /// checkpoint is google/gemma-4-e2b-it), a tower saved alone.
    pub fn published(name: &str) -> Option<Self> {
        match name {
            "gemma4-audio" => Some(Self {
                layout: Layout::Tower,
                hidden: 1024,
                n_layers: 12,
                n_heads: 8,
                act: Activation::Silu,
                conv_channels: [128, 32],
                conv_kernel: 5,
                residual_weight: 0.5,
                chunk: 12,
                context_left: 13,
                context_right: 0,
                logit_cap: 50.0,
                invalid_logit: -1e9,
                clipped_linears: true,
                rms_eps: 1e-6,
                grad_clip: 1e10,
                output_dims: 1536,
                n_mels: 128,
            }),
            _ => None,
        }
    }
}

/// The front end (`Gemma4AudioFeatureExtractor`): log-mel of the magnitude STFT over
/// semicausally padded 20 ms frames every 10 ms.
#[derive(Clone, Debug, PartialEq)]
pub struct FrontEndConfig {
    pub n_mels: usize,
    pub frame_length: usize,
    pub hop_length: usize,
    pub fft_length: usize,
    pub min_frequency: f64,
    pub max_frequency: f64,
    pub preemphasis: f64,
    pub preemphasis_htk: bool,
    pub input_scale: f64,
    pub mel_floor: f64,
    pub per_bin_mean: Option<Vec<f64>>,
    pub per_bin_stddev: Option<Vec<f64>>,
    /// The extractor pads a clip with zeros to a multiple of this many samples.
    pub pad_to_multiple_of: usize,
    /// The extractor truncates longer input; stapes refuses it instead.
    pub max_samples: usize,
}

impl Default for FrontEndConfig {
    fn default() -> Self {
        Self {
            n_mels: 128,
            frame_length: 320,
            hop_length: 160,
            fft_length: 512,
            min_frequency: 0.0,
            max_frequency: 8000.0,
            preemphasis: 0.0,
            preemphasis_htk: true,
            input_scale: 1.0,
            mel_floor: 1e-3,
            per_bin_mean: None,
            per_bin_stddev: None,
            pad_to_multiple_of: 128,
            max_samples: 480_000,
        }
    }
}

impl FrontEndConfig {
    /// transformers 5.17's defaults, overridden by a `preprocessor_config.json` (or the
    /// `feature_extractor` entry of a `processor_config.json`); settings stapes does not
    /// compute (dither, other rates) are refused by name.
    pub fn from_json(v: &Value, path: &Path) -> Result<Self> {
        let v = v.get("feature_extractor").unwrap_or(v);
        let d = Self::default();
        let rate = uint(v, "sampling_rate", 16_000, path)?;
        if rate != 16_000 {
            return Err(bad(
                path,
                format!("sampling_rate {rate}; stapes feeds 16 kHz"),
            ));
        }
        let dither = float(v, "dither", 0.0, path)?;
        if dither != 0.0 {
            return Err(bad(
                path,
                format!("dither {dither}: random noise in the features is not reproduced"),
            ));
        }
        let ms = |key: &str, default: f64| -> Result<usize> {
            let x = float(v, key, default, path)?;
            Ok((16_000.0 * x / 1000.0).round().max(0.0) as usize)
        };
        let frame_length = ms("frame_length_ms", 20.0)?;
        let hop_length = ms("hop_length_ms", 10.0)?;
        if frame_length < 2 || hop_length == 0 {
            return Err(bad(path, "frame_length_ms and hop_length_ms are too short"));
        }
        let mut fft_length = frame_length.next_power_of_two();
        if boolean(v, "fft_overdrive", false, path)? {
            fft_length *= 2;
        }
        let n_mels = uint(v, "feature_size", d.n_mels, path)?;
        let bins = |key: &str| -> Result<Option<Vec<f64>>> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Array(a)) if a.len() == n_mels => a
                    .iter()
                    .map(|x| {
                        x.as_f64()
                            .ok_or_else(|| bad(path, format!("`{key}` must hold numbers")))
                    })
                    .collect::<Result<Vec<_>>>()
                    .map(Some),
                Some(_) => Err(bad(path, format!("`{key}` must hold {n_mels} numbers"))),
            }
        };
        let cfg = Self {
            n_mels,
            frame_length,
            hop_length,
            fft_length,
            min_frequency: float(v, "min_frequency", d.min_frequency, path)?,
            max_frequency: float(v, "max_frequency", d.max_frequency, path)?,
            preemphasis: float(v, "preemphasis", d.preemphasis, path)?,
            preemphasis_htk: boolean(v, "preemphasis_htk_flavor", true, path)?,
            input_scale: float(v, "input_scale_factor", d.input_scale, path)?,
            mel_floor: float(v, "mel_floor", d.mel_floor, path)?,
            per_bin_mean: bins("per_bin_mean")?,
            per_bin_stddev: bins("per_bin_stddev")?,
            pad_to_multiple_of: d.pad_to_multiple_of,
            max_samples: d.max_samples,
        };
        let (lo, hi) = (cfg.min_frequency, cfg.max_frequency);
        if n_mels == 0 || lo.is_nan() || hi.is_nan() || lo > hi {
            return Err(bad(
                path,
                "feature_size must be positive, min_frequency ≤ max",
            ));
        }
        Ok(cfg)
    }

    /// The directory's `preprocessor_config.json`, or the defaults where there is none.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("preprocessor_config.json");
        if !path.is_file() {
            return Ok(Self::default());
        }
        let text = std::fs::read_to_string(&path).map_err(|e| ModelError::Io {
            path: path.clone(),
            source: e,
        })?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| bad(&path, format!("preprocessor_config.json is not JSON: {e}")))?;
        Self::from_json(&v, &path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_and_windows() {
        let c = Gemma4AudioConfig::published("gemma4-audio").unwrap();
        assert_eq!(c.context(), 24);
        assert_eq!(c.n_positions(), 13);
        assert_eq!(c.head_dim(), 128);
        // transformers: 1099 frames → 275 tokens, 437 → 110, 30 → 8
        assert_eq!(Gemma4AudioConfig::tokens(1099), 275);
        assert_eq!(Gemma4AudioConfig::tokens(437), 110);
        assert_eq!(Gemma4AudioConfig::tokens(30), 8);
    }

    #[test]
    fn bad_configs_are_refused_by_name() {
        let p = Path::new("config.json");
        let base = serde_json::json!({
            "model_type": "gemma4_audio", "hidden_size": 64, "num_attention_heads": 4,
            "subsampling_conv_channels": [128, 8]
        });
        assert!(Gemma4AudioConfig::from_json(&base, p).is_ok());
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = base.clone();
            f(&mut v);
            Gemma4AudioConfig::from_json(&v, p).unwrap_err().to_string()
        };
        assert!(with(&|v| v["model_type"] = "whisper".into()).contains("gemma4_audio"));
        assert!(with(&|v| v["num_attention_heads"] = 3.into()).contains("heads"));
        assert!(
            with(&|v| v["subsampling_conv_channels"] = serde_json::json!([64, 8]))
                .contains("subsampling_conv_channels")
        );
        assert!(with(&|v| v["hidden_act"] = "mish".into()).contains("mish"));
        assert!(with(&|v| v["hidden_size"] = "x".into()).contains("hidden_size"));
        let full = serde_json::json!({"model_type": "gemma4", "text_config": {"hidden_size": 32}});
        let e = Gemma4AudioConfig::from_json(&full, p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("audio_config"), "{e}");
        let fe = serde_json::json!({"dither": 0.1});
        let e = FrontEndConfig::from_json(&fe, p).unwrap_err().to_string();
        assert!(e.contains("dither"), "{e}");
    }
}
