//! Shape validation shared by every home: the checks belong to the op contract, not to a home.

use crate::{AttnParams, DeviceTensor, Error, Result};

/// `bias` must be `(n)` (any shape holding exactly `n` values is accepted as a vector).
pub fn check_vec<T: DeviceTensor>(
    op: &'static str,
    what: &str,
    t: Option<&T>,
    n: usize,
) -> Result<()> {
    if let Some(t) = t {
        if t.numel() != n {
            return Err(Error::shape(
                op,
                format!("{what} has shape {:?}, expected ({n})", t.shape()),
            ));
        }
    }
    Ok(())
}

pub fn rank3<T: DeviceTensor>(
    op: &'static str,
    what: &str,
    t: &T,
) -> Result<(usize, usize, usize)> {
    match t.shape()[..] {
        [a, b, c] => Ok((a, b, c)),
        _ => Err(Error::shape(
            op,
            format!("{what} must be rank 3, got {:?}", t.shape()),
        )),
    }
}

/// Split a shape around `dim` into (outer, dim size, inner) element counts.
pub fn around(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    let outer = shape[..dim].iter().product();
    let inner = shape[dim + 1..].iter().product();
    (outer, shape[dim], inner)
}

/// Validated attention geometry.
pub struct AttnDims {
    pub b: usize,
    pub tq: usize,
    pub tk: usize,
    pub h: usize,
    pub dh: usize,
    pub dv: usize,
    pub kv_len: usize,
}

/// The shape contract of `attention` / `attention_probs` (backend.rs).
pub fn attn_dims<T: DeviceTensor>(
    op: &'static str,
    q: &T,
    k: &T,
    v: Option<&T>,
    p: &AttnParams,
) -> Result<AttnDims> {
    let (b, tq, cq) = rank3(op, "q", q)?;
    let (bk, tk, ck) = rank3(op, "k", k)?;
    let h = p.n_heads;
    if h == 0 || cq % h != 0 {
        return Err(Error::shape(
            op,
            format!("q's last dim {cq} does not split into {h} heads"),
        ));
    }
    if bk != b || ck != cq {
        return Err(Error::shape(
            op,
            format!("k {:?} does not match q {:?}", k.shape(), q.shape()),
        ));
    }
    let mut dv = cq / h;
    if let Some(v) = v {
        let (bv, tv, cv) = rank3(op, "v", v)?;
        if bv != b || tv != tk || cv % h != 0 {
            return Err(Error::shape(
                op,
                format!("v {:?} does not match k {:?}", v.shape(), k.shape()),
            ));
        }
        dv = cv / h;
    }
    let kv_len = p.kv_len.unwrap_or(tk);
    if kv_len == 0 || kv_len > tk {
        return Err(Error::shape(
            op,
            format!("kv_len {kv_len} outside 1..={tk}"),
        ));
    }
    if p.causal && kv_len < tq {
        return Err(Error::shape(
            op,
            format!("causal attention needs kv_len {kv_len} ≥ Tq {tq}"),
        ));
    }
    Ok(AttnDims {
        b,
        tq,
        tk,
        h,
        dh: cq / h,
        dv,
        kv_len,
    })
}
