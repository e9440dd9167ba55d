//! Every weight name of the family, in one place, and the loaders that produce them.
//!
//! The canonical names are transformers' (`ParakeetForCTC` / `ParakeetForRNNT` / `ParakeetForTDT`
//! state dicts). Other containers map onto these names here; the model code sees only them.

use super::config::{HeadConfig, ParakeetConfig};
use crate::{ModelError, Result};
use stapes_core::HostTensor;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Weight names of encoder layer `l`.
pub(crate) struct LayerNames {
    p: String,
}

impl LayerNames {
    pub fn new(l: usize) -> Self {
        Self {
            p: format!("encoder.layers.{l}"),
        }
    }
    /// `ff` is 1 or 2; `lin` is 1 or 2.
    pub fn ff(&self, ff: usize, lin: usize) -> String {
        format!("{}.feed_forward{ff}.linear{lin}", self.p)
    }
    /// q, k, v, o, relative_k.
    pub fn attn(&self, proj: &str) -> String {
        format!("{}.self_attn.{proj}_proj", self.p)
    }
    /// bias_u or bias_v, `(H, Dh)`.
    pub fn attn_bias(&self, which: &str) -> String {
        format!("{}.self_attn.{which}", self.p)
    }
    /// pointwise_conv1, depthwise_conv, norm (batch norm), pointwise_conv2.
    pub fn conv(&self, part: &str) -> String {
        format!("{}.conv.{part}", self.p)
    }
    /// feed_forward1, self_att, conv, feed_forward2, out.
    pub fn norm(&self, which: &str) -> String {
        format!("{}.norm_{which}", self.p)
    }
}

/// Index in `encoder.subsampling.layers` of the first conv (0), and of the depthwise and
/// pointwise convs of strided stage `i ≥ 1` (the ReLUs take the other indices).
pub(crate) fn subsampling_conv(i: usize) -> (String, String) {
    let dw = 2 + 3 * (i - 1);
    (
        format!("encoder.subsampling.layers.{dw}"),
        format!("encoder.subsampling.layers.{}", dw + 1),
    )
}
pub(crate) const SUB_CONV0: &str = "encoder.subsampling.layers.0";
pub(crate) const SUB_LINEAR: &str = "encoder.subsampling.linear";
pub(crate) const CTC_HEAD: &str = "ctc_head";
pub(crate) const ENC_PROJ: &str = "encoder_projector";
pub(crate) const EMBEDDING: &str = "decoder.embedding.weight";
pub(crate) const DEC_PROJ: &str = "decoder.decoder_projector";
pub(crate) const JOINT_HEAD: &str = "joint.head";
pub(crate) fn lstm(kind: &str, layer: usize) -> String {
    format!("decoder.lstm.{kind}_l{layer}")
}

/// Every tensor a model of `c` needs, with its shape (transformers' layout).
pub fn expected_shapes(c: &ParakeetConfig) -> Vec<(String, Vec<usize>)> {
    let e = &c.encoder;
    let d = e.hidden_size;
    let ch = e.subsampling_channels;
    let k = e.subsampling_kernel;
    let mut v: Vec<(String, Vec<usize>)> = Vec::new();
    let mut push = |n: String, s: Vec<usize>| v.push((n, s));
    push(format!("{SUB_CONV0}.weight"), vec![ch, 1, k, k]);
    push(format!("{SUB_CONV0}.bias"), vec![ch]);
    for i in 1..e.subsampling_layers() {
        let (dw, pw) = subsampling_conv(i);
        push(format!("{dw}.weight"), vec![ch, 1, k, k]);
        push(format!("{dw}.bias"), vec![ch]);
        push(format!("{pw}.weight"), vec![ch, ch, 1, 1]);
        push(format!("{pw}.bias"), vec![ch]);
    }
    push(
        format!("{SUB_LINEAR}.weight"),
        vec![d, ch * e.subsampled_mels()],
    );
    push(format!("{SUB_LINEAR}.bias"), vec![d]);
    let hd = e.head_dim();
    for l in 0..e.num_layers {
        let n = LayerNames::new(l);
        for ff in 1..=2 {
            push(
                format!("{}.weight", n.ff(ff, 1)),
                vec![e.intermediate_size, d],
            );
            push(
                format!("{}.weight", n.ff(ff, 2)),
                vec![d, e.intermediate_size],
            );
            if e.attention_bias {
                push(format!("{}.bias", n.ff(ff, 1)), vec![e.intermediate_size]);
                push(format!("{}.bias", n.ff(ff, 2)), vec![d]);
            }
        }
        for p in ["q", "k", "v", "o"] {
            push(format!("{}.weight", n.attn(p)), vec![d, d]);
            if e.attention_bias {
                push(format!("{}.bias", n.attn(p)), vec![d]);
            }
        }
        push(format!("{}.weight", n.attn("relative_k")), vec![d, d]);
        push(n.attn_bias("bias_u"), vec![e.num_heads, hd]);
        push(n.attn_bias("bias_v"), vec![e.num_heads, hd]);
        push(
            format!("{}.weight", n.conv("pointwise_conv1")),
            vec![2 * d, d, 1],
        );
        push(
            format!("{}.weight", n.conv("depthwise_conv")),
            vec![d, 1, e.conv_kernel_size],
        );
        push(
            format!("{}.weight", n.conv("pointwise_conv2")),
            vec![d, d, 1],
        );
        if e.convolution_bias {
            push(format!("{}.bias", n.conv("pointwise_conv1")), vec![2 * d]);
            push(format!("{}.bias", n.conv("depthwise_conv")), vec![d]);
            push(format!("{}.bias", n.conv("pointwise_conv2")), vec![d]);
        }
        for s in ["weight", "bias", "running_mean", "running_var"] {
            push(format!("{}.{s}", n.conv("norm")), vec![d]);
        }
        for w in ["feed_forward1", "self_att", "conv", "feed_forward2", "out"] {
            push(format!("{}.weight", n.norm(w)), vec![d]);
            push(format!("{}.bias", n.norm(w)), vec![d]);
        }
    }
    match &c.head {
        HeadConfig::Ctc { .. } => {
            push(format!("{CTC_HEAD}.weight"), vec![c.vocab_size, d, 1]);
            push(format!("{CTC_HEAD}.bias"), vec![c.vocab_size]);
        }
        HeadConfig::Transducer(t) => {
            let h = t.decoder_hidden_size;
            push(format!("{ENC_PROJ}.weight"), vec![h, d]);
            push(format!("{ENC_PROJ}.bias"), vec![h]);
            push(EMBEDDING.to_string(), vec![c.vocab_size, h]);
            for l in 0..t.num_decoder_layers {
                push(lstm("weight_ih", l), vec![4 * h, h]);
                push(lstm("weight_hh", l), vec![4 * h, h]);
                push(lstm("bias_ih", l), vec![4 * h]);
                push(lstm("bias_hh", l), vec![4 * h]);
            }
            push(format!("{DEC_PROJ}.weight"), vec![h, h]);
            push(format!("{DEC_PROJ}.bias"), vec![h]);
            let out = c.vocab_size + t.durations.len();
            push(format!("{JOINT_HEAD}.weight"), vec![out, h]);
            push(format!("{JOINT_HEAD}.bias"), vec![out]);
        }
    }
    v
}

/// A loaded checkpoint: config, canonical f32 tensors, and where it came from.
#[derive(Clone, Debug)]
pub struct ParakeetCheckpoint {
    pub config: ParakeetConfig,
    pub tensors: BTreeMap<String, HostTensor>,
    pub path: PathBuf,
    /// `tokenizer.json` beside the weights, if any.
    pub tokenizer_file: Option<PathBuf>,
    /// A tokenizer built from the checkpoint itself (a `.nemo`'s SentencePiece model), as
    /// `tokenizer.json` text; used when there is no `tokenizer_file`.
    pub tokenizer_json: Option<String>,
    /// "safetensors", "nemo", "ggml" or "synthetic".
    pub source: &'static str,
}

/// Checks that every tensor `config` needs is present with its shape.
pub fn validate(
    config: &ParakeetConfig,
    tensors: &BTreeMap<String, HostTensor>,
    path: &Path,
) -> Result<()> {
    for (name, shape) in expected_shapes(config) {
        let t = tensors
            .get(&name)
            .ok_or_else(|| ModelError::bad_tensor(path, &name, "missing"))?;
        if t.shape != shape {
            return Err(ModelError::bad_tensor(
                path,
                &name,
                format!("shape {:?}, expected {shape:?}", t.shape),
            ));
        }
    }
    Ok(())
}

/// Loads an HF `ParakeetFor{CTC,RNNT,TDT}` directory (`config.json` + safetensors, sharded or
/// not; any float dtype).
pub fn load_hf(dir: &Path) -> Result<ParakeetCheckpoint> {
    let mut config = ParakeetConfig::from_hf_file(&dir.join("config.json"))?;
    // Converted checkpoints may keep the start token only in generation_config.json.
    if let HeadConfig::Transducer(t) = &mut config.head {
        let gen = dir.join("generation_config.json");
        let start = std::fs::read_to_string(&gen)
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .and_then(|v| v.get("decoder_start_token_id")?.as_u64());
        let in_config = std::fs::read_to_string(dir.join("config.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .is_some_and(|v| {
                v.get("decoder_start_token_id")
                    .is_some_and(|x| !x.is_null())
            });
        if let (Some(s), false) = (start, in_config) {
            if s as usize >= config.vocab_size {
                return Err(ModelError::bad_model(
                    &gen,
                    format!("decoder_start_token_id {s} ≥ vocab_size"),
                ));
            }
            t.start_token = s as u32;
        }
    }
    let st = stapes_formats::safetensors_dir::read_dir(dir)?;
    let wanted: BTreeMap<String, Vec<usize>> = expected_shapes(&config).into_iter().collect();
    let mut tensors = BTreeMap::new();
    for (name, raw) in &st.tensors {
        if !wanted.contains_key(name) {
            continue; // num_batches_tracked and the like
        }
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
    let tok = dir.join("tokenizer.json");
    Ok(ParakeetCheckpoint {
        config,
        tensors,
        path: dir.to_path_buf(),
        tokenizer_file: tok.is_file().then_some(tok),
        tokenizer_json: None,
        source: "safetensors",
    })
}

/// Loads a checkpoint judged by content: an HF directory, a `.nemo` archive (tar or tar.gz) or a
/// whisper.cpp Parakeet file.
pub fn load(path: &Path) -> Result<ParakeetCheckpoint> {
    use stapes_formats::sniff::{sniff, Format};
    if path.is_dir() {
        return load_hf(path);
    }
    match sniff(path)? {
        Format::Nemo => super::nemo::load_nemo(path),
        Format::Ggml if stapes_formats::ggml::kind(path)? == stapes_formats::ggml::GgmlKind::Parakeet => {
            super::ggml::load_ggml(path)
        }
        other => Err(ModelError::bad_model(
            path,
            format!(
                "a {other} file is not a Parakeet checkpoint (HF directory, .nemo or whisper.cpp Parakeet file)"
            ),
        )),
    }
}

/// Random weights of `config`'s shapes (speed runs; outputs are meaningless). Batch-norm
/// variances are kept positive.
pub fn synthetic_checkpoint(config: &ParakeetConfig, seed: u64) -> Result<ParakeetCheckpoint> {
    config
        .validate()
        .map_err(|e| ModelError::bad_model("<synthetic>", e))?;
    let tensors = crate::random_weights(expected_shapes(config), seed, |name| {
        name.ends_with("running_var") || name.ends_with("norm_out.weight")
    });
    Ok(ParakeetCheckpoint {
        config: config.clone(),
        tensors,
        path: PathBuf::from("<synthetic>"),
        tokenizer_file: None,
        tokenizer_json: None,
        source: "synthetic",
    })
}
