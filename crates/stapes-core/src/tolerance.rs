//! How far a home may stray from the reference, per (op, lane, backend), and why.
//!
//! A result passes when both bars hold:
//! - every element: `|got − want| ≤ max_abs + max_rel · max|want|` (the worst element, measured
//!   against the result's own range, so one bad element is always visible), and
//! - overall: `‖got − want‖ / ‖want‖ ≤ rel_l2`.
//!
//! The bars assume the test convention of `stapes-cpu/tests`: inputs from `HostTensor::random`
//! with |x| < 1 (|x| < 4 for activations), GEMM weights scaled by 1/√K so outputs stay O(1).

use crate::Lane;

/// Op groups that share an error model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Pure data movement (reshape, transpose, slice, concat, write_rows, gathers): exact.
    Layout,
    Linear,
    Matmul,
    Conv1d,
    DepthwiseConv1d,
    Conv2d,
    Attention,
    AttentionProbs,
    LayerNorm,
    RmsNorm,
    Activation,
    Glu,
    Softmax,
    LogSoftmax,
    /// add, mul, affine: one rounding each.
    Elementwise,
    LstmCell,
}

/// The bars for one row; see the module docs for how they combine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub max_abs: f32,
    pub max_rel: f32,
    pub rel_l2: f32,
}

/// One row of the table. `lane: None` = the op has no lane-typed weight (any lane matches).
#[derive(Clone, Copy, Debug)]
pub struct Row {
    pub op: Op,
    pub lane: Option<Lane>,
    pub backend: &'static str,
    pub tol: Tolerance,
    pub reason: &'static str,
}

const fn tol(max_abs: f32, max_rel: f32, rel_l2: f32) -> Tolerance {
    Tolerance {
        max_abs,
        max_rel,
        rel_l2,
    }
}

const EXACT: Tolerance = tol(0.0, 0.0, 0.0);

/// The table. The reference accumulates in f64, so each bar is the home's own error.
pub static TABLE: &[Row] = &[
    // ---- cpu ----
    Row {
        op: Op::Layout,
        lane: None,
        backend: "cpu",
        tol: EXACT,
        reason: "copies values without arithmetic",
    },
    Row {
        op: Op::Linear,
        lane: Some(Lane::F32),
        backend: "cpu",
        tol: tol(0.0, 2e-5, 2e-6),
        reason: "f32 FMA accumulation over K in a different order than the f64 reference: \
                 error ~ √K·2⁻²⁴ of the row's magnitude, ≤ 1e-5 relative at K = 5120",
    },
    Row {
        op: Op::Linear,
        lane: Some(Lane::F16),
        backend: "cpu",
        tol: tol(0.0, 2e-5, 2e-6),
        reason: "the f16 weight widens to f32 exactly, so the only error is f32 accumulation \
                 (as the f32 lane); the reference uses the same f16-rounded weight",
    },
    Row {
        op: Op::Linear,
        lane: Some(Lane::Q8),
        backend: "cpu",
        tol: tol(0.0, 0.03, 0.012),
        reason: "M ≤ 8 runs q8×q8 (ggml Q8_0): activations are quantized per 32-block to \
                 ±127, error ≤ amax/254 per element (uniform, rms amax/440), summed over K \
                 against the weight: rel_l2 ≈ amax/(440·rms(x)) ≈ 0.004 for uniform x; worst \
                 element ~5σ of that. Larger M dequantizes the weight (W8A32), as exact as f32",
    },
    Row {
        op: Op::Conv1d,
        lane: Some(Lane::F32),
        backend: "cpu",
        tol: tol(0.0, 2e-5, 2e-6),
        reason: "im2col + the f32 GEMM: same accumulation error as linear f32",
    },
    Row {
        op: Op::Conv1d,
        lane: Some(Lane::F16),
        backend: "cpu",
        tol: tol(0.0, 2e-5, 2e-6),
        reason: "im2col + the f16-weight GEMM: weights widen exactly, f32 accumulation",
    },
    Row {
        op: Op::Conv1d,
        lane: Some(Lane::Q8),
        backend: "cpu",
        tol: tol(0.0, 0.03, 0.012),
        reason: "im2col + the q8 linear (q8×q8 at ≤ 8 output frames, else W8A32): the same \
                 bound as linear q8",
    },
    Row {
        op: Op::Matmul,
        lane: None,
        backend: "cpu",
        tol: tol(0.0, 2e-5, 2e-6),
        reason: "f32 GEMM accumulation order",
    },
    Row {
        op: Op::DepthwiseConv1d,
        lane: None,
        backend: "cpu",
        tol: tol(0.0, 1e-6, 1e-6),
        reason: "K-tap f32 sums (K ≤ 32): a few ulp",
    },
    Row {
        op: Op::Conv2d,
        lane: None,
        backend: "cpu",
        tol: tol(0.0, 2e-5, 2e-6),
        reason: "im2col + f32 GEMM over C_in/g·kh·kw",
    },
    Row {
        op: Op::Attention,
        lane: None,
        backend: "cpu",
        tol: tol(0.0, 2e-5, 4e-6),
        reason: "two f32 GEMMs (q·kᵀ, p·v) and an f32 softmax whose exp is accurate to a few ulp",
    },
    Row {
        op: Op::AttentionProbs,
        lane: None,
        backend: "cpu",
        tol: tol(1e-6, 0.0, 4e-6),
        reason: "f32 q·kᵀ then softmax; probabilities ≤ 1 so an absolute bar of a few ulp of 1",
    },
    Row {
        op: Op::LayerNorm,
        lane: None,
        backend: "cpu",
        tol: tol(2e-6, 0.0, 1e-6),
        reason: "f32 mean/variance over C then a scale: outputs O(1), error a few ulp",
    },
    Row {
        op: Op::RmsNorm,
        lane: None,
        backend: "cpu",
        tol: tol(2e-6, 0.0, 1e-6),
        reason: "f32 mean of squares over C then a scale",
    },
    Row {
        op: Op::Activation,
        lane: None,
        backend: "cpu",
        tol: tol(2e-6, 0.0, 1e-6),
        reason: "f32 exp/tanh/erf approximations accurate to ~1e-7 relative on |x| < 4 \
                 (outputs up to 4, so ≈4 ulp absolute)",
    },
    Row {
        op: Op::Glu,
        lane: None,
        backend: "cpu",
        tol: tol(1e-6, 0.0, 1e-6),
        reason: "one f32 sigmoid and a product",
    },
    Row {
        op: Op::Softmax,
        lane: None,
        backend: "cpu",
        tol: tol(1e-6, 0.0, 2e-6),
        reason: "f32 exp and a sum over the row; probabilities ≤ 1",
    },
    Row {
        op: Op::LogSoftmax,
        lane: None,
        backend: "cpu",
        tol: tol(4e-6, 0.0, 1e-6),
        reason: "f32 log-sum-exp; outputs of magnitude up to ln(C) ≈ 11 at C = 51864",
    },
    Row {
        op: Op::Elementwise,
        lane: None,
        backend: "cpu",
        tol: tol(0.0, 1.2e-7, 1.2e-7),
        reason: "one f32 rounding per element (the reference rounds once from f64)",
    },
    Row {
        op: Op::LstmCell,
        lane: Some(Lane::F32),
        backend: "cpu",
        tol: tol(2e-6, 2e-5, 4e-6),
        reason: "two f32 GEMMs then sigmoid/tanh gates; h, c are O(1)",
    },
    // ---- cuda: GEMM inputs rounded to f16 for the tensor cores; other ops in f32 ----
    Row {
        op: Op::Linear,
        lane: Some(Lane::F16),
        backend: "cuda",
        tol: tol(0.0, 4e-3, 1e-3),
        reason: "activations rounded to f16 for tensor cores (2⁻¹¹ relative each), f32 \
                 accumulation: rel_l2 ≈ 2⁻¹¹/√3 ≈ 3e-4",
    },
    Row {
        op: Op::Linear,
        lane: Some(Lane::Q8),
        backend: "cuda",
        tol: tol(0.0, 0.03, 0.012),
        reason: "q8 activations per 32-block (as the CPU q8 row) or f16 activations against \
                 dequantized weights, whichever the kernel does; the q8 bound covers both",
    },
    Row {
        op: Op::Conv1d,
        lane: Some(Lane::F16),
        backend: "cuda",
        tol: tol(0.0, 4e-3, 1e-3),
        reason: "im2col (exact) then the f16 lane's linear: the cuda Linear f16 row",
    },
    Row {
        op: Op::Conv1d,
        lane: Some(Lane::Q8),
        backend: "cuda",
        tol: tol(0.0, 0.03, 0.012),
        reason: "im2col (exact) then the q8 lane's linear: the cuda Linear q8 row",
    },
    // f32 activations (eager ops, or chains with f16 activations off): f32 kernels
    Row {
        op: Op::Layout,
        lane: None,
        backend: "cuda",
        tol: EXACT,
        reason: "copies only",
    },
    Row {
        op: Op::Elementwise,
        lane: None,
        backend: "cuda",
        tol: tol(1e-6, 2.4e-7, 2.4e-7),
        reason: "one f32 rounding; the GPU's fused multiply-add may round once less than the \
                 reference",
    },
    Row {
        op: Op::Activation,
        lane: None,
        backend: "cuda",
        tol: tol(4e-6, 0.0, 2e-6),
        reason: "expf/erff/tanhf are within 2 ulp on the GPU; test outputs up to 4",
    },
    Row {
        op: Op::Glu,
        lane: None,
        backend: "cuda",
        tol: tol(2e-6, 0.0, 2e-6),
        reason: "one expf (2 ulp) and a division per output",
    },
    Row {
        op: Op::Softmax,
        lane: None,
        backend: "cuda",
        tol: tol(1e-6, 0.0, 4e-6),
        reason: "expf within 2 ulp, f32 block reductions in a different order than the reference",
    },
    Row {
        op: Op::LogSoftmax,
        lane: None,
        backend: "cuda",
        tol: tol(8e-6, 0.0, 2e-6),
        reason: "logf of an f32 block sum; outputs down to about -10",
    },
    Row {
        op: Op::LayerNorm,
        lane: None,
        backend: "cuda",
        tol: tol(8e-6, 0.0, 2e-6),
        reason: "f32 mean and two-pass variance, rsqrtf (2 ulp); outputs up to about 4",
    },
    Row {
        op: Op::RmsNorm,
        lane: None,
        backend: "cuda",
        tol: tol(8e-6, 0.0, 2e-6),
        reason: "f32 sum of squares, rsqrtf (2 ulp); outputs up to about 4",
    },
    Row {
        op: Op::Matmul,
        lane: None,
        backend: "cuda",
        tol: tol(0.0, 2e-5, 4e-6),
        reason: "cuBLAS f32 (no TF32): accumulation order only",
    },
    Row {
        op: Op::DepthwiseConv1d,
        lane: None,
        backend: "cuda",
        tol: tol(0.0, 2e-6, 1e-6),
        reason: "f32 direct convolution, short sums",
    },
    Row {
        op: Op::Conv2d,
        lane: None,
        backend: "cuda",
        tol: tol(0.0, 2e-5, 4e-6),
        reason: "f32 direct convolution, sums over C_in·kh·kw",
    },
    Row {
        op: Op::Attention,
        lane: None,
        backend: "cuda",
        tol: tol(0.0, 8e-3, 2.5e-3),
        reason: "q, k, v and the probabilities rounded to f16 for the tensor cores (2⁻¹¹ each), \
                 f32 accumulation and softmax: rel_l2 ≈ 2·2⁻¹¹ ≈ 1e-3; the f32 row kernel is \
                 far inside",
    },
    Row {
        op: Op::AttentionProbs,
        lane: None,
        backend: "cuda",
        tol: tol(1e-6, 0.0, 4e-6),
        reason: "f32 row kernel: dot products and softmax in f32",
    },
    // ---- cuda with f16 activations (inside chains, the default: `CudaBackend::
    // set_f16_activations`). Inputs are f16 already (the test rounds the reference's inputs
    // the same way), so each bar is the op's f32 math plus one round-to-nearest of its output
    // to f16: at most 2⁻¹¹ ≈ 4.9e-4 of each element, rel_l2 ≈ 2⁻¹¹/√3 ≈ 2.8e-4 typical.
    Row {
        op: Op::Layout,
        lane: None,
        backend: "cuda-f16act",
        tol: EXACT,
        reason: "f16 copies move the same bits",
    },
    Row {
        op: Op::Elementwise,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(1e-7, 5.5e-4, 5e-4),
        reason: "f32 math, one f16 rounding of the output (≤ 2⁻¹¹ relative per element)",
    },
    Row {
        op: Op::Activation,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(1e-6, 5.5e-4, 5e-4),
        reason: "f32 expf/erff/tanhf, one f16 rounding of the output",
    },
    Row {
        op: Op::Glu,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(1e-6, 5.5e-4, 5e-4),
        reason: "f32 sigmoid and product, one f16 rounding of the output",
    },
    Row {
        op: Op::Softmax,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(1e-6, 5.5e-4, 5e-4),
        reason: "f32 max, exponentials and sum, one f16 rounding of each probability",
    },
    Row {
        op: Op::LogSoftmax,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(8e-6, 5.5e-4, 5e-4),
        reason: "f32 log-sum-exp, one f16 rounding of the output",
    },
    Row {
        op: Op::LayerNorm,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(8e-6, 5.5e-4, 5e-4),
        reason: "statistics in f32 from f16 rows, one f16 rounding of the output",
    },
    Row {
        op: Op::RmsNorm,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(8e-6, 5.5e-4, 5e-4),
        reason: "sum of squares in f32 from f16 rows, one f16 rounding of the output",
    },
    Row {
        op: Op::Matmul,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(1e-6, 1e-3, 6e-4),
        reason: "f16 operands exact in the tensor cores' products, f32 accumulation, one f16 \
                 rounding of the output",
    },
    Row {
        op: Op::DepthwiseConv1d,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(1e-6, 5.5e-4, 5e-4),
        reason: "f32 direct convolution (f32 kernel), one f16 rounding of the output",
    },
    Row {
        op: Op::Conv2d,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(1e-6, 6e-4, 5e-4),
        reason: "f32 direct convolution (f32 kernel), one f16 rounding of the output",
    },
    Row {
        op: Op::Linear,
        lane: Some(Lane::F16),
        backend: "cuda-f16act",
        tol: tol(0.0, 2e-3, 8e-4),
        reason: "f16 inputs are exact on the tensor cores: the weights' f16 rounding (the \
                 reference keeps f32 weights) and the output's f16 rounding (twice with a bias: \
                 cublasGemmEx writes f16, the bias pass adds the f32 bias and rounds again), \
                 each ≤ 2⁻¹¹/√3 ≈ 2.8e-4 rel_l2; 2.2-2.8e-4 together measured on the H200, \
                 2026-11-30",
    },
    Row {
        op: Op::Linear,
        lane: Some(Lane::Q8),
        backend: "cuda-f16act",
        tol: tol(0.0, 0.10, 0.06),
        reason: "in f16 chains on an sm_89+ device the q8 lane runs FP8 (cuda fp8.rs): the \
                 activation and the weight's q8 values/scale each rounded to e4m3 (3 mantissa \
                 bits, rms relative error 2⁻⁴/√3·√0.54 ≈ 0.027 for values spread over a binade), \
                 √2 × that ≈ 0.037 rel_l2 for an output without cancellation, bar ×1.6; the \
                 worst of ~10⁵ elements ≈ 4.5σ of that against a range of ~4 rms, bar 0.10. \
                 Elsewhere (older GPUs, Q8Mix::F16/Int8) the cuda Linear q8 row's forms, well \
                 inside this",
    },
    Row {
        op: Op::Conv1d,
        lane: Some(Lane::F16),
        backend: "cuda-f16act",
        tol: tol(0.0, 2e-3, 8e-4),
        reason: "im2col writes f16 columns (exact for f16 inputs), then the f16 lane's linear \
                 (the cuda-f16act Linear f16 row)",
    },
    Row {
        op: Op::Conv1d,
        lane: Some(Lane::Q8),
        backend: "cuda-f16act",
        tol: tol(0.0, 0.10, 0.06),
        reason: "im2col (exact), then the q8 lane's linear: the cuda-f16act Linear q8 row (FP8)",
    },
    Row {
        op: Op::Attention,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(0.0, 9e-3, 3e-3),
        reason: "the cuda Attention row (q·scale and the probabilities rounded to f16 in the \
                 kernel) plus one f16 rounding of the output",
    },
    Row {
        op: Op::AttentionProbs,
        lane: None,
        backend: "cuda-f16act",
        tol: tol(1e-6, 0.0, 4e-6),
        reason: "probabilities stay f32 (alignment heads); f16 q, k widened exactly",
    },
];

/// How a lane's decoded ids must relate to the CPU f32 lane's on a family's fixtures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum IdsRule {
    /// Every decision identical.
    Identical,
    /// Decisions identical up to the first one whose CPU f32 top-1/top-2 margin is below
    /// `factor ×` the lane's logit error bound (written beside the fixture); after it the
    /// decoder states differ and ids are not compared.
    UntilMarginBelow { factor: f32 },
    /// The decoded text identical; ids are not compared (real weights, where no margins were
    /// written beside the clips to judge a differing token by).
    SameText,
}

/// A family-level bar: encoder output (relative L2 against CPU f32) and decoded ids of a lane
/// on a home, on that family's reference fixtures.
#[derive(Clone, Copy, Debug)]
pub struct FamilyRow {
    pub family: &'static str,
    pub lane: Lane,
    pub backend: &'static str,
    pub encoder_rel_l2: f32,
    pub ids: IdsRule,
    pub reason: &'static str,
}

/// Family bars, each derived from something stated before the run it judges.
pub static FAMILY: &[FamilyRow] = &[
    FamilyRow {
        family: "whisper",
        lane: Lane::F16,
        backend: "cuda",
        encoder_rel_l2: 5e-3,
        ids: IdsRule::Identical,
        reason: "the real tiny.en and base weights on jfk (cuda_whisper, STAPES_GPU_MODEL). \
                 f16 rounding (2⁻¹¹) at every GEMM input and attention operand: the two convs \
                 and 6 a layer (q|k|v, q·kᵀ, p·v, out, fc1, fc2), 38 for base's 6 layers, \
                 √38·2⁻¹¹/√3 ≈ 1.7e-3; the bar, set inline in the test before stop 56, is ~3× \
                 that (the FastConformer f16 row allows 4×). Stop 56's H100 read base at \
                 4.96e-3 and tiny.en at 2.32e-3 (H200, stops 34–39: tiny.en 2.36e-3): a base \
                 reading over the bar is a reason to trace base's f16 path before raising it. \
                 Ids: greedy decisions equal",
    },
    FamilyRow {
        family: "whisper",
        lane: Lane::Q8,
        backend: "cuda",
        encoder_rel_l2: 0.1,
        ids: IdsRule::SameText,
        reason: "the same weights and clip. The encoder's GEMMs run on FP8 where the GPU has it \
                 (e4m3 weights and inputs, ~2.5 % rms a GEMM, the gigaam q8 row's figure) at 26 \
                 GEMM inputs for base, √26 × 2.5 % ≈ 13 % undamped; measured 5.4e-2 (tiny.en, \
                 H200 stops 34–39, H100 stop 56) and 6.1e-2 (base, H100 stop 56). The text must \
                 match CPU f32's: no margins were written beside real clips to judge a token by",
    },
    FamilyRow {
        family: "fastconformer",
        lane: Lane::F16,
        backend: "cuda",
        encoder_rel_l2: 5e-3,
        ids: IdsRule::Identical,
        reason: "the Parakeet fixtures keep every decision's f32 margin ≥ 0.05 logits and ≥ 4× \
                 the largest logit change of f16 activations at every GEMM input, emulated on \
                 the same weights by tools/reference/fastconformer_hf.py (≤ 0.011 logits, \
                 expected.json lane_logit_error.f16; Canary: margins ≥ 0.0499 vs ≤ 0.0025, \
                 expected_canary_lanes.json); a margin m cannot flip while logits move < m/2. Encoder: f16 rounding (2⁻¹¹) at ~20 GEMM inputs over two blocks, \
                 √20·2⁻¹¹/√3 ≈ 1.3e-3, bar ×4",
    },
    FamilyRow {
        family: "fastconformer",
        lane: Lane::Q8,
        backend: "cuda",
        encoder_rel_l2: 0.15,
        ids: IdsRule::UntilMarginBelow { factor: 2.0 },
        reason: "CUDA q8 re-lays the 32-blocks as per-row int8 and quantizes activations per \
                 row; emulated on the fixtures' weights it moves logits by up to 0.15-0.45 \
                 (lane_logit_error.q8 in expected.json / expected_canary_lanes.json), above \
                 many fixture margins, so ids can \
                 only be required identical while every f32 margin exceeds 2× that bound (a \
                 margin m cannot flip while logits move < m/2). Encoder: on sm_89+ the large \
                 GEMMs run FP8 (cuda fp8.rs: both operands rounded to e4m3, ~0.037 rel_l2 a \
                 GEMM, the cuda-f16act Linear q8 row); the f16 row's model for the same ~20 \
                 GEMM inputs over two blocks (√20 × one GEMM's error, which over-predicts its \
                 own measurement 1.2-2×) gives √20 × 0.037 ≈ 0.165 undamped, ~0.08-0.14 by \
                 that ratio; bar 0.15 (H200, stop 34: 0.052-0.095 over the Parakeet and \
                 Canary fixtures). Without FP8 (older GPUs, Q8Mix::F16) the int8 forms' \
                 1-5e-2",
    },
    FamilyRow {
        family: "gigaam",
        lane: Lane::F16,
        backend: "cuda",
        encoder_rel_l2: 5e-3,
        ids: IdsRule::Identical,
        reason: "tools/reference/gigaam_ckpt.py keeps every decision's f32 margin ≥ 0.05 logits \
                 and ≥ 4× the largest logit change of f16 activations at every GEMM input, \
                 emulated on the same weights (lane_logit_error.f16 ≤ 0.016, margins ≥ 0.09 in \
                 expected.json); a margin m cannot flip while logits move < m/2. Encoder: the \
                 FastConformer f16 row's model, the same two-block size and GEMM count",
    },
    FamilyRow {
        family: "gigaam",
        lane: Lane::Q8,
        backend: "cuda",
        encoder_rel_l2: 0.25,
        ids: IdsRule::UntilMarginBelow { factor: 2.0 },
        reason: "the encoder chain runs the q8 lane's GEMMs on FP8 where the GPU has it: e4m3 \
                 weights and activations (3 mantissa bits, ~2.5 % rms a GEMM), ~18 GEMM inputs \
                 in sequence over the fixtures' two blocks give √18 × 2.5 % ≈ 11 % undamped; \
                 measured 0.10-0.163 on the H200 (stop 38, v1_ctc's rel_pos blocks the worst), \
                 bar ×1.5 of that; a zeroed layer-1 output projection must land above it \
                 (cuda_gigaam). The emulated q8 logit error (0.51-0.92, expected.json) is above \
                 many margins, so ids are compared only while every f32 margin exceeds 2× it",
    },
    FamilyRow {
        family: "qwen3a",
        lane: Lane::F16,
        backend: "cuda",
        encoder_rel_l2: 5e-3,
        ids: IdsRule::UntilMarginBelow { factor: 2.0 },
        reason: "the audio tower is a Whisper encoder of two layers in the fixture (whose f16 \
                 row is 2e-3 over four) plus a conv stem and the projector: f16 activations at \
                 ~12 GEMM inputs. Ids: the fixture's logits are scaled up (HEAD_GAIN 8) and no \
                 f16 logit error was emulated beside them, so cuda_qwen3a teacher-forces the CPU \
                 f32 ids and requires the same choice wherever the f32 margin exceeds 2x the \
                 largest logit change the GPU shows at that step (a margin m cannot flip while \
                 logits move < m/2)",
    },
    FamilyRow {
        family: "qwen3a",
        lane: Lane::Q8,
        backend: "cuda",
        encoder_rel_l2: 0.25,
        ids: IdsRule::UntilMarginBelow { factor: 2.0 },
        reason: "the gigaam q8 row's reasoning (FP8 e4m3 GEMMs, ~2.5 % rms each, ~12-18 in \
                 sequence); ids judged as in the f16 row, against the step's measured logit \
                 change",
    },
    FamilyRow {
        family: "gemma4a",
        lane: Lane::F16,
        backend: "cuda",
        encoder_rel_l2: 5e-3,
        ids: IdsRule::Identical,
        reason: "a tower (no ids): the fixture's two conformer layers run ~16 GEMMs with f16 \
                 activations at their inputs, the FastConformer f16 row's model (5e-3 for two \
                 blocks); its clamps and the soft-capped logits only bound values",
    },
    FamilyRow {
        family: "gemma4a",
        lane: Lane::Q8,
        backend: "cuda",
        encoder_rel_l2: 0.25,
        ids: IdsRule::Identical,
        reason: "a tower (no ids); the gigaam q8 row's reasoning: FP8 e4m3 GEMMs (~2.5 % rms \
                 each), ~16 in sequence over the fixture's two layers",
    },
];

/// The family bar for `(family, lane, backend)`.
pub fn family_bar(family: &str, lane: Lane, backend: &str) -> Option<&'static FamilyRow> {
    FAMILY
        .iter()
        .find(|r| r.family == family && r.lane == lane && r.backend == backend)
}

/// The row for `(op, lane, backend)`; `lane` is ignored for ops whose row has `lane: None`.
pub fn lookup(op: Op, lane: Lane, backend: &str) -> Option<&'static Row> {
    TABLE
        .iter()
        .find(|r| r.op == op && r.backend == backend && r.lane.is_none_or(|l| l == lane))
}

/// What a comparison measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    pub max_abs: f32,
    /// Index of the worst element.
    pub worst: usize,
    /// `max|want|`, the scale `max_rel` is taken against.
    pub range: f32,
    pub rel_l2: f32,
}

/// Why a comparison failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Mismatch {
    #[error("length {got} vs reference {want}")]
    Length { got: usize, want: usize },
    #[error("element {index} is not finite ({value})")]
    NotFinite { index: usize, value: f32 },
    #[error("element {} off by {} (bar {bar}; reference range {})", .m.worst, .m.max_abs, .m.range)]
    Element { m: Measured, bar: f32 },
    #[error("relative L2 {} over the bar {bar}", .m.rel_l2)]
    RelL2 { m: Measured, bar: f32 },
}

/// Compare `got` against the reference `want` under `tol`.
pub fn compare(got: &[f32], want: &[f32], tol: &Tolerance) -> Result<Measured, Mismatch> {
    if got.len() != want.len() {
        return Err(Mismatch::Length {
            got: got.len(),
            want: want.len(),
        });
    }
    let mut m = Measured {
        max_abs: 0.0,
        worst: 0,
        range: 0.0,
        rel_l2: 0.0,
    };
    let (mut num, mut den) = (0f64, 0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if !g.is_finite() && g != w {
            return Err(Mismatch::NotFinite { index: i, value: g });
        }
        let d = (g - w).abs();
        if d > m.max_abs {
            m.max_abs = d;
            m.worst = i;
        }
        m.range = m.range.max(w.abs());
        num += (d as f64).powi(2);
        den += (w as f64).powi(2);
    }
    m.rel_l2 = if den > 0.0 {
        (num / den).sqrt() as f32
    } else {
        num.sqrt() as f32
    };
    let bar = tol.max_abs + tol.max_rel * m.range;
    if m.max_abs > bar {
        return Err(Mismatch::Element { m, bar });
    }
    if m.rel_l2 > tol.rel_l2 {
        return Err(Mismatch::RelL2 { m, bar: tol.rel_l2 });
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_a_reason_and_is_unique() {
        for (i, r) in TABLE.iter().enumerate() {
            assert!(r.reason.len() > 10, "row {i} needs a reason");
            let dup = TABLE[..i]
                .iter()
                .any(|o| o.op == r.op && o.backend == r.backend && o.lane == r.lane);
            assert!(!dup, "row {i} duplicates an earlier row");
        }
    }

    #[test]
    fn family_rows_have_reasons_and_are_unique() {
        for (i, r) in FAMILY.iter().enumerate() {
            assert!(r.reason.len() > 10, "family row {i} needs a reason");
            assert!(r.encoder_rel_l2 > 0.0 && r.encoder_rel_l2 < 1.0);
            let dup = FAMILY[..i]
                .iter()
                .any(|o| o.family == r.family && o.backend == r.backend && o.lane == r.lane);
            assert!(!dup, "family row {i} duplicates an earlier row");
        }
        assert_eq!(
            family_bar("fastconformer", Lane::F16, "cuda").map(|r| r.ids),
            Some(IdsRule::Identical)
        );
        assert!(family_bar("fastconformer", Lane::F32, "cuda").is_none());
        assert_eq!(
            family_bar("whisper", Lane::Q8, "cuda").map(|r| r.ids),
            Some(IdsRule::SameText)
        );
    }

    #[test]
    fn lookup_matches_lane_only_when_the_row_has_one() {
        assert_eq!(
            lookup(Op::Linear, Lane::Q8, "cpu").map(|r| r.lane),
            Some(Some(Lane::Q8))
        );
        assert!(lookup(Op::Softmax, Lane::Q8, "cpu").is_some());
        assert!(lookup(Op::Linear, Lane::F32, "cuda").is_none());
    }

    #[test]
    fn compare_catches_one_bad_element_and_a_diffuse_error() {
        let want: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 201) as f32 / 100.0 - 1.0)
            .collect();
        let t = tol(0.0, 1e-3, 1e-3);
        assert!(compare(&want, &want, &t).is_ok());
        let mut one = want.clone();
        one[617] += 0.01;
        match compare(&one, &want, &t) {
            Err(Mismatch::Element { m, .. }) => assert_eq!(m.worst, 617),
            other => panic!("planted error not caught: {other:?}"),
        }
        // 0.09% on every element passes both bars (element error ≤ 9e-4·range, rel_l2 9e-4).
        // 0.2% everywhere under a looser element bar (1e-2·range) must still trip the L2 bar.
        let scaled: Vec<f32> = want.iter().map(|w| w * 1.0009).collect();
        assert!(compare(&scaled, &want, &t).is_ok());
        let t2 = tol(0.0, 1e-2, 1e-3);
        let scaled2: Vec<f32> = want.iter().map(|w| w * 1.002).collect();
        assert!(matches!(
            compare(&scaled2, &want, &t2),
            Err(Mismatch::RelL2 { .. })
        ));
        assert!(matches!(
            compare(&want[1..], &want, &t),
            Err(Mismatch::Length { .. })
        ));
        let mut nan = want.clone();
        nan[3] = f32::NAN;
        assert!(matches!(
            compare(&nan, &want, &t),
            Err(Mismatch::NotFinite { index: 3, .. })
        ));
    }
}
