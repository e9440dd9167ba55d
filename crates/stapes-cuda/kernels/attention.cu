// Attention over q (B, Tq, H*D), k/v (B, Tk, H*D): only keys j < kv_len are seen, and with
// `causal` query i sees keys j <= kv_len - Tq + i.

// ---------------------------------------------------------------------------------------------
// Fused flash-style kernel on f16 tensor cores (mma.sync m16n8k16, f32 accumulate), online
// softmax in f32: scores never leave registers. Block = 4 warps = 64 queries of one (b, h);
// keys stream through shared memory 64 at a time.

#define FA_BQ 64
#define FA_BK 64
#define FA_PAD 8

__device__ __forceinline__ void mma16816(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

// K and V arrive as f16 (B, Tk, H*D) (cast once per call by cast_f32_f16), so tiles move with
// 16-byte loads and no conversion; both stay row-major in shared memory and V's mma operand is
// read transposed by ldmatrix.trans.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
}

// STAGES = 2 double-buffers the K/V tiles with cp.async (the next tile loads while this one is
// used); D = 128 keeps one stage to stay inside 48 KB of static shared memory.
// The K/V tiles live at file scope, sized for the largest (D, STAGES) used: declared inside the
// template, each of an entry point's dtype instantiations would get its own copy.
#define FA_TILE_ELEMS (2 * FA_BK * (64 + FA_PAD) > FA_BK * (128 + FA_PAD) ? 2 * FA_BK * (64 + FA_PAD) : FA_BK * (128 + FA_PAD))
__shared__ __align__(16) h16 fa_ks[FA_TILE_ELEMS];
__shared__ __align__(16) h16 fa_vs[FA_TILE_ELEMS];

// Q and O are f32 or f16 (OT, QT); K and V always f16.
template <int D, int STAGES, class OT, class QT>
__device__ __forceinline__ void flash_attn(void* O_, const void* Q_, const h16* __restrict__ K, const h16* __restrict__ V, int Tq,
                                           int Tk, int H, int kv_len, float scale, int causal) {
    OT* __restrict__ O = (OT*)O_;
    const QT* __restrict__ Q = (const QT*)Q_;
    typedef h16 Tile[FA_BK][D + FA_PAD];
    Tile* Ks = (Tile*)fa_ks;
    Tile* Vs = (Tile*)fa_vs;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y, b = blockIdx.z;
    const int q0 = blockIdx.x * FA_BQ;
    const long long ld = (long long)H * D;  // token stride
    const QT* Qb = Q + (long long)b * Tq * ld + h * D;
    const h16* Kb = K + (long long)b * Tk * ld + h * D;
    const h16* Vb = V + (long long)b * Tk * ld + h * D;
    OT* Ob = O + (long long)b * Tq * ld + h * D;

    const int r0 = q0 + warp * 16 + g, r1 = r0 + 8;
    // exp2 instead of exp: fold log2(e) into the score scale
    const float qs = scale * 1.4426950408889634f;
    u32 qa[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        int c0 = kk * 16 + 2 * t;
        float2 x0 = make_float2(0.f, 0.f), x8 = x0, y0 = x0, y8 = x0;
        if (r0 < Tq) {
            const QT* p = Qb + (long long)r0 * ld;
            x0 = ld2(p + c0, 0);
            x8 = ld2(p + c0 + 8, 0);
        }
        if (r1 < Tq) {
            const QT* p = Qb + (long long)r1 * ld;
            y0 = ld2(p + c0, 0);
            y8 = ld2(p + c0 + 8, 0);
        }
        qa[kk][0] = pack_h2(x0.x * qs, x0.y * qs);
        qa[kk][1] = pack_h2(y0.x * qs, y0.y * qs);
        qa[kk][2] = pack_h2(x8.x * qs, x8.y * qs);
        qa[kk][3] = pack_h2(y8.x * qs, y8.y * qs);
    }

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = F_NEG_INF, m1 = F_NEG_INF, l0 = 0.f, l1 = 0.f;

    // keys the last query of this block may see
    int kend = kv_len;
    if (causal) {
        int last = min(q0 + FA_BQ - 1, Tq - 1);
        kend = min(kv_len, kv_len - Tq + last + 1);
    }
    const int lim0 = causal ? kv_len - Tq + r0 : kv_len - 1;  // last key row r0 may see
    const int lim1 = causal ? kv_len - Tq + r1 : kv_len - 1;
    // ldmatrix.x4.trans row this thread addresses: matrices (keys 0-7 | 8-15) x (d tile, d tile + 1)
    const int lm_key = (lane & 7) + ((lane >> 3) & 1) * 8, lm_col = (lane >> 4) * 8;

    auto load_tile = [&](int st, int k0) {
        for (int idx = tid; idx < FA_BK * (D / 8); idx += blockDim.x) {
            int key = idx / (D / 8), d8 = (idx - key * (D / 8)) * 8;
            int j = k0 + key;
            bool in = j < kv_len;
            long long off = in ? (long long)j * ld + d8 : 0;
            // rows past kv_len are zero-filled (src size 0), never read
            cp_async16(&Ks[st][key][d8], Kb + off, in ? 16 : 0);
            cp_async16(&Vs[st][key][d8], Vb + off, in ? 16 : 0);
        }
    };
    if (STAGES == 2 && kend > 0) {
        load_tile(0, 0);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    int it = 0;
    for (int k0 = 0; k0 < kend; k0 += FA_BK, ++it) {
        const int st = STAGES == 2 ? (it & 1) : 0;
        if (STAGES == 2) {
            if (k0 + FA_BK < kend) load_tile(st ^ 1, k0 + FA_BK);
            asm volatile("cp.async.commit_group;" ::: "memory");
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            load_tile(0, k0);
            asm volatile("cp.async.commit_group;" ::: "memory");
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();

        float s[FA_BK / 8][4];
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; ++nt) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                u32 b0 = *(const u32*)&Ks[st][nt * 8 + g][kk * 16 + 2 * t];
                u32 b1 = *(const u32*)&Ks[st][nt * 8 + g][kk * 16 + 2 * t + 8];
                mma16816(s[nt], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b0, b1);
            }
        }
        float mx0 = F_NEG_INF, mx1 = F_NEG_INF;
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; ++nt) {
            int j = k0 + nt * 8 + 2 * t;
            if (j > lim0) s[nt][0] = F_NEG_INF;
            if (j + 1 > lim0) s[nt][1] = F_NEG_INF;
            if (j > lim1) s[nt][2] = F_NEG_INF;
            if (j + 1 > lim1) s[nt][3] = F_NEG_INF;
            mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        // a row that has seen no key yet keeps m = -inf: its p must be 0, not exp2(nan)
        float base0 = mn0 == F_NEG_INF ? 0.f : mn0, base1 = mn1 == F_NEG_INF ? 0.f : mn1;
        float al0 = exp2f(m0 - base0), al1 = exp2f(m1 - base1);
        m0 = mn0;
        m1 = mn1;
        l0 *= al0;
        l1 *= al1;
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            o[i][0] *= al0; o[i][1] *= al0;
            o[i][2] *= al1; o[i][3] *= al1;
        }
        u32 pa[FA_BK / 16][4];
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; ++nt) {
            float p0 = exp2f(s[nt][0] - base0), p1 = exp2f(s[nt][1] - base0);
            float p2 = exp2f(s[nt][2] - base1), p3 = exp2f(s[nt][3] - base1);
            l0 += p0 + p1;
            l1 += p2 + p3;
            // C layout of key tiles 2j and 2j+1 is the A layout of a 16-key k-step
            int ks = nt >> 1;
            if ((nt & 1) == 0) {
                pa[ks][0] = pack_h2(p0, p1);
                pa[ks][1] = pack_h2(p2, p3);
            } else {
                pa[ks][2] = pack_h2(p0, p1);
                pa[ks][3] = pack_h2(p2, p3);
            }
        }
#pragma unroll
        for (int ks = 0; ks < FA_BK / 16; ++ks) {
#pragma unroll
            for (int dn = 0; dn < D / 8; dn += 2) {
                u32 b0, b1, b2, b3;
                u32 addr = smem_addr(&Vs[st][ks * 16 + lm_key][dn * 8 + lm_col]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                             : "r"(addr));
                mma16816(o[dn], pa[ks][0], pa[ks][1], pa[ks][2], pa[ks][3], b0, b1);
                mma16816(o[dn + 1], pa[ks][0], pa[ks][1], pa[ks][2], pa[ks][3], b2, b3);
            }
        }
        // the next iteration's loads overwrite the stage just read
        __syncthreads();
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
        int c = dn * 8 + 2 * t;
        if (r0 < Tq) st2(Ob + (long long)r0 * ld + c, 0, make_float2(o[dn][0] * inv0, o[dn][1] * inv0));
        if (r1 < Tq) st2(Ob + (long long)r1 * ld + c, 0, make_float2(o[dn][2] * inv1, o[dn][3] * inv1));
    }
}

// Register budget variants (benchmarked): the plain one lets the compiler take what it wants
// (3 blocks per SM), `_b4` caps registers for 4 resident blocks. dt bit 0: O is f16, bit 1: Q is.
#define FA_DISPATCH(D, ST)                                                                             \
    switch (dt & 3) {                                                                                  \
    case 0: flash_attn<D, ST, float, float>(O, Q, K, V, Tq, Tk, H, kv_len, scale, causal); break;     \
    case 1: flash_attn<D, ST, h16, float>(O, Q, K, V, Tq, Tk, H, kv_len, scale, causal); break;       \
    case 2: flash_attn<D, ST, float, h16>(O, Q, K, V, Tq, Tk, H, kv_len, scale, causal); break;       \
    default: flash_attn<D, ST, h16, h16>(O, Q, K, V, Tq, Tk, H, kv_len, scale, causal); break;        \
    }
extern "C" __global__ void __launch_bounds__(128) flash_attn_d64(void* O, const void* Q, const h16* K, const h16* V, int Tq,
                                                                 int Tk, int H, int kv_len, float scale, int causal, int dt) {
    PDL_ENTER();
    FA_DISPATCH(64, 2)
}
extern "C" __global__ void __launch_bounds__(128, 4) flash_attn_d64_b4(void* O, const void* Q, const h16* K, const h16* V,
                                                                       int Tq, int Tk, int H, int kv_len, float scale,
                                                                       int causal, int dt) {
    PDL_ENTER();
    FA_DISPATCH(64, 2)
}
extern "C" __global__ void __launch_bounds__(128) flash_attn_d128(void* O, const void* Q, const h16* K, const h16* V, int Tq,
                                                                  int Tk, int H, int kv_len, float scale, int causal, int dt) {
    PDL_ENTER();
    FA_DISPATCH(128, 1)
}

// ---------------------------------------------------------------------------------------------
// General kernel: attn_rows_k (common.cuh, shared with the decoder-step kernel in step.cu).
extern "C" __global__ void attn_rows(void* O, float* P, const void* Q, const void* K, const void* V, int Tq, int Tk, int H, int D,
                                     int kv_len, float scale, int causal, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, attn_rows_k, O, P, Q, K, V, Tq, Tk, H, D, kv_len, scale, causal);
}

// ---------------------------------------------------------------------------------------------
// Head size 64, FA2-style (`flash64_*`): each warp owns MT·16 query rows of one (b, h), NW warps
// per block. Q fragments stay in registers for the whole key loop, unscaled (exact for f16
// inputs): the scale, with log2(e) folded in, multiplies the f32 scores inside exp2 (one FFMA).
// K/V tiles of 64 keys × 64 dims (128-byte rows) stream through STAGES cp.async buffers with
// one barrier per tile; a row's eight 16-byte chunks sit at chunk ^ (row & 7), so every 8-lane
// phase of ldmatrix (K plain, V .trans) touches 8 distinct bank groups. P leaves the softmax as
// the f16 A fragments of the P·V mma (the accumulator layout of two adjacent 8-key tiles is the
// A layout of one 16-key step): no shared-memory round trip. Rows of Q and of K/V have their
// own strides (ldq, ldkv, in elements), so q, k and v are read in place from one packed
// (B, T, 3·H·64) tensor; O is (B, Tq, H·64). Every variant does the same arithmetic per row in
// the same order (bit-identical results); they differ in rows per warp, warps and stages.
// Heads of dh < 64 dims (dh % 8 == 0: GigaAM's 48) run as heads of 64 whose last 64 - dh dims are
// zero in Q, K and V (zero-filled loads): the scores and the kept columns are those of the real
// head, and a head of 64 takes the same instructions as before.

#define F64_TILE (64 * 64)  // f16 elements of one K or V tile
#define F64_STAGE_BYTES (2 * F64_TILE * 2)
__shared__ __align__(128) h16 f64_smem2[2 * 2 * F64_TILE];  // 32 KB
__shared__ __align__(128) h16 f64_smem3[3 * 2 * F64_TILE];  // 48 KB, the static limit

__device__ __forceinline__ void cp_async16_s(u32 saddr, const void* gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(saddr), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// Q rows as f32 pairs from either type (dt bit 1: Q is f16).
__device__ __forceinline__ float2 f64_ldq(const void* Q, long long i, bool q16) {
    return q16 ? ld2((const h16*)Q + i, 0) : ld2((const float*)Q + i, 0);
}

// The element types are runtime flags (dt), not template parameters: they only touch the
// prologue and the epilogue, and one instantiation per variant keeps NVRTC's time and the
// register budget down.
// SPLIT: blockIdx.z = b·nsplit + split; the block sees only key tiles [split·tps, split·tps + tps)
// and writes its unnormalised f32 output to PO and its (max·c, sum) to PML, rows ordered
// (b, split, h, row); flash64_combine merges the splits.
template <int NW, int MT, int STAGES, bool SPLIT>
__device__ __forceinline__ void flash64(h16* smem, void* O, const void* Q, const h16* __restrict__ K,
                                        const h16* __restrict__ V, int Tq, int Tk, int H, int kv_len, int ldq, int ldkv,
                                        float scale, int causal, int dt, float* PO, float* PML, int nsplit, int tps,
                                        int dh) {
    const bool o16 = dt & 1, q16 = (dt >> 1) & 1;
    constexpr int BM = NW * MT * 16;  // query rows per block
    constexpr int NT = NW * 32;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3, r8 = lane & 7;
    const int h = blockIdx.y, b = SPLIT ? blockIdx.z / nsplit : blockIdx.z;
    const int sp = SPLIT ? blockIdx.z - b * nsplit : 0;
    const int q0 = blockIdx.x * BM;
    const int qw = q0 + warp * MT * 16;  // this warp's first row
    const long long ldo = (long long)H * dh;
    const long long qbase = (long long)b * Tq * ldq + h * dh;  // elements of Q
    const long long obase = (long long)b * Tq * ldo + h * dh;  // elements of O

    // a negative scale flips q (exact) so that c > 0 and the running max stays a max
    const float sgn = scale < 0.f ? -1.f : 1.f;
    const float c = fmaxf(fabsf(scale), 1e-30f) * 1.4426950408889634f;

    u32 qa[MT][4][4];  // A fragments, (16 rows × 16 dims) per k-step
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int ra = qw + mt * 16 + g, rb = ra + 8;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const int col = kk * 16 + 2 * t;
            // dims col, col + 1 lie in one 8-dim group, as do col + 8, col + 9
            const bool c0 = col < dh, c8 = col + 8 < dh;
            float2 x0 = make_float2(0.f, 0.f), x8 = x0, y0 = x0, y8 = x0;
            if (ra < Tq) {
                const long long i = qbase + (long long)ra * ldq + col;
                if (c0) x0 = f64_ldq(Q, i, q16);
                if (c8) x8 = f64_ldq(Q, i + 8, q16);
            }
            if (rb < Tq) {
                const long long i = qbase + (long long)rb * ldq + col;
                if (c0) y0 = f64_ldq(Q, i, q16);
                if (c8) y8 = f64_ldq(Q, i + 8, q16);
            }
            qa[mt][kk][0] = pack_h2_x2(x0.x * sgn, x0.y * sgn);
            qa[mt][kk][1] = pack_h2_x2(y0.x * sgn, y0.y * sgn);
            qa[mt][kk][2] = pack_h2_x2(x8.x * sgn, x8.y * sgn);
            qa[mt][kk][3] = pack_h2_x2(y8.x * sgn, y8.y * sgn);
        }
    }

    // keys the block's last row may see
    int kend = kv_len;
    if (causal) {
        const int last = min(q0 + BM - 1, Tq - 1);
        kend = min(kv_len, kv_len - Tq + last + 1);
    }
    const int ntiles_all = kend > 0 ? (kend + 63) >> 6 : 0;
    // this block's key tiles: [t0, t0 + ntiles)
    const int t0 = SPLIT ? sp * tps : 0;
    const int ntiles = SPLIT ? max(0, min(ntiles_all, t0 + tps) - t0) : ntiles_all;

    const u32 sbase = smem_addr(smem);
    // This thread's cp.async slots: rows lrow + i·NT/8 of a tile, 16-byte chunk lch. NT/8 is a
    // multiple of 8, so every slot has the same swizzle and sits i·NT/8 rows further on in
    // shared memory and global memory alike; kp/vp walk down 64 rows per tile.
    const int lrow = tid >> 3, lch = tid & 7;
    const u32 lso = lrow * 128 + ((lch ^ (lrow & 7)) << 4);
    // this thread's chunk is a real dim group of the head, else zero-filled
    const bool ch_in = lch * 8 < dh;
    const h16* kp = K + (long long)b * Tk * ldkv + h * dh + (long long)lrow * ldkv + lch * 8;
    const h16* vp = V + (long long)b * Tk * ldkv + h * dh + (long long)lrow * ldkv + lch * 8;
    const long long tstep = 64LL * ldkv;
    auto load_tile = [&](int tile, int stage) {
        const u32 kdst = sbase + stage * F64_STAGE_BYTES + lso, vdst = kdst + F64_TILE * 2;
        const int rows_in = kv_len - tile * 64 - lrow;  // slot i is a real key when i·NT/8 < this
        const h16* kt = kp + tile * tstep;
        const h16* vt = vp + tile * tstep;
#pragma unroll
        for (int i = 0; i < 512 / NT; ++i) {
            const bool in = ch_in && i * (NT / 8) < rows_in;
            const int off = i * (NT / 8) * ldkv;
            // rows past kv_len (masked) and dims past dh are zero-filled (src size 0) from a
            // valid address
            cp_async16_s(kdst + i * (NT / 8) * 128, in ? kt + off : K, in ? 16 : 0);
            cp_async16_s(vdst + i * (NT / 8) * 128, in ? vt + off : V, in ? 16 : 0);
        }
    };

    // this lane's ldmatrix byte offsets inside a tile. K (plain): key nt·8 + r8, chunk
    // half·4 + lane/8 (dims 0-31 | 32-63: k-steps 2·half, 2·half + 1). V (.trans): key
    // ks·16 + r8 + 8·bit3(lane), chunk 2·dp + lane/16 (dim tiles 2·dp, 2·dp + 1).
    const u32 kofs0 = r8 * 128 + ((((u32)lane >> 3) ^ r8) << 4);
    const u32 kofs1 = kofs0 ^ 64u;
    const u32 vrow = (r8 + ((lane >> 3) & 1) * 8) * 128, vc0 = ((u32)lane >> 4) ^ r8;

    float o[MT][8][4];
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int i = 0; i < 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
        m[mt][0] = m[mt][1] = F_NEG_INF;
        l[mt][0] = l[mt][1] = 0.f;
    }
    // warps whose rows all lie past Tq (the last block) only help load tiles
    const bool live = qw < Tq;

#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
        if (i < ntiles) load_tile(t0 + i, i);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    int st_use = 0, st_load = STAGES - 1;  // stage read this iteration, stage the next load fills
    for (int it = 0; it < ntiles; ++it) {
        // tile `it` has landed once at most STAGES - 2 newer groups are pending; the barrier
        // also tells that every warp is done with the stage the next load overwrites
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2) : "memory");
        __syncthreads();
        if (it + STAGES - 1 < ntiles) load_tile(t0 + it + STAGES - 1, st_load);
        asm volatile("cp.async.commit_group;" ::: "memory");
        const u32 kb = sbase + st_use * F64_STAGE_BYTES, vb = kb + F64_TILE * 2;
        st_use = st_use == STAGES - 1 ? 0 : st_use + 1;
        st_load = st_load == STAGES - 1 ? 0 : st_load + 1;
        if (!live) continue;

        const int k0 = (t0 + it) * 64;
        // causal: tiles past the last key of this warp's last row are skipped
        if (causal && k0 > kv_len - Tq + qw + MT * 16 - 1) continue;
        float s[MT][8][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                u32 b0, b1, b2, b3;
                ldsm_x4(kb + nt * 1024 + (hf ? kofs1 : kofs0), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const u32* a = qa[mt][2 * hf];
                    const u32* a2 = qa[mt][2 * hf + 1];
                    mma16816(s[mt][nt], a[0], a[1], a[2], a[3], b0, b1);
                    mma16816(s[mt][nt], a2[0], a2[1], a2[2], a2[3], b2, b3);
                }
            }
        }
        // only the tail tile (kv_len) and tiles crossing the causal diagonal need a mask
        if (k0 + 64 > kv_len || (causal && k0 + 63 > kv_len - Tq + qw)) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int ra = qw + mt * 16 + g;
                const int lima = causal ? min(kv_len - 1, kv_len - Tq + ra) : kv_len - 1;
                const int limb = causal ? min(kv_len - 1, kv_len - Tq + ra + 8) : kv_len - 1;
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
                    const int j = k0 + nt * 8 + 2 * t;
                    if (j > lima) s[mt][nt][0] = F_NEG_INF;
                    if (j + 1 > lima) s[mt][nt][1] = F_NEG_INF;
                    if (j > limb) s[mt][nt][2] = F_NEG_INF;
                    if (j + 1 > limb) s[mt][nt][3] = F_NEG_INF;
                }
            }
        }
        u32 pa[MT][4][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float mx0 = F_NEG_INF, mx1 = F_NEG_INF;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                mx0 = fmaxf(mx0, fmaxf(s[mt][nt][0], s[mt][nt][1]));
                mx1 = fmaxf(mx1, fmaxf(s[mt][nt][2], s[mt][nt][3]));
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float mn0 = fmaxf(m[mt][0], mx0), mn1 = fmaxf(m[mt][1], mx1);
            // a row that has seen no key yet keeps m = -inf: its p must be 0, not exp2(nan)
            const float mb0 = mn0 == F_NEG_INF ? 0.f : mn0 * c, mb1 = mn1 == F_NEG_INF ? 0.f : mn1 * c;
            // an unchanged max rescales by exactly 1 (exp2 of the rounding residual may not be):
            // a tile a row sees no key of is then a no-op, and variants that visit different
            // numbers of such tiles (causal, block size) stay bit-identical
            const float al0 = mn0 == m[mt][0] ? 1.f : ex2_approx(fmaf(m[mt][0], c, -mb0));
            const float al1 = mn1 == m[mt][1] ? 1.f : ex2_approx(fmaf(m[mt][1], c, -mb1));
            m[mt][0] = mn0;
            m[mt][1] = mn1;
            float ls0 = 0.f, ls1 = 0.f;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                const float p0 = ex2_approx(fmaf(s[mt][nt][0], c, -mb0)), p1 = ex2_approx(fmaf(s[mt][nt][1], c, -mb0));
                const float p2 = ex2_approx(fmaf(s[mt][nt][2], c, -mb1)), p3 = ex2_approx(fmaf(s[mt][nt][3], c, -mb1));
                ls0 += p0 + p1;
                ls1 += p2 + p3;
                pa[mt][nt >> 1][(nt & 1) * 2] = pack_h2_x2(p0, p1);
                pa[mt][nt >> 1][(nt & 1) * 2 + 1] = pack_h2_x2(p2, p3);
            }
            // explicit fmaf: the same rounding in every variant, whatever the compiler contracts
            l[mt][0] = fmaf(l[mt][0], al0, ls0);
            l[mt][1] = fmaf(l[mt][1], al1, ls1);
#pragma unroll
            for (int dn = 0; dn < 8; ++dn) {
                o[mt][dn][0] *= al0;
                o[mt][dn][1] *= al0;
                o[mt][dn][2] *= al1;
                o[mt][dn][3] *= al1;
            }
        }
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
            for (int dp = 0; dp < 4; ++dp) {
                u32 b0, b1, b2, b3;
                ldsm_x4_t(vb + ks * 2048 + vrow + (((u32)(2 * dp) ^ vc0) << 4), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const u32* a = pa[mt][ks];
                    mma16816(o[mt][2 * dp], a[0], a[1], a[2], a[3], b0, b1);
                    mma16816(o[mt][2 * dp + 1], a[0], a[1], a[2], a[3], b2, b3);
                }
            }
        }
    }
    if (!live) return;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        float l0 = l[mt][0], l1 = l[mt][1];
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        if (SPLIT) {
            const int ra = qw + mt * 16 + g, rb = ra + 8;
            const long long pa_ = (((long long)blockIdx.z * H + h) * Tq) + ra;  // z = b·nsplit + split
            // the max in exp2 units (the scale folded in); -inf: this split saw no key of the row
            const float ma = m[mt][0] == F_NEG_INF ? F_NEG_INF : m[mt][0] * c;
            const float mb = m[mt][1] == F_NEG_INF ? F_NEG_INF : m[mt][1] * c;
#pragma unroll
            for (int dn = 0; dn < 8; ++dn) {
                const int col = dn * 8 + 2 * t;
                if (ra < Tq) st2(PO + pa_ * 64 + col, 0, make_float2(o[mt][dn][0], o[mt][dn][1]));
                if (rb < Tq) st2(PO + (pa_ + 8) * 64 + col, 0, make_float2(o[mt][dn][2], o[mt][dn][3]));
            }
            if (t == 0) {
                if (ra < Tq) st2(PML + pa_ * 2, 0, make_float2(ma, l0));
                if (rb < Tq) st2(PML + (pa_ + 8) * 2, 0, make_float2(mb, l1));
            }
            continue;
        }
        const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
        const int ra = qw + mt * 16 + g, rb = ra + 8;
#pragma unroll
        for (int dn = 0; dn < 8; ++dn) {
            const int col = dn * 8 + 2 * t;
            if (col >= dh) break;
            const float2 outa = make_float2(o[mt][dn][0] * inv0, o[mt][dn][1] * inv0);
            const float2 outb = make_float2(o[mt][dn][2] * inv1, o[mt][dn][3] * inv1);
            const long long ia = obase + (long long)ra * ldo + col, ib = ia + 8 * ldo;
            if (o16) {
                if (ra < Tq) st2((h16*)O + ia, 0, outa);
                if (rb < Tq) st2((h16*)O + ib, 0, outb);
            } else {
                if (ra < Tq) st2((float*)O + ia, 0, outa);
                if (rb < Tq) st2((float*)O + ib, 0, outb);
            }
        }
    }
}

// dt bit 0: O is f16, bit 1: Q is. K and V are always f16.
#define F64_ENTRY(NAME, NW, MT, ST, SM, MINB)                                                                             \
    extern "C" __global__ void __launch_bounds__(NW * 32, MINB)                                                         \
        NAME(void* O, const void* Q, const h16* K, const h16* V, int Tq, int Tk, int H, int kv_len, int ldq, int ldkv, \
             float scale, int causal, int dt, int dh) {                                                                  \
        PDL_ENTER();                                                                                                     \
        flash64<NW, MT, ST, false>(SM, O, Q, K, V, Tq, Tk, H, kv_len, ldq, ldkv, scale, causal, dt, nullptr, nullptr, 1, 0, \
                                   dh);                                                                                  \
    }
// name: warps, 16-row m-tiles per warp, stages (min blocks per SM for the register budget)
F64_ENTRY(flash64_w8m1s2, 8, 1, 2, f64_smem2, 2)
F64_ENTRY(flash64_w8m1s3, 8, 1, 3, f64_smem3, 2)
F64_ENTRY(flash64_w4m2s2, 4, 2, 2, f64_smem2, 2)
F64_ENTRY(flash64_w4m2s3, 4, 2, 3, f64_smem3, 2)
F64_ENTRY(flash64_w4m1s2, 4, 1, 2, f64_smem2, 4)
F64_ENTRY(flash64_w4m1s3, 4, 1, 3, f64_smem3, 4)
F64_ENTRY(flash64_w8m2s2, 8, 2, 2, f64_smem2, 1)
F64_ENTRY(flash64_w8m2s3, 8, 2, 3, f64_smem3, 1)

// ---------------------------------------------------------------------------------------------
// Split keys (`flash64s_*`, for shapes with too few (b, h, query tile) blocks to fill the GPU):
// grid.z = B·nsplit, each block runs the w4m2s2 kernel over its tps key tiles and leaves partial
// results; `flash64_combine` then merges them. blockIdx.z = b·nsplit + split, so the partial
// rows are ordered (b, split, h, row): PO (B·nsplit·H·Tq, 64) f32, PML (B·nsplit·H·Tq, 2).
extern "C" __global__ void __launch_bounds__(128, 2)
    flash64s_w4m2s2(float* PO, float* PML, const void* Q, const h16* K, const h16* V, int Tq, int Tk, int H, int kv_len,
                    int ldq, int ldkv, float scale, int causal, int dt, int nsplit, int tps, int dh) {
    PDL_ENTER();
    // dt bit 1: Q is f16 (the output here is always the f32 partials, 64 columns a row whatever dh)
    flash64<4, 2, 2, true>(f64_smem2, nullptr, Q, K, V, Tq, Tk, H, kv_len, ldq, ldkv, scale, causal, dt & 2, PO, PML, nsplit,
                           tps, dh);
}

// One warp per output row (b, h, row), two columns per lane: O = Σ_s 2^(m_s - M)·o_s / Σ_s 2^(m_s - M)·l_s
// over the splits s, M = max_s m_s; a row no split saw a key of is 0, as in the unsplit kernel.
// dt bit 0: O is f16. O is (B, Tq, H·dh), the partials' first dh columns. Every split's (max, sum) and partial columns are
// loaded before any is used (up to COMBINE_MAX, the host's MAX_SPLIT), so a warp waits for
// memory once instead of once per split and pass (H200 under ncu, tiny's 3-way combine: 9.0 µs
// in stop 19, 6.7-7.2 in stop 20); the arithmetic is the same operations in the same split
// order, so the same bits.
#define COMBINE_MAX 8
extern "C" __global__ void flash64_combine(void* O, const float* __restrict__ PO, const float* __restrict__ PML, int B, int Tq,
                                           int H, int nsplit, int dt, int dh) {
    PDL_ENTER();
    const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    const long long per_b = (long long)H * Tq;
    if (w >= (long long)B * per_b) return;
    const int b = (int)(w / per_b);
    const long long hr = w - b * per_b;  // h·Tq + row
    // partial row of split s: ((b·nsplit + s)·H + h)·Tq + row
    const long long r0 = (long long)b * nsplit * per_b + hr;
    float2 ml[COMBINE_MAX], x[COMBINE_MAX];
#pragma unroll
    for (int s = 0; s < COMBINE_MAX; ++s) {
        if (s < nsplit) {
            const long long r = r0 + s * per_b;
            ml[s] = ld2(PML, r);
            x[s] = ld2(PO + r * 64, lane);
        }
    }
    float mx = F_NEG_INF;
#pragma unroll
    for (int s = 0; s < COMBINE_MAX; ++s)
        if (s < nsplit) mx = fmaxf(mx, ml[s].x);
    float2 acc = make_float2(0.f, 0.f);
    float sum = 0.f;
    if (mx != F_NEG_INF) {
#pragma unroll
        for (int s = 0; s < COMBINE_MAX; ++s) {
            if (s >= nsplit || ml[s].x == F_NEG_INF) continue;
            const float a = ex2_approx(ml[s].x - mx);
            sum = fmaf(ml[s].y, a, sum);
            acc.x = fmaf(x[s].x, a, acc.x);
            acc.y = fmaf(x[s].y, a, acc.y);
        }
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int h = (int)(hr / Tq), row = (int)(hr - (long long)h * Tq);
    const long long oi = ((long long)b * Tq + row) * H * dh + h * dh;  // element of O
    const float2 v = make_float2(acc.x * inv, acc.y * inv);
    if (2 * lane >= dh) return;
    if (dt & 1) st2((h16*)O + oi, lane, v);
    else st2((float*)O + oi, lane, v);
}
