//! The Silero VAD v6 weight-name table (the one place that knows how the ONNX exports name things)
//! and the checks that turn an ONNX file into the host tensors of one rate branch.
//!
//! Two layouts exist in silero-vad 6.2.3:
//! - `silero_vad_16k_op15.onnx`: graph initializers `model.<name>` (16 kHz only);
//! - `silero_vad.onnx`: `Constant` nodes inside the top-level `If` on `sr == 16000`, named
//!   `If_0_then_branch__Inline_0__<name>` (16 kHz) and `If_0_else_branch__Inline_0__<name>` (8 kHz).
//!
//! The branch of a prefix is not trusted from its name alone: the STFT filter length in the file
//! (256 at 16 kHz, 128 at 8 kHz) decides which rate a set of weights serves.

use super::config::{VadRate, HIDDEN};
use crate::error::{ModelError, Result};
use stapes_core::HostTensor;
use stapes_formats::onnx::{OnnxFile, OnnxTensor};
use std::path::Path;

/// Prefixes under which a complete weight set may appear.
pub const PREFIXES: [&str; 3] = [
    "model.",
    "If_0_then_branch__Inline_0__",
    "If_0_else_branch__Inline_0__",
];

pub const STFT_BASIS: &str = "stft.forward_basis_buffer";
/// `encoder.{i}.reparam_conv.{weight,bias}`, i = 0..4.
pub const ENCODER_CONV: [(&str, &str); 4] = [
    (
        "encoder.0.reparam_conv.weight",
        "encoder.0.reparam_conv.bias",
    ),
    (
        "encoder.1.reparam_conv.weight",
        "encoder.1.reparam_conv.bias",
    ),
    (
        "encoder.2.reparam_conv.weight",
        "encoder.2.reparam_conv.bias",
    ),
    (
        "encoder.3.reparam_conv.weight",
        "encoder.3.reparam_conv.bias",
    ),
];
/// Strides of the four encoder convolutions (kernel 3, padding 1 each).
pub const ENCODER_STRIDES: [usize; 4] = [1, 2, 2, 1];
pub const ENCODER_KERNEL: usize = 3;
pub const LSTM_W_IH: &str = "decoder.rnn.weight_ih";
pub const LSTM_W_HH: &str = "decoder.rnn.weight_hh";
pub const LSTM_B_IH: &str = "decoder.rnn.bias_ih";
pub const LSTM_B_HH: &str = "decoder.rnn.bias_hh";
pub const HEAD_W: &str = "decoder.decoder.2.weight";
pub const HEAD_B: &str = "decoder.decoder.2.bias";

/// Host weights of one rate branch, already in the layouts the model code uses.
#[derive(Clone, Debug)]
pub struct BranchWeights {
    pub rate: VadRate,
    /// `(2F, K)`: the STFT basis with real and imaginary rows interleaved (row 2f = real part of
    /// bin f, row 2f+1 = imaginary part), so the magnitude pairs sit side by side in channels.
    pub stft_basis: HostTensor,
    /// Per encoder layer: `(C_out, C_in·3)` and `(C_out)`.
    pub encoder: Vec<(HostTensor, HostTensor)>,
    /// `(4H, H)` each, PyTorch gate order i, f, g, o.
    pub w_ih: HostTensor,
    pub w_hh: HostTensor,
    /// `b_ih + b_hh`, `(4H)`.
    pub lstm_bias: HostTensor,
    /// `(1, H)` and `(1)`.
    pub head_w: HostTensor,
    pub head_b: HostTensor,
}

fn get<'a>(file: &'a OnnxFile, prefix: &str, name: &str) -> Result<&'a OnnxTensor> {
    let full = format!("{prefix}{name}");
    file.tensor(&full)
        .ok_or_else(|| ModelError::bad_tensor(&file.path, &full, "missing from the ONNX file"))
}

fn f32_tensor(file: &OnnxFile, prefix: &str, name: &str, want: &[usize]) -> Result<HostTensor> {
    let t = get(file, prefix, name)?;
    let full = format!("{prefix}{name}");
    if t.dims != want {
        return Err(ModelError::bad_tensor(
            &file.path,
            &full,
            format!("shape {:?}, expected {want:?}", t.dims),
        ));
    }
    let v = t.f32_values().ok_or_else(|| {
        ModelError::bad_tensor(
            &file.path,
            &full,
            format!("data type {} is not floating point", t.data_type),
        )
    })?;
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(ModelError::bad_tensor(
            &file.path,
            &full,
            format!("non-finite value at index {i}"),
        ));
    }
    Ok(HostTensor::new(want.to_vec(), v.to_vec())?)
}

/// Every weight branch in the file, keyed by the rate its STFT length says it serves.
pub fn branches(file: &OnnxFile) -> Result<Vec<BranchWeights>> {
    let mut out: Vec<BranchWeights> = Vec::new();
    for prefix in PREFIXES {
        if file.tensor(&format!("{prefix}{STFT_BASIS}")).is_none() {
            continue;
        }
        let b = branch(file, prefix)?;
        if out.iter().any(|o| o.rate == b.rate) {
            return Err(ModelError::bad_model(
                &file.path,
                format!("two weight sets for {} Hz (prefix `{prefix}`)", b.rate.hz()),
            ));
        }
        out.push(b);
    }
    if out.is_empty() {
        return Err(ModelError::bad_model(
            &file.path,
            format!("no Silero VAD weights found (looked for `{STFT_BASIS}` under {PREFIXES:?})"),
        ));
    }
    Ok(out)
}

fn branch(file: &OnnxFile, prefix: &str) -> Result<BranchWeights> {
    let path: &Path = &file.path;
    let basis_name = format!("{prefix}{STFT_BASIS}");
    let basis_dims = &get(file, prefix, STFT_BASIS)?.dims;
    let rate = match basis_dims.as_slice() {
        [258, 1, 256] => VadRate::Hz16000,
        [130, 1, 128] => VadRate::Hz8000,
        other => {
            return Err(ModelError::bad_tensor(
                path,
                &basis_name,
                format!(
                    "shape {other:?}; expected [258, 1, 256] (16 kHz) or [130, 1, 128] (8 kHz)"
                ),
            ))
        }
    };
    let k = rate.filter_length();
    let bins = k / 2 + 1;
    let basis = f32_tensor(file, prefix, STFT_BASIS, &[2 * bins, 1, k])?;
    let mut inter = Vec::with_capacity(basis.data.len());
    for f in 0..bins {
        inter.extend_from_slice(&basis.data[f * k..(f + 1) * k]);
        inter.extend_from_slice(&basis.data[(bins + f) * k..(bins + f + 1) * k]);
    }
    let stft_basis = HostTensor::new(vec![2 * bins, k], inter)?;

    let dims = [(bins, 128), (128, 64), (64, 64), (64, HIDDEN)];
    let mut encoder = Vec::new();
    for ((w, b), (c_in, c_out)) in ENCODER_CONV.iter().zip(dims) {
        let wt = f32_tensor(file, prefix, w, &[c_out, c_in, ENCODER_KERNEL])?;
        let bt = f32_tensor(file, prefix, b, &[c_out])?;
        encoder.push((wt.reshape(vec![c_out, c_in * ENCODER_KERNEL])?, bt));
    }
    check_conv_strides(file, prefix, rate)?;

    let w_ih = f32_tensor(file, prefix, LSTM_W_IH, &[4 * HIDDEN, HIDDEN])?;
    let w_hh = f32_tensor(file, prefix, LSTM_W_HH, &[4 * HIDDEN, HIDDEN])?;
    let b_ih = f32_tensor(file, prefix, LSTM_B_IH, &[4 * HIDDEN])?;
    let b_hh = f32_tensor(file, prefix, LSTM_B_HH, &[4 * HIDDEN])?;
    let lstm_bias = HostTensor::new(
        vec![4 * HIDDEN],
        b_ih.data
            .iter()
            .zip(&b_hh.data)
            .map(|(a, b)| a + b)
            .collect(),
    )?;
    let head_w = f32_tensor(file, prefix, HEAD_W, &[1, HIDDEN, 1])?.reshape(vec![1, HIDDEN])?;
    let head_b = f32_tensor(file, prefix, HEAD_B, &[1])?;
    Ok(BranchWeights {
        rate,
        stft_basis,
        encoder,
        w_ih,
        w_hh,
        lstm_bias,
        head_w,
        head_b,
    })
}

/// The model code hard-codes the export's conv hyper-parameters; refuse a file whose graph says
/// otherwise rather than computing something else silently.
fn check_conv_strides(file: &OnnxFile, prefix: &str, rate: VadRate) -> Result<()> {
    let hop = rate.filter_length() as i64 / 2;
    let mut expected: Vec<(String, i64, i64)> = vec![(format!("{prefix}{STFT_BASIS}"), hop, 0)];
    for ((w, _), s) in ENCODER_CONV.iter().zip(ENCODER_STRIDES) {
        expected.push((format!("{prefix}{w}"), s as i64, 1));
    }
    for (weight, stride, pad) in expected {
        let Some(node) = file
            .nodes
            .iter()
            .find(|n| n.op_type == "Conv" && n.inputs.get(1) == Some(&weight))
        else {
            continue;
        };
        let strides = node
            .int_attrs
            .get("strides")
            .cloned()
            .unwrap_or_else(|| vec![1]);
        let pads = node
            .int_attrs
            .get("pads")
            .cloned()
            .unwrap_or_else(|| vec![0, 0]);
        if strides != [stride] || pads.iter().any(|&p| p != pad) {
            return Err(ModelError::bad_tensor(
                &file.path,
                &weight,
                format!("its Conv has strides {strides:?} pads {pads:?}; this build expects stride {stride}, padding {pad}"),
            ));
        }
    }
    Ok(())
}
