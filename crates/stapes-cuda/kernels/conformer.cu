// FastConformer block ops fused into single kernels (src/conformer.rs): the conv module's middle
// (GLU + padding mask + depthwise conv + activation) and the Transformer-XL attention inputs
// (q+u, q+v, k, v heads and the repeated position heads from one stacked projection).
// Activations f32 or f16 (`dt`, common.cuh); parameters f32; math in f32. Every entry point
// starts with PDL_ENTER() (common.cuh's PDL rules; the names are in src/pdl.rs's PDL_SAFE).

// Output frames per block (the least; the entries glu_dw_act32 and glu_dw_act64 double it once
// or twice) and channels per block of glu_dw_act (the host sizes the grid and the dynamic shared memory,
// (rows + K - 1) · GDW_CH floats, from the same numbers).
#define GDW_ROWS 16
#define GDW_CH 64

// x (B, T, 2C) -> y (B, t_out, C) = act(depthwise(mask(glu(x))) + bias), stride 1, `pad` zero
// frames each side; w (C, K), bias (C) or null, keep (B, T) of 0/1 or null.
// Block (256 threads = 64 channels × 4 row groups) owns ROWS output frames × GDW_CH channels:
// it computes the GLU of the ROWS + K - 1 input frames it reads once into shared memory
// (zero outside the sequence and where keep is 0), four frames a thread at a time with every
// load issued before any is used (f16 inputs with c % 8 == 0: 8 channels a thread, gdw_load_h8),
// then each thread sums the K taps of its ROWS / 4 outputs
// in order (bias first, as the separate depthwise kernel does), the outputs side by side.
#define GDW_NY 4
// The shared GLU rows of glu_dw_act from f16 inputs with c % 8 == 0: 8 channels a thread, a and
// gate as one 16-byte load each (the 2-byte loads of the general path left a 16-clip launch
// waiting on them: 36 % of its stall samples at their conversions, stop 47). The values, the
// mask and the zeros are the general path's. False (nothing done) for other inputs.
template <class X>
__device__ __forceinline__ bool gdw_load_h8(float* g, const X* xb, const float* __restrict__ keep, int b, int t,
                                            int c, int r_t0, int rows, bool fast) {
    if constexpr (sizeof(X) != 2) {
        return false;
    } else {
        if (c & 7) return false;
        const int ch0 = blockIdx.y * GDW_CH;
        for (int task = threadIdx.x; task < rows * (GDW_CH / 8); task += blockDim.x) {
            const int r = task / (GDW_CH / 8), cg = (task % (GDW_CH / 8)) * 8, ti = r_t0 + r;
            float v[8];
            if (ch0 + cg < c && ti >= 0 && ti < t) {
                const h16* row = (const h16*)xb + (long long)ti * 2 * c + ch0 + cg;
                const uint4 ua = *(const uint4*)row, ug = *(const uint4*)(row + c);
                const float kp = keep ? keep[(long long)b * t + ti] : 1.f;
                const u32 wa[4] = {ua.x, ua.y, ua.z, ua.w}, wg[4] = {ug.x, ug.y, ug.z, ug.w};
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const float a = h2f((h16)(wa[e / 2] >> (16 * (e & 1)))), gt = h2f((h16)(wg[e / 2] >> (16 * (e & 1))));
                    v[e] = kp != 0.f ? sigmoid_mul(a, gt, fast) : 0.f;
                }
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) v[e] = 0.f;
            }
            float4* dst = (float4*)(g + r * GDW_CH + cg);
            dst[0] = make_float4(v[0], v[1], v[2], v[3]);
            dst[1] = make_float4(v[4], v[5], v[6], v[7]);
        }
        return true;
    }
}
template <class Y, class X, int ROWS>
__device__ __forceinline__ void glu_dw_act_k(void* y_, const void* x_, const float* __restrict__ keep,
                                             const float* __restrict__ w, const float* __restrict__ bias, int t, int c,
                                             int kw, int pad, int t_out, int act, unsigned char* __restrict__ y8) {
    // f16 outputs take the MUFU exp and reciprocal (~1e-6 relative, under the output's 2^-11
    // rounding): the kernel is bound by issuing the IEEE expf / division sequences (stop 22)
    constexpr bool FAST = sizeof(Y) == 2;
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    extern __shared__ float g[];  // (ROWS + kw - 1) × GDW_CH
    const int tx = threadIdx.x % GDW_CH, ty = threadIdx.x / GDW_CH;
    const int ch = blockIdx.y * GDW_CH + tx;
    const int b = blockIdx.z;
    const int t0 = blockIdx.x * ROWS;
    const int rows = ROWS + kw - 1;
    const X* xb = x + (long long)b * t * 2 * c;
    if (!gdw_load_h8(g, xb, keep, b, t, c, t0 - pad, rows, FAST)) {
        for (int r0 = ty; r0 < rows; r0 += 4 * GDW_NY) {
            float a[4], gate[4], kp[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int r = r0 + q * GDW_NY, ti = t0 - pad + r;
                a[q] = gate[q] = 0.f;
                kp[q] = 0.f;
                if (r < rows && ch < c && ti >= 0 && ti < t) {
                    a[q] = ldf(xb, (long long)ti * 2 * c + ch);
                    gate[q] = ldf(xb, (long long)ti * 2 * c + c + ch);
                    kp[q] = keep ? keep[(long long)b * t + ti] : 1.f;
                }
            }
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int r = r0 + q * GDW_NY;
                if (r < rows) g[r * GDW_CH + tx] = kp[q] != 0.f ? sigmoid_mul(a[q], gate[q], FAST) : 0.f;
            }
        }
    }
    __syncthreads();
    if (ch >= c) return;
    const float* wc = w + (long long)ch * kw;
    const float b0 = bias ? bias[ch] : 0.f;
    constexpr int PER = ROWS / GDW_NY;  // outputs rr = ty + GDW_NY·i
    float acc[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) acc[i] = b0;
    for (int k = 0; k < kw; ++k) {
        const float wk = wc[k];
#pragma unroll
        for (int i = 0; i < PER; ++i) acc[i] += wk * g[(ty + GDW_NY * i + k) * GDW_CH + tx];
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int to = t0 + ty + GDW_NY * i;
        if (to >= t_out) continue;
        const long long o = ((long long)b * t_out + to) * c + ch;
        const float v = act_apply_if(acc[i], act, FAST);
        if (y) stf(y, o, v);
        // the stored value as e4m3 too, for the FP8 GEMM that reads it (src/fp8.rs)
        if (y8) y8[o] = (unsigned char)(e4m3x2(FAST ? h2f(f2h(v)) : v, 0.f) & 0xffu);
    }
}
template <class Y, class X>
__device__ __forceinline__ void glu_dw_act_r16(void* y, const void* x, const float* keep, const float* w, const float* bias,
                                               int t, int c, int kw, int pad, int t_out, int act, unsigned char* y8) {
    glu_dw_act_k<Y, X, GDW_ROWS>(y, x, keep, w, bias, t, c, kw, pad, t_out, act, y8);
}
template <class Y, class X>
__device__ __forceinline__ void glu_dw_act_r32(void* y, const void* x, const float* keep, const float* w, const float* bias,
                                               int t, int c, int kw, int pad, int t_out, int act, unsigned char* y8) {
    glu_dw_act_k<Y, X, 2 * GDW_ROWS>(y, x, keep, w, bias, t, c, kw, pad, t_out, act, y8);
}
template <class Y, class X>
__device__ __forceinline__ void glu_dw_act_r64(void* y, const void* x, const float* keep, const float* w, const float* bias,
                                               int t, int c, int kw, int pad, int t_out, int act, unsigned char* y8) {
    glu_dw_act_k<Y, X, 4 * GDW_ROWS>(y, x, keep, w, bias, t, c, kw, pad, t_out, act, y8);
}
// y8: null, or (f16 outputs) the outputs also as e4m3; y null (with y8 set): e4m3 only. Each
// entry has its own block of output frames, GDW_ROWS times 1, 2 or 4 (every output the same sum
// in the same order; fewer, longer blocks pay the staging barrier fewer times). One entry that
// switched on the frames at run time made the 16-frame form's launch 30 % slower (H100, stop 61:
// 7.55 against 5.79 µs, same grid, registers and shared memory).
#define GDW_ENTRY(NAME, FORM)                                                                                           \
    extern "C" __global__ void NAME(void* y, const void* x, const float* keep, const float* w, const float* bias, int t, \
                                    int c, int kw, int pad, int t_out, int act, int dt, unsigned char* y8) {            \
        PDL_ENTER();                                                                                                    \
        DISPATCH_YX(dt, FORM, y, x, keep, w, bias, t, c, kw, pad, t_out, act, y8);                                      \
    }
GDW_ENTRY(glu_dw_act, glu_dw_act_r16)
GDW_ENTRY(glu_dw_act32, glu_dw_act_r32)
GDW_ENTRY(glu_dw_act64, glu_dw_act_r64)

// qkv (B, T, 3C) laid out q | k | v, pos (1, P, C), C = H·Dh ->
//   qu = q + bias_u, qv = q + bias_v, k, v: (B·H, T, Dh) each, index ((b·H + h)·T + t)·Dh + d;
//   p: (B·H, P, Dh), the position heads repeated for every b.
// One grid-stride pass over n1 = B·T·3C (indexed by the qkv side, so the Dh runs are contiguous
// on both sides) followed by n2 = B·H·P·Dh (indexed by the output side).
template <class Y, class X, class P>
__device__ __forceinline__ void rel_attn_inputs_k(void* qu_, void* qv_, void* k_, void* v_, void* p_, const void* qkv_,
                                                  const void* pos_, const float* __restrict__ bu,
                                                  const float* __restrict__ bv, int bs, int t, int h, int dh, int np) {
    Y *qu = (Y*)qu_, *qv = (Y*)qv_, *ko = (Y*)k_, *vo = (Y*)v_, *po = (Y*)p_;
    const X* qkv = (const X*)qkv_;
    const P* pos = (const P*)pos_;
    const long long c = (long long)h * dh, c3 = 3 * c;
    const long long n1 = (long long)bs * t * c3, n2 = (long long)bs * h * np * dh;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n1 + n2;
         i += (long long)gridDim.x * blockDim.x) {
        if (i < n1) {
            long long bt = i / c3;
            int col = (int)(i - bt * c3);
            int part = col / (int)c, cc = col - part * (int)c;
            long long b = bt / t;
            int tt = (int)(bt - b * t);
            int hh = cc / dh, d = cc - hh * dh;
            long long j = ((b * h + hh) * t + tt) * dh + d;
            float xv = ldf(qkv, i);
            if (part == 0) {
                stf(qu, j, xv + bu[cc]);
                stf(qv, j, xv + bv[cc]);
            } else if (part == 1) {
                stf(ko, j, xv);
            } else {
                stf(vo, j, xv);
            }
        } else {
            long long o = i - n1;
            int d = (int)(o % dh);
            long long r = o / dh;
            int pp = (int)(r % np);
            int hh = (int)((r / np) % h);
            stf(po, o, ldf(pos, (long long)pp * c + hh * dh + d));
        }
    }
}
extern "C" __global__ void rel_attn_inputs(void* qu, void* qv, void* k, void* v, void* p, const void* qkv, const void* pos,
                                           const float* bu, const float* bv, int bs, int t, int h, int dh, int np, int dt) {
    PDL_ENTER();
    DISPATCH_YAB(dt, rel_attn_inputs_k, qu, qv, k, v, p, qkv, pos, bu, bv, bs, t, h, dh, np);
}

// ---------------------------------------------------------------------------------------------
// Transformer-XL self-attention in one kernel: scores = ((q+u)·kᵀ + shift((q+v)·pᵀ))·scale,
// keys with keep == 0 dropped, softmax, ·v; heads merged on output. Flash-style on f16 tensor
// cores (mma.sync m16n8k16, f32 accumulate, online softmax): neither score matrix is stored.
// qkv (B, T, 3C) f16 laid out q | k | v, C = H·D; pos (1, 2T-1, C) f16, row k = distance T-1-k;
// bias_u, bias_v (C) f32; keep (B, T) f32 or null; out (B, T, C) of type Y.
// Block = 1-4 warps of 16 queries each, of one (b, h) (the host picks the count by occupancy;
// every warp walks all keys, so the count does not change a row's bits); keys stream through
// shared memory 32 at a time.
// For query r and key j the position term reads pos row T-1-r+j: a warp's 16 rows × 32 keys
// need 47 consecutive rows, so the warp multiplies (q+v) by those 47 (48) rows into a 16 × 48
// product, parks it in its own shared scratch and reads it back along the diagonals. The rows
// come into shared memory by cp.async beside each key tile's K and V rows (a block of W warps
// reads 16·W + 32 consecutive rows a tile; dynamic shared memory) and reach the mma by ldmatrix:
// loaded as 32-bit words from global memory in every lane instead, one clip's split-keys launch
// took 15.6 µs against 14.8 and 16 clips' encode 7.79 ms against 7.57 (H200, stop 30).

//
// Split-keys form (rel_attn_ks_*, for grids too small to fill the GPU: one clip's 140 frames make
// 3 × 8 blocks of the form above): a block owns 16 queries and its W warps (1-9, the host's pick)
// take every W-th tile of 16 keys each (own K/V tiles, position rows and scratch in dynamic shared
// memory, warp-synchronous; the (q+u), (q+v) operands made once a block), then merge their (max,
// sum, output) through shared memory. Same arithmetic per key; the merge adds one exp2 rescale per
// warp. The grid is small (72 blocks for one clip), so a block's time is its slowest warp's chain
// of key tiles: more warps, shorter chains.

#define RA_BK 32
#define RA_PW 48  // position rows per warp and key tile: RA_BK + 16 - 1, rounded up to 8
#define RA_PAD 8
#define RK_BK 16  // split-keys form: keys per warp tile
#define RK_PW 32  // its position rows per tile: RK_BK + 16 - 1, rounded up to 8

// The plain form's dynamic shared memory, for W warps: each warp's (q+v)·qs rows (read back as mma
// A operands) and its score scratch, then two stages of a key tile's K and V rows, then a ring of
// ra_ring_rows(W) position rows. Tile k reads 16·W + RA_BK consecutive position rows (warp w's
// RA_PW start 16·(W-1-w) rows in), the RA_BK after tile k-1's first; the ring holds them and the
// next tile's RA_BK new rows, so the loads of tile k+1 (its K, V and new position rows) run while
// the block computes tile k. Stop 47's ncu had the single-stage form with 67 % of cycles without
// an eligible warp, its blocks waiting on each tile's loads.
template <int D>
__host__ __device__ constexpr int ra_warp_bytes() { return 16 * (D + RA_PAD) * 2 + 16 * (RA_PW + 1) * 4; }
template <int D>
__host__ __device__ constexpr int ra_kv_bytes() { return RA_BK * (D + RA_PAD) * 2; }
__host__ __device__ constexpr int ra_ring_rows(int warps) { return 16 * warps + 2 * RA_BK; }
template <int D>
__host__ __device__ constexpr int ra_smem_bytes(int warps) {
    return warps * ra_warp_bytes<D>() + 4 * ra_kv_bytes<D>() + ra_ring_rows(warps) * (D + RA_PAD) * 2;
}
static_assert(ra_smem_bytes<128>(3) == 87744 && ra_smem_bytes<64>(4) == 58624, "src/conformer.rs: rel_attn_smem");
// Staged form (rel_attn_s_d128, TAIL's skips): where they fit, a block stages the whole of its
// (b, h)'s K and V (T rows, zero-filled to a multiple of 16: the last tile's products read no
// further) and every position row its warps' tiles read, all by one cp.async group before the
// first tile, behind one barrier. The key loop then has no loads and no barriers: each warp
// walks its tiles on its own, so the block's warps drift apart and one's softmax runs beside
// another's MMAs, where the ring form's barrier a tile starts them all on the same phase
// (stop 56's ncu: 0.48 eligible warps a scheduler, "a barrier a tile"). The sums are the ring
// form's, in the same order. 16 parakeet clips (T = 140, 9 warps): 219 KiB.
// Position rows staged, from pos_base(0): warp 0's last tile reads furthest, its 16 rows at most
// 16·(W-1) + k0_last + 16·ceil((15 + kn_last) / 16) rows on (the TAIL skips).
__host__ __device__ constexpr int ra_staged_pos_rows(int T, int warps) {
    return 16 * (warps - 1) + ((T - 1) / RA_BK) * RA_BK + 16 * ((15 + T - ((T - 1) / RA_BK) * RA_BK + 15) / 16);
}
template <int D>
__host__ __device__ constexpr int ra_staged_bytes(int T, int warps) {
    return warps * ra_warp_bytes<D>() + (2 * ((T + 15) / 16) * 16 + ra_staged_pos_rows(T, warps)) * (D + RA_PAD) * 2;
}
static_assert(ra_staged_pos_rows(140, 9) == 288 && ra_staged_bytes<128>(140, 9) == 224064,
              "src/conformer.rs: rel_staged_smem");
static_assert(ra_warp_bytes<128>() % 16 == 0 && ra_warp_bytes<64>() % 16 == 0 && ra_kv_bytes<64>() % 16 == 0,
              "cp.async and ldmatrix rows stay 16-byte aligned");
// split-keys form, dynamic shared memory: the block's (q+u)·qs and (q+v)·qs rows (16 × (D + 8)
// f16 each, made once for all warps), then per warp a K and a V tile, its score scratch and its
// position rows (the merge reuses the whole as W × 16 × (D + 8) floats, W × 16 × (m, l) and
// W × 16 weights)
// The score scratch's row stride: row i's writes (8·nt + 2t) and diagonal reads (15 - i + jj) of
// rows g = 0..7 hit each bank at most twice (RK_PW + 1 = 33 put every diagonal read of a warp on
// one bank, 8 ways).
#define RK_SCS (RK_PW + 4)
// The merge's row stride in floats: the 8-byte stores of a half-warp's rows g = 0..3 then cover
// all 32 banks (a stride of D put a warp's 8 rows on the same 4 banks, 8 ways).
template <int D>
__host__ __device__ constexpr int rk_merge_stride() { return D + 8; }
template <int D>
__host__ __device__ constexpr int rk_tile_bytes() { return RK_BK * (D + RA_PAD) * 2; }
template <int D>
__host__ __device__ constexpr int rk_scratch_end() { return 2 * rk_tile_bytes<D>() + 16 * RK_SCS * 4; }
template <int D>
__host__ __device__ constexpr int rk_warp_bytes() { return rk_scratch_end<D>() + RK_PW * (D + RA_PAD) * 2; }
template <int D>
__host__ __device__ constexpr int rk_q_bytes() { return 2 * 16 * (D + RA_PAD) * 2; }
// warps a block at most (src/conformer.rs: REL_KS_MAX_WARPS): the merge's loops unroll to it
#define RK_MAX_W 9
static_assert(rk_warp_bytes<128>() == 19712 && rk_warp_bytes<64>() == 11520, "src/conformer.rs: REL_KS_WARP_BYTES");
static_assert(rk_q_bytes<128>() == 8704 && rk_q_bytes<64>() == 4608, "src/conformer.rs: REL_KS_Q_BYTES");
static_assert(rk_warp_bytes<128>() >= 16 * rk_merge_stride<128>() * 4 + 16 * 3 * 4 &&
                  rk_warp_bytes<64>() >= 16 * rk_merge_stride<64>() * 4 + 16 * 3 * 4,
              "merge scratch fits");
static_assert(rk_scratch_end<128>() % 16 == 0 && rk_scratch_end<64>() % 16 == 0 && rk_warp_bytes<64>() % 16 == 0 &&
                  rk_warp_bytes<128>() % 16 == 0 && rk_q_bytes<64>() % 16 == 0,
              "cp.async and ldmatrix rows stay 16-byte aligned");
// The position product's B operands from staged rows `ps` (row stride D + RA_PAD), PW/8 groups of
// 8 rows (n) × the 16 dims kk·16 … kk·16+15 (k), onto bd; a the (q+v) fragment of those dims.
template <int D, int PW>
__device__ __forceinline__ void rel_pos_mma(float (&bd)[PW / 8][4], const h16* ps, int kk, u32 a0, u32 a1, u32 a2,
                                            u32 a3, int lane) {
    // ldmatrix x4: lanes 0-7 / 8-15 address rows n..n+7 at dims +0 / +8, lanes 16-31 the next 8 rows
    const h16* base = ps + ((lane & 7) + ((lane >> 4) << 3)) * (D + RA_PAD) + kk * 16 + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int nt = 0; nt < PW / 8; nt += 2) {
        u32 b0, b1, b2, b3;
        tc_ldsm_x4(tc_smem_u32(base + nt * 8 * (D + RA_PAD)), b0, b1, b2, b3);
        tc_mma16816(bd[nt], a0, a1, a2, a3, b0, b1);
        tc_mma16816(bd[nt + 1], a0, a1, a2, a3, b2, b3);
    }
}

// out8: null, or (f16 outputs) the outputs also as e4m3; out null (with out8 set): e4m3 only, for
// an FP8 GEMM that is the result's only reader (src/conformer.rs, feeding_add_norms_fused).
template <int D, bool SPLIT, class Y, bool TAIL, bool STAGED = false>
__device__ __forceinline__ void rel_attn_k(void* out_, unsigned char* __restrict__ out8, const h16* __restrict__ qkv,
                                           const h16* __restrict__ pos,
                                           const float* __restrict__ bu, const float* __restrict__ bv,
                                           const float* __restrict__ keep, int T, int H, float scale) {
    constexpr int BK = SPLIT ? RK_BK : RA_BK, PW = SPLIT ? RK_PW : RA_PW, SCS = SPLIT ? RK_SCS : RA_PW + 1;
    static_assert(PW % 16 == 0, "position rows come in pairs of 8-row groups");
    static_assert(!STAGED || (!SPLIT && TAIL), "the staged form is the plain one with TAIL's skips");
    Y* __restrict__ out = (Y*)out_;
    typedef h16 Tile[D + RA_PAD];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    // Ks, Vs: stage 0's tiles, stage 1's (plain form) `stage_bytes` further on; Ps: the split
    // form's position rows, the plain form's ring
    Tile *Ks, *Vs, *Ps;
    float (*sc)[SCS];
    h16* qpw = nullptr;  // the plain form's (q+v) rows of this warp
    int stage_bytes = 0;
    const int tk = (T + 15) / 16 * 16;  // the staged form's K and V rows
    extern __shared__ __align__(16) unsigned char rk_sm[];
    if constexpr (SPLIT) {
        unsigned char* wb = rk_sm + rk_q_bytes<D>() + warp * rk_warp_bytes<D>();
        Ks = (Tile*)wb;
        Vs = (Tile*)(wb + rk_tile_bytes<D>());
        sc = (float(*)[SCS])(wb + 2 * rk_tile_bytes<D>());
        Ps = (Tile*)(wb + rk_scratch_end<D>());
    } else {
        const int nw = blockDim.x >> 5;
        unsigned char* wb = rk_sm + warp * ra_warp_bytes<D>();
        qpw = (h16*)wb;
        sc = (float(*)[SCS])(wb + 16 * (D + RA_PAD) * 2);
        unsigned char* st = rk_sm + nw * ra_warp_bytes<D>();
        Ks = (Tile*)st;
        if constexpr (STAGED) {
            Vs = Ks + tk;
            Ps = Vs + tk;
        } else {
            Vs = (Tile*)(st + ra_kv_bytes<D>());
            Ps = (Tile*)(st + 4 * ra_kv_bytes<D>());
            stage_bytes = 2 * ra_kv_bytes<D>();
        }
    }
    // a tile of stage s
    auto at = [&](Tile* tile, int s) { return (Tile*)((unsigned char*)tile + s * stage_bytes); };
    const int g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y, b = blockIdx.z;
    const long long C = (long long)H * D, ld = 3 * C;
    const h16* Qb = qkv + (long long)b * T * ld + h * D;
    const h16* Kb = Qb + C;
    const h16* Vb = Qb + 2 * C;
    const h16* Pb = pos + h * D;  // row stride C
    const float* kb = keep ? keep + (long long)b * T : nullptr;
    Y* Ob = out ? out + (long long)b * T * C + h * D : nullptr;
    unsigned char* O8 = out8 ? out8 + (long long)b * T * C + h * D : nullptr;

    // the warp's first query; its keys: tiles from k_first, every k_step
    const int rw = SPLIT ? blockIdx.x * 16 : blockIdx.x * (blockDim.x / 2) + warp * 16;
    const int nw = blockDim.x >> 5;
    const int k_first = SPLIT ? warp * BK : 0, k_step = SPLIT ? nw * BK : BK;
    const int ld_first = SPLIT ? lane : tid, ld_step = SPLIT ? 32 : (int)blockDim.x;
    const int ring = ra_ring_rows(nw);  // the plain form's position rows held
    const int r0 = rw + g, r1 = r0 + 8;
    const float qs = scale * 1.4426950408889634f;  // exp2 softmax
    const int np = 2 * T - 1;
    // the first position row staged for the key tile at k0: the warp's PW rows (split) or the
    // block's 16·W + BK (plain, warp w's 48 starting 16·(W-1-w) rows in)
    auto pos_base = [&](int k0) {
        return SPLIT ? T - 16 - rw + k0 : T - (int)blockIdx.x * 16 * nw - 16 * nw + k0;
    };
    // K, V and position rows of the key tile at k0 into stage s's tiles, one cp.async group
    auto load_tile = [&](int k0, int s) {
        Tile *ks = at(Ks, s), *vs = at(Vs, s), *ps = Ps;
        for (int idx = ld_first; idx < BK * (D / 8); idx += ld_step) {
            int key = idx / (D / 8), c8 = (idx - key * (D / 8)) * 8;
            int j = k0 + key;
            bool in = j < T;
            long long off = in ? (long long)j * ld + c8 : 0;
            tc_cp_async16(&ks[key][c8], Kb + off, in ? 16 : 0);
            tc_cp_async16(&vs[key][c8], Vb + off, in ? 16 : 0);
        }
        // split: the tile's PW rows; plain: the first tile's 16·nw + BK rows, a later tile's BK
        // new ones, into the ring at slot (row - pos_base(0)) mod ring
        const int fresh = SPLIT || k0 == k_first ? 0 : 16 * nw;
        const int pbase = pos_base(k0) + fresh;
        const int rows = SPLIT ? PW : k0 == k_first ? 16 * nw + BK : BK;
        const int slot0 = SPLIT ? 0 : (k0 + fresh) % ring;
        for (int idx = ld_first; idx < rows * (D / 8); idx += ld_step) {
            int r = idx / (D / 8), c8 = (idx - r * (D / 8)) * 8;
            int prow = pbase + r, slot = slot0 + r;
            if (!SPLIT && slot >= ring) slot -= ring;
            bool in = prow >= 0 && prow < np;
            tc_cp_async16(&ps[slot][c8], Pb + (in ? (long long)prow * C + c8 : 0), in ? 16 : 0);
        }
        tc_cp_commit();
    };
    // the first tile's loads in flight while the queries load (staged: every tile's)
    if constexpr (STAGED) {
        for (int idx = tid; idx < tk * (D / 8); idx += blockDim.x) {
            const int key = idx / (D / 8), c8 = (idx - key * (D / 8)) * 8;
            const bool in = key < T;
            const long long off = in ? (long long)key * ld + c8 : 0;
            tc_cp_async16(&Ks[key][c8], Kb + off, in ? 16 : 0);
            tc_cp_async16(&Vs[key][c8], Vb + off, in ? 16 : 0);
        }
        const int pbase = pos_base(0), rows = ra_staged_pos_rows(T, nw);
        for (int idx = tid; idx < rows * (D / 8); idx += blockDim.x) {
            const int r = idx / (D / 8), c8 = (idx - r * (D / 8)) * 8, prow = pbase + r;
            const bool in = prow >= 0 && prow < np;
            tc_cp_async16(&Ps[r][c8], Pb + (in ? (long long)prow * C + c8 : 0), in ? 16 : 0);
        }
        tc_cp_commit();
    } else if (k_first < T) {
        load_tile(k_first, 0);
    }
    // ldmatrix x4 lanes' rows and columns of a 16 × 16 operand
    const int lm_key = (lane & 7) + ((lane >> 3) & 1) * 8, lm_col = (lane >> 4) * 8;
    // (q+u)·qs and (q+v)·qs as mma A operands: (q+u) in registers, (q+v) parked in shared memory
    // and read back each key tile (32 registers fewer, which decides how many blocks of the plain
    // form a SM holds and lets the split form run 9 warps)
    u32 qa[D / 16][4];
    // the (q+v) rows: the split form's block-wide copy (row stride D + RA_PAD), else the warp's own
    const h16* qvs;
    constexpr int QS = D + RA_PAD;
    if constexpr (SPLIT) {
        // every warp of the block reads the same 16 queries: the block makes both operands once
        h16* qsu = (h16*)rk_sm;
        h16* qsv = qsu + 16 * QS;
        for (int idx = tid; idx < 16 * (D / 2); idx += blockDim.x) {
            const int row = idx / (D / 2), c = 2 * (idx - row * (D / 2));
            float2 x = make_float2(0.f, 0.f);
            if (rw + row < T) x = ld2(Qb + (long long)(rw + row) * ld + c, 0);
            const int d = h * D + c;
            *(u32*)&qsu[row * QS + c] = pack_h2((x.x + bu[d]) * qs, (x.y + bu[d + 1]) * qs);
            *(u32*)&qsv[row * QS + c] = pack_h2((x.x + bv[d]) * qs, (x.y + bv[d + 1]) * qs);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
            tc_ldsm_x4(tc_smem_u32(&qsu[lm_key * QS + kk * 16 + lm_col]), qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]);
        qvs = qsv;
    } else {
        h16(*qps)[D + RA_PAD] = (h16(*)[D + RA_PAD])qpw;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            int c0 = kk * 16 + 2 * t;
            float2 x0 = make_float2(0.f, 0.f), x8 = x0, y0 = x0, y8 = x0;
            if (r0 < T) {
                const h16* p = Qb + (long long)r0 * ld;
                x0 = ld2(p + c0, 0);
                x8 = ld2(p + c0 + 8, 0);
            }
            if (r1 < T) {
                const h16* p = Qb + (long long)r1 * ld;
                y0 = ld2(p + c0, 0);
                y8 = ld2(p + c0 + 8, 0);
            }
            const int d0 = h * D + c0, d8 = d0 + 8;
            qa[kk][0] = pack_h2((x0.x + bu[d0]) * qs, (x0.y + bu[d0 + 1]) * qs);
            qa[kk][1] = pack_h2((y0.x + bu[d0]) * qs, (y0.y + bu[d0 + 1]) * qs);
            qa[kk][2] = pack_h2((x8.x + bu[d8]) * qs, (x8.y + bu[d8 + 1]) * qs);
            qa[kk][3] = pack_h2((y8.x + bu[d8]) * qs, (y8.y + bu[d8 + 1]) * qs);
            const u32 p0 = pack_h2((x0.x + bv[d0]) * qs, (x0.y + bv[d0 + 1]) * qs);
            const u32 p1 = pack_h2((y0.x + bv[d0]) * qs, (y0.y + bv[d0 + 1]) * qs);
            const u32 p2 = pack_h2((x8.x + bv[d8]) * qs, (x8.y + bv[d8 + 1]) * qs);
            const u32 p3 = pack_h2((y8.x + bv[d8]) * qs, (y8.y + bv[d8 + 1]) * qs);
            *(u32*)&qps[g][c0] = p0;
            *(u32*)&qps[g + 8][c0] = p1;
            *(u32*)&qps[g][c0 + 8] = p2;
            *(u32*)&qps[g + 8][c0 + 8] = p3;
        }
        qvs = &qps[0][0];
    }
    __syncwarp();
    if constexpr (STAGED) {
        tc_cp_wait<0>();
        __syncthreads();  // every warp's share of the rows in
    }

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = F_NEG_INF, m1 = F_NEG_INF, l0 = 0.f, l1 = 0.f;

    for (int k0 = k_first, sx = 0; k0 < T; k0 += k_step, sx ^= SPLIT ? 0 : 1) {
        if (SPLIT && k0 != k_first) load_tile(k0, 0);
        const Tile *kst = STAGED ? Ks + k0 : at(Ks, sx), *vst = STAGED ? Vs + k0 : at(Vs, sx);
        // keys of this tile inside the sequence (warp-uniform): with TAIL, a last partial tile
        // skips the products that only keys past T would read (their scores are -inf and their
        // V rows zero, so the bits do not change). A template parameter, not a runtime flag, so
        // that without it kn is the constant BK and the skips compile away (stop 60's ncu read
        // the runtime flag's build at 34.4 us a 16-clip launch, 28.4 before it).
        const int kn = TAIL ? min(BK, T - k0) : BK;

        // position term: bd[i][c] = (q+v)_{rw+i} · pos[prow0 + c], prow0 = T-16-rw+k0, so that
        // row i, key k0+jj reads column 15-i+jj
        const int prow0 = T - 16 - rw + k0;
        float bd[PW / 8][4];
#pragma unroll
        for (int nt = 0; nt < PW / 8; ++nt) bd[nt][0] = bd[nt][1] = bd[nt][2] = bd[nt][3] = 0.f;
        // tiles and rows in (split: the warp's own; else every warp's, and every warp is done
        // with the other stage, which the next tile's loads then fill behind this tile's work;
        // staged: all in before the loop)
        if constexpr (SPLIT) {
            tc_cp_wait<0>();
            __syncwarp();
        } else if constexpr (!STAGED) {
            tc_cp_wait<0>();
            __syncthreads();
            if (k0 + k_step < T) load_tile(k0 + k_step, sx ^ 1);
        }
        if constexpr (SPLIT) {
            const h16* ps = &Ps[prow0 - pos_base(k0)][0];
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                u32 a0, a1, a2, a3;
                tc_ldsm_x4(tc_smem_u32(&qvs[lm_key * QS + kk * 16 + lm_col]), a0, a1, a2, a3);
                rel_pos_mma<D, PW>(bd, ps, kk, a0, a1, a2, a3, lane);
            }
        } else {
            // the lane's ring rows for each pair of 8-row groups: rel_pos_mma's rows, wrapped
            const h16* pr[PW / 16];
            const int lr = (lane & 7) + ((lane >> 4) << 3);
            // staged: rows from pos_base(0), no ring
            const int s0 = STAGED ? prow0 - pos_base(0) + lr : (k0 + prow0 - pos_base(k0) + lr) % ring;
#pragma unroll
            for (int n = 0; n < PW / 16; ++n) {
                int slot = s0 + 16 * n;
                if (!STAGED && slot >= ring) slot -= ring;
                pr[n] = &Ps[slot][((lane >> 3) & 1) * 8];
            }
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                u32 a0, a1, a2, a3;
                tc_ldsm_x4(tc_smem_u32(&qvs[lm_key * QS + kk * 16 + lm_col]), a0, a1, a2, a3);
#pragma unroll
                for (int n = 0; n < PW / 16; ++n) {
                    // row i, key jj < kn reads column 15 − i + jj < 15 + kn
                    if (16 * n >= 15 + kn) continue;
                    u32 b0, b1, b2, b3;
                    tc_ldsm_x4(tc_smem_u32(pr[n] + kk * 16), b0, b1, b2, b3);
                    tc_mma16816(bd[2 * n], a0, a1, a2, a3, b0, b1);
                    tc_mma16816(bd[2 * n + 1], a0, a1, a2, a3, b2, b3);
                }
            }
        }
#pragma unroll
        for (int nt = 0; nt < PW / 8; ++nt) {
            int c = nt * 8 + 2 * t;
            sc[g][c] = bd[nt][0];
            sc[g][c + 1] = bd[nt][1];
            sc[g + 8][c] = bd[nt][2];
            sc[g + 8][c + 1] = bd[nt][3];
        }
        __syncwarp();  // the warp's scratch written

        float s[BK / 8][4];
        // K's B operands by ldmatrix x4: lane l addresses key 8·nt + l % 8 at dims 8·(l / 8) on
        // from 32·kp, so one load holds dims kk = 2·kp and 2·kp + 1
#pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
            if (8 * nt >= kn) continue;
#pragma unroll
            for (int kp = 0; kp < D / 32; ++kp) {
                u32 b0, b1, b2, b3;
                tc_ldsm_x4(tc_smem_u32(&kst[nt * 8 + (lane & 7)][kp * 32 + (lane >> 3) * 8]), b0, b1, b2, b3);
                tc_mma16816(s[nt], qa[2 * kp][0], qa[2 * kp][1], qa[2 * kp][2], qa[2 * kp][3], b0, b1);
                tc_mma16816(s[nt], qa[2 * kp + 1][0], qa[2 * kp + 1][1], qa[2 * kp + 1][2], qa[2 * kp + 1][3], b2, b3);
            }
        }
        float mx0 = F_NEG_INF, mx1 = F_NEG_INF;
#pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt) {
            int jj = nt * 8 + 2 * t, j = k0 + jj;
            s[nt][0] += sc[g][15 - g + jj];
            s[nt][1] += sc[g][16 - g + jj];
            s[nt][2] += sc[g + 8][7 - g + jj];
            s[nt][3] += sc[g + 8][8 - g + jj];
            bool in0 = j < T && (!kb || kb[j] != 0.f), in1 = j + 1 < T && (!kb || kb[j + 1] != 0.f);
            if (!in0) s[nt][0] = s[nt][2] = F_NEG_INF;
            if (!in1) s[nt][1] = s[nt][3] = F_NEG_INF;
            mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
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
        u32 pa[BK / 16][4];
#pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt) {
            float p0 = exp2f(s[nt][0] - base0), p1 = exp2f(s[nt][1] - base0);
            float p2 = exp2f(s[nt][2] - base1), p3 = exp2f(s[nt][3] - base1);
            l0 += p0 + p1;
            l1 += p2 + p3;
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
        for (int ks = 0; ks < BK / 16; ++ks) {
            if (16 * ks >= kn) continue;
#pragma unroll
            for (int dn = 0; dn < D / 8; dn += 2) {
                u32 b0, b1, b2, b3;
                tc_ldsm_x4_t(tc_smem_u32(&vst[ks * 16 + lm_key][dn * 8 + lm_col]), b0, b1, b2, b3);
                tc_mma16816(o[dn], pa[ks][0], pa[ks][1], pa[ks][2], pa[ks][3], b0, b1);
                tc_mma16816(o[dn + 1], pa[ks][0], pa[ks][1], pa[ks][2], pa[ks][3], b2, b3);
            }
        }
        // the next tile's loads and scratch writes overwrite what was read (the ring form's
        // barrier is the next tile's, before its loads)
        if constexpr (SPLIT || STAGED) __syncwarp();
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    if constexpr (SPLIT) {
        // merge the warps' partial rows: (max m, sum l, unnormalised o) each, over shared memory
        __syncthreads();  // every warp is done with its tiles: they become the merge scratch
        constexpr int MS = rk_merge_stride<D>();
        float* mo = (float*)rk_sm;     // [warp][row 0..15][MS]
        float* ml = mo + nw * 16 * MS;  // [warp][row][2]: m, l
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
            int c = dn * 8 + 2 * t;
            float* w0 = mo + ((long long)warp * 16 + g) * MS + c;
            *(float2*)w0 = make_float2(o[dn][0], o[dn][1]);
            *(float2*)(w0 + 8 * MS) = make_float2(o[dn][2], o[dn][3]);
        }
        if (t == 0) {
            ml[(warp * 16 + g) * 2] = m0;
            ml[(warp * 16 + g) * 2 + 1] = l0;
            ml[(warp * 16 + g + 8) * 2] = m1;
            ml[(warp * 16 + g + 8) * 2 + 1] = l1;
        }
        __syncthreads();
        // each warp's weight in a row, exp2(m_w - max m) / Σ_w l_w·exp2(m_w - max m), once a row
        float* fw = ml + nw * 16 * 2;  // [warp][row]
        // the loops over warps unrolled to RK_MAX_W, so their shared-memory loads are in flight
        // together; the sums keep their order
        if (tid < 16) {
            float mm = F_NEG_INF, sum = 0.f;
#pragma unroll
            for (int w = 0; w < RK_MAX_W; ++w)
                if (w < nw) mm = fmaxf(mm, ml[(w * 16 + tid) * 2]);
            if (mm != F_NEG_INF) {
#pragma unroll
                for (int w = 0; w < RK_MAX_W; ++w)
                    if (w < nw) sum += ml[(w * 16 + tid) * 2 + 1] * exp2f(ml[(w * 16 + tid) * 2] - mm);
            }
            const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
            for (int w = 0; w < RK_MAX_W; ++w)
                if (w < nw) fw[w * 16 + tid] = mm != F_NEG_INF ? exp2f(ml[(w * 16 + tid) * 2] - mm) * inv : 0.f;
        }
        __syncthreads();
        for (int idx = tid; idx < 16 * D; idx += blockDim.x) {
            int row = idx / D, c = idx - row * D;
            if (rw + row >= T) break;  // rows ascend with idx
            float acc = 0.f;
#pragma unroll
            for (int w = 0; w < RK_MAX_W; ++w)
                if (w < nw) acc += mo[(w * 16 + row) * MS + c] * fw[w * 16 + row];
            const long long o = (long long)(rw + row) * C + c;
            if (Ob) stf(Ob, o, acc);
            // the stored value as e4m3 too, for the FP8 GEMM that reads it (src/fp8.rs)
            if (O8) O8[o] = (unsigned char)(e4m3x2(h2f(f2h(acc)), 0.f) & 0xffu);
        }
        return;
    }
    float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
        int c = dn * 8 + 2 * t;
        const float2 v0 = make_float2(o[dn][0] * inv0, o[dn][1] * inv0), v1 = make_float2(o[dn][2] * inv1, o[dn][3] * inv1);
        if (Ob && r0 < T) st2(Ob + (long long)r0 * C + c, 0, v0);
        if (Ob && r1 < T) st2(Ob + (long long)r1 * C + c, 0, v1);
        if (O8 && r0 < T) *(unsigned short*)(O8 + (long long)r0 * C + c) = e4m3x2(h2f(f2h(v0.x)), h2f(f2h(v0.y)));
        if (O8 && r1 < T) *(unsigned short*)(O8 + (long long)r1 * C + c) = e4m3x2(h2f(f2h(v1.x)), h2f(f2h(v1.y)));
    }
}
// dt bit 0: out is f16 (else f32). The `_t` entries skip a partial last key tile's dead products
// (TAIL); each form is its own entry so that each gets its own register allocation (one entry
// holding both spilled at the 168 bound). The split-keys form has none: its 16-key tiles leave
// at most one dead 8-key group (none at T = 140), and its TAIL build took 168 registers against
// 158 and read 11.78 us a one-clip launch against 11.30 (H100 ncu, stop 60).
#define REL_ATTN_ENTRY(NAME, BOUNDS, D, SPLIT, TAIL, STAGED)                                                        \
    extern "C" __global__ void BOUNDS NAME(void* out, unsigned char* out8, const h16* qkv, const h16* pos,        \
                                           const float* bu, const float* bv, const float* keep, int T, int H,          \
                                           float scale, int dt) {                                                      \
        PDL_ENTER();                                                                                                   \
        if (dt & 1) rel_attn_k<D, SPLIT, h16, TAIL, STAGED>(out, out8, qkv, pos, bu, bv, keep, T, H, scale);          \
        else rel_attn_k<D, SPLIT, float, TAIL, STAGED>(out, nullptr, qkv, pos, bu, bv, keep, T, H, scale);            \
    }
REL_ATTN_ENTRY(rel_attn_d64, __launch_bounds__(128), 64, false, false, false)
REL_ATTN_ENTRY(rel_attn_t_d64, __launch_bounds__(128), 64, false, true, false)
// At most 168 registers: a SM sub-partition's 16384 registers then hold 3 warps, so 16 parakeet
// clips' 384 blocks of 3 warps run in one wave (3 blocks a SM, by shared memory; unbounded, 254:
// 2 warps a sub-partition, 2 blocks a SM, 1.45 waves; 224 is no better).
REL_ATTN_ENTRY(rel_attn_d128, __maxnreg__(168), 128, false, false, false)
REL_ATTN_ENTRY(rel_attn_t_d128, __maxnreg__(168), 128, false, true, false)
REL_ATTN_ENTRY(rel_attn_s_d128, __maxnreg__(168), 128, false, true, true)
REL_ATTN_ENTRY(rel_attn_ks_d64, __launch_bounds__(288), 64, true, false, false)
REL_ATTN_ENTRY(rel_attn_ks_d128, __launch_bounds__(288), 128, true, false, false)

// ---------------------------------------------------------------------------------------------
// Depthwise-striding subsampling, channel-last (src/conformer.rs: Backend::subsample_stem and
// depthwise_conv2d_cl), for kernel 3, stride 2, padding 1 on both axes; parameters f32.

// Channels per block of fc_sub_stem and fc_dw_cl, one a thread (the host sizes the grids from
// the same number).
#define SUB_CH 128

// x (B, T, F) -> y (B, T2, F2, C) = dw(mask1(relu(conv0(mask0(x))))) for kernel 3, stride 2,
// padding 1 on both axes (NeMo's dw_striding; other forms take the composed path). w0, w1
// (C, 3, 3), b0, b1 (C), keep0 (B, T), keep1 (B, T1) of 0/1 or null. Block = FPB output frames
// t2a … t2a + FPB − 1 (t2a = FPB·blockIdx.x) of one batch entry × SUB_CH channels, a channel a
// thread with its 18 taps in registers. The frames read conv0 rows 2·t2a − 1 … 2·t2a + 2·FPB − 1,
// which read input rows 4·t2a − 3 … 4·t2a + 4·FPB − 1: those 4·FPB + 3 rows are staged in shared
// memory, zero-padded (column fi at fi + 4, so each step's 4 new columns are one aligned float4 a
// row). Each thread then walks f2 left to right: conv0 columns 2·f2 and 2·f2 + 1 of each conv0
// row from input columns 4·f2 − 1 … 4·f2 + 3, the first carried from the previous step, then each
// frame's depthwise output from those and the carried conv0 column 2·f2 − 1. The (B, C, T1, F1)
// conv0 map never reaches global memory. A frame's 3 conv0 rows are shared with its neighbours:
// with FPB > 1 a conv0 value is computed once a block instead of once a frame (63 FFMAs an output
// at FPB 1, 54 at 2, 49.5 at 4); every conv0 value and every output is the same sum in the same
// order at any FPB, so the bits do not depend on it.
template <class Y, class X, int FPB>
__device__ __forceinline__ void sub_stem_f(void* y_, const void* x_, const float* __restrict__ keep0,
                                           const float* __restrict__ w0, const float* __restrict__ b0,
                                           const float* __restrict__ keep1, const float* __restrict__ w1,
                                           const float* __restrict__ b1, int T, int F, int C, int T1, int F1, int T2,
                                           int F2) {
    constexpr int R0 = 2 * FPB + 1, RI = 4 * FPB + 3;  // conv0 rows, input rows a block
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    extern __shared__ float4 sm4[];
    float* xs = (float*)sm4;         // RI rows × W
    const int W = 4 * F2 + 4;
    const int t2a = blockIdx.x * FPB, b = blockIdx.z;
    const int ti_0 = 4 * t2a - 3;
    for (int idx = threadIdx.x; idx < RI * W; idx += blockDim.x) {
        int r = idx / W, fi = idx - r * W - 4, ti = ti_0 + r;
        float v = 0.f;
        if (ti >= 0 && ti < T && fi >= 0 && fi < F && (!keep0 || keep0[b * T + ti] != 0.f)) v = ldf(x, ((long long)b * T + ti) * F + fi);
        xs[idx] = v;
    }
    const int ch = blockIdx.y * SUB_CH + threadIdx.x, cw = min(ch, C - 1);
    float a[9], d[9], m[R0];
#pragma unroll
    for (int j = 0; j < 9; ++j) {
        a[j] = w0[cw * 9 + j];
        d[j] = w1[cw * 9 + j];
    }
    const float bias0 = b0[cw], bias1 = b1[cw];
#pragma unroll
    for (int i = 0; i < R0; ++i) {
        int t1 = 2 * t2a - 1 + i;
        m[i] = (t1 >= 0 && t1 < T1 && (!keep1 || keep1[b * T1 + t1] != 0.f)) ? 1.f : 0.f;
    }
    __syncthreads();
    float xp[RI], hp[R0];
#pragma unroll
    for (int r = 0; r < RI; ++r) xp[r] = xs[r * W + 3];
#pragma unroll
    for (int i = 0; i < R0; ++i) hp[i] = 0.f;
    Y* yr = y + ((long long)b * T2 + t2a) * F2 * C + ch;
    for (int f2 = 0; f2 < F2; ++f2) {
        float4 q[RI];
#pragma unroll
        for (int r = 0; r < RI; ++r) q[r] = sm4[(r * W + 4 + 4 * f2) / 4];
        const float odd = 2 * f2 + 1 < F1 ? 1.f : 0.f;  // conv0 column 2·f2 + 1 inside F1
        float h0[R0], h1[R0];
#pragma unroll
        for (int i = 0; i < R0; ++i) {
            float s0 = bias0, s1 = bias0;
#pragma unroll
            for (int u = 0; u < 3; ++u) {
                const float4 v = q[2 * i + u];
                s0 = fmaf(a[3 * u], xp[2 * i + u], s0);
                s0 = fmaf(a[3 * u + 1], v.x, s0);
                s0 = fmaf(a[3 * u + 2], v.y, s0);
                s1 = fmaf(a[3 * u], v.y, s1);
                s1 = fmaf(a[3 * u + 1], v.z, s1);
                s1 = fmaf(a[3 * u + 2], v.w, s1);
            }
            h0[i] = fmaxf(s0, 0.f) * m[i];
            h1[i] = fmaxf(s1, 0.f) * m[i] * odd;
        }
#pragma unroll
        for (int k = 0; k < FPB; ++k) {
            float acc = bias1;
#pragma unroll
            for (int i = 0; i < 3; ++i) {
                acc = fmaf(d[3 * i], hp[2 * k + i], acc);
                acc = fmaf(d[3 * i + 1], h0[2 * k + i], acc);
                acc = fmaf(d[3 * i + 2], h1[2 * k + i], acc);
            }
            if (ch < C && t2a + k < T2) stf(yr, ((long long)k * F2 + f2) * C, acc);
        }
#pragma unroll
        for (int i = 0; i < R0; ++i) hp[i] = h1[i];
#pragma unroll
        for (int r = 0; r < RI; ++r) xp[r] = q[r].w;
    }
}
// sub_stem_f with its frames a block fixed, as the template of (Y, X) that DISPATCH_YX takes
template <int FPB>
struct SubStem {
    template <class Y, class X>
    static __device__ __forceinline__ void run(void* y, const void* x, const float* keep0, const float* w0,
                                               const float* b0, const float* keep1, const float* w1, const float* b1,
                                               int T, int F, int C, int T1, int F1, int T2, int F2) {
        sub_stem_f<Y, X, FPB>(y, x, keep0, w0, b0, keep1, w1, b1, T, F, C, T1, F1, T2, F2);
    }
};
// One entry a frame count (1, 2, 4 output frames a block), each with its own register count (the
// 4-frame form needs twice the 1-frame form's); the host sizes the grid and the staged rows.
#define SUB_STEM_ENTRY(NAME, FPB)                                                                                      \
    extern "C" __global__ void NAME(void* y, const void* x, const float* keep0, const float* w0, const float* b0,      \
                                    const float* keep1, const float* w1, const float* b1, int T, int F, int C, int T1, \
                                    int F1, int T2, int F2, int dt) {                                                  \
        PDL_ENTER();                                                                                                   \
        DISPATCH_YX(dt, SubStem<FPB>::run, y, x, keep0, w0, b0, keep1, w1, b1, T, F, C, T1, F1, T2, F2);               \
    }
SUB_STEM_ENTRY(fc_sub_stem, 1)
SUB_STEM_ENTRY(fc_sub_stem2, 2)
SUB_STEM_ENTRY(fc_sub_stem4, 4)

// The 3 input rows 2·t2 − 1 … 2·t2 + 1 a depthwise output frame t2 reads, at channel ch of column
// 0: ok[u] false where the row is outside the sequence or its keep is 0 (the row reads as zeros).
template <class X>
__device__ __forceinline__ void dw_cl_rows(const X* (&rows)[3], bool (&ok)[3], const X* x, const float* keep, int b,
                                           int t2, int T, int F, int C, int ch) {
#pragma unroll
    for (int u = 0; u < 3; ++u) {
        const int ti = 2 * t2 - 1 + u;
        ok[u] = ti >= 0 && ti < T && (!keep || keep[b * T + ti] != 0.f);
        rows[u] = x + (long long)(b * T + (ok[u] ? ti : 0)) * F * C + ch;
    }
}

// Output columns f2 of fc_dw_cl are split over this many thread rows of a block.
#define DW_FG 4

// x (B, T, F, C) -> y (B, T2, F2, C): depthwise conv w (C, 3, 3) + bias (C), stride 2, padding
// 1 (NeMo's dw_striding; other forms take the composed path), over relu(x) (when `relu`) with
// frames whose keep (B, T) is 0 read as zero. Block = one output frame t2 of one batch entry ×
// SUB_CH channels (threadIdx.x) × DW_FG runs of f2 (threadIdx.y); a thread walks its run left to
// right, each step loading input columns 2·f2, 2·f2 + 1 of the 3 rows and carrying 2·f2 − 1 from
// the step before, taps in registers, summed bias first then row by row as the composed conv.
template <class Y, class X>
__device__ __forceinline__ void dw_cl_k(void* y_, const void* x_, const float* __restrict__ keep,
                                        const float* __restrict__ w, const float* __restrict__ bias, int T, int F,
                                        int C, int T2, int F2, int relu) {
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    const int ch = blockIdx.y * SUB_CH + threadIdx.x, t2 = blockIdx.x, b = blockIdx.z;
    const int per = (F2 + DW_FG - 1) / DW_FG, fa = threadIdx.y * per, fb = min(F2, fa + per);
    if (ch >= C || fa >= fb) return;  // no block-wide sync below
    float wr[9];
#pragma unroll
    for (int j = 0; j < 9; ++j) wr[j] = w[ch * 9 + j];
    const float b0 = bias[ch];
    const X* rows[3];
    bool ok[3];
    dw_cl_rows(rows, ok, x, keep, b, t2, T, F, C, ch);
    auto tap = [&](int u, int fi) -> float {
        if (!ok[u] || fi < 0 || fi >= F) return 0.f;
        const float v = ldf(rows[u], (long long)fi * C);
        return relu ? fmaxf(v, 0.f) : v;
    };
    float cp[3];
#pragma unroll
    for (int u = 0; u < 3; ++u) cp[u] = tap(u, 2 * fa - 1);
    Y* yr = y + ((long long)(b * T2 + t2) * F2) * C + ch;
#pragma unroll 4
    for (int f2 = fa; f2 < fb; ++f2) {
        float c0[3], c1[3];
#pragma unroll
        for (int u = 0; u < 3; ++u) {
            c0[u] = tap(u, 2 * f2);
            c1[u] = tap(u, 2 * f2 + 1);
        }
        float acc = b0;
#pragma unroll
        for (int u = 0; u < 3; ++u) {
            acc += wr[3 * u] * cp[u];
            acc += wr[3 * u + 1] * c0[u];
            acc += wr[3 * u + 2] * c1[u];
            cp[u] = c1[u];
        }
        stf(yr, (long long)f2 * C, acc);
    }
}
extern "C" __global__ void fc_dw_cl(void* y, const void* x, const float* keep, const float* w, const float* bias, int T,
                                    int F, int C, int T2, int F2, int relu, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, dw_cl_k, y, x, keep, w, bias, T, F, C, T2, F2, relu);
}

// fc_dw_cl for f16 inputs with C % 8 == 0: 8 channels a thread, each tap one 16-byte load (the
// 2-byte loads of fc_dw_cl left a 16-clip launch at 116 µs for 72 MB read, 0.6 TB/s: stop 50's
// ncu). Block = one output frame t2 of one batch entry × DW8_OCT channel octets (threadIdx.x) ×
// output columns f2 = threadIdx.y, + DW8_FY, …; the block's taps and biases staged in shared
// memory. Each output is fc_dw_cl's sum in fc_dw_cl's order (bias, then row by row the columns
// 2·f2 − 1, 2·f2, 2·f2 + 1), so the bits are the same.
#define DW8_OCT 16
#define DW8_FY 16
template <class Y>
__device__ __forceinline__ void dw_cl_h8_k(void* y_, const h16* __restrict__ x, const float* __restrict__ keep,
                                           const float* __restrict__ w, const float* __restrict__ bias, int T, int F,
                                           int C, int T2, int F2, int relu) {
    constexpr int CB = DW8_OCT * 8;  // channels a block
    __shared__ __align__(16) float ws[10][CB];  // taps 0..8, then the bias
    Y* y = (Y*)y_;
    const int t2 = blockIdx.x, b = blockIdx.z, c0 = blockIdx.y * CB;
    for (int i = threadIdx.y * DW8_OCT + threadIdx.x; i < 10 * CB; i += DW8_OCT * DW8_FY) {
        const int j = i / CB, cl = i - j * CB, ch = min(c0 + cl, C - 1);
        ws[j][cl] = j < 9 ? w[ch * 9 + j] : bias[ch];
    }
    __syncthreads();
    const int cl = threadIdx.x * 8, ch = c0 + cl;
    if (ch >= C) return;  // no block-wide sync below
    const h16* rows[3];
    bool ok[3];
    dw_cl_rows(rows, ok, x, keep, b, t2, T, F, C, ch);
    for (int f2 = threadIdx.y; f2 < F2; f2 += DW8_FY) {
        // every tap's load in flight before the sums
        uint4 q[9];
#pragma unroll
        for (int u = 0; u < 3; ++u)
#pragma unroll
            for (int v = 0; v < 3; ++v) {
                const int fi = 2 * f2 - 1 + v;
                q[3 * u + v] = ok[u] && fi >= 0 && fi < F ? *(const uint4*)(rows[u] + (long long)fi * C)
                                                          : make_uint4(0u, 0u, 0u, 0u);
            }
        float acc[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] = ws[9][cl + e];
#pragma unroll
        for (int j = 0; j < 9; ++j) {
            const u32 hw[4] = {q[j].x, q[j].y, q[j].z, q[j].w};
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float v = h2f((h16)(hw[e / 2] >> (16 * (e & 1))));
                acc[e] += ws[j][cl + e] * (relu ? fmaxf(v, 0.f) : v);
            }
        }
        const long long o = ((long long)(b * T2 + t2) * F2 + f2) * C + ch;
        if constexpr (sizeof(Y) == 2) {
            *(uint4*)(y + o) = make_uint4(pack_h2(acc[0], acc[1]), pack_h2(acc[2], acc[3]), pack_h2(acc[4], acc[5]),
                                          pack_h2(acc[6], acc[7]));
        } else {
            *(float4*)(y + o) = make_float4(acc[0], acc[1], acc[2], acc[3]);
            *(float4*)(y + o + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
        }
    }
}
extern "C" __global__ void fc_dw_cl_h8(void* y, const h16* x, const float* keep, const float* w, const float* bias,
                                       int T, int F, int C, int T2, int F2, int relu, int dt) {
    PDL_ENTER();
    DISPATCH_Y(dt, dw_cl_h8_k, y, x, keep, w, bias, T, F, C, T2, F2, relu);
}

// ---------------------------------------------------------------------------------------------
// Layer norms feeding the next GEMM (src/conformer.rs: Backend::layer_norm_pair and
// layer_norm_feeding): x (m, d) -> y = LN(x; g1, b1) and, with `pair`, z = LN(y; g2, b2) computed
// from y as stored (rounded to Y), as two separate norms would read it. With q, the last result
// is also quantized per row for a q8 GEMM exactly as quantize_rows_i8 does it from the stored
// values: q (m_pad, k_pad) int8, sq (m_pad) scales, rows >= m and columns >= d zero (the grid
// then covers m_pad rows). Block = one row, staged in shared memory (d floats); each thread owns
// columns tid, tid + blockDim.x, ...; two-pass mean and variance in f32.
__device__ __forceinline__ float as_stored(const float*, float v) { return v; }
__device__ __forceinline__ float as_stored(const h16*, float v) { return h2f(f2h(v)); }

template <class Y, class X>
__device__ __forceinline__ void ln_fused_k(void* y_, void* z_, signed char* __restrict__ q, float* __restrict__ sq,
                                           const void* x_, const float* __restrict__ g1, const float* __restrict__ b1,
                                           const float* __restrict__ g2, const float* __restrict__ b2, int m, int d,
                                           int k_pad, float eps, int pair) {
    extern __shared__ float v[];
    __shared__ float scratch[32];
    const long long row = blockIdx.x;
    if (row >= m) {  // a padding row of the quantized form (block-uniform)
        for (int c = threadIdx.x; c < k_pad; c += blockDim.x) q[row * k_pad + c] = 0;
        if (threadIdx.x == 0) sq[row] = 0.f;
        return;
    }
    const X* x = (const X*)x_ + row * d;
    float s = 0.f;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        v[c] = ldf(x, c);
        s += v[c];
    }
#pragma unroll 1
    for (int pass = 0; pass <= pair; ++pass) {
        const float* g = pass ? g2 : g1;
        const float* bb = pass ? b2 : b1;
        Y* out = (Y*)(pass ? z_ : y_) + row * d;
        const float mean = block_sum(s, scratch) / d;
        float var = 0.f;
        for (int c = threadIdx.x; c < d; c += blockDim.x) {
            float e = v[c] - mean;
            var += e * e;
        }
        const float rstd = rsqrtf(block_sum(var, scratch) / d + eps);
        s = 0.f;
        for (int c = threadIdx.x; c < d; c += blockDim.x) {
            float o = (v[c] - mean) * rstd * g[c] + (bb ? bb[c] : 0.f);
            stf(out, c, o);
            o = as_stored(out, o);
            v[c] = o;
            s += o;
        }
    }
    if (!q) return;
    float a = 0.f;
    for (int c = threadIdx.x; c < d; c += blockDim.x) a = fmaxf(a, fabsf(v[c]));
    a = block_max(a, scratch);
    const float inv = a > 0.f ? 127.f / a : 0.f;
    signed char* qr = q + row * k_pad;
    for (int c = threadIdx.x; c < k_pad; c += blockDim.x) qr[c] = c < d ? (signed char)__float2int_rn(v[c] * inv) : 0;
    if (threadIdx.x == 0) sq[row] = a / 127.f;
}
extern "C" __global__ void ln_fused(void* y, void* z, signed char* q, float* sq, const void* x, const float* g1,
                                    const float* b1, const float* g2, const float* b2, int m, int d, int k_pad, float eps,
                                    int pair, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, ln_fused_k, y, z, q, sq, x, g1, b1, g2, b2, m, d, k_pad, eps, pair);
}
