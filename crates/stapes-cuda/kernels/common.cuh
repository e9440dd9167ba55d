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
// ---- e4m3 (FP8) [fp8: src/fp8.rs] ----
// e4m3 needs sm_89; below it the conversion compiles to 0 and the host never asks for it.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
#define FP8_OK 1
#else
#define FP8_OK 0
#endif

// Two floats as two e4m3 bytes in memory order (lo first).
__device__ __forceinline__ unsigned short e4m3x2(float lo, float hi) {
#if FP8_OK
    unsigned short d;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
    return d;
#else
    return 0;
#endif
}

// Eight halves (two a word, lo first) as their eight e4m3 bytes in memory order: the bits
// quant_fp8 makes of the same stored values.
__device__ __forceinline__ uint2 e4m3x8(uint4 h) {
    const u32 w[4] = {h.x, h.y, h.z, h.w};
    u32 p[2];
#pragma unroll
    for (int e = 0; e < 2; ++e)
        p[e] = (u32)e4m3x2(h2f((h16)(w[2 * e] & 0xffffu)), h2f((h16)(w[2 * e] >> 16))) |
               ((u32)e4m3x2(h2f((h16)(w[2 * e + 1] & 0xffffu)), h2f((h16)(w[2 * e + 1] >> 16))) << 16);
    return make_uint2(p[0], p[1]);
}

// The backend's activation codes: 0 gelu(erf), 1 gelu(tanh), 2 silu, 3 relu, 4 sigmoid, 5 tanh.
// One definition for every file, so a fused kernel rounds as the separate activation does.
__device__ __forceinline__ float act_apply(float v, int act) {
    switch (act) {
    case 0: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    case 1: return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    case 2: return v / (1.f + expf(-v));
    case 3: return fmaxf(v, 0.f);
    case 4: return 1.f / (1.f + expf(-v));
    default: return tanhf(v);
    }
}
// act_apply with SiLU and sigmoid on the MUFU exp2 and reciprocal (__expf's error grows with
// |v|: ~1e-6 relative at |v| < 8); for outputs rounded to f16, whose 2^-11 dwarfs it.
__device__ __forceinline__ float act_apply_fast(float v, int act) {
    switch (act) {
    case 2: return __fdividef(v, 1.f + __expf(-v));
    case 4: return __fdividef(1.f, 1.f + __expf(-v));
    default: return act_apply(v, act);
    }
}
// act_apply_fast where `fast`, else act_apply (a compile-time `fast` picks one at no cost)
__device__ __forceinline__ float act_apply_if(float v, int act, bool fast) {
    return fast ? act_apply_fast(v, act) : act_apply(v, act);
}
// a · sigmoid(gate) (the GLU), fast as act_apply_fast where `fast`
__device__ __forceinline__ float sigmoid_mul(float a, float gate, bool fast) {
    return fast ? __fdividef(a, 1.f + __expf(-gate)) : a / (1.f + expf(-gate));
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

// ---- programmatic dependent launch (Hopper, sm_90+) [pdl: src/pdl.rs] ----
// A kernel in pdl.rs's PDL_SAFE list may be launched before the kernel ahead of it on the stream
// has finished. It must run PDL_WAIT() (all threads, before any return) ahead of every global
// read of data earlier work produced and ahead of every global write (WAR); only reads of
// weights/constants and index math may come before. PDL_WAIT blocks until the grids it depends
// on have completed and their writes are visible; launched without the attribute it returns at
// once. PDL_LAUNCH_DEPENDENTS lets the next kernel's blocks be scheduled (they still wait for
// this grid's completion before touching its data). Both compile to nothing below sm_90.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define PDL_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define PDL_WAIT() \
    do {           \
    } while (0)
#define PDL_LAUNCH_DEPENDENTS() \
    do {                        \
    } while (0)
#endif
// Pull `bytes` from `p` towards L2 (the warp's lanes take 128-byte lines in turn): for a
// weight before PDL_WAIT (weights are written at load, never by the work ahead).
__device__ __forceinline__ void pdl_prefetch_l2(const void* p, long long bytes) {
    const char* c = (const char*)p;
    for (long long o = (long long)(threadIdx.x & 31) * 128; o < bytes; o += 32 * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(c + o));
}
// The usual entry of a PDL-safe kernel: wait for the work ahead, then let the next kernel's
// blocks come on (all of this grid's blocks are resident or done by then, so they take no slot
// this grid needs).
#define PDL_ENTER()              \
    do {                         \
        PDL_WAIT();              \
        PDL_LAUNCH_DEPENDENTS(); \
    } while (0)

// ---- f16 tensor-core fragments, cp.async, ldmatrix (sm_80+) [fcenc2: used by conformer.cu] ----
// The operand plumbing of the flash-style kernels, named tc_* so they do not collide with the
// copies older kernel files still define for themselves.
// c (4 f32) += A (16×16 f16, row) · B (16×8 f16, col), the m16n8k16 register fragments.
__device__ __forceinline__ void tc_mma16816(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// A shared-memory pointer as the 32-bit address cp.async and ldmatrix take.
__device__ __forceinline__ u32 tc_smem_u32(const void* p) {
    u32 r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}
// 16 bytes global -> shared, bypassing L1; the bytes past src_bytes (0 or 16) are zero-filled.
__device__ __forceinline__ void tc_cp_async16(void* smem, const void* gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(tc_smem_u32(smem)), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void tc_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void tc_cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// Four 8×8 b16 matrices from shared memory (a row-major tile as an mma A operand).
__device__ __forceinline__ void tc_ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
// Four 8×8 b16 matrices from shared memory, transposed (a row-major V tile as a col operand).
__device__ __forceinline__ void tc_ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
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

// ---------------------------------------------------------------------------------------------
// General f32 kernel, any head size: one block (128 or 512 threads) per (query, head, batch).
// Used for decoder steps (Tq small), odd head sizes, and to produce the probabilities themselves
// (P != null) for alignment heads. Dynamic shared memory: the query (D rounded up to 4), one
// partial output of D floats per warp, then the kv_len scores.
// Scores: one lane per key (32 keys per warp at a time, each reading its K row with 16-byte
// loads), so many rows are in flight at once; P·V: each warp walks every nw-th key reading whole
// V rows (coalesced), and the per-warp partial sums meet in shared memory.
// Q, K, V of type X, O of type Y (f32 or f16, `dt`); P always f32.
template <class Y, class X>
__device__ __forceinline__ void attn_rows_k(void* O_, float* __restrict__ P, const void* Q_, const void* K_, const void* V_,
                                            int Tq, int Tk, int H, int D, int kv_len, float scale, int causal) {
    Y* __restrict__ O = (Y*)O_;
    const X* __restrict__ Q = (const X*)Q_;
    const X* __restrict__ K = (const X*)K_;
    const X* __restrict__ V = (const X*)V_;
    extern __shared__ __align__(16) float sm[];
    const int d4 = (D + 3) & ~3;
    const int nw = blockDim.x >> 5;
    float* qv = sm;                 // d4
    float* red = sm + d4;           // nw * D
    float* sc = red + nw * D;       // kv_len
    __shared__ float scratch[32];
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const long long ld = (long long)H * D;
    const X* q = Q + ((long long)b * Tq + i) * ld + h * D;
    for (int d = threadIdx.x; d < d4; d += blockDim.x) qv[d] = d < D ? ldf(q, d) : 0.f;
    __syncthreads();
    int limit = causal ? kv_len - Tq + i + 1 : kv_len;
    limit = max(0, min(limit, kv_len));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int j = threadIdx.x; j < kv_len; j += blockDim.x) {
        const X* k = K + ((long long)b * Tk + j) * ld + h * D;
        float acc = 0.f;
        if ((D & 3) == 0) {
            const float4* q4 = (const float4*)qv;
#pragma unroll 4
            for (int e = 0; e < (D >> 2); ++e) {
                float4 kk = ld4(k, e), qq = q4[e];
                acc += (kk.x * qq.x + kk.y * qq.y) + (kk.z * qq.z + kk.w * qq.w);
            }
        } else {
            for (int d = 0; d < D; ++d) acc += ldf(k, d) * qv[d];
        }
        sc[j] = j < limit ? acc * scale : F_NEG_INF;
    }
    __syncthreads();
    float m = F_NEG_INF;
    for (int j = threadIdx.x; j < kv_len; j += blockDim.x) m = fmaxf(m, sc[j]);
    m = block_max(m, scratch);
    float base = m == F_NEG_INF ? 0.f : m;
    float s = 0.f;
    for (int j = threadIdx.x; j < kv_len; j += blockDim.x) {
        float e = expf(sc[j] - base);
        sc[j] = e;
        s += e;
    }
    s = block_sum(s, scratch);
    float inv = s > 0.f ? 1.f / s : 0.f;
    for (int j = threadIdx.x; j < kv_len; j += blockDim.x) {
        float p = sc[j] * inv;
        sc[j] = p;
        if (P) P[(((long long)b * H + h) * Tq + i) * kv_len + j] = p;
    }
    __syncthreads();
    if (!O) return;
    Y* o = O + ((long long)b * Tq + i) * ld + h * D;
    for (int d0 = 0; d0 < D; d0 += 128) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
        for (int j = warp; j < limit; j += nw) {
            float p = sc[j];
            const X* v = V + ((long long)b * Tk + j) * ld + h * D;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                int d = d0 + lane + 32 * c;
                if (d < D) acc[c] += p * ldf(v, d);
            }
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            int d = d0 + lane + 32 * c;
            if (d < D) red[warp * D + d] = acc[c];
        }
    }
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float sum = 0.f;
        for (int w = 0; w < nw; ++w) sum += red[w * D + d];
        stf(o, d, sum);
    }
}

// ---- exp2 and f16 packing for the flash-style kernels [attention.cu, attn_wg.cu] ----
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// One cvt for two values (sm_80): lo in the low half, as mma operands want them.
__device__ __forceinline__ u32 pack_h2_x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// ---- Hopper: warpgroup MMA, mbarriers, TMA (sm_90a) [i8gemm.cu, attn_wg.cu] ----
// Only files compiled for compute_90a (kernels.rs: ARCH_SPECIFIC) see the helpers; elsewhere
// their kernels compile empty and the backend never launches them. A TMA description
// (`CUtensorMap`, 128 bytes) is passed by value as a `__grid_constant__` parameter.
struct __align__(64) TmaMap {
    unsigned long long v[16];
};
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SM90A_ON 1
// Shared-memory operand in the 128-byte swizzle (chunk c of row r at c ^ (r & 7); 8-row atoms
// of 1024 bytes, tile bases 1024-aligned): start address >> 4, stride between 8-row atoms 1024
// bytes (>> 4 = 64), leading offset unused (1 by convention) where the operand's major extent
// is one 128-byte row, mode 1 = 128B. The same words describe a K-major operand and, with the
// instruction's transpose bit, an MN-major one of 64 16-bit columns.
__device__ __forceinline__ unsigned long long wg_desc(u32 addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Ties the accumulators to this point: the compiler sees wgmma's asm as updating them at issue,
// so reads after wg_wait0 and writes before the next issue must not move across it.
template <int N>
__device__ __forceinline__ void wg_hold(int* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void wg_hold(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
// A ring of `stages` (full, empty) mbarrier pairs, 8 bytes apart: `full` completes on one
// producer arrival plus the stage's TMA bytes, `empty` on `consumers` arrivals. One thread runs
// it; the block synchronizes before using the ring.
__device__ __forceinline__ void mbar_ring_init(u32 full0, u32 empty0, int stages, u32 consumers) {
    for (int s = 0; s < stages; ++s) {
        mbar_init(full0 + 8 * s, 1);
        mbar_init(empty0 + 8 * s, consumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// 2-D box at (x = k, y = row) of `map` into shared memory at `dst`, completion on `bar`.
__device__ __forceinline__ void tma_load(u32 dst, const TmaMap* map, int k, int row, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"((unsigned long long)map), "r"(k), "r"(row), "r"(bar)
        : "memory");
}
// 4-D box at (c0, c1, c2, c3), innermost first.
__device__ __forceinline__ void tma_load4(u32 dst, const TmaMap* map, int c0, int c1, int c2, int c3, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
        "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}
#endif
