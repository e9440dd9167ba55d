//! Every weight name of the family, in one place, and the `.ckpt` loader.
//!
//! The names are GigaAM's own (`GigaAMASR.state_dict()`). The heads are the FastConformer
//! family's ([`crate::fastconformer`]'s CTC projection and LSTM transducer), so their tensors are
//! renamed here to that family's names; the encoder reads GigaAM's names directly.

use super::config::{AttentionKind, ConvNorm, GigaamConfig, Subsampling};
use crate::fastconformer::HeadConfig;
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
    /// `which` is 1 or 2, `lin` is 1 or 2.
    pub fn ff(&self, which: usize, lin: usize) -> String {
        format!("{}.feed_forward{which}.linear{lin}", self.p)
    }
    /// q, k, v, out, pos (rel_pos only).
    pub fn attn(&self, proj: &str) -> String {
        format!("{}.self_attn.linear_{proj}", self.p)
    }
    /// pos_bias_u or pos_bias_v `(H, Dh)` (rel_pos only).
    pub fn attn_bias(&self, which: &str) -> String {
        format!("{}.self_attn.{which}", self.p)
    }
    /// pointwise_conv1, depthwise_conv, batch_norm (either norm), pointwise_conv2.
    pub fn conv(&self, part: &str) -> String {
        format!("{}.conv.{part}", self.p)
    }
    /// feed_forward1, self_att, conv, feed_forward2, out.
    pub fn norm(&self, which: &str) -> String {
        format!("{}.norm_{which}", self.p)
    }
}

/// Strided conv `i` of the subsampling (the ReLUs take the odd indices).
pub(crate) fn subsampling_conv(i: usize) -> String {
    format!("encoder.pre_encode.conv.{}", 2 * i)
}
/// The conv2d subsampling's linear over (channels × mels).
pub(crate) const SUB_OUT: &str = "encoder.pre_encode.out";
/// The front end's buffers, when the checkpoint stores them (v3 does, in bfloat16).
pub(crate) const FRONTEND_WINDOW: &str = "preprocessor.featurizer.0.spectrogram.window";
pub(crate) const FRONTEND_MEL: &str = "preprocessor.featurizer.0.mel_scale.fb";

/// GigaAM head tensor → the FastConformer head name it is loaded under.
fn head_renames(cfg: &GigaamConfig) -> Vec<(String, String)> {
    let mut v = Vec::new();
    let mut pair = |from: &str, to: &str| v.push((from.to_string(), to.to_string()));
    match &cfg.head {
        HeadConfig::Ctc { .. } => {
            pair("head.decoder_layers.0.weight", "ctc_head.weight");
            pair("head.decoder_layers.0.bias", "ctc_head.bias");
        }
        HeadConfig::Transducer(t) => {
            pair("head.decoder.embed.weight", "decoder.embedding.weight");
            for l in 0..t.num_decoder_layers {
                for kind in ["weight_ih", "weight_hh", "bias_ih", "bias_hh"] {
                    pair(
                        &format!("head.decoder.lstm.{kind}_l{l}"),
                        &format!("decoder.lstm.{kind}_l{l}"),
                    );
                }
            }
            for (from, to) in [
                ("head.joint.enc", "encoder_projector"),
                ("head.joint.pred", "decoder.decoder_projector"),
                ("head.joint.joint_net.1", "joint.head"),
            ] {
                pair(&format!("{from}.weight"), &format!("{to}.weight"));
                pair(&format!("{from}.bias"), &format!("{to}.bias"));
            }
        }
    }
    v
}

/// Every tensor a model of `c` needs, with its shape, under the names the model code reads
/// (the heads already renamed).
pub fn expected_shapes(c: &GigaamConfig) -> Vec<(String, Vec<usize>)> {
    let e = &c.encoder;
    let (d, k) = (e.d_model, e.subs_kernel_size);
    let mut v: Vec<(String, Vec<usize>)> = Vec::new();
    let mut add = |n: String, s: Vec<usize>| v.push((n, s));
    for i in 0..e.subsampling_layers() {
        let conv = subsampling_conv(i);
        let shape = match e.subsampling {
            Subsampling::Conv1d => vec![d, if i == 0 { e.feat_in } else { d }, k],
            Subsampling::Conv2d => vec![d, if i == 0 { 1 } else { d }, k, k],
        };
        add(format!("{conv}.weight"), shape);
        add(format!("{conv}.bias"), vec![d]);
    }
    if e.subsampling == Subsampling::Conv2d {
        add(
            format!("{SUB_OUT}.weight"),
            vec![d, d * e.subsampled_mels()],
        );
        add(format!("{SUB_OUT}.bias"), vec![d]);
    }
    let ff = d * e.ff_expansion_factor;
    for l in 0..e.n_layers {
        let n = LayerNames::new(l);
        for which in ["feed_forward1", "self_att", "conv", "feed_forward2", "out"] {
            add(format!("{}.weight", n.norm(which)), vec![d]);
            add(format!("{}.bias", n.norm(which)), vec![d]);
        }
        for which in [1, 2] {
            add(format!("{}.weight", n.ff(which, 1)), vec![ff, d]);
            add(format!("{}.bias", n.ff(which, 1)), vec![ff]);
            add(format!("{}.weight", n.ff(which, 2)), vec![d, ff]);
            add(format!("{}.bias", n.ff(which, 2)), vec![d]);
        }
        for p in ["q", "k", "v", "out"] {
            add(format!("{}.weight", n.attn(p)), vec![d, d]);
            add(format!("{}.bias", n.attn(p)), vec![d]);
        }
        if e.attention == AttentionKind::RelPos {
            add(format!("{}.weight", n.attn("pos")), vec![d, d]);
            for b in ["pos_bias_u", "pos_bias_v"] {
                add(n.attn_bias(b), vec![e.n_heads, e.head_dim()]);
            }
        }
        add(
            format!("{}.weight", n.conv("pointwise_conv1")),
            vec![2 * d, d, 1],
        );
        add(format!("{}.bias", n.conv("pointwise_conv1")), vec![2 * d]);
        add(
            format!("{}.weight", n.conv("depthwise_conv")),
            vec![d, 1, e.conv_kernel_size],
        );
        add(format!("{}.bias", n.conv("depthwise_conv")), vec![d]);
        add(format!("{}.weight", n.conv("batch_norm")), vec![d]);
        add(format!("{}.bias", n.conv("batch_norm")), vec![d]);
        if e.conv_norm == ConvNorm::BatchNorm {
            add(format!("{}.running_mean", n.conv("batch_norm")), vec![d]);
            add(format!("{}.running_var", n.conv("batch_norm")), vec![d]);
        }
        add(
            format!("{}.weight", n.conv("pointwise_conv2")),
            vec![d, d, 1],
        );
        add(format!("{}.bias", n.conv("pointwise_conv2")), vec![d]);
    }
    let nc = c.num_classes;
    match &c.head {
        HeadConfig::Ctc { .. } => {
            add("ctc_head.weight".into(), vec![nc, d, 1]);
            add("ctc_head.bias".into(), vec![nc]);
        }
        HeadConfig::Transducer(t) => {
            let h = t.decoder_hidden_size;
            add("decoder.embedding.weight".into(), vec![nc, h]);
            for l in 0..t.num_decoder_layers {
                add(format!("decoder.lstm.weight_ih_l{l}"), vec![4 * h, h]);
                add(format!("decoder.lstm.weight_hh_l{l}"), vec![4 * h, h]);
                add(format!("decoder.lstm.bias_ih_l{l}"), vec![4 * h]);
                add(format!("decoder.lstm.bias_hh_l{l}"), vec![4 * h]);
            }
            let j = c.joint_hidden;
            add("encoder_projector.weight".into(), vec![j, d]);
            add("encoder_projector.bias".into(), vec![j]);
            add("decoder.decoder_projector.weight".into(), vec![j, h]);
            add("decoder.decoder_projector.bias".into(), vec![j]);
            add("joint.head.weight".into(), vec![nc, j]);
            add("joint.head.bias".into(), vec![nc]);
        }
    }
    v
}

/// A GigaAM checkpoint read into memory: config, tensors (heads renamed), where it came from.
pub struct GigaamCheckpoint {
    pub config: GigaamConfig,
    pub tensors: BTreeMap<String, HostTensor>,
    pub path: PathBuf,
    /// The SentencePiece model's bytes, for checkpoints whose vocabulary is one.
    pub sentencepiece: Option<Vec<u8>>,
}

/// Loads a GigaAM `.ckpt` (`torch.save({"cfg": …, "state_dict": …})`, as the `gigaam` package
/// downloads them).
pub fn load(path: &Path) -> Result<GigaamCheckpoint> {
    let bytes = std::fs::read(path).map_err(|e| ModelError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let ck = crate::pickle::read_checkpoint(&bytes)
        .map_err(|e| ModelError::bad_model(path, format!("torch checkpoint: {e}")))?;
    let cfg = ck.extra.get("cfg").ok_or_else(|| {
        ModelError::bad_model(
            path,
            "a torch checkpoint without a GigaAM `cfg` entry (not a GigaAM model?)",
        )
    })?;
    let config = GigaamConfig::from_cfg(cfg, path)?;
    let mut tensors = ck.tensors;
    for (from, to) in head_renames(&config) {
        let t = tensors
            .remove(&from)
            .ok_or_else(|| ModelError::bad_tensor(path, &from, "missing"))?;
        tensors.insert(to, t);
    }
    validate(&config, &tensors, path)?;
    // GigaAM starts the prediction network from a zero input (its embedding's padding row,
    // the blank's, is zero when trained); the transducer feeds the blank's row first.
    if let (HeadConfig::Transducer(tc), Some(emb)) =
        (&config.head, tensors.get_mut("decoder.embedding.weight"))
    {
        let h = tc.decoder_hidden_size;
        let at = tc.blank as usize * h;
        if let Some(row) = emb.data.get_mut(at..at + h) {
            row.fill(0.0);
        }
    }
    let sentencepiece = match config.vocabulary {
        super::config::Vocabulary::Chars(_) => None,
        super::config::Vocabulary::SentencePiece => Some(read_tokenizer(&config, path)?),
    };
    Ok(GigaamCheckpoint {
        config,
        tensors,
        path: path.to_path_buf(),
        sentencepiece,
    })
}

/// The SentencePiece model of a checkpoint: `decoding.model_path` if it exists here, else
/// `<checkpoint stem>_tokenizer.model` beside the checkpoint (the `gigaam` cache's naming).
fn read_tokenizer(config: &GigaamConfig, path: &Path) -> Result<Vec<u8>> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let beside = path.with_file_name(format!("{stem}_tokenizer.model"));
    let candidates: Vec<PathBuf> = config
        .tokenizer_path
        .iter()
        .map(PathBuf::from)
        .chain(std::iter::once(beside.clone()))
        .collect();
    for p in &candidates {
        if p.is_file() {
            return std::fs::read(p).map_err(|e| ModelError::Io {
                path: p.clone(),
                source: e,
            });
        }
    }
    Err(ModelError::bad_model(
        path,
        format!(
            "its vocabulary is a SentencePiece model, not found at {} (put it there)",
            beside.display()
        ),
    ))
}

/// Every expected tensor present with its shape; unknown tensors refused.
pub fn validate(c: &GigaamConfig, t: &BTreeMap<String, HostTensor>, path: &Path) -> Result<()> {
    crate::check_tensors(
        &expected_shapes(c),
        t,
        path,
        |n| n.starts_with("preprocessor.") || n.ends_with(".num_batches_tracked"),
        "GigaAM",
    )
}

/// Random weights of `config`'s shapes (speed runs; outputs are meaningless).
pub fn synthetic_checkpoint(config: &GigaamConfig, seed: u64) -> Result<GigaamCheckpoint> {
    let tensors = crate::random_weights(expected_shapes(config), seed, |name| {
        name.ends_with("running_var") || name.ends_with("norm_out.weight")
    });
    Ok(GigaamCheckpoint {
        config: config.clone(),
        tensors,
        path: PathBuf::from("<synthetic>"),
        sentencepiece: None,
    })
}
