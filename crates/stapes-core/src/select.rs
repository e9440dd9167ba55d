//! Token selection: a masked log-softmax top-k over rows of logits, so a decoder's step can send
//! back a handful of (id, log-prob) pairs instead of its whole vocabulary row.
//!
//! Per row `r` of logits `x (rows, V)` ([`Backend::select_tokens`](crate::Backend::select_tokens)):
//! 1. `y = x` with every id of [`SelectRequest::disabled`] and of the row's
//!    [`RowSelect::ranges`] set to [`DISABLED`] (`f32::MIN`, not −∞: a fully disabled row still
//!    has a finite log-softmax; ids ≥ V are ignored, ranges are clipped to V).
//! 2. Where the row's [`RowSelect::mass_rule`] is on and [`SelectRequest::mass`] is given:
//!    with `lse = logsumexp(y)`, if `logsumexp(y[B]) − lse > max(y[A]) − lse` then `y[A] = DISABLED`
//!    (Whisper's "timestamps together outweigh every text token" rule).
//! 3. `lp = y − logsumexp(y)` in f32, then `key = lp + offset` (a beam's cumulative score; 0 for
//!    greedy).
//! 4. The `k` best keys, best first; equal keys rank by lowest id (a first-maximum argmax).
//! 5. Optionally the raw softmax probability `exp(x[p] − logsumexp(x))` of one id `p`.
//!
//! `logsumexp` here is the host reduction [`log_sum_exp`] (f32 exponentials summed in f64); a
//! device home reduces in f32/f64 and matches it to ~1e-6.

use crate::{Error, HostTensor, Result};

/// Value written over disabled logits (CTranslate2's `numeric_limits<float>::lowest()`).
pub const DISABLED: f32 = f32::MIN;
/// Most id ranges one row may disable (a device home keeps them in a fixed-size record).
pub const MAX_RANGES: usize = 8;
/// Largest `k` a device home must serve (beam 16).
pub const MAX_K: usize = 32;

/// The two id ranges of the mass rule, half-open `[lo, hi)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MassRule {
    /// Disabled when the rule fires (Whisper: the text tokens).
    pub a: (u32, u32),
    /// Whose total mass is weighed against `A`'s best id (Whisper: the timestamps).
    pub b: (u32, u32),
}

/// One row's own part of a request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RowSelect {
    /// Half-open id ranges disabled in this row only, at most [`MAX_RANGES`].
    pub ranges: Vec<(u32, u32)>,
    /// Whether [`SelectRequest::mass`] applies to this row.
    pub mass_rule: bool,
    /// Added to every log-prob before ranking (and included in the returned values).
    pub offset: f32,
}

/// What [`Backend::select_tokens`](crate::Backend::select_tokens) computes; see the module doc.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectRequest<'a> {
    /// Ids disabled in every row (the same list call after call: a home may cache it).
    pub disabled: &'a [u32],
    /// One entry per row of the logits.
    pub rows: &'a [RowSelect],
    pub mass: Option<MassRule>,
    /// Candidates per row, 1 ..= V.
    pub k: usize,
    /// The id whose raw softmax probability comes back for every row.
    pub prob_of: Option<u32>,
}

/// The answer: row `r`'s candidates are `ids[r*k .. (r+1)*k]`, best first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selected {
    pub k: usize,
    pub ids: Vec<u32>,
    /// `log-prob + offset` of each candidate.
    pub scores: Vec<f32>,
    /// Per row, where [`SelectRequest::prob_of`] asked for it.
    pub probs: Option<Vec<f32>>,
}

impl Selected {
    /// Row `r`'s `(id, score)` pairs, best first.
    pub fn row(&self, r: usize) -> impl Iterator<Item = (u32, f32)> + '_ {
        let lo = (r * self.k).min(self.ids.len());
        let hi = ((r + 1) * self.k).min(self.ids.len());
        self.ids[lo..hi]
            .iter()
            .copied()
            .zip(self.scores[lo..hi].iter().copied())
    }

    /// Each of `rows` rows' best id (0 for a row with no candidate): what a greedy step feeds
    /// to the next one.
    pub fn best_ids(&self, rows: usize) -> Vec<u32> {
        (0..rows)
            .map(|r| self.row(r).next().map_or(0, |(id, _)| id))
            .collect()
    }
}

/// A selection that may still be on its way back from the device
/// ([`crate::Backend::select_tokens_feed`]): the caller queues more work (the next step) and
/// then [`Self::wait`]s, so the device does not idle while the host handles the answer.
pub struct PendingSelect<'a>(Pending<'a>);

enum Pending<'a> {
    Ready(Selected),
    Later(Box<dyn FnOnce() -> Result<Selected> + 'a>),
}

impl<'a> PendingSelect<'a> {
    /// An answer already on the host.
    pub fn ready(sel: Selected) -> Self {
        Self(Pending::Ready(sel))
    }

    /// An answer that `wait` fetches (it blocks until the device has written it).
    pub fn later(wait: impl FnOnce() -> Result<Selected> + 'a) -> Self {
        Self(Pending::Later(Box::new(wait)))
    }

    /// The answer, once it is on the host.
    pub fn wait(self) -> Result<Selected> {
        match self.0 {
            Pending::Ready(sel) => Ok(sel),
            Pending::Later(f) => f(),
        }
    }
}

/// Check a request against logits of `shape`; returns `(rows, V)`.
pub fn select_dims(shape: &[usize], req: &SelectRequest<'_>) -> Result<(usize, usize)> {
    const OP: &str = "select_tokens";
    let v = shape.last().copied().unwrap_or(0);
    if v == 0 {
        return Err(Error::shape(
            OP,
            format!("logits {shape:?}: want (.., V ≥ 1)"),
        ));
    }
    let rows = shape.iter().product::<usize>() / v;
    if rows != req.rows.len() {
        return Err(Error::shape(
            OP,
            format!(
                "logits {shape:?} hold {rows} rows, the request describes {}",
                req.rows.len()
            ),
        ));
    }
    if req.k == 0 || req.k > v {
        return Err(Error::shape(
            OP,
            format!("k = {} for a vocabulary of {v}: want 1 ..= V", req.k),
        ));
    }
    if u32::try_from(v).is_err() {
        return Err(Error::shape(OP, format!("vocabulary of {v} ids")));
    }
    for (r, row) in req.rows.iter().enumerate() {
        if row.ranges.len() > MAX_RANGES {
            return Err(Error::shape(
                OP,
                format!(
                    "row {r} disables {} ranges: at most {MAX_RANGES}",
                    row.ranges.len()
                ),
            ));
        }
        if let Some(&(lo, hi)) = row.ranges.iter().find(|(lo, hi)| lo > hi) {
            return Err(Error::shape(OP, format!("row {r}: range [{lo}, {hi})")));
        }
    }
    if let Some(m) = req.mass {
        if m.a.0 > m.a.1 || m.b.0 > m.b.1 {
            return Err(Error::shape(OP, format!("mass rule ranges {m:?}")));
        }
    }
    Ok((rows, v))
}

/// `log(Σ exp(x))`: the max, then f32 exponentials summed in 8 f64 lanes (the bits Whisper's
/// host decoding has always produced). An empty slice gives −∞.
pub fn log_sum_exp(x: &[f32]) -> f32 {
    let m = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    if !m.is_finite() {
        return m;
    }
    let mut acc = [0f64; 8];
    for c in x.chunks(8) {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += (v - m).exp() as f64;
        }
    }
    m + (acc.iter().sum::<f64>()).ln() as f32
}

fn clip(r: (u32, u32), v: usize) -> std::ops::Range<usize> {
    let hi = (r.1 as usize).min(v);
    (r.0 as usize).min(hi)..hi
}

/// One row in place: steps 1–3 of the module doc (the row ends as `lp`, without the offset).
pub fn masked_log_softmax(
    row: &mut [f32],
    disabled: &[u32],
    rs: &RowSelect,
    mass: Option<MassRule>,
) {
    let v = row.len();
    for &id in disabled {
        if let Some(x) = row.get_mut(id as usize) {
            *x = DISABLED;
        }
    }
    for &r in &rs.ranges {
        row[clip(r, v)].fill(DISABLED);
    }
    let mut lse = log_sum_exp(row);
    if let (Some(m), true) = (mass, rs.mass_rule) {
        let (a, b) = (clip(m.a, v), clip(m.b, v));
        let max_a = row[a.clone()]
            .iter()
            .fold(f32::NEG_INFINITY, |m, &x| m.max(x))
            - lse;
        let mass_b = log_sum_exp(&row[b]) - lse;
        if mass_b > max_a {
            row[a].fill(DISABLED);
            lse = log_sum_exp(row);
        }
    }
    for x in row.iter_mut() {
        *x -= lse;
    }
}

/// The best `k` of `(key, id)` in one row, best first, equal keys by lowest id.
pub fn top_k(row: &[f32], offset: f32, k: usize) -> Vec<(u32, f32)> {
    let mut top: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
    for (i, &lp) in row.iter().enumerate() {
        let s = lp + offset;
        if top.len() == k && s <= top[k - 1].0 {
            continue;
        }
        let pos = top.partition_point(|&(t, _)| t >= s);
        top.insert(pos, (s, i as u32));
        top.truncate(k);
    }
    top.into_iter().map(|(s, i)| (i, s)).collect()
}

/// The whole operation on host logits (what the composed default runs after a download).
pub fn select_host(logits: &HostTensor, req: &SelectRequest<'_>) -> Result<Selected> {
    let (_, v) = select_dims(&logits.shape, req)?;
    let mut out = Selected {
        k: req.k,
        ids: Vec::with_capacity(req.rows.len() * req.k),
        scores: Vec::with_capacity(req.rows.len() * req.k),
        probs: req.prob_of.map(|_| Vec::with_capacity(req.rows.len())),
    };
    let mut row = vec![0f32; v];
    for (x, rs) in logits.data.chunks(v).zip(req.rows) {
        if let (Some(p), Some(probs)) = (req.prob_of, out.probs.as_mut()) {
            let lse = log_sum_exp(x);
            probs.push(x.get(p as usize).map_or(0.0, |&xp| (xp - lse).exp()));
        }
        row.copy_from_slice(x);
        masked_log_softmax(&mut row, req.disabled, rs, req.mass);
        for (id, s) in top_k(&row, rs.offset, req.k) {
            out.ids.push(id);
            out.scores.push(s);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(rows: &'a [RowSelect], disabled: &'a [u32], k: usize) -> SelectRequest<'a> {
        SelectRequest {
            disabled,
            rows,
            mass: Some(MassRule {
                a: (0, 4),
                b: (4, 8),
            }),
            k,
            prob_of: Some(2),
        }
    }

    /// Worked by hand: the mass rule fires when B's total beats A's best, and only on rows that
    /// ask for it; ties rank by lowest id; the raw probability ignores the masks.
    #[test]
    fn masks_mass_rule_ties_and_raw_probability() {
        // A = ids 0..4 (best 1.0), B = ids 4..8 (four 0.5s: mass ln(4)+0.5 > 1.0)
        let x = vec![1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5];
        let logits = HostTensor::new(vec![2, 8], [x.clone(), x.clone()].concat()).unwrap();
        let rows = [
            RowSelect {
                mass_rule: true,
                ..Default::default()
            },
            RowSelect {
                ranges: vec![(0, 1)],
                ..Default::default()
            },
        ];
        let s = select_host(&logits, &req(&rows, &[5], 3)).unwrap();
        // row 0: A disabled, 5 disabled: ids 4, 6, 7 share the mass equally
        let third = -(3f32).ln();
        let r0: Vec<_> = s.row(0).collect();
        assert_eq!(r0.iter().map(|p| p.0).collect::<Vec<_>>(), vec![4, 6, 7]);
        for (_, lp) in &r0 {
            assert!((lp - third).abs() < 1e-6, "{r0:?}");
        }
        // row 1: id 0 and 5 disabled, no rule: id 3 (1.0) first, then the 0.5s from id 4
        let r1: Vec<_> = s.row(1).map(|p| p.0).collect();
        assert_eq!(r1, vec![3, 4, 6]);
        let lse = log_sum_exp(&x);
        let p = s.probs.unwrap();
        assert!((p[0] - (0.0 - lse).exp()).abs() < 1e-7 && p[0] == p[1]);
    }

    #[test]
    fn refuses_bad_requests() {
        let logits = HostTensor::new(vec![1, 8], vec![0.0; 8]).unwrap();
        let rows = [RowSelect::default()];
        assert!(select_host(&logits, &req(&rows, &[], 0)).is_err());
        assert!(select_host(&logits, &req(&rows, &[], 9)).is_err());
        assert!(select_host(&logits, &req(&[], &[], 1)).is_err());
        let bad = [RowSelect {
            ranges: vec![(3, 2)],
            ..Default::default()
        }];
        assert!(select_host(&logits, &req(&bad, &[], 1)).is_err());
    }
}
