//! The step script shared by the CPU test (whisper_ahead.rs) and the CUDA one
//! (stapes/tests/cuda_whisper.rs) of steps queued ahead.

use stapes_core::{Backend, HostTensor};
use stapes_models::whisper::config::WhisperConfig;
use stapes_models::whisper::decoding::{LogitRules, TimestampRules};
use stapes_models::whisper::Whisper;

pub const STEPS: usize = 14;

/// Per step: the ids fed, the chosen ids, their scores' bits, and whether a step was queued.
pub type Trace = Vec<(Vec<u32>, Vec<u32>, Vec<u32>, bool)>;

/// STEPS greedy steps from SOT on random encoder states: the best id is fed back, except at step 5
/// (another id) and from step 9 on, where the batch is expanded to two rows.
pub fn script<B: Backend>(m: &Whisper<B>, ahead: bool) -> Trace {
    m.set_device_steps(Some(true));
    m.set_decode_ahead(Some(ahead));
    let cfg = WhisperConfig::published("whisper-tiny").expect("shape");
    let sp = m.tokenizer.special().clone();
    let rules = LogitRules {
        suppress: vec![220, 50257],
        suppress_begin: vec![220, sp.eot],
        timestamps: Some(TimestampRules::whisper(&sp, cfg.vocab_size, 50)),
    };
    let b = m.backend();
    let enc = b
        .upload(&HostTensor::random(
            vec![1, cfg.n_audio_ctx, cfg.d_model],
            41,
            1.0,
        ))
        .expect("encoder states");
    let cross = m.cross_kv(&enc).expect("cross");
    let mut st = m.decoder_state(&cross, 1).expect("state");
    let mut input = vec![m.tokenizer.sot()];
    let mut seqs: Vec<Vec<u32>> = vec![Vec::new()];
    let mut trace = Trace::new();
    for step in 0..STEPS {
        if step == 9 {
            m.reorder_state(&mut st, &[0, 0]).expect("expand");
            input = vec![input[0], input[0]];
            seqs = vec![seqs[0].clone(), seqs[0].clone()];
        }
        let views: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
        let sel = m
            .decode_step_select_ahead(
                &mut st,
                &input,
                &rules,
                step,
                0,
                &views,
                (None, 1, None),
                step + 1 < STEPS,
            )
            .expect("step");
        let bits = sel.scores.iter().map(|s| s.to_bits()).collect();
        trace.push((input.clone(), sel.ids.clone(), bits, st.queued_ahead()));
        for (r, seq) in seqs.iter_mut().enumerate() {
            seq.push(sel.ids[r]);
        }
        input = sel.ids.clone();
        if step == 5 {
            input = input.iter().map(|&id| (id + 17) % 50000).collect();
        }
    }
    trace
}

/// Both traces alike step for step, the ahead one queued at every step but the last.
pub fn check(want: &Trace, got: &Trace, what: &str) {
    assert!(
        want.iter().all(|s| !s.3),
        "{what}: nothing is queued with the switch off"
    );
    for (step, (w, g)) in want.iter().zip(got).enumerate() {
        assert_eq!(g.0, w.0, "{what} step {step}: fed ids");
        assert_eq!(g.1, w.1, "{what} step {step}: chosen ids");
        assert_eq!(g.2, w.2, "{what} step {step}: score bits");
        // the last step has no successor
        assert_eq!(g.3, step + 1 < STEPS, "{what} step {step}: queued ahead");
    }
    // the fed ids were not all one token, so the scores above compared different steps
    let distinct: std::collections::BTreeSet<u32> = want.iter().flat_map(|s| s.1.clone()).collect();
    assert!(distinct.len() > 3, "{what}: ids chosen: {distinct:?}");
}
