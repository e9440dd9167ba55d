// Element-wise ops over f32 or f16 activations (see `dt` in common.cuh); math in f32.
// Grid-stride loops so one launch shape fits any size.

// The element-wise kernels take 4-element accesses when the count allows (every tensor starts at
// an aligned block), which is what keeps them near memory bandwidth.
#define GRID_STRIDE(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

template <class Y, class X, bool FAST>
__device__ __forceinline__ void act_k(Y* y, const X* x, long long n, int act) {
    if ((n & 3) == 0) {
        GRID_STRIDE(i, n >> 2) {
            float4 v = ld4(x, i);
            st4(y, i, make_float4(act_apply_if(v.x, act, FAST), act_apply_if(v.y, act, FAST), act_apply_if(v.z, act, FAST),
                                  act_apply_if(v.w, act, FAST)));
        }
        return;
    }
    GRID_STRIDE(i, n) stf(y, i, act_apply_if(ldf(x, i), act, FAST));
}
template <class Y, class X>
__device__ __forceinline__ void act_dt(void* y, const void* x, long long n, int act, bool fast) {
    if (fast) act_k<Y, X, true>((Y*)y, (const X*)x, n, act);
    else act_k<Y, X, false>((Y*)y, (const X*)x, n, act);
}
// dt bit 2: SiLU and sigmoid on act_apply_fast (a q8 weight's pass, src/backend.rs act_launch:
// the form act_e4m3 and f8wg's epilogue run, so each of them equals this pass's bits)
extern "C" __global__ void act(void* y, const void* x, long long n, int act, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, act_dt, y, x, n, act, (dt & 4) != 0);
}

// op: 0 add, 1 mul. b is broadcast as a suffix of a: b index = i % nb.
template <class Y, class A, class B>
__device__ __forceinline__ void binary_k(void* y_, const void* a_, const void* b_, long long n, long long nb, int op) {
    Y* y = (Y*)y_;
    const A* a = (const A*)a_;
    const B* b = (const B*)b_;
    if ((n & 3) == 0 && (nb & 3) == 0) {
        long long nb4 = nb >> 2;
        GRID_STRIDE(i, n >> 2) {
            float4 u = ld4(a, i);
            float4 v = ld4(b, nb == n ? i : i % nb4);  // the modulo only for broadcasts
            st4(y, i, op == 0 ? make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w)
                              : make_float4(u.x * v.x, u.y * v.y, u.z * v.z, u.w * v.w));
        }
        return;
    }
    GRID_STRIDE(i, n) {
        float bv = ldf(b, nb == n ? i : i % nb);
        float av = ldf(a, i);
        stf(y, i, op == 0 ? av + bv : av * bv);
    }
}
extern "C" __global__ void binary(void* y, const void* a, const void* b, long long n, long long nb, int op, int dt) {
    PDL_ENTER();
    DISPATCH_YAB(dt, binary_k, y, a, b, n, nb, op);
}

template <class Y, class X>
__device__ __forceinline__ void affine_k(void* y_, const void* x_, long long n, float s, float t) {
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    if ((n & 3) == 0) {
        GRID_STRIDE(i, n >> 2) {
            float4 v = ld4(x, i);
            st4(y, i, make_float4(v.x * s + t, v.y * s + t, v.z * s + t, v.w * s + t));
        }
        return;
    }
    GRID_STRIDE(i, n) stf(y, i, ldf(x, i) * s + t);
}
extern "C" __global__ void affine(void* y, const void* x, long long n, float s, float t, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, affine_k, y, x, n, s, t);
}

// Rotary embedding, rotate-half form (the trait's rotary_half): x (n values, rows of heads of dh),
// cos and sin (nc values each, of one type) broadcast as a suffix of x; y = x·cos + rot(x)·sin with
// rot = [−x₂, x₁] over each head's halves. One launch where the composition takes seven.
template <class Y, class X, class P>
__device__ __forceinline__ void rotary_half_k(void* y_, const void* x_, const void* cs_, const void* sn_, long long n,
                                              long long nc, int dh) {
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    const P* cs = (const P*)cs_;
    const P* sn = (const P*)sn_;
    const int half = dh >> 1;
    GRID_STRIDE(i, n) {
        const long long p = i % nc;
        const int j = (int)(i % dh);  // rows hold whole heads, so this is the place in the head
        const float r = j < half ? -ldf(x, i + half) : ldf(x, i - half);
        stf(y, i, ldf(x, i) * ldf(cs, p) + r * ldf(sn, p));
    }
}
extern "C" __global__ void rotary_half(void* y, const void* x, const void* cs, const void* sn, long long n, long long nc,
                                       int dh, int dt) {
    PDL_ENTER();
    DISPATCH_YAB(dt, rotary_half_k, y, x, cs, sn, n, nc, dh);
}

// GLU over the last dim: x (rows, 2h) -> y (rows, h) = a * sigmoid(b).
template <class Y, class X>
__device__ __forceinline__ void glu_k(void* y_, const void* x_, long long rows, int h) {
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    long long n = rows * h;
    GRID_STRIDE(i, n) {
        long long r = i / h;
        int c = (int)(i - r * h);
        float a = ldf(x, r * 2 * h + c), g = ldf(x, r * 2 * h + h + c);
        stf(y, i, a / (1.f + expf(-g)));
    }
}
extern "C" __global__ void glu(void* y, const void* x, long long rows, int h, int dt) { PDL_ENTER(); DISPATCH_YX(dt, glu_k, y, x, rows, h); }

// y (rows, n) += bias (n, f32), in place; the epilogue of GEMMs cuBLASLt has no fused plan for.
template <class Y>
__device__ __forceinline__ void bias_rows_k(void* y_, const float* __restrict__ bias, long long rows, int n) {
    Y* y = (Y*)y_;
    GRID_STRIDE(i, rows * n) stf(y, i, ldf(y, i) + bias[i % n]);
}
extern "C" __global__ void bias_rows(void* y, const float* bias, long long rows, int n, int dt) {
    PDL_ENTER();
    DISPATCH_Y(dt, bias_rows_k, y, bias, rows, n);
}

// Padding mask: x viewed (B, R, S, inner), keep (B, S) of 0/1 (f32); masked entries become `fill`.
template <class Y, class X>
__device__ __forceinline__ void mask_fill_k(void* y_, const void* x_, const float* __restrict__ keep, long long n,
                                            long long per_batch, int s, int inner, float fill) {
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    GRID_STRIDE(i, n) {
        long long b = i / per_batch;
        int j = (int)(((i - b * per_batch) / inner) % s);
        stf(y, i, keep[b * s + j] != 0.f ? ldf(x, i) : fill);
    }
}
extern "C" __global__ void mask_fill(void* y, const void* x, const float* keep, long long n, long long per_batch, int s,
                                     int inner, float fill, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, mask_fill_k, y, x, keep, n, per_batch, s, inner, fill);
}

// Dtype conversion of a 2-D strided block (also the converting copy of slice/concat/write_rows).
template <class Y, class X>
__device__ __forceinline__ void convert2d_k(void* dst_, const void* src_, long long rows, long long cols, long long dst_ld,
                                            long long src_ld) {
    Y* dst = (Y*)dst_;
    const X* src = (const X*)src_;
    for (long long r = blockIdx.y; r < rows; r += gridDim.y)
        for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < cols; c += (long long)gridDim.x * blockDim.x)
            stf(dst, r * dst_ld + c, ldf(src, r * src_ld + c));
}
extern "C" __global__ void convert2d(void* dst, const void* src, long long rows, long long cols, long long dst_ld,
                                     long long src_ld, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, convert2d_k, dst, src, rows, cols, dst_ld, src_ld);
}
