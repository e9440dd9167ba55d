//! The Gemma 4 audio tower's weight names (transformers' `Gemma4AudioModel`, alone or inside a
//! whole Gemma 4 checkpoint) and the loader of its directories.

use super::config::{FrontEndConfig, Gemma4AudioConfig, Layout};
use crate::{ModelError, Result};
use stapes_core::HostTensor;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The tower's prefix inside a whole Gemma 4 checkpoint.
pub const FULL_TOWER: &str = "model.audio_tower.";
/// The projection into the text model inside a whole Gemma 4 checkpoint.
pub const FULL_EMBED: &str = "model.embed_audio.";

/// The clip bounds a clippable linear carries beside its `linear.weight` (0-d tensors).
pub const CLIP_BOUNDS: [&str; 4] = ["input_min", "input_max", "output_min", "output_max"];

/// Prefix of the tower's names in `cfg`'s layout.
pub fn tower_prefix(cfg: &Gemma4AudioConfig) -> &'static str {
    match cfg.layout {
        Layout::Tower => "",
        Layout::Full { .. } => FULL_TOWER,
    }
}

pub fn layer(cfg: &Gemma4AudioConfig, i: usize) -> String {
    format!("{}layers.{i}", tower_prefix(cfg))
}

/// The clippable linears of one layer: (name under the layer, outputs, inputs).
pub fn clippable_linears(cfg: &Gemma4AudioConfig) -> Vec<(&'static str, usize, usize)> {
    let d = cfg.hidden;
    vec![
        ("feed_forward1.ffw_layer_1", 4 * d, d),
        ("feed_forward1.ffw_layer_2", d, 4 * d),
        ("feed_forward2.ffw_layer_1", 4 * d, d),
        ("feed_forward2.ffw_layer_2", d, 4 * d),
        ("self_attn.q_proj", d, d),
        ("self_attn.k_proj", d, d),
        ("self_attn.v_proj", d, d),
        ("self_attn.post", d, d),
        ("lconv1d.linear_start", 2 * d, d),
        ("lconv1d.linear_end", d, d),
    ]
}

/// Every tensor the model reads, with its shape (PyTorch's order; clip bounds are 0-d).
pub fn expected_shapes(cfg: &Gemma4AudioConfig) -> Vec<(String, Vec<usize>)> {
    let p = tower_prefix(cfg);
    let d = cfg.hidden;
    let [c0, c1] = cfg.conv_channels;
    let mut v: Vec<(String, Vec<usize>)> = Vec::new();
    let sub = format!("{p}subsample_conv_projection");
    v.push((format!("{sub}.layer0.conv.weight"), vec![c0, 1, 3, 3]));
    v.push((format!("{sub}.layer0.norm.weight"), vec![c0]));
    v.push((format!("{sub}.layer1.conv.weight"), vec![c1, c0, 3, 3]));
    v.push((format!("{sub}.layer1.norm.weight"), vec![c1]));
    v.push((
        format!("{sub}.input_proj_linear.weight"),
        vec![d, c0 / 4 * c1],
    ));
    for i in 0..cfg.n_layers {
        let l = layer(cfg, i);
        for (name, n, k) in clippable_linears(cfg) {
            v.push((format!("{l}.{name}.linear.weight"), vec![n, k]));
            if cfg.clipped_linears {
                for b in CLIP_BOUNDS {
                    v.push((format!("{l}.{name}.{b}"), vec![]));
                }
            }
        }
        for ff in ["feed_forward1", "feed_forward2"] {
            v.push((format!("{l}.{ff}.pre_layer_norm.weight"), vec![d]));
            v.push((format!("{l}.{ff}.post_layer_norm.weight"), vec![d]));
        }
        v.push((format!("{l}.self_attn.relative_k_proj.weight"), vec![d, d]));
        v.push((format!("{l}.self_attn.per_dim_scale"), vec![cfg.head_dim()]));
        v.push((
            format!("{l}.lconv1d.depthwise_conv1d.weight"),
            vec![d, 1, cfg.conv_kernel],
        ));
        v.push((format!("{l}.lconv1d.pre_layer_norm.weight"), vec![d]));
        v.push((format!("{l}.lconv1d.conv_norm.weight"), vec![d]));
        for n in ["norm_pre_attn", "norm_post_attn", "norm_out"] {
            v.push((format!("{l}.{n}.weight"), vec![d]));
        }
    }
    v.push((format!("{p}output_proj.weight"), vec![cfg.output_dims, d]));
    v.push((format!("{p}output_proj.bias"), vec![cfg.output_dims]));
    if let Layout::Full { text_hidden } = cfg.layout {
        v.push((
            format!("{FULL_EMBED}embedding_projection.weight"),
            vec![text_hidden, cfg.output_dims],
        ));
    }
    v
}

/// A Gemma 4 audio checkpoint in host memory: the tower's tensors (and `embed_audio`'s) widened
/// to f32, nothing else.
pub struct Gemma4AudioCheckpoint {
    pub config: Gemma4AudioConfig,
    pub front_end: FrontEndConfig,
    pub tensors: BTreeMap<String, HostTensor>,
    /// The directory (or `<synthetic>`).
    pub path: PathBuf,
}

/// Whether `name` belongs to the part of the checkpoint stapes reads.
fn is_audio(cfg: &Gemma4AudioConfig, name: &str) -> bool {
    match cfg.layout {
        Layout::Tower => true,
        Layout::Full { .. } => name.starts_with(FULL_TOWER) || name.starts_with(FULL_EMBED),
    }
}

/// Checks that `tensors` holds every expected tensor in its shape and nothing unknown (in a whole
/// checkpoint: nothing unknown under the audio prefixes).
pub fn validate(
    cfg: &Gemma4AudioConfig,
    tensors: &BTreeMap<String, HostTensor>,
    path: &Path,
) -> Result<()> {
    let expected = expected_shapes(cfg);
    crate::check_tensors(
        &expected,
        tensors,
        path,
        |n| !is_audio(cfg, n),
        "Gemma 4 audio tower",
    )?;
    match expected.iter().map(|(n, _)| n).find(|n| {
        CLIP_BOUNDS.iter().any(|b| n.ends_with(b))
            && tensors
                .get(*n)
                .is_some_and(|t| t.data.iter().any(|v| v.is_nan()))
    }) {
        Some(name) => Err(ModelError::bad_tensor(path, name, "a clip bound is NaN")),
        None => Ok(()),
    }
}

/// Loads a transformers `Gemma4AudioModel` directory or the audio part of a whole Gemma 4
/// checkpoint (`config.json` + safetensors, sharded or not, any float dtype), or the directory of
/// a file named directly. Only the audio tensors are widened; the rest stay in the memory map.
pub fn load(path: &Path) -> Result<Gemma4AudioCheckpoint> {
    let dir = if path.is_dir() {
        path
    } else {
        path.parent().unwrap_or(Path::new("."))
    };
    let mut config = Gemma4AudioConfig::from_file(&dir.join("config.json"))?;
    let front_end = FrontEndConfig::from_dir(dir)?;
    config.n_mels = front_end.n_mels;
    config.validate(&dir.join("preprocessor_config.json"))?;
    let st = stapes_formats::safetensors_dir::read_dir(dir)?;
    let mut tensors = BTreeMap::new();
    for (name, raw) in st.tensors.iter().filter(|(n, _)| is_audio(&config, n)) {
        if raw.dtype.is_quantized() {
            return Err(ModelError::bad_tensor(
                &st.path,
                name,
                format!("unexpected dtype {}", raw.dtype),
            ));
        }
        let t = HostTensor::new(raw.shape.clone(), raw.to_f32())
            .map_err(|e| ModelError::bad_tensor(&st.path, name, e.to_string()))?;
        tensors.insert(name.clone(), t);
    }
    validate(&config, &tensors, &st.path)?;
    Ok(Gemma4AudioCheckpoint {
        config,
        front_end,
        tensors,
        path: dir.to_path_buf(),
    })
}

/// Random weights of `config`'s shapes (fan-in scaled, clip bounds open), for speed measurements.
pub fn synthetic_checkpoint(
    config: &Gemma4AudioConfig,
    seed: u64,
) -> Result<Gemma4AudioCheckpoint> {
    let mut tensors = crate::random_weights(expected_shapes(config), seed, |name| {
        name.contains("norm") && name.ends_with("weight")
    });
    // clip bounds wide open: random activations must not be clamped into meaning nothing
    for (name, t) in tensors.iter_mut() {
        if name.ends_with("_min") {
            t.data.fill(f32::NEG_INFINITY);
        } else if name.ends_with("_max") {
            t.data.fill(f32::INFINITY);
        }
    }
    let front_end = FrontEndConfig {
        n_mels: config.n_mels,
        ..FrontEndConfig::default()
    };
    Ok(Gemma4AudioCheckpoint {
        config: config.clone(),
        front_end,
        tensors,
        path: PathBuf::from("<synthetic>"),
    })
}
