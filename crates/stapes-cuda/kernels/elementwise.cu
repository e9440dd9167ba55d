// Element-wise ops over f32 activations. Grid-stride loops so one launch shape fits any size.

// act: 0 gelu(erf), 1 gelu(tanh), 2 silu, 3 relu, 4 sigmoid, 5 tanh
__device__ __forceinline__ float apply_act(float v, int act) {
    switch (act) {
    case 0: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    case 1: return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    case 2: return v / (1.f + expf(-v));
    case 3: return fmaxf(v, 0.f);
    case 4: return 1.f / (1.f + expf(-v));
    default: return tanhf(v);
    }
}

// The element-wise kernels take 16-byte accesses when the count allows (every tensor starts at
// an aligned block), which is what keeps them near memory bandwidth.
#define GRID_STRIDE(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

extern "C" __global__ void act_f32(float* __restrict__ y, const float* __restrict__ x, long long n, int act) {
    if ((n & 3) == 0) {
        GRID_STRIDE(i, n >> 2) {
            float4 v = ((const float4*)x)[i];
            ((float4*)y)[i] = make_float4(apply_act(v.x, act), apply_act(v.y, act), apply_act(v.z, act), apply_act(v.w, act));
        }
        return;
    }
    GRID_STRIDE(i, n) y[i] = apply_act(x[i], act);
}

// op: 0 add, 1 mul. b is broadcast as a suffix of a: b index = i % nb.
extern "C" __global__ void binary_f32(float* __restrict__ y, const float* __restrict__ a, const float* __restrict__ b,
                                      long long n, long long nb, int op) {
    if ((n & 3) == 0 && (nb & 3) == 0) {
        long long nb4 = nb >> 2;
        GRID_STRIDE(i, n >> 2) {
            float4 u = ((const float4*)a)[i];
            float4 v = ((const float4*)b)[nb == n ? i : i % nb4];  // the modulo only for broadcasts
            ((float4*)y)[i] = op == 0 ? make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w)
                                      : make_float4(u.x * v.x, u.y * v.y, u.z * v.z, u.w * v.w);
        }
        return;
    }
    GRID_STRIDE(i, n) {
        float bv = b[nb == n ? i : i % nb];
        y[i] = op == 0 ? a[i] + bv : a[i] * bv;
    }
}

extern "C" __global__ void affine_f32(float* __restrict__ y, const float* __restrict__ x, long long n, float s, float t) {
    if ((n & 3) == 0) {
        GRID_STRIDE(i, n >> 2) {
            float4 v = ((const float4*)x)[i];
            ((float4*)y)[i] = make_float4(v.x * s + t, v.y * s + t, v.z * s + t, v.w * s + t);
        }
        return;
    }
    GRID_STRIDE(i, n) y[i] = x[i] * s + t;
}

// GLU over the last dim: x (rows, 2h) -> y (rows, h) = a * sigmoid(b).
extern "C" __global__ void glu_f32(float* __restrict__ y, const float* __restrict__ x, long long rows, int h) {
    long long n = rows * h;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / h;
        int c = (int)(i - r * h);
        float a = x[r * 2 * h + c], g = x[r * 2 * h + h + c];
        y[i] = a / (1.f + expf(-g));
    }
}

// y (rows, n) += bias (n), in place; the f16 GEMM path's epilogue.
extern "C" __global__ void bias_rows_f32(float* __restrict__ y, const float* __restrict__ bias, long long rows, int n) {
    long long total = rows * n;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x)
        y[i] += bias[i % n];
}

// Padding mask: x viewed (B, R, S, inner), keep (B, S) of 0/1; masked entries become `fill`.
extern "C" __global__ void mask_fill_f32(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ keep,
                                         long long n, long long per_batch, int s, int inner, float fill) {
    GRID_STRIDE(i, n) {
        long long b = i / per_batch;
        int j = (int)(((i - b * per_batch) / inner) % s);
        y[i] = keep[b * s + j] != 0.f ? x[i] : fill;
    }
}
