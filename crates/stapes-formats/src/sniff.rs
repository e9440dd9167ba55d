//! Which container a path holds, judged from content (magic numbers, the files in a directory),
//! never from the file name alone.

use crate::FormatError;
use std::io::Read;
use std::path::Path;

/// A model container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// CTranslate2: a directory with `config.json` + `model.bin`, or the `model.bin` itself.
    Ct2,
    /// whisper.cpp's legacy ggml file (magic `0x67676d6c`).
    Ggml,
    /// GGUF file.
    Gguf,
    /// HF transformers: a directory with `config.json` and `*.safetensors` (sharded or not), or
    /// one `.safetensors` file.
    Safetensors,
    /// ONNX protobuf.
    Onnx,
    /// NeMo `.nemo` archive (tar, possibly gzip-compressed).
    Nemo,
    /// PyTorch `torch.save` zip checkpoint (`.ckpt`, `.pt`; GigaAM's models).
    Torch,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Ct2 => "ctranslate2",
            Format::Ggml => "ggml",
            Format::Gguf => "gguf",
            Format::Safetensors => "safetensors",
            Format::Onnx => "onnx",
            Format::Nemo => "nemo",
            Format::Torch => "torch",
        }
    }

    /// Parses a user-facing format name (`ct2`, `ctranslate2`, `ggml`, `hf`, `safetensors`, …).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "ct2" | "ctranslate2" | "faster-whisper" => Format::Ct2,
            "ggml" | "whisper.cpp" | "whispercpp" => Format::Ggml,
            "gguf" => Format::Gguf,
            "hf" | "safetensors" | "transformers" => Format::Safetensors,
            "onnx" => Format::Onnx,
            "nemo" => Format::Nemo,
            "torch" | "pytorch" | "ckpt" => Format::Torch,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// ggml magic as it appears on disk (the u32 0x67676d6c, little-endian).
pub const GGML_MAGIC: u32 = 0x6767_6d6c;

/// Identifies the container at `path` (a file or a model directory).
pub fn sniff(path: &Path) -> Result<Format, FormatError> {
    let meta = std::fs::metadata(path).map_err(|e| FormatError::io(path, e))?;
    if meta.is_dir() {
        return sniff_dir(path);
    }
    let mut head = [0u8; 264];
    let n = read_head(path, &mut head)?;
    sniff_bytes(&head[..n]).ok_or_else(|| FormatError::Unsupported {
        path: path.to_path_buf(),
        detail:
            "not a model file this engine knows (CTranslate2, ggml, GGUF, safetensors, ONNX, NeMo, PyTorch checkpoint)"
                .into(),
    })
}

fn read_head(path: &Path, buf: &mut [u8]) -> Result<usize, FormatError> {
    let mut f = std::fs::File::open(path).map_err(|e| FormatError::io(path, e))?;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FormatError::io(path, e)),
        }
    }
    Ok(n)
}

fn sniff_dir(dir: &Path) -> Result<Format, FormatError> {
    let has = |name: &str| dir.join(name).is_file();
    if has("model.bin") {
        let mut head = [0u8; 264];
        let n = read_head(&dir.join("model.bin"), &mut head)?;
        if let Some(f) = sniff_bytes(&head[..n]) {
            return Ok(f);
        }
    }
    if has("model.safetensors") || has("model.safetensors.index.json") {
        return Ok(Format::Safetensors);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| FormatError::io(dir, e))?;
    let mut found = None;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.ends_with(".safetensors") && has("config.json") {
            return Ok(Format::Safetensors);
        }
        if found.is_none()
            && (name.ends_with(".nemo") || name.ends_with(".onnx") || name.ends_with(".gguf"))
        {
            let mut head = [0u8; 264];
            if let Ok(n) = read_head(&e.path(), &mut head) {
                found = sniff_bytes(&head[..n]);
            }
        }
    }
    found.ok_or_else(|| FormatError::Unsupported {
        path: dir.to_path_buf(),
        detail: "directory holds no recognised model (config.json + model.bin, *.safetensors, …)"
            .into(),
    })
}

/// Judges a container from its first bytes (264 are enough for every check).
pub fn sniff_bytes(b: &[u8]) -> Option<Format> {
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    };
    if u32_at(0) == Some(GGML_MAGIC) {
        return Some(Format::Ggml);
    }
    if b.starts_with(b"GGUF") {
        return Some(Format::Gguf);
    }
    if b.len() > 262 && &b[257..262] == b"ustar" {
        return Some(Format::Nemo);
    }
    if b.starts_with(&[0x1f, 0x8b]) {
        return Some(Format::Nemo);
    }
    // A zip's first local file header: torch.save has written zip archives since PyTorch 1.6.
    if b.starts_with(b"PK\x03\x04") {
        return Some(Format::Torch);
    }
    // CTranslate2: small version number, then a NUL-terminated spec name such as "WhisperSpec".
    if let Some(v) = u32_at(0) {
        if (1..=6).contains(&v) && b.len() >= 6 {
            let n = u16::from_le_bytes([b[4], b[5]]) as usize;
            if n >= 2
                && b.len() >= 6 + n
                && b[5 + n] == 0
                && b[6..5 + n]
                    .iter()
                    .all(|c| c.is_ascii_alphanumeric() || *c == b'_')
            {
                return Some(Format::Ct2);
            }
        }
    }
    // safetensors: u64 header length, then a JSON object.
    if b.len() >= 9 && b[8] == b'{' {
        return Some(Format::Safetensors);
    }
    // ONNX ModelProto: field 1 (ir_version, varint) comes first in every exporter we know.
    if b.first() == Some(&0x08) && b.get(1).is_some_and(|v| (1..=20).contains(v)) {
        return Some(Format::Onnx);
    }
    None
}
