//! Shape validation shared by every home: the checks belong to the op contract, not to a home.

use crate::{AttnParams, Conv1dParams, Conv2dParams, DeviceTensor, Error, Result};

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

/// The shape contract of `matmul(a, b, trans_b)`: `a (.., M, K)`, `b (.., K, N)` (or
/// `(.., N, K)` when `trans_b`) with the same leading dims; returns (batch, M, K, N).
pub fn matmul_dims(
    sa: &[usize],
    sb: &[usize],
    trans_b: bool,
) -> Result<(usize, usize, usize, usize)> {
    let r = sa.len();
    if r < 2 || sb.len() != r || sa[..r - 2] != sb[..r - 2] {
        return Err(Error::shape("matmul", format!("{sa:?} vs {sb:?}")));
    }
    let (m, k) = (sa[r - 2], sa[r - 1]);
    let (kb, n) = if trans_b {
        (sb[r - 1], sb[r - 2])
    } else {
        (sb[r - 2], sb[r - 1])
    };
    if kb != k {
        return Err(Error::shape(
            "matmul",
            format!("inner dims {k} vs {kb} ({sa:?} · {sb:?}, trans_b={trans_b})"),
        ));
    }
    Ok((sa[..r - 2].iter().product(), m, k, n))
}

/// The shape contract of `conv1d`: `x (B, T, Cin)`, the weight `(Cout, Cin·kernel)` given as
/// (`w_n`, `w_k`), a bias of `Cout` values; returns (B, T, Cin, T_out).
pub fn conv1d_dims<T: DeviceTensor>(
    x: &T,
    w_n: usize,
    w_k: usize,
    bias: Option<&T>,
    p: Conv1dParams,
) -> Result<(usize, usize, usize, usize)> {
    let (b, t, cin) = rank3("conv1d", "x", x)?;
    let kk = p.kernel;
    if kk == 0 || p.stride == 0 || cin * kk != w_k || t + 2 * p.padding < kk {
        return Err(Error::shape(
            "conv1d",
            format!("x {:?}, weight ({w_n}, {w_k}), {p:?}", x.shape()),
        ));
    }
    check_vec("conv1d", "bias", bias, w_n)?;
    Ok((b, t, cin, (t + 2 * p.padding - kk) / p.stride + 1))
}

/// The contract of `slice(t, dim, start, len)`: `[start, start + len)` lies inside `dim`.
pub fn check_slice(shape: &[usize], dim: usize, start: usize, len: usize) -> Result<()> {
    if dim >= shape.len() || start.checked_add(len).is_none_or(|e| e > shape[dim]) {
        return Err(Error::shape(
            "slice",
            format!("[{start}, {start}+{len}) of dim {dim} of {shape:?}"),
        ));
    }
    Ok(())
}

/// The contract of `concat(ts, dim)`: at least one tensor, all of one rank and alike but
/// along `dim`; returns the output's shape.
pub fn concat_shape(shapes: &[&[usize]], dim: usize) -> Result<Vec<usize>> {
    let s0 = shapes
        .first()
        .ok_or_else(|| Error::shape("concat", "no tensors"))?;
    if dim >= s0.len() {
        return Err(Error::shape(
            "concat",
            format!("dim {dim} out of range for {s0:?}"),
        ));
    }
    let mut total = 0usize;
    for s in shapes {
        if s.len() != s0.len()
            || s.iter()
                .zip(s0.iter())
                .enumerate()
                .any(|(i, (a, b))| i != dim && a != b)
        {
            return Err(Error::shape(
                "concat",
                format!("{s:?} vs {s0:?} along dim {dim}"),
            ));
        }
        total = total
            .checked_add(s[dim])
            .ok_or_else(|| Error::shape("concat", "total length overflows"))?;
    }
    let mut out = s0.to_vec();
    out[dim] = total;
    Ok(out)
}

/// The contract of `write_rows(dst, src, offset)`: `dst (B, T, C)`, `src (B, n, C)` with
/// `offset + n <= T`; returns (B, T, C, n).
pub fn write_rows_dims<T: DeviceTensor>(
    dst: &T,
    src: &T,
    offset: usize,
) -> Result<(usize, usize, usize, usize)> {
    let (b, t, c) = rank3("write_rows", "dst", dst)?;
    let (bs, n, cs) = rank3("write_rows", "src", src)?;
    if bs != b || cs != c || offset.checked_add(n).is_none_or(|e| e > t) {
        return Err(Error::shape(
            "write_rows",
            format!(
                "src {:?} at row {offset} does not fit dst {:?}",
                src.shape(),
                dst.shape()
            ),
        ));
    }
    Ok((b, t, c, n))
}

/// The contract of `depthwise_conv1d`: `x (B, T, C)`, taps `w (C, K)`, a bias of `C` values;
/// returns (B, T, C, K, T_out).
pub fn depthwise_dims<T: DeviceTensor>(
    x: &T,
    w: &T,
    bias: Option<&T>,
    stride: usize,
    padding: usize,
) -> Result<(usize, usize, usize, usize, usize)> {
    const OP: &str = "depthwise_conv1d";
    let (b, t, c) = rank3(OP, "x", x)?;
    let [wc, kk] = w.shape()[..] else {
        return Err(Error::shape(
            OP,
            format!("w must be (C, K), got {:?}", w.shape()),
        ));
    };
    if wc != c || kk == 0 || stride == 0 || t + 2 * padding < kk {
        return Err(Error::shape(
            OP,
            format!(
                "x {:?}, w {:?}, stride {stride}, padding {padding}",
                x.shape(),
                w.shape()
            ),
        ));
    }
    check_vec(OP, "bias", bias, c)?;
    Ok((b, t, c, kk, (t + 2 * padding - kk) / stride + 1))
}

/// Validated `conv2d` geometry: `x (B, C_in, H, W)`, `w (C_out, C_in/g, kh, kw)`, output
/// `(B, C_out, H_out, W_out)`.
pub struct Conv2dDims {
    pub b: usize,
    pub cin: usize,
    pub h: usize,
    pub w: usize,
    pub cout: usize,
    pub cin_g: usize,
    pub kh: usize,
    pub kw: usize,
    pub ho: usize,
    pub wo: usize,
}

/// The contract of `conv2d`: groups and every kernel and stride size above zero, channels that
/// split into the groups, a kernel that fits the padded input, a bias of `C_out` values.
pub fn conv2d_dims<T: DeviceTensor>(
    x: &T,
    w: &T,
    bias: Option<&T>,
    p: Conv2dParams,
) -> Result<Conv2dDims> {
    let [b, cin, hh, ww] = x.shape()[..] else {
        return Err(Error::shape(
            "conv2d",
            format!("x must be (B, C, H, W), got {:?}", x.shape()),
        ));
    };
    let [cout, cin_g, kh, kw] = w.shape()[..] else {
        return Err(Error::shape(
            "conv2d",
            format!("w must be (C_out, C_in/g, kh, kw), got {:?}", w.shape()),
        ));
    };
    let g = p.groups;
    let ok = g > 0
        && cin % g == 0
        && cout % g == 0
        && cin_g == cin / g
        && (kh, kw) == p.kernel
        && kh > 0
        && kw > 0
        && p.stride.0 > 0
        && p.stride.1 > 0
        && hh + 2 * p.padding.0 >= kh
        && ww + 2 * p.padding.1 >= kw;
    if !ok {
        return Err(Error::shape(
            "conv2d",
            format!("x {:?}, w {:?}, {p:?}", x.shape(), w.shape()),
        ));
    }
    check_vec("conv2d", "bias", bias, cout)?;
    Ok(Conv2dDims {
        b,
        cin,
        h: hh,
        w: ww,
        cout,
        cin_g,
        kh,
        kw,
        ho: (hh + 2 * p.padding.0 - kh) / p.stride.0 + 1,
        wo: (ww + 2 * p.padding.1 - kw) / p.stride.1 + 1,
    })
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

/// The shape contract of `rotary_half(x, cos, sin, head_dim)`: `x`'s rows split into heads of
/// an even `head_dim`, `cos` and `sin` of one shape that ends `x`'s (broadcast over the rest).
pub fn rotary_half_dims<T: DeviceTensor>(x: &T, cos: &T, sin: &T, head_dim: usize) -> Result<()> {
    let (xs, cs) = (x.shape(), cos.shape());
    let c = xs.last().copied().unwrap_or(0);
    if head_dim < 2 || !head_dim.is_multiple_of(2) || !c.is_multiple_of(head_dim) {
        return Err(Error::shape(
            "rotary_half",
            format!("{xs:?} does not split into heads of an even {head_dim}"),
        ));
    }
    if cs != sin.shape() || cs.len() > xs.len() || xs[xs.len() - cs.len()..] != cs[..] {
        return Err(Error::shape(
            "rotary_half",
            format!(
                "cos {cs:?} and sin {:?} must be one shape ending x's {xs:?}",
                sin.shape()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::RefTensor;
    use crate::HostTensor;

    #[test]
    fn matmul_geometry_and_refusals() {
        assert_eq!(
            matmul_dims(&[2, 3, 4], &[2, 4, 5], false).unwrap(),
            (2, 3, 4, 5)
        );
        assert_eq!(
            matmul_dims(&[2, 3, 4], &[2, 5, 4], true).unwrap(),
            (2, 3, 4, 5)
        );
        assert_eq!(matmul_dims(&[3, 4], &[4, 5], false).unwrap(), (1, 3, 4, 5));
        for (a, b, t) in [
            (&[2, 3, 4][..], &[2, 5, 4][..], false), // inner dims 4 vs 5
            (&[2, 3, 4], &[3, 4, 5], false),         // batches differ
            (&[2, 3, 4], &[4, 5], false),            // ranks differ
            (&[4], &[4], false),                     // rank 1
        ] {
            assert!(matmul_dims(a, b, t).is_err(), "{a:?} · {b:?}");
        }
    }

    #[test]
    fn slice_concat_write_rows_contracts() {
        assert!(check_slice(&[2, 5, 3], 1, 2, 3).is_ok());
        assert!(check_slice(&[2, 5, 3], 1, 3, 3).is_err());
        assert!(check_slice(&[2, 5, 3], 3, 0, 1).is_err());
        assert!(
            check_slice(&[2, 5, 3], 1, usize::MAX, 2).is_err(),
            "overflow"
        );
        let (a, b) = ([2usize, 3, 4], [2usize, 5, 4]);
        assert_eq!(concat_shape(&[&a, &b], 1).unwrap(), vec![2, 8, 4]);
        assert!(concat_shape(&[&a, &b], 2).is_err());
        assert!(concat_shape(&[&a, &[2, 3][..]], 1).is_err());
        assert!(concat_shape(&[], 0).is_err());
        assert!(concat_shape(&[&a], 3).is_err());
        let t = |s: Vec<usize>| RefTensor {
            host: HostTensor::zeros(s),
        };
        let dst = t(vec![2, 10, 4]);
        assert_eq!(
            write_rows_dims(&dst, &t(vec![2, 3, 4]), 7).unwrap(),
            (2, 10, 4, 3)
        );
        assert!(write_rows_dims(&dst, &t(vec![2, 3, 4]), 8).is_err());
        assert!(write_rows_dims(&dst, &t(vec![1, 3, 4]), 0).is_err());
        assert!(write_rows_dims(&dst, &t(vec![2, 3, 5]), 0).is_err());
        assert!(write_rows_dims(&dst, &t(vec![2, 3, 4]), usize::MAX).is_err());
    }

    #[test]
    fn depthwise_and_conv2d_contracts() {
        let t = |s: Vec<usize>| RefTensor {
            host: HostTensor::zeros(s),
        };
        let (x, w) = (t(vec![2, 10, 4]), t(vec![4, 9]));
        assert_eq!(
            depthwise_dims(&x, &w, None, 1, 4).unwrap(),
            (2, 10, 4, 9, 10)
        );
        assert_eq!(depthwise_dims(&x, &w, None, 2, 4).unwrap().4, 5);
        assert!(depthwise_dims(&x, &t(vec![3, 9]), None, 1, 4).is_err());
        assert!(depthwise_dims(&x, &t(vec![4, 0]), None, 1, 0).is_err());
        assert!(depthwise_dims(&x, &w, None, 0, 4).is_err());
        assert!(depthwise_dims(&x, &t(vec![4, 11]), None, 1, 0).is_err());
        assert!(depthwise_dims(&x, &w, Some(&t(vec![3])), 1, 4).is_err());
        // FastConformer's subsampling: 3×3, stride 2, padding 1, then a depthwise (groups = C)
        let p = |groups, kernel, stride| Conv2dParams {
            kernel,
            stride,
            padding: (1, 1),
            groups,
        };
        let x = t(vec![1, 8, 20, 16]);
        let d = conv2d_dims(&x, &t(vec![8, 1, 3, 3]), None, p(8, (3, 3), (2, 2))).unwrap();
        assert_eq!((d.b, d.cout, d.ho, d.wo, d.cin_g), (1, 8, 10, 8, 1));
        let w = t(vec![16, 8, 3, 3]);
        assert!(conv2d_dims(&x, &w, None, p(1, (3, 3), (2, 2))).is_ok());
        assert!(conv2d_dims(&x, &w, None, p(0, (3, 3), (2, 2))).is_err()); // no groups
        assert!(conv2d_dims(&x, &w, None, p(3, (3, 3), (2, 2))).is_err()); // 8 % 3
        assert!(conv2d_dims(&x, &w, None, p(1, (3, 1), (2, 2))).is_err()); // kernel mismatch
        assert!(conv2d_dims(&x, &w, None, p(1, (3, 3), (0, 2))).is_err()); // no stride
        assert!(conv2d_dims(&x, &w, Some(&t(vec![8])), p(1, (3, 3), (2, 2))).is_err());
        assert!(conv2d_dims(&t(vec![8, 20, 16]), &w, None, p(1, (3, 3), (2, 2))).is_err());
    }

    #[test]
    fn conv1d_geometry_and_refusals() {
        let x = RefTensor {
            host: HostTensor::zeros(vec![2, 10, 3]),
        };
        let p = |kernel, stride, padding| Conv1dParams {
            kernel,
            stride,
            padding,
        };
        // Whisper's second conv: k 3, stride 2, padding 1: T_out = (10 + 2 - 3) / 2 + 1
        assert_eq!(
            conv1d_dims(&x, 8, 9, None, p(3, 2, 1)).unwrap(),
            (2, 10, 3, 5)
        );
        let bias = RefTensor {
            host: HostTensor::zeros(vec![7]),
        };
        assert!(conv1d_dims(&x, 8, 9, Some(&bias), p(3, 2, 1)).is_err());
        assert!(conv1d_dims(&x, 8, 8, None, p(3, 2, 1)).is_err()); // Cin·K != w_k
        assert!(conv1d_dims(&x, 8, 0, None, p(0, 1, 0)).is_err()); // no kernel
        assert!(conv1d_dims(&x, 8, 9, None, p(3, 0, 1)).is_err()); // no stride
        assert!(conv1d_dims(&x, 8, 39, None, p(13, 1, 0)).is_err()); // longer than T
    }
}
