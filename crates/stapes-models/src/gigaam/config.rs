//! A GigaAM checkpoint's configuration: the omegaconf `cfg` its `.ckpt` carries (read as plain
//! data by the pickle reader), checked and turned into typed fields.

use crate::fastconformer::{HeadConfig, TransducerConfig};
use crate::{ModelError, Result};
use serde_json::Value;
use stapes_audio::features::gigaam::GigaamConfig as FrontendConfig;
use stapes_core::Activation;
use std::path::Path;

/// How the front of the encoder cuts time by `subsampling_factor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subsampling {
    /// Strided `Conv1d`s over the mel channels (v2, v3).
    Conv1d,
    /// Strided `Conv2d`s over (time, mel) from one channel, then a linear (v1).
    Conv2d,
}

/// Position information in self-attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    /// Rotary embeddings applied to the attention input before the q and k projections (v2, v3).
    Rotary,
    /// Transformer-XL relative positions with `pos_bias_u/v` (v1).
    RelPos,
}

/// The norm inside the convolution module, after the depthwise conv.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvNorm {
    BatchNorm,
    LayerNorm,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    pub feat_in: usize,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub ff_expansion_factor: usize,
    pub subsampling: Subsampling,
    pub subs_kernel_size: usize,
    pub subsampling_factor: usize,
    pub attention: AttentionKind,
    pub conv_norm: ConvNorm,
    pub conv_kernel_size: usize,
    /// Rotary: the base of the frequencies (GigaAM passes `pos_emb_max_len` as the base).
    pub pos_emb_max_len: usize,
}

impl EncoderConfig {
    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads.max(1)
    }

    /// Strided convs at the front (each halves time).
    pub fn subsampling_layers(&self) -> usize {
        self.subsampling_factor.max(1).trailing_zeros() as usize
    }

    /// Frames out of one subsampling conv for `n` frames in.
    pub(crate) fn conv_out(&self, n: usize) -> usize {
        let pad = (self.subs_kernel_size - 1) / 2;
        // floor((n + 2·pad − k) / 2) + 1, and nothing when the kernel does not fit
        (n + 2 * pad)
            .checked_sub(self.subs_kernel_size)
            .map_or(0, |v| v / 2 + 1)
    }

    /// Encoder frames for `n_frames` feature frames.
    pub fn output_frames(&self, n_frames: usize) -> usize {
        let mut n = n_frames;
        for _ in 0..self.subsampling_layers() {
            n = self.conv_out(n);
        }
        n
    }

    /// Mel bins after the conv2d stages (their linear reads `channels × this` per frame).
    pub fn subsampled_mels(&self) -> usize {
        let mut n = self.feat_in;
        for _ in 0..self.subsampling_layers() {
            n = self.conv_out(n);
        }
        n
    }
}

/// How ids become text.
#[derive(Clone, Debug, PartialEq)]
pub enum Vocabulary {
    /// One string per id (v1–v3 `ctc`/`rnnt`: a space and the Russian letters).
    Chars(Vec<String>),
    /// A SentencePiece model (`v1_rnnt`, the v3 `e2e` models): `decoding.model_path`, found next
    /// to the checkpoint as `<name>_tokenizer.model` when that path is not on this machine.
    SentencePiece,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GigaamConfig {
    /// `model_name` when the checkpoint records it (`v3_ctc`, `v3_e2e_rnnt`, …).
    pub name: Option<String>,
    pub frontend: FrontendConfig,
    pub encoder: EncoderConfig,
    /// Reuses the FastConformer heads: a CTC projection, or an LSTM transducer (no TDT).
    pub head: HeadConfig,
    /// Classes of the head, blank (the last) included.
    pub num_classes: usize,
    /// Transducers: the width the encoder and prediction projections meet at (0 for CTC).
    pub joint_hidden: usize,
    pub vocabulary: Vocabulary,
    /// `decoding.model_path` as written in the checkpoint.
    pub tokenizer_path: Option<String>,
}

/// Typed reads from the cfg, naming the key and the file on failure.
struct Cfg<'a> {
    path: &'a Path,
}

impl Cfg<'_> {
    fn err(&self, key: &str, detail: &str) -> ModelError {
        ModelError::bad_model(self.path, format!("checkpoint cfg `{key}`: {detail}"))
    }
    fn section<'v>(&self, v: &'v Value, key: &str) -> Result<&'v Value> {
        v.get(key)
            .filter(|s| s.is_object())
            .ok_or_else(|| self.err(key, "missing (not a GigaAM checkpoint?)"))
    }
    fn usize_or(&self, v: &Value, section: &str, key: &str, default: usize) -> Result<usize> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(x) => x
                .as_u64()
                .filter(|&n| n > 0 && n < (1 << 24))
                .map(|n| n as usize)
                .ok_or_else(|| {
                    self.err(&format!("{section}.{key}"), &format!("{x} is not a size"))
                }),
        }
    }
    fn usize(&self, v: &Value, section: &str, key: &str) -> Result<usize> {
        match v.get(key) {
            None | Some(Value::Null) => Err(self.err(&format!("{section}.{key}"), "missing")),
            Some(_) => self.usize_or(v, section, key, 0),
        }
    }
    fn str_or<'v>(&self, v: &'v Value, key: &str, default: &'v str) -> &'v str {
        v.get(key).and_then(Value::as_str).unwrap_or(default)
    }
}

impl GigaamConfig {
    /// Reads the `cfg` of a GigaAM `.ckpt` (as JSON); `path` names the file in errors.
    pub fn from_cfg(cfg: &Value, path: &Path) -> Result<Self> {
        let c = Cfg { path };
        let pre = c.section(cfg, "preprocessor")?;
        let enc = c.section(cfg, "encoder")?;
        let head = c.section(cfg, "head")?;
        let decoding = c.section(cfg, "decoding")?;

        // gigaam.preprocess.FeatureExtractor: hop sr/100, win and n_fft sr/40, centred, unless set
        let sr = c.usize_or(pre, "preprocessor", "sample_rate", 16_000)?;
        if sr != 16_000 {
            return Err(c.err(
                "preprocessor.sample_rate",
                &format!("{sr} Hz (only 16000 is known)"),
            ));
        }
        let win = c.usize_or(pre, "preprocessor", "win_length", sr / 40)?;
        let frontend = FrontendConfig {
            sample_rate: sr as u32,
            n_mels: c.usize_or(pre, "preprocessor", "features", 64)?,
            n_fft: c.usize_or(pre, "preprocessor", "n_fft", sr / 40)?,
            win_length: win,
            hop_length: c.usize_or(pre, "preprocessor", "hop_length", sr / 100)?,
            center: pre.get("center").and_then(Value::as_bool).unwrap_or(true),
            bf16_buffers: false,
        };
        if frontend.win_length > frontend.n_fft {
            return Err(c.err("preprocessor.win_length", "longer than n_fft"));
        }
        // torchaudio's default scale, the only one the front end computes
        if let Some(s) = pre.get("mel_scale").and_then(Value::as_str) {
            if s != "htk" {
                return Err(c.err("preprocessor.mel_scale", &format!("`{s}` (only `htk`)")));
            }
        }
        if pre.get("mel_norm").is_some_and(|v| !v.is_null()) {
            return Err(c.err("preprocessor.mel_norm", "set (only none is known)"));
        }

        let subsampling = match c.str_or(enc, "subsampling", "conv2d") {
            "conv1d" => Subsampling::Conv1d,
            "conv2d" => Subsampling::Conv2d,
            other => return Err(c.err("encoder.subsampling", &format!("`{other}`"))),
        };
        let attention = match c.str_or(enc, "self_attention_model", "rotary") {
            "rotary" => AttentionKind::Rotary,
            "rel_pos" => AttentionKind::RelPos,
            other => return Err(c.err("encoder.self_attention_model", &format!("`{other}`"))),
        };
        let conv_norm = match c.str_or(enc, "conv_norm_type", "batch_norm") {
            "batch_norm" => ConvNorm::BatchNorm,
            "layer_norm" => ConvNorm::LayerNorm,
            other => return Err(c.err("encoder.conv_norm_type", &format!("`{other}`"))),
        };
        let encoder = EncoderConfig {
            feat_in: c.usize_or(enc, "encoder", "feat_in", 64)?,
            n_layers: c.usize_or(enc, "encoder", "n_layers", 16)?,
            d_model: c.usize_or(enc, "encoder", "d_model", 768)?,
            n_heads: c.usize_or(enc, "encoder", "n_heads", 16)?,
            ff_expansion_factor: c.usize_or(enc, "encoder", "ff_expansion_factor", 4)?,
            subsampling,
            subs_kernel_size: c.usize_or(enc, "encoder", "subs_kernel_size", 3)?,
            subsampling_factor: c.usize_or(enc, "encoder", "subsampling_factor", 4)?,
            attention,
            conv_norm,
            conv_kernel_size: c.usize_or(enc, "encoder", "conv_kernel_size", 31)?,
            pos_emb_max_len: c.usize_or(enc, "encoder", "pos_emb_max_len", 5000)?,
        };
        let e = &encoder;
        if !e.d_model.is_multiple_of(e.n_heads) || !e.head_dim().is_multiple_of(2) {
            return Err(c.err(
                "encoder.n_heads",
                &format!(
                    "{} heads do not split d_model {} into even halves",
                    e.n_heads, e.d_model
                ),
            ));
        }
        if !e.subsampling_factor.is_power_of_two() || e.subsampling_factor < 2 {
            return Err(c.err("encoder.subsampling_factor", "not a power of two ≥ 2"));
        }
        if e.subs_kernel_size.is_multiple_of(2) || e.conv_kernel_size.is_multiple_of(2) {
            return Err(c.err("encoder.conv_kernel_size", "kernels must be odd"));
        }
        if e.feat_in != frontend.n_mels {
            return Err(c.err(
                "encoder.feat_in",
                &format!("{} inputs for {} mel features", e.feat_in, frontend.n_mels),
            ));
        }

        let target = head.get("_target_").and_then(Value::as_str).unwrap_or("");
        let mut joint_hidden = 0;
        let (head_cfg, num_classes) = if head.get("decoder").is_some()
            || target.ends_with("RNNTHead")
        {
            let dec = c.section(head, "decoder")?;
            let n = c.usize(dec, "head.decoder", "num_classes")?;
            let blank = (n - 1) as u32;
            let max_symbols = c.usize_or(decoding, "decoding", "max_symbols_per_step", 10)?;
            let joint = c.section(head, "joint")?;
            joint_hidden = c.usize(joint, "head.joint", "joint_hidden")?;
            if c.usize(joint, "head.joint", "num_classes")? != n {
                return Err(c.err("head.joint.num_classes", "differs from head.decoder's"));
            }
            (
                HeadConfig::Transducer(TransducerConfig {
                    blank,
                    start_token: blank,
                    decoder_hidden_size: c.usize(dec, "head.decoder", "pred_hidden")?,
                    num_decoder_layers: c.usize_or(dec, "head.decoder", "pred_rnn_layers", 1)?,
                    joint_activation: Activation::Relu,
                    max_symbols_per_step: max_symbols,
                    durations: Vec::new(),
                }),
                n,
            )
        } else {
            let n = c.usize(head, "head", "num_classes")?;
            (
                HeadConfig::Ctc {
                    blank: (n - 1) as u32,
                },
                n,
            )
        };

        let vocabulary = match decoding.get("vocabulary") {
            Some(Value::Array(items)) => Vocabulary::Chars(
                items
                    .iter()
                    .map(|v| {
                        v.as_str().map(str::to_string).ok_or_else(|| {
                            c.err("decoding.vocabulary", &format!("entry {v} is not a string"))
                        })
                    })
                    .collect::<Result<_>>()?,
            ),
            _ => Vocabulary::SentencePiece,
        };
        if let Vocabulary::Chars(v) = &vocabulary {
            if v.len() + 1 != num_classes {
                return Err(c.err(
                    "decoding.vocabulary",
                    &format!(
                        "{} entries for a head of {num_classes} classes (blank last)",
                        v.len()
                    ),
                ));
            }
        }
        Ok(Self {
            name: cfg
                .get("model_name")
                .and_then(Value::as_str)
                .map(str::to_string),
            frontend,
            encoder,
            head: head_cfg,
            num_classes,
            joint_hidden,
            vocabulary,
            tokenizer_path: decoding
                .get("model_path")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }

    /// Shapes `--synthetic` knows (GigaAM v3, character vocabulary).
    pub const PUBLISHED: &'static [&'static str] = &["gigaam-v3-ctc", "gigaam-v3-rnnt"];

    /// The published configuration of `name` (the `cfg` the v3 checkpoints carry).
    pub fn published(name: &str) -> Option<Self> {
        let head = match name {
            "gigaam-v3-ctc" => serde_json::json!({
                "_target_": "gigaam.decoder.CTCHead", "feat_in": 768, "num_classes": 34
            }),
            "gigaam-v3-rnnt" => serde_json::json!({
                "_target_": "gigaam.decoder.RNNTHead",
                "decoder": {"pred_hidden": 320, "pred_rnn_layers": 1, "num_classes": 34},
                "joint": {"enc_hidden": 768, "pred_hidden": 320, "joint_hidden": 320,
                          "num_classes": 34}
            }),
            _ => return None,
        };
        let vocab: Vec<String> = std::iter::once(" ".to_string())
            .chain(('а'..='я').map(String::from))
            .collect();
        let cfg = serde_json::json!({
            "model_name": name,
            "preprocessor": {"sample_rate": 16000, "features": 64, "win_length": 320,
                             "hop_length": 160, "mel_scale": "htk", "n_fft": 320,
                             "mel_norm": null, "center": false},
            "encoder": {"feat_in": 64, "n_layers": 16, "d_model": 768, "subsampling_factor": 4,
                        "ff_expansion_factor": 4, "self_attention_model": "rotary",
                        "pos_emb_max_len": 5000, "n_heads": 16, "conv_kernel_size": 5,
                        "subs_kernel_size": 5, "subsampling": "conv1d",
                        "conv_norm_type": "layer_norm"},
            "head": head,
            "decoding": {"vocabulary": vocab},
        });
        Self::from_cfg(&cfg, Path::new("<published>")).ok()
    }

    /// "ctc" or "rnnt".
    pub fn head_name(&self) -> &'static str {
        match self.head {
            HeadConfig::Ctc { .. } => "ctc",
            HeadConfig::Transducer(_) => "rnnt",
        }
    }
}
