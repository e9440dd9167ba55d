//! Qwen3-ASR's weight names (the transformers layout, `Qwen3ASRForConditionalGeneration`) and the
//! loader of its directories.

use super::config::Qwen3AsrConfig;
use crate::{ModelError, Result};
use stapes_core::HostTensor;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The audio tower's prefix.
pub const AUDIO: &str = "model.audio_tower";
/// The projector from the tower into the text model.
pub const PROJECTOR: &str = "model.multi_modal_projector";
/// The text model's prefix.
pub const TEXT: &str = "model.language_model";
/// The logits projection when it is not tied to the token embedding.
pub const LM_HEAD: &str = "lm_head.weight";

pub fn audio_layer(i: usize) -> String {
    format!("{AUDIO}.layers.{i}")
}

pub fn text_layer(i: usize) -> String {
    format!("{TEXT}.layers.{i}")
}

/// The transformers name of a tensor of Qwen's original layout (`thinker.*`: the projector
/// inside the audio tower as `proj1`/`proj2`, the text model as `thinker.model`); other names
/// pass through.
pub fn transformers_name(name: &str) -> String {
    let Some(rest) = name.strip_prefix("thinker.") else {
        return name.to_string();
    };
    if let Some(r) = rest.strip_prefix("audio_tower.proj1.") {
        format!("{PROJECTOR}.linear_1.{r}")
    } else if let Some(r) = rest.strip_prefix("audio_tower.proj2.") {
        format!("{PROJECTOR}.linear_2.{r}")
    } else if let Some(r) = rest.strip_prefix("audio_tower.") {
        format!("{AUDIO}.{r}")
    } else if let Some(r) = rest.strip_prefix("model.") {
        format!("{TEXT}.{r}")
    } else {
        rest.to_string()
    }
}

/// Every tensor the model reads, with its shape (PyTorch's order).
pub fn expected_shapes(cfg: &Qwen3AsrConfig) -> Vec<(String, Vec<usize>)> {
    let (a, t) = (&cfg.audio, &cfg.text);
    let mut v: Vec<(String, Vec<usize>)> = Vec::new();
    let linear = |v: &mut Vec<(String, Vec<usize>)>, p: &str, n: usize, k: usize, bias| {
        v.push((format!("{p}.weight"), vec![n, k]));
        if bias {
            v.push((format!("{p}.bias"), vec![n]));
        }
    };
    let c = a.conv_channels;
    for (i, cin) in [(1, 1), (2, c), (3, c)] {
        v.push((format!("{AUDIO}.conv2d{i}.weight"), vec![c, cin, 3, 3]));
        v.push((format!("{AUDIO}.conv2d{i}.bias"), vec![c]));
    }
    linear(
        &mut v,
        &format!("{AUDIO}.conv_out"),
        a.d_model,
        c * a.conv_bins(),
        false,
    );
    let norm = |v: &mut Vec<(String, Vec<usize>)>, p: String, n: usize| {
        v.push((format!("{p}.weight"), vec![n]));
        v.push((format!("{p}.bias"), vec![n]));
    };
    for i in 0..a.n_layers {
        let p = audio_layer(i);
        for proj in ["q_proj", "k_proj", "v_proj", "out_proj"] {
            linear(
                &mut v,
                &format!("{p}.self_attn.{proj}"),
                a.d_model,
                a.d_model,
                true,
            );
        }
        norm(&mut v, format!("{p}.self_attn_layer_norm"), a.d_model);
        linear(&mut v, &format!("{p}.fc1"), a.ffn_dim, a.d_model, true);
        linear(&mut v, &format!("{p}.fc2"), a.d_model, a.ffn_dim, true);
        norm(&mut v, format!("{p}.final_layer_norm"), a.d_model);
    }
    norm(&mut v, format!("{AUDIO}.ln_post"), a.d_model);
    linear(
        &mut v,
        &format!("{PROJECTOR}.linear_1"),
        a.d_model,
        a.d_model,
        true,
    );
    linear(
        &mut v,
        &format!("{PROJECTOR}.linear_2"),
        a.output_dim,
        a.d_model,
        true,
    );

    let (h, dh) = (t.hidden, t.head_dim);
    v.push((format!("{TEXT}.embed_tokens.weight"), vec![t.vocab_size, h]));
    for i in 0..t.n_layers {
        let p = text_layer(i);
        v.push((format!("{p}.input_layernorm.weight"), vec![h]));
        let bias = t.attention_bias;
        linear(
            &mut v,
            &format!("{p}.self_attn.q_proj"),
            t.n_heads * dh,
            h,
            bias,
        );
        linear(
            &mut v,
            &format!("{p}.self_attn.k_proj"),
            t.n_kv_heads * dh,
            h,
            bias,
        );
        linear(
            &mut v,
            &format!("{p}.self_attn.v_proj"),
            t.n_kv_heads * dh,
            h,
            bias,
        );
        linear(
            &mut v,
            &format!("{p}.self_attn.o_proj"),
            h,
            t.n_heads * dh,
            bias,
        );
        v.push((format!("{p}.self_attn.q_norm.weight"), vec![dh]));
        v.push((format!("{p}.self_attn.k_norm.weight"), vec![dh]));
        v.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        linear(
            &mut v,
            &format!("{p}.mlp.gate_proj"),
            t.intermediate,
            h,
            false,
        );
        linear(
            &mut v,
            &format!("{p}.mlp.up_proj"),
            t.intermediate,
            h,
            false,
        );
        linear(
            &mut v,
            &format!("{p}.mlp.down_proj"),
            h,
            t.intermediate,
            false,
        );
    }
    v.push((format!("{TEXT}.norm.weight"), vec![h]));
    if !t.tie_embeddings {
        v.push((LM_HEAD.to_string(), vec![t.vocab_size, h]));
    }
    v
}

/// A Qwen3-ASR checkpoint in host memory, every tensor widened to f32.
pub struct Qwen3AsrCheckpoint {
    pub config: Qwen3AsrConfig,
    pub tensors: BTreeMap<String, HostTensor>,
    /// The directory (or `<synthetic>`).
    pub path: PathBuf,
    /// `tokenizer.json` beside the weights, when there is one.
    pub tokenizer_file: Option<PathBuf>,
}

/// Checks that `tensors` holds every expected tensor in its shape and nothing unknown (a tied
/// model may still carry `lm_head.weight`, which is then not read).
pub fn validate(
    cfg: &Qwen3AsrConfig,
    tensors: &BTreeMap<String, HostTensor>,
    path: &Path,
) -> Result<()> {
    crate::check_tensors(
        &expected_shapes(cfg),
        tensors,
        path,
        |n| n == LM_HEAD,
        "Qwen3-ASR",
    )
}

/// Loads a Qwen3-ASR directory (`config.json` + safetensors, sharded or not, any float dtype)
/// in transformers' layout or Qwen's original one (`thinker_config`, `thinker.*` tensors), or
/// the directory of a `config.json` / safetensors file named directly.
pub fn load(path: &Path) -> Result<Qwen3AsrCheckpoint> {
    let dir = if path.is_dir() {
        path
    } else {
        path.parent().unwrap_or(Path::new("."))
    };
    let config = Qwen3AsrConfig::from_file(&dir.join("config.json"))?;
    let st = stapes_formats::safetensors_dir::read_dir(dir)?;
    let mut tensors = BTreeMap::new();
    for (name, raw) in &st.tensors {
        if raw.dtype.is_quantized() {
            return Err(ModelError::bad_tensor(
                &st.path,
                name,
                format!("unexpected dtype {}", raw.dtype),
            ));
        }
        let t = HostTensor::new(raw.shape.clone(), raw.to_f32())
            .map_err(|e| ModelError::bad_tensor(&st.path, name, e.to_string()))?;
        let name = transformers_name(name);
        if tensors.insert(name.clone(), t).is_some() {
            return Err(ModelError::bad_tensor(
                &st.path,
                name,
                "stored twice (under Qwen's and transformers' names)",
            ));
        }
    }
    validate(&config, &tensors, &st.path)?;
    let tok = dir.join("tokenizer.json");
    Ok(Qwen3AsrCheckpoint {
        config,
        tensors,
        path: dir.to_path_buf(),
        tokenizer_file: tok.is_file().then_some(tok),
    })
}

/// Random weights of `config`'s shapes (fan-in scaled), for speed measurements.
pub fn synthetic_checkpoint(config: &Qwen3AsrConfig, seed: u64) -> Result<Qwen3AsrCheckpoint> {
    let tensors = crate::random_weights(expected_shapes(config), seed, |name| {
        name.contains("norm") && name.ends_with("weight")
    });
    Ok(Qwen3AsrCheckpoint {
        config: config.clone(),
        tensors,
        path: PathBuf::from("<synthetic>"),
        tokenizer_file: None,
    })
}
