//! The transducer label-loop ops of the `Backend` contract (`transducer_frames`,
//! `transducer_advance`, `transducer_embed`, `transducer_keep`) on this home: kernels
//! (`kernels/transducer.cu`) that read each clip's frame index, token and emitted flag from the
//! state tensor of [`stapes_core::transducer`] and update it in place, so a captured chain of
//! label-loop steps replays with no host round trip.

use std::ffi::c_void;

use stapes_core::transducer::{
    loop_dims, state_batch, TransducerRule, MAX_DURATIONS, RECORD_FIELDS, STATE_FIELDS,
};
use stapes_core::{DeviceTensor, Error, Result};

use crate::backend::{CudaBackend, CudaTensor, CudaWeight, Dtype, WeightData};

macro_rules! args {
    ($($a:expr),* $(,)?) => { &mut [$(&$a as *const _ as *mut c_void),*] };
}

fn grid_1d(n: usize) -> (u32, u32, u32) {
    (n.div_ceil(256).clamp(1, 132 * 32) as u32, 1, 1)
}

/// The state and log are written by the kernels as f32.
fn check_f32(op: &'static str, name: &str, t: &CudaTensor) -> Result<()> {
    if t.is_f16() {
        return Err(Error::shape(
            op,
            format!(
                "{name} {:?} holds f16 values; the loop state is f32",
                t.shape()
            ),
        ));
    }
    Ok(())
}

/// `dt` bit 1 when the read tensor is f16 (common.cuh's convention).
fn in_bit(t: &CudaTensor) -> i32 {
    (t.is_f16() as i32) << 1
}

impl CudaBackend {
    /// `x (B, T, C)` → `(B, 1, C)` f32 at each clip's frame.
    pub(crate) fn transducer_frames_k(
        &self,
        x: &CudaTensor,
        state: &CudaTensor,
        alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
    ) -> Result<CudaTensor> {
        const OP: &str = "transducer_frames";
        let bs = state_batch(OP, state.shape())?;
        check_f32(OP, "state", state)?;
        let xs = x.shape();
        if xs.len() != 3 || xs[0] != bs || xs[1] == 0 {
            return Err(Error::shape(
                OP,
                format!("x {xs:?} for a batch of {bs}: want (B, T ≥ 1, C)"),
            ));
        }
        let (t, c) = (xs[1], xs[2]);
        let out = alloc(&[bs, 1, c])?;
        if bs * c == 0 {
            return Ok(out);
        }
        let (o, xp, sp) = (self.p(&out.buf), self.p(&x.buf), self.p(&state.buf));
        let (bi, ti, ci, dt) = (bs as i32, t as i32, c as i32, in_bit(x));
        self.launch(
            "transducer_frames",
            grid_1d(bs * c),
            (256, 1, 1),
            0,
            args![o, xp, sp, bi, ti, ci, dt],
        )?;
        Ok(out)
    }

    /// One greedy step of every clip, state and log updated in place.
    pub(crate) fn transducer_advance_k(
        &self,
        state: &mut CudaTensor,
        logits: &CudaTensor,
        rule: &TransducerRule,
        log: &mut CudaTensor,
        slot: usize,
    ) -> Result<()> {
        const OP: &str = "transducer_advance";
        let (bs, k) = loop_dims(state.shape(), log.shape())?;
        check_f32(OP, "state", state)?;
        check_f32(OP, "log", log)?;
        rule.check()?;
        let w = rule.width();
        if logits.numel() != bs * w || slot >= k {
            return Err(Error::shape(
                OP,
                format!(
                    "logits {:?} for {bs} clips × {w}, slot {slot} of {k}",
                    logits.shape()
                ),
            ));
        }
        if bs == 0 {
            return Ok(());
        }
        let mut d = [0i32; MAX_DURATIONS];
        for (slot_d, &v) in d.iter_mut().zip(&rule.durations) {
            *slot_d = i32::try_from(v).map_err(|_| Error::shape(OP, format!("duration {v}")))?;
        }
        let (sp, lp, gp) = (self.p(&state.buf), self.p(&logits.buf), self.p(&log.buf));
        let (wi, vi, bi, ndi) = (
            w as i32,
            rule.vocab as i32,
            rule.blank as i32,
            rule.durations.len() as i32,
        );
        let (ms, ki, si, dt) = (
            rule.max_symbols.min(i32::MAX as usize) as i32,
            k as i32,
            slot as i32,
            in_bit(logits),
        );
        let [d0, d1, d2, d3, d4, d5, d6, d7] = d;
        self.launch(
            "transducer_advance",
            (bs as u32, 1, 1),
            (256, 1, 1),
            0,
            args![sp, lp, gp, wi, vi, bi, ndi, d0, d1, d2, d3, d4, d5, d6, d7, ms, ki, si, dt],
        )
    }

    /// `(B, 1, D)` f32 rows of `table (V, D)` at each clip's token.
    pub(crate) fn transducer_embed_k(
        &self,
        table: &CudaTensor,
        state: &CudaTensor,
        alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
    ) -> Result<CudaTensor> {
        const OP: &str = "transducer_embed";
        let bs = state_batch(OP, state.shape())?;
        check_f32(OP, "state", state)?;
        let ts = table.shape();
        if ts.len() != 2 || ts[0] == 0 {
            return Err(Error::shape(OP, format!("table {ts:?}: want (V ≥ 1, D)")));
        }
        let (v, d) = (ts[0], ts[1]);
        let out = alloc(&[bs, 1, d])?;
        if bs * d == 0 {
            return Ok(out);
        }
        let (o, tp, sp) = (self.p(&out.buf), self.p(&table.buf), self.p(&state.buf));
        let (bi, vi, di, dt) = (bs as i32, v as i32, d as i32, in_bit(table));
        self.launch(
            "transducer_embed",
            grid_1d(bs * d),
            (256, 1, 1),
            0,
            args![o, tp, sp, bi, vi, di, dt],
        )?;
        Ok(out)
    }

    /// `dst (B, n, C)` takes `src`'s rows where the clip's last step emitted a label.
    pub(crate) fn transducer_keep_k(
        &self,
        dst: &mut CudaTensor,
        src: &CudaTensor,
        state: &CudaTensor,
    ) -> Result<()> {
        const OP: &str = "transducer_keep";
        let bs = state_batch(OP, state.shape())?;
        check_f32(OP, "state", state)?;
        let ds = dst.shape();
        if ds.len() != 3 || ds[0] != bs || src.shape() != ds || src.dtype != dst.dtype {
            return Err(Error::shape(
                OP,
                format!(
                    "src {:?} ({:?}) into {ds:?} ({:?}) for a batch of {bs}: want equal (B, n, C) of one type",
                    src.shape(),
                    src.dtype,
                    dst.dtype
                ),
            ));
        }
        // a GEMM input prepared from `dst` would be stale after this write
        self.forget_prep();
        let n = ds[1] * ds[2];
        if bs * n == 0 {
            return Ok(());
        }
        let (dp, sp, stp) = (self.p(&dst.buf), self.p(&src.buf), self.p(&state.buf));
        let bytes = match dst.dtype {
            Dtype::F16 => 2i32,
            Dtype::F32 => 4i32,
        };
        let (bi, ni) = (bs as i32, n as i32);
        self.launch(
            "transducer_keep",
            grid_1d(bs * n),
            (256, 1, 1),
            0,
            args![dp, sp, stp, bi, ni, bytes],
        )
    }
}

impl CudaBackend {
    /// [`stapes_core::Backend::lstm_cell`]: the two GEMVs of [`CudaBackend::transducer_linear_k`]
    /// (the prediction network steps a few rows; each row rounds as it does alone, so this and
    /// [`CudaBackend::transducer_lstm_k`] agree at any row count), then one element-wise kernel
    /// for the gates (the composed default runs about fifteen).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lstm_cell_k(
        &self,
        x: &CudaTensor,
        h: &CudaTensor,
        c: &CudaTensor,
        w_ih: &CudaWeight,
        w_hh: &CudaWeight,
        bias: Option<&CudaTensor>,
        alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
    ) -> Result<(CudaTensor, CudaTensor)> {
        const OP: &str = "lstm_cell";
        let hid = h.shape().last().copied().unwrap_or(0);
        let rows = h.numel() / hid.max(1);
        let gx = self.transducer_linear_k(x, w_ih, bias, alloc)?;
        let gh = self.transducer_linear_k(h, w_hh, None, alloc)?;
        if hid == 0
            || c.shape() != h.shape()
            || gx.numel() != rows * 4 * hid
            || gh.numel() != rows * 4 * hid
        {
            return Err(Error::shape(
                OP,
                format!(
                    "x {:?}, h {:?}, c {:?}, gates {:?}: want h, c (.., H) and 4H gates per row",
                    x.shape(),
                    h.shape(),
                    c.shape(),
                    gx.shape()
                ),
            ));
        }
        let (h2, c2) = (alloc(h.shape())?, alloc(h.shape())?);
        self.lstm_pointwise(&h2, &c2, &gx, &gh, c, rows, hid, None)?;
        Ok((h2, c2))
    }

    /// The gates' element-wise part into `h2`, `c2` (with `keep`: only rows of clips that
    /// emitted, `rows / B` rows per clip; `h2`, `c2` may be the inputs themselves).
    #[allow(clippy::too_many_arguments)]
    fn lstm_pointwise(
        &self,
        h2: &CudaTensor,
        c2: &CudaTensor,
        gx: &CudaTensor,
        gh: &CudaTensor,
        c: &CudaTensor,
        rows: usize,
        hid: usize,
        keep: Option<(&CudaTensor, usize)>,
    ) -> Result<()> {
        let bit = |t: &CudaTensor, b: i32| (t.is_f16() as i32) << b;
        let dt = bit(h2, 0) | bit(gx, 1) | bit(gh, 2) | bit(c, 3);
        let (hp, cp, xp, gp, op) = (
            self.p(&h2.buf),
            self.p(&c2.buf),
            self.p(&gx.buf),
            self.p(&gh.buf),
            self.p(&c.buf),
        );
        let (sp, per) = match keep {
            Some((st, clips)) => (self.p(&st.buf), (rows / clips.max(1)).max(1) as i32),
            None => (0u64, 1i32),
        };
        let (ri, hi) = (rows as i32, hid as i32);
        self.launch(
            "lstm_pointwise",
            grid_1d(rows * hid),
            (256, 1, 1),
            0,
            args![hp, cp, xp, gp, op, ri, hi, dt, sp, per],
        )
    }

    /// [`stapes_core::Backend::transducer_lstm`]: the two GEMVs of
    /// [`CudaBackend::transducer_linear_k`] (a clip's gates round alike at every batch size),
    /// then the element-wise kernel writing `h`, `c` in place for the clips that emitted.
    /// `alloc` gives the gates in `linear`'s output type.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn transducer_lstm_k(
        &self,
        x: &CudaTensor,
        h: &mut CudaTensor,
        c: &mut CudaTensor,
        w_ih: &CudaWeight,
        w_hh: &CudaWeight,
        bias: Option<&CudaTensor>,
        state: &CudaTensor,
        alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
    ) -> Result<()> {
        const OP: &str = "transducer_lstm";
        let bs = state_batch(OP, state.shape())?;
        check_f32(OP, "state", state)?;
        let hs = h.shape().to_vec();
        let hid = hs.last().copied().unwrap_or(0);
        let rows = h.numel() / hid.max(1);
        let gx = self.transducer_linear_k(x, w_ih, bias, alloc)?;
        let gh = self.transducer_linear_k(h, w_hh, None, alloc)?;
        if hid == 0
            || hs.len() != 3
            || hs[0] != bs
            || c.shape() != hs.as_slice()
            || h.dtype != c.dtype
            || gx.numel() != rows * 4 * hid
            || gh.numel() != rows * 4 * hid
        {
            return Err(Error::shape(
                OP,
                format!(
                    "x {:?}, h {hs:?}, c {:?}, gates {:?} for a batch of {bs}: want h, c (B, n, H) of one type and 4H gates per row",
                    x.shape(),
                    c.shape(),
                    gx.shape()
                ),
            ));
        }
        // h and c are GEMM inputs: a prepared copy of either is stale after this write
        self.forget_prep();
        self.lstm_pointwise(h, c, &gx, &gh, c, rows, hid, Some((state, bs)))
    }

    /// [`stapes_core::Backend::transducer_joint_input`]: `(B, 1, J)` f32.
    pub(crate) fn transducer_joint_input_k(
        &self,
        x: &CudaTensor,
        state: &CudaTensor,
        pred: &CudaTensor,
        act: i32,
        alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
    ) -> Result<CudaTensor> {
        const OP: &str = "transducer_joint_input";
        let bs = state_batch(OP, state.shape())?;
        check_f32(OP, "state", state)?;
        let xs = x.shape();
        if xs.len() != 3 || xs[0] != bs || xs[1] == 0 || pred.shape() != [bs, 1, xs[2]] {
            return Err(Error::shape(
                OP,
                format!(
                    "x {xs:?}, pred {:?} for a batch of {bs}: want (B, T ≥ 1, J) and (B, 1, J)",
                    pred.shape()
                ),
            ));
        }
        let (t, c) = (xs[1], xs[2]);
        let out = alloc(&[bs, 1, c])?;
        if bs * c == 0 {
            return Ok(out);
        }
        let (o, xp, pp, sp) = (
            self.p(&out.buf),
            self.p(&x.buf),
            self.p(&pred.buf),
            self.p(&state.buf),
        );
        let dt = in_bit(x) | (in_bit(pred) << 1);
        let (bi, ti, ci) = (bs as i32, t as i32, c as i32);
        self.launch(
            "transducer_joint_input",
            grid_1d(bs * c),
            (256, 1, 1),
            0,
            args![o, xp, pp, sp, bi, ti, ci, act, dt],
        )?;
        Ok(out)
    }
}

/// Rows of one `transducer_gemv_*` block (`TG_ROWS` in transducer.cu).
const TG_ROWS: usize = 16;
/// Columns of one `transducer_gemv_*` block (8 warps of `cols / 8` each): one column a warp, the
/// fastest of 8/16/32/64 on the H200 at one clip and at 16 (ledger, stop 13 call 1: one 11 s
/// clip's decode 3.25 ms vs 5.03 at 32; 100 clips batched RTFx 3309 vs 3035).
const TG_COLS: usize = 8;

/// `STAPES_PARAKEET_GEMV_COLS` (a multiple of 8 up to 256) sets the columns of a
/// `transducer_gemv_*` block. Each column is one warp's whole dot product, so the count changes
/// which block computes a column and never its value; fewer columns a block give one clip's
/// 2560-wide LSTM gates more blocks than the default's 80 on the H200's 132 SMs.
fn gemv_cols() -> usize {
    crate::env_usize("STAPES_PARAKEET_GEMV_COLS")
        .filter(|c| c % 8 == 0 && (8..=256).contains(c))
        .unwrap_or(TG_COLS)
}

/// `STAPES_PARAKEET_BATCH_EXACT=0` turns the GEMV form of [`CudaBackend::transducer_linear_k`]
/// off (read at each call, so one process can compare both forms; only eager steps and chain
/// captures call it).
fn batch_exact() -> bool {
    !std::env::var("STAPES_PARAKEET_BATCH_EXACT").is_ok_and(|v| v.trim() == "0")
}

impl CudaBackend {
    /// [`stapes_core::Backend::transducer_linear`]: `x (.., K)` → `(.., N)` by one GEMV-form
    /// kernel at every row count (`transducer_gemv_*`: 16 rows and [`gemv_cols`] columns a block,
    /// the rows staged in shared memory, every rounding spelled out), so each row comes out as it
    /// does alone, wherever it sits in the batch. `alloc` gives the output in `linear`'s output type.
    pub(crate) fn transducer_linear_k(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        bias: Option<&CudaTensor>,
        alloc: &dyn Fn(&[usize]) -> Result<CudaTensor>,
    ) -> Result<CudaTensor> {
        const OP: &str = "transducer_linear";
        if !batch_exact() {
            // the former form, for before/after comparisons: `linear`'s kernel by row count
            return stapes_core::Backend::linear(self, x, w, bias);
        }
        let (n, k) = stapes_core::Backend::weight_shape(self, w);
        let xs = x.shape();
        if xs.is_empty() || xs[xs.len() - 1] != k || k == 0 {
            return Err(Error::shape(OP, format!("x {xs:?} with W ({n}, {k})")));
        }
        if let Some(b) = bias {
            if b.numel() != n {
                return Err(Error::shape(
                    OP,
                    format!("bias {:?} for N = {n}", b.shape()),
                ));
            }
        }
        let m = x.numel() / k;
        let mut shape = xs.to_vec();
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        let out = alloc(&shape)?;
        if m * n == 0 {
            return Ok(out);
        }
        let groups = m.div_ceil(TG_ROWS);
        if groups > 65535 || m > i32::MAX as usize || n > i32::MAX as usize {
            return Err(Error::shape(
                OP,
                format!("{m} rows × {n}: beyond one launch's grid"),
            ));
        }
        let bias32 = bias.map(|b| self.as_dtype(b, Dtype::F32)).transpose()?;
        let bp = bias32.as_ref().map(|b| self.p(&b.buf)).unwrap_or(0);
        let (yp, xp) = (self.p(&out.buf), self.p(&x.buf));
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let dt = (out.is_f16() as i32) | in_bit(x);
        let cols = gemv_cols();
        let ci = cols as i32;
        let grid = (n.div_ceil(cols) as u32, groups as u32, 1);
        // a block's rows of x in shared memory (as f32) when they fit the default 48 KiB
        let staged = m.min(TG_ROWS) * k;
        let (smem_floats, smem) = if staged * 4 <= 48 * 1024 {
            (staged as i32, (staged * 4) as u32)
        } else {
            (0, 0)
        };
        match &w.data {
            WeightData::F16(wb) => {
                let wp = self.p(wb);
                self.launch(
                    "transducer_gemv_f16",
                    grid,
                    (256, 1, 1),
                    smem,
                    args![yp, xp, wp, bp, mi, ni, ki, ci, smem_floats, dt],
                )?;
            }
            WeightData::Q8 {
                w8, scales, k_pad, ..
            } => {
                let (wp, sp, kp) = (self.p(w8), self.p(scales), *k_pad as i32);
                self.launch(
                    "transducer_gemv_i8",
                    grid,
                    (256, 1, 1),
                    smem,
                    args![yp, xp, wp, sp, bp, mi, ni, ki, kp, ci, smem_floats, dt],
                )?;
            }
        }
        Ok(out)
    }
}

/// Fields the kernels hard-code (`TS_FIELDS`, `TR_FIELDS` in transducer.cu).
const _: () = assert!(STATE_FIELDS == 8 && RECORD_FIELDS == 6 && MAX_DURATIONS == 8);
