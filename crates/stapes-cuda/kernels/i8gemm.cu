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

// The staged epilogue: 64 rows of int32 accumulators at a time through shared memory (the
// pipeline's buffers, free now), then each warp finishes whole rows, 4 columns a thread: 16-byte
// sw/bias loads, and output (and residual) accesses a warp row wide. acc is the warp's WM x WN
// m16n8 tiles (thread: row g, cols 2t, 2t+1 and row g + 8) at block row wr0, column wc0.
template <class Y, int WM, int WN, int BM, int BN, int THREADS>
__device__ __forceinline__ void i8_epi_staged(int (&acc)[WM][WN][4], unsigned char* smem, int wr0, int wc0, int m0, int n0, Y* y,
                                              const Y* rr, const float* __restrict__ sx, const float* __restrict__ sw,
                                              const float* __restrict__ bias, int m, int n, int mode, int act) {
    const int tid = threadIdx.x, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;
    constexpr int LD = BN + 4;  // int32 row stride (528 or 1040 bytes), 16-byte aligned
    int* st = (int*)smem;       // 64 x LD
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
                        int lc = wc0 + j * 8 + t4 * 2;
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
        i8_epi_staged<Y, WM, WN, BM, BN, THREADS>(acc, i8_sm, wm * 16 * WM, wn * 8 * WN, m0, n0, y, rr, sx, sw, bias, m, n,
                                                  mode, act);
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

// ---------------------------------------------------------------------------------------------
// The same GEMM on Hopper's warpgroup MMA (sm_90a only: this file is compiled for compute_90a
// where the device is sm_90, see kernels.rs; elsewhere the entries below are empty and the
// launcher never picks them). mma.sync tops out at 300-400 TOP/s here (ledger, round 5);
// wgmma.mma_async reads both operands from shared memory without ldmatrix. The stage layout is
// the 128-byte swizzle wgmma's shared-memory descriptors describe (chunk c of row r at
// c ^ (r & 7), i.e. i8_swz<128>; 8-row atoms of 1024 bytes, tile bases 1024-aligned); a K step
// of 32 bytes moves the descriptor's start address by 32 bytes. The accumulator fragment of
// m64nN is the m16n8 one repeated (warp w of the group: rows 16w + g and + 8, columns 8j + 2t,
// + 1), so the staged epilogue above finishes it: same int32 sums (exact), same epilogue, same
// bits as every other variant.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define I8WG_ON 1
__device__ __forceinline__ void wg_mma_n128(int* d, unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
          "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
          "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
          "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
          "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(da), "l"(db), "r"(1));
}

__device__ __forceinline__ void wg_mma_n256(int* d, unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
          "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
          "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
          "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
          "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]),
          "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]),
          "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]),
          "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]),
          "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]),
          "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]),
          "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]),
          "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]),
          "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
        : "l"(da), "l"(db), "r"(1));
}

#endif

// ---------------------------------------------------------------------------------------------
// `i8gemm_tma_*`, fed by the Tensor Memory Accelerator: warpgroup 0 is the producer (one thread issues a 2-D TMA copy of the A and B tiles of each K stage into a
// STAGES-deep ring, completion counted on the stage's `full` mbarrier); warpgroups 1 and 2 each
// compute 64 rows x BN with wgmma and release the stage on its `empty` mbarrier. TMA writes the
// 128-byte swizzle itself (the tensor maps say so, kernels' host side: i8gemm.rs) and zero-fills
// rows >= m / n and K >= k_pad, so no thread computes addresses or waits on its own copies.
// H200, stop 14: 410-870 TOP/s at the encoder shapes, above mma.sync's but below cuBLASLt's f16
// except at K = 5120 (ledger), so the q8 lane keeps its f16 copy by default (q8_mix.rs).
// LEAN (`i8gemm_tma_p*`): each consumer warpgroup keeps one stage's wgmma group in flight while
// it issues the next (wait_group 1, then it frees the stage before) instead of draining the
// tensor cores at every stage, and the producer is one warp (warp 8, after the two consumer
// warpgroups, which wgmma wants 4-warp aligned): 288 threads, so with 3 stages of 128 x 128 two
// blocks fit a SM and one block's prologue and epilogue run beside the other's main loop.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
#endif
template <class Y, int BN, int STAGES, bool LEAN>
__device__ __forceinline__ void i8tma_k(const TmaMap* ta, const TmaMap* tb, void* y_, const float* __restrict__ sx,
                                        const float* __restrict__ sw, const float* __restrict__ bias, const void* resid_, int m,
                                        int n, int k_pad, int mode, int act) {
#ifdef I8WG_ON
    constexpr int BM = 128, BK = 128, WN = BN / 8, STAGE_A = BM * BK, STAGE_B = BN * BK;
    extern __shared__ __align__(128) unsigned char i8_sm[];
    const u32 pad = (1024u - (i8_smem_addr(i8_sm) & 1023u)) & 1023u;
    unsigned char* sA = i8_sm + pad;            // STAGES x BM x BK
    unsigned char* sB = sA + STAGES * STAGE_A;  // STAGES x BN x BK
    const u32 full0 = i8_smem_addr(sB + STAGES * STAGE_B), empty0 = full0 + 8 * STAGES;
    constexpr int THREADS = LEAN ? 288 : 384;
    const int tid = threadIdx.x, warp = tid >> 5, wg = tid >> 7;
    const bool producer = LEAN ? warp == 8 : wg == 0;
    const int cw = LEAN ? wg : wg - 1;  // consumer warpgroup
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int KT = (k_pad + BK - 1) / BK;
    if (tid == 0) mbar_ring_init(full0, empty0, STAGES, 256);
    __syncthreads();

    int acc[1][WN][4];
#pragma unroll
    for (int j = 0; j < WN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[0][j][e] = 0;
    int* d = &acc[0][0][0];

    if (producer) {
        if (tid == (LEAN ? 256 : 0)) {
            for (int kt = 0; kt < KT; ++kt) {
                const int s = kt % STAGES, r = kt / STAGES;
                if (r > 0) mbar_wait(empty0 + 8 * s, (r - 1) & 1);
                mbar_expect(full0 + 8 * s, STAGE_A + STAGE_B);
                tma_load(i8_smem_addr(sA + s * STAGE_A), ta, kt * BK, m0, full0 + 8 * s);
                tma_load(i8_smem_addr(sB + s * STAGE_B), tb, kt * BK, n0, full0 + 8 * s);
            }
        }
    } else {
        for (int kt = 0; kt < KT; ++kt) {
            const int s = kt % STAGES;
            mbar_wait(full0 + 8 * s, (kt / STAGES) & 1);
            const u32 a_base = i8_smem_addr(sA + s * STAGE_A + cw * 64 * BK);
            const u32 b_base = i8_smem_addr(sB + s * STAGE_B);
            wg_hold<BN / 2>(d);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 32; ++kk) {
                if constexpr (BN == 256) wg_mma_n256(d, wg_desc(a_base + kk * 32), wg_desc(b_base + kk * 32));
                else wg_mma_n128(d, wg_desc(a_base + kk * 32), wg_desc(b_base + kk * 32));
            }
            wg_commit();
            if constexpr (LEAN) {
                wg_wait1();
                wg_hold<BN / 2>(d);
                if (kt > 0) mbar_arrive(empty0 + 8 * ((kt - 1) % STAGES));
            } else {
                wg_wait0();
                wg_hold<BN / 2>(d);
                mbar_arrive(empty0 + 8 * s);
            }
        }
        if constexpr (LEAN) {
            wg_wait0();
            wg_hold<BN / 2>(d);
        }
    }

    if (mode == 1 && (n & 3)) mode = 3;
    // the producer holds no rows (-64 matches no pass) but joins the epilogue's barriers and its
    // row-wide finishing loop
    const int wr0 = producer ? -64 : cw * 64 + (warp & 3) * 16;
    i8_epi_staged<Y, 1, WN, BM, BN, THREADS>(acc, i8_sm, wr0, 0, m0, n0, (Y*)y_, (const Y*)resid_, sx, sw, bias, m, n, mode, act);
#endif
}

// Entry points i8gemm_tma_n<BN>s<STAGES> (384 threads) and i8gemm_tma_p128s3x2 (LEAN, 288); dynamic shared memory
// STAGES * (128 + BN) * 128 + 1024 (alignment) + 256 (mbarriers) bytes; tensor maps of A (m, k_pad)
// and B (n, k_pad), uint8, boxes of 128 x 128 and BN x 128, 128-byte swizzle.
#define I8TMA_ENTRY(NAME, BN, ST, LEAN, THREADS, MINB)                                                                      \
    extern "C" __global__ void __launch_bounds__(THREADS, MINB)                                                             \
        NAME(const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tb, void* y, const float* sx, const float* sw, \
             const float* bias, const void* resid, int m, int n, int k_pad, int mode, int act, int dt) {                      \
        if (dt & 1) i8tma_k<h16, BN, ST, LEAN>(&ta, &tb, y, sx, sw, bias, resid, m, n, k_pad, mode, act);                     \
        else i8tma_k<float, BN, ST, LEAN>(&ta, &tb, y, sx, sw, bias, resid, m, n, k_pad, mode, act);                         \
    }
I8TMA_ENTRY(i8gemm_tma_n128s6, 128, 6, false, 384, 1)
I8TMA_ENTRY(i8gemm_tma_n256s4, 256, 4, false, 384, 1)
// i8gemm_tma_p128s3x2: LEAN, two blocks a SM. H200, stop 20: against tma_n128s6 it wins where
// the grid is more than a wave (turbo q|k|v 0.0325 vs 0.0326 ms, fc1 0.0342 vs 0.0427, 16
// windows' fc1 0.458 vs 0.619) and loses on a single wave (turbo out 0.0131 vs 0.0120, fc2
// 0.0259 vs 0.0225); LEAN with 6 stages (one block a SM) or 128 x 256 tiles was never the faster,
// so the pipelining alone buys nothing: it is the second resident block that does.
I8TMA_ENTRY(i8gemm_tma_p128s3x2, 128, 3, true, 288, 2)

// ---------------------------------------------------------------------------------------------
// `f8wg_*`: the q8 lane's FP8 GEMM of a few hundred rows, with its activation in the epilogue
// (src/fp8.rs `f8wg`). y (m, n) f16 = act(f16(Σ x8·w8 · sw + bias)) and, where y8 is given, the
// stored halves as e4m3 (as act_e4m3 writes them: the next FP8 GEMM's input). cuBLASLt's FP8
// kernels have no SiLU epilogue, so at a clip's 140 rows fc1 costs its GEMM plus a pass.
// Computed transposed, yᵀ = W · xᵀ: the weight's 64 rows a block are wgmma's M side and the
// rows of x (NT of them, all of a clip's where NT = 144) its N side, both K-major e4m3 tiles of
// 128 bytes of K, fed by TMA in the 128-byte swizzle into a STAGES-deep ring (the i8gemm_tma
// plumbing). Warps 0-3 compute, warp 4's first thread loads. The epilogue stages the 64 × NT
// accumulators through shared memory as f16 rows of y, so each row leaves as 16-byte stores.
// Split K (`part` given): block z takes K slice z and leaves its f32 products times sw in
// part (z, m, n), for splitk_add_ln16 to sum with the bias, the residual and the norms.
// PDL-safe (src/pdl.rs): with `early` the loading thread streams the weight's first stages
// before griddepcontrol.wait (weights are never written by the work ahead; the host clears
// `early` where the kernel ahead may be this weight's conversion), then x after it.
// e4m3 on wgmma is sm_90a only (mma.sync's e4m3 form is emulated on Hopper through f16).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void f8wg_mma_n72(float* d, unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n72k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35"
        "}, %36, %37, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
        : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void f8wg_mma_n144(float* d, unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %74, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n144k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71"
        "}, %72, %73, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
        : "l"(da), "l"(db), "r"(1));
}
#endif

// The accumulators of warp `warp` (rows 16·warp + g, + 8 of the block's 64 features; columns
// 8j + 2t, + 1 of its NT rows of x) as f16 into the staging tile st (NT rows x 64 features):
// the f16 the GEMM would store, then ACT (-1 none, else an act_apply code) on it, act_e4m3's
// order, on act_apply_fast: its ~1e-6 relative error is far below the f16 (and e4m3) rounding
// that follows, and the exact SiLU's expf and IEEE division cost fc1 1.6 µs of its 9.7 (H100,
// stop 46 call 2; one warp a scheduler leaves their latency bare). Row r's 16-byte piece c sits
// at c ^ (r & 7), so a warp's four t (rows 2t apart) store to different banks.
template <int NT, int ACT>
__device__ __forceinline__ void f8wg_stage(const float* d, h16* st, const h16* __restrict__ bias, int f0, float scale, int warp,
                                           int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int fl = warp * 16 + g + 8 * h;
        const float b = bias ? h2f(bias[f0 + fl]) : 0.f;
#pragma unroll
        for (int j = 0; j < NT / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float v = h2f(f2h(d[4 * j + 2 * h + e] * scale + b));
                if constexpr (ACT >= 0) v = act_apply_fast(v, ACT);
                const int r = 8 * j + 2 * t + e;
                st[r * 64 + (((fl >> 3) ^ (r & 7)) << 3) + (fl & 7)] = f2h(v);
            }
        }
    }
}

// The accumulators times `scale` as f32 into the staging tile st (NT rows x 64 features, 256
// bytes a row): row r's 16-byte piece c sits at c ^ (r & 15), so the four t of a warp (rows
// 2t apart) store to different banks.
template <int NT>
__device__ __forceinline__ void f8wg_stage32(const float* d, float* st, float scale, int warp, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int fl = warp * 16 + g + 8 * h;
#pragma unroll
        for (int j = 0; j < NT / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int r = 8 * j + 2 * t + e;
                st[r * 64 + ((((fl >> 2) ^ (r & 15)) << 2) | (fl & 3))] = d[4 * j + 2 * h + e] * scale;
            }
        }
    }
}

template <int NT, int STAGES>
__device__ __forceinline__ void f8wg_k(const TmaMap* tw, const TmaMap* tx, h16* __restrict__ y, unsigned char* __restrict__ y8,
                                       float* __restrict__ part, const float* __restrict__ sw, const h16* __restrict__ bias,
                                       int m, int n, int ks, int act, int early) {
#ifdef I8WG_ON
    constexpr int BK = 128, STAGE_A = 64 * BK, STAGE_B = NT * BK;
    extern __shared__ __align__(128) unsigned char f8_sm[];
    const u32 pad = (1024u - (i8_smem_addr(f8_sm) & 1023u)) & 1023u;
    unsigned char* sA = f8_sm + pad;            // STAGES x 64 x BK (weight rows)
    unsigned char* sB = sA + STAGES * STAGE_A;  // STAGES x NT x BK (rows of x)
    const u32 full0 = i8_smem_addr(sB + STAGES * STAGE_B), empty0 = full0 + 8 * STAGES;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int f0 = blockIdx.x * 64, r0 = blockIdx.y * NT;
    const int KT = ks / BK, k0 = blockIdx.z * ks;
    if (tid == 128) {
        asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)tw) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)tx) : "memory");
    }
    if (tid == 0) mbar_ring_init(full0, empty0, STAGES, 128);
    __syncthreads();
    float d[NT / 2];
#pragma unroll
    for (int i = 0; i < NT / 2; ++i) d[i] = 0.f;
    if (warp == 4) {
        if (lane == 0) {
            // the weight's stages that fit the ring before the wait (each stage's barrier
            // expects its x tile too, loaded after it)
            const int pre = early ? min(KT, STAGES) : 0;
            for (int kt = 0; kt < pre; ++kt) {
                mbar_expect(full0 + 8 * kt, STAGE_A + STAGE_B);
                tma_load(i8_smem_addr(sA + kt * STAGE_A), tw, k0 + kt * BK, f0, full0 + 8 * kt);
            }
            PDL_ENTER();
            for (int kt = 0; kt < KT; ++kt) {
                const int s = kt % STAGES, r = kt / STAGES;
                if (kt >= pre) {
                    if (r > 0) mbar_wait(empty0 + 8 * s, (r - 1) & 1);
                    mbar_expect(full0 + 8 * s, STAGE_A + STAGE_B);
                    tma_load(i8_smem_addr(sA + s * STAGE_A), tw, k0 + kt * BK, f0, full0 + 8 * s);
                }
                tma_load(i8_smem_addr(sB + s * STAGE_B), tx, k0 + kt * BK, r0, full0 + 8 * s);
            }
        } else {
            PDL_ENTER();
        }
    } else {
        // the consumers read only the ring, but write y after the wait
        PDL_ENTER();
        for (int kt = 0; kt < KT; ++kt) {
            const int s = kt % STAGES;
            mbar_wait(full0 + 8 * s, (kt / STAGES) & 1);
            const u32 a = i8_smem_addr(sA + s * STAGE_A), b = i8_smem_addr(sB + s * STAGE_B);
            wg_hold<NT / 2>(d);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 32; ++kk) {
                if constexpr (NT == 144) f8wg_mma_n144(d, wg_desc(a + kk * 32), wg_desc(b + kk * 32));
                else f8wg_mma_n72(d, wg_desc(a + kk * 32), wg_desc(b + kk * 32));
            }
            wg_commit();
            // this stage's group stays in flight while the next stage's is issued; the stage
            // before it is read by then and goes back to the producer
            wg_wait1();
            wg_hold<NT / 2>(d);
            if (kt > 0) mbar_arrive(empty0 + 8 * ((kt - 1) % STAGES));
        }
        wg_wait0();
        wg_hold<NT / 2>(d);
    }
    // every stage has been read (the consumers waited on all of them): the ring becomes the
    // staging tile, NT rows of y x 64 features in f16 (128 bytes a row)
    __syncthreads();
    if (part) {
        float* st = (float*)sA;
        if (warp < 4) f8wg_stage32<NT>(d, st, sw[0], warp, lane);
        __syncthreads();
        // NT rows x 16 pieces of 16 bytes
        for (int p = tid; p < NT * 16; p += 160) {
            const int rl = p >> 4, c = p & 15, r = r0 + rl;
            if (r >= m) continue;
            const float4 o = ((const float4*)st)[rl * 16 + (c ^ (rl & 15))];
            *(float4*)(part + ((long long)blockIdx.z * m + r) * n + f0 + c * 4) = o;
        }
        return;
    }
    h16* st = (h16*)sA;
    if (warp < 4) {
        // the activation as a constant: a runtime code would inline act_apply's every branch
        // into each of the NT / 2 values (instruction-cache misses)
        if (act == 2) f8wg_stage<NT, 2>(d, st, bias, f0, sw[0], warp, lane);
        else f8wg_stage<NT, -1>(d, st, bias, f0, sw[0], warp, lane);
    }
    __syncthreads();
    // NT rows x 8 pieces of 16 bytes
    for (int p = tid; p < NT * 8; p += 160) {
        const int rl = p >> 3, c = p & 7, r = r0 + rl;
        if (r >= m) continue;
        const uint4 o = ((const uint4*)st)[rl * 8 + (c ^ (rl & 7))];
        const long long i = (long long)r * n + f0 + c * 8;
        *(uint4*)(y + i) = o;
        if (y8) *(uint2*)(y8 + i) = e4m3x8(o);
    }
#endif
}

// Entry points f8wg_n<NT>s<STAGES>, 160 threads; dynamic shared memory
// STAGES * (64 + NT) * 128 + 1024 (alignment) + 256 (mbarriers) bytes (the staging tile, NT x
// 128 or 256 bytes, reuses the ring); tensor maps of w8 (n, k) and x8 (m, k), uint8, boxes of
// 128 x 64 and 128 x NT, 128-byte swizzle; grid (n / 64, ceil(m / NT), k / ks). ks % 128 == 0,
// n % 64 == 0; act -1 (none) or 2 (SiLU); part (k / ks, m, n) f32, or null (then y and y8).
#define F8WG_ENTRY(NAME, NT, ST)                                                                                           \
    extern "C" __global__ void __launch_bounds__(160, 1)                                                                   \
        NAME(const __grid_constant__ TmaMap tw, const __grid_constant__ TmaMap tx, h16* y, unsigned char* y8, float* part,     \
             const float* sw, const h16* bias, int m, int n, int ks, int act, int early) {                               \
        f8wg_k<NT, ST>(&tw, &tx, y, y8, part, sw, bias, m, n, ks, act, early);                                             \
    }
F8WG_ENTRY(f8wg_n72s8, 72, 8)
F8WG_ENTRY(f8wg_n144s6, 144, 6)
