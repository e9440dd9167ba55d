// Attention with head size 64 on Hopper's warpgroup MMA (`awg64_*`): the flash64 kernels'
// arithmetic (attention.cu) with wgmma.mma_async in place of mma.sync and ldmatrix. Compiled for
// compute_90a where the device is sm_90 (kernels.rs); elsewhere the entries are empty and the
// backend never picks them (attention.rs).
//
// Block = two warpgroups of 64 query rows of one (b, h) = 128 rows. K and V tiles of 64 keys x
// 64 dims (128-byte rows, 8 KB each) come by TMA into a STAGES-deep ring in the 128-byte swizzle
// (the tensor maps say so: attention.rs), zero-filled past kv_len; thread 0 issues the copies
// (the first STAGES up front, then each stage again once both warpgroups released it on its
// `empty` mbarrier). Per tile and warpgroup: S (64 x 64, f32) = Q · K^T as four m64n64k16
// wgmmas with Q's A fragments in registers (loaded once, as flash64's) and K as a K-major
// shared-memory operand; the online softmax in registers (flash64's exact steps: ex2.approx of
// s·c - m·c, explicit fmaf, an unchanged max rescales by 1); O += P · V as four more wgmmas with
// P's f16 A fragments in registers (the accumulator layout of S is the A layout of P, as for
// mma.sync) and V as an MN-major operand (the instruction's transpose bit). The accumulator of
// m64n64 is mma.sync's m16n8 one repeated: warp w of the group holds rows 16w + g and + 8,
// columns 8j + 2t and + 1, so the epilogue is flash64's too.
//
// SPLIT: blockIdx.z = b·nsplit + split, the block sees key tiles [split·tps, split·tps + tps)
// and leaves unnormalised partials for flash64_combine (attention.cu), as flash64s_w4m2s2 does.

#define AWG_TILE 8192                // bytes of one K or V tile (64 keys x 64 f16)
#define AWG_STAGE (2 * AWG_TILE)     // K then V

#if defined(SM90A_ON)
__device__ __forceinline__ void awg_mma_b(float* d, const u32* a, unsigned long long db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
__device__ __forceinline__ void awg_mma_bt(float* d, const u32* a, unsigned long long db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

#endif

template <int STAGES, bool SPLIT>
__device__ __forceinline__ void awg64(const TmaMap* tk, const TmaMap* tv, void* O, const void* Q, int Tq, int H, int kv_len,
                                      int ldq, float scale, int dt, float* PO, float* PML, int nsplit, int tps,
                                      unsigned char* O8, const float* __restrict__ qkv_bias) {
#if defined(SM90A_ON)
    extern __shared__ __align__(1024) unsigned char awg_sm[];
    const u32 sm0 = (u32)__cvta_generic_to_shared(awg_sm);
    const u32 base = (sm0 + 1023u) & ~1023u;  // swizzled tiles start 1024-aligned
    const u32 full0 = base + STAGES * AWG_STAGE, empty0 = full0 + 8 * STAGES;
    const bool o16 = dt & 1, q16 = (dt >> 1) & 1;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y, b = SPLIT ? blockIdx.z / nsplit : blockIdx.z;
    const int sp = SPLIT ? blockIdx.z - b * nsplit : 0;
    const int qw = blockIdx.x * 128 + warp * 16;  // this warp's first row (warps 0-3: group 0)
    const long long ldo = (long long)H * 64;
    const long long qbase = (long long)b * Tq * ldq + h * 64;
    const long long obase = (long long)b * Tq * ldo + h * 64;

    const int ntiles_all = kv_len > 0 ? (kv_len + 63) >> 6 : 0;
    const int t0 = SPLIT ? sp * tps : 0;
    const int ntiles = SPLIT ? max(0, min(ntiles_all, t0 + tps) - t0) : ntiles_all;

    if (tid == 0) mbar_ring_init(full0, empty0, STAGES, 256);
    __syncthreads();
    PDL_ENTER();
    auto load = [&](int i) {  // key tile t0 + i into its stage
        const u32 st = base + (i % STAGES) * AWG_STAGE, bar = full0 + 8 * (i % STAGES);
        mbar_expect(bar, AWG_STAGE);
        tma_load4(st, tk, 0, h, (t0 + i) * 64, b, bar);
        tma_load4(st + AWG_TILE, tv, 0, h, (t0 + i) * 64, b, bar);
    };
    if (tid == 0)
        for (int i = 0; i < min(STAGES, ntiles); ++i) load(i);
    __syncwarp();

    const float sgn = scale < 0.f ? -1.f : 1.f;
    const float c = fmaxf(fabsf(scale), 1e-30f) * 1.4426950408889634f;
    u32 qa[4][4];
    {
        const int ra = qw + g, rb = ra + 8;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const int col = kk * 16 + 2 * t;
            float2 x0 = make_float2(0.f, 0.f), x8 = x0, y0 = x0, y8 = x0;
            // q's bias, where the projection left it to this kernel
            float2 b0 = make_float2(0.f, 0.f), b8 = b0;
            if (qkv_bias) {
                b0 = ld2(qkv_bias + h * 64 + col, 0);
                b8 = ld2(qkv_bias + h * 64 + col + 8, 0);
            }
            if (ra < Tq) {
                const long long i = qbase + (long long)ra * ldq + col;
                x0 = q16 ? ld2((const h16*)Q + i, 0) : ld2((const float*)Q + i, 0);
                x8 = q16 ? ld2((const h16*)Q + i + 8, 0) : ld2((const float*)Q + i + 8, 0);
                x0 = make_float2(x0.x + b0.x, x0.y + b0.y);
                x8 = make_float2(x8.x + b8.x, x8.y + b8.y);
            }
            if (rb < Tq) {
                const long long i = qbase + (long long)rb * ldq + col;
                y0 = q16 ? ld2((const h16*)Q + i, 0) : ld2((const float*)Q + i, 0);
                y8 = q16 ? ld2((const h16*)Q + i + 8, 0) : ld2((const float*)Q + i + 8, 0);
                y0 = make_float2(y0.x + b0.x, y0.y + b0.y);
                y8 = make_float2(y8.x + b8.x, y8.y + b8.y);
            }
            qa[kk][0] = pack_h2_x2(x0.x * sgn, x0.y * sgn);
            qa[kk][1] = pack_h2_x2(y0.x * sgn, y0.y * sgn);
            qa[kk][2] = pack_h2_x2(x8.x * sgn, x8.y * sgn);
            qa[kk][3] = pack_h2_x2(y8.x * sgn, y8.y * sgn);
        }
    }

    float o[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) o[i] = 0.f;
    float m0 = F_NEG_INF, m1 = F_NEG_INF, l0 = 0.f, l1 = 0.f;

    // S of tile `it` is issued one step ahead: P·V of tile `it` and S of tile `it + 1` go to the
    // tensor cores back to back, with one wait between them and the next softmax
    float sc[32];
    auto issue_s = [&](int it) {
        const u32 kb = base + (it % STAGES) * AWG_STAGE;
        mbar_wait(full0 + 8 * (it % STAGES), (it / STAGES) & 1);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) awg_mma_b(sc, qa[kk], wg_desc(kb + kk * 32), kk);
        wg_commit();
    };
    if (ntiles > 0) issue_s(0);
    wg_wait0();
    wg_hold<32>(sc);
    for (int it = 0; it < ntiles; ++it) {
        const int s = it % STAGES;
        const int k0 = (t0 + it) * 64;
        if (k0 + 64 > kv_len) {
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                const int j = k0 + nt * 8 + 2 * t;
                if (j >= kv_len) sc[nt * 4 + 0] = sc[nt * 4 + 2] = F_NEG_INF;
                if (j + 1 >= kv_len) sc[nt * 4 + 1] = sc[nt * 4 + 3] = F_NEG_INF;
            }
        }
        float mx0 = F_NEG_INF, mx1 = F_NEG_INF;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            mx0 = fmaxf(mx0, fmaxf(sc[nt * 4 + 0], sc[nt * 4 + 1]));
            mx1 = fmaxf(mx1, fmaxf(sc[nt * 4 + 2], sc[nt * 4 + 3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        // a row that has seen no key yet keeps m = -inf: its p must be 0, not exp2(nan)
        const float mb0 = mn0 == F_NEG_INF ? 0.f : mn0 * c, mb1 = mn1 == F_NEG_INF ? 0.f : mn1 * c;
        // an unchanged max rescales by exactly 1, as in flash64 (same bits)
        const float al0 = mn0 == m0 ? 1.f : ex2_approx(fmaf(m0, c, -mb0));
        const float al1 = mn1 == m1 ? 1.f : ex2_approx(fmaf(m1, c, -mb1));
        m0 = mn0;
        m1 = mn1;
        u32 pa[4][4];
        float ls0 = 0.f, ls1 = 0.f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            const float p0 = ex2_approx(fmaf(sc[nt * 4 + 0], c, -mb0)), p1 = ex2_approx(fmaf(sc[nt * 4 + 1], c, -mb0));
            const float p2 = ex2_approx(fmaf(sc[nt * 4 + 2], c, -mb1)), p3 = ex2_approx(fmaf(sc[nt * 4 + 3], c, -mb1));
            ls0 += p0 + p1;
            ls1 += p2 + p3;
            pa[nt >> 1][(nt & 1) * 2] = pack_h2_x2(p0, p1);
            pa[nt >> 1][(nt & 1) * 2 + 1] = pack_h2_x2(p2, p3);
        }
        l0 = fmaf(l0, al0, ls0);
        l1 = fmaf(l1, al1, ls1);
#pragma unroll
        for (int dn = 0; dn < 8; ++dn) {
            o[dn * 4 + 0] *= al0;
            o[dn * 4 + 1] *= al0;
            o[dn * 4 + 2] *= al1;
            o[dn * 4 + 3] *= al1;
        }
        wg_hold<32>(sc);
        wg_fence();
        const u32 vb = base + s * AWG_STAGE + AWG_TILE;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) awg_mma_bt(o, pa[ks], wg_desc(vb + ks * 2048), 1);
        wg_commit();
        if (it + 1 < ntiles) issue_s(it + 1);
        wg_wait0();
        wg_hold<32>(o);
        wg_hold<32>(sc);
        mbar_arrive(empty0 + 8 * s);
        // refill the stage the previous tile used, once both groups are done with it (this
        // group is; the other one is rarely a whole tile behind)
        if (tid == 0 && it > 0 && it - 1 + STAGES < ntiles) {
            mbar_wait(empty0 + 8 * ((it - 1) % STAGES), ((it - 1) / STAGES) & 1);
            load(it - 1 + STAGES);
        }
        __syncwarp();  // warp 0 converged again before the group's next wgmma
    }

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const int ra = qw + g, rb = ra + 8;
    if (SPLIT) {
        const long long pr = (((long long)blockIdx.z * H + h) * Tq) + ra;  // z = b·nsplit + split
        const float ma = m0 == F_NEG_INF ? F_NEG_INF : m0 * c;
        const float mb = m1 == F_NEG_INF ? F_NEG_INF : m1 * c;
#pragma unroll
        for (int dn = 0; dn < 8; ++dn) {
            const int col = dn * 8 + 2 * t;
            if (ra < Tq) st2(PO + pr * 64 + col, 0, make_float2(o[dn * 4 + 0], o[dn * 4 + 1]));
            if (rb < Tq) st2(PO + (pr + 8) * 64 + col, 0, make_float2(o[dn * 4 + 2], o[dn * 4 + 3]));
        }
        if (t == 0) {
            if (ra < Tq) st2(PML + pr * 2, 0, make_float2(ma, l0));
            if (rb < Tq) st2(PML + (pr + 8) * 2, 0, make_float2(mb, l1));
        }
        return;
    }
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
    for (int dn = 0; dn < 8; ++dn) {
        const int col = dn * 8 + 2 * t;
        float2 outa = make_float2(o[dn * 4 + 0] * inv0, o[dn * 4 + 1] * inv0);
        float2 outb = make_float2(o[dn * 4 + 2] * inv1, o[dn * 4 + 3] * inv1);
        if (qkv_bias) {  // v's bias after the weights that sum to 1: P·(V + 1·bᵀ) = P·V + b
            const float2 bv = ld2(qkv_bias + 2 * H * 64 + h * 64 + col, 0);
            outa = make_float2(outa.x + bv.x, outa.y + bv.y);
            outb = make_float2(outb.x + bv.x, outb.y + bv.y);
        }
        const long long ia = obase + (long long)ra * ldo + col, ib = ia + 8 * ldo;
        if (o16) {
            if (!(dt & 4)) {
                if (ra < Tq) st2((h16*)O + ia, 0, outa);
                if (rb < Tq) st2((h16*)O + ib, 0, outb);
            }
            // the stored halves as e4m3 too, for the FP8 output projection (src/fp8.rs)
            if (O8) {
                const float2 ha = make_float2(h2f(f2h(outa.x)), h2f(f2h(outa.y)));
                const float2 hb = make_float2(h2f(f2h(outb.x)), h2f(f2h(outb.y)));
                if (ra < Tq) *(unsigned short*)(O8 + ia) = e4m3x2(ha.x, ha.y);
                if (rb < Tq) *(unsigned short*)(O8 + ib) = e4m3x2(hb.x, hb.y);
            }
        } else {
            if (ra < Tq) st2((float*)O + ia, 0, outa);
            if (rb < Tq) st2((float*)O + ib, 0, outb);
        }
    }
#endif
}

// Entry points: 256 threads; dynamic shared memory STAGES·16 KB + 1024 (alignment) + 16·STAGES
// (mbarriers); tensor maps of K and V (attention.rs: 4-D (64, H, kv_len, B), boxes of
// 64 x 1 x 64 x 1, 128-byte swizzle). dt bit 0: O is f16, bit 1: Q is. O8 (whole form, f16 O):
// null, or O's values also as e4m3 in O's layout (one byte a value); dt bit 2 with O8: the e4m3
// values only, O is not written (its one reader is the FP8 output projection, src/fp8.rs).
// qkv_bias (whole form): null, or the (3 · H · 64) f32 bias the q|k|v projection left out: q's
// part is added to Q as it is loaded, v's to the output (the weights of a row sum to 1), and k's
// is dropped (it adds q·b_k to every score of a row, which the softmax cancels).
// The two forms the backend launches (attention.rs: WG_UNSPLIT, WG_SPLIT): 4 stages whole,
// 3 split.
extern "C" __global__ void __launch_bounds__(256, 2)
    awg64_s4(const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv, void* O, const void* Q, int Tq, int H,
             int kv_len, int ldq, float scale, int dt, unsigned char* O8, const float* qkv_bias) {
    awg64<4, false>(&tk, &tv, O, Q, Tq, H, kv_len, ldq, scale, dt, nullptr, nullptr, 1, 0, O8, qkv_bias);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    awg64s_s3(const __grid_constant__ TmaMap tk, const __grid_constant__ TmaMap tv, float* PO, float* PML, const void* Q,
              int Tq, int H, int kv_len, int ldq, float scale, int dt, int nsplit, int tps) {
    awg64<3, true>(&tk, &tv, nullptr, Q, Tq, H, kv_len, ldq, scale, dt & 2, PO, PML, nsplit, tps, nullptr, nullptr);
}
