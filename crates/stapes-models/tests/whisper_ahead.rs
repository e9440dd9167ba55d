//! Greedy steps queued ahead (`Decoder::select_step_ahead`: the next step fed the selection's
//! ids on the backend, before the host has read them) choose the ids and scores of steps run one
//! after another, also where the caller then feeds other ids or reorders the batch. On the CPU
//! home the step chain runs eagerly and the feed is written from the host (the trait's default);
//! stapes/tests/cuda_whisper.rs runs the same script on the CUDA home's kernel feed.

#[path = "support/ahead.rs"]
mod ahead;

use stapes_core::Lane;
use stapes_cpu::CpuBackend;
use stapes_models::whisper::config::WhisperConfig;
use stapes_models::whisper::weights::synthetic_checkpoint;
use stapes_models::whisper::Whisper;

#[test]
fn steps_queued_ahead_choose_what_steps_in_turn_choose() {
    let cfg = WhisperConfig::published("whisper-tiny").expect("shape");
    let ck = synthetic_checkpoint(&cfg, 6).expect("synthetic");
    let m = Whisper::new(CpuBackend::new(2).expect("cpu"), &ck, Lane::F32).expect("model");
    let want = ahead::script(&m, false);
    let got = ahead::script(&m, true);
    ahead::check(&want, &got, "cpu f32");
}
