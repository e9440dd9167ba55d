use std::path::Path;

use crate::AudioError;

/// Longest input accepted, in seconds of audio (24 h).
pub const MAX_SECONDS: u64 = 24 * 3600;
/// Largest encoded input accepted, in bytes (4 GiB).
pub const MAX_BYTES: u64 = 4 << 30;

/// Decodes a file (or stdin for `-`) to 16 kHz mono f32.
pub fn load_file(path: &Path) -> Result<Vec<f32>, AudioError> {
    let _ = path;
    Err(AudioError::InvalidArgument("not implemented yet".into()))
}

/// Decodes an in-memory container (WAV/FLAC/MP3/OGG) to 16 kHz mono f32.
pub fn decode_bytes(bytes: Vec<u8>, hint_ext: Option<&str>) -> Result<Vec<f32>, AudioError> {
    let _ = (bytes, hint_ext);
    Err(AudioError::InvalidArgument("not implemented yet".into()))
}

/// Raw interleaved signed 16-bit little-endian PCM to 16 kHz mono f32.
pub fn decode_raw_s16le(
    bytes: &[u8],
    sample_rate: u32,
    channels: u16,
) -> Result<Vec<f32>, AudioError> {
    let _ = (bytes, sample_rate, channels);
    Err(AudioError::InvalidArgument("not implemented yet".into()))
}
