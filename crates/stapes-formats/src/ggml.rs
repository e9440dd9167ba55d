//! whisper.cpp's legacy ggml model files (`ggml-*.bin`): Whisper, read and written, and Parakeet
//! (TDT) files as `models/convert-parakeet-to-ggml.py` writes them, read ([`kind`] tells them
//! apart). The Whisper layout:
//!
//! ```text
//! i32 magic 0x67676d6c
//! i32 × 11 hparams: n_vocab n_audio_ctx n_audio_state n_audio_head n_audio_layer
//!                   n_text_ctx n_text_state n_text_head n_text_layer n_mels ftype
//! i32 n_mel, i32 n_fft, f32[n_mel × n_fft]      mel filterbank
//! i32 n_tokens, n_tokens × { i32 len, bytes }   regular tokens (raw bytes)
//! tensors until EOF: i32 n_dims, i32 name_len, i32 type, i32 ne[n_dims] (innermost first),
//!                    name, data (no padding)
//! ```
//! Tensor types: ggml's numbering (f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, bf16). Shapes are reported outermost first, like every other
//! container here (ggml's `ne` is reversed).

use crate::tensor::{DType, RawTensor};
use crate::{map_file, Cursor, FormatError, GGML_MAGIC};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Quantization version factor whisper.cpp folds into `ftype`.
const QNT_VERSION_FACTOR: i32 = 1000;
/// Sanity bounds for counts read before anything is allocated.
const MAX_TOKENS: usize = 1 << 20;
const MAX_NAME: usize = 4096;

/// The eleven header integers of a whisper.cpp model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlHparams {
    pub n_vocab: i32,
    pub n_audio_ctx: i32,
    pub n_audio_state: i32,
    pub n_audio_head: i32,
    pub n_audio_layer: i32,
    pub n_text_ctx: i32,
    pub n_text_state: i32,
    pub n_text_head: i32,
    pub n_text_layer: i32,
    pub n_mels: i32,
    /// 0 f32, 1 f16, 7 q8_0 (whisper.cpp's ggml_ftype), possibly + 1000 × quantization version.
    pub ftype: i32,
}

/// The mel filterbank stored in the file, `n_mel` rows of `n_fft` (= 201) bins.
#[derive(Clone, Debug, PartialEq)]
pub struct MelFilters {
    pub n_mel: usize,
    pub n_fft: usize,
    pub data: Vec<f32>,
}

/// A whisper.cpp ggml file.
#[derive(Clone, Debug)]
pub struct GgmlFile {
    pub path: PathBuf,
    pub hparams: GgmlHparams,
    pub mel_filters: MelFilters,
    /// Regular tokens as raw bytes, in id order.
    pub vocab: Vec<Vec<u8>>,
    /// Tensors in file order, with whisper.cpp's (OpenAI's) names.
    pub tensors: Vec<(String, RawTensor)>,
}

impl GgmlFile {
    pub fn get(&self, name: &str) -> Option<&RawTensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

/// ggml's `ggml_type` numbering (shared by ggml files and GGUF).
pub fn dtype_from_code(code: i32) -> Option<DType> {
    Some(match code {
        0 => DType::F32,
        1 => DType::F16,
        2 => DType::Q4_0,
        3 => DType::Q4_1,
        6 => DType::Q5_0,
        7 => DType::Q5_1,
        8 => DType::Q8_0,
        12 => DType::Q4K,
        13 => DType::Q5K,
        14 => DType::Q6K,
        24 => DType::I8,
        25 => DType::I16,
        26 => DType::I32,
        27 => DType::I64,
        30 => DType::BF16,
        _ => return None,
    })
}

pub fn dtype_code(d: DType) -> Option<i32> {
    Some(match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q4_0 => 2,
        DType::Q4_1 => 3,
        DType::Q5_0 => 6,
        DType::Q5_1 => 7,
        DType::Q8_0 => 8,
        DType::Q4K => 12,
        DType::Q5K => 13,
        DType::Q6K => 14,
        DType::I8 => 24,
        DType::I16 => 25,
        DType::I32 => 26,
        DType::I64 => 27,
        DType::BF16 => 30,
        DType::U8 => return None,
    })
}

/// Reads a whisper.cpp ggml file; tensor data stays in the memory map.
pub fn read(path: &Path) -> Result<GgmlFile, FormatError> {
    let map = map_file(path)?;
    let corrupt = |detail: String| FormatError::corrupt(path, detail);
    let mut c = Cursor::new(&map);
    let h: [i32; 11] = read_header(&mut c, path)?;
    let hparams = GgmlHparams {
        n_vocab: h[0],
        n_audio_ctx: h[1],
        n_audio_state: h[2],
        n_audio_head: h[3],
        n_audio_layer: h[4],
        n_text_ctx: h[5],
        n_text_state: h[6],
        n_text_head: h[7],
        n_text_layer: h[8],
        n_mels: h[9],
        ftype: h[10],
    };
    if h[..10].iter().any(|&v| v <= 0) {
        return Err(corrupt(format!("hparams must be positive: {hparams:?}")));
    }
    let n_mel = c.i32().map_err(|e| corrupt(format!("mel filters: {e}")))?;
    let n_fft = c.i32().map_err(|e| corrupt(format!("mel filters: {e}")))?;
    let (n_mel, n_fft) = match (usize::try_from(n_mel), usize::try_from(n_fft)) {
        (Ok(a), Ok(b)) if a <= 1024 && b <= 65536 => (a, b),
        _ => {
            return Err(corrupt(format!(
                "mel filter size {n_mel} × {n_fft} is not plausible"
            )))
        }
    };
    let mel = read_f32s(&mut c, n_mel * n_fft, "mel filters", path)?;
    let mel_filters = MelFilters {
        n_mel,
        n_fft,
        data: mel,
    };
    let vocab = read_vocab(&mut c, path)?;
    let tensors = read_tensors(&mut c, &map, path)?;
    Ok(GgmlFile {
        path: path.to_path_buf(),
        hparams,
        mel_filters,
        vocab,
        tensors,
    })
}

/// Which model a ggml file holds: whisper.cpp writes Whisper and Parakeet files under the same
/// magic with different headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlKind {
    Whisper,
    /// `models/convert-parakeet-to-ggml.py` of whisper.cpp (the files of ggml-org/parakeet-GGUF).
    Parakeet,
}

/// Tells the two header layouts apart: after its 15 hparams a Parakeet file repeats `n_mels`
/// and gives `n_fft / 2 + 1` filterbank bins, where a Whisper file has its text decoder's
/// hparams and then `n_mels` and 201 bins after 11.
pub fn kind(path: &Path) -> Result<GgmlKind, FormatError> {
    let map = map_file(path)?;
    let ints: Vec<i32> = map
        .get(4..4 + 17 * 4)
        .ok_or_else(|| FormatError::corrupt(path, "ggml header: file too short"))?
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let parakeet = ints[7] > 0 && ints[15] == ints[5] && ints[16] == ints[7] / 2 + 1;
    let whisper = ints[11] == ints[9] && ints[12] == 201;
    Ok(if parakeet && !whisper {
        GgmlKind::Parakeet
    } else {
        GgmlKind::Whisper
    })
}

/// The fifteen header integers of a whisper.cpp Parakeet (TDT) model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParakeetHparams {
    /// Text tokens, blank not counted (NeMo's `decoder.vocab_size`).
    pub n_vocab: i32,
    pub n_audio_ctx: i32,
    pub n_audio_state: i32,
    pub n_audio_head: i32,
    pub n_audio_layer: i32,
    pub n_mels: i32,
    /// 0 f32, 1 f16, else ggml_ftype of a quantized file.
    pub ftype: i32,
    pub n_fft: i32,
    pub subsampling_factor: i32,
    pub n_subsampling_channels: i32,
    pub n_conv_kernel: i32,
    pub n_pred_dim: i32,
    pub n_pred_layers: i32,
    pub n_tdt_durations: i32,
    /// Greedy decoding's symbols per frame.
    pub n_max_tokens: i32,
}

/// A whisper.cpp Parakeet file:
///
/// ```text
/// i32 magic 0x67676d6c
/// i32 × 15 hparams (ParakeetHparams, in field order)
/// i32 n_mel, i32 n_fb, f32[n_mel × n_fb]        NeMo's mel filterbank
/// i32 n_window, f32[n_window]                    NeMo's STFT window
/// u32[n_tdt_durations]                           TDT durations
/// i32 n_tokens, n_tokens × { i32 len, bytes }   SentencePiece pieces in id order
/// tensors until EOF, as in a Whisper file, with NeMo's names
/// ```
/// NeMo's state dict as written by the converter: 1-sized dimensions squeezed except in 4-D conv
/// weights, conv biases of the subsampling as `(1, C, 1, 1)`, the prediction LSTM's gates
/// reordered from (i, f, g, o) to (i, f, o, g) and `bias_ih` folded into `bias_hh` (named
/// `bias_h_l{N}`).
#[derive(Clone, Debug)]
pub struct ParakeetGgmlFile {
    pub path: PathBuf,
    pub hparams: ParakeetHparams,
    pub mel_filters: MelFilters,
    pub window: Vec<f32>,
    pub durations: Vec<u32>,
    pub vocab: Vec<Vec<u8>>,
    pub tensors: Vec<(String, RawTensor)>,
}

/// Reads a whisper.cpp Parakeet file; tensor data stays in the memory map.
pub fn read_parakeet(path: &Path) -> Result<ParakeetGgmlFile, FormatError> {
    let map = map_file(path)?;
    let corrupt = |detail: String| FormatError::corrupt(path, detail);
    let mut c = Cursor::new(&map);
    let h: [i32; 15] = read_header(&mut c, path)?;
    let hparams = ParakeetHparams {
        n_vocab: h[0],
        n_audio_ctx: h[1],
        n_audio_state: h[2],
        n_audio_head: h[3],
        n_audio_layer: h[4],
        n_mels: h[5],
        ftype: h[6],
        n_fft: h[7],
        subsampling_factor: h[8],
        n_subsampling_channels: h[9],
        n_conv_kernel: h[10],
        n_pred_dim: h[11],
        n_pred_layers: h[12],
        n_tdt_durations: h[13],
        n_max_tokens: h[14],
    };
    // every count but ftype and the durations must be positive
    if h.iter()
        .enumerate()
        .any(|(i, &v)| v < 0 || (v == 0 && i != 6 && i != 13))
    {
        return Err(corrupt(format!("hparams out of range: {hparams:?}")));
    }
    let mut count = |what: &str, max: usize| -> Result<usize, FormatError> {
        let n = c.i32().map_err(|e| corrupt(format!("{what}: {e}")))?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| corrupt(format!("{what} {n} is not plausible")))
    };
    let n_mel = count("filterbank rows", 1024)?;
    let n_fb = count("filterbank bins", 65536)?;
    let n_fft = usize::try_from(hparams.n_fft).unwrap_or(0);
    if n_mel != hparams.n_mels as usize || n_fb != n_fft / 2 + 1 {
        return Err(corrupt(format!(
            "filterbank {n_mel} × {n_fb} for n_mels {} and n_fft {n_fft}",
            hparams.n_mels
        )));
    }
    let mel = read_f32s(&mut c, n_mel * n_fb, "mel filters", path)?;
    let n_window = c
        .i32()
        .map_err(|e| corrupt(format!("window length: {e}")))?;
    let n_window = usize::try_from(n_window)
        .ok()
        .filter(|&n| n > 0 && n <= n_fft)
        .ok_or_else(|| corrupt(format!("window length {n_window} for n_fft {n_fft}")))?;
    let window = read_f32s(&mut c, n_window, "window", path)?;
    let mut durations = Vec::new();
    for i in 0..hparams.n_tdt_durations {
        durations.push(
            c.u32()
                .map_err(|e| corrupt(format!("TDT duration {i}: {e}")))?,
        );
    }
    let vocab = read_vocab(&mut c, path)?;
    let tensors = read_tensors(&mut c, &map, path)?;
    Ok(ParakeetGgmlFile {
        path: path.to_path_buf(),
        hparams,
        mel_filters: MelFilters {
            n_mel,
            n_fft: n_fb,
            data: mel,
        },
        window,
        durations,
        vocab,
        tensors,
    })
}

/// The magic and the `N` header integers both model kinds start with.
fn read_header<const N: usize>(c: &mut Cursor, path: &Path) -> Result<[i32; N], FormatError> {
    let corrupt = |detail: String| FormatError::corrupt(path, detail);
    let magic = c.u32().map_err(|e| corrupt(format!("header: {e}")))?;
    if magic != GGML_MAGIC {
        return Err(corrupt(format!(
            "bad magic {magic:#010x}, expected ggml {GGML_MAGIC:#010x}"
        )));
    }
    let mut h = [0i32; N];
    for (i, v) in h.iter_mut().enumerate() {
        *v = c.i32().map_err(|e| corrupt(format!("hparams[{i}]: {e}")))?;
    }
    Ok(h)
}

/// `n` little-endian f32s at the cursor.
fn read_f32s(c: &mut Cursor, n: usize, what: &str, path: &Path) -> Result<Vec<f32>, FormatError> {
    let b = c
        .take(n * 4)
        .map_err(|e| FormatError::corrupt(path, format!("{what}: {e}")))?;
    Ok(b.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// The vocabulary both model kinds write: a count, then each token as length and bytes.
fn read_vocab(c: &mut Cursor, path: &Path) -> Result<Vec<Vec<u8>>, FormatError> {
    let corrupt = |detail: String| FormatError::corrupt(path, detail);
    let n_tokens = c
        .i32()
        .map_err(|e| corrupt(format!("vocabulary size: {e}")))?;
    let n_tokens = usize::try_from(n_tokens)
        .ok()
        .filter(|&n| n <= MAX_TOKENS && n <= c.remaining() / 4)
        .ok_or_else(|| corrupt(format!("vocabulary size {n_tokens} is not plausible")))?;
    let mut vocab = Vec::with_capacity(n_tokens);
    for i in 0..n_tokens {
        let tok = (|| -> Result<Vec<u8>, String> {
            let len = c.u32()? as usize;
            Ok(c.take(len)?.to_vec())
        })()
        .map_err(|e| corrupt(format!("vocabulary token {i}: {e}")))?;
        vocab.push(tok);
    }
    Ok(vocab)
}

/// Tensor records from the cursor to the end of the file (the layout both whisper.cpp model kinds
/// share); data stays in the map.
fn read_tensors(
    c: &mut Cursor,
    map: &std::sync::Arc<memmap2::Mmap>,
    path: &Path,
) -> Result<Vec<(String, RawTensor)>, FormatError> {
    let mut tensors: Vec<(String, RawTensor)> = Vec::new();
    let mut index = 0usize;
    while c.remaining() > 0 {
        let mut name = String::new();
        let rec = (|| -> Result<RawTensor, String> {
            let n_dims = c.i32()?;
            let name_len = c.i32()?;
            let code = c.i32()?;
            if !(0..=4).contains(&n_dims) {
                return Err(format!("n_dims {n_dims} (expected 0..=4)"));
            }
            let name_len = usize::try_from(name_len)
                .ok()
                .filter(|&n| n <= MAX_NAME)
                .ok_or(format!("name length {name_len}"))?;
            let mut ne = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                let d = c.i32()?;
                ne.push(usize::try_from(d).map_err(|_| format!("negative dimension {d}"))?);
            }
            name = String::from_utf8(c.take(name_len)?.to_vec())
                .map_err(|_| "name is not UTF-8".to_string())?;
            let dtype = dtype_from_code(code).ok_or_else(|| {
                format!("unsupported ggml type {code} (f32, f16, bf16, q4_0/1, q5_0/1, q8_0, q4_k, q5_k, q6_k are read)")
            })?;
            let shape: Vec<usize> = ne.into_iter().rev().collect();
            let n = crate::tensor::numel(&shape).ok_or("shape overflows")?;
            let bytes = dtype
                .storage_bytes(n)
                .ok_or_else(|| format!("{n} elements cannot be {dtype}"))?;
            let start = c.pos();
            c.skip(bytes).map_err(|e| format!("data: {e}"))?;
            RawTensor::mapped(dtype, shape, map.clone(), start, bytes)
        })();
        match rec {
            Ok(t) => {
                if tensors.iter().any(|(n, _)| *n == name) {
                    return Err(FormatError::BadTensor {
                        path: path.to_path_buf(),
                        tensor: name,
                        detail: "duplicate tensor".into(),
                    });
                }
                tensors.push((name, t))
            }
            Err(detail) => {
                let tensor = if name.is_empty() {
                    format!("#{index}")
                } else {
                    format!("#{index} {name}")
                };
                return Err(FormatError::BadTensor {
                    path: path.to_path_buf(),
                    tensor,
                    detail,
                });
            }
        }
        index += 1;
    }
    Ok(tensors)
}

/// The `ftype` header value for a file whose matrices are `d` (whisper.cpp's ggml_ftype).
pub fn ftype_for(d: DType) -> Option<i32> {
    Some(match d {
        DType::F32 => 0,
        DType::F16 => 1,
        // MOSTLY_Q8_0 with the current quantization version (2).
        DType::Q8_0 => 7 + 2 * QNT_VERSION_FACTOR,
        _ => return None,
    })
}

/// Writes a whisper.cpp ggml file: header, mel filters, vocabulary, then the tensors in order.
pub fn write(path: &Path, file: &GgmlFile) -> Result<(), FormatError> {
    let io = |source| FormatError::io(path, source);
    let bad = |tensor: &str, detail: String| FormatError::BadTensor {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        detail,
    };
    let mf = &file.mel_filters;
    if mf.data.len() != mf.n_mel * mf.n_fft {
        return Err(FormatError::corrupt(
            path,
            "mel filter data does not match n_mel × n_fft",
        ));
    }
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let h = &file.hparams;
    let mut head: Vec<u8> = Vec::new();
    for v in [
        GGML_MAGIC as i32,
        h.n_vocab,
        h.n_audio_ctx,
        h.n_audio_state,
        h.n_audio_head,
        h.n_audio_layer,
        h.n_text_ctx,
        h.n_text_state,
        h.n_text_head,
        h.n_text_layer,
        h.n_mels,
        h.ftype,
        mf.n_mel as i32,
        mf.n_fft as i32,
    ] {
        head.extend_from_slice(&v.to_le_bytes());
    }
    for v in &mf.data {
        head.extend_from_slice(&v.to_le_bytes());
    }
    head.extend_from_slice(&(file.vocab.len() as i32).to_le_bytes());
    for t in &file.vocab {
        head.extend_from_slice(&(t.len() as i32).to_le_bytes());
        head.extend_from_slice(t);
    }
    w.write_all(&head).map_err(io)?;
    for (name, t) in &file.tensors {
        let code = dtype_code(t.dtype)
            .ok_or_else(|| bad(name, format!("{} cannot be stored in ggml", t.dtype)))?;
        if t.shape.len() > 4 {
            return Err(bad(name, "rank above 4".into()));
        }
        let mut rec = Vec::new();
        for v in [t.shape.len() as i32, name.len() as i32, code] {
            rec.extend_from_slice(&v.to_le_bytes());
        }
        for &d in t.shape.iter().rev() {
            let d = i32::try_from(d).map_err(|_| bad(name, "dimension above i32".into()))?;
            rec.extend_from_slice(&d.to_le_bytes());
        }
        rec.extend_from_slice(name.as_bytes());
        w.write_all(&rec).map_err(io)?;
        w.write_all(t.bytes()).map_err(io)?;
    }
    w.flush().map_err(io)
}
