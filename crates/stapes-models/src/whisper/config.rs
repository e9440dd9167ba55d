//! Whisper hyper-parameters and generation settings, whatever format they came from.

/// Shapes of one Whisper model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WhisperConfig {
    /// Mel bins of the front end (80, or 128 for large-v3 / turbo).
    pub n_mels: usize,
    /// Encoder positions: 1500 for a 30 s window (3000 mel frames, conv2 stride 2).
    pub n_audio_ctx: usize,
    /// Decoder positions (448).
    pub n_text_ctx: usize,
    pub d_model: usize,
    pub encoder_layers: usize,
    pub encoder_heads: usize,
    pub encoder_ffn: usize,
    pub decoder_layers: usize,
    pub decoder_heads: usize,
    pub decoder_ffn: usize,
    pub vocab_size: usize,
}

impl WhisperConfig {
    /// Published shapes by name (for `--synthetic`): tiny, base, small, medium, large-v3, large-v3-turbo.
    pub fn published(name: &str) -> Option<Self> {
        let (d, enc, dec, heads, mels, vocab) = match name.trim_start_matches("whisper-") {
            "tiny" => (384, 4, 4, 6, 80, 51865),
            "tiny.en" => (384, 4, 4, 6, 80, 51864),
            "base" => (512, 6, 6, 8, 80, 51865),
            "base.en" => (512, 6, 6, 8, 80, 51864),
            "small" => (768, 12, 12, 12, 80, 51865),
            "medium" => (1024, 24, 24, 16, 80, 51865),
            "large-v3" => (1280, 32, 32, 20, 128, 51866),
            "large-v3-turbo" | "turbo" => (1280, 32, 4, 20, 128, 51866),
            _ => return None,
        };
        Some(Self {
            n_mels: mels,
            n_audio_ctx: 1500,
            n_text_ctx: 448,
            d_model: d,
            encoder_layers: enc,
            encoder_heads: heads,
            encoder_ffn: 4 * d,
            decoder_layers: dec,
            decoder_heads: heads,
            decoder_ffn: 4 * d,
            vocab_size: vocab,
        })
    }
}

/// Decoding settings that ship with the weights (CTranslate2 config.json, HF generation_config.json,
/// or derived from the vocabulary for ggml files).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WhisperGeneration {
    /// Tokens never sampled (`suppress_ids` / `suppress_tokens`).
    pub suppress_tokens: Vec<u32>,
    /// Tokens not sampled at the first step (`suppress_ids_begin` / `begin_suppress_tokens`).
    pub begin_suppress_tokens: Vec<u32>,
    /// (decoder layer, head) pairs whose cross-attention aligns with time (word timestamps).
    pub alignment_heads: Vec<(usize, usize)>,
}
