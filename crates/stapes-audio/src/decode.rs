//! Container decoding (symphonia) down to mono f32 at the source rate, then resampling.

use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

use symphonia::core::codecs::audio::AudioDecoderOptions;
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::{FormatOptions, FormatReader, TrackType};
use symphonia::core::io::{MediaSource, MediaSourceStream, MediaSourceStreamOptions};
use symphonia::core::meta::MetadataOptions;

use crate::resample::Stream;
use crate::AudioError;

/// Longest input accepted, in seconds of audio (24 h).
pub const MAX_SECONDS: u64 = 24 * 3600;
/// Largest encoded input accepted, in bytes (4 GiB, the most a RIFF/WAV header can describe).
pub const MAX_BYTES: u64 = 4 << 30;

/// Decodes a file to 16 kHz mono f32; `-` reads the whole of stdin.
///
/// The format is recognised from the content, not from the file name.
pub fn load_file(path: &Path) -> Result<Vec<f32>, AudioError> {
    if path.as_os_str() == "-" {
        let label = PathBuf::from("<stdin>");
        let bytes = read_limited(std::io::stdin().lock(), &label)?;
        return decode_labeled(Box::new(Cursor::new(bytes)), None, &label);
    }
    let label = path.to_path_buf();
    let io_err = |source| AudioError::Io {
        path: label.clone(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io_err)?;
    if meta.is_dir() {
        return Err(AudioError::IsDirectory { path: label });
    }
    if meta.is_file() {
        if meta.len() == 0 {
            return Err(AudioError::Empty { path: label });
        }
        if meta.len() > MAX_BYTES {
            return Err(too_many_bytes(&label, meta.len()));
        }
        let file = std::fs::File::open(path).map_err(io_err)?;
        decode_labeled(Box::new(file), None, &label)
    } else {
        // A FIFO or character device: its length is unknown until read.
        let file = std::fs::File::open(path).map_err(io_err)?;
        let bytes = read_limited(file, &label)?;
        decode_labeled(Box::new(Cursor::new(bytes)), None, &label)
    }
}

/// Decodes an in-memory container (WAV/FLAC/MP3/OGG-Vorbis) to 16 kHz mono f32.
///
/// `hint_ext` (e.g. the extension of an uploaded file name) only orders the probes; the content
/// decides.
pub fn decode_bytes(bytes: Vec<u8>, hint_ext: Option<&str>) -> Result<Vec<f32>, AudioError> {
    let label = PathBuf::from("<input bytes>");
    if bytes.is_empty() {
        return Err(AudioError::Empty { path: label });
    }
    if bytes.len() as u64 > MAX_BYTES {
        return Err(too_many_bytes(&label, bytes.len() as u64));
    }
    decode_labeled(Box::new(Cursor::new(bytes)), hint_ext, &label)
}

/// Raw interleaved signed 16-bit little-endian PCM to 16 kHz mono f32.
pub fn decode_raw_s16le(
    bytes: &[u8],
    sample_rate: u32,
    channels: u16,
) -> Result<Vec<f32>, AudioError> {
    let label = PathBuf::from("<raw s16le>");
    if sample_rate == 0 || channels == 0 {
        return Err(AudioError::InvalidArgument(format!(
            "raw PCM needs a sample rate and channel count above zero (got {sample_rate} Hz, \
             {channels} channels)"
        )));
    }
    if bytes.is_empty() {
        return Err(AudioError::Empty { path: label });
    }
    let frame_bytes = 2 * channels as usize;
    if bytes.len() % frame_bytes != 0 {
        return Err(AudioError::Corrupt {
            path: label,
            detail: format!(
                "{} bytes is not a whole number of {channels}-channel 16-bit frames",
                bytes.len()
            ),
        });
    }
    let n_frames = bytes.len() / frame_bytes;
    check_duration(&label, n_frames as u64, sample_rate)?;
    let ch = channels as usize;
    let scale = 1.0 / (32768.0 * ch as f32);
    let mono: Vec<f32> = bytes
        .chunks_exact(frame_bytes)
        .map(|frame| {
            let sum: i32 = frame
                .chunks_exact(2)
                .map(|b| i16::from_le_bytes([b[0], b[1]]) as i32)
                .sum();
            sum as f32 * scale
        })
        .collect();
    let mut stream = Stream::new(sample_rate, &label)?;
    stream.push(&mono)?;
    stream.finish()
}

fn too_many_bytes(label: &Path, len: u64) -> AudioError {
    AudioError::TooLong {
        path: label.to_path_buf(),
        what: format!("{len} bytes"),
        limit: format!("{MAX_BYTES} bytes"),
    }
}

fn check_duration(label: &Path, frames: u64, rate: u32) -> Result<(), AudioError> {
    if frames > MAX_SECONDS * rate as u64 {
        return Err(AudioError::TooLong {
            path: label.to_path_buf(),
            what: format!("{:.0} s", frames as f64 / rate as f64),
            limit: format!("{MAX_SECONDS} s"),
        });
    }
    Ok(())
}

fn read_limited(reader: impl Read, label: &Path) -> Result<Vec<u8>, AudioError> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| AudioError::Io {
            path: label.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(too_many_bytes(label, bytes.len() as u64));
    }
    if bytes.is_empty() {
        return Err(AudioError::Empty {
            path: label.to_path_buf(),
        });
    }
    Ok(bytes)
}

fn corrupt(label: &Path, detail: impl Into<String>) -> AudioError {
    AudioError::Corrupt {
        path: label.to_path_buf(),
        detail: detail.into(),
    }
}

fn unsupported(label: &Path, detail: impl Into<String>) -> AudioError {
    AudioError::Unsupported {
        path: label.to_path_buf(),
        detail: detail.into(),
    }
}

/// Maps a symphonia error raised while recognising the container.
fn probe_error(label: &Path, err: SymError) -> AudioError {
    match err {
        SymError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            corrupt(label, "the stream ends inside its header")
        }
        SymError::IoError(source) => AudioError::Io {
            path: label.to_path_buf(),
            source,
        },
        SymError::DecodeError(msg) => corrupt(label, msg),
        SymError::Unsupported(_) => unsupported(
            label,
            "not a WAV, FLAC, MP3 or Ogg Vorbis stream that this build can read",
        ),
        other => unsupported(label, other.to_string()),
    }
}

/// [`decode_inner`], with a panic inside a codec (malformed input reaching an unchecked path in
/// a demuxer or decoder) turned into [`AudioError::Corrupt`] rather than taking the process down.
fn decode_labeled(
    source: Box<dyn MediaSource>,
    hint_ext: Option<&str>,
    label: &Path,
) -> Result<Vec<f32>, AudioError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decode_inner(source, hint_ext, label)
    }))
    .unwrap_or_else(|_| {
        Err(corrupt(
            label,
            "the decoder failed on malformed data (internal panic caught)",
        ))
    })
}

/// Decodes the default audio track to mono (channel mean) and resamples it to 16 kHz as the
/// packets arrive.
fn decode_inner(
    source: Box<dyn MediaSource>,
    hint_ext: Option<&str>,
    label: &Path,
) -> Result<Vec<f32>, AudioError> {
    let mss = MediaSourceStream::new(source, MediaSourceStreamOptions::default());
    let mut hint = Hint::new();
    if let Some(ext) = hint_ext {
        hint.with_extension(ext.trim_start_matches('.'));
    }
    let mut format: Box<dyn FormatReader> = symphonia::default::get_probe()
        .probe(
            &hint,
            mss,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .map_err(|e| probe_error(label, e))?;

    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(|| unsupported(label, "the container has no audio track"))?;
    let track_id = track.id;
    let declared_frames = track.num_frames;
    let params = track
        .codec_params
        .as_ref()
        .and_then(|p| p.audio())
        .ok_or_else(|| unsupported(label, "the audio track has no codec parameters"))?
        .clone();
    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(&params, &AudioDecoderOptions::default())
        .map_err(|e| match e {
            SymError::Unsupported(what) => unsupported(label, format!("codec: {what}")),
            other => corrupt(label, other.to_string()),
        })?;

    let mut rate = params.sample_rate;
    if rate == Some(0) {
        return Err(corrupt(label, "the stream declares a sample rate of 0 Hz"));
    }
    if let (Some(r), Some(n)) = (rate, declared_frames) {
        check_duration(label, n, r)?;
    }

    let mut stream: Option<Stream> = None;
    let mut mono: Vec<f32> = Vec::new();
    let mut interleaved: Vec<f32> = Vec::new();
    let mut packets = 0usize;
    let mut bad_packets = 0usize;
    let mut ended_early = false;
    loop {
        let packet = match format.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                ended_early = true;
                break;
            }
            Err(SymError::IoError(source)) => {
                return Err(AudioError::Io {
                    path: label.to_path_buf(),
                    source,
                })
            }
            Err(SymError::DecodeError(msg)) => return Err(corrupt(label, msg)),
            Err(SymError::ResetRequired) => {
                return Err(unsupported(
                    label,
                    "the stream changes its parameters part-way (chained streams)",
                ))
            }
            Err(e) => return Err(corrupt(label, e.to_string())),
        };
        if packet.track_id != track_id {
            continue;
        }
        packets += 1;
        let buf = match decoder.decode(&packet) {
            Ok(buf) => buf,
            // A damaged frame in a lossy stream is skipped, as players and ffmpeg do; a stream
            // made mostly of such frames is rejected below.
            Err(SymError::DecodeError(_)) | Err(SymError::IoError(_)) => {
                bad_packets += 1;
                continue;
            }
            Err(SymError::Unsupported(what)) => {
                return Err(unsupported(label, format!("codec feature: {what}")))
            }
            Err(e) => return Err(corrupt(label, e.to_string())),
        };
        let spec_rate = buf.spec().rate();
        if spec_rate == 0 {
            return Err(corrupt(label, "the stream declares a sample rate of 0 Hz"));
        }
        match rate {
            None => rate = Some(spec_rate),
            Some(r) if r != spec_rate => {
                return Err(unsupported(
                    label,
                    format!("the sample rate changes part-way ({r} Hz to {spec_rate} Hz)"),
                ))
            }
            Some(_) => {}
        }
        let channels = buf.spec().channels().count().max(1);
        let frames = buf.frames();
        if frames == 0 {
            continue;
        }
        interleaved.clear();
        buf.copy_to_vec_interleaved(&mut interleaved);
        mono.clear();
        if channels == 1 {
            mono.extend_from_slice(&interleaved[..frames.min(interleaved.len())]);
        } else {
            let inv = 1.0 / channels as f32;
            mono.extend(
                interleaved
                    .chunks_exact(channels)
                    .map(|f| f.iter().sum::<f32>() * inv),
            );
        }
        let stream = match stream.as_mut() {
            Some(s) => s,
            None => stream.insert(Stream::new(spec_rate, label)?),
        };
        stream.push(&mono)?;
        check_duration(label, stream.input_len(), spec_rate)?;
    }

    if packets > 0 && bad_packets * 2 > packets {
        return Err(corrupt(
            label,
            format!("{bad_packets} of {packets} packets could not be decoded"),
        ));
    }
    if ended_early {
        if let Some(declared) = declared_frames {
            // Lossy decoders may legitimately fall a packet or two short of a header's estimate;
            // PCM and FLAC give exactly what was declared.
            let slack = params
                .max_frames_per_packet
                .unwrap_or(4096)
                .saturating_mul(2)
                .min(16_384);
            let lossless = is_lossless(&params);
            let got = stream.as_ref().map_or(0, Stream::input_len);
            if (lossless && got < declared) || (!lossless && got + slack < declared) {
                return Err(corrupt(
                    label,
                    format!("truncated: the header declares {declared} frames, only {got} present"),
                ));
            }
        }
    }
    match stream {
        Some(s) if s.input_len() > 0 => s.finish(),
        _ if packets == 0 && !ended_early => Err(AudioError::Empty {
            path: label.to_path_buf(),
        }),
        _ => Err(corrupt(label, "no audio could be decoded")),
    }
}

fn is_lossless(params: &symphonia::core::codecs::audio::AudioCodecParameters) -> bool {
    use symphonia::core::codecs::audio::well_known::{
        CODEC_ID_FLAC, CODEC_ID_PCM_MULAW, CODEC_ID_PCM_S32LE,
    };
    // symphonia numbers its PCM codecs contiguously, from S32LE to MULAW.
    params.codec == CODEC_ID_FLAC
        || (CODEC_ID_PCM_S32LE..=CODEC_ID_PCM_MULAW).contains(&params.codec)
}
