//! Whisper's byte-level BPE tokenizer, from whichever vocabulary file the checkpoint ships:
//! CTranslate2 `vocabulary.txt`, HF `tokenizer.json` or `vocab.json` (+ `added_tokens.json`), or
//! the vocabulary embedded in a whisper.cpp ggml file.
//!
//! Special tokens are looked up by their text in the vocabulary; only a ggml file (which stores
//! the regular tokens alone) falls back to whisper.cpp's positional rule.

use crate::{ModelError, Result};
use std::collections::HashMap;
use std::path::Path;

/// Language codes in Whisper's token order (`<|en|>` is the first language token).
pub const LANGUAGES: [&str; 100] = [
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it",
    "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur",
    "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn",
    "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si",
    "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo",
    "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln",
    "ha", "ba", "jw", "su", "yue",
];

/// Ids of the control tokens, resolved from the vocabulary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecialTokens {
    pub eot: u32,
    pub sot: u32,
    pub sot_prev: u32,
    pub sot_lm: u32,
    pub translate: u32,
    pub transcribe: u32,
    pub no_timestamps: u32,
    /// `<|nospeech|>` (newer vocabularies) or `<|nocaptions|>`.
    pub no_speech: u32,
    /// `<|0.00|>`; every id at or above it is a timestamp (0.02 s steps).
    pub timestamp_begin: u32,
}

/// GPT-2's reversible byte ↔ printable-character table.
fn bytes_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        table[b as usize] = char::from_u32(c).unwrap_or('\u{fffd}');
    }
    table
}

fn unicode_to_bytes() -> HashMap<char, u8> {
    bytes_to_unicode()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect()
}

/// The GPT-2 pre-tokenizer pattern Whisper's tokenizers use.
const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Whisper tokenizer: decode for every vocabulary source, encode for prompts.
#[derive(Clone)]
pub struct WhisperTokenizer {
    /// Token text as the vocabulary spells it (byte-level characters for regular tokens).
    strings: Vec<String>,
    /// Raw bytes of each token (special tokens: their text).
    bytes: Vec<Vec<u8>>,
    special: SpecialTokens,
    languages: Vec<(String, u32)>,
    multilingual: bool,
    /// HF tokenizer for encoding where a tokenizer.json exists.
    /// Loaded on the first `encode` only: building it costs more than the rest of the load.
    hf_path: Option<std::path::PathBuf>,
    hf: std::sync::OnceLock<std::result::Result<tokenizers::Tokenizer, String>>,
    /// Regular tokens by bytes; the id is the BPE merge rank (tiktoken's convention, which
    /// Whisper's vocabularies follow).
    /// Built on the first vocabulary-only `encode`.
    bpe: std::sync::OnceLock<std::result::Result<Bpe, String>>,
}

/// Merge ranks and pre-tokenizer for encoding without tokenizer.json.
#[derive(Clone)]
struct Bpe {
    ranks: HashMap<Vec<u8>, u32>,
    pattern: fancy_regex::Regex,
}

impl std::fmt::Debug for WhisperTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhisperTokenizer")
            .field("vocab", &self.strings.len())
            .field("special", &self.special)
            .field("languages", &self.languages.len())
            .finish()
    }
}

fn bad(path: &Path, detail: impl Into<String>) -> ModelError {
    ModelError::bad_model(path, detail)
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    serde_json::from_str(&read_text(path)?).map_err(|e| bad(path, format!("invalid JSON: {e}")))
}

/// Collects `{token: id}` entries into an id-indexed table, rejecting ids far beyond the entry
/// count (a corrupt file must not make us allocate gigabytes).
fn place(path: &Path, table: &mut Vec<Option<String>>, token: &str, id: u64) -> Result<()> {
    let id = usize::try_from(id)
        .ok()
        .filter(|&i| i < 1 << 20)
        .ok_or_else(|| bad(path, format!("token id {id} out of range")))?;
    if table.len() <= id {
        table.resize(id + 1, None);
    }
    table[id] = Some(token.to_string());
    Ok(())
}

impl WhisperTokenizer {
    /// Loads the tokenizer of a model directory: `vocabulary.json` / `vocabulary.txt`
    /// (CTranslate2), else
    /// `tokenizer.json`, else `vocab.json`. A `tokenizer.json`, where present, is used for
    /// encoding. `vocab_size` is the model's (embedding rows): tokens the files do not list
    /// (e.g. timestamps missing from a tokenizer.json) are filled in.
    pub fn from_dir(dir: &Path, vocab_size: usize) -> Result<Self> {
        let tj = dir.join("tokenizer.json");
        let mut tok = if dir.join("vocabulary.json").is_file() {
            Self::from_vocabulary_json(&dir.join("vocabulary.json"), vocab_size)?
        } else if dir.join("vocabulary.txt").is_file() {
            Self::from_vocabulary_txt(&dir.join("vocabulary.txt"), vocab_size)?
        } else if tj.is_file() {
            Self::from_tokenizer_json(&tj, vocab_size)?
        } else if dir.join("vocab.json").is_file() {
            Self::from_vocab_json(dir, vocab_size)?
        } else {
            return Err(bad(
                dir,
                "no tokenizer found (vocabulary.txt, tokenizer.json or vocab.json)",
            ));
        };
        if tok.hf_path.is_none() && tj.is_file() {
            tok.hf_path = Some(tj);
        }
        Ok(tok)
    }

    /// CTranslate2 `vocabulary.txt`: one token per line, in id order.
    pub fn from_vocabulary_txt(path: &Path, vocab_size: usize) -> Result<Self> {
        let text = read_text(path)?;
        // The file ends with a newline; an empty line inside is a real (empty) token.
        let body = text.strip_suffix('\n').unwrap_or(&text);
        let strings = body
            .split('\n')
            .map(|s| s.strip_suffix('\r').unwrap_or(s).to_string())
            .collect();
        Self::from_strings(path, strings, vocab_size)
    }

    /// CTranslate2 ≥ 3 `vocabulary.json`: a JSON list of tokens in id order.
    pub fn from_vocabulary_json(path: &Path, vocab_size: usize) -> Result<Self> {
        let v = read_json(path)?;
        let list = v
            .as_array()
            .ok_or_else(|| bad(path, "vocabulary.json is not a list"))?;
        let strings = list
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad(path, format!("entry {i} is not a string")))
            })
            .collect::<Result<Vec<String>>>()?;
        Self::from_strings(path, strings, vocab_size)
    }

    /// HF `tokenizer.json` (BPE model vocab + added tokens).
    pub fn from_tokenizer_json(path: &Path, vocab_size: usize) -> Result<Self> {
        let v = read_json(path)?;
        let vocab = v
            .pointer("/model/vocab")
            .and_then(|x| x.as_object())
            .ok_or_else(|| bad(path, "tokenizer.json has no model.vocab object"))?;
        let mut table: Vec<Option<String>> = Vec::new();
        for (tok, id) in vocab {
            let id = id
                .as_u64()
                .ok_or_else(|| bad(path, format!("token `{tok}` has a non-integer id")))?;
            place(path, &mut table, tok, id)?;
        }
        if let Some(added) = v.get("added_tokens").and_then(|x| x.as_array()) {
            for a in added {
                let (Some(id), Some(content)) = (
                    a.get("id").and_then(|x| x.as_u64()),
                    a.get("content").and_then(|x| x.as_str()),
                ) else {
                    return Err(bad(path, "added_tokens entry without id/content"));
                };
                place(path, &mut table, content, id)?;
            }
        }
        let mut tok = Self::from_table(path, table, vocab_size)?;
        tok.hf_path = Some(path.to_path_buf());
        Ok(tok)
    }

    /// HF slow-tokenizer files: `vocab.json` (+ `added_tokens.json`).
    pub fn from_vocab_json(dir: &Path, vocab_size: usize) -> Result<Self> {
        let path = dir.join("vocab.json");
        let v = read_json(&path)?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad(&path, "vocab.json is not an object"))?;
        let mut table: Vec<Option<String>> = Vec::new();
        for (tok, id) in obj {
            let id = id
                .as_u64()
                .ok_or_else(|| bad(&path, format!("token `{tok}` has a non-integer id")))?;
            place(&path, &mut table, tok, id)?;
        }
        let added = dir.join("added_tokens.json");
        if added.is_file() {
            let a = read_json(&added)?;
            for (tok, id) in a.as_object().ok_or_else(|| bad(&added, "not an object"))? {
                let id = id
                    .as_u64()
                    .ok_or_else(|| bad(&added, format!("token `{tok}` has a non-integer id")))?;
                place(&added, &mut table, tok, id)?;
            }
        }
        Self::from_table(&path, table, vocab_size)
    }

    /// The vocabulary of a whisper.cpp ggml file: the regular tokens as raw bytes (the special
    /// tokens are implied by the vocabulary size, as whisper.cpp does).
    pub fn from_ggml_vocab(path: &Path, tokens: &[Vec<u8>], vocab_size: usize) -> Result<Self> {
        let enc = bytes_to_unicode();
        let mut strings: Vec<String> = tokens
            .iter()
            .map(|t| {
                // Control tokens some converters keep in the list stay readable as they are.
                match std::str::from_utf8(t) {
                    Ok(s) if s.starts_with("<|") && s.ends_with("|>") => s.to_string(),
                    _ => t.iter().map(|&b| enc[b as usize]).collect(),
                }
            })
            .collect();
        let multilingual = vocab_size >= 51865;
        // whisper.cpp's rule: regular tokens end at 50256 (.en) / 50257 (multilingual); the
        // language tokens follow SOT and their count follows from the vocabulary size.
        let eot = if multilingual { 50257 } else { 50256 };
        let n_lang = vocab_size.saturating_sub(51765 + usize::from(multilingual));
        if vocab_size < eot + 1 + 1 + n_lang + 7 || strings.len() > vocab_size {
            return Err(bad(
                path,
                format!(
                    "ggml vocabulary of {} tokens does not fit a Whisper model of {vocab_size}",
                    strings.len()
                ),
            ));
        }
        // A short list leaves holes below EOT; they decode to nothing (whisper.cpp names them
        // "[_extra_token_N]").
        if strings.len() < eot {
            strings.resize(eot, String::new());
        }
        let mut specials = vec![
            "<|endoftext|>".to_string(),
            "<|startoftranscript|>".to_string(),
        ];
        for i in 0..n_lang {
            match LANGUAGES.get(i) {
                Some(code) => specials.push(format!("<|{code}|>")),
                None => specials.push(format!("<|lang{i}|>")),
            }
        }
        let no_speech = if vocab_size >= 51866 {
            "<|nospeech|>"
        } else {
            "<|nocaptions|>"
        };
        for s in [
            "<|translate|>",
            "<|transcribe|>",
            "<|startoflm|>",
            "<|startofprev|>",
            no_speech,
            "<|notimestamps|>",
        ] {
            specials.push(s.to_string());
        }
        for (k, s) in specials.into_iter().enumerate() {
            let id = eot + k;
            if id >= strings.len() {
                strings.push(s);
            }
        }
        Self::from_strings(path, strings, vocab_size)
    }

    /// Whisper's token layout without real text (checkpoints shipped without tokenizer files,
    /// synthetic models): the 256 byte tokens, then `<|tokN|>` placeholders up to the control
    /// tokens, which sit where whisper.cpp's rule puts them for `vocab_size`.
    pub fn placeholder(vocab_size: usize) -> Result<Self> {
        let eot = if vocab_size >= 51865 { 50257 } else { 50256 };
        let tokens: Vec<Vec<u8>> = (0..eot)
            .map(|i| {
                if i < 256 {
                    vec![i as u8]
                } else {
                    format!("<|tok{i}|>").into_bytes()
                }
            })
            .collect();
        Self::from_ggml_vocab(Path::new("<placeholder vocabulary>"), &tokens, vocab_size)
    }

    fn from_table(path: &Path, table: Vec<Option<String>>, vocab_size: usize) -> Result<Self> {
        let strings: Vec<String> = table
            .into_iter()
            .enumerate()
            .map(|(i, s)| s.unwrap_or_else(|| format!("<|unused_{i}|>")))
            .collect();
        Self::from_strings(path, strings, vocab_size)
    }

    fn from_strings(path: &Path, mut strings: Vec<String>, vocab_size: usize) -> Result<Self> {
        let find =
            |strings: &[String], s: &str| strings.iter().position(|x| x == s).map(|i| i as u32);
        let need = |strings: &[String], s: &str| {
            find(strings, s).ok_or_else(|| bad(path, format!("vocabulary has no `{s}` token")))
        };
        let eot = need(&strings, "<|endoftext|>")?;
        let no_timestamps = need(&strings, "<|notimestamps|>")?;
        // Vocabularies without the timestamp tokens (HF tokenizer.json of older conversions) get
        // them appended after <|notimestamps|>.
        let timestamp_begin = match find(&strings, "<|0.00|>") {
            Some(t) => t,
            None => {
                if strings.len() != no_timestamps as usize + 1 {
                    return Err(bad(
                        path,
                        "vocabulary has no `<|0.00|>` and tokens after `<|notimestamps|>`",
                    ));
                }
                no_timestamps + 1
            }
        };
        if strings.len() > vocab_size.max(timestamp_begin as usize + 1) && vocab_size != 0 {
            return Err(bad(
                path,
                format!(
                    "vocabulary has {} tokens, the model only {vocab_size}",
                    strings.len()
                ),
            ));
        }
        while strings.len() < vocab_size {
            let k = strings.len() - timestamp_begin as usize;
            strings.push(format!("<|{:.2}|>", k as f64 * 0.02));
        }
        let special = SpecialTokens {
            eot,
            sot: need(&strings, "<|startoftranscript|>")?,
            sot_prev: need(&strings, "<|startofprev|>")?,
            sot_lm: need(&strings, "<|startoflm|>")?,
            translate: need(&strings, "<|translate|>")?,
            transcribe: need(&strings, "<|transcribe|>")?,
            no_timestamps,
            no_speech: find(&strings, "<|nospeech|>")
                .or_else(|| find(&strings, "<|nocaptions|>"))
                .ok_or_else(|| {
                    bad(
                        path,
                        "vocabulary has neither `<|nospeech|>` nor `<|nocaptions|>`",
                    )
                })?,
            timestamp_begin,
        };
        let multilingual = strings.len() >= 51865;
        let mut languages = Vec::new();
        if multilingual {
            for id in special.sot + 1..special.translate {
                let s = &strings[id as usize];
                let code = s.strip_prefix("<|").and_then(|s| s.strip_suffix("|>"));
                match code {
                    Some(c) => languages.push((c.to_string(), id)),
                    None => {
                        return Err(bad(
                            path,
                            format!("token {id} `{s}` between SOT and translate is not a language"),
                        ))
                    }
                }
            }
        }
        let dec = unicode_to_bytes();
        let bytes: Vec<Vec<u8>> = strings
            .iter()
            .enumerate()
            .map(|(id, s)| {
                if id as u32 >= eot {
                    return s.as_bytes().to_vec();
                }
                s.chars()
                    .map(|c| dec.get(&c).copied())
                    .collect::<Option<Vec<u8>>>()
                    .unwrap_or_else(|| s.as_bytes().to_vec())
            })
            .collect();
        Ok(Self {
            strings,
            bytes,
            special,
            languages,
            multilingual,
            hf_path: None,
            hf: std::sync::OnceLock::new(),
            bpe: std::sync::OnceLock::new(),
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.strings.len()
    }

    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    pub fn eot(&self) -> u32 {
        self.special.eot
    }

    pub fn sot(&self) -> u32 {
        self.special.sot
    }

    pub fn timestamp_begin(&self) -> u32 {
        self.special.timestamp_begin
    }

    pub fn is_multilingual(&self) -> bool {
        self.multilingual
    }

    /// (code, token id) of every language, in Whisper's order; empty for English-only models.
    pub fn languages(&self) -> &[(String, u32)] {
        &self.languages
    }

    pub fn language_token(&self, code: &str) -> Option<u32> {
        self.languages
            .iter()
            .find(|(c, _)| c == code)
            .map(|&(_, id)| id)
    }

    pub fn language_code(&self, id: u32) -> Option<&str> {
        self.languages
            .iter()
            .find(|&&(_, i)| i == id)
            .map(|(c, _)| c.as_str())
    }

    /// Every id at or above EOT is a control or timestamp token.
    pub fn is_special(&self, id: u32) -> bool {
        id >= self.special.eot
    }

    pub fn is_timestamp(&self, id: u32) -> bool {
        id >= self.special.timestamp_begin
    }

    /// The token as the vocabulary spells it (`Ġthe`, `<|en|>`, `<|1.00|>`).
    pub fn token_str(&self, id: u32) -> Option<&str> {
        self.strings.get(id as usize).map(String::as_str)
    }

    /// The raw bytes a token stands for (its text for control tokens).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.bytes.get(id as usize).map(Vec::as_slice)
    }

    /// Id of a token spelled as in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.strings
            .iter()
            .position(|s| s == token)
            .map(|i| i as u32)
    }

    /// Text of the regular tokens; control and timestamp tokens are skipped. Invalid UTF-8 (a
    /// character split across a cut) becomes U+FFFD, as the peers do.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut buf = Vec::new();
        for &id in ids {
            if id < self.special.eot {
                if let Some(b) = self.bytes.get(id as usize) {
                    buf.extend_from_slice(b);
                }
            }
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Like [`decode`](Self::decode) but timestamps appear as `<|1.08|>` (faster-whisper's
    /// `decode_with_timestamps`).
    pub fn decode_with_timestamps(&self, ids: &[u32]) -> String {
        let mut out = String::new();
        let mut run: Vec<u32> = Vec::new();
        for &id in ids {
            if self.is_timestamp(id) {
                out.push_str(&self.decode(&run));
                run.clear();
                out.push_str(&format!(
                    "<|{:.2}|>",
                    (id - self.special.timestamp_begin) as f64 * 0.02
                ));
            } else {
                run.push(id);
            }
        }
        out.push_str(&self.decode(&run));
        out
    }

    /// Token ids of `text` without control tokens (prompts: faster-whisper encodes
    /// `" " + prompt.trim()`). Uses tokenizer.json where the checkpoint has one, else Whisper's
    /// byte-level BPE over the vocabulary with ids as merge ranks.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        if let Some(path) = &self.hf_path {
            let hf = self
                .hf
                .get_or_init(|| load_hf(path).map_err(|e| e.to_string()))
                .as_ref()
                .map_err(|e| ModelError::bad_model(path, e.clone()))?;
            let enc = hf
                .encode(text, false)
                .map_err(|e| ModelError::BadInput(format!("tokenizer: {e}")))?;
            return Ok(enc.get_ids().to_vec());
        }
        let bpe = self
            .bpe
            .get_or_init(|| {
                let mut ranks = HashMap::with_capacity(self.special.eot as usize);
                for (id, b) in self
                    .bytes
                    .iter()
                    .enumerate()
                    .take(self.special.eot as usize)
                {
                    if !b.is_empty() {
                        ranks.entry(b.clone()).or_insert(id as u32);
                    }
                }
                let pattern = fancy_regex::Regex::new(GPT2_PATTERN).map_err(|e| e.to_string())?;
                Ok(Bpe { ranks, pattern })
            })
            .as_ref()
            .map_err(|e| ModelError::BadInput(format!("pre-tokenizer: {e}")))?;
        let mut ids = Vec::new();
        for m in bpe.pattern.find_iter(text) {
            let m = m.map_err(|e| ModelError::BadInput(format!("pre-tokenizer: {e}")))?;
            bpe.encode_piece(m.as_str().as_bytes(), &mut ids)?;
        }
        Ok(ids)
    }
}

impl Bpe {
    /// tiktoken's merge loop: repeatedly join the adjacent pair whose union has the lowest rank.
    fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) -> Result<()> {
        if let Some(&id) = self.ranks.get(piece) {
            out.push(id);
            return Ok(());
        }
        let mut parts: Vec<(usize, usize)> = (0..piece.len()).map(|i| (i, i + 1)).collect();
        loop {
            let mut best: Option<(u32, usize)> = None;
            for i in 0..parts.len().saturating_sub(1) {
                let span = &piece[parts[i].0..parts[i + 1].1];
                if let Some(&r) = self.ranks.get(span) {
                    if best.is_none_or(|(b, _)| r < b) {
                        best = Some((r, i));
                    }
                }
            }
            let Some((_, i)) = best else { break };
            parts[i].1 = parts[i + 1].1;
            parts.remove(i + 1);
        }
        for (a, b) in parts {
            let id = self.ranks.get(&piece[a..b]).ok_or_else(|| {
                ModelError::BadInput(format!("byte sequence {:?} has no token", &piece[a..b]))
            })?;
            out.push(*id);
        }
        Ok(())
    }
}

impl WhisperTokenizer {
    /// Splits tokens into words for word timestamps: returns (word text, its token ids). Text
    /// tokens are grouped at spaces (a token starting with a space or punctuation-only token
    /// starts a new word), except for languages written without spaces, where every decodable
    /// unit is a word (faster-whisper's `split_to_word_tokens`).
    pub fn split_to_word_tokens(&self, ids: &[u32], language: &str) -> Vec<(String, Vec<u32>)> {
        if matches!(language, "zh" | "ja" | "th" | "lo" | "my" | "yue") {
            self.split_unicode(ids)
        } else {
            self.split_spaces(ids)
        }
    }

    /// Groups tokens into the shortest runs that decode to whole characters; a replacement
    /// character that is in the full decode as well (truly invalid bytes) does not hold a run open.
    fn split_unicode(&self, ids: &[u32]) -> Vec<(String, Vec<u32>)> {
        let full: Vec<char> = self.decode_with_timestamps(ids).chars().collect();
        let mut out = Vec::new();
        let mut current: Vec<u32> = Vec::new();
        let mut offset = 0usize;
        for &id in ids {
            current.push(id);
            let text = self.decode_with_timestamps(&current);
            let bad = text.chars().position(|c| c == '\u{fffd}');
            let complete = match bad {
                None => true,
                Some(i) => full.get(offset + i) == Some(&'\u{fffd}'),
            };
            if complete {
                offset += text.chars().count();
                out.push((text, std::mem::take(&mut current)));
            }
        }
        out
    }

    fn split_spaces(&self, ids: &[u32]) -> Vec<(String, Vec<u32>)> {
        const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
        let mut out: Vec<(String, Vec<u32>)> = Vec::new();
        for (text, tokens) in self.split_unicode(ids) {
            let special = tokens.first().is_some_and(|&t| t >= self.special.eot);
            let with_space = text.starts_with(' ');
            // Python's `subword.strip() in string.punctuation` is a substring test.
            let punctuation = PUNCTUATION.contains(text.trim());
            match out.last_mut() {
                Some(last) if !(special || with_space || punctuation) => {
                    last.0.push_str(&text);
                    last.1.extend(tokens);
                }
                _ => out.push((text, tokens)),
            }
        }
        out
    }
}

fn load_hf(path: &Path) -> Result<tokenizers::Tokenizer> {
    tokenizers::Tokenizer::from_file(path).map_err(|e| bad(path, format!("tokenizer.json: {e}")))
}
