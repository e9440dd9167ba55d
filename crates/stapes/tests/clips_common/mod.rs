//! What the long-file tests (vad_longform, whisper_longform_vad) share: the 7 speech clips of
//! ../shared/data.md and where they are read from.

use std::path::{Path, PathBuf};

pub const CLIPS: [&str; 7] = [
    "jfk",
    "beckett",
    "librivox-0870",
    "librivox-0880",
    "librivox-0890",
    "librivox-0920",
    "librivox-0930",
];

/// Samples per second of every clip as loaded.
pub const SR: f64 = 16_000.0;

/// `STAPES_CACHE`, else `~/.cache/stapes` (where scripts/fetch-models.sh puts models and audio).
pub fn cache() -> PathBuf {
    std::env::var_os("STAPES_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/stapes")
        })
}

/// An audio file at 16 kHz mono, or a panic naming it and the fetch script.
pub fn load(p: &Path) -> Vec<f32> {
    stapes::audio::load_file(p)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch-models.sh all)", p.display()))
}

/// Clip `name` of [`CLIPS`].
pub fn clip(name: &str) -> Vec<f32> {
    let p = match name {
        "jfk" => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/jfk.wav"),
        "beckett" => cache().join("audio/beckett.wav"),
        n => cache().join(format!(
            "audio/librivox/sense_and_sensibility_01_austen_64kb-{}.wav",
            n.trim_start_matches("librivox-")
        )),
    };
    load(&p)
}
