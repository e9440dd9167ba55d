// Convolutions over f32 or f16 activations (`dt`, common.cuh; weights and biases f32). conv1d
// lowers to im2col + the lane's GEMM; depthwise convolutions are direct. 2-D convolutions are
// direct where they are small (a stem's first conv from one channel), and im2col_2d + a
// tensor-core GEMM in f16 chains where each output reads many channels (Qwen3-ASR's 480-channel
// stem: ~18 GMAC for 11 s, f32 FMAs one output a thread in the direct form).

// x (b, t, c) -> cols (b * t_out, c * kw) with column index ci * kw + kk (the [c_in][k] weight order).
// Block x = one output row (bi * t_out + to); each thread writes IM2COL_PER consecutive columns
// of it with one store, its loads all issued before it: a thread a channel with its kw taps in
// turn (stop 20) waited for each load before its store (cols and x may alias as far as the
// compiler knows) and wrote 2-byte values kw apart (turbo's conv2, 1500 × 3840: 20.4 µs under
// ncu, stop 24). Index math is 32-bit; a row whose width is not a multiple of IM2COL_PER
// takes its columns one a thread.
#define IM2COL_PER 4
template <class Y, class X>
__device__ __forceinline__ void im2col_1d_k(void* cols_, const void* x_, int b, int t, int c, int kw, int stride, int pad,
                                            int t_out) {
    const int row = blockIdx.x;
    const int ck = c * kw;
    const int per = ck % IM2COL_PER == 0 ? IM2COL_PER : 1;
    const int j0 = (blockIdx.y * blockDim.x + threadIdx.x) * per;
    if (j0 >= ck) return;
    const int bi = row / t_out, to = row - bi * t_out;
    const X* x = (const X*)x_ + (long long)bi * t * c;
    int ci = j0 / kw, kk = j0 - ci * kw;
    float v[IM2COL_PER];
#pragma unroll
    for (int e = 0; e < IM2COL_PER; ++e) {
        v[e] = 0.f;
        if (e < per) {
            const int ti = to * stride + kk - pad;
            if (ti >= 0 && ti < t) v[e] = ldf(x, (long long)ti * c + ci);
            if (++kk == kw) kk = 0, ++ci;
        }
    }
    const long long o = (long long)row * ck + j0;
    if (per == IM2COL_PER) st4((Y*)cols_, o / IM2COL_PER, make_float4(v[0], v[1], v[2], v[3]));
    else stf((Y*)cols_, o, v[0]);
}
extern "C" __global__ void im2col_1d(void* cols, const void* x, int b, int t, int c, int kw, int stride, int pad, int t_out,
                                     int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, im2col_1d_k, cols, x, b, t, c, kw, stride, pad, t_out);
}

// x (b, t, c), w (c, kw) -> y (b, t_out, c)
template <class Y, class X>
__device__ __forceinline__ void depthwise_conv1d_k(void* y_, const void* x_, const float* __restrict__ w,
                                                   const float* __restrict__ bias, int b, int t, int c, int kw, int stride,
                                                   int pad, int t_out) {
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    long long n = (long long)b * t_out * c;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int ci = (int)(i % c);
        long long row = i / c;
        int bi = (int)(row / t_out), to = (int)(row - (long long)bi * t_out);
        float acc = bias ? bias[ci] : 0.f;
        for (int kk = 0; kk < kw; ++kk) {
            int ti = to * stride + kk - pad;
            if (ti >= 0 && ti < t) acc += w[ci * kw + kk] * ldf(x, ((long long)bi * t + ti) * c + ci);
        }
        stf(y, i, acc);
    }
}
extern "C" __global__ void depthwise_conv1d(void* y, const void* x, const float* w, const float* bias, int b, int t, int c,
                                            int kw, int stride, int pad, int t_out, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, depthwise_conv1d_k, y, x, w, bias, b, t, c, kw, stride, pad, t_out);
}

// x (b, ci, h, w), weight (co, ci/groups, kh, kw) -> y (b, co, ho, wo)
template <class Y, class X>
__device__ __forceinline__ void conv2d_direct_k(void* y_, const void* x_, const float* __restrict__ wt,
                                                const float* __restrict__ bias, int b, int ci, int h, int w, int co, int kh,
                                                int kw, int sh, int sw, int ph, int pw, int groups, int ho, int wo) {
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    long long n = (long long)b * co * ho * wo;
    int cig = ci / groups, cog = co / groups;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int ox = (int)(i % wo);
        long long r = i / wo;
        int oy = (int)(r % ho);
        r /= ho;
        int oc = (int)(r % co);
        int bi = (int)(r / co);
        int g = oc / cog;
        float acc = bias ? bias[oc] : 0.f;
        for (int c = 0; c < cig; ++c) {
            const X* xp = x + ((long long)bi * ci + g * cig + c) * h * w;
            const float* wp = wt + ((long long)oc * cig + c) * kh * kw;
            for (int ky = 0; ky < kh; ++ky) {
                int iy = oy * sh + ky - ph;
                if (iy < 0 || iy >= h) continue;
                for (int kx = 0; kx < kw; ++kx) {
                    int ix = ox * sw + kx - pw;
                    if (ix >= 0 && ix < w) acc += wp[ky * kw + kx] * ldf(xp, (long long)iy * w + ix);
                }
            }
        }
        stf(y, i, acc);
    }
}
extern "C" __global__ void conv2d_direct(void* y, const void* x, const float* wt, const float* bias, int b, int ci, int h,
                                         int w, int co, int kh, int kw, int sh, int sw, int ph, int pw, int groups, int ho,
                                         int wo, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, conv2d_direct_k, y, x, wt, bias, b, ci, h, w, co, kh, kw, sh, sw, ph, pw, groups, ho, wo);
}

// x (b, ci, h, w) -> cols (b, ci * kh * kw, ho * wo): column block of batch entry bi is the
// (K, P) operand of W (co, K) · cols = y (co, P), so the GEMM writes y in (b, co, ho, wo)
// order directly. Row index k = (c * kh + ky) * kw + kx is PyTorch's weight order. One thread
// an element, consecutive threads consecutive output positions (coalesced stores).
template <class Y, class X>
__device__ __forceinline__ void im2col_2d_k(void* cols_, const void* x_, int b, int ci, int h, int w, int kh, int kw, int sh,
                                            int sw, int ph, int pw, int ho, int wo) {
    const long long P = (long long)ho * wo, K = (long long)ci * kh * kw, n = b * K * P;
    const X* x = (const X*)x_;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int p = (int)(i % P);
        const long long r = i / P;
        const int k = (int)(r % K), bi = (int)(r / K);
        const int kx = k % kw, ky = (k / kw) % kh, c = k / (kw * kh);
        const int iy = (p / wo) * sh + ky - ph, ix = (p % wo) * sw + kx - pw;
        float v = 0.f;
        if (iy >= 0 && iy < h && ix >= 0 && ix < w) v = ldf(x, (((long long)bi * ci + c) * h + iy) * w + ix);
        stf((Y*)cols_, i, v);
    }
}
extern "C" __global__ void im2col_2d(void* cols, const void* x, int b, int ci, int h, int w, int kh, int kw, int sh, int sw,
                                     int ph, int pw, int ho, int wo, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, im2col_2d_k, cols, x, b, ci, h, w, kh, kw, sh, sw, ph, pw, ho, wo);
}

// y (b, co, p) += bias[co], in place.
template <class Y>
__device__ __forceinline__ void bias_channels_k(void* y_, const float* __restrict__ bias, long long n, int co, int p) {
    Y* y = (Y*)y_;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        stf(y, i, ldf(y, i) + bias[(i / p) % co]);
}
extern "C" __global__ void bias_channels(void* y, const float* bias, long long n, int co, int p, int dt) {
    PDL_ENTER();
    if (dt & 1) bias_channels_k<h16>(y, bias, n, co, p);
    else bias_channels_k<float>(y, bias, n, co, p);
}
