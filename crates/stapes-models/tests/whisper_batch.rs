//! Batched transcription (`Whisper::transcribe_batch`) on real weights: every input's result is
//! the one `transcribe` gives it alone, and the greedy ids are faster-whisper's
//! (tools/reference/whisper_fw.py, fixtures/whisper/fw_decode.json).

mod whisper_common;

use stapes_core::Lane;
use stapes_models::transcript::Transcript;
use stapes_models::whisper::batch::BatchInput;
use stapes_models::whisper::WhisperOptions;
use whisper_common::probe;
use whisper_common::*;

const MODEL: &str = "whisper-tiny.en";
const SHORT: [&str; 4] = ["jfk", "librivox-0870", "librivox-0890", "librivox-0920"];

/// Every clip once, each after 2.5 s of silence: 65 s, three windows.
fn long_input() -> Vec<f32> {
    let gap = vec![0f32; 40_000];
    let mut out = Vec::new();
    for c in CLIPS {
        out.extend_from_slice(&gap);
        out.extend_from_slice(&audio(c));
    }
    out
}

/// Every input with the same options.
fn each<'a>(inputs: &'a [impl AsRef<[f32]>], opts: &'a WhisperOptions) -> Vec<BatchInput<'a>> {
    inputs
        .iter()
        .map(|samples| BatchInput {
            samples: samples.as_ref(),
            options: opts,
        })
        .collect()
}

fn ids(t: &Transcript) -> Vec<Vec<u32>> {
    t.segments.iter().map(|s| s.tokens.clone()).collect()
}

fn check(beam: usize) {
    let m = model(MODEL, Lane::F32);
    let opts = ref_options(beam);
    let mut inputs: Vec<Vec<f32>> = SHORT.iter().map(|c| audio(c)).collect();
    inputs.push(long_input());
    let views: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();

    let (batched, stats) = m.transcribe_batch_each(&each(&views, &opts), 8);
    // All five first windows go in one encoder call, then the long input's two others alone.
    assert_eq!(stats.encoder_batches.first(), Some(&5), "{stats:?}");
    assert!(stats.windows() >= 7, "{stats:?}");

    let r = reference();
    let label = if beam == 1 { "greedy" } else { "beam5" };
    for (i, (samples, got)) in views.iter().zip(&batched).enumerate() {
        let got = got.as_ref().unwrap_or_else(|e| panic!("input {i}: {e}"));
        let alone = m.transcribe(samples, &opts).expect("transcribe alone");
        assert_eq!(ids(got), ids(&alone), "input {i} ({beam}): ids differ");
        // The CPU encoder is batch-size invariant: the whole result is the same, bit for bit.
        assert_eq!(got, &alone, "input {i} ({beam}): result differs");
        if let Some(clip) = SHORT.get(i) {
            let want = &r["models"][MODEL]["clips"][*clip][label]["segments"];
            let diffs = compare_segments(&format!("{clip} {label}"), got, want);
            assert!(diffs.is_empty(), "{}", diffs.join("\n"));
        }
    }
    let jfk = batched[0]
        .as_ref()
        .map(Transcript::text)
        .unwrap_or_default();
    assert!(
        jfk.contains("ask not what your country can do for you"),
        "{jfk}"
    );
}

#[test]
fn batch_equals_single_greedy() {
    check(1);
}

#[test]
fn batch_equals_single_beam5() {
    check(5);
}

/// A bad input fails alone, the others finish; more inputs than `max_batch` take turns.
#[test]
fn bad_input_fails_alone() {
    let m = model(MODEL, Lane::F32);
    let good = ref_options(1);
    let bad = WhisperOptions {
        beam_size: 0,
        ..ref_options(1)
    };
    let jfk = audio("jfk");
    let clip = audio("librivox-0930");
    let inputs = [
        BatchInput {
            samples: &jfk,
            options: &good,
        },
        BatchInput {
            samples: &clip,
            options: &bad,
        },
        BatchInput {
            samples: &clip,
            options: &good,
        },
    ];
    let (out, stats) = m.transcribe_batch_each(&inputs, 2);
    assert_eq!(out.len(), 3);
    assert!(out[1].is_err(), "beam 0 must be refused");
    let alone = m.transcribe(&clip, &good).expect("alone");
    assert_eq!(out[2].as_ref().expect("third input"), &alone);
    let jfk_alone = m.transcribe(&jfk, &good).expect("alone");
    assert_eq!(out[0].as_ref().expect("first input"), &jfk_alone);
    // two threads: jfk and the third input encode together once the bad one is refused
    assert_eq!(stats.encoder_batches, vec![2], "{stats:?}");
    assert!(m.transcribe_batch(&[], &good).is_empty());
}

/// CPU throughput of batching (`-- --ignored --nocapture`): 16 jfk inputs one at a time, then at
/// most 8 in flight. Alternates the two three times (the dev box is shared and noisy).
#[test]
#[ignore]
fn batch_throughput_cpu() {
    let m = model(MODEL, Lane::F32);
    let opts = ref_options(1);
    let jfk = audio("jfk");
    let inputs: Vec<BatchInput<'_>> = (0..16)
        .map(|_| BatchInput {
            samples: &jfk,
            options: &opts,
        })
        .collect();
    let _ = m.transcribe(&jfk, &opts);
    for round in 0..3 {
        for max in [1, 8] {
            let t0 = std::time::Instant::now();
            let (out, stats) = m.transcribe_batch_each(&inputs, max);
            let t = t0.elapsed().as_secs_f64();
            assert!(out.iter().all(Result::is_ok));
            eprintln!(
                "round {round} max_batch {max}: {t:.2} s, {:.2} inputs/s, encoder calls {:?}",
                16.0 / t,
                stats.encoder_batches
            );
        }
    }
}

/// Who is inside a backend op: the owning thread and its nesting depth (provided ops call the
/// required ones), and how many times another thread entered meanwhile.
#[derive(Default)]
struct Overlaps {
    owner: std::sync::Mutex<Option<(std::thread::ThreadId, usize)>>,
    seen: std::sync::atomic::AtomicUsize,
}

impl probe::Hook for Overlaps {
    type Token = bool;
    fn enter(&self, _op: &'static str) -> bool {
        let me = std::thread::current().id();
        let mut o = self.owner.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *o {
            None => *o = Some((me, 1)),
            Some((t, d)) if *t == me => *d += 1,
            Some(_) => {
                self.seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return false;
            }
        }
        true
    }
    fn exit(&self, _op: &'static str, owned: bool) {
        if !owned {
            return;
        }
        let mut o = self.owner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, d)) = &mut *o {
            *d -= 1;
            if *d == 0 {
                *o = None;
            }
        }
    }
}

/// Where the home captures chains (a GPU), the batch's threads take turns on it: no two are
/// inside a backend op at once, so the decoder keeps its step chains; two batches running at
/// once on the model take turns too. Without chains the threads run side by side, which is what
/// shows this probe can see two threads in ops at once. Either way each input's result is the
/// one it gets alone.
#[test]
fn batch_takes_turns_where_chains_are_captured() {
    use probe::Probe;
    let ckpt = checkpoint(MODEL);
    let opts = ref_options(1);
    let inputs: Vec<Vec<f32>> = SHORT.iter().map(|c| audio(c)).collect();
    for chains in [true, false] {
        let mut b = Probe::new(
            stapes_cpu::CpuBackend::new(0).expect("cpu"),
            Overlaps::default(),
        );
        b.chains = chains;
        let m = stapes_models::whisper::Whisper::new(b, &ckpt, Lane::F32).expect("model");
        let all = each(&inputs, &opts);
        let batched = if chains {
            // two batches of two inputs at once
            let (a, b) = all.split_at(2);
            let ((ra, sa), (rb, sb)) = std::thread::scope(|s| {
                let ta = s.spawn(|| m.transcribe_batch_each(a, 2));
                let tb = s.spawn(|| m.transcribe_batch_each(b, 2));
                (
                    ta.join().expect("first batch"),
                    tb.join().expect("second batch"),
                )
            });
            assert_eq!(sa.encoder_batches.first(), Some(&2), "{sa:?}");
            assert_eq!(sb.encoder_batches.first(), Some(&2), "{sb:?}");
            ra.into_iter().chain(rb).collect::<Vec<_>>()
        } else {
            let (r, stats) = m.transcribe_batch_each(&all, inputs.len());
            assert_eq!(
                stats.encoder_batches.first(),
                Some(&inputs.len()),
                "{stats:?}"
            );
            r
        };
        let seen = m
            .backend()
            .hook
            .seen
            .load(std::sync::atomic::Ordering::Relaxed);
        if chains {
            assert_eq!(
                seen, 0,
                "threads were inside backend ops at once {seen} times"
            );
        } else {
            assert!(
                seen > 0,
                "the threads never overlapped: the probe cannot tell turns apart"
            );
        }
        for (i, (samples, got)) in inputs.iter().zip(&batched).enumerate() {
            let got = got.as_ref().unwrap_or_else(|e| panic!("input {i}: {e}"));
            let alone = m.transcribe(samples, &opts).expect("transcribe alone");
            assert_eq!(got, &alone, "input {i} (chains {chains}): result differs");
        }
    }
}
