//! Word-level comparison of transcripts, the measure the long-form, lane and server checks use:
//! lowercase, punctuation dropped, Levenshtein distance over words.

/// Lowercased alphanumeric words of `s`; punctuation-only tokens vanish.
pub fn normalized_words(s: &str) -> Vec<String> {
    s.split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric())
                .collect::<String>()
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Levenshtein distance between two word sequences (substitutions, insertions, deletions).
pub fn word_edits(a: &[String], b: &[String]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, y) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(x != y))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Word edits between two texts after [`normalized_words`].
pub fn text_edits(a: &str, b: &str) -> usize {
    word_edits(&normalized_words(a), &normalized_words(b))
}

/// Word error rate of `hyp` against `reference` (edits over reference words; 0 for two empties).
pub fn wer(reference: &str, hyp: &str) -> f64 {
    let r = normalized_words(reference);
    let e = word_edits(&r, &normalized_words(hyp));
    if r.is_empty() {
        return if e == 0 { 0.0 } else { 1.0 };
    }
    e as f64 / r.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn punctuation_and_case_do_not_count() {
        assert_eq!(
            text_edits("And so, my fellow Americans!", "and so my fellow americans"),
            0
        );
    }

    #[test]
    fn counts_each_kind_of_edit() {
        // one substitution (cat→hat), one deletion (sat), one insertion (down)
        assert_eq!(
            text_edits("the cat sat on the mat", "the hat on the mat down"),
            3
        );
        assert_eq!(text_edits("", "a b"), 2);
        assert_eq!(text_edits("a b", ""), 2);
    }

    #[test]
    fn wer_is_edits_over_reference_words() {
        assert!((wer("one two three four", "one too three four") - 0.25).abs() < 1e-12);
        assert_eq!(wer("", ""), 0.0);
    }
}
