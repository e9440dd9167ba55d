//! Voice activity detection (Silero VAD v6) and VAD-driven cutting of long audio into spans a
//! family can take in one piece.

use crate::batch::{EngineInput, DEFAULT_MAX_BATCH};
use crate::engine::{Engine, TranscribeOptions};
use crate::error::StapesError;
use stapes_cpu::CpuBackend;
pub use stapes_models::silero::VadParams;
use stapes_models::silero::{SileroVad, SpeechSegment};
use stapes_models::transcript::{Segment, Transcript, Word};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The cached model `scripts/fetch-models.sh silero-vad` fetches.
pub const DEFAULT_VAD_MODEL: &str = "silero-vad";

/// Speech found in 16 kHz audio, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Speech {
    pub start: f64,
    pub end: f64,
}

/// Silero on the CPU: the graph is tiny and per-window, so the CPU is its home.
pub struct Vad {
    model: SileroVad<CpuBackend>,
}

impl Vad {
    /// A `.onnx` file, a directory holding `silero_vad.onnx`, or a cached model name.
    pub fn load(name_or_path: &str) -> Result<Vad, StapesError> {
        let p = crate::models::resolve(name_or_path)?;
        let file = if p.is_dir() { pick_onnx(&p)? } else { p };
        let be = CpuBackend::new(1)?;
        Ok(Vad {
            model: SileroVad::load(be, &file)?,
        })
    }

    /// Per-window speech probabilities (32 ms windows) of 16 kHz samples.
    pub fn probabilities(&self, samples: &[f32]) -> Result<Vec<f32>, StapesError> {
        Ok(self.model.probabilities(samples, 16_000)?)
    }

    /// Speech segments with the silero-vad package's parameters `params`.
    pub fn speech(&self, samples: &[f32], params: &VadParams) -> Result<Vec<Speech>, StapesError> {
        let segs = self.model.segments(samples, 16_000, params)?;
        Ok(segs
            .iter()
            .map(|s: &SpeechSegment| Speech {
                start: s.start_seconds(16_000),
                end: s.end_seconds(16_000),
            })
            .collect())
    }
}

fn pick_onnx(dir: &Path) -> Result<PathBuf, StapesError> {
    for name in ["silero_vad.onnx", "silero_vad_16k_op15.onnx"] {
        let f = dir.join(name);
        if f.is_file() {
            return Ok(f);
        }
    }
    Err(StapesError::BadInput(format!(
        "{}: no silero_vad.onnx in this directory",
        dir.display()
    )))
}

/// The longest pause, seconds, a recogniser hears between two speech pieces of a group: a longer
/// one is shortened to this, as digital silence (its audio, which may be noise or music, is never
/// heard). Enough for Whisper to end a segment and for its word alignment to find the seam.
pub const SEAM_SILENCE: f64 = 0.5;

/// Speech pieces recognised together: their audio is concatenated with the pauses between them
/// shortened to at most [`SEAM_SILENCE`] of digital silence, and times are mapped back piece by
/// piece.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub pieces: Vec<Speech>,
    /// Seconds of silence before each piece in the recogniser's audio (0 before the first).
    pub leads: Vec<f64>,
}

impl Group {
    /// Seconds of audio the recogniser hears.
    pub fn duration(&self) -> f64 {
        self.pieces.iter().map(|p| p.end - p.start).sum::<f64>() + self.leads.iter().sum::<f64>()
    }

    /// The recogniser's 16 kHz samples: each piece after its lead of zeros.
    pub fn samples(&self, audio: &[f32]) -> Vec<f32> {
        let mut out = Vec::new();
        for (p, lead) in self.pieces.iter().zip(&self.leads) {
            out.resize(out.len() + (lead * 16_000.0).round() as usize, 0.0);
            let a = ((p.start * 16_000.0) as usize).min(audio.len());
            let b = ((p.end * 16_000.0) as usize).clamp(a, audio.len());
            out.extend_from_slice(&audio[a..b]);
        }
        out
    }

    /// The group cut at every pause longer than `split_gap`: runs of close pieces.
    pub fn split_at_pauses(&self, split_gap: f64) -> Vec<Group> {
        let mut out: Vec<Group> = Vec::new();
        for (i, p) in self.pieces.iter().enumerate() {
            match out.last_mut() {
                Some(g) if p.start - self.pieces[i - 1].end <= split_gap => {
                    g.pieces.push(*p);
                    g.leads.push(self.leads[i]);
                }
                _ => out.push(Group {
                    pieces: vec![*p],
                    leads: vec![0.0],
                }),
            }
        }
        out
    }

    /// Start of each piece in the recogniser's audio, seconds.
    fn offsets(&self) -> Vec<f64> {
        let mut at = 0.0;
        self.pieces
            .iter()
            .zip(&self.leads)
            .map(|(p, lead)| {
                let o = at + lead;
                at = o + (p.end - p.start);
                o
            })
            .collect()
    }

    /// The piece a time `t` of the recogniser's audio belongs to: the silence before a piece is
    /// shared out half to each neighbour. At a boundary `at_end` picks the earlier piece, so a
    /// segment ending exactly where a piece ends stays in that piece.
    fn slot(&self, offsets: &[f64], t: f64, at_end: bool) -> usize {
        // the boundaries rise with the pieces: the last one passed is the first from the end
        (1..self.pieces.len().min(offsets.len()))
            .rev()
            .find(|&i| {
                let b = offsets[i] - 0.5 * self.leads[i];
                t > b || (!at_end && t == b)
            })
            .unwrap_or(0)
    }

    /// A time in the recogniser's audio back on the input's timeline (clamped to its piece).
    pub fn to_input_time(&self, t: f64, at_end: bool) -> f64 {
        let offsets = self.offsets();
        if self.pieces.is_empty() {
            return 0.0;
        }
        let k = self.slot(&offsets, t, at_end);
        let p = self.pieces[k];
        p.start + (t - offsets[k]).clamp(0.0, p.end - p.start)
    }

    /// A segment `[start, end)` of the recogniser's audio back on the input's timeline. A
    /// recogniser's timestamps jitter by a few tenths of a second, so a segment that only grazes a
    /// piece at a seam is not stretched over the pause there: it starts in the first piece and
    /// ends in the last piece it overlaps by at least `min(0.25 s, a third of it)`. (Used for
    /// segments without words; those with words are placed word by word, see [`Self::place`].)
    pub fn to_input_span(&self, start: f64, end: f64) -> (f64, f64) {
        let need = (0.25f64).min((end - start) / 3.0).max(0.0);
        let mut first = None;
        let mut last = None;
        for (p, offset) in self.pieces.iter().zip(self.offsets()) {
            let len = p.end - p.start;
            let overlap = (end.min(offset + len) - start.max(offset)).max(0.0);
            if overlap > 0.0 && overlap >= need {
                let a = p.start + (start - offset).clamp(0.0, len);
                let b = p.start + (end - offset).clamp(0.0, len);
                first.get_or_insert(a);
                last = Some(b);
            }
        }
        match (first, last) {
            (Some(a), Some(b)) => (a, b.max(a)),
            _ => {
                let a = self.to_input_time(start, false);
                (a, self.to_input_time(end, true).max(a))
            }
        }
    }
}

/// Group speech into spans of at most `max_span` seconds of recogniser audio (one recogniser call
/// each, pauses between pieces counted as heard, see [`SEAM_SILENCE`]); a single longer segment is
/// cut into `max_span` pieces. The input between pieces is never transcribed, which is what keeps
/// silence and noise from producing text.
pub fn groups(speech: &[Speech], max_span: f64) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for s in speech {
        let mut start = s.start;
        while start < s.end {
            let end = (start + max_span).min(s.end);
            let piece = Speech { start, end };
            match out.last_mut() {
                Some(g) => {
                    let prev = g.pieces.last().map_or(start, |p| p.end);
                    let lead = (start - prev).clamp(0.0, SEAM_SILENCE);
                    if g.duration() + lead + (end - start) <= max_span {
                        g.pieces.push(piece);
                        g.leads.push(lead);
                    } else {
                        out.push(Group {
                            pieces: vec![piece],
                            leads: vec![0.0],
                        });
                    }
                }
                None => out.push(Group {
                    pieces: vec![piece],
                    leads: vec![0.0],
                }),
            }
            start = end;
        }
    }
    out
}

/// The longest span Whisper hears at once, seconds.
pub const WHISPER_MAX_SPAN: f64 = 30.0;

/// Seconds of its 30 s window that `--vad` leaves Whisper after the speech of a group by default
/// (groups are packed, and long speech cut, to [`WHISPER_MAX_SPAN`] minus this). Whisper closes
/// each segment with a timestamp token and the last one it has is <|30.00|>; with speech running
/// to within a fraction of a second of the window's end it has nowhere to put that token, and base
/// was seen to give up on the rest of the window (a 29.6 s group of the long-form test lost a
/// sentence and a half; the same audio in groups of ≤ 28 s lost nothing). Two seconds is also what
/// the seam silence leaves a segment at a pause ([`SEAM_SILENCE`] each side, rounded up to whole
/// seconds of slack). An explicit `--vad-max-span` is taken as given.
pub const WHISPER_END_ROOM: f64 = 2.0;

/// How `--vad` cuts the input and stitches the recogniser's segments back onto it.
#[derive(Clone, Debug)]
pub struct VadOptions {
    /// The silero-vad parameters. An infinite `max_speech_duration_s` becomes the span limit, so
    /// that long speech is split at its best silence rather than cut mid-word.
    pub params: VadParams,
    /// Seconds of speech per recogniser call; `None` = the family's default (Whisper:
    /// [`WHISPER_MAX_SPAN`] − [`WHISPER_END_ROOM`] = 28 s; GigaAM: the 25 s its package calls
    /// long-form; others 30 s). Whisper takes at most
    /// [`WHISPER_MAX_SPAN`].
    pub max_span: Option<f64>,
    /// Seconds: a pause longer than this between two speech pieces ends a segment, even where
    /// the recogniser ran one sentence on across it (its text is split between the pieces).
    pub split_gap: f64,
}

impl Default for VadOptions {
    fn default() -> Self {
        Self {
            params: VadParams::default(),
            max_span: None,
            split_gap: 1.0,
        }
    }
}

impl VadOptions {
    /// The span limit for a family (`Engine::family()`), checked: a usage error when it is out
    /// of range or more than the family can hear at once.
    pub fn span_for(&self, family: &str) -> Result<f64, StapesError> {
        if self.split_gap.is_nan() || self.split_gap < 0.0 {
            return Err(StapesError::Usage(format!(
                "VAD split gap {} s is negative",
                self.split_gap
            )));
        }
        match self.max_span {
            None if family == "whisper" => Ok(WHISPER_MAX_SPAN - WHISPER_END_ROOM),
            None if family == "gigaam" => Ok(stapes_models::gigaam::TRAINED_MAX_S),
            None => Ok(WHISPER_MAX_SPAN),
            Some(s) if !(1.0..=3600.0).contains(&s) => Err(StapesError::Usage(format!(
                "VAD span limit {s} s is outside 1 ..= 3600 s"
            ))),
            Some(s) if family == "whisper" && s > WHISPER_MAX_SPAN => Err(StapesError::Usage(
                format!("VAD span limit {s} s: Whisper hears at most {WHISPER_MAX_SPAN} s at once"),
            )),
            Some(s) => Ok(s),
        }
    }
}

impl Engine {
    /// [`Self::transcribe_vad`] with the default [`VadOptions`].
    pub fn transcribe_with_vad(
        &self,
        samples: &[f32],
        vad: &Vad,
        opts: &TranscribeOptions,
        progress: Option<&dyn Fn(f64)>,
    ) -> Result<Transcript, StapesError> {
        self.transcribe_vad(
            samples,
            vad,
            &VadOptions::default(),
            opts,
            progress,
            &mut |_| {},
        )
    }

    /// Transcribe only where `vad` hears speech: speech pieces grouped up to the span limit, the
    /// silence between them cut out, each group transcribed alone. Segments come back on the
    /// input's timeline, piece by piece from their words: a segment never covers a pause longer
    /// than `split_gap`, and one that opens (closes) a piece starts (ends) where the piece does.
    /// `on_segment` gets each segment once its group is done.
    pub fn transcribe_vad(
        &self,
        samples: &[f32],
        vad: &Vad,
        vopts: &VadOptions,
        opts: &TranscribeOptions,
        progress: Option<&dyn Fn(f64)>,
        on_segment: &mut dyn FnMut(&Segment),
    ) -> Result<Transcript, StapesError> {
        const SR: f64 = 16_000.0;
        let whisper = self.family() == "whisper";
        let max_span = vopts.span_for(self.family())?;
        let mut params = vopts.params.clone();
        params.max_speech_duration_s = params.max_speech_duration_s.min(max_span);
        let speech = vad.speech(samples, &params)?;
        let mut out = Transcript {
            duration: samples.len() as f64 / SR,
            ..Default::default()
        };
        let mut language: Option<String> = opts.language.clone();
        let decode = |ids: &[u32]| self.decode_ids(ids);
        // under 0.1 s of audio: nothing a recogniser can use
        let todo: Vec<Group> = groups(&speech, max_span)
            .into_iter()
            .filter(|g| g.duration() >= 0.1)
            .collect();
        let mut emit =
            |group: &Group, t: Transcript, o: &TranscribeOptions, out: &mut Transcript| {
                // A family that gives no words (Canary) cannot have its segments split at a long
                // pause: such a group is heard again one run of close pieces at a time.
                let wordless = t
                    .segments
                    .iter()
                    .any(|s| s.words.as_ref().is_none_or(Vec::is_empty));
                let parts = group.split_at_pauses(vopts.split_gap);
                let mut heard = Vec::new();
                if wordless && parts.len() > 1 {
                    for g in parts {
                        let t = self.transcribe(&g.samples(samples), o, None)?;
                        heard.extend(g.place(t.segments, vopts.split_gap, &decode)?);
                    }
                } else {
                    heard = group.place(t.segments, vopts.split_gap, &decode)?;
                    // A recogniser that loses its way in a group (Whisper may give up on the
                    // rest of a window) leaves whole speech pieces without a word, while
                    // Silero heard speech there: such a piece is heard again alone, so that
                    // speech is not dropped silently. Pieces under RETRY_MIN_PIECE are left:
                    // a breath or click alone invites invented text.
                    if group.pieces.len() > 1 {
                        let mids: Vec<f64> = heard
                            .iter()
                            .flat_map(|s| s.words.iter().flatten())
                            .map(|w| 0.5 * (w.start + w.end))
                            .collect();
                        for p in &group.pieces {
                            if p.end - p.start < RETRY_MIN_PIECE
                                || mids.iter().any(|&m| m >= p.start && m <= p.end)
                            {
                                continue;
                            }
                            let g = Group {
                                pieces: vec![*p],
                                leads: vec![0.0],
                            };
                            let t = self.transcribe(&g.samples(samples), o, None)?;
                            heard.extend(g.place(t.segments, vopts.split_gap, &decode)?);
                        }
                        heard.sort_by(|a, b| a.start.total_cmp(&b.start));
                    }
                }
                for mut seg in heard {
                    seg.id = out.segments.len();
                    if whisper && !opts.word_timestamps {
                        seg.words = None;
                    }
                    on_segment(&seg);
                    out.segments.push(seg);
                }
                if let (Some(p), Some(last)) = (progress, group.pieces.last()) {
                    p(last.end);
                }
                Ok::<(), StapesError>(())
            };
        // Whisper's words are what place its segments on the pieces, so it always makes them.
        let mut o = TranscribeOptions {
            word_timestamps: opts.word_timestamps || whisper,
            ..opts.clone()
        };
        let mut rest = &todo[..];
        // The language detected on the first group holds for the rest, as on the plain path.
        if let (None, Some((first, tail))) = (&language, todo.split_first()) {
            let t = self.transcribe(&first.samples(samples), &o, None)?;
            if !t.language.is_empty() {
                language = Some(t.language.clone());
                out.language = t.language.clone();
                out.language_probability = t.language_probability;
            }
            o.language = language.clone();
            emit(first, t, &o, &mut out)?;
            rest = tail;
        }
        // The other groups batched (Whisper encodes up to DEFAULT_MAX_BATCH windows per call),
        // their segments handed on in order after each batch.
        for chunk in rest.chunks(DEFAULT_MAX_BATCH.max(1)) {
            let audio: Vec<Vec<f32>> = chunk.iter().map(|g| g.samples(samples)).collect();
            let inputs: Vec<EngineInput<'_>> = audio
                .iter()
                .map(|a| EngineInput {
                    samples: a,
                    options: &o,
                })
                .collect();
            let slots: Vec<Mutex<Option<Result<Transcript, StapesError>>>> =
                chunk.iter().map(|_| Mutex::new(None)).collect();
            self.transcribe_batch_with(&inputs, DEFAULT_MAX_BATCH, &|i, r| {
                if let Some(slot) = slots.get(i) {
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                }
            });
            for (group, slot) in chunk.iter().zip(slots) {
                let t = slot
                    .into_inner()
                    .unwrap_or_else(|p| p.into_inner())
                    .unwrap_or_else(|| {
                        Err(StapesError::Internal("a VAD span was never run".into()))
                    })?;
                emit(group, t, &o, &mut out)?;
            }
        }
        if out.language.is_empty() {
            out.language = language.unwrap_or_default();
        }
        Ok(out)
    }
}

/// Seconds of speech under which a piece that its group's run left without a word is not heard
/// again alone (see [`Engine::transcribe_vad`]): shorter than a short phrase, such a piece is more
/// likely a breath, cough or click than lost speech.
pub const RETRY_MIN_PIECE: f64 = 1.0;

/// Seconds: the most a piece's first (last) word is stretched to start (end) with its piece (see
/// [`Group::place`]). About twice the error measured for Whisper's DTW word bounds at a speech
/// bound (up to 0.43 s, long-form test), rounded up: a short stretch, so that speech the
/// recogniser left out is not hidden inside a neighbouring word.
pub const EDGE_WORD_REACH: f64 = 1.0;

/// A word of a group's segment, placed on the input's timeline.
struct Placed {
    /// Index of the segment in the group's output.
    seg: usize,
    /// Index of the piece holding the word's middle.
    piece: usize,
    word: Word,
}

impl Group {
    /// A recogniser's segments of the group's audio, on the input's timeline. Each word goes
    /// to the piece holding its middle (a word never straddles a pause); a segment
    /// is split where consecutive words lie on either side of a pause longer than `split_gap`
    /// (ids split with `decode` so each part keeps its own); a part starts at its first word, or
    /// at its piece's start when that word opens the piece, and ends likewise. Segments without
    /// words are mapped as a whole by [`Self::to_input_span`].
    pub fn place(
        &self,
        segments: Vec<Segment>,
        split_gap: f64,
        decode: &dyn Fn(&[u32]) -> Result<String, StapesError>,
    ) -> Result<Vec<Segment>, StapesError> {
        let offsets = self.offsets();
        let mut placed: Vec<Placed> = Vec::new();
        for (si, seg) in segments.iter().enumerate() {
            for w in seg.words.iter().flatten() {
                let piece = self.slot(&offsets, 0.5 * (w.start + w.end), false);
                let (p, o) = (self.pieces[piece], offsets[piece]);
                let len = p.end - p.start;
                let start = p.start + (w.start - o).clamp(0.0, len);
                let end = (p.start + (w.end - o).clamp(0.0, len)).max(start);
                placed.push(Placed {
                    seg: si,
                    piece,
                    word: Word {
                        start,
                        end,
                        ..w.clone()
                    },
                });
            }
        }
        // Whisper's DTW puts the end of a final word early (0.3–0.4 s on base before the speech
        // end Silero measures; faster-whisper's own VAD route likewise) and, less often, the start
        // of a first word late (tiny.en's jfk "And", 0.3–0.4 s), while a piece starts and ends
        // where Silero hears speech: a piece is cut at pauses of at least
        // `min_silence_duration_ms`, so the stretch between the piece's end and its last word
        // (its start and its first word) is speech with no such pause in it. Nothing else was
        // recognised there, so it belongs to that word, and the word ends (starts) with the piece.
        // A stretch longer than EDGE_WORD_REACH is left alone: that is more likely speech the
        // recogniser did not transcribe, which a stretched word would hide.
        for k in 0..self.pieces.len() {
            let p = self.pieces[k];
            if let Some(i) = placed.iter().rposition(|x| x.piece == k) {
                let w = &mut placed[i].word;
                if w.end < p.end && p.end - w.end <= EDGE_WORD_REACH {
                    w.end = p.end;
                }
            }
            if let Some(i) = placed.iter().position(|x| x.piece == k) {
                let w = &mut placed[i].word;
                if w.start > p.start && w.start - p.start <= EDGE_WORD_REACH {
                    w.start = p.start;
                }
            }
        }
        // A long pause lies between pieces a and b (a < b) when any gap between them is long.
        let long_pause = |a: usize, b: usize| {
            (a..b).any(|i| self.pieces[i + 1].start - self.pieces[i].end > split_gap)
        };
        let mut out = Vec::new();
        for (si, seg) in segments.into_iter().enumerate() {
            let idx: Vec<usize> = (0..placed.len()).filter(|&i| placed[i].seg == si).collect();
            if idx.is_empty() {
                let (start, end) = self.to_input_span(seg.start, seg.end);
                out.push(Segment { start, end, ..seg });
                continue;
            }
            // runs of word indices (into `placed`) with no long pause inside
            let mut runs: Vec<Vec<usize>> = vec![Vec::new()];
            for &i in &idx {
                if let Some(run) = runs.last_mut() {
                    match run.last() {
                        Some(&j) if long_pause(placed[j].piece, placed[i].piece) => {
                            runs.push(vec![i])
                        }
                        _ => run.push(i),
                    }
                }
            }
            let ids = split_ids(&seg, &runs, &placed, decode)?;
            let several = runs.len() > 1;
            for (run, tokens) in runs.iter().zip(ids) {
                let (Some(&first), Some(&last)) = (run.first(), run.last()) else {
                    continue;
                };
                let (fp, lp) = (placed[first].piece, placed[last].piece);
                let opens = placed.iter().position(|p| p.piece == fp) == Some(first);
                let closes = placed.iter().rposition(|p| p.piece == lp) == Some(last);
                let start = match opens {
                    true => self.pieces[fp].start,
                    false => placed[first].word.start,
                };
                let end = match closes {
                    true => self.pieces[lp].end,
                    false => placed[last].word.end,
                };
                let text = match several {
                    false => seg.text.clone(),
                    true => {
                        let t = decode(&tokens)?;
                        match seg.text.starts_with(' ') && !t.starts_with(' ') {
                            true => format!(" {}", t.trim_end()),
                            false => t.trim_end().to_string(),
                        }
                    }
                };
                out.push(Segment {
                    start,
                    end: end.max(start),
                    text,
                    tokens,
                    words: Some(run.iter().map(|&i| placed[i].word.clone()).collect()),
                    ..seg.clone()
                });
            }
        }
        Ok(out)
    }
}

/// The ids of `seg` shared out over `runs` of its words: each run takes ids until their text
/// holds as many non-blank characters as the run's words (timestamp ids stay with their
/// neighbours: the opening one with the first run, the closing one with the last).
fn split_ids(
    seg: &Segment,
    runs: &[Vec<usize>],
    placed: &[Placed],
    decode: &dyn Fn(&[u32]) -> Result<String, StapesError>,
) -> Result<Vec<Vec<u32>>, StapesError> {
    if runs.len() < 2 {
        return Ok(vec![seg.tokens.clone()]);
    }
    let visible = |s: &str| s.chars().filter(|c| !c.is_whitespace()).count();
    let mut out = Vec::with_capacity(runs.len());
    let mut from = 0;
    let mut want = 0;
    for run in &runs[..runs.len() - 1] {
        want += run
            .iter()
            .map(|&i| visible(&placed[i].word.word))
            .sum::<usize>();
        let mut to = from;
        while to < seg.tokens.len() && visible(&decode(&seg.tokens[..to])?) < want {
            to += 1;
        }
        out.push(seg.tokens[from..to].to_vec());
        from = to;
    }
    out.push(seg.tokens[from..].to_vec());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(a: f64, b: f64) -> Speech {
        Speech { start: a, end: b }
    }

    #[test]
    fn default_spans_per_family() {
        let o = VadOptions::default();
        assert_eq!(o.span_for("whisper").unwrap(), 28.0);
        assert_eq!(o.span_for("gigaam").unwrap(), 25.0);
        assert_eq!(o.span_for("parakeet").unwrap(), 30.0);
        let long = VadOptions {
            max_span: Some(40.0),
            ..VadOptions::default()
        };
        assert_eq!(long.span_for("gigaam").unwrap(), 40.0);
        assert!(long.span_for("whisper").is_err());
    }

    #[test]
    fn groups_fill_up_to_the_limit_and_cut_long_speech() {
        let g = groups(
            &[sp(0.5, 4.0), sp(6.0, 20.0), sp(29.0, 33.0), sp(40.0, 105.0)],
            30.0,
        );
        let pieces: Vec<Vec<Speech>> = g.iter().map(|g| g.pieces.clone()).collect();
        assert_eq!(
            pieces,
            vec![
                vec![sp(0.5, 4.0), sp(6.0, 20.0), sp(29.0, 33.0)],
                vec![sp(40.0, 70.0)],
                vec![sp(70.0, 100.0)],
                vec![sp(100.0, 105.0)],
            ]
        );
        // pauses of 2 s and 9 s are heard as 0.5 s; the first piece of a group has none
        assert_eq!(g[0].leads, vec![0.0, SEAM_SILENCE, SEAM_SILENCE]);
        assert!((g[0].duration() - 22.5).abs() < 1e-9);
        assert!(g[1..].iter().all(|g| g.leads == vec![0.0]));
        assert!(g.iter().all(|g| g.duration() <= 30.0 + 1e-9));
        // a short pause is heard at its length, and counts against the limit
        let g = groups(&[sp(0.0, 15.0), sp(15.2, 30.1)], 30.0); // 30.1 s heard
        assert_eq!(g.len(), 2);
        let g = groups(&[sp(0.0, 14.8), sp(15.0, 29.8)], 30.0);
        assert_eq!(g.len(), 1);
        assert!((g[0].leads[1] - 0.2).abs() < 1e-9);
        assert!(groups(&[], 30.0).is_empty());
    }

    fn three() -> Group {
        // recogniser audio: piece 0 at 0 .. 3.5, silence, piece 1 at 4.0 .. 18.0, silence,
        // piece 2 at 18.5 .. 22.5
        Group {
            pieces: vec![sp(0.5, 4.0), sp(6.0, 20.0), sp(29.0, 33.0)],
            leads: vec![0.0, 0.5, 0.5],
        }
    }

    #[test]
    fn group_times_map_back_piece_by_piece() {
        let g = three();
        assert_eq!(g.to_input_time(0.0, false), 0.5);
        assert_eq!(g.to_input_time(3.5, false), 4.0);
        // the silence between pieces splits half and half
        assert_eq!(g.to_input_time(3.7, false), 4.0);
        assert_eq!(g.to_input_time(3.8, false), 6.0);
        assert_eq!(g.to_input_time(3.75, false), 6.0); // the middle starts the next piece
        assert_eq!(g.to_input_time(3.75, true), 4.0); // and ends the previous one
        assert!((g.to_input_time(10.0, false) - 12.0).abs() < 1e-9);
        assert!((g.to_input_time(19.0, false) - 29.5).abs() < 1e-9);
        assert_eq!(g.to_input_time(99.0, true), 33.0); // clamped to the last piece
        let audio: Vec<f32> = (0..16_000 * 40).map(|i| i as f32 + 1.0).collect();
        let heard = g.samples(&audio);
        assert_eq!(heard.len(), (22.5 * 16_000.0) as usize);
        assert_eq!(heard[56_000 - 1], audio[64_000 - 1]); // piece 0 ends at 3.5 s
        assert!(heard[56_000..64_000].iter().all(|&x| x == 0.0)); // 0.5 s of silence
        assert_eq!(heard[64_000], audio[96_000]); // piece 1 starts at 6 s
                                                  // a segment that grazes the first piece for 0.1 s starts in the second one
        let (a, b) = g.to_input_span(3.4, 8.0);
        assert!((a - 6.0).abs() < 1e-9 && (b - 10.0).abs() < 1e-9, "{a} {b}");
        // one that spans the seam for real keeps both ends
        let (a, b) = g.to_input_span(2.0, 8.0);
        assert!((a - 2.5).abs() < 1e-9 && (b - 10.0).abs() < 1e-9, "{a} {b}");
    }

    #[test]
    fn a_group_splits_at_long_pauses_only() {
        let g = three(); // pauses of 2 s and 9 s
        assert_eq!(g.split_at_pauses(10.0), vec![g.clone()]);
        let parts = g.split_at_pauses(5.0);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].pieces, vec![sp(0.5, 4.0), sp(6.0, 20.0)]);
        assert_eq!(parts[0].leads, vec![0.0, 0.5]);
        assert_eq!(parts[1].pieces, vec![sp(29.0, 33.0)]);
        assert_eq!(parts[1].leads, vec![0.0]);
        assert_eq!(g.split_at_pauses(1.0).len(), 3);
    }

    const VOCAB: [&str; 6] = [" He", " was", " here.", " Then", " left.", " Ok"];
    const TS: u32 = 100; // a timestamp id: no text

    fn decode(ids: &[u32]) -> Result<String, StapesError> {
        Ok(ids
            .iter()
            .filter_map(|&i| VOCAB.get(i as usize).copied())
            .collect())
    }

    fn w(word: &str, start: f64, end: f64) -> Word {
        Word {
            start,
            end,
            word: word.into(),
            probability: 0.9,
        }
    }

    fn seg(start: f64, end: f64, tokens: &[u32], words: Option<Vec<Word>>) -> Segment {
        Segment {
            id: 0,
            start,
            end,
            text: decode(tokens).unwrap_or_default(),
            tokens: tokens.to_vec(),
            avg_logprob: -0.2,
            no_speech_prob: 0.01,
            compression_ratio: 1.1,
            temperature: 0.0,
            words,
        }
    }

    #[test]
    fn a_segment_run_across_a_long_pause_is_split_at_it() {
        let g = Group {
            pieces: vec![sp(10.0, 12.0), sp(30.0, 32.0)],
            leads: vec![0.0, 0.5],
        };
        // "here." runs 0.3 s into the silence (its middle stays before the seam at 2.25 s);
        // "left." runs past the end
        let words = vec![
            w(" He", 0.2, 0.4),
            w(" was", 0.4, 0.8),
            w(" here.", 0.8, 2.3),
            w(" Then", 2.7, 3.0),
            w(" left.", 3.0, 4.9),
        ];
        let s = seg(0.0, 4.5, &[TS, 0, 1, 2, 3, 4, TS + 5], Some(words));
        let out = g.place(vec![s], 1.0, &decode).expect("place");
        assert_eq!(out.len(), 2, "{out:#?}");
        assert_eq!((out[0].start, out[0].end), (10.0, 12.0)); // the pieces' own bounds
        assert_eq!((out[1].start, out[1].end), (30.0, 32.0));
        assert_eq!(out[0].text, " He was here.");
        assert_eq!(out[1].text, " Then left.");
        assert_eq!(out[0].tokens, vec![TS, 0, 1, 2]);
        assert_eq!(out[1].tokens, vec![3, 4, TS + 5]);
        let w1 = out[1].words.as_ref().expect("words");
        assert!(
            // "Then" starts 0.2 s into its piece: with the piece (see `place`)
            w1[0].start == 30.0 && w1[1].end == 32.0,
            "{w1:?}"
        );
        let w0 = out[0].words.as_ref().expect("words");
        assert_eq!(w0[2].end, 12.0); // clamped to its piece
    }

    #[test]
    fn a_pieces_edge_words_meet_its_bounds_unless_far_from_them() {
        let g = Group {
            pieces: vec![sp(10.0, 12.0), sp(20.0, 24.0)],
            leads: vec![0.0, 0.5],
        };
        // piece 0 is 0 .. 2 s of the group's audio, piece 1 2.5 .. 6.5 s
        let words = vec![
            w(" He", 0.1, 0.5),
            w(" was", 0.5, 1.6),   // last of piece 0, 0.4 s early: ends at 12.0
            w(" here.", 3.9, 4.3), // first of piece 1, 1.4 s late: left alone
            w(" Then", 4.3, 4.5),  // last of piece 1, 2.0 s early: left alone
        ];
        let s = seg(0.0, 6.5, &[0, 1, 2, 3], Some(words));
        let out = g.place(vec![s], 5.0, &decode).expect("place");
        let words: Vec<Word> = out
            .iter()
            .flat_map(|s| s.words.clone().unwrap_or_default())
            .collect();
        assert_eq!(words.len(), 4);
        assert_eq!(words[1].end, 12.0);
        assert!((words[0].end - 10.5).abs() < 1e-9); // not the piece's last word
        assert_eq!(words[0].start, 10.0); // 0.1 s late: starts with the piece
        assert!((words[2].start - 21.4).abs() < 1e-9, "{words:?}");
        assert!((words[3].end - 22.0).abs() < 1e-9, "{words:?}");
    }

    #[test]
    fn short_pauses_keep_a_segment_whole_and_inner_bounds_follow_the_words() {
        let g = Group {
            pieces: vec![sp(10.0, 12.0), sp(12.4, 14.0)],
            leads: vec![0.0, 0.4],
        };
        let a = seg(
            0.0,
            1.0,
            &[0, 1],
            Some(vec![w(" He", 0.1, 0.4), w(" was", 0.4, 1.0)]),
        );
        let b = seg(
            1.0,
            4.0,
            &[2, 3, 4],
            Some(vec![
                w(" here.", 1.2, 2.0),
                w(" Then", 2.5, 3.0),
                w(" left.", 3.0, 3.9),
            ]),
        );
        let c = seg(3.9, 4.0, &[5], None); // no words: mapped as a whole
        let out = g.place(vec![a, b, c], 1.0, &decode).expect("place");
        assert_eq!(out.len(), 3, "{out:#?}");
        assert_eq!(out[0].start, 10.0); // opens piece 0
        assert!((out[0].end - 11.0).abs() < 1e-9); // "was" ends at 1.0 s: not the piece's end
        assert!((out[1].start - 11.2).abs() < 1e-9); // "here." does not open its piece
        assert_eq!(out[1].end, 14.0); // "left." closes piece 1
        assert_eq!(out[1].text, " here. Then left.");
        assert_eq!(out[1].tokens, vec![2, 3, 4]);
        assert!((out[2].start - 13.9).abs() < 1e-9 && out[2].end == 14.0);
        assert!(out[2].words.is_none());
    }
}
