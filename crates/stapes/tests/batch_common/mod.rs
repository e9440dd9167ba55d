//! What the engine's batch tests (parakeet_batch, gigaam_batch) share: comparing a batched
//! input's transcript with the one it gets alone.

use stapes::batch::{BatchOutcome, EngineInput};
use stapes::{Engine, TranscribeOptions, Transcript};

/// `clips` through `Engine::transcribe_batch_each` (default options, up to 8 a batch) against
/// `Engine::transcribe` of each alone: one encoder call for all of them, every result the one
/// its input gets alone, in input order. Returns the batch's outcome and the results alone.
pub fn batch_equals_alone(
    e: &Engine,
    clips: &[Vec<f32>],
    what: &str,
) -> (BatchOutcome, Vec<Transcript>) {
    let opts = TranscribeOptions::default();
    let alone: Vec<Transcript> = clips
        .iter()
        .map(|c| e.transcribe(c, &opts, None).expect("alone"))
        .collect();
    assert!(
        alone.iter().any(|t| !ids(t).is_empty()),
        "{what}: nothing emitted, the comparison would be empty"
    );
    let each = with_options(clips.iter().map(Vec::as_slice), &opts);
    let out = e.transcribe_batch_each(&each, 8);
    // One encoder call for all: the inputs were batched, not run one by one.
    assert_eq!(
        out.stats.encoder_batches,
        vec![clips.len()],
        "{what}: batch sizes"
    );
    for (i, (got, want)) in out.results.iter().zip(&alone).enumerate() {
        let got = got.as_ref().unwrap_or_else(|e| panic!("{what}/{i}: {e}"));
        assert_same(got, want, &format!("{what}/{i}"));
    }
    (out, alone)
}

/// Each of `samples` as an engine input with `opts`.
pub fn with_options<'a>(
    samples: impl IntoIterator<Item = &'a [f32]>,
    opts: &'a TranscribeOptions,
) -> Vec<EngineInput<'a>> {
    samples
        .into_iter()
        .map(|samples| EngineInput {
            samples,
            options: opts,
        })
        .collect()
}

pub fn ids(t: &Transcript) -> Vec<u32> {
    t.segments.iter().flat_map(|s| s.tokens.clone()).collect()
}

/// Same tokens, text, segment and word timings.
pub fn assert_same(got: &Transcript, want: &Transcript, what: &str) {
    assert_eq!(ids(got), ids(want), "{what}: ids");
    assert_eq!(got.text(), want.text(), "{what}: text");
    assert_eq!(got.segments.len(), want.segments.len(), "{what}: segments");
    for (g, w) in got.segments.iter().zip(&want.segments) {
        assert!(
            (g.start - w.start).abs() < 1e-9 && (g.end - w.end).abs() < 1e-9,
            "{what}: segment {:.3}-{:.3} vs {:.3}-{:.3}",
            g.start,
            g.end,
            w.start,
            w.end
        );
        let gw: Vec<(String, f64)> = g
            .words
            .iter()
            .flatten()
            .map(|x| (x.word.clone(), x.start))
            .collect();
        let ww: Vec<(String, f64)> = w
            .words
            .iter()
            .flatten()
            .map(|x| (x.word.clone(), x.start))
            .collect();
        assert_eq!(gw, ww, "{what}: words");
    }
    assert!(
        (got.duration - want.duration).abs() < 1e-9,
        "{what}: duration"
    );
}
