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
