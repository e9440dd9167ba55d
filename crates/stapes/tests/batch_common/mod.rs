//! What the engine's batch tests (parakeet_batch, gigaam_batch) share: comparing a batched
//! input's transcript with the one it gets alone.

use stapes::Transcript;

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
