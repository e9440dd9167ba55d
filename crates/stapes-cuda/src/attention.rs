//! Attention with head size 64 (or fewer dims in whole 8-dim chunks, zero-padded to 64 inside
//! the kernel) on the FA2-style kernels (`flash64_*` in kernels/attention.cu)
//! or, on sm_90, their warpgroup-MMA form (`awg64_*` in kernels/attn_wg.cu: same arithmetic,
//! same bits, K/V tiles by TMA), and `attention_packed`, which reads q, k and v in place from
//! one stacked `(B, T, 3·H·Dh)` tensor (row stride 3·H·Dh) instead of slicing three copies.
//!
//! A child module of `backend`: it uses the backend's private helpers (`t`, `alloc`, `launch`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use stapes_core::{AttnParams, Backend, DeviceTensor, Error, Result};

use super::{CudaBackend, CudaTensor, Dtype};

/// The head-size-64 kernels, by name: `w` warps per block, `m` 16-row query tiles per warp,
/// `s` cp.async stages of 64 keys. Every one computes the same values (same arithmetic per row,
/// same order), so they can be swapped freely. (name, query rows per block, threads per block)
const KERNELS: [(&str, usize, u32); 8] = [
    ("flash64_w8m1s2", 128, 256),
    ("flash64_w8m1s3", 128, 256),
    ("flash64_w4m2s2", 128, 128),
    ("flash64_w4m2s3", 128, 128),
    ("flash64_w4m1s2", 64, 128),
    ("flash64_w4m1s3", 64, 128),
    ("flash64_w8m2s2", 256, 256),
    ("flash64_w8m2s3", 256, 256),
];

/// The default for unsplit grids of too few 128-row blocks to fill the SMs (GigaAM's 275 frames
/// × 16 heads: 48 blocks of `flash64_w4m2s2`, 80 of this).
const SMALL_GRID: (&str, usize, u32) = KERNELS[4];

/// 0: the default (`flash64_pick`); 1 ..= 8: `KERNELS[i - 1]`; `LEGACY`: the older `flash_attn_d64` kernels.
/// Starts from `STAPES_CUDA_ATTN` (`legacy` or a kernel name), so whole-model benchmarks can
/// compare kernels in one process tree.
static FORCED: AtomicU8 = AtomicU8::new(0);
static FORCED_ENV: std::sync::Once = std::sync::Once::new();
const LEGACY: u8 = 255;

fn forced() -> u8 {
    FORCED_ENV.call_once(|| {
        if let Ok(v) = std::env::var("STAPES_CUDA_ATTN") {
            match kernel_code(Some(v.trim())) {
                Some(c) => FORCED.store(c, Ordering::Relaxed),
                None => tracing::warn!(
                    "STAPES_CUDA_ATTN={v:?} is not `legacy` or one of {:?}; ignored",
                    CudaBackend::flash64_kernels()
                ),
            }
        }
    });
    FORCED.load(Ordering::Relaxed)
}

fn kernel_code(name: Option<&str>) -> Option<u8> {
    match name {
        None | Some("") | Some("auto") => Some(0),
        Some("legacy") => Some(LEGACY),
        Some(n) => KERNELS.iter().position(|k| k.0 == n).map(|i| i as u8 + 1),
    }
}

/// Split-keys choice: `SPLIT_AUTO` picks by shape and SM count, 1 never splits, n ≥ 2 always
/// splits the keys n ways (where the default kernel runs). Starts from `STAPES_CUDA_ATTN_SPLIT`
/// (`auto`, `0`/`1`/`off`, or a count up to `MAX_SPLIT`); auto when unset.
static SPLIT: AtomicU8 = AtomicU8::new(SPLIT_AUTO);
static SPLIT_ENV: std::sync::Once = std::sync::Once::new();
const SPLIT_AUTO: u8 = 0;
/// More splits than this only add combine traffic: 4 already fills 2 waves at tiny's shape.
/// `flash64_combine` holds this many splits in registers (`COMBINE_MAX` in attention.cu).
const MAX_SPLIT: usize = 8;

fn split_code(v: &str) -> Option<u8> {
    match v {
        "" | "auto" => Some(SPLIT_AUTO),
        "off" => Some(1),
        n => match n.parse::<usize>() {
            Ok(0) => Some(1),
            Ok(n) if n <= MAX_SPLIT => Some(n as u8),
            _ => None,
        },
    }
}

fn split_forced() -> u8 {
    SPLIT_ENV.call_once(|| {
        if let Ok(v) = std::env::var("STAPES_CUDA_ATTN_SPLIT") {
            match split_code(v.trim()) {
                Some(c) => SPLIT.store(c, Ordering::Relaxed),
                None => tracing::warn!(
                    "STAPES_CUDA_ATTN_SPLIT={v:?} is not `auto`, `off` or a count 0..={MAX_SPLIT}; ignored"
                ),
            }
        }
    });
    SPLIT.load(Ordering::Relaxed)
}

/// The warpgroup-MMA kernels (`awg64_*`): 0 not read yet, 1 off, 2 on. Starts from
/// `STAPES_CUDA_ATTN_WG` (`0` turns them off; on by default where the device is sm_90).
static WG: AtomicU8 = AtomicU8::new(0);
/// Launches of an `awg64_*` kernel in this process (tests check the path was taken).
static WG_LAUNCHES: AtomicU64 = AtomicU64::new(0);
/// Launches of a `flash64_*` / `flash64s_*` kernel with heads smaller than 64 (tests check that
/// such heads left the scalar row kernel).
static SMALL_HEAD_LAUNCHES: AtomicU64 = AtomicU64::new(0);
/// Of those, launches that added a q|k|v bias themselves (`Flash64::bias`).
static WG_BIAS_LAUNCHES: AtomicU64 = AtomicU64::new(0);
/// The two forms launched, (entry, K/V ring depth): 4 stages of 64 keys unsplit; 3 for the
/// split form, whose blocks see only a few tiles (H200, stop 15: turbo 34.0 vs 34.3 µs, tiny
/// split 3 ways 20.5 vs 21.0). kernels/attn_wg.cu instantiates exactly these.
const WG_UNSPLIT: (&str, usize) = ("awg64_s4", 4);
const WG_SPLIT: (&str, usize) = ("awg64s_s3", 3);

/// A size as the kernels' `int`, or a shape error naming it.
fn i32_of(what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::shape("attention", format!("{what} {v} over i32")))
}

/// The split-keys form's scratch: partial outputs and (max, sum) per (b, split, h, row), pool
/// blocks that a graph keeps (through `t`) when the launch runs inside a capture; and the
/// launch parameters every split kernel takes.
struct Splits {
    _po: CudaTensor,
    _pml: CudaTensor,
    po: u64,
    pml: u64,
    /// splits, key tiles per split, grid z (batch × splits)
    n: i32,
    tiles: i32,
    z: u32,
}

fn wg_switch() -> bool {
    if WG.load(Ordering::Relaxed) == 0 {
        let off = std::env::var("STAPES_CUDA_ATTN_WG").is_ok_and(|v| v.trim() == "0");
        let _ = WG.compare_exchange(
            0,
            if off { 1 } else { 2 },
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
    WG.load(Ordering::Relaxed) == 2
}

/// Head size the `flash64_*` kernels are laid out for (smaller heads, `dh % 8 == 0`, run as
/// heads of this size with zero dims past `dh`; the warpgroup form takes this size only).
const D: usize = 64;
/// Fewer queries than this go to the row kernel (decoder steps).
const MIN_TQ: usize = 16;

/// Where q, k and v live: device addresses (already offset to the first row of head 0) and
/// row strides in elements; k and v are f16.
struct Flash64 {
    q: u64,
    q16: bool,
    ldq: usize,
    k: u64,
    v: u64,
    ldkv: usize,
    /// Head size: [`D`], or fewer dims (a multiple of 8) on the `flash64_*` kernels only.
    dh: usize,
    batch: usize,
    tq: usize,
    tk: usize,
    heads: usize,
    kv_len: usize,
    /// 0, or `(batch, tq, heads · 64)` bytes the whole warpgroup form also writes the f16
    /// output to as e4m3 (the FP8 output projection's input, fp8.rs).
    o8: u64,
    /// With `o8` written: leave the f16 output unwritten (the projection reads `o8` only).
    o8_only: bool,
    /// 0, or the `(3 · heads · 64)` f32 q|k|v bias the whole warpgroup form adds (only that
    /// form is given one: [`CudaBackend::awg64_whole`]).
    bias: u64,
}

impl CudaBackend {
    /// The head-size-64 kernel names, for [`CudaBackend::force_flash64_kernel`].
    #[doc(hidden)]
    pub fn flash64_kernels() -> Vec<&'static str> {
        KERNELS.iter().map(|k| k.0).collect()
    }

    /// Force one head-size-64 attention kernel for every later call in this process (benchmarks
    /// and tests): `None` picks by shape (the default), `Some("legacy")` runs the older
    /// `flash_attn_d64` kernels, else a name from [`CudaBackend::flash64_kernels`].
    #[doc(hidden)]
    pub fn force_flash64_kernel(&self, name: Option<&str>) -> Result<()> {
        forced(); // the environment's choice first, so that it cannot override this one later
        let v = kernel_code(name).ok_or_else(|| {
            Error::shape(
                "force_flash64_kernel",
                format!(
                    "no kernel {name:?}; known: legacy, {:?}",
                    Self::flash64_kernels()
                ),
            )
        })?;
        FORCED.store(v, Ordering::Relaxed);
        Ok(())
    }

    /// Force the split-keys form for every later call in this process (benchmarks and tests):
    /// `None` picks by shape (the default), `Some(1)` never splits, `Some(n)` splits the keys n
    /// ways (n ≤ 8) wherever the default head-size-64 kernel runs.
    #[doc(hidden)]
    pub fn force_attn_split(&self, n: Option<usize>) -> Result<()> {
        split_forced(); // the environment's choice first, so that it cannot override this one later
        let v = match n {
            None => SPLIT_AUTO,
            Some(n @ 1..=MAX_SPLIT) => n as u8,
            Some(n) => {
                return Err(Error::shape(
                    "force_attn_split",
                    format!("{n} splits; 1..={MAX_SPLIT} allowed"),
                ))
            }
        };
        SPLIT.store(v, Ordering::Relaxed);
        Ok(())
    }

    /// Turn the warpgroup-MMA attention kernels on or off for every backend of this process
    /// (same-binary A/B runs and tests; the default comes from `STAPES_CUDA_ATTN_WG`).
    #[doc(hidden)]
    pub fn set_attn_wg(&self, on: bool) {
        WG.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    }

    /// Launches of the warpgroup-MMA attention kernels in this process.
    #[doc(hidden)]
    pub fn attn_wg_launches() -> u64 {
        WG_LAUNCHES.load(Ordering::Relaxed)
    }

    /// Launches of the `flash64_*` kernels for heads smaller than 64 in this process.
    #[doc(hidden)]
    pub fn attn_small_head_launches() -> u64 {
        SMALL_HEAD_LAUNCHES.load(Ordering::Relaxed)
    }

    /// Launches of the warpgroup attention that added the q|k|v bias themselves.
    #[doc(hidden)]
    pub fn attn_wg_bias_launches() -> u64 {
        WG_BIAS_LAUNCHES.load(Ordering::Relaxed)
    }

    /// Whether an attention of these parameters runs on `awg64_*`: sm_90 (the file is built for
    /// compute_90a there), switched on, no kernel forced, not causal (the kernel has no
    /// diagonal; decoder prompts keep flash64).
    fn wg_applies(&self, p: &AttnParams) -> bool {
        self.arch == "compute_90" && !p.causal && forced() == 0 && wg_switch()
    }

    /// How many ways to split the keys (1: the unsplit kernel). Only the default kernel has a
    /// split form. Auto: split when one window's (h, 128-row query tile) blocks do not fill the
    /// SMs once (tiny: 72, base: 96 on 132 SMs; turbo's 240 stay whole), into as many splits as
    /// keep every block in the first wave (two resident a SM: tiny 3, base 2; one more split
    /// starts a second wave, which measured slower than none on the H200), each split keeping
    /// at least 4 key tiles of 64.
    ///
    /// `min_auto`: fewer automatic splits than this run unsplit (the warpgroup kernel's combine
    /// pass costs more than a 2-way split wins: base 24.9 vs 22.5 µs on the H200, stop 15).
    fn flash64_splits(&self, f: &Flash64, rows: usize, min_auto: usize) -> usize {
        self.flash64_splits_of(f.heads, f.tq, f.kv_len, rows, min_auto)
    }

    /// [`CudaBackend::flash64_splits`] from the shape alone: `heads` of `tq` queries over
    /// `kv_len` keys.
    fn flash64_splits_of(
        &self,
        heads: usize,
        tq: usize,
        kv_len: usize,
        rows: usize,
        min_auto: usize,
    ) -> usize {
        if forced() != 0 {
            return 1;
        }
        let tiles = kv_len.div_ceil(64);
        let want = match split_forced() {
            SPLIT_AUTO => {
                // per window, not per batch: the split changes the summation order, and a
                // window batched must give the bits it gives alone; and only where the
                // queries are the keys (an encoder window, whose length the model fixes), so a
                // decoder's cross-attention cannot split differently for a prompt padded in a
                // batch
                if tq != kv_len {
                    return 1;
                }
                let blocks = heads * tq.div_ceil(rows);
                let sms = self.sm_count();
                if blocks == 0 || blocks >= sms {
                    return 1;
                }
                // two split blocks resident a SM (the split kernels' launch bounds)
                let n = (2 * sms / blocks).min(4).min(tiles / 4);
                if n < min_auto {
                    return 1;
                }
                n
            }
            n => n as usize,
        };
        if want < 2 || tiles == 0 {
            return 1;
        }
        if split_forced() != SPLIT_AUTO {
            // as asked, even where some splits get no keys (tests cover that path)
            return want;
        }
        // auto: no split left without keys
        tiles.div_ceil(tiles.div_ceil(want))
    }

    /// Whether `attention` of this shape runs a `flash64_*` kernel: heads of 64, or of fewer
    /// dims in whole 16-byte chunks (GigaAM's 48; the scalar row kernel reads every key once a
    /// query).
    fn flash64_applies(d: usize, tq: usize) -> bool {
        d.is_multiple_of(8) && (8..=D).contains(&d) && tq >= MIN_TQ && forced() != LEGACY
    }

    /// `attention` for head size 64 and at least 16 queries (`None`: not this path's shape; the
    /// caller runs its general kernels). Shapes and `kv_len` are already validated.
    pub(super) fn attention64(
        &self,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        p: &AttnParams,
    ) -> Result<Option<CudaTensor>> {
        let (b, tq, hd) = (q.shape[0], q.shape[1], q.shape[2]);
        if !Self::flash64_applies(hd / p.n_heads, tq) {
            return Ok(None);
        }
        let out = self.alloc(&q.shape, self.out_dt())?;
        // K/V in f16 (as they come in f16 chains, else cast once) for the 16-byte cp.async tiles
        let k16 = self.as_dtype(k, Dtype::F16)?;
        let v16 = self.as_dtype(v, Dtype::F16)?;
        let f = Flash64 {
            q: self.t(q),
            q16: q.dtype == Dtype::F16,
            ldq: hd,
            k: self.t(&k16),
            v: self.t(&v16),
            ldkv: hd,
            dh: hd / p.n_heads,
            batch: b,
            tq,
            tk: k.shape[1],
            heads: p.n_heads,
            kv_len: p.kv_len.unwrap_or(k.shape[1]),
            o8: 0,
            o8_only: false,
            bias: 0,
        };
        self.launch_flash64(&out, &f, p)?;
        Ok(Some(out))
    }

    /// [`Backend::attention_packed`]: `qkv (B, T, 3·H·Dh)` → `(B, T, H·Dh)`. Head size 64 with
    /// ≥ 16 rows reads q, k and v in place (k and v from one f16 copy of `qkv` when it is f32);
    /// other shapes slice q, k, v and run `attention`.
    ///
    /// `o8` (0 = none, else `B·T·H·Dh` bytes): where the whole warpgroup form runs on an f16
    /// output it also writes the result there as e4m3; the flag says whether it did.
    /// `o8_only`: where it did, the f16 result is not written (its values are undefined).
    /// `bias` (`3·H·Dh`): the attention of `qkv + bias`; the whole warpgroup form adds it
    /// itself, other forms get `qkv + bias` from an `add` first.
    pub(super) fn attention_packed_impl(
        &self,
        qkv: &CudaTensor,
        p: &AttnParams,
        o8: u64,
        o8_only: bool,
        bias: Option<&CudaTensor>,
    ) -> Result<(CudaTensor, bool)> {
        const OP: &str = "attention_packed";
        let s = &qkv.shape;
        if s.len() != 3
            || !s[2].is_multiple_of(3)
            || p.n_heads == 0
            || !(s[2] / 3).is_multiple_of(p.n_heads)
        {
            return Err(Error::shape(
                OP,
                format!("{s:?} with {} heads is not (B, T, 3·H·Dh)", p.n_heads),
            ));
        }
        let (b, t, c) = (s[0], s[1], s[2] / 3);
        if let Some(bias) = bias {
            if bias.numel() != 3 * c {
                return Err(Error::shape(
                    OP,
                    format!("bias {:?} for q|k|v of {}", bias.shape, 3 * c),
                ));
            }
        }
        let kv_len = p.kv_len.unwrap_or(t);
        if kv_len > t || (p.causal && kv_len < t) {
            return Err(Error::shape(
                OP,
                format!("kv_len {kv_len} with T {t}, causal {}", p.causal),
            ));
        }
        let biased = |be: &Self, bias: &CudaTensor| -> Result<(CudaTensor, bool)> {
            be.attention_packed_impl(&be.add(qkv, bias)?, p, o8, o8_only, None)
        };
        if !Self::flash64_applies(c / p.n_heads, t) || c == 0 {
            if let Some(bias) = bias {
                return biased(self, bias);
            }
            let q = self.slice(qkv, 2, 0, c)?;
            let k = self.slice(qkv, 2, c, c)?;
            let v = self.slice(qkv, 2, 2 * c, c)?;
            return Ok((self.attention(&q, &k, &v, p)?, false));
        }
        let out = self.alloc(&[b, t, c], self.out_dt())?;
        // q is read as stored (f32 stays f32, as in `attention`); k and v need f16
        let kv16 = self.as_dtype(qkv, Dtype::F16)?;
        let kv = self.t(&kv16);
        let f = Flash64 {
            q: self.t(qkv),
            q16: qkv.dtype == Dtype::F16,
            ldq: 3 * c,
            k: kv + (c * 2) as u64,
            v: kv + (2 * c * 2) as u64,
            ldkv: 3 * c,
            dh: c / p.n_heads,
            batch: b,
            tq: t,
            tk: t,
            heads: p.n_heads,
            kv_len,
            o8,
            o8_only,
            bias: 0,
        };
        let b32 = match bias {
            Some(bias) if self.awg64_whole(&f, p) => Some(self.as_dtype(bias, Dtype::F32)?),
            Some(bias) => return biased(self, bias),
            None => None,
        };
        let f = Flash64 {
            bias: b32.as_ref().map_or(0, |b| self.t(b)),
            ..f
        };
        let wrote = self.launch_flash64(&out, &f, p)?;
        Ok((out, wrote))
    }

    /// The kernel to run: the forced one, else 4 warps of 2×16 rows, double-buffered.
    fn flash64_pick() -> (&'static str, usize, u32) {
        match forced() {
            i if (1..=KERNELS.len() as u8).contains(&i) => KERNELS[i as usize - 1],
            // fastest at every Whisper shape measured (H200, round 1: turbo 45.0 µs vs 51.7-54.4
            // for the others; batch 16, base and tiny within 1 % of the best)
            _ => KERNELS[2],
        }
    }

    /// Runs the head-size-64 attention into `out`; whether `f.o8` was written too.
    fn launch_flash64(&self, out: &CudaTensor, f: &Flash64, p: &AttnParams) -> Result<bool> {
        if f.batch * f.tq * f.heads == 0 {
            return Ok(false);
        }
        let (name, rows, threads) = Self::flash64_pick();
        let (o, q, k, v) = (self.t(out), f.q, f.k, f.v);
        let (tq, tk, h, kv) = (
            i32_of("Tq", f.tq)?,
            i32_of("Tk", f.tk)?,
            i32_of("heads", f.heads)?,
            i32_of("kv_len", f.kv_len)?,
        );
        let (ldq, ldkv) = (i32_of("row stride", f.ldq)?, i32_of("row stride", f.ldkv)?);
        let (scale, causal) = (p.scale, p.causal as i32);
        let dt = out.bit() | ((f.q16 as i32) << 1);
        let dh = i32_of("head size", f.dh)?;
        if f.dh == D && self.wg_applies(p) && f.kv_len > 0 {
            if let Some(wrote) = self.launch_awg64(out, f, p)? {
                return Ok(wrote);
            }
        }
        if f.dh < D {
            SMALL_HEAD_LAUNCHES.fetch_add(1, Ordering::Relaxed);
        }
        let ns = self.flash64_splits(f, rows, 2);
        if ns > 1 {
            let sp = self.splits(f, ns)?;
            let (po, pml, nsi, tpsi) = (sp.po, sp.pml, sp.n, sp.tiles);
            self.launch(
                "flash64s_w4m2s2",
                (f.tq.div_ceil(128) as u32, f.heads as u32, sp.z),
                (128, 1, 1),
                0,
                args![po, pml, q, k, v, tq, tk, h, kv, ldq, ldkv, scale, causal, dt, nsi, tpsi, dh],
            )?;
            self.combine_splits(out, f, &sp)?;
            return Ok(false);
        }
        // an unsplit grid of 128-row blocks that leaves SMs idle takes 64-row blocks: more of
        // them, and one 16-row tile a warp instead of two, so half a warp's chain (the variants
        // give the same bits)
        let (name, rows, threads) =
            if forced() == 0 && f.batch * f.heads * f.tq.div_ceil(rows) < self.sm_count() {
                SMALL_GRID
            } else {
                (name, rows, threads)
            };
        let grid = (f.tq.div_ceil(rows) as u32, f.heads as u32, f.batch as u32);
        self.launch(
            name,
            grid,
            (threads, 1, 1),
            0,
            args![o, q, k, v, tq, tk, h, kv, ldq, ldkv, scale, causal, dt, dh],
        )?;
        Ok(false)
    }

    /// The TMA descriptions of `f`'s K and V for the warpgroup form (`None`: the driver refused
    /// them, and flash64 runs instead).
    fn awg64_maps(
        f: &Flash64,
    ) -> Option<(
        cudarc::driver::sys::CUtensorMap,
        cudarc::driver::sys::CUtensorMap,
    )> {
        use cudarc::driver::sys::CUtensorMapDataType as T;
        let row_bytes = (f.ldkv * 2) as u64;
        let dims = [D as u64, f.heads as u64, f.kv_len as u64, f.batch as u64];
        let strides = [(D * 2) as u64, row_bytes, f.tk as u64 * row_bytes];
        let boxes = [D as u32, 1, 64, 1];
        let map = |ptr| {
            super::tma::tiled_map(
                T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                ptr,
                &dims,
                &strides,
                &boxes,
            )
        };
        match (map(f.k), map(f.v)) {
            (Ok(k), Ok(v)) => Some((k, v)),
            (Err(e), _) | (_, Err(e)) => {
                tracing::debug!("awg64 not taken: {e}");
                None
            }
        }
    }

    /// Whether `f` runs on the whole (unsplit) warpgroup form, the one that can add a q|k|v
    /// bias itself ([`CudaBackend::launch_awg64`]'s choice, made ahead).
    fn awg64_whole(&self, f: &Flash64, p: &AttnParams) -> bool {
        f.dh == D
            && self.awg64_whole_shape(p, f.heads, f.tq, f.kv_len)
            && Self::awg64_maps(f).is_some()
    }

    /// [`CudaBackend::awg64_whole`] as far as the shape tells: `heads` of `tq` queries over
    /// `kv_len` keys on the warpgroup form, unsplit (`launch_awg64` splits as
    /// `flash64_splits(f, 128, 3)` says).
    fn awg64_whole_shape(&self, p: &AttnParams, heads: usize, tq: usize, kv_len: usize) -> bool {
        self.wg_applies(p) && kv_len > 0 && self.flash64_splits_of(heads, tq, kv_len, 128, 3) <= 1
    }

    /// Whether `attention_packed` of a `(batch, t, 3·c)` q|k|v runs the whole warpgroup form,
    /// the one that adds a q|k|v bias itself, as far as the shapes tell (its TMA descriptions
    /// are made at the launch; were they refused, the bias would be added by a pass first). The
    /// split is chosen per window, so the batch does not enter.
    pub(super) fn attention_adds_qkv_bias(&self, t: usize, c: usize, p: &AttnParams) -> bool {
        let kv_len = p.kv_len.unwrap_or(t);
        p.n_heads > 0
            && c > 0
            && c.is_multiple_of(p.n_heads)
            && c / p.n_heads == D
            && Self::flash64_applies(c / p.n_heads, t)
            && kv_len <= t
            && self.awg64_whole_shape(p, p.n_heads, t, kv_len)
    }

    /// The warpgroup-MMA form of [`CudaBackend::launch_flash64`] (sm_90, not causal): K and V
    /// described to TMA as `(64, heads, kv_len, batch)` f16, innermost first, so a tile never
    /// reads past its window's `kv_len` (zero-filled, then masked). `Ok(false)`: the driver
    /// refused the TMA description (flash64 runs instead, same bits). `Ok(None)`: not taken
    /// (flash64 runs instead, same bits); else whether `f.o8` was written (the whole form on
    /// an f16 output).
    fn launch_awg64(&self, out: &CudaTensor, f: &Flash64, p: &AttnParams) -> Result<Option<bool>> {
        let Some((tk, tv)) = Self::awg64_maps(f) else {
            return Ok(None);
        };
        let (o, q) = (self.t(out), f.q);
        let (tq, h, kv, ldq) = (
            i32_of("Tq", f.tq)?,
            i32_of("heads", f.heads)?,
            i32_of("kv_len", f.kv_len)?,
            i32_of("row stride", f.ldq)?,
        );
        let dt = out.bit() | ((f.q16 as i32) << 1);
        let scale = p.scale;
        let blocks = f.tq.div_ceil(128) as u32;
        let ns = self.flash64_splits(f, 128, 3);
        // the ring, 1 KiB to align it for the swizzle, its 2 mbarriers a stage
        let smem = |stages: usize| stages * 16384 + 1024 + 16 * stages;
        if ns > 1 {
            if f.bias != 0 {
                return Err(Error::Device(
                    "attention: a q|k|v bias reached the split warpgroup form".into(),
                ));
            }
            let sp = self.splits(f, ns)?;
            let (po, pml, nsi, tpsi) = (sp.po, sp.pml, sp.n, sp.tiles);
            let (name, stages) = WG_SPLIT;
            let bytes = smem(stages);
            self.allow_dyn_smem(name, bytes)?;
            self.launch(
                name,
                (blocks, f.heads as u32, sp.z),
                (256, 1, 1),
                bytes as u32,
                args![tk, tv, po, pml, q, tq, h, kv, ldq, scale, dt, nsi, tpsi],
            )?;
            WG_LAUNCHES.fetch_add(1, Ordering::Relaxed);
            self.combine_splits(out, f, &sp)?;
            return Ok(Some(false));
        }
        let (name, stages) = WG_UNSPLIT;
        let bytes = smem(stages);
        self.allow_dyn_smem(name, bytes)?;
        let o8 = if out.dtype == Dtype::F16 { f.o8 } else { 0 };
        let dt = if o8 != 0 && f.o8_only { dt | 4 } else { dt };
        let bias = f.bias;
        self.launch(
            name,
            (blocks, f.heads as u32, f.batch as u32),
            (256, 1, 1),
            bytes as u32,
            args![tk, tv, o, q, tq, h, kv, ldq, scale, dt, o8, bias],
        )?;
        WG_LAUNCHES.fetch_add(1, Ordering::Relaxed);
        if bias != 0 {
            WG_BIAS_LAUNCHES.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(o8 != 0))
    }

    /// Scratch and launch parameters for splitting `f`'s keys `ns` ways.
    fn splits(&self, f: &Flash64, ns: usize) -> Result<Splits> {
        let prow = f.batch * ns * f.heads * f.tq;
        let po = self.alloc(&[prow, D], Dtype::F32)?;
        let pml = self.alloc(&[prow, 2], Dtype::F32)?;
        let z = u32::try_from(f.batch * ns)
            .map_err(|_| Error::shape("attention", "batch × splits over u32"))?;
        Ok(Splits {
            po: self.t(&po),
            pml: self.t(&pml),
            _po: po,
            _pml: pml,
            n: i32_of("splits", ns)?,
            tiles: i32_of("tiles per split", f.kv_len.div_ceil(64).div_ceil(ns))?,
            z,
        })
    }

    /// `flash64_combine`: the split kernels' partials of `sp` merged into `out`.
    fn combine_splits(&self, out: &CudaTensor, f: &Flash64, sp: &Splits) -> Result<()> {
        let (bi, tq, h) = (
            i32_of("batch", f.batch)?,
            i32_of("Tq", f.tq)?,
            i32_of("heads", f.heads)?,
        );
        let grid = u32::try_from((f.batch * f.heads * f.tq).div_ceil(8))
            .map_err(|_| Error::shape("attention", "rows over the grid limit"))?;
        let (o, po, pml, nsi, odt) = (self.t(out), sp.po, sp.pml, sp.n, out.bit());
        let dh = i32_of("head size", f.dh)?;
        self.launch(
            "flash64_combine",
            (grid, 1, 1),
            (256, 1, 1),
            0,
            args![o, po, pml, bi, tq, h, nsi, odt, dh],
        )
    }
}
