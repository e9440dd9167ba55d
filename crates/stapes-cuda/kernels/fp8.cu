// The q8 lane's GEMMs on the e4m3 (FP8) tensor cores (src/fp8.rs): a q8 weight re-laid once as
// e4m3 under one f32 scale, and activations converted to e4m3 as they are (scale 1) before each
// such GEMM. The conversion is `cvt.rn.satfinite`: round to nearest even, anything past ±448
// clamped to ±448 (never NaN). e4m3 needs sm_89; below it the entries compile empty and the
// host never launches them (the fp8 path is not constructed there).

// (e4m3x2, the conversion itself, is in common.cuh: the norms write e4m3 too.)

// The e4m3 maximum: the weight's amax maps onto it.
#define E4M3_MAX 448.f

// sw[0] = the weight scale: amax(w) / 448, from the int8 rows' per-row scales (|q| <= 127 so
// amax <= 127 * max(scales)); 1 for an all-zero weight. One block.
extern "C" __global__ void fp8_weight_scale(float* __restrict__ sw, const float* __restrict__ scales, int n) {
    __shared__ float part[32];
    float m = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, fabsf(scales[i]));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (threadIdx.x == 0) sw[0] = m > 0.f ? m * 127.f / E4M3_MAX : 1.f;
    }
}

// w (n, k) e4m3 = (w8 (n_pad, k_pad) x scales (n)) / sw[0], k even. Runs once per weight,
// outside any capture.
extern "C" __global__ void w8_to_fp8(unsigned short* __restrict__ w, const signed char* __restrict__ w8,
                                     const float* __restrict__ scales, const float* __restrict__ sw, int n, int k,
                                     int k_pad) {
    long long pairs = (long long)n * (k >> 1);
    float inv = 1.f / sw[0];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < pairs; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / (k >> 1), c = (i - r * (k >> 1)) * 2;
        float s = scales[r] * inv;
        const signed char* q = w8 + r * k_pad + c;
        w[i] = e4m3x2((float)q[0] * s, (float)q[1] * s);
    }
}

// y (count) e4m3 = x as it is (f16 when dt bit 1, else f32), saturated at ±448. `count` a
// multiple of 8 and x, y 16-byte aligned when `wide`: 8 values a thread an access.
extern "C" __global__ void quant_fp8(unsigned char* __restrict__ y, const void* __restrict__ x, long long count, int dt,
                                     int wide) {
    long long stride = (long long)gridDim.x * blockDim.x;
    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (wide) {
        long long groups = count >> 3;
        for (long long g = t; g < groups; g += stride) {
            float v[8];
            if (dt & 2) {
                uint4 u = ((const uint4*)x)[g];
                u32 w4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    v[2 * j] = h2f((h16)(w4[j] & 0xffffu));
                    v[2 * j + 1] = h2f((h16)(w4[j] >> 16));
                }
            } else {
                float4 a = ((const float4*)x)[2 * g], b = ((const float4*)x)[2 * g + 1];
                v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
            }
            uint2 o;
            o.x = (u32)e4m3x2(v[0], v[1]) | ((u32)e4m3x2(v[2], v[3]) << 16);
            o.y = (u32)e4m3x2(v[4], v[5]) | ((u32)e4m3x2(v[6], v[7]) << 16);
            ((uint2*)y)[g] = o;
        }
        return;
    }
    for (long long i = t; i < count; i += stride) {
        float v = (dt & 2) ? h2f(((const h16*)x)[i]) : ((const float*)x)[i];
        y[i] = (unsigned char)(e4m3x2(v, 0.f) & 0xffu);
    }
}

// y = act(x) in f16 (y may be x: in place) and y8 = the stored halves as e4m3, the FP8 GEMM's
// input that reads y next (src/fp8.rs, linear_act_feeding): the bits `act` (in its fast form, as
// a q8 weight's pass runs it) then quant_fp8 give, in one pass. The activation on
// act_apply_fast, as f8wg's epilogue: ~1e-6 relative, under the f16 rounding after it.
// y null: y8 only (the GEMM that reads it is the result's only reader). 8 values a thread an
// access; count % 8 == 0, every pointer 16-byte aligned.
extern "C" __global__ void act_e4m3(h16* y, const h16* x, unsigned char* __restrict__ y8, long long count, int act) {
    PDL_ENTER();
    const long long groups = count >> 3, stride = (long long)gridDim.x * blockDim.x;
    for (long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x; g < groups; g += stride) {
        const uint4 u = ((const uint4*)x)[g];
        const u32 w[4] = {u.x, u.y, u.z, u.w};
        u32 o[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
            o[e] = pack_h2(act_apply_fast(h2f((h16)(w[e] & 0xffffu)), act), act_apply_fast(h2f((h16)(w[e] >> 16)), act));
        const uint4 h = make_uint4(o[0], o[1], o[2], o[3]);
        if (y) ((uint4*)y)[g] = h;
        ((uint2*)y8)[g] = e4m3x8(h);
    }
}

// Two e4m3 bytes (lo first) as their two halves (lo in the low half): exact, every e4m3 value
// is an f16 value.
__device__ __forceinline__ u32 h2_of_e4m3x2(unsigned short v) {
#if FP8_OK
    u32 d;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"(v));
    return d;
#else
    return 0;
#endif
}

// Two e4m3 bytes (lo first) mapped as act_e4m3 maps the f16 values they hold: act_apply_fast
// in f32, rounded to f16, then to e4m3.
__device__ __forceinline__ u32 act8_pair(u32 v, int act) {
    const u32 h = h2_of_e4m3x2((unsigned short)v);
    const float lo = act_apply_fast(h2f((h16)(h & 0xffffu)), act), hi = act_apply_fast(h2f((h16)(h >> 16)), act);
    return e4m3x2(h2f(f2h(lo)), h2f(f2h(hi)));
}

// 16 e4m3 bytes mapped as act8_pair maps them: through `table` (each byte's image) or computed.
__device__ __forceinline__ uint4 act8_x16(uint4 u, const u32* table, int act, int lut) {
    u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const u32 v = w[e];
        w[e] = lut ? table[v & 0xffu] | (table[(v >> 8) & 0xffu] << 8) | (table[(v >> 16) & 0xffu] << 16) |
                         (table[v >> 24] << 24)
                   : act8_pair(v & 0xffffu, act) | (act8_pair(v >> 16, act) << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// y8 (count) = act of the e4m3 values x8 (count), as e4m3 (y8 may be x8: in place): the
// activation cuBLASLt's epilogue lacks (SiLU), after an FP8 GEMM that wrote its pre-activation
// as e4m3 (src/fp8.rs, lt_act_e4m3). A byte has 256 values: with `lut` each block tabulates
// them in shared memory before its PDL wait, and a thread looks its 16 bytes up; without it the
// thread computes them. Both give act8_pair's bytes. count % 16 == 0, x8 and y8 16-byte aligned.
// The host sizes the grid to one resident wave, so that every block's table is made while the
// GEMM before it still runs; a thread then takes its groups of 16 bytes two at a time, both
// loads in flight before either store (in place, a group is only ever stored over itself).
extern "C" __global__ void act8_e4m3(unsigned char* y8, const unsigned char* x8, long long count, int act, int lut) {
    __shared__ u32 table[256];
    if (lut) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) table[i] = act8_pair((u32)i, act) & 0xffu;
        __syncthreads();
    }
    PDL_ENTER();
    const long long groups = count >> 4, stride = (long long)gridDim.x * blockDim.x;
    long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (; g + stride < groups; g += 2 * stride) {
        const uint4 a = ((const uint4*)x8)[g], b = ((const uint4*)x8)[g + stride];
        ((uint4*)y8)[g] = act8_x16(a, table, act, lut);
        ((uint4*)y8)[g + stride] = act8_x16(b, table, act, lut);
    }
    if (g < groups) ((uint4*)y8)[g] = act8_x16(((const uint4*)x8)[g], table, act, lut);
}
