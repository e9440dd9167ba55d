// FastConformer block ops fused into single kernels (src/conformer.rs): the conv module's middle
// (GLU + padding mask + depthwise conv + activation) and the Transformer-XL attention inputs
// (q+u, q+v, k, v heads and the repeated position heads from one stacked projection).
// Activations f32 or f16 (`dt`, common.cuh); parameters f32; math in f32.

// act: 0 gelu(erf), 1 gelu(tanh), 2 silu, 3 relu, 4 sigmoid, 5 tanh (the backend's act codes)
__device__ __forceinline__ float conformer_act(float v, int act) {
    switch (act) {
    case 0: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    case 1: return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    case 2: return v / (1.f + expf(-v));
    case 3: return fmaxf(v, 0.f);
    case 4: return 1.f / (1.f + expf(-v));
    default: return tanhf(v);
    }
}

// Output frames per block and channels per block of glu_dw_act (the host sizes the grid and the
// dynamic shared memory, (GDW_ROWS + K - 1) · GDW_CH floats, from the same numbers).
#define GDW_ROWS 16
#define GDW_CH 64

// x (B, T, 2C) -> y (B, t_out, C) = act(depthwise(mask(glu(x))) + bias), stride 1, `pad` zero
// frames each side; w (C, K), bias (C) or null, keep (B, T) of 0/1 or null.
// Block (256 threads = 64 channels × 4 row groups) owns GDW_ROWS output frames × GDW_CH channels:
// it computes the GLU of the GDW_ROWS + K - 1 input frames it reads once into shared memory
// (zero outside the sequence and where keep is 0), then each thread sums its K taps in order
// (bias first, as the separate depthwise kernel does).
template <class Y, class X>
__device__ __forceinline__ void glu_dw_act_k(void* y_, const void* x_, const float* __restrict__ keep,
                                             const float* __restrict__ w, const float* __restrict__ bias, int t, int c,
                                             int kw, int pad, int t_out, int act) {
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    extern __shared__ float g[];  // (GDW_ROWS + kw - 1) × GDW_CH
    const int tx = threadIdx.x % GDW_CH, ty = threadIdx.x / GDW_CH, ny = blockDim.x / GDW_CH;
    const int ch = blockIdx.y * GDW_CH + tx;
    const int b = blockIdx.z;
    const int t0 = blockIdx.x * GDW_ROWS;
    const int rows = GDW_ROWS + kw - 1;
    const X* xb = x + (long long)b * t * 2 * c;
    for (int r = ty; r < rows; r += ny) {
        int ti = t0 - pad + r;
        float v = 0.f;
        if (ch < c && ti >= 0 && ti < t && (!keep || keep[(long long)b * t + ti] != 0.f)) {
            float a = ldf(xb, (long long)ti * 2 * c + ch), gate = ldf(xb, (long long)ti * 2 * c + c + ch);
            v = a / (1.f + expf(-gate));
        }
        g[r * GDW_CH + tx] = v;
    }
    __syncthreads();
    if (ch >= c) return;
    const float* wc = w + (long long)ch * kw;
    const float b0 = bias ? bias[ch] : 0.f;
    for (int rr = ty; rr < GDW_ROWS; rr += ny) {
        int to = t0 + rr;
        if (to >= t_out) break;
        float acc = b0;
        for (int k = 0; k < kw; ++k) acc += wc[k] * g[(rr + k) * GDW_CH + tx];
        stf(y, ((long long)b * t_out + to) * c + ch, conformer_act(acc, act));
    }
}
extern "C" __global__ void glu_dw_act(void* y, const void* x, const float* keep, const float* w, const float* bias, int t,
                                      int c, int kw, int pad, int t_out, int act, int dt) {
    DISPATCH_YX(dt, glu_dw_act_k, y, x, keep, w, bias, t, c, kw, pad, t_out, act);
}

// qkv (B, T, 3C) laid out q | k | v, pos (1, P, C), C = H·Dh ->
//   qu = q + bias_u, qv = q + bias_v, k, v: (B·H, T, Dh) each, index ((b·H + h)·T + t)·Dh + d;
//   p: (B·H, P, Dh), the position heads repeated for every b.
// One grid-stride pass over n1 = B·T·3C (indexed by the qkv side, so the Dh runs are contiguous
// on both sides) followed by n2 = B·H·P·Dh (indexed by the output side).
template <class Y, class X, class P>
__device__ __forceinline__ void rel_attn_inputs_k(void* qu_, void* qv_, void* k_, void* v_, void* p_, const void* qkv_,
                                                  const void* pos_, const float* __restrict__ bu,
                                                  const float* __restrict__ bv, int bs, int t, int h, int dh, int np) {
    Y *qu = (Y*)qu_, *qv = (Y*)qv_, *ko = (Y*)k_, *vo = (Y*)v_, *po = (Y*)p_;
    const X* qkv = (const X*)qkv_;
    const P* pos = (const P*)pos_;
    const long long c = (long long)h * dh, c3 = 3 * c;
    const long long n1 = (long long)bs * t * c3, n2 = (long long)bs * h * np * dh;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n1 + n2;
         i += (long long)gridDim.x * blockDim.x) {
        if (i < n1) {
            long long bt = i / c3;
            int col = (int)(i - bt * c3);
            int part = col / (int)c, cc = col - part * (int)c;
            long long b = bt / t;
            int tt = (int)(bt - b * t);
            int hh = cc / dh, d = cc - hh * dh;
            long long j = ((b * h + hh) * t + tt) * dh + d;
            float xv = ldf(qkv, i);
            if (part == 0) {
                stf(qu, j, xv + bu[cc]);
                stf(qv, j, xv + bv[cc]);
            } else if (part == 1) {
                stf(ko, j, xv);
            } else {
                stf(vo, j, xv);
            }
        } else {
            long long o = i - n1;
            int d = (int)(o % dh);
            long long r = o / dh;
            int pp = (int)(r % np);
            int hh = (int)((r / np) % h);
            stf(po, o, ldf(pos, (long long)pp * c + hh * dh + d));
        }
    }
}
extern "C" __global__ void rel_attn_inputs(void* qu, void* qv, void* k, void* v, void* p, const void* qkv, const void* pos,
                                           const float* bu, const float* bv, int bs, int t, int h, int dh, int np, int dt) {
    DISPATCH_YAB(dt, rel_attn_inputs_k, qu, qv, k, v, p, qkv, pos, bu, bv, bs, t, h, dh, np);
}
