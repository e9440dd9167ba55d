//! Branch-free f32 transcendental functions. Written so that a loop over them vectorises
//! (libm's `expf` is an opaque call that keeps the GELU/softmax loops scalar).

use stapes_core::Activation;

const LOG2E: f32 = std::f32::consts::LOG2_E;
// ln 2 split in a part exact in f32 and the remainder (Cody–Waite), so `x − n·ln2` keeps its bits.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
// Adding 1.5·2²³ rounds to the nearest integer without SSE4.1's `roundps`.
const ROUND: f32 = 12_582_912.0;

/// e^x to ~2 ulp on [−87, 88]; saturates outside (0 below, e^88 above).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    // Cephes expf polynomial for e^r on |r| ≤ ln2/2.
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let er = p * r * r + r + 1.0;
    // t = 1.5·2²³ + n exactly, so its low mantissa bits hold the integer n: 2ⁿ's exponent field
    // comes from integer adds and a shift, which vectorise. (`n as i32` is a saturating scalar
    // conversion per element and kept the whole softmax loop scalar.)
    let scale = f32::from_bits(t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23);
    er * scale
}

/// erfc(z) for z ≥ 0 (Abramowitz & Stegun 7.1.26, absolute error ≤ 1.5e-7), no cancellation
/// for large z, which keeps GELU of negative inputs accurate.
#[inline(always)]
fn erfc_pos(z: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_8 + t * (-1.453_152 + t * 1.061_405_4))));
    poly * exp(-z * z)
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    // 1 − 2/(e^{2x}+1): absolute error a few ulp of 1, saturating cleanly to ±1.
    1.0 - 2.0 / (exp(2.0 * x) + 1.0)
}

#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    let e = erfc_pos(x.abs() * std::f32::consts::FRAC_1_SQRT_2);
    // x·Φ(x), Φ(x) = erfc(−x/√2)/2: for x < 0 that is erfc(|x|/√2)/2, else 1 − erfc(x/√2)/2.
    let phi = if x < 0.0 { 0.5 * e } else { 1.0 - 0.5 * e };
    x * phi
}

#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // √(2/π)
    0.5 * x * (1.0 + tanh(C * (x + 0.044_715 * x * x * x)))
}

#[inline(always)]
pub fn apply(act: Activation, x: f32) -> f32 {
    match act {
        Activation::Gelu => gelu(x),
        Activation::GeluTanh => gelu_tanh(x),
        Activation::Silu => x * sigmoid(x),
        Activation::Relu => x.max(0.0),
        Activation::Sigmoid => sigmoid(x),
        Activation::Tanh => tanh(x),
    }
}

/// Sum with 8 independent accumulators: vectorises, and the shorter chains also halve the
/// rounding error of a long sequential sum.
#[inline(always)]
pub fn sum8(xs: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut chunks = xs.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    let tail: f32 = chunks.remainder().iter().sum();
    acc.iter().sum::<f32>() + tail
}

/// Maximum with 8 independent lanes: a single `f32::max` chain does not vectorise and, one
/// dependent `maxss` per element, cost as much as the exps of a 1500-wide attention row.
/// NaNs are skipped, as `f32::max` skips them.
#[inline(always)]
pub fn max8(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let mut chunks = xs.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    acc.iter().fold(tail, |m, &v| m.max(v))
}

/// In-place softmax of one row.
#[inline(always)]
pub fn softmax_row(row: &mut [f32]) {
    let max = max8(row);
    for v in row.iter_mut() {
        *v = exp(*v - max);
    }
    let inv = 1.0 / sum8(row);
    for v in row.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max8_is_the_sequential_max() {
        for n in [0usize, 1, 7, 8, 9, 31, 1500] {
            let mut v: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1013) as f32 - 500.0).collect();
            if n > 3 {
                v[2] = f32::NAN;
            }
            let want = v.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            assert_eq!(max8(&v).to_bits(), want.to_bits(), "n = {n}");
        }
    }

    #[test]
    fn exp_builds_two_to_the_n_exactly_as_the_integer_conversion_does() {
        // The scale from the rounding constant's bits must equal 2^(n as i32) everywhere the
        // clamp lets n go (−126 ..= 127), so exp's results are unchanged bit for bit.
        for i in -9_000_000..9_000_000 {
            let x = (i as f32 * 1e-5).clamp(-87.0, 88.0);
            let t = x * LOG2E + ROUND;
            let n = t - ROUND;
            let want = f32::from_bits(((n as i32 + 127) << 23) as u32);
            let got =
                f32::from_bits(t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23);
            assert_eq!(got.to_bits(), want.to_bits(), "x = {x}");
        }
    }

    #[test]
    fn exp_matches_std_within_a_few_ulp() {
        let mut worst = 0f32;
        for i in -8700..8800 {
            let x = i as f32 / 100.0 + 0.003;
            let (a, b) = (exp(x), x.exp());
            worst = worst.max(((a - b) / b).abs());
        }
        assert!(worst < 4e-7, "worst relative error {worst}");
        assert_eq!(exp(-200.0), (-87f32).exp());
    }

    #[test]
    fn gelu_and_tanh_are_accurate() {
        // Φ(1) = 0.841344746…, Φ(−3) = 0.001349898…
        assert!((gelu(1.0) - 0.841_344_7).abs() < 3e-7);
        assert!((gelu(-3.0) + 3.0 * 0.001_349_898).abs() < 5e-7);
        for i in -400..400 {
            let x = i as f32 / 100.0;
            assert!((tanh(x) - x.tanh()).abs() < 3e-7, "tanh({x})");
            assert!(
                (sigmoid(x) - 1.0 / (1.0 + (-x).exp())).abs() < 2e-7,
                "sigmoid({x})"
            );
        }
    }
}
