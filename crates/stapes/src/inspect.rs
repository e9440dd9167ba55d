//! `stapes inspect`: what a model file holds (format, family, hyper-parameters, tensors) and
//! `stapes convert` between the Whisper formats we read.

use crate::error::StapesError;
use stapes_formats::Format;
use std::fmt::Write as _;
use std::path::Path;

/// A human-readable description of the model at `path`.
pub fn describe(path: &Path) -> Result<String, StapesError> {
    let format = stapes_formats::sniff(path)?;
    let mut out = String::new();
    let _ = writeln!(out, "path:    {}", path.display());
    let _ = writeln!(out, "format:  {format}");
    let parakeet_ggml = format == Format::Ggml
        && stapes_formats::ggml::kind(path)? == stapes_formats::ggml::GgmlKind::Parakeet;
    match format {
        Format::Ggml if parakeet_ggml => {
            let ck = stapes_models::fastconformer::ggml::load_ggml(path)?;
            let c = &ck.config;
            let e = &c.encoder;
            let _ = writeln!(
                out,
                "family:  parakeet ({}, whisper.cpp file)",
                c.head_name()
            );
            let _ = writeln!(
                out,
                "hparams: n_mels {} d_model {} encoder {}×{} heads ffn {} vocab {}",
                e.num_mel_bins,
                e.hidden_size,
                e.num_layers,
                e.num_heads,
                e.intermediate_size,
                c.vocab_size
            );
            let _ = writeln!(out, "tensors: {}, transformers names:", ck.tensors.len());
            for (name, t) in &ck.tensors {
                let _ = writeln!(out, "  {name:<60} {:?}", t.shape);
            }
        }
        Format::Safetensors if crate::engine::hf_family(path) == "qwen3a" => {
            let ck = stapes_models::qwen3a::load(path)?;
            let (a, t) = (&ck.config.audio, &ck.config.text);
            let _ = writeln!(out, "family:  qwen3a (Qwen3-ASR)");
            let _ = writeln!(
                out,
                "audio:   n_mels {} conv {} d_model {} {}×{} heads ffn {}, chunks of {} frames, attention windows of {} tokens",
                a.n_mels, a.conv_channels, a.d_model, a.n_layers, a.n_heads, a.ffn_dim,
                a.chunk_frames(), a.window_tokens()
            );
            let _ = writeln!(
                out,
                "text:    hidden {} {} layers, {} heads / {} kv heads × {}, ffn {}, vocab {}, rope θ {}, tied {}",
                t.hidden, t.n_layers, t.n_heads, t.n_kv_heads, t.head_dim, t.intermediate,
                t.vocab_size, t.rope_theta, t.tie_embeddings
            );
            let _ = writeln!(
                out,
                "tokens:  audio {} eos {:?} tokenizer {}",
                ck.config.audio_token_id,
                ck.config.eos_ids,
                ck.tokenizer_file
                    .as_ref()
                    .map_or("none".to_string(), |f| f.display().to_string())
            );
            let total: usize = ck.tensors.values().map(|t| t.len()).sum();
            let _ = writeln!(
                out,
                "tensors: {} ({:.1} M parameters)",
                ck.tensors.len(),
                total as f64 / 1e6
            );
            for (name, t) in &ck.tensors {
                let _ = writeln!(out, "  {name:<60} {:?}", t.shape);
            }
        }
        Format::Safetensors if crate::engine::hf_family(path) == "gemma4a" => {
            let ck = stapes_models::gemma4a::load(path)?;
            let c = &ck.config;
            let _ = writeln!(
                out,
                "family:  gemma4a (Gemma 4 audio tower, {:?})",
                c.layout
            );
            let _ = writeln!(
                out,
                "tower:   n_mels {} conv {:?} hidden {} {}×{} heads, attention chunks of {} with {} past / {} future, logit cap {}, output {}",
                c.n_mels, c.conv_channels, c.hidden, c.n_layers, c.n_heads, c.chunk,
                c.past(), c.context_right, c.logit_cap, c.output_dims
            );
            let total: usize = ck.tensors.values().map(|t| t.len()).sum();
            let _ = writeln!(
                out,
                "tensors: {} read ({:.1} M parameters)",
                ck.tensors.len(),
                total as f64 / 1e6
            );
            for (name, t) in &ck.tensors {
                let _ = writeln!(out, "  {name:<60} {:?}", t.shape);
            }
        }
        Format::Ct2 | Format::Ggml | Format::Safetensors => {
            let ck = stapes_models::whisper::weights::load_checkpoint(path)?;
            let c = &ck.config;
            let _ = writeln!(out, "family:  whisper");
            let _ = writeln!(
                out,
                "hparams: n_mels {} d_model {} encoder {}×{} heads ffn {} decoder {}×{} heads ffn {} audio_ctx {} text_ctx {} vocab {}",
                c.n_mels, c.d_model, c.encoder_layers, c.encoder_heads, c.encoder_ffn, c.decoder_layers,
                c.decoder_heads, c.decoder_ffn, c.n_audio_ctx, c.n_text_ctx, c.vocab_size
            );
            let tok = &ck.tokenizer;
            let _ = writeln!(
                out,
                "tokens:  vocab {} multilingual {} languages {}",
                tok.vocab_size(),
                tok.is_multilingual(),
                tok.languages().len()
            );
            let g = &ck.generation;
            let _ = writeln!(
                out,
                "decode:  {} suppressed tokens, {} begin-suppressed, {} alignment heads",
                g.suppress_tokens.len(),
                g.begin_suppress_tokens.len(),
                g.alignment_heads.len()
            );
            let total: usize = ck.tensors.values().map(|t| t.len()).sum();
            let _ = writeln!(
                out,
                "tensors: {} ({:.1} M parameters), transformers names:",
                ck.tensors.len(),
                total as f64 / 1e6
            );
            for (name, t) in &ck.tensors {
                let _ = writeln!(out, "  {name:<60} {:?}", t.shape);
            }
        }
        Format::Onnx => {
            let f = stapes_formats::onnx::read_onnx(path)?;
            let _ = writeln!(
                out,
                "family:  onnx graph ({} nodes, producer {:?}, opsets {:?})",
                f.nodes.len(),
                f.producer,
                f.opsets
            );
            let _ = writeln!(out, "tensors: {}", f.tensors.len());
            for (name, t) in &f.tensors {
                let _ = writeln!(out, "  {name:<60} {:?} (onnx type {})", t.dims, t.data_type);
            }
        }
        Format::Nemo => {
            use stapes_models::fastconformer::NemoModel;
            let (family, tensors) = match stapes_models::fastconformer::load_nemo_any(path)? {
                NemoModel::Parakeet(ck) => ("parakeet (FastConformer CTC/RNNT/TDT)", ck.tensors),
                NemoModel::Canary(ck) => ("canary (FastConformer AED)", ck.tensors),
            };
            let _ = writeln!(out, "family:  {family}");
            let _ = writeln!(out, "tensors: {}", tensors.len());
            for (name, t) in &tensors {
                let _ = writeln!(out, "  {name:<60} {:?}", t.shape);
            }
        }
        Format::Torch => {
            let ck = stapes_models::gigaam::load(path)?;
            let c = &ck.config;
            let e = &c.encoder;
            let _ = writeln!(
                out,
                "family:  gigaam ({}, {} head, {} classes)",
                c.name.as_deref().unwrap_or("unnamed"),
                c.head_name(),
                c.num_classes
            );
            let _ = writeln!(
                out,
                "encoder: {} layers, d {}, {} heads, {:?} subsampling ×{}, {:?} attention, {:?} conv norm, conv kernel {}",
                e.n_layers,
                e.d_model,
                e.n_heads,
                e.subsampling,
                e.subsampling_factor,
                e.attention,
                e.conv_norm,
                e.conv_kernel_size
            );
            let f = &c.frontend;
            let _ = writeln!(
                out,
                "front:   {} mels, n_fft {}, hop {}, centred {}",
                f.n_mels, f.n_fft, f.hop_length, f.center
            );
            let _ = writeln!(out, "tensors: {}", ck.tensors.len());
            for (name, t) in &ck.tensors {
                let _ = writeln!(out, "  {name:<60} {:?}", t.shape);
            }
        }
        other => {
            let _ = writeln!(
                out,
                "family:  unknown ({other} models are not read by this build yet)"
            );
        }
    }
    Ok(out)
}

/// Convert Whisper weights at `input` into `to` (ggml file or HF safetensors directory), the
/// matrices as `ty` (`f16`, `f32`, or `q8_0` for ggml).
pub fn convert(input: &Path, output: &Path, to: &str, ty: &str) -> Result<(), StapesError> {
    use stapes_models::whisper::weights::WeightType;
    let format = Format::parse(to)
        .filter(|f| matches!(f, Format::Ggml | Format::Safetensors | Format::Ct2))
        .ok_or_else(|| StapesError::Usage(format!("--to {to}: expected ggml, hf or ct2")))?;
    let ty = match ty {
        "f16" => WeightType::F16,
        "f32" => WeightType::F32,
        "q8_0" | "q8" => WeightType::Q8_0,
        other => {
            return Err(StapesError::Usage(format!(
                "--type {other}: expected f16, f32 or q8_0"
            )))
        }
    };
    if ty == WeightType::Q8_0 && format != Format::Ggml {
        return Err(StapesError::Usage(format!(
            "--type q8_0 is written only with --to ggml (not {to})"
        )));
    }
    stapes_models::whisper::weights::convert_with(input, output, format, ty)?;
    Ok(())
}
