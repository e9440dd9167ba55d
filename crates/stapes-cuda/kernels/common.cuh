// Shared helpers, prepended to every kernel file before NVRTC compiles it.
// Header-free on purpose: NVRTC 13.0 ships no cuda_fp16.h, so halves are raw u16 converted with
// inline PTX, and the few constants we need are spelled out.
typedef unsigned short h16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define F_INF __int_as_float(0x7f800000)
#define F_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float h2f(h16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ h16 f2h(float f) {
    h16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
// Two floats into one f16x2 register (lo in the low half), as mma.sync operands want them.
__device__ __forceinline__ u32 pack_h2(float lo, float hi) {
    return (u32)f2h(lo) | ((u32)f2h(hi) << 16);
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Block-wide reductions for blocks of up to 1024 threads (a multiple of 32). `scratch` holds 32
// floats; every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < nw ? scratch[lane] : 0.f;
    return warp_sum(r);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < nw ? scratch[lane] : F_NEG_INF;
    return warp_max(r);
}
