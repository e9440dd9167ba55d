//! A Qwen3-ASR checkpoint's configuration: the `config.json` of a transformers
//! `Qwen3ASRForConditionalGeneration` directory (`audio_config`, `text_config` and the token ids).

use crate::json_config::{bad, boolean, float, uint};
use crate::Result;
use serde_json::Value;
use std::path::Path;

/// The audio tower (`Qwen3ASREncoder`): three stride-2 conv2d over chunks of mel frames, a
/// Whisper-style transformer with windowed attention, and the projector into the text model.
#[derive(Clone, Debug, PartialEq)]
pub struct AudioConfig {
    pub n_mels: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub ffn_dim: usize,
    /// Channels of the conv stem (`downsample_hidden_size`).
    pub conv_channels: usize,
    /// Half the mel frames of one conv chunk: a chunk is `2·n_window` frames (1 s).
    pub n_window: usize,
    /// Mel frames one attention window spans (8 s); a multiple of `2·n_window`.
    pub n_window_infer: usize,
    /// Sinusoid positions added per chunk (13: the tokens of one full chunk).
    pub max_positions: usize,
    /// Width of the projector's output: the text model's hidden size.
    pub output_dim: usize,
}

impl AudioConfig {
    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads.max(1)
    }

    /// Mel frames of one conv chunk.
    pub fn chunk_frames(&self) -> usize {
        2 * self.n_window
    }

    /// Tokens out of the conv stem for `frames` mel frames of one chunk: three `(k 3, s 2, p 1)`
    /// convolutions; no frames, no tokens.
    pub fn chunk_tokens(frames: usize) -> usize {
        let mut n = frames;
        for _ in 0..3 {
            n = if n == 0 { 0 } else { (n - 1) / 2 + 1 };
        }
        n
    }

    /// Audio tokens for `valid_frames` mel frames: whole chunks, then the rest.
    pub fn tokens(&self, valid_frames: usize) -> usize {
        let c = self.chunk_frames();
        valid_frames / c * Self::chunk_tokens(c) + Self::chunk_tokens(valid_frames % c)
    }

    /// Mel bins after the three convolutions (128 → 16).
    pub fn conv_bins(&self) -> usize {
        Self::chunk_tokens(self.n_mels)
    }

    /// Tokens one attention window holds: a full chunk's tokens times the chunks of a window.
    /// transformers sizes the window from the longest chunk of the batch, which is a full one
    /// whenever a clip has more than one chunk; a clip of one partial chunk is one window either
    /// way.
    pub fn window_tokens(&self) -> usize {
        Self::chunk_tokens(self.chunk_frames()) * (self.n_window_infer / self.chunk_frames())
    }
}

/// The text model (Qwen3): RMS norms, grouped-query attention with per-head q/k RMS norms and
/// rotary positions, SwiGLU feed-forwards.
#[derive(Clone, Debug, PartialEq)]
pub struct TextConfig {
    pub vocab_size: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rms_eps: f32,
    pub rope_theta: f64,
    pub max_positions: usize,
    pub tie_embeddings: bool,
    pub attention_bias: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Qwen3AsrConfig {
    pub audio: AudioConfig,
    pub text: TextConfig,
    /// `<|audio_pad|>`: the prompt positions the audio tokens replace.
    pub audio_token_id: u32,
    /// Generation stops at any of these (`<|endoftext|>`, `<|im_end|>`).
    pub eos_ids: Vec<u32>,
}

/// Qwen's original `config.json` (`thinker_config` with `audio_config`, `text_config` and the
/// token ids inside it) restated as transformers' `qwen3_asr` config. End-of-text ids come from
/// `generation_config.json` beside it when it names them.
fn original_as_transformers(root: &Value, thinker: &Value, path: &Path) -> Result<Value> {
    let part = |k: &str| {
        thinker
            .get(k)
            .cloned()
            .ok_or_else(|| bad(path, format!("`thinker_config` has no `{k}`")))
    };
    let mut v = serde_json::json!({
        "model_type": "qwen3_asr",
        "audio_config": part("audio_config")?,
        "text_config": part("text_config")?,
    });
    for key in ["audio_token_id", "tie_word_embeddings"] {
        if let Some(x) = thinker.get(key).or_else(|| root.get(key)) {
            v[key] = x.clone();
        }
    }
    let gen = path.with_file_name("generation_config.json");
    let eos = std::fs::read_to_string(&gen)
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .and_then(|g| g.get("eos_token_id").cloned());
    if let Some(e) = eos.or_else(|| thinker.get("eos_token_id").cloned()) {
        v["eos_token_id"] = e;
    }
    Ok(v)
}

fn ids(v: &Value, key: &str, default: &[u32], path: &Path) -> Result<Vec<u32>> {
    let one = |x: &Value| {
        x.as_u64()
            .filter(|&n| n <= u32::MAX as u64)
            .map(|n| n as u32)
            .ok_or_else(|| bad(path, format!("`{key}` must hold token ids, got {x}")))
    };
    match v.get(key) {
        None | Some(Value::Null) => Ok(default.to_vec()),
        Some(Value::Array(a)) => a.iter().map(one).collect(),
        Some(x) => Ok(vec![one(x)?]),
    }
}

impl Qwen3AsrConfig {
    /// Defaults are transformers 5.17's (`Qwen3ASREncoderConfig`, `Qwen3Config` as
    /// `Qwen3ASRConfig` builds it, the 1.7B model's shape).
    pub fn from_json(v: &Value, path: &Path) -> Result<Self> {
        if let Some(thinker) = v.get("thinker_config") {
            return Self::from_json(&original_as_transformers(v, thinker, path)?, path);
        }
        let model_type = v.get("model_type").and_then(Value::as_str).unwrap_or("");
        if model_type != "qwen3_asr" {
            return Err(bad(
                path,
                format!("model_type `{model_type}`, expected `qwen3_asr`"),
            ));
        }
        let empty = Value::Object(Default::default());
        let a = v.get("audio_config").unwrap_or(&empty);
        let t = v.get("text_config").unwrap_or(&empty);
        for (cfg, key, want) in [
            (a, "activation_function", "gelu"),
            (t, "hidden_act", "silu"),
        ] {
            if let Some(x) = cfg.get(key).and_then(Value::as_str) {
                if x != want {
                    return Err(bad(
                        path,
                        format!("`{key}` is `{x}`; only `{want}` is read"),
                    ));
                }
            }
        }
        if boolean(a, "scale_embedding", false, path)? {
            return Err(bad(path, "`scale_embedding: true` is not read"));
        }
        let d_model = uint(a, "d_model", 1024, path)?;
        let output_dim = uint(a, "output_dim", 3584, path)?;
        let audio = AudioConfig {
            n_mels: uint(a, "num_mel_bins", 128, path)?,
            d_model,
            n_layers: uint(a, "encoder_layers", 24, path)?,
            n_heads: uint(a, "encoder_attention_heads", 16, path)?,
            ffn_dim: uint(a, "encoder_ffn_dim", 4096, path)?,
            conv_channels: uint(a, "downsample_hidden_size", 480, path)?,
            n_window: uint(a, "n_window", 50, path)?,
            n_window_infer: uint(a, "n_window_infer", 800, path)?,
            max_positions: uint(a, "max_position_embeddings", 13, path)?,
            output_dim,
        };
        let hidden = uint(t, "hidden_size", 2048, path)?;
        let n_heads = uint(t, "num_attention_heads", 16, path)?;
        // Qwen's own configs carry multimodal rotary sections (`rope_scaling.mrope_section`):
        // with audio and text only, every section sees the same position and the rotation is
        // the plain one. Anything else in `rope_scaling` is refused.
        if let Some(scaling) = t.get("rope_scaling").filter(|x| !x.is_null()) {
            let plain = scaling.as_object().is_some_and(|o| {
                o.iter().all(|(k, x)| match k.as_str() {
                    "mrope_section" | "interleaved" | "mrope_interleaved" => true,
                    "rope_type" | "type" => x.as_str().is_some_and(|r| r == "default"),
                    _ => false,
                })
            });
            if !plain {
                return Err(bad(
                    path,
                    format!("rope_scaling {scaling}; only the multimodal sections of the plain rotary are read"),
                ));
            }
        }
        let rope = t.get("rope_parameters").unwrap_or(&empty);
        let rope_type = rope
            .get("rope_type")
            .and_then(Value::as_str)
            .unwrap_or("default");
        if rope_type != "default" {
            return Err(bad(
                path,
                format!("rope_type `{rope_type}`; only the default rotary is read"),
            ));
        }
        let rope_theta = match rope.get("rope_theta") {
            Some(_) => float(rope, "rope_theta", 1e6, path)?,
            None => float(t, "rope_theta", 1e6, path)?,
        };
        let tie = boolean(
            t,
            "tie_word_embeddings",
            boolean(v, "tie_word_embeddings", true, path)?,
            path,
        )?;
        let text = TextConfig {
            vocab_size: uint(t, "vocab_size", 151_936, path)?,
            hidden,
            intermediate: uint(t, "intermediate_size", 6144, path)?,
            n_layers: uint(t, "num_hidden_layers", 28, path)?,
            n_heads,
            n_kv_heads: uint(t, "num_key_value_heads", 8, path)?,
            head_dim: uint(t, "head_dim", hidden / n_heads.max(1), path)?,
            rms_eps: float(t, "rms_norm_eps", 1e-6, path)? as f32,
            rope_theta,
            max_positions: uint(t, "max_position_embeddings", 65_536, path)?,
            tie_embeddings: tie,
            attention_bias: boolean(t, "attention_bias", false, path)?,
        };
        if boolean(t, "use_sliding_window", false, path)? {
            return Err(bad(path, "`use_sliding_window: true` is not read"));
        }
        let cfg = Self {
            audio,
            text,
            audio_token_id: ids(v, "audio_token_id", &[151_676], path)?
                .first()
                .copied()
                .unwrap_or(151_676),
            eos_ids: ids(v, "eos_token_id", &[151_643, 151_645], path)?,
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        Self::from_json(&crate::json_config::read(path)?, path)
    }

    fn validate(&self, path: &Path) -> Result<()> {
        let (a, t) = (&self.audio, &self.text);
        let positive = [
            ("num_mel_bins", a.n_mels),
            ("d_model", a.d_model),
            ("encoder_layers", a.n_layers),
            ("encoder_attention_heads", a.n_heads),
            ("encoder_ffn_dim", a.ffn_dim),
            ("downsample_hidden_size", a.conv_channels),
            ("n_window", a.n_window),
            ("max_position_embeddings (audio)", a.max_positions),
            ("output_dim", a.output_dim),
            ("vocab_size", t.vocab_size),
            ("hidden_size", t.hidden),
            ("intermediate_size", t.intermediate),
            ("num_hidden_layers", t.n_layers),
            ("num_attention_heads", t.n_heads),
            ("num_key_value_heads", t.n_kv_heads),
            ("head_dim", t.head_dim),
        ];
        if let Some((k, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(bad(path, format!("`{k}` must be positive")));
        }
        if a.d_model % a.n_heads != 0 || a.d_model % 2 != 0 {
            return Err(bad(
                path,
                format!(
                    "audio d_model {} is not an even multiple of its {} heads",
                    a.d_model, a.n_heads
                ),
            ));
        }
        if a.n_window_infer == 0 || a.n_window_infer % a.chunk_frames() != 0 {
            return Err(bad(
                path,
                format!(
                    "n_window_infer {} is not a positive multiple of the {}-frame chunk",
                    a.n_window_infer,
                    a.chunk_frames()
                ),
            ));
        }
        if AudioConfig::chunk_tokens(a.chunk_frames()) > a.max_positions {
            return Err(bad(
                path,
                format!(
                    "a {}-frame chunk gives {} tokens, more than the {} positions",
                    a.chunk_frames(),
                    AudioConfig::chunk_tokens(a.chunk_frames()),
                    a.max_positions
                ),
            ));
        }
        if t.n_heads % t.n_kv_heads != 0 {
            return Err(bad(
                path,
                format!(
                    "{} attention heads do not share {} key/value heads evenly",
                    t.n_heads, t.n_kv_heads
                ),
            ));
        }
        if t.head_dim % 2 != 0 {
            return Err(bad(path, format!("odd head_dim {}", t.head_dim)));
        }
        if a.output_dim != t.hidden {
            return Err(bad(
                path,
                format!(
                    "the audio projector gives {} values a token, the text model takes {}",
                    a.output_dim, t.hidden
                ),
            ));
        }
        let vocab = t.vocab_size as u32;
        if let Some(id) = std::iter::once(self.audio_token_id)
            .chain(self.eos_ids.iter().copied())
            .find(|&id| id >= vocab)
        {
            return Err(bad(
                path,
                format!("token id {id} is outside the {vocab}-entry vocabulary"),
            ));
        }
        if self.eos_ids.is_empty() {
            return Err(bad(path, "no eos_token_id"));
        }
        Ok(())
    }

    /// The published shapes, for `--synthetic` (random weights, no tokenizer).
    pub const PUBLISHED: [&'static str; 2] = ["qwen3-asr-0.6b", "qwen3-asr-1.7b"];

    pub fn published(name: &str) -> Option<Self> {
        let name = name.strip_suffix("-audio").unwrap_or(name);
        let (d, layers, heads, ffn, hidden, inter) = match name {
            "qwen3-asr-0.6b" => (896, 18, 14, 3584, 1024, 3072),
            "qwen3-asr-1.7b" => (1024, 24, 16, 4096, 2048, 6144),
            _ => return None,
        };
        Some(Self {
            audio: AudioConfig {
                n_mels: 128,
                d_model: d,
                n_layers: layers,
                n_heads: heads,
                ffn_dim: ffn,
                conv_channels: 480,
                n_window: 50,
                n_window_infer: 800,
                max_positions: 13,
                output_dim: hidden,
            },
            text: TextConfig {
                vocab_size: 151_936,
                hidden,
                intermediate: inter,
                n_layers: 28,
                n_heads: 16,
                n_kv_heads: 8,
                head_dim: 128,
                rms_eps: 1e-6,
                rope_theta: 1e6,
                max_positions: 65_536,
                tie_embeddings: true,
                attention_bias: false,
            },
            audio_token_id: 151_676,
            eos_ids: vec![151_643, 151_645],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_follow_the_chunks() {
        let a = Qwen3AsrConfig::published("qwen3-asr-0.6b").unwrap().audio;
        assert_eq!(AudioConfig::chunk_tokens(100), 13);
        assert_eq!(AudioConfig::chunk_tokens(0), 0);
        assert_eq!(AudioConfig::chunk_tokens(1), 1);
        // transformers' _get_feat_extract_output_lengths: 11 s → 143, 4.37 s (437 frames) → 57
        assert_eq!(a.tokens(1100), 143);
        assert_eq!(a.tokens(437), 57);
        assert_eq!(a.tokens(50), 7);
        assert_eq!(a.window_tokens(), 104);
        assert_eq!(a.conv_bins(), 16);
    }

    #[test]
    fn bad_configs_are_refused_by_name() {
        let p = Path::new("config.json");
        let base = serde_json::json!({
            "model_type": "qwen3_asr",
            "audio_config": {"d_model": 64, "encoder_attention_heads": 4, "output_dim": 48},
            "text_config": {"hidden_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
                            "head_dim": 16, "vocab_size": 200000}
        });
        assert!(Qwen3AsrConfig::from_json(&base, p).is_ok());
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = base.clone();
            f(&mut v);
            Qwen3AsrConfig::from_json(&v, p).unwrap_err().to_string()
        };
        assert!(with(&|v| v["model_type"] = "whisper".into()).contains("qwen3_asr"));
        assert!(with(&|v| v["text_config"]["num_key_value_heads"] = 3.into()).contains("evenly"));
        assert!(with(&|v| v["audio_config"]["output_dim"] = 40.into()).contains("projector"));
        assert!(with(&|v| v["text_config"]["vocab_size"] = 100.into()).contains("outside"));
        assert!(with(&|v| v["audio_config"]["n_window_infer"] = 150.into()).contains("multiple"));
        assert!(with(
            &|v| v["text_config"]["rope_parameters"] = serde_json::json!({"rope_type": "yarn"})
        )
        .contains("yarn"));
        assert!(with(&|v| v["thinker_config"] = serde_json::json!({})).contains("audio_config"));
        assert!(with(&|v| v["text_config"]["rope_scaling"] =
            serde_json::json!({"rope_type": "linear", "factor": 2.0}))
        .contains("rope_scaling"));
        let mut mrope = base.clone();
        mrope["text_config"]["rope_scaling"] = serde_json::json!({"mrope_section": [24, 20, 20], "interleaved": true, "rope_type": "default"});
        assert!(Qwen3AsrConfig::from_json(&mrope, p).is_ok());
        assert!(with(&|v| v["audio_config"]["d_model"] = "x".into()).contains("d_model"));
    }
}
