//! Logit rules on hand-built logits (no weights needed): suppression, the first-step timestamp
//! constraints, timestamp pairing and monotonicity, the timestamp-mass rule; the segment splitter.

use stapes_models::whisper::decoding::{
    compression_ratio, fallback_verdict, LogitRules, TimestampRules, WhisperOptions,
};

// A toy vocabulary: text 0..10, eot 10, no_timestamps 11, timestamps 12..=21 (0.00 … 0.18 s).
const EOT: u32 = 10;
const NO_TS: u32 = 11;
const TS0: u32 = 12;
const V: usize = 22;

fn rules(max_initial: u32) -> LogitRules {
    LogitRules {
        suppress: vec![3],
        suppress_begin: vec![1, EOT],
        timestamps: Some(TimestampRules {
            eot: EOT,
            no_timestamps: NO_TS,
            timestamp_begin: TS0,
            timestamp_end: (V - 1) as u32,
            max_initial_timestamp: TS0 + max_initial,
        }),
    }
}

fn allowed(row: &[f32]) -> Vec<usize> {
    row.iter()
        .enumerate()
        .filter(|(_, &x)| x > -1e30)
        .map(|(i, _)| i)
        .collect()
}

fn flat() -> Vec<f32> {
    vec![0.0; V]
}

#[test]
fn first_step_is_an_early_timestamp() {
    let mut row = flat();
    rules(3).apply(&mut row, 0, 0, &[]);
    assert_eq!(allowed(&row), vec![12, 13, 14, 15]);
}

#[test]
fn suppress_and_begin_suppress_without_timestamps() {
    let r = LogitRules {
        suppress: vec![3],
        suppress_begin: vec![1, EOT],
        timestamps: None,
    };
    let mut row = flat();
    r.apply(&mut row, 0, 0, &[]);
    assert!(
        !allowed(&row).contains(&1) && !allowed(&row).contains(&3) && !allowed(&row).contains(&10)
    );
    let mut row = flat();
    r.apply(&mut row, 1, 0, &[5]);
    // blank and end-of-text are only forbidden at the first step
    assert!(
        allowed(&row).contains(&1) && allowed(&row).contains(&10) && !allowed(&row).contains(&3)
    );
}

#[test]
fn opening_timestamp_forces_text_after_a_pair() {
    // [ts 0.00] alone at step 1: treated as a pair start → text or eot must follow
    let mut row = flat();
    rules(50).apply(&mut row, 1, 0, &[TS0]);
    let a = allowed(&row);
    assert!(a.iter().all(|&i| i < TS0 as usize) && a.contains(&(EOT as usize)) && !a.contains(&3));
}

#[test]
fn open_timestamp_must_close_not_earlier() {
    // [ts0, text 5, ts 0.08(16)] → closing timestamp ≥ 16 or eot; no text
    let mut row = flat();
    row[5] = 5.0; // a strong text token does not matter: text is forbidden here
    row[EOT as usize] = 5.0; // strong enough to survive the timestamp-mass rule
    rules(50).apply(&mut row, 3, 0, &[TS0, 5, 16]);
    let a = allowed(&row);
    assert_eq!(a, vec![10, 16, 17, 18, 19, 20, 21]);
    // a weak end-of-text loses to the timestamps' summed mass (it counts as a text token)
    let mut row = flat();
    rules(50).apply(&mut row, 3, 0, &[TS0, 5, 16]);
    assert_eq!(allowed(&row), vec![16, 17, 18, 19, 20, 21]);
}

#[test]
fn timestamps_increase_after_text() {
    // [ts 0.04(14), text 5] → later timestamps only (> 14), text allowed
    let mut row = flat();
    row[5] = 5.0; // text dominant, so the timestamp-mass rule keeps text allowed
    rules(50).apply(&mut row, 2, 0, &[14, 5]);
    let a = allowed(&row);
    assert!(!a.contains(&12) && !a.contains(&13) && !a.contains(&14) && a.contains(&15));
    assert!(a.contains(&5) && !a.contains(&(NO_TS as usize)));
}

#[test]
fn timestamp_mass_beats_best_text_token() {
    // each timestamp alone is weaker than the best text token, their sum is not → text banned
    let mut row = flat();
    row[5] = 2.0;
    row[15..V].fill(1.0); // 7 × e^1 ≈ 19 > e^2 ≈ 7.4
    rules(50).apply(&mut row, 2, 0, &[14, 5]);
    assert!(
        allowed(&row).iter().all(|&i| i >= TS0 as usize),
        "{:?}",
        allowed(&row)
    );
    // and the other way round: a dominant text token keeps text allowed
    let mut row = flat();
    row[5] = 6.0;
    rules(50).apply(&mut row, 2, 0, &[14, 5]);
    assert!(allowed(&row).contains(&5));
}

#[test]
fn forced_prefix_shifts_the_first_step() {
    // with a one-token prefix the first sampled step is 1: no first-step constraint at step 0
    let mut row = flat();
    rules(3).apply(&mut row, 0, 1, &[]);
    assert!(allowed(&row).contains(&5));
}

#[test]
fn compression_ratio_flags_repetition() {
    let plain =
        compression_ratio("And so my fellow Americans, ask not what your country can do for you.");
    let loop_ = compression_ratio(&"I'm going to go. ".repeat(20));
    assert!(plain < 1.6, "{plain}");
    assert!(loop_ > 2.4, "{loop_}");
}

#[test]
fn fallback_verdicts_follow_faster_whisper() {
    let o = WhisperOptions::default(); // cr 2.4, log-prob -1.0, no-speech 0.6
    assert_eq!(fallback_verdict(&o, 1.5, -0.3, 0.1), (false, true)); // good
    assert_eq!(fallback_verdict(&o, 3.0, -0.3, 0.1), (true, false)); // repetitive
    assert_eq!(fallback_verdict(&o, 1.5, -1.5, 0.1), (true, true)); // unlikely
    assert_eq!(fallback_verdict(&o, 1.5, -1.5, 0.9), (false, true)); // silence: no fallback
    assert_eq!(fallback_verdict(&o, 3.0, -1.5, 0.9), (false, false)); // silence wins over repetition
    let off = WhisperOptions {
        compression_ratio_threshold: None,
        log_prob_threshold: None,
        ..WhisperOptions::default()
    };
    assert_eq!(fallback_verdict(&off, 9.0, -9.0, 0.9), (false, false));
}
