// Row-wise normalisations and softmaxes: one block per row, statistics in f32 (two-pass variance
// from the cached mean, so large offsets do not cancel).

extern "C" __global__ void layer_norm_f32(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ g,
                                          const float* __restrict__ b, int n, float eps, int has_beta) {
    __shared__ float scratch[32];
    const float* xr = x + (long long)blockIdx.x * n;
    float* yr = y + (long long)blockIdx.x * n;
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
    float mean = block_sum(s, scratch) / n;
    float v = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { float d = xr[i] - mean; v += d * d; }
    float var = block_sum(v, scratch) / n;
    float inv = rsqrtf(var + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float o = (xr[i] - mean) * inv * g[i];
        yr[i] = has_beta ? o + b[i] : o;
    }
}

extern "C" __global__ void rms_norm_f32(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ g,
                                        int n, float eps) {
    __shared__ float scratch[32];
    const float* xr = x + (long long)blockIdx.x * n;
    float* yr = y + (long long)blockIdx.x * n;
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += xr[i] * xr[i];
    float inv = rsqrtf(block_sum(s, scratch) / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv * g[i];
}

// log = 0: softmax; 1: log_softmax. A row of -inf only gives zeros (softmax) / -inf (log).
extern "C" __global__ void softmax_f32(float* __restrict__ y, const float* __restrict__ x, int n, int log) {
    __shared__ float scratch[32];
    const float* xr = x + (long long)blockIdx.x * n;
    float* yr = y + (long long)blockIdx.x * n;
    float m = F_NEG_INF;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = block_max(m, scratch);
    float ms = m == F_NEG_INF ? 0.f : m;
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += expf(xr[i] - ms);
    s = block_sum(s, scratch);
    if (log) {
        float ls = logf(s);
        for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] - ms - ls;
    } else {
        float inv = s > 0.f ? 1.f / s : 0.f;
        for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = expf(xr[i] - ms) * inv;
    }
}

// Row-wise argmax (first index of the maximum), so only ids leave the device.
extern "C" __global__ void argmax_f32(u32* __restrict__ out, const float* __restrict__ x, int n) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const float* xr = x + (long long)blockIdx.x * n;
    float best = F_NEG_INF;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i];
        if (v > best || (v == best && i < bi)) { best = v; bi = i; }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) { sv[warp] = best; si[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        best = lane < nw ? sv[lane] : F_NEG_INF;
        bi = lane < nw ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
        }
        if (lane == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0u : (u32)bi;
    }
}
