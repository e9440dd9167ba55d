// int8 tensor-core GEMM with the q8 lane's scaling epilogue in registers (issue 4).
//
// y (m, n) = epi(acc[r][c] * sx[r] * sw[c] (+ bias[c]) (+ resid[r][c]) | act(...)), where
// acc = A (m, k_pad) int8 row-major · B (n, k_pad) int8 row-major ᵀ, summed exactly in int32.
// A: activations quantized per row (quantize_rows_i8), B: the re-laid q8 weight, both
// K-contiguous, so both fragments come from ldmatrix without .trans. The epilogue arithmetic is
// the one NVRTC emits for dequant_epilogue / dequant_act_quant in gemm_aux.cu (read from its
// PTX): t = acc·sx; with a bias fma(t, sw, bias), else t·sw; then + resid as a separate add;
// act(fma(t, sw, bias or 0)) for the activation form. Spelled with _rn intrinsics so no
// contraction choice of the compiler can change the bits.
//
// Tiles: BM x 128 x BK (BM = 64 or 128, BK = 64 or 128 bytes of K), 8 warps as 2 (M) x 4 (N),
// each warp WM x 4 mma tiles of m16n8k32; a STAGES-deep cp.async pipeline; shared rows of BK
// bytes in 16-byte chunks, chunk c of row r stored at c ^ ((r >> 1) & 3) (BK 64) or c ^ (r & 7)
// (BK 128), which puts every ldmatrix phase (8 rows, one chunk column) on 8 distinct 16-byte
// bank groups. Rows >= m, columns >= n and K chunks >= k_pad are zero-filled by cp.async's
// src-size operand, so any m, n and k_pad % 16 == 0 work.


__device__ __forceinline__ u32 i8_smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void i8_cp16(u32 dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void i8_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void i8_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void i8_ldsm4(u32& r0, u32& r1, u32& r2, u32& r3, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// Not volatile: a pure function of registers, so the compiler may interleave it with the next
// fragment loads (volatile asm keeps source order among volatile statements).
__device__ __forceinline__ void i8_mma(int* c, const u32* a, u32 b0, u32 b1) {
    asm(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Byte offset of (row, 16-byte chunk) in a tile of BK-byte rows.
template <int BK>
__device__ __forceinline__ int i8_swz(int row, int chunk) {
    if (BK == 64) return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);
    return row * BK + ((chunk ^ (row & 7)) << 4);
}

// common.cuh's act_apply, kept out of line as the epilogue was measured with it.
__device__ __noinline__ float i8_act(float v, int act) { return act_apply(v, act); }

// mode: 0 scale (+ bias), 1 scale (+ bias) + resid, 2 act(scale + bias), 3 as 1 for n % 4 != 0.
template <class Y>
__device__ __forceinline__ float i8_epi(int acc, float s, float w, const float* bias, int c, const Y* rr, long long ri, int mode,
                                        int act) {
    float t = __fmul_rn((float)acc, s);
    if (mode == 2) return i8_act(__fmaf_rn(t, w, bias ? bias[c] : 0.f), act);
    // mode 3: the residual form where n % 4 != 0; dequant_epilogue_add's scalar loop compiles its
    // bias-free case to fma(t, w, resid) (its vector loop, mode 1, to a rounded product + resid)
    if (mode == 3 && !bias) return __fmaf_rn(t, w, ldf(rr, ri));
    float v = bias ? __fmaf_rn(t, w, bias[c]) : __fmul_rn(t, w);
    if (mode != 0) v = __fadd_rn(v, ldf(rr, ri));
    return v;
}

// mode 1 with the residual value already loaded (the staged epilogue's vector loads).
__device__ __forceinline__ float i8_epi_r(int acc, float s, float w, const float* bias, int c, float rv) {
    float t = __fmul_rn((float)acc, s);
    float v = bias ? __fmaf_rn(t, w, bias[c]) : __fmul_rn(t, w);
    return __fadd_rn(v, rv);
}

// WN: n8 tiles per warp (4: 2 x 4 warps of 16·WM x 32; 8: 2 x 2 warps of 16·WM x 64, the larger
// warp tile doing 4 mma per ldmatrix instead of 2.7).
template <class Y, int WM, int WN, int BN, int BK, int STAGES, bool SE>
__device__ __forceinline__ void i8gemm_k(void* y_, const signed char* __restrict__ A, const signed char* __restrict__ B,
                                         const float* __restrict__ sx, const float* __restrict__ sw,
                                         const float* __restrict__ bias, const void* resid_, int m, int n, int k_pad, int mode,
                                         int act) {
    constexpr int BM = 2 * 16 * WM;
    constexpr int NWN = BN / (8 * WN);  // warps along N
    constexpr int THREADS = 64 * NWN;
    constexpr int CH = BK / 16;  // 16-byte chunks per row
    extern __shared__ __align__(128) unsigned char i8_sm[];
    unsigned char* sA = i8_sm;                     // STAGES x BM x BK
    unsigned char* sB = i8_sm + STAGES * BM * BK;  // STAGES x 128 x BK
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / NWN, wn = warp % NWN;  // 2 x NWN warps
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int KT = (k_pad + BK - 1) / BK;

    auto load = [&](int stage, int kt) {
        const int kb = kt * BK;
        u32 a_base = i8_smem_addr(sA + stage * BM * BK);
        u32 b_base = i8_smem_addr(sB + stage * BN * BK);
#pragma unroll
        for (int i = tid; i < BM * CH; i += THREADS) {
            int r = i / CH, ch = i % CH;
            int gr = m0 + r, gk = kb + ch * 16;
            bool ok = gr < m && gk < k_pad;
            const signed char* src = ok ? A + (long long)gr * k_pad + gk : A;
            i8_cp16(a_base + i8_swz<BK>(r, ch), src, ok ? 16 : 0);
        }
#pragma unroll
        for (int i = tid; i < BN * CH; i += THREADS) {
            int r = i / CH, ch = i % CH;
            int gr = n0 + r, gk = kb + ch * 16;
            bool ok = gr < n && gk < k_pad;
            const signed char* src = ok ? B + (long long)gr * k_pad + gk : B;
            i8_cp16(b_base + i8_swz<BK>(r, ch), src, ok ? 16 : 0);
        }
    };

    int acc[WM][WN][4];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int j = 0; j < WN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load(s, s);
        i8_commit();
    }

    // ldmatrix lane roles: A x4 = (rows 0-7, k 0-15), (rows 8-15, k 0-15), (rows 0-7, k 16-31),
    // (rows 8-15, k 16-31); B x4 = two n8 tiles, each (k 0-15), (k 16-31).
    const int lm = lane >> 3, lr = lane & 7;
    const int a_row = wm * 16 * WM + lr + (lm & 1) * 8, a_ch = lm >> 1;
    const int b_row = wn * 8 * WN + lr + (lm >> 1) * 8, b_ch = lm & 1;

    for (int kt = 0; kt < KT; ++kt) {
        i8_wait<STAGES - 2>();
        __syncthreads();
        {
            int nk = kt + STAGES - 1;
            if (nk < KT) load(nk % STAGES, nk);
            i8_commit();
        }
        const int stage = kt % STAGES;
        u32 a_base = i8_smem_addr(sA + stage * BM * BK);
        u32 b_base = i8_smem_addr(sB + stage * BN * BK);
#pragma unroll
        for (int kk = 0; kk < BK / 32; ++kk) {
            u32 af[WM][4], bf[WN][2];
#pragma unroll
            for (int i = 0; i < WM; ++i)
                i8_ldsm4(af[i][0], af[i][1], af[i][2], af[i][3], a_base + i8_swz<BK>(a_row + i * 16, a_ch + kk * 2));
#pragma unroll
            for (int j = 0; j < WN / 2; ++j)
                i8_ldsm4(bf[2 * j][0], bf[2 * j][1], bf[2 * j + 1][0], bf[2 * j + 1][1],
                         b_base + i8_swz<BK>(b_row + j * 16, b_ch + kk * 2));
#pragma unroll
            for (int i = 0; i < WM; ++i)
#pragma unroll
                for (int j = 0; j < WN; ++j) i8_mma(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
    }
    i8_wait<0>();

    Y* y = (Y*)y_;
    const Y* rr = (const Y*)resid_;
    const int g = lane >> 2, t4 = lane & 3;
    if (mode == 1 && (n & 3)) mode = 3;
    static_assert(!SE || BM >= 64, "the staged epilogue works in 64-row passes");
    if (SE) {
        // staged epilogue: 64 rows of int32 accumulators at a time through shared memory (the
        // pipeline's buffers, free now), then each warp finishes whole rows, 4 columns a thread:
        // 16-byte sw/bias loads, and output (and residual) accesses a warp row wide
        constexpr int LD = BN + 4;  // int32 row stride (528 or 1040 bytes), 16-byte aligned
        int* st = (int*)i8_sm;          // 64 x LD
        const int wr0 = wm * 16 * WM;
        const bool vec = (n & 3) == 0;
#pragma unroll
        for (int pass = 0; pass < BM / 64; ++pass) {
            __syncthreads();  // the pipeline (or the previous pass) is done with shared memory
            if (wr0 >= pass * 64 && wr0 < pass * 64 + 64) {
#pragma unroll
                for (int i = 0; i < WM; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int j = 0; j < WN; ++j) {
                            int lr = wr0 - pass * 64 + i * 16 + g + h * 8;
                            int lc = wn * 8 * WN + j * 8 + t4 * 2;
                            *(int2*)(st + lr * LD + lc) = make_int2(acc[i][j][h * 2], acc[i][j][h * 2 + 1]);
                        }
            }
            __syncthreads();
            for (int e = tid; e < 64 * (BN / 4); e += THREADS) {
                int lr = e / (BN / 4), lc = (e % (BN / 4)) * 4;
                int r = m0 + pass * 64 + lr, c = n0 + lc;
                if (r >= m || c >= n) continue;
                float s = sx[r];
                long long rb = (long long)r * n;
                int4 a = *(const int4*)(st + lr * LD + lc);
                if (vec) {
                    float4 w = *(const float4*)(sw + c);
                    float4 o;
                    if (mode == 1) {
                        float4 rv = ld4(rr, (rb + c) >> 2);
                        o.x = i8_epi_r(a.x, s, w.x, bias, c, rv.x);
                        o.y = i8_epi_r(a.y, s, w.y, bias, c + 1, rv.y);
                        o.z = i8_epi_r(a.z, s, w.z, bias, c + 2, rv.z);
                        o.w = i8_epi_r(a.w, s, w.w, bias, c + 3, rv.w);
                    } else {
                        o.x = i8_epi(a.x, s, w.x, bias, c, rr, 0, mode, act);
                        o.y = i8_epi(a.y, s, w.y, bias, c + 1, rr, 0, mode, act);
                        o.z = i8_epi(a.z, s, w.z, bias, c + 2, rr, 0, mode, act);
                        o.w = i8_epi(a.w, s, w.w, bias, c + 3, rr, 0, mode, act);
                    }
                    st4(y, (rb + c) >> 2, o);
                } else {
                    int av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
                    for (int q = 0; q < 4; ++q)
                        if (c + q < n) stf(y, rb + c + q, i8_epi(av[q], s, sw[c + q], bias, c + q, rr, rb + c + q, mode, act));
                }
            }
        }
        return;
    }
    // epilogue straight from the accumulators: each thread holds (row g, cols 2t, 2t+1) and
    // (row g + 8, same cols) of every m16n8 tile
    const bool pairs = (n & 1) == 0;
#pragma unroll
    for (int i = 0; i < WM; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int r = m0 + wm * 16 * WM + i * 16 + g + h * 8;
            if (r >= m) continue;
            float s = sx[r];
            long long rb = (long long)r * n;
#pragma unroll
            for (int j = 0; j < WN; ++j) {
                int c = n0 + wn * 8 * WN + j * 8 + t4 * 2;
                if (c >= n) continue;
                int a0 = acc[i][j][h * 2], a1 = acc[i][j][h * 2 + 1];
                if (pairs) {
                    float2 w2 = *(const float2*)(sw + c);
                    float v0 = i8_epi(a0, s, w2.x, bias, c, rr, rb + c, mode, act);
                    float v1 = i8_epi(a1, s, w2.y, bias, c + 1, rr, rb + c + 1, mode, act);
                    st2(y, (rb + c) >> 1, make_float2(v0, v1));
                } else {
                    stf(y, rb + c, i8_epi(a0, s, sw[c], bias, c, rr, rb + c, mode, act));
                    if (c + 1 < n) stf(y, rb + c + 1, i8_epi(a1, s, sw[c + 1], bias, c + 1, rr, rb + c + 1, mode, act));
                }
            }
        }
    }
}

// Entry points i8gemm_bm<BM>[_n<BN>]_k<BK>s<STAGES>[_w64][_se] (BN 128 unless named); dt bit 0:
// y (and resid) f16. Dynamic shared memory: STAGES * (BM + BN) * BK bytes (above 48 KiB the
// launcher raises the function's limit). 256 threads (2 x 4 warps of 32 columns, two blocks per SM within 128 registers: one
// block's epilogue and prologue overlap the other's main loop) or, _w64, 128 threads (2 x 2 warps
// of 64 columns, 128 accumulators a thread, two blocks per SM).
#define I8GEMM_ENTRY_N(NAME, WM, WN, BN, BK, ST, SE, MINB)                                                                \
    extern "C" __global__ void __launch_bounds__(64 * (BN / (8 * WN)), MINB)                                                \
        NAME(void* y, const signed char* A, const signed char* B, const float* sx, const float* sw, const float* bias,      \
             const void* resid, int m, int n, int k_pad, int mode, int act, int dt) {                                         \
        if (dt & 1) i8gemm_k<h16, WM, WN, BN, BK, ST, SE>(y, A, B, sx, sw, bias, resid, m, n, k_pad, mode, act);            \
        else i8gemm_k<float, WM, WN, BN, BK, ST, SE>(y, A, B, sx, sw, bias, resid, m, n, k_pad, mode, act);                  \
    }
#define I8GEMM_ENTRY(NAME, WM, WN, BK, ST, SE) I8GEMM_ENTRY_N(NAME, WM, WN, 128, BK, ST, SE, 2)
I8GEMM_ENTRY(i8gemm_bm64_k64s3, 2, 4, 64, 3, false)
I8GEMM_ENTRY(i8gemm_bm128_k64s3, 4, 4, 64, 3, false)
I8GEMM_ENTRY(i8gemm_bm64_k128s4, 2, 4, 128, 4, false)
I8GEMM_ENTRY(i8gemm_bm128_k128s3, 4, 4, 128, 3, false)
I8GEMM_ENTRY(i8gemm_bm128_k64s3_w64, 4, 8, 64, 3, false)
// 32-row blocks for few rows (Parakeet clips: M = 140 gives 5 x 32 blocks at N = 4096)
I8GEMM_ENTRY(i8gemm_bm32_k64s4, 1, 4, 64, 4, false)
// the same with the staged epilogue (needs 64 x 132 x 4 = 33 KiB, within every form's buffers;
// it walks 64-row passes, so not for 32-row blocks)
I8GEMM_ENTRY(i8gemm_bm64_k64s3_se, 2, 4, 64, 3, true)
I8GEMM_ENTRY(i8gemm_bm128_k64s3_se, 4, 4, 64, 3, true)
I8GEMM_ENTRY(i8gemm_bm64_k128s4_se, 2, 4, 128, 4, true)
I8GEMM_ENTRY(i8gemm_bm128_k128s3_se, 4, 4, 128, 3, true)
I8GEMM_ENTRY(i8gemm_bm128_k64s3_w64_se, 4, 8, 64, 3, true)
// 128 x 256 blocks of 2 x 4 warps of 64 x 64 (CUTLASS's int8 shape for sm_80), one block per SM
// (the staged epilogue needs 64 x 260 x 4 = 65 KiB, within their buffers)
I8GEMM_ENTRY_N(i8gemm_bm128_n256_k64s3_se, 4, 8, 256, 64, 3, true, 1)
I8GEMM_ENTRY_N(i8gemm_bm128_n256_k128s3_se, 4, 8, 256, 128, 3, true, 1)
