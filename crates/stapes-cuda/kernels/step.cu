// Decoder-step kernels whose parameters live on the device: `step` is the (1, 1, 1 + B) f32
// tensor of stapes_core::StepParams, [position, id_0 .. id_{B-1}]. Reading the position and the
// ids here instead of taking them as launch arguments is what lets one captured graph serve
// every step. All tensors are f32, contiguous, row-major.

// Position and ids are exact small integers in f32 (the host writes them); anything else reads
// as -1 and the kernels below treat it as out of range.
__device__ __forceinline__ int step_int(float v) {
    return (v >= 0.f && v < 16777216.f) ? (int)v : -1;
}

// out (B, 1, D) = table[id_b] + positions[pos]. An id or position out of range gives NaN rows
// (never a read outside the tables): the host checked both before writing the step tensor.
extern "C" __global__ void embed_step_f32(float* __restrict__ out, const float* __restrict__ table,
                                          const float* __restrict__ positions,
                                          const float* __restrict__ step, int B, int D, int V,
                                          int P) {
    PDL_ENTER();
    const int pos = step_int(step[0]);
    const long long n = (long long)B * D;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(e / D), c = (int)(e % D);
        const int id = step_int(step[1 + b]);
        out[e] = (id < 0 || id >= V || pos < 0 || pos >= P)
                     ? __int_as_float(0x7fc00000)
                     : table[(long long)id * D + c] + positions[(long long)pos * D + c];
    }
}

// dst (B, T, C) rows pos .. pos+n = src (B, n, C) (KV-cache append). Rows that would fall past
// T are not written (the host checked pos + n <= T).
extern "C" __global__ void write_rows_step_f32(float* __restrict__ dst, const float* __restrict__ src,
                                               const float* __restrict__ step, int B, int T, int C,
                                               int n) {
    PDL_ENTER();
    const int pos = step_int(step[0]);
    const long long total = (long long)B * n * C;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(e % C);
        const long long br = e / C;
        const int r = (int)(br % n), b = (int)(br / n);
        const int row = pos + r;
        if (pos >= 0 && row < T) dst[((long long)b * T + row) * C + c] = src[e];
    }
}

// Attention of one query row over keys read by lane groups (attn_one_k, attn_split_k): a key's
// D values are read by a group of L lanes, 4 values each (16 or 8 bytes a lane: one 128-byte
// line per f16 key of 64), so a warp covers 32 / L keys a pass. A round of RP passes issues
// every K and V load before the first score is reduced (a few microseconds of memory latency,
// not of arithmetic), then updates the lane group's online softmax (m, l, o): keys j0 + p jstep
// (p < RP), those at or past kend scoring -inf.
template <class X, int L, int RP>
__device__ __forceinline__ void attn_keys_round(const X* __restrict__ kb, const X* __restrict__ vb, long long ld,
                                                int li, bool dim_ok, float4 qv, int j0, int jstep, int kend,
                                                float scale, float& m, float& l, float4& o) {
    float4 kk[RP], vv[RP];
#pragma unroll
    for (int p = 0; p < RP; ++p) {
        const int j = j0 + p * jstep;
        const bool ok = dim_ok && j < kend;
        kk[p] = ok ? ld4(kb + (long long)j * ld, li) : make_float4(0.f, 0.f, 0.f, 0.f);
        vv[p] = ok ? ld4(vb + (long long)j * ld, li) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float sc[RP];
    float mr = F_NEG_INF;
#pragma unroll
    for (int p = 0; p < RP; ++p) {
        float acc = (kk[p].x * qv.x + kk[p].y * qv.y) + (kk[p].z * qv.z + kk[p].w * qv.w);
#pragma unroll
        for (int off = L / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        sc[p] = j0 + p * jstep < kend ? acc * scale : F_NEG_INF;
        mr = fmaxf(mr, sc[p]);
    }
#pragma unroll
    for (int off = L; off < 32; off <<= 1) mr = fmaxf(mr, __shfl_xor_sync(0xffffffffu, mr, off));
    const float mn = fmaxf(m, mr);
    const float base = mn == F_NEG_INF ? 0.f : mn;
    const float al = m == F_NEG_INF ? 0.f : expf(m - base);
    l *= al;
    o.x *= al;
    o.y *= al;
    o.z *= al;
    o.w *= al;
#pragma unroll
    for (int p = 0; p < RP; ++p) {
        const float e = sc[p] == F_NEG_INF ? 0.f : expf(sc[p] - base);
        l += e;
        o.x = fmaf(e, vv[p].x, o.x);
        o.y = fmaf(e, vv[p].y, o.y);
        o.z = fmaf(e, vv[p].z, o.z);
        o.w = fmaf(e, vv[p].w, o.w);
    }
    m = mn;
}

// The warp's key groups share m, so their (l, o) add as they are; group 0's lanes then leave
// the warp's (m, l, o) in shared memory for the block's 4 warps, and after the barrier every
// thread returns the block's maximum.
template <int L>
__device__ __forceinline__ float attn_warps_meet(float m, float l, float4 o, int g, int li, bool dim_ok,
                                                 float (*wo)[128], float* wm, float* wl) {
#pragma unroll
    for (int off = L; off < 32; off <<= 1) {
        l += __shfl_xor_sync(0xffffffffu, l, off);
        o.x += __shfl_xor_sync(0xffffffffu, o.x, off);
        o.y += __shfl_xor_sync(0xffffffffu, o.y, off);
        o.z += __shfl_xor_sync(0xffffffffu, o.z, off);
        o.w += __shfl_xor_sync(0xffffffffu, o.w, off);
    }
    const int warp = threadIdx.x >> 5;
    if (g == 0 && dim_ok) *(float4*)&wo[warp][4 * li] = o;
    if ((threadIdx.x & 31) == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
    __syncthreads();
    float M = F_NEG_INF;
#pragma unroll
    for (int w = 0; w < 4; ++w) M = fmaxf(M, wm[w]);
    return M;
}

// One query row per (sequence, head), q at Q + b q_stride + h D, over keys 0 .. kv_len of k, v
// (B, Tk, H*D): a decoder step's self-attention. Grid (1, H, B), 128 threads. The step graph's
// kernels and Backend::attention of one query row (the host-parameter step) run this same code,
// so the two agree bit for bit. Rounds of 8 passes of lane-group loads (attn_keys_round), the
// 4 warps merged in shared memory: one pass over the keys and one barrier (H200, stop 16: the
// row kernel's score / max / sum / V phases, eight barriers and three dependent rounds of
// global loads, took 6.3 us a turbo layer at ~20 keys). D % 4 == 0, D <= 128 (attn_one_ok).
__device__ __forceinline__ bool attn_one_ok(int D) { return D % 4 == 0 && D <= 128; }

template <int L>
__device__ __forceinline__ void attn_one_k(float* __restrict__ O, const float* __restrict__ Q, long long q_stride,
                                           const float* __restrict__ K, const float* __restrict__ V, int Tk, int H,
                                           int D, int kv_len, float scale) {
    constexpr int KP = 32 / L;  // keys a warp covers per pass
    constexpr int BP = 4 * KP;  // keys the block covers per pass
    constexpr int RP = 8;       // passes of loads in flight
    __shared__ __align__(16) float wo[4][128];  // float4 stores
    __shared__ float wm[4], wl[4];
    const int h = blockIdx.y, b = blockIdx.z;
    const long long ld = (long long)H * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane / L, li = lane % L;
    const bool dim_ok = 4 * li < D;
    const float4 qv = dim_ok ? ld4(Q + b * q_stride + h * D, li) : make_float4(0.f, 0.f, 0.f, 0.f);
    const float* kb = K + (long long)b * Tk * ld + h * D;
    const float* vb = V + (long long)b * Tk * ld + h * D;
    const int kw = warp * KP + g;  // this lane's first key
    float m = F_NEG_INF, l = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int base = 0; base < kv_len; base += RP * BP)
        attn_keys_round<float, L, RP>(kb, vb, ld, li, dim_ok, qv, base + kw, BP, kv_len, scale, m, l, o);
    const float M = attn_warps_meet<L>(m, l, o, g, li, dim_ok, wo, wm, wl);
    const float mb = M == F_NEG_INF ? 0.f : M;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < 4; ++w)
        if (wm[w] != F_NEG_INF) sum = fmaf(expf(wm[w] - mb), wl[w], sum);
    float* out = O + (long long)b * ld + h * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.f;
#pragma unroll
        for (int w = 0; w < 4; ++w)
            if (wm[w] != F_NEG_INF) acc = fmaf(expf(wm[w] - mb), wo[w][d], acc);
        out[d] = sum > 0.f ? acc / sum : 0.f;
    }
}
__device__ __forceinline__ void attn_one_d(float* O, const float* Q, long long q_stride, const float* K, const float* V,
                                           int Tk, int H, int D, int kv_len, float scale) {
    if (D <= 32) attn_one_k<8>(O, Q, q_stride, K, V, Tk, H, D, kv_len, scale);
    else if (D <= 64) attn_one_k<16>(O, Q, q_stride, K, V, Tk, H, D, kv_len, scale);
    else attn_one_k<32>(O, Q, q_stride, K, V, Tk, H, D, kv_len, scale);
}
// Backend::attention of one query row, q (B, 1, H*D), f32 in and out (attn_one_ok(D)).
extern "C" __global__ void __launch_bounds__(128) attn_one_f32(float* __restrict__ O, const float* __restrict__ Q,
                                                               const float* __restrict__ K, const float* __restrict__ V,
                                                               int Tk, int H, int D, int kv_len, float scale) {
    PDL_ENTER();
    attn_one_d(O, Q, (long long)H * D, K, V, Tk, H, D, kv_len, scale);
}

// One query row per sequence, q (B, 1, H*D), over the first pos+1 rows of the caches k, v
// (B, Tk, H*D); grid (1, H, B), 128 threads: attn_one_d where it applies, else attn_rows_k
// (common.cuh) on Tq = 1 with kv_len = pos+1, each what Backend::attention runs for the row.
extern "C" __global__ void attn_step_f32(float* __restrict__ O, const float* __restrict__ Q,
                                         const float* __restrict__ K, const float* __restrict__ V,
                                         const float* __restrict__ step, int Tk, int H, int D,
                                         float scale) {
    PDL_ENTER();
    const int pos = step_int(step[0]);
    const int kv_len = (pos < 0 || pos >= Tk) ? 0 : pos + 1;
    if (attn_one_ok(D)) attn_one_d(O, Q, (long long)H * D, K, V, Tk, H, D, kv_len, scale);
    else attn_rows_k<float, float>(O, nullptr, Q, K, V, 1, Tk, H, D, kv_len, scale, 0);
}

// Decoder cross-attention: a few query rows over a long K/V (1500 encoder frames). One block
// per (row, head) leaves most SMs idle, so the keys are split into chunks of SPLIT_KEYS, one
// block each (flash-decoding): grid (n_split, H, B*Tq), 128 threads. Each block writes its
// chunk's unnormalised output, max and sum to `part (B*Tq, H, n_split, D+2)`; attn_combine_f32
// rescales and merges them. Not causal; D % 4 == 0 and D <= 128.
//
// Each warp takes SPLIT_KEYS / 4 keys by lane groups, all their loads in one round
// (attn_keys_round; H200: one thread per key and a warp per V row took 13.5 us a turbo layer).
#define SPLIT_KEYS 64
#define SPLIT_WARP_KEYS (SPLIT_KEYS / 4)

template <class X, int L>
__device__ __forceinline__ void attn_split_k(float* __restrict__ part, const float* __restrict__ Q, const X* __restrict__ K,
                                             const X* __restrict__ V, int Tq, int Tk, int H, int D, int kv_len,
                                             float scale) {
    constexpr int KP = 32 / L;                      // keys a warp covers per pass
    constexpr int NP = SPLIT_WARP_KEYS / KP;        // passes per round
    constexpr int NR = NP > 8 ? NP / 8 : 1;          // rounds: at most 8 passes of loads in flight
    constexpr int RP = NP / NR;                      // passes per round
    __shared__ __align__(16) float wo[4][128];  // float4 stores
    __shared__ float wm[4], wl[4];
    const int s = blockIdx.x, h = blockIdx.y, r = blockIdx.z;
    const int n_split = gridDim.x;
    const int b = r / Tq;
    const long long ld = (long long)H * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane / L, li = lane % L;  // this lane's key in a pass, its 4 values of the key
    const bool dim_ok = 4 * li < D;
    const int kend = min(kv_len, (s + 1) * SPLIT_KEYS);
    const int kw = s * SPLIT_KEYS + warp * SPLIT_WARP_KEYS + g;  // this lane's first key
    const float4 qv = dim_ok ? ld4(Q + (long long)r * ld + h * D, li) : make_float4(0.f, 0.f, 0.f, 0.f);
    const X* kb = K + (long long)b * Tk * ld + h * D;
    const X* vb = V + (long long)b * Tk * ld + h * D;
    float m = F_NEG_INF, l = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int rd = 0; rd < NR; ++rd)
        attn_keys_round<X, L, RP>(kb, vb, ld, li, dim_ok, qv, kw + rd * RP * KP, KP, kend, scale, m, l, o);
    const float M = attn_warps_meet<L>(m, l, o, g, li, dim_ok, wo, wm, wl);
    const float base = M == F_NEG_INF ? 0.f : M;
    float* out = part + (((long long)r * H + h) * n_split + s) * (D + 2);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.f;
#pragma unroll
        for (int w = 0; w < 4; ++w)
            if (wm[w] != F_NEG_INF) acc = fmaf(expf(wm[w] - base), wo[w][d], acc);
        out[d] = acc;
    }
    if (threadIdx.x == 0) {
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < 4; ++w)
            if (wm[w] != F_NEG_INF) sum = fmaf(expf(wm[w] - base), wl[w], sum);
        out[D] = M;
        out[D + 1] = sum;
    }
}
template <class X>
__device__ __forceinline__ void attn_split_d(float* part, const float* Q, const X* K, const X* V, int Tq, int Tk, int H,
                                             int D, int kv_len, float scale) {
    if (D <= 32) attn_split_k<X, 8>(part, Q, K, V, Tq, Tk, H, D, kv_len, scale);
    else if (D <= 64) attn_split_k<X, 16>(part, Q, K, V, Tq, Tk, H, D, kv_len, scale);
    else attn_split_k<X, 32>(part, Q, K, V, Tq, Tk, H, D, kv_len, scale);
}
extern "C" __global__ void __launch_bounds__(128) attn_split_f32(float* __restrict__ part, const float* __restrict__ Q,
                                                                 const float* __restrict__ K, const float* __restrict__ V,
                                                                 int Tq, int Tk, int H, int D, int kv_len, float scale) {
    PDL_ENTER();
    attn_split_d<float>(part, Q, K, V, Tq, Tk, H, D, kv_len, scale);
}
// The same over f16 K/V (Backend::compact_copy of a window's cross K/V): half the bytes a step
// reads; q, the partials and every sum stay f32.
extern "C" __global__ void __launch_bounds__(128) attn_split_kv16(float* __restrict__ part, const float* __restrict__ Q,
                                                                  const h16* __restrict__ K, const h16* __restrict__ V,
                                                                  int Tq, int Tk, int H, int D, int kv_len, float scale) {
    PDL_ENTER();
    attn_split_d<h16>(part, Q, K, V, Tq, Tk, H, D, kv_len, scale);
}

// O (B*Tq, H*D) = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s; grid (H, B*Tq), 256 threads,
// n_split + 256 floats of dynamic shared memory. The splits' weights are staged once; then
// 256 / D groups of D threads each sum every (256 / D)-th split, all their loads independent
// (a dependent loop over the splits was 9.7 us for turbo's 20 heads, H200).
extern "C" __global__ void __launch_bounds__(256) attn_combine_f32(float* __restrict__ O, const float* __restrict__ part,
                                                                   int H, int D, int n_split) {
    PDL_ENTER();
    extern __shared__ float csm[];  // wgt (n_split), then red (256)
    float* wgt = csm;
    float* red = csm + n_split;
    __shared__ float scratch[32];
    const int h = blockIdx.x, r = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const float* p = part + ((long long)r * H + h) * n_split * (D + 2);
    float M = F_NEG_INF;
    for (int s = tid; s < n_split; s += nt) M = fmaxf(M, p[s * (D + 2) + D]);
    M = block_max(M, scratch);
    const float base = M == F_NEG_INF ? 0.f : M;
    float L = 0.f;
    for (int s = tid; s < n_split; s += nt) {
        const float ms = p[s * (D + 2) + D];
        const float w = ms == F_NEG_INF ? 0.f : expf(ms - base);
        wgt[s] = w;
        L = fmaf(w, p[s * (D + 2) + D + 1], L);
    }
    L = block_sum(L, scratch);  // its barriers also publish wgt
    const int G = nt / D, gi = tid / D, d = tid - gi * D;
    if (gi < G) {
        float acc = 0.f;
#pragma unroll 4
        for (int s = gi; s < n_split; s += G) acc = fmaf(wgt[s], p[s * (D + 2) + d], acc);
        red[gi * D + d] = acc;
    }
    __syncthreads();
    if (tid < D) {
        float acc = 0.f;
        for (int q = 0; q < G; ++q) acc += red[q * D + tid];
        O[(long long)r * H * D + h * D + tid] = L > 0.f ? acc / L : 0.f;
    }
}

// ---- fused decoder-step projection (Backend::norm_linear / qkv_step) ----
// y (m, n) = act(LN(x) (m, k) . W (n, k)^T + bias) + resid, W f16 row-major, everything else f32,
// m <= 32 rows (batch x beams), k % 8 == 0. 256 threads = 8 warps per block; the warps form
// 8 / ks groups of ks warps, each group COLS output features, its ks warps splitting K (a wide
// grid for small N: one block per 8 / ks * COLS features). Grid (ceil(n / (8 / ks * COLS)),
// ceil(m / MG)). The block's MG rows of x (layer-normed when gamma != null) sit in shared memory;
// every weight row is read once per block with 16-byte streaming loads, used for all MG rows.
// With kc != null (qkv_step) the k and v thirds of each output row (features kv_c .. 3 kv_c)
// also go to the caches kc, vc (m, T, kv_c) at row pos = step[0] (one token per sequence).
#define SG_WARPS 8
// chunks of 256 K values per weight-row batch of the wide form (K = 1280 in one)
#define SG_BATCH 5

__device__ __forceinline__ uint4 ld_stream16(const void* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

__device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b) {
    return h2f((h16)(w.x & 0xffff)) * a.x + h2f((h16)(w.x >> 16)) * a.y + h2f((h16)(w.y & 0xffff)) * a.z +
           h2f((h16)(w.y >> 16)) * a.w + h2f((h16)(w.z & 0xffff)) * b.x + h2f((h16)(w.z >> 16)) * b.y +
           h2f((h16)(w.w & 0xffff)) * b.z + h2f((h16)(w.w >> 16)) * b.w;
}

template <int MG, int COLS, bool WALK>
__device__ __forceinline__ void step_gemv_k(float* __restrict__ y, const float* __restrict__ x, const h16* __restrict__ w,
                                            const float* __restrict__ bias, const float* __restrict__ resid,
                                            const float* __restrict__ gamma, const float* __restrict__ beta, float eps,
                                            int m, int n, int k, int act, float* __restrict__ kc, float* __restrict__ vc,
                                            const float* __restrict__ step, int kv_c, int T, int ks, int pf, int gsm) {
    extern __shared__ __align__(16) float xs[];  // (MG, k), then with gsm gamma and beta (2, k)
    __shared__ float red[SG_WARPS * COLS * MG];
    const int m0 = blockIdx.y * MG;
    const int rows = min(MG, m - m0);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = warp / ks, slice = warp % ks;
    const int per_block = SG_WARPS / ks * COLS;
    const int tiles = (n + per_block - 1) / per_block;
    // WALK (the wide form): a grid narrower than the tiles walks them (the logits: one wave of
    // resident blocks, each staging and norming x once, instead of ~3 waves of 1621 blocks);
    // the other forms run one tile a block (the loop's registers would cost them occupancy).
    auto col_of = [&](int tile) { return (tile * (SG_WARPS / ks) + group) * COLS; };
    const h16* wr[COLS];
    auto rows_of = [&](int col0) {
#pragma unroll
        for (int c = 0; c < COLS; ++c) wr[c] = w + (long long)min(col0 + c, n - 1) * k;
    };
    int col0 = col_of(blockIdx.x);
    bool live = col0 < n;
    rows_of(col0);
    // the first weight loads go out before the x rows are staged and normed
    const int i0 = (slice * 32 + lane) * 8, stride = 256 * ks;
    // the wide form over 1 or 2 x rows loads NB chunks of each of its weight rows at once,
    // every load of a batch in flight before the first product (H200 harness: one row's logits
    // at 4.1 TB/s, a plain read's rate, vs 3.0 with two chunks at a time); more x rows keep one
    // chunk here, then two at a time (their sums need the registers: batches of 2 chunks for 8
    // rows took 147 registers and made 5 beams' logits 82 -> 108 us)
    constexpr bool BATCH = WALK && MG <= 2;
    constexpr int NB = !BATCH ? 1 : MG == 1 ? SG_BATCH : 3;
    uint4 first[COLS][NB];
    auto load_batch = [&](int base) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const int i = i0 + base + b * stride;
#pragma unroll
            for (int c = 0; c < COLS; ++c) first[c][b] = i < k ? ld_stream16(wr[c] + i) : make_uint4(0u, 0u, 0u, 0u);
        }
    };
    if (live && i0 < k) load_batch(0);
    // [pdl] only the weight (written at load, never by the work ahead) is read before the wait:
    // its first chunk into registers, the rest of this thread's share towards L2 (pf != 0:
    // STAPES_CUDA_PDL_PREFETCH, for A/B timing)
    if (live && pf) {
        for (int i = i0 + stride; i < k; i += stride) {
#pragma unroll
            for (int c = 0; c < COLS; ++c) asm volatile("prefetch.global.L2 [%0];" ::"l"(wr[c] + i));
        }
    }
    PDL_ENTER();
    // x rows into shared memory: thread t takes float4 columns t, t + 256, .. of every row, so
    // with a norm it meets the same columns (and gamma, beta) in each row. With gsm, gamma and
    // beta come into shared memory behind the rows by cp.async, issued first, so they arrive
    // while x loads and the statistics reduce; else the norm reads them from global memory.
    // The statistics are block reductions over every row at once (H200, stop 17: turbo's qkv
    // step GEMV 7.2 us split-K with one warp a row -> 3.8 us wide with these; the wide form
    // with one warp a row and gamma, beta loaded after the statistics gained nothing)
    const int k4 = k >> 2, tid = threadIdx.x, nt = blockDim.x;
    float4* xs4 = (float4*)xs;
    float4* gs4 = xs4 + MG * k4;  // (k) gamma, then (k) beta, with gsm
    if (gamma && gsm) {
        for (int c4 = tid; c4 < k4; c4 += nt) {
            tc_cp_async16(gs4 + c4, (const float4*)gamma + c4, 16);
            if (beta) tc_cp_async16(gs4 + k4 + c4, (const float4*)beta + c4, 16);
        }
        tc_cp_commit();
    }
    float part[MG];
#pragma unroll
    for (int r = 0; r < MG; ++r) {
        part[r] = 0.f;
        const float4* xr = (const float4*)(x + (long long)(m0 + r) * k);
#pragma unroll 1
        for (int c4 = tid; c4 < k4; c4 += nt) {
            const float4 v = r < rows ? xr[c4] : make_float4(0.f, 0.f, 0.f, 0.f);
            xs4[r * k4 + c4] = v;
            part[r] += (v.x + v.y) + (v.z + v.w);
        }
    }
    if (gamma) {
        // every row's sum over the block at once (two buffers: the second reduction needs no
        // barrier for the first's readers); rows past `rows` are zeros and stay zeros
        __shared__ float lnred[2][SG_WARPS][MG];
        auto block_sums = [&](int buf) {
#pragma unroll
            for (int r = 0; r < MG; ++r) {
                const float v = warp_sum(part[r]);
                if (lane == 0) lnred[buf][warp][r] = v;
            }
            __syncthreads();
#pragma unroll
            for (int r = 0; r < MG; ++r) {
                float t = 0.f;
#pragma unroll
                for (int q = 0; q < SG_WARPS; ++q) t += lnred[buf][q][r];
                part[r] = t;
            }
        };
        block_sums(0);
        float mean[MG];
#pragma unroll
        for (int r = 0; r < MG; ++r) {
            mean[r] = part[r] / (float)k;
            part[r] = 0.f;
#pragma unroll 1
            for (int c4 = tid; c4 < k4; c4 += nt) {
                const float4 v = xs4[r * k4 + c4];  // this thread's own store
                const float a = v.x - mean[r], b = v.y - mean[r], c = v.z - mean[r], d = v.w - mean[r];
                part[r] += (a * a + b * b) + (c * c + d * d);
            }
        }
        block_sums(1);
        if (gsm) tc_cp_wait<0>();
#pragma unroll
        for (int r = 0; r < MG; ++r) {
            if (r >= rows) break;
            const float rstd = rsqrtf(part[r] / (float)k + eps);
#pragma unroll 1
            for (int c4 = tid; c4 < k4; c4 += nt) {
                // with gsm, this thread's own copies
                const float4* gp = gsm ? gs4 : (const float4*)gamma;
                const float4* bp = gsm ? gs4 + k4 : (const float4*)beta;
                const float4 g = gp[c4];
                const float4 bt = beta ? bp[c4] : make_float4(0.f, 0.f, 0.f, 0.f);
                float4 v = xs4[r * k4 + c4];
                v.x = (v.x - mean[r]) * rstd * g.x + bt.x;
                v.y = (v.y - mean[r]) * rstd * g.y + bt.y;
                v.z = (v.z - mean[r]) * rstd * g.z + bt.z;
                v.w = (v.w - mean[r]) * rstd * g.w + bt.w;
                xs4[r * k4 + c4] = v;
            }
        }
    }
    __syncthreads();
    const int pos = step ? step_int(step[0]) : -1;
    auto tile_work = [&](int tile) {
        if (WALK && tile != (int)blockIdx.x) {
            col0 = col_of(tile);
            live = col0 < n;
            rows_of(col0);
        }
        float acc[COLS][MG];
#pragma unroll
        for (int c = 0; c < COLS; ++c)
#pragma unroll
            for (int r = 0; r < MG; ++r) acc[c][r] = 0.f;
        if (BATCH && live && i0 < k) {
            // the same products in the same order as below, NB chunks of loads at a time
            for (int base = 0; base < k; base += NB * stride) {
                if (base != 0 || tile != (int)blockIdx.x) load_batch(base);
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    const int i = i0 + base + b * stride;
                    if (i >= k) break;
#pragma unroll
                    for (int r = 0; r < MG; ++r) {
                        const float4 a = ((const float4*)(xs + r * k + i))[0];
                        const float4 bb = ((const float4*)(xs + r * k + i))[1];
#pragma unroll
                        for (int c = 0; c < COLS; ++c) acc[c][r] += dot8(first[c][b], a, bb);
                    }
                }
            }
        } else if (live && i0 < k) {
            if (WALK && tile != (int)blockIdx.x) load_batch(0);
#pragma unroll
            for (int r = 0; r < MG; ++r) {
                const float4 a = ((const float4*)(xs + r * k + i0))[0];
                const float4 b = ((const float4*)(xs + r * k + i0))[1];
#pragma unroll
                for (int c = 0; c < COLS; ++c) acc[c][r] += dot8(first[c][0], a, b);
            }
#pragma unroll 2
            for (int i = i0 + stride; i < k; i += stride) {
                uint4 raw[COLS];
#pragma unroll
                for (int c = 0; c < COLS; ++c) raw[c] = ld_stream16(wr[c] + i);
#pragma unroll
                for (int r = 0; r < MG; ++r) {
                    const float4 a = ((const float4*)(xs + r * k + i))[0];
                    const float4 b = ((const float4*)(xs + r * k + i))[1];
#pragma unroll
                    for (int c = 0; c < COLS; ++c) acc[c][r] += dot8(raw[c], a, b);
                }
            }
        }
#pragma unroll
        for (int c = 0; c < COLS; ++c)
#pragma unroll
            for (int r = 0; r < MG; ++r) acc[c][r] = warp_sum(acc[c][r]);
        if (ks > 1) {
            // the group's K slices meet in shared memory, in slice order (a fixed summation
            // order); the barrier ahead keeps the previous tile's sums until they were read
            if (WALK && tile != (int)blockIdx.x) __syncthreads();
#pragma unroll
            for (int c = 0; c < COLS; ++c)
#pragma unroll
                for (int r = 0; r < MG; ++r)
                    if (lane == ((c * MG + r) & 31)) red[(warp * COLS + c) * MG + r] = acc[c][r];
            __syncthreads();
            if (slice != 0) return;
#pragma unroll
            for (int c = 0; c < COLS; ++c)
#pragma unroll
                for (int r = 0; r < MG; ++r) {
                    float t = 0.f;
                    for (int q = 0; q < ks; ++q) t += red[((warp + q) * COLS + c) * MG + r];
                    acc[c][r] = t;
                }
        }
        if (!live) return;
#pragma unroll
        for (int c = 0; c < COLS; ++c) {
#pragma unroll
            for (int r = 0; r < MG; ++r) {
                const int col = col0 + c, row = m0 + r;
                // spread the stores over the lanes (every lane holds every sum)
                if (lane != ((c * MG + r) & 31) || col >= n || r >= rows) continue;
                float v = bias ? acc[c][r] + bias[col] : acc[c][r];
                if (act == 1) v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
                if (resid) v += resid[(long long)row * n + col];
                y[(long long)row * n + col] = v;
                if (kc && pos >= 0 && pos < T && col >= kv_c) {
                    float* cache = col < 2 * kv_c ? kc : vc;
                    const int cc = col < 2 * kv_c ? col - kv_c : col - 2 * kv_c;
                    cache[((long long)row * T + pos) * kv_c + cc] = v;
                }
            }
        }
    };
    if (WALK)
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) tile_work(tile);
    else
        tile_work(blockIdx.x);
}

#define STEP_GEMV(NAME, MG, COLS)                                                                                    \
    extern "C" __global__ void NAME(float* y, const float* x, const h16* w, const float* bias, const float* resid,   \
                                    const float* gamma, const float* beta, float eps, int m, int n, int k, int act,  \
                                    float* kc, float* vc, const float* step, int kv_c, int T, int ks, int pf,        \
                                    int gsm) {                                                                       \
        step_gemv_k<MG, COLS, COLS == 4>(y, x, w, bias, resid, gamma, beta, eps, m, n, k, act, kc, vc, step, kv_c, T, ks, pf, \
                                         gsm);                                                                       \
    }
// 4 features per warp, no K split: wide N (the logits)
STEP_GEMV(step_gemv_1, 1, 4)
STEP_GEMV(step_gemv_2, 2, 4)
STEP_GEMV(step_gemv_4, 4, 4)
STEP_GEMV(step_gemv_8, 8, 4)
// 1 feature per warp group, K split over ks warps: the layers' projections (N of a few d)
STEP_GEMV(step_gemv_1_c1, 1, 1)
STEP_GEMV(step_gemv_2_c1, 2, 1)
STEP_GEMV(step_gemv_4_c1, 4, 1)
STEP_GEMV(step_gemv_8_c1, 8, 1)

// Decoder self-attention of one step reading q in place from the packed qkv (B, 1, 3 H D)
// (q rows of stride 3 H D; attn_rows_k indexes q as (b, 0) rows of stride H D, so its base
// moves by 2 H D per sequence). K/V rows of the step are already in the caches (step_gemv's
// epilogue). Grid (1, H, B), 128 threads: the same code as attn_step_f32.
extern "C" __global__ void attn_step_packed_f32(float* __restrict__ O, const float* __restrict__ QKV,
                                                const float* __restrict__ K, const float* __restrict__ V,
                                                const float* __restrict__ step, int Tk, int H, int D, float scale) {
    PDL_ENTER();
    const int pos = step_int(step[0]);
    const int kv_len = (pos < 0 || pos >= Tk) ? 0 : pos + 1;
    if (attn_one_ok(D)) {
        attn_one_d(O, QKV, 3LL * H * D, K, V, Tk, H, D, kv_len, scale);
    } else {
        const float* q = QKV + (long long)blockIdx.z * 2 * H * D;
        attn_rows_k<float, float>(O, nullptr, q, K, V, 1, Tk, H, D, kv_len, scale, 0);
    }
}
