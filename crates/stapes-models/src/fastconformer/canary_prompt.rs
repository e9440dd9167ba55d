//! Canary's tokenizer and decoder prompt, both read from the model's own files.
//!
//! Tokenizers: an HF directory's `tokenizer.json` (transformers' `CanaryConverter` output: the
//! `<|…|>` control pieces are special added tokens), or the SentencePiece model(s) inside a
//! `.nemo`: one unified model (canary-1b-v2) or NeMo's aggregate tokenizer (canary-1b,
//! canary-1b-flash, canary-180m-flash: `spl_tokens` then one model per language, ids offset by
//! the sizes of the models before it, in the config's order).
//!
//! Prompts (NeMo `prompts/canary2.py` and `prompts/canary.py`), special tokens looked up by name:
//! ```text
//! canary2: <|startofcontext|> <|startoftranscript|> <|emo:undefined|> <|src|> <|tgt|>
//!          <|pnc|>|<|nopnc|> <|itn|>|<|noitn|> <|timestamp|>|<|notimestamp|> <|diarize|>|<|nodiarize|>
//! canary:  <|startoftranscript|> <|src|> <|transcribe|>|<|translate|> <|tgt|> <|pnc|>|<|nopnc|>
//! ```
//! Translation is a target language different from the source (canary2 has no task token).

use super::nemo::proto_fields;
use crate::{ModelError, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Which of NeMo's Canary prompt layouts a model was trained with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptFormat {
    /// canary-1b.
    Canary,
    /// canary-1b-flash, canary-180m-flash, canary-1b-v2.
    Canary2,
}

/// What to ask a Canary model for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CanaryRequest {
    /// Language of the speech (ISO code as the model names it: `en`, `de`, …).
    pub source: String,
    /// Language of the text; a different one than `source` is speech translation.
    pub target: String,
    /// Punctuation and capitalization.
    pub pnc: bool,
    /// Inverse text normalization (canary2 only).
    pub itn: bool,
    /// Timestamp tokens (canary2 only; they come back as ids, not times).
    pub timestamps: bool,
    /// Speaker-change tokens (canary2 only).
    pub diarize: bool,
}

impl Default for CanaryRequest {
    fn default() -> Self {
        Self {
            source: "en".into(),
            target: "en".into(),
            pnc: true,
            itn: false,
            timestamps: false,
            diarize: false,
        }
    }
}

/// The text side of a Canary model: id ↔ piece, special tokens by name, decoding.
pub struct CanaryTokenizer {
    path: PathBuf,
    kind: Kind,
    /// Piece → id (the first id when aggregate models repeat a piece: `spl_tokens` win).
    ids: HashMap<String, u32>,
    vocab_size: usize,
}

enum Kind {
    Hf(Box<tokenizers::Tokenizer>),
    /// `aggregate`: NeMo's AggregateTokenizer joins pieces (`<unk>` as its text); one
    /// SentencePiece model decodes as sentencepiece does (`<unk>` as ` ⁇ `).
    Pieces {
        pieces: Vec<Piece>,
        aggregate: bool,
    },
}

struct Piece {
    text: String,
    kind: PieceKind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PieceKind {
    Normal,
    Unknown,
    /// Control pieces and the `<|…|>` / `<pad>` prompt tokens: never part of the text.
    Special,
    /// `<0xNN>` byte fallback.
    Byte(u8),
}

/// SentencePiece `ModelProto` pieces: (piece, type) with NeMo's type numbers (1 normal,
/// 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte).
fn spm_pieces(model: &[u8]) -> std::result::Result<Vec<(String, u64)>, String> {
    let mut out = Vec::new();
    for (field, span, _) in proto_fields(model)? {
        if field != 1 {
            continue;
        }
        let (mut piece, mut kind) = (String::new(), 1u64);
        for (f, s, v) in proto_fields(span)? {
            match f {
                1 => {
                    piece = String::from_utf8(s.to_vec())
                        .map_err(|_| "a piece is not UTF-8".to_string())?
                }
                3 => kind = v,
                _ => {}
            }
        }
        out.push((piece, kind));
    }
    if out.is_empty() {
        return Err("no pieces in the SentencePiece model".into());
    }
    Ok(out)
}

fn is_prompt_token(p: &str) -> bool {
    (p.starts_with("<|") && p.ends_with("|>")) || p == "<pad>"
}

impl CanaryTokenizer {
    /// An HF `tokenizer.json`.
    pub fn from_hf_file(path: &Path) -> Result<Self> {
        let tok = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| ModelError::bad_model(path, format!("tokenizer.json: {e}")))?;
        let vocab = tok.get_vocab(true);
        let vocab_size = vocab.values().map(|&i| i as usize + 1).max().unwrap_or(0);
        Ok(Self {
            path: path.to_path_buf(),
            ids: vocab,
            vocab_size,
            kind: Kind::Hf(Box::new(tok)),
        })
    }

    /// One SentencePiece model, or several concatenated in order (NeMo's aggregate tokenizer).
    pub fn from_sentencepiece(path: &Path, models: &[(&str, &[u8])]) -> Result<Self> {
        let mut pieces = Vec::new();
        let mut ids = HashMap::new();
        for (name, bytes) in models {
            let list = spm_pieces(bytes)
                .map_err(|e| ModelError::bad_model(path, format!("tokenizer `{name}`: {e}")))?;
            for (text, kind) in list {
                let kind = match kind {
                    2 => PieceKind::Unknown,
                    3 | 5 => PieceKind::Special,
                    _ if is_prompt_token(&text) => PieceKind::Special,
                    6 => {
                        let hex = text
                            .strip_prefix("<0x")
                            .and_then(|h| h.strip_suffix('>'))
                            .and_then(|h| u8::from_str_radix(h, 16).ok())
                            .ok_or_else(|| {
                                ModelError::bad_model(
                                    path,
                                    format!("tokenizer `{name}`: byte piece `{text}`"),
                                )
                            })?;
                        PieceKind::Byte(hex)
                    }
                    _ => PieceKind::Normal,
                };
                ids.entry(text.clone()).or_insert(pieces.len() as u32);
                pieces.push(Piece { text, kind });
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            vocab_size: pieces.len(),
            ids,
            kind: Kind::Pieces {
                pieces,
                aggregate: models.len() > 1,
            },
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The id of a piece by its exact text (`<|en|>`, `<|endoftext|>`, …).
    pub fn token_id(&self, piece: &str) -> Option<u32> {
        self.ids.get(piece).copied()
    }

    fn need(&self, piece: &str) -> Result<u32> {
        self.token_id(piece).ok_or_else(|| {
            ModelError::bad_model(&self.path, format!("the tokenizer has no `{piece}` token"))
        })
    }

    /// Language codes the model has tokens for (`<|xx|>` / `<|xx-YY|>` pieces), sorted.
    pub fn languages(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .ids
            .keys()
            .filter_map(|p| p.strip_prefix("<|")?.strip_suffix("|>").map(str::to_string))
            .filter(|c| {
                let base = c.split('-').next().unwrap_or("");
                (2..=3).contains(&base.len()) && base.chars().all(|ch| ch.is_ascii_lowercase())
            })
            .collect();
        v.sort();
        v
    }

    /// The prompt format the vocabulary supports: canary2 when it has `<|startofcontext|>`.
    pub fn default_format(&self) -> PromptFormat {
        if self.token_id("<|startofcontext|>").is_some() {
            PromptFormat::Canary2
        } else {
            PromptFormat::Canary
        }
    }

    fn language(&self, code: &str) -> Result<u32> {
        self.token_id(&format!("<|{code}|>")).ok_or_else(|| {
            ModelError::BadOption(format!(
                "language `{code}` is not one this model knows ({})",
                self.languages().join(", ")
            ))
        })
    }

    /// The decoder prompt ids for `req`.
    pub fn prompt(&self, format: PromptFormat, req: &CanaryRequest) -> Result<Vec<u32>> {
        let (src, tgt) = (self.language(&req.source)?, self.language(&req.target)?);
        let flag = |on: bool, name: &str| -> Result<u32> {
            self.need(&if on {
                format!("<|{name}|>")
            } else {
                format!("<|no{name}|>")
            })
        };
        Ok(match format {
            PromptFormat::Canary2 => vec![
                self.need("<|startofcontext|>")?,
                self.need("<|startoftranscript|>")?,
                self.need("<|emo:undefined|>")?,
                src,
                tgt,
                flag(req.pnc, "pnc")?,
                flag(req.itn, "itn")?,
                flag(req.timestamps, "timestamp")?,
                flag(req.diarize, "diarize")?,
            ],
            PromptFormat::Canary => {
                if req.itn || req.timestamps || req.diarize {
                    return Err(ModelError::BadInput(
                        "this Canary model (canary prompt format) has no itn, timestamp or diarize switches".into(),
                    ));
                }
                let task = if req.source == req.target {
                    "<|transcribe|>"
                } else {
                    "<|translate|>"
                };
                vec![
                    self.need("<|startoftranscript|>")?,
                    src,
                    self.need(task)?,
                    tgt,
                    flag(req.pnc, "pnc")?,
                ]
            }
        })
    }

    /// `<|endoftext|>`.
    pub fn eos(&self) -> Result<u32> {
        self.need("<|endoftext|>")
    }

    /// Text of `ids` with the prompt / control tokens left out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match &self.kind {
            Kind::Hf(t) => t
                .decode(ids, true)
                .map_err(|e| ModelError::bad_model(&self.path, format!("tokenizer decode: {e}"))),
            Kind::Pieces { pieces, aggregate } => {
                let mut bytes = Vec::new();
                for &id in ids {
                    let p = pieces.get(id as usize).ok_or_else(|| {
                        ModelError::BadInput(format!(
                            "token id {id} is outside the vocabulary ({})",
                            pieces.len()
                        ))
                    })?;
                    match p.kind {
                        PieceKind::Special => {}
                        PieceKind::Unknown if *aggregate => {
                            bytes.extend_from_slice(p.text.as_bytes())
                        }
                        PieceKind::Unknown => bytes.extend_from_slice(" \u{2047} ".as_bytes()),
                        PieceKind::Byte(b) => bytes.push(b),
                        PieceKind::Normal => {
                            bytes.extend_from_slice(p.text.replace('\u{2581}', " ").as_bytes())
                        }
                    }
                }
                let text = String::from_utf8_lossy(&bytes);
                Ok(text.strip_prefix(' ').unwrap_or(&text).to_string())
            }
        }
    }
}
