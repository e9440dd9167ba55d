//! The q8 lane on an encoder-like GEMM (Whisper turbo's d = 1280) against the exact f32
//! reference: under the table's bar, and a planted fault (one zeroed 32-weight block) fails it.
//!
//! Besides the table's whole-tensor bars we check the worst output column's relative L2: the
//! weights of one output column are all one row of W, so a fault there shows at full strength
//! (≈ √(32/K) ≈ 0.16 of that column) instead of being diluted over N columns.

mod common;

use stapes_core::reference::ReferenceBackend;
use stapes_core::tolerance::{compare, lookup, Op};
use stapes_core::{Backend, HostTensor, Lane};
use stapes_cuda::Q8Mix;

const COLUMN_BAR: f32 = 0.03;

fn worst_column(got: &HostTensor, want: &HostTensor) -> (usize, f32) {
    common::worst_column(&got.data, &want.data, got.last_dim())
}

#[test]
fn q8_encoder_gemm_meets_the_bar_and_a_planted_fault_fails_it() {
    let (g, _serial) = require_gpu!("q8_encoder_gemm_meets_the_bar_and_a_planted_fault_fails_it");
    let (m, k, n) = (200, 1280, 256);
    let x = common::heavy_tailed_activations(m, k);
    let w = HostTensor::random(vec![n, k], 902, 1.0 / (k as f32).sqrt());
    let b = HostTensor::random(vec![n], 903, 0.2);
    let r = ReferenceBackend::new();
    let want = {
        let (xt, wt, bt) = (
            r.upload(&x).unwrap(),
            r.weight(&w, Lane::F32).unwrap(),
            r.upload(&b).unwrap(),
        );
        r.download(&r.linear(&xt, &wt, Some(&bt)).unwrap()).unwrap()
    };
    let run = |w: &HostTensor, lane: Lane| {
        let (xt, wt, bt) = (
            g.upload(&x).unwrap(),
            g.weight(w, lane).unwrap(),
            g.upload(&b).unwrap(),
        );
        g.download(&g.linear(&xt, &wt, Some(&bt)).unwrap()).unwrap()
    };
    let tol = lookup(Op::Linear, Lane::Q8, "cuda")
        .expect("tolerance row linear q8 cuda")
        .tol;

    let f16 = run(&w, Lane::F16);
    let m16 = compare(&f16.data, &want.data, &tol).expect("f16 within the q8 bar");
    eprintln!("f16 for scale: rel_l2 {:.2e}", m16.rel_l2);

    // both forms of the q8 lane: the f16 tensor cores on the q8 values (the default) and the
    // int8 GEMM
    for mix in [Q8Mix::F16, Q8Mix::Int8] {
        g.set_q8_mix(mix);
        let got = run(&w, Lane::Q8);
        let m_ok = compare(&got.data, &want.data, &tol)
            .unwrap_or_else(|e| panic!("q8 {mix:?} vs f32 reference: {e}"));
        let (col, col_err) = worst_column(&got, &want);
        eprintln!(
            "q8 {mix:?} clean: rel_l2 {:.2e} max_abs {:.2e}; worst column {col} rel_l2 {col_err:.2e}",
            m_ok.rel_l2, m_ok.max_abs
        );
        assert!(
            col_err <= COLUMN_BAR,
            "clean q8 {mix:?} worst column {col}: {col_err}"
        );
        // planted fault: output column 77, K-block 13 zeroed
        let mut bad = w.clone();
        for v in &mut bad.data[77 * k + 13 * 32..77 * k + 14 * 32] {
            *v = 0.0;
        }
        let got_bad = run(&bad, Lane::Q8);
        let (col, col_err) = worst_column(&got_bad, &want);
        eprintln!("q8 {mix:?} with a zeroed block: worst column {col} rel_l2 {col_err:.2e}");
        assert_eq!(col, 77, "the fault should be the worst column");
        assert!(
            col_err > COLUMN_BAR,
            "{mix:?}: planted fault passed the bar: {col_err}"
        );
    }
    g.set_q8_mix(Q8Mix::F16);
}
