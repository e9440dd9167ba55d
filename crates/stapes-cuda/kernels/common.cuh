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

// ---- activation element types ----
// Activations are f32 or f16 (raw h16); kernels are templates over them, computing in f32.
// An entry point takes `dt`, a bit mask of which of its tensors are f16 (bit 0 the output,
// bit 1 the first input, bit 2 the second), and picks the instantiation once per thread.
__device__ __forceinline__ float ldf(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float ldf(const h16* p, long long i) { return h2f(p[i]); }
__device__ __forceinline__ void stf(float* p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void stf(h16* p, long long i, float v) { p[i] = f2h(v); }
// Elements 4·i4 .. 4·i4+3: one 16-byte access for f32, one 8-byte access for f16.
__device__ __forceinline__ float4 ld4(const float* p, long long i4) { return ((const float4*)p)[i4]; }
__device__ __forceinline__ float4 ld4(const h16* p, long long i4) {
    uint2 r = ((const uint2*)p)[i4];
    return make_float4(h2f((h16)(r.x & 0xffff)), h2f((h16)(r.x >> 16)), h2f((h16)(r.y & 0xffff)), h2f((h16)(r.y >> 16)));
}
__device__ __forceinline__ void st4(float* p, long long i4, float4 v) { ((float4*)p)[i4] = v; }
__device__ __forceinline__ void st4(h16* p, long long i4, float4 v) {
    ((uint2*)p)[i4] = make_uint2(pack_h2(v.x, v.y), pack_h2(v.z, v.w));
}
// Elements 2·i2, 2·i2+1.
__device__ __forceinline__ float2 ld2(const float* p, long long i2) { return ((const float2*)p)[i2]; }
__device__ __forceinline__ float2 ld2(const h16* p, long long i2) {
    u32 r = ((const u32*)p)[i2];
    return make_float2(h2f((h16)(r & 0xffff)), h2f((h16)(r >> 16)));
}
__device__ __forceinline__ void st2(float* p, long long i2, float2 v) { ((float2*)p)[i2] = v; }
__device__ __forceinline__ void st2(h16* p, long long i2, float2 v) { ((u32*)p)[i2] = pack_h2(v.x, v.y); }

#define DISPATCH_Y(dt, F, ...)                 \
    if ((dt) & 1) F<h16>(__VA_ARGS__);         \
    else F<float>(__VA_ARGS__)
#define DISPATCH_YX(dt, F, ...)                       \
    switch ((dt) & 3) {                               \
    case 0: F<float, float>(__VA_ARGS__); break;      \
    case 1: F<h16, float>(__VA_ARGS__); break;        \
    case 2: F<float, h16>(__VA_ARGS__); break;        \
    default: F<h16, h16>(__VA_ARGS__); break;         \
    }
#define DISPATCH_YAB(dt, F, ...)                             \
    switch ((dt) & 7) {                                      \
    case 0: F<float, float, float>(__VA_ARGS__); break;      \
    case 1: F<h16, float, float>(__VA_ARGS__); break;        \
    case 2: F<float, h16, float>(__VA_ARGS__); break;        \
    case 3: F<h16, h16, float>(__VA_ARGS__); break;          \
    case 4: F<float, float, h16>(__VA_ARGS__); break;        \
    case 5: F<h16, float, h16>(__VA_ARGS__); break;          \
    case 6: F<float, h16, h16>(__VA_ARGS__); break;          \
    default: F<h16, h16, h16>(__VA_ARGS__); break;           \
    }
