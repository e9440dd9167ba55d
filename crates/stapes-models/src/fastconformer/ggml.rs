//! whisper.cpp's Parakeet files (`ggml-parakeet-*.bin`, as ggml-org/parakeet-GGUF ships them):
//! the header gives the config, the tensors carry NeMo's names, which map onto the canonical
//! (transformers) names through [`super::nemo::canonical_name`].
//!
//! What the converter changed is undone here: squeezed 1-sized dimensions come back from the
//! expected shapes, the prediction LSTM's gates go back from (i, f, o, g) to PyTorch's
//! (i, f, g, o), and its folded bias becomes `bias_hh` with a zero `bias_ih` (the sum the cell
//! adds is the same). The format has no `xscaling` flag and whisper.cpp scales nothing: the
//! encoder input is not multiplied by `sqrt(d)`. The front end is NeMo's (512-point FFT, 400
//! window); the file's filterbank and window are checked for shape only.

use super::config::{EncoderConfig, HeadConfig, ParakeetConfig, TransducerConfig};
use super::nemo::{canonical_name, pieces_to_tokenizer_json};
use super::weights::{expected_shapes, validate, ParakeetCheckpoint};
use crate::{ModelError, Result};
use stapes_core::{Activation, HostTensor};
use std::collections::BTreeMap;
use std::path::Path;

/// NeMo's name of the folded LSTM bias, after the prefix mapping.
const FOLDED_BIAS: &str = "decoder.lstm.bias_h_l";

/// Reads a whisper.cpp Parakeet file into a checkpoint.
pub fn load_ggml(path: &Path) -> Result<ParakeetCheckpoint> {
    let f = stapes_formats::ggml::read_parakeet(path)?;
    let hp = f.hparams;
    let bad = |d: String| ModelError::bad_model(path, d);
    let n = |v: i32| v.max(0) as usize;
    let mut tensors = BTreeMap::new();
    for (name, raw) in &f.tensors {
        if raw.shape.is_empty() {
            continue; // batch norm's num_batches_tracked
        }
        let Some(canon) = canonical_name(name) else {
            continue; // preprocessor and positional-encoding buffers
        };
        let t = HostTensor::new(raw.shape.clone(), raw.to_f32())
            .map_err(|e| ModelError::bad_tensor(path, name, e.to_string()))?;
        tensors.insert(canon, t);
    }
    let d = n(hp.n_audio_state);
    let rows = |name: &str| tensors.get(name).and_then(|t| t.shape.first().copied());
    let intermediate = rows("encoder.layers.0.feed_forward1.linear1.weight")
        .ok_or_else(|| bad("no encoder.layers.0.feed_forward1.linear1.weight".into()))?;
    let bias = tensors.contains_key("encoder.layers.0.self_attn.q_proj.bias");
    let vocab_size = n(hp.n_vocab) + 1;
    let blank = n(hp.n_vocab) as u32;
    let config = ParakeetConfig {
        encoder: EncoderConfig {
            hidden_size: d,
            num_layers: n(hp.n_audio_layer),
            num_heads: n(hp.n_audio_head),
            intermediate_size: intermediate,
            activation: Activation::Silu,
            attention_bias: bias,
            convolution_bias: bias,
            conv_kernel_size: n(hp.n_conv_kernel),
            subsampling_factor: n(hp.subsampling_factor),
            subsampling_channels: n(hp.n_subsampling_channels),
            subsampling_kernel: 3,
            subsampling_stride: 2,
            num_mel_bins: n(hp.n_mels),
            scale_input: false,
        },
        vocab_size,
        head: HeadConfig::Transducer(TransducerConfig {
            blank,
            start_token: blank,
            decoder_hidden_size: n(hp.n_pred_dim),
            num_decoder_layers: n(hp.n_pred_layers),
            joint_activation: Activation::Relu,
            max_symbols_per_step: n(hp.n_max_tokens).max(1),
            durations: f.durations.iter().map(|&x| x as usize).collect(),
        }),
    };
    config.validate().map_err(bad)?;
    if f.vocab.len() + 1 != vocab_size {
        return Err(bad(format!(
            "{} vocabulary pieces for n_vocab {}",
            f.vocab.len(),
            hp.n_vocab
        )));
    }
    for l in 0..n(hp.n_pred_layers) {
        unfold_lstm(&mut tensors, l, path)?;
    }
    // the converter squeezed 1-sized dimensions and stored the subsampling biases as (1, C, 1, 1)
    for (name, shape) in expected_shapes(&config) {
        if let Some(t) = tensors.get_mut(&name) {
            if t.shape != shape && t.data.len() == shape.iter().product::<usize>() {
                t.shape = shape;
            }
        }
    }
    validate(&config, &tensors, path)?;
    if hp.n_fft != 512 || f.window.len() != 400 {
        return Err(bad(format!(
            "front end with n_fft {} and a {}-sample window: only NeMo's 512 / 400 is supported",
            hp.n_fft,
            f.window.len()
        )));
    }
    let pieces: Vec<String> = f
        .vocab
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    let tokenizer_json = pieces_to_tokenizer_json(&pieces).map_err(bad)?;
    Ok(ParakeetCheckpoint {
        config,
        tensors,
        path: path.to_path_buf(),
        tokenizer_file: None,
        tokenizer_json: Some(tokenizer_json),
        source: "ggml",
    })
}

/// Layer `l` of the prediction LSTM back in PyTorch's gate order, its bias split again.
fn unfold_lstm(tensors: &mut BTreeMap<String, HostTensor>, l: usize, path: &Path) -> Result<()> {
    let folded = format!("{FOLDED_BIAS}{l}");
    let b = tensors
        .remove(&folded)
        .ok_or_else(|| ModelError::bad_tensor(path, &folded, "missing"))?;
    let zeros = HostTensor::new(b.shape.clone(), vec![0.0; b.data.len()])
        .map_err(|e| ModelError::bad_tensor(path, &folded, e.to_string()))?;
    tensors.insert(format!("decoder.lstm.bias_hh_l{l}"), b);
    tensors.insert(format!("decoder.lstm.bias_ih_l{l}"), zeros);
    for kind in ["weight_ih", "weight_hh", "bias_hh"] {
        let name = format!("decoder.lstm.{kind}_l{l}");
        let t = tensors
            .get_mut(&name)
            .ok_or_else(|| ModelError::bad_tensor(path, &name, "missing"))?;
        let rows = t.shape.first().copied().unwrap_or(0);
        if rows % 4 != 0 || rows == 0 {
            return Err(ModelError::bad_tensor(
                path,
                &name,
                format!("{rows} rows are not four gates"),
            ));
        }
        let cols = t.data.len() / rows;
        let h = rows / 4 * cols;
        // (i, f, o, g) -> (i, f, g, o): swap the last two gate blocks
        let (_, tail) = t.data.split_at_mut(2 * h);
        let (o, g) = tail.split_at_mut(h);
        o.swap_with_slice(g);
    }
    Ok(())
}
