// Data movement: strided 2-D copies (slice, concat, KV-cache writes), transposes and head
// splits. Copies between tensors of one element type move raw bits in 2-, 4- or 16-byte units;
// `convert2d` (elementwise.cu) copies between types.

// dst[r * dst_ld + c] = src[r * src_ld + c] for r < rows, c < cols (in units of T); rows walk
// grid.y (no division).
template <class T>
__device__ __forceinline__ void copy2d_k(T* __restrict__ dst, const T* __restrict__ src, long long rows, long long cols,
                                         long long dst_ld, long long src_ld) {
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const T* s = src + r * src_ld;
        T* d = dst + r * dst_ld;
        for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < cols; c += (long long)gridDim.x * blockDim.x)
            d[c] = s[c];
    }
}
extern "C" __global__ void copy2d_b16(h16* dst, const h16* src, long long rows, long long cols, long long dst_ld, long long src_ld) {
    PDL_ENTER();
    copy2d_k(dst, src, rows, cols, dst_ld, src_ld);
}
extern "C" __global__ void copy2d_b32(u32* dst, const u32* src, long long rows, long long cols, long long dst_ld, long long src_ld) {
    PDL_ENTER();
    copy2d_k(dst, src, rows, cols, dst_ld, src_ld);
}
extern "C" __global__ void copy2d_b128(uint4* dst, const uint4* src, long long rows, long long cols, long long dst_ld,
                                       long long src_ld) {
    PDL_ENTER();
    copy2d_k(dst, src, rows, cols, dst_ld, src_ld);
}

// (batch, a, b) -> (batch, b, a), through a 32x33 shared tile so both sides stay coalesced.
template <class T>
__device__ __forceinline__ void transpose_k(T* __restrict__ dst, const T* __restrict__ src, int a, int b) {
    __shared__ T tile[32][33];
    long long base = (long long)blockIdx.z * a * b;
    int bx = blockIdx.x * 32, by = blockIdx.y * 32;
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {
        int r = by + j, c = bx + threadIdx.x;
        if (r < a && c < b) tile[j][threadIdx.x] = src[base + (long long)r * b + c];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {
        int r = bx + j, c = by + threadIdx.x;
        if (r < b && c < a) dst[base + (long long)r * a + c] = tile[threadIdx.x][j];
    }
}
extern "C" __global__ void transpose_b16(h16* dst, const h16* src, int a, int b) { PDL_ENTER(); transpose_k(dst, src, a, b); }
extern "C" __global__ void transpose_b32(u32* dst, const u32* src, int a, int b) { PDL_ENTER(); transpose_k(dst, src, a, b); }

// Attention heads: split (dir 0): y (B·H, T, Dh) = x (B, T, H·Dh) + bias (H·Dh, f32, optional);
// merge (dir 1): y (B, T, H·Dh) = x (B·H, T, Dh). Indexed by the (B, T, H·Dh) side, so the
// inner Dh run is contiguous on both sides.
template <class Y, class X>
__device__ __forceinline__ void heads_k(void* y_, const void* x_, const float* __restrict__ bias, int t, int h, int dh,
                                        long long n, int dir) {
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    long long c = (long long)h * dh;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long bt = i / c;
        int col = (int)(i - bt * c);
        long long b = bt / t;
        int tt = (int)(bt - b * t);
        int hh = col / dh, d = col - hh * dh;
        long long j = ((b * h + hh) * t + tt) * dh + d;  // (B·H, T, Dh) index
        if (dir == 0) stf(y, j, bias ? ldf(x, i) + bias[col] : ldf(x, i));
        else stf(y, i, ldf(x, j));
    }
}
extern "C" __global__ void heads(void* y, const void* x, const float* bias, int t, int h, int dh, long long n, int dir, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, heads_k, y, x, bias, t, h, dh, n, dir);
}
