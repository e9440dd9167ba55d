//! Hyper-parameters of a FastConformer model (Parakeet CTC / RNNT / TDT), read from an HF
//! `config.json` (transformers' `ParakeetCTCConfig` / `ParakeetRNNTConfig` / `ParakeetTDTConfig`)
//! or taken from a published shape for `--synthetic` runs.

use crate::{ModelError, Result};
use serde_json::Value;
use stapes_core::Activation;
use std::path::Path;

/// The FastConformer encoder (`ParakeetEncoderConfig`).
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub intermediate_size: usize,
    /// Activation of the feed-forwards and of the conv module (`hidden_act`, "silu").
    pub activation: Activation,
    pub attention_bias: bool,
    pub convolution_bias: bool,
    /// Depthwise kernel of the conv module (odd).
    pub conv_kernel_size: usize,
    /// Time (and frequency) reduction of the conv subsampling: a power of the stride.
    pub subsampling_factor: usize,
    pub subsampling_channels: usize,
    pub subsampling_kernel: usize,
    pub subsampling_stride: usize,
    pub num_mel_bins: usize,
    /// Multiply the subsampled input by `sqrt(hidden_size)` (`scale_input`, NeMo's `xscaling`).
    pub scale_input: bool,
}

impl EncoderConfig {
    /// Number of strided conv layers in the subsampling stack.
    pub fn subsampling_layers(&self) -> usize {
        let mut n = 0;
        let mut f = self.subsampling_factor;
        while f > 1 && self.subsampling_stride > 1 {
            f /= self.subsampling_stride;
            n += 1;
        }
        n
    }

    /// Frequency bins left after the subsampling (the flattened width is `channels ×` this).
    pub fn subsampled_mels(&self) -> usize {
        let mut f = self.num_mel_bins;
        for _ in 0..self.subsampling_layers() {
            f = conv_out(f, self.subsampling_kernel, self.subsampling_stride);
        }
        f
    }

    /// Encoder frames produced from `n_frames` feature frames.
    pub fn output_frames(&self, n_frames: usize) -> usize {
        let mut t = n_frames;
        for _ in 0..self.subsampling_layers() {
            t = conv_out(t, self.subsampling_kernel, self.subsampling_stride);
        }
        t
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads.max(1)
    }
}

/// Output length of a conv with "same"-style padding `(k-1)/2` on each side.
pub(crate) fn conv_out(n: usize, kernel: usize, stride: usize) -> usize {
    let pad = (kernel.saturating_sub(1) / 2) * 2;
    if n + pad < kernel || stride == 0 {
        return 0;
    }
    (n + pad - kernel) / stride + 1
}

/// Which decoder sits on the encoder.
#[derive(Clone, Debug, PartialEq)]
pub enum HeadConfig {
    /// A 1×1 conv to `vocab_size` logits; `blank` is the last id (`pad_token_id`).
    Ctc { blank: u32 },
    /// LSTM prediction network + joint network; TDT adds a duration head (`durations` non-empty).
    Transducer(TransducerConfig),
}

#[derive(Clone, Debug, PartialEq)]
pub struct TransducerConfig {
    pub blank: u32,
    /// The token fed to the prediction network first (`decoder_start_token_id`, blank if absent).
    pub start_token: u32,
    pub decoder_hidden_size: usize,
    pub num_decoder_layers: usize,
    /// Activation inside the joint network (`hidden_act`, "relu").
    pub joint_activation: Activation,
    pub max_symbols_per_step: usize,
    /// TDT: frames each duration class advances; empty for RNNT.
    pub durations: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ParakeetConfig {
    pub encoder: EncoderConfig,
    pub vocab_size: usize,
    pub head: HeadConfig,
}

impl ParakeetConfig {
    pub fn is_tdt(&self) -> bool {
        matches!(&self.head, HeadConfig::Transducer(t) if !t.durations.is_empty())
    }

    /// "ctc", "rnnt" or "tdt".
    pub fn head_name(&self) -> &'static str {
        match &self.head {
            HeadConfig::Ctc { .. } => "ctc",
            HeadConfig::Transducer(t) if t.durations.is_empty() => "rnnt",
            HeadConfig::Transducer(_) => "tdt",
        }
    }

    /// Reads an HF `config.json`.
    pub fn from_hf_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::Io {
            path: path.to_path_buf(),
            source: e,
        })?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| ModelError::bad_model(path, format!("invalid JSON: {e}")))?;
        Self::from_hf_json(&v, path)
    }

    /// Parses the JSON of an HF `config.json`; `path` names the file in errors.
    pub fn from_hf_json(v: &Value, path: &Path) -> Result<Self> {
        let bad = |d: String| ModelError::bad_model(path, d);
        let model_type = v.get("model_type").and_then(Value::as_str).unwrap_or("");
        let e = v
            .get("encoder_config")
            .ok_or_else(|| bad("no `encoder_config`: not a Parakeet config".into()))?;
        let encoder = encoder_from_json(e, path)?;
        let vocab_size = get_usize(v, "vocab_size", 1025, path)?;
        let head = match model_type {
            "parakeet_ctc" => HeadConfig::Ctc {
                blank: get_usize(v, "pad_token_id", vocab_size.saturating_sub(1), path)? as u32,
            },
            "parakeet_rnnt" | "parakeet_tdt" => {
                let blank = get_usize(v, "blank_token_id", vocab_size.saturating_sub(1), path)?;
                let durations = if model_type == "parakeet_tdt" {
                    match v.get("durations") {
                        None => vec![0, 1, 2, 3, 4],
                        Some(d) => d
                            .as_array()
                            .and_then(|a| {
                                a.iter()
                                    .map(|x| x.as_u64().map(|x| x as usize))
                                    .collect::<Option<Vec<_>>>()
                            })
                            .filter(|d| !d.is_empty())
                            .ok_or_else(|| {
                                bad("`durations` must be a non-empty list of integers".into())
                            })?,
                    }
                } else {
                    Vec::new()
                };
                HeadConfig::Transducer(TransducerConfig {
                    blank: blank as u32,
                    start_token: get_usize(v, "decoder_start_token_id", blank, path)? as u32,
                    decoder_hidden_size: get_usize(v, "decoder_hidden_size", 640, path)?,
                    num_decoder_layers: get_usize(v, "num_decoder_layers", 2, path)?,
                    joint_activation: activation(v, "relu", path)?,
                    max_symbols_per_step: get_usize(v, "max_symbols_per_step", 10, path)?.max(1),
                    durations,
                })
            }
            other => {
                return Err(bad(format!(
                    "model_type `{other}` is not parakeet_ctc, parakeet_rnnt or parakeet_tdt"
                )))
            }
        };
        let cfg = Self {
            encoder,
            vocab_size,
            head,
        };
        cfg.validate().map_err(bad)?;
        Ok(cfg)
    }

    /// Checks the shape relations the model code relies on.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let e = &self.encoder;
        if e.hidden_size == 0 || e.num_heads == 0 || !e.hidden_size.is_multiple_of(e.num_heads) {
            return Err(format!(
                "hidden_size {} must be a positive multiple of num_attention_heads {}",
                e.hidden_size, e.num_heads
            ));
        }
        if !e.hidden_size.is_multiple_of(2) {
            return Err("hidden_size must be even (sin/cos positional pairs)".into());
        }
        if e.conv_kernel_size.is_multiple_of(2) || e.subsampling_kernel.is_multiple_of(2) {
            return Err("conv kernels must be odd".into());
        }
        if e.subsampling_stride < 2
            || e.subsampling_stride.pow(e.subsampling_layers() as u32) != e.subsampling_factor
        {
            return Err(format!(
                "subsampling_factor {} is not a power of the stride {}",
                e.subsampling_factor, e.subsampling_stride
            ));
        }
        if e.subsampled_mels() == 0 || e.subsampling_channels == 0 {
            return Err("the subsampling leaves no frequency bins".into());
        }
        let blank = match &self.head {
            HeadConfig::Ctc { blank } => *blank,
            HeadConfig::Transducer(t) => {
                if t.start_token as usize >= self.vocab_size {
                    return Err(format!(
                        "decoder_start_token_id {} ≥ vocab_size",
                        t.start_token
                    ));
                }
                if t.decoder_hidden_size == 0 || t.num_decoder_layers == 0 {
                    return Err("empty prediction network".into());
                }
                t.blank
            }
        };
        if blank as usize >= self.vocab_size {
            return Err(format!("blank id {blank} ≥ vocab_size {}", self.vocab_size));
        }
        Ok(())
    }

    /// Shapes of published checkpoints (for `--synthetic` speed runs with random weights).
    pub fn published(name: &str) -> Option<Self> {
        let enc = |hidden: usize, layers: usize, mels: usize| EncoderConfig {
            hidden_size: hidden,
            num_layers: layers,
            num_heads: 8,
            intermediate_size: 4 * hidden,
            activation: Activation::Silu,
            attention_bias: true,
            convolution_bias: true,
            conv_kernel_size: 9,
            subsampling_factor: 8,
            subsampling_channels: 256,
            subsampling_kernel: 3,
            subsampling_stride: 2,
            num_mel_bins: mels,
            scale_input: true,
        };
        let tdt = |vocab: usize| {
            HeadConfig::Transducer(TransducerConfig {
                blank: vocab as u32,
                start_token: vocab as u32,
                decoder_hidden_size: 640,
                num_decoder_layers: 2,
                joint_activation: Activation::Relu,
                max_symbols_per_step: 10,
                durations: vec![0, 1, 2, 3, 4],
            })
        };
        Some(match name {
            // 24 × d1024 FastConformer, 128 mels, 1024 BPE pieces + blank.
            "parakeet-tdt-0.6b-v2" => Self {
                encoder: enc(1024, 24, 128),
                vocab_size: 1025,
                head: tdt(1024),
            },
            // Multilingual: 8192 pieces + blank.
            "parakeet-tdt-0.6b-v3" => Self {
                encoder: enc(1024, 24, 128),
                vocab_size: 8193,
                head: tdt(8192),
            },
            "parakeet-ctc-1.1b" => Self {
                encoder: enc(1024, 42, 80),
                vocab_size: 1025,
                head: HeadConfig::Ctc { blank: 1024 },
            },
            "parakeet-rnnt-1.1b" => Self {
                encoder: enc(1024, 42, 80),
                vocab_size: 1025,
                head: HeadConfig::Transducer(TransducerConfig {
                    durations: Vec::new(),
                    ..match tdt(1024) {
                        HeadConfig::Transducer(t) => t,
                        HeadConfig::Ctc { .. } => return None,
                    }
                }),
            },
            _ => return None,
        })
    }

    /// Names `published` knows.
    pub const PUBLISHED: &'static [&'static str] = &[
        "parakeet-tdt-0.6b-v2",
        "parakeet-tdt-0.6b-v3",
        "parakeet-ctc-1.1b",
        "parakeet-rnnt-1.1b",
    ];
}

/// The `encoder_config` object of a Parakeet or Canary `config.json`.
pub(crate) fn encoder_from_json(e: &Value, path: &Path) -> Result<EncoderConfig> {
    Ok(EncoderConfig {
        hidden_size: get_usize(e, "hidden_size", 1024, path)?,
        num_layers: get_usize(e, "num_hidden_layers", 24, path)?,
        num_heads: get_usize(e, "num_attention_heads", 8, path)?,
        intermediate_size: get_usize(e, "intermediate_size", 4096, path)?,
        activation: activation(e, "silu", path)?,
        attention_bias: get_bool(e, "attention_bias", true),
        convolution_bias: get_bool(e, "convolution_bias", true),
        conv_kernel_size: get_usize(e, "conv_kernel_size", 9, path)?,
        subsampling_factor: get_usize(e, "subsampling_factor", 8, path)?,
        subsampling_channels: get_usize(e, "subsampling_conv_channels", 256, path)?,
        subsampling_kernel: get_usize(e, "subsampling_conv_kernel_size", 3, path)?,
        subsampling_stride: get_usize(e, "subsampling_conv_stride", 2, path)?,
        num_mel_bins: get_usize(e, "num_mel_bins", 80, path)?,
        scale_input: get_bool(e, "scale_input", true),
    })
}

pub(crate) fn get_usize(v: &Value, key: &str, default: usize, path: &Path) -> Result<usize> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x.as_u64().map(|x| x as usize).ok_or_else(|| {
            ModelError::bad_model(
                path,
                format!("`{key}` must be a non-negative integer, got {x}"),
            )
        }),
    }
}

pub(crate) fn get_bool(v: &Value, key: &str, default: bool) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(default)
}

pub(crate) fn activation(v: &Value, default: &str, path: &Path) -> Result<Activation> {
    let name = v
        .get("hidden_act")
        .and_then(Value::as_str)
        .unwrap_or(default);
    Ok(match name {
        "silu" | "swish" => Activation::Silu,
        "relu" => Activation::Relu,
        "gelu" => Activation::Gelu,
        "tanh" => Activation::Tanh,
        "sigmoid" => Activation::Sigmoid,
        other => {
            return Err(ModelError::bad_model(
                path,
                format!("hidden_act `{other}` is not supported"),
            ))
        }
    })
}
