// Data movement: strided 2-D copies (slice, concat, KV-cache writes) and transposes.

// dst[r * dst_ld + c] = src[r * src_ld + c] for r < rows, c < cols; rows walk grid.y (no division).
extern "C" __global__ void copy2d_f32(float* __restrict__ dst, const float* __restrict__ src, long long rows, long long cols,
                                      long long dst_ld, long long src_ld) {
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const float* s = src + r * src_ld;
        float* d = dst + r * dst_ld;
        for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < cols; c += (long long)gridDim.x * blockDim.x)
            d[c] = s[c];
    }
}

// The same in 16-byte units (all counts and offsets divisible by 4 floats).
extern "C" __global__ void copy2d_f32x4(float4* __restrict__ dst, const float4* __restrict__ src, long long rows, long long cols,
                                        long long dst_ld, long long src_ld) {
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const float4* s = src + r * src_ld;
        float4* d = dst + r * dst_ld;
        for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < cols; c += (long long)gridDim.x * blockDim.x)
            d[c] = s[c];
    }
}

// (batch, a, b) -> (batch, b, a), through a 32x33 shared tile so both sides stay coalesced.
extern "C" __global__ void transpose_f32(float* __restrict__ dst, const float* __restrict__ src, int a, int b) {
    __shared__ float tile[32][33];
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

// Attention heads: split (dir 0): y (B·H, T, Dh) = x (B, T, H·Dh) + bias (H·Dh, optional);
// merge (dir 1): y (B, T, H·Dh) = x (B·H, T, Dh). Indexed by the (B, T, H·Dh) side, so the
// inner Dh run is contiguous on both sides.
extern "C" __global__ void heads_f32(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ bias,
                                     int t, int h, int dh, long long n, int dir) {
    long long c = (long long)h * dh;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long bt = i / c;
        int col = (int)(i - bt * c);
        long long b = bt / t;
        int tt = (int)(bt - b * t);
        int hh = col / dh, d = col - hh * dh;
        long long j = ((b * h + hh) * t + tt) * dh + d;  // (B·H, T, Dh) index
        if (dir == 0) y[j] = bias ? x[i] + bias[col] : x[i];
        else y[i] = x[j];
    }
}
