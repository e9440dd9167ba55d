//! `select_tokens` on the CUDA home (kernels/select.cu) against the composed default
//! (`stapes_core::select::select_host`, the host reference): Whisper-like requests in every rule
//! state (no rules, first step, closed timestamp pair, open timestamp, text after a timestamp,
//! begin suppression; the mass rule on rows where it fires and where it does not), k ∈ {1, 10},
//! rows ∈ {1, 5}, V = 51866 and an awkward V, both kernel forms (block per row; split into
//! slices, `STAPES_CUDA_SELECT_SPLIT=1`). Ids must be equal, scores within 1e-5 (relative
//! beyond 1), probabilities within 1e-6. `select_tokens_feed` on every request: the same answer,
//! and the step tensor holding the position and each row's best id. Without a GPU each test prints
//! `SKIPPED (no CUDA device): <name>` and returns.

mod common;

use std::sync::atomic::Ordering;

use stapes_core::select::{select_host, MassRule, RowSelect, SelectRequest};
use stapes_core::{Backend, HostTensor};

/// Logits on a 1/64 grid (exact ties are common, so the lowest-id rule is exercised); rows with
/// `boost` get their timestamp range raised, so the mass rule fires there.
fn logits(rows: usize, v: usize, tb: usize, seed: u64, boost: &[bool]) -> HostTensor {
    let mut t = HostTensor::random(vec![rows, v], seed, 2.0);
    for (r, row) in t.data.chunks_mut(v).enumerate() {
        for (i, x) in row.iter_mut().enumerate() {
            *x = (*x * 64.0).round() / 64.0;
            if boost.get(r).copied().unwrap_or(false) && i >= tb {
                *x += 3.0;
            }
        }
    }
    t
}

/// Row rules of a Whisper step in state `s` (see the module doc), for a vocabulary whose
/// timestamps start at `tb`, end-of-text at `eot`.
fn state(s: usize, r: usize, v: usize, tb: u32, eot: u32) -> RowSelect {
    let v = v as u32;
    let last = tb + 7 + r as u32;
    let (ranges, mass_rule) = match s {
        0 => (vec![], false),
        1 => (vec![(0, tb), (tb + 51, v)], false),
        2 => (vec![(tb, v)], false),
        3 => (vec![(0, eot), (tb, last)], true),
        4 => (vec![(tb, last + 1)], true),
        _ => (vec![(220, 221), (eot, eot + 1)], true),
    };
    RowSelect {
        ranges,
        mass_rule,
        offset: if s == 4 { -1.25 * r as f32 } else { 0.0 },
    }
}

/// Both kernel forms: one block per row, and the split form (slices of 2048 ids, launched as
/// two kernels; `STAPES_CUDA_SELECT_SPLIT`, read at every call).
fn check_forms(g: &stapes_cuda::CudaBackend, v: usize, tb: u32, eot: u32) {
    for split in [false, true] {
        std::env::set_var("STAPES_CUDA_SELECT_SPLIT", if split { "1" } else { "0" });
        check(g, v, tb, eot, if split { 2 } else { 1 });
    }
    std::env::remove_var("STAPES_CUDA_SELECT_SPLIT");
}

fn check(g: &stapes_cuda::CudaBackend, v: usize, tb: u32, eot: u32, launches: u64) {
    let disabled: Vec<u32> = (0..90u32)
        .map(|i| (i * 577 + 13) % eot)
        .chain([tb - 1, v as u32 + 5])
        .collect();
    let mass = Some(MassRule {
        a: (0, tb),
        b: (tb, v as u32),
    });
    let mut fired = 0;
    for rows in [1usize, 5] {
        for s in 0..6 {
            for k in [1usize, 10] {
                let boost: Vec<bool> = (0..rows).map(|r| (r + s) % 2 == 0).collect();
                let seed = (rows * 100 + s * 10 + k) as u64;
                let x = logits(rows, v, tb as usize, seed, &boost);
                let rs: Vec<RowSelect> = (0..rows).map(|r| state(s, r, v, tb, eot)).collect();
                let req = SelectRequest {
                    disabled: &disabled,
                    rows: &rs,
                    mass,
                    k,
                    prob_of: (s % 2 == 0).then_some(eot + 1),
                };
                let want = select_host(&x, &req).expect("host");
                let dev = g.upload(&x).expect("upload");
                let ops = g.counters().ops.load(Ordering::Relaxed);
                let got = g.select_tokens(&dev, &req).expect("cuda select");
                let what = format!("V {v} rows {rows} state {s} k {k} launches {launches}");
                assert_eq!(
                    g.counters().ops.load(Ordering::Relaxed),
                    ops + launches,
                    "{what}: kernel launches"
                );
                assert_eq!(got.ids, want.ids, "{what}: ids");
                // the same selection with its best ids fed to a step tensor: same answer bit for
                // bit, one launch more, and the tensor holds (position, each row's first id)
                let position = 37 + s;
                let mut feed = g
                    .upload(&HostTensor::new(vec![1, 1, 1 + rows], vec![0.0; 1 + rows]).expect("t"))
                    .expect("upload step tensor");
                let ops = g.counters().ops.load(Ordering::Relaxed);
                let fed = g
                    .select_tokens_feed(&dev, &req, &mut feed, position)
                    .and_then(|p| p.wait())
                    .expect("cuda select with a feed");
                assert_eq!(
                    g.counters().ops.load(Ordering::Relaxed),
                    ops + launches + 1,
                    "{what}: kernel launches with a feed"
                );
                assert_eq!(fed, got, "{what}: the fed selection's answer");
                let firsts = (0..rows).map(|r| (got.ids[r * k]) as f32);
                let want_feed: Vec<f32> = std::iter::once(position as f32).chain(firsts).collect();
                assert_eq!(
                    g.download(&feed).expect("download step tensor").data,
                    want_feed,
                    "{what}: step tensor"
                );
                for (a, b) in got.scores.iter().zip(&want.scores) {
                    assert!(
                        (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                        "{what}: score {a} vs {b}"
                    );
                }
                match (&got.probs, &want.probs) {
                    (Some(a), Some(b)) => {
                        for (p, q) in a.iter().zip(b) {
                            assert!((p - q).abs() <= 1e-6, "{what}: prob {p} vs {q}");
                        }
                    }
                    (None, None) => {}
                    _ => panic!("{what}: probabilities asked and answered differ"),
                }
                // the mass rule changed the answer somewhere (it fired)
                let plain = select_host(
                    &x,
                    &SelectRequest {
                        mass: None,
                        ..req.clone()
                    },
                )
                .expect("host without the mass rule");
                fired += usize::from(plain.ids != want.ids);
            }
        }
    }
    assert!(fired > 0, "V {v}: no request exercised a fired mass rule");
}

#[test]
fn select_matches_host_whisper_vocabulary() {
    std::env::set_var("STAPES_CUDA_SELECT", "1");
    let (g, _l) = require_gpu!("select_matches_host_whisper_vocabulary");
    assert!(g.selects_on_device(), "STAPES_CUDA_SELECT=1 was read");
    check_forms(g, 51866, 50365, 50257);
}

#[test]
fn select_matches_host_awkward_vocabulary() {
    std::env::set_var("STAPES_CUDA_SELECT", "1");
    let (g, _l) = require_gpu!("select_matches_host_awkward_vocabulary");
    assert!(g.selects_on_device(), "STAPES_CUDA_SELECT=1 was read");
    // not a multiple of 32 or of the block; timestamps a short tail
    check_forms(g, 3001, 2900, 2800);
}

#[test]
fn select_refuses_bad_requests() {
    std::env::set_var("STAPES_CUDA_SELECT", "1");
    let (g, _l) = require_gpu!("select_refuses_bad_requests");
    let x = g.upload(&logits(2, 64, 60, 1, &[])).expect("upload");
    let rows = [RowSelect::default()];
    let req = SelectRequest {
        disabled: &[],
        rows: &rows,
        mass: None,
        k: 1,
        prob_of: None,
    };
    assert!(g.select_tokens(&x, &req).is_err(), "2 rows, 1 described");
    let rows = [RowSelect::default(), RowSelect::default()];
    let req = SelectRequest {
        k: 65,
        rows: &rows,
        ..req
    };
    assert!(g.select_tokens(&x, &req).is_err(), "k > V");
    let req = SelectRequest { k: 1, ..req };
    let mut short = g
        .upload(&HostTensor::new(vec![1, 1, 2], vec![0.0; 2]).expect("t"))
        .expect("upload");
    assert!(
        g.select_tokens_feed(&x, &req, &mut short, 0).is_err(),
        "a step tensor for 1 row, 2 rows selected"
    );
}
