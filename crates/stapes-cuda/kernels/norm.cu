// Row-wise normalisations and softmaxes over f32 or f16 rows (`dt`, common.cuh): one block (or
// warp) per row, statistics in f32 (two-pass variance from the cached mean, so large offsets do
// not cancel). gamma and beta are f32.

template <class Y, class X>
__device__ __forceinline__ void layer_norm_k(void* y_, const void* x_, const float* __restrict__ g, const float* __restrict__ b,
                                             int n, float eps, int has_beta) {
    __shared__ float scratch[32];
    const X* xr = (const X*)x_ + (long long)blockIdx.x * n;
    Y* yr = (Y*)y_ + (long long)blockIdx.x * n;
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += ldf(xr, i);
    float mean = block_sum(s, scratch) / n;
    float v = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { float d = ldf(xr, i) - mean; v += d * d; }
    float var = block_sum(v, scratch) / n;
    float inv = rsqrtf(var + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float o = (ldf(xr, i) - mean) * inv * g[i];
        stf(yr, i, has_beta ? o + b[i] : o);
    }
}
extern "C" __global__ void layer_norm(void* y, const void* x, const float* g, const float* b, int n, float eps, int has_beta,
                                      int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, layer_norm_k, y, x, g, b, n, eps, has_beta);
}

// The same layer norm with one warp per row, the row held in registers (n % 4 == 0, n <= 2048):
// one read and one write of the row instead of three passes through L1.
#define LN_MAX4 16
template <class Y, class X>
__device__ __forceinline__ void layer_norm_rows_k(void* y_, const void* x_, const float* __restrict__ g,
                                                  const float* __restrict__ b, int rows, int n, float eps, int has_beta) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const X* xr = (const X*)x_ + (long long)r * n;
    Y* yr = (Y*)y_ + (long long)r * n;
    int n4 = n >> 2;
    float4 v[LN_MAX4];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < LN_MAX4; ++j) {
        int i = lane + j * 32;
        v[j] = i < n4 ? ld4(xr, i) : make_float4(0.f, 0.f, 0.f, 0.f);
        s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    }
    float mean = warp_sum(s) / n;
    float q = 0.f;
#pragma unroll
    for (int j = 0; j < LN_MAX4; ++j) {
        if (lane + j * 32 < n4) {
            float a = v[j].x - mean, bb = v[j].y - mean, c = v[j].z - mean, d = v[j].w - mean;
            q += (a * a + bb * bb) + (c * c + d * d);
        }
    }
    float inv = rsqrtf(warp_sum(q) / n + eps);
#pragma unroll
    for (int j = 0; j < LN_MAX4; ++j) {
        int i = lane + j * 32;
        if (i < n4) {
            float4 gg = ((const float4*)g)[i];
            float4 o = make_float4((v[j].x - mean) * inv * gg.x, (v[j].y - mean) * inv * gg.y, (v[j].z - mean) * inv * gg.z,
                                   (v[j].w - mean) * inv * gg.w);
            if (has_beta) {
                float4 bb = ((const float4*)b)[i];
                o.x += bb.x; o.y += bb.y; o.z += bb.z; o.w += bb.w;
            }
            st4(yr, i, o);
        }
    }
}
extern "C" __global__ void layer_norm_rows(void* y, const void* x, const float* g, const float* b, int rows, int n, float eps,
                                           int has_beta, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, layer_norm_rows_k, y, x, g, b, rows, n, eps, has_beta);
}

// The same for f16 rows in and out (n % 8 == 0, n <= 2048, rows 16-byte aligned): 16-byte
// accesses of 8 halves, as many as the row has per lane held in registers (H200, stop 15: a
// 1500 x 1280 turbo norm 5.4 -> 4.6 us back to back, 8.2 -> 5.5 us with cold caches).
#define LN16_MAXC 8
// Gamma and beta of values 8i … 8i+7 of a row (b null: zeros).
struct Gb8 {
    float g[8], b[8];
};
__device__ __forceinline__ Gb8 ln_gb8(const float* __restrict__ g, const float* __restrict__ b, int i) {
    const float4 g0 = ((const float4*)g)[2 * i], g1 = ((const float4*)g)[2 * i + 1];
    float4 b0 = make_float4(0.f, 0.f, 0.f, 0.f), b1 = b0;
    if (b) {
        b0 = ((const float4*)b)[2 * i];
        b1 = ((const float4*)b)[2 * i + 1];
    }
    return Gb8{{g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w}, {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w}};
}
// Values 8i … 8i+7 of a normed row, (x - mean)·inv·g + b, as 8 f16.
__device__ __forceinline__ uint4 ln_out8(const float (&x)[8], float mean, float inv, const Gb8& p) {
    uint4 o;
    u32* ow = (u32*)&o;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        ow[e] = pack_h2((x[2 * e] - mean) * inv * p.g[2 * e] + p.b[2 * e],
                        (x[2 * e + 1] - mean) * inv * p.g[2 * e + 1] + p.b[2 * e + 1]);
    }
    return o;
}
// One warp's row held as v (lane's chunks lane, lane + 32, …, C of them): normalizes it, stores it
// to yr (null: not stored, y8r's e4m3 being its only reader), and leaves v holding the stored halves (what a following norm of the stored row reads).
// gb: the lane's chunks' gamma and beta, loaded beside the row (ln16_gb) so that their round trip
// is not added after the row's two sums; null: loaded here. y8r, where given: the stored halves
// also as e4m3 (the FP8 GEMM's input: the bits quant_fp8 makes of the stored row).
template <int C>
__device__ __forceinline__ void ln16_pass(uint4 (&v)[C], uint4* __restrict__ yr, const Gb8* gb, const float* __restrict__ g,
                                          const float* __restrict__ b, int n, float eps, uint2* __restrict__ y8r = nullptr) {
    const int lane = threadIdx.x & 31, n8 = n >> 3;
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < C; ++j) {
        const u32* w = (const u32*)&v[j];
#pragma unroll
        for (int e = 0; e < 4; ++e) s += h2f((h16)(w[e] & 0xffff)) + h2f((h16)(w[e] >> 16));
    }
    const float mean = warp_sum(s) / n;
    float q = 0.f;
#pragma unroll
    for (int j = 0; j < C; ++j) {
        if (lane + j * 32 < n8) {
            const u32* w = (const u32*)&v[j];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float a = h2f((h16)(w[e] & 0xffff)) - mean, c = h2f((h16)(w[e] >> 16)) - mean;
                q += a * a + c * c;
            }
        }
    }
    const float inv = rsqrtf(warp_sum(q) / n + eps);
#pragma unroll
    for (int j = 0; j < C; ++j) {
        const int i = lane + j * 32;
        if (i < n8) {
            const u32* w = (const u32*)&v[j];
            float x[8];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                x[2 * e] = h2f((h16)(w[e] & 0xffff));
                x[2 * e + 1] = h2f((h16)(w[e] >> 16));
            }
            const uint4 o = ln_out8(x, mean, inv, gb ? gb[j] : ln_gb8(g, b, i));
            if (yr) yr[i] = o;
            v[j] = o;
            if (y8r) y8r[i] = e4m3x8(o);
        }
    }
}
template <int C>
__device__ __forceinline__ void ln16_load(uint4 (&v)[C], const uint4* __restrict__ xr, int n) {
    const int lane = threadIdx.x & 31, n8 = n >> 3;
#pragma unroll
    for (int j = 0; j < C; ++j) {
        const int i = lane + j * 32;
        v[j] = i < n8 ? xr[i] : make_uint4(0, 0, 0, 0);
    }
}
template <int C>
__device__ __forceinline__ void ln16_gb(Gb8 (&gb)[C], const float* __restrict__ g, const float* __restrict__ b, int n) {
    const int lane = threadIdx.x & 31, n8 = n >> 3;
#pragma unroll
    for (int j = 0; j < C; ++j) {
        const int i = lane + j * 32;
        if (i < n8) gb[j] = ln_gb8(g, b, i);
    }
}
// Chunks of 8 halves a lane for a row of n (n % 8 == 0, n <= 2048): the kernels below are
// instantiated for each count so a lane holds exactly its row's chunks.
#define LN16_DISPATCH(n, F, ...)                                \
    switch (((n >> 3) + 31) >> 5) {                           \
        case 1: F<1>(__VA_ARGS__); break;                     \
        case 2: F<2>(__VA_ARGS__); break;                     \
        case 3: F<3>(__VA_ARGS__); break;                     \
        case 4: F<4>(__VA_ARGS__); break;                     \
        case 5: F<5>(__VA_ARGS__); break;                     \
        case 6: F<6>(__VA_ARGS__); break;                     \
        case 7: F<7>(__VA_ARGS__); break;                     \
        default: F<LN16_MAXC>(__VA_ARGS__); break;            \
    }
// PRE: the lane's gamma and beta loaded beside its row.
template <int C, bool PRE>
__device__ __forceinline__ void layer_norm_rows16_k(h16* __restrict__ y, const h16* __restrict__ x, const float* __restrict__ g,
                                                    const float* __restrict__ b, int r, int n, float eps,
                                                    unsigned char* __restrict__ y8) {
    uint4 v[C];
    Gb8 gb[PRE ? C : 1];
    ln16_load(v, (const uint4*)(x + (long long)r * n), n);
    if constexpr (PRE) ln16_gb(gb, g, b, n);
    ln16_pass(v, y ? (uint4*)(y + (long long)r * n) : nullptr, PRE ? gb : nullptr, g, b, n, eps,
              y8 ? (uint2*)(y8 + (long long)r * n) : nullptr);
}
template <int C>
__device__ __forceinline__ void ln_rows16_plain(h16* y, const h16* x, const float* g, const float* b, int r, int n, float eps,
                                                unsigned char* y8) {
    layer_norm_rows16_k<C, false>(y, x, g, b, r, n, eps, y8);
}
// y8: null, or the rows also as e4m3 for an FP8 GEMM that reads this norm (src/fp8.rs); y null
// with y8 set: the e4m3 rows only (the same entry for layer_norm_rows16_gb).
extern "C" __global__ void layer_norm_rows16(h16* __restrict__ y, const h16* __restrict__ x, const float* __restrict__ g,
                                             const float* __restrict__ b, int rows, int n, float eps, int has_beta,
                                             unsigned char* __restrict__ y8) {
    PDL_ENTER();
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    LN16_DISPATCH(n, ln_rows16_plain, y, x, g, has_beta ? b : nullptr, r, n, eps, y8);
}
// The same with the parameters in flight beside the row, so their round trip is not added after
// the row's sums. Rows up to 8 · 32 · LN16_GB_MAXC = 1280 wide only (the host's LN16_GB_MAX_N;
// it launches the plain form for wider ones). It takes ~120 registers where the plain form takes
// ~60, so the host picks it where its grid still fits one wave (a 1500-row turbo norm), and the
// plain form for larger batches, which need the occupancy more.
#define LN16_GB_MAXC 5
// (counts past LN16_GB_MAXC, which the host never launches, share the widest instantiation, so
// no case of the dispatch raises the kernel's register count)
template <int C>
__device__ __forceinline__ void ln_rows16_gb(h16* y, const h16* x, const float* g, const float* b, int r, int n, float eps,
                                             unsigned char* y8) {
    layer_norm_rows16_k<(C < LN16_GB_MAXC ? C : LN16_GB_MAXC), true>(y, x, g, b, r, n, eps, y8);
}
extern "C" __global__ void layer_norm_rows16_gb(h16* __restrict__ y, const h16* __restrict__ x, const float* __restrict__ g,
                                                const float* __restrict__ b, int rows, int n, float eps, int has_beta,
                                                unsigned char* __restrict__ y8) {
    PDL_ENTER();
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    LN16_DISPATCH(n, ln_rows16_gb, y, x, g, has_beta ? b : nullptr, r, n, eps, y8);
}
// layer_norm_pair's f16 form (src/conformer.rs, ln_launch; no int8 output): y = LN(x; g1, b1)
// and z = LN(y as stored; g2, b2), a warp a row as layer_norm_rows16 (each result the bits that
// kernel gives for its input); z8: null, or z's rows also as e4m3 for the FP8 GEMM that reads z
// (the next block's first linear; src/fp8.rs), the bytes quant_fp8 would make of them; z null
// where that GEMM is z's only reader (conformer.rs norms_feeding_fp8), z8 then z's one form.
template <int C>
__device__ __forceinline__ void ln_pair_rows16_k(h16* __restrict__ y, h16* __restrict__ z, const h16* __restrict__ x,
                                                 const float* __restrict__ g1, const float* __restrict__ b1,
                                                 const float* __restrict__ g2, const float* __restrict__ b2, int r, int n,
                                                 float eps, unsigned char* __restrict__ z8) {
    uint4 v[C];
    ln16_load(v, (const uint4*)(x + (long long)r * n), n);
    ln16_pass(v, (uint4*)(y + (long long)r * n), nullptr, g1, b1, n, eps);
    ln16_pass(v, z ? (uint4*)(z + (long long)r * n) : nullptr, nullptr, g2, b2, n, eps,
              z8 ? (uint2*)(z8 + (long long)r * n) : nullptr);
}
extern "C" __global__ void ln_pair_rows16(h16* __restrict__ y, h16* __restrict__ z, const h16* __restrict__ x,
                                          const float* __restrict__ g1, const float* __restrict__ b1,
                                          const float* __restrict__ g2, const float* __restrict__ b2, int rows, int n,
                                          float eps, unsigned char* __restrict__ z8) {
    PDL_ENTER();
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    LN16_DISPATCH(n, ln_pair_rows16_k, y, z, x, g1, b1, g2, b2, r, n, eps, z8);
}

// A split-K GEMM's last step and the norms after it (src/conformer.rs, linear_add_norms_fused):
// y = Σ_s p[s] + bias + r, rounded to f16 once (p: S planes of (rows, n) f32 partial products; r
// f16), then z1 = LN(y as stored; g1, b1) and, given z2, z2 = LN(z1 as stored; g2, b2). A block
// a row and 8 values a thread (n ≤ 8·1024), every load issued before any is used: one row's work
// is small, so the loads' round trip and the norms' block sums are what it takes.
__device__ __forceinline__ void ln_block8(float (&v)[8], bool in, h16* __restrict__ zr, const Gb8& p, int n, float eps,
                                          float* scratch) {
    const int i = threadIdx.x;
    float s = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) s += v[e];
    const float mean = block_sum(s, scratch) / n;
    float q = 0.f;
    if (in) {
#pragma unroll
        for (int e = 0; e < 8; ++e) q += (v[e] - mean) * (v[e] - mean);
    }
    const float inv = rsqrtf(block_sum(q, scratch) / n + eps);
    if (!in) return;
    const uint4 o = ln_out8(v, mean, inv, p);
    const u32* ow = (const u32*)&o;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        v[2 * e] = h2f((h16)(ow[e] & 0xffff));
        v[2 * e + 1] = h2f((h16)(ow[e] >> 16));
    }
    ((uint4*)zr)[i] = o;
}
template <int S>
__device__ __forceinline__ void splitk_add_ln16_k(h16* __restrict__ y, h16* __restrict__ z1, h16* __restrict__ z2,
                                                  const float* __restrict__ p, const float* __restrict__ bias,
                                                  const h16* __restrict__ r, const float* __restrict__ g1,
                                                  const float* __restrict__ b1, const float* __restrict__ g2,
                                                  const float* __restrict__ b2, int rows, int n, float eps,
                                                  unsigned char* __restrict__ z8) {
    __shared__ float scratch[32];
    const int i = threadIdx.x;
    const bool in = i < (n >> 3);
    const long long base = (long long)blockIdx.x * n, plane = (long long)rows * n;
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    Gb8 p1{}, p2{};
    if (in) {
        float4 q[S][2];
#pragma unroll
        for (int s = 0; s < S; ++s) {
            const float4* ps = (const float4*)(p + s * plane + base) + 2 * i;
            q[s][0] = ps[0];
            q[s][1] = ps[1];
        }
        float4 bl = make_float4(0.f, 0.f, 0.f, 0.f), bh = bl;
        if (bias) {
            bl = ((const float4*)bias)[2 * i];
            bh = ((const float4*)bias)[2 * i + 1];
        }
        const uint4 rv = ((const uint4*)(r + base))[i];
        // the norms' parameters in flight with the row's loads, not after its sums
        p1 = ln_gb8(g1, b1, i);
        if (z2) p2 = ln_gb8(g2, b2, i);
        float a[8] = {bl.x, bl.y, bl.z, bl.w, bh.x, bh.y, bh.z, bh.w};
#pragma unroll
        for (int s = 0; s < S; ++s) {
            a[0] += q[s][0].x; a[1] += q[s][0].y; a[2] += q[s][0].z; a[3] += q[s][0].w;
            a[4] += q[s][1].x; a[5] += q[s][1].y; a[6] += q[s][1].z; a[7] += q[s][1].w;
        }
        const u32* rw = (const u32*)&rv;
        uint4 o;
        u32* ow = (u32*)&o;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            ow[e] = pack_h2(a[2 * e] + h2f((h16)(rw[e] & 0xffff)), a[2 * e + 1] + h2f((h16)(rw[e] >> 16)));
            v[2 * e] = h2f((h16)(ow[e] & 0xffff));
            v[2 * e + 1] = h2f((h16)(ow[e] >> 16));
        }
        ((uint4*)(y + base))[i] = o;
    }
    ln_block8(v, in, z1 + base, p1, n, eps, scratch);
    if (z2) ln_block8(v, in, z2 + base, p2, n, eps, scratch);
    // the last norm's stored halves as e4m3 too, for the FP8 GEMM that reads it (src/fp8.rs)
    if (z8 && in) {
        const u32 lo = (u32)e4m3x2(v[0], v[1]) | ((u32)e4m3x2(v[2], v[3]) << 16);
        const u32 hi = (u32)e4m3x2(v[4], v[5]) | ((u32)e4m3x2(v[6], v[7]) << 16);
        ((uint2*)(z8 + base))[i] = make_uint2(lo, hi);
    }
}
// grid: one block a row, blockDim.x ≥ n / 8 (a multiple of 32); splits 2 or 4; z8 null or the
// last norm's result as e4m3 (rows · n bytes)
extern "C" __global__ void splitk_add_ln16(h16* y, h16* z1, h16* z2, const float* p, int splits, const float* bias,
                                           const h16* r, const float* g1, const float* b1, const float* g2,
                                           const float* b2, int rows, int n, float eps, unsigned char* z8) {
    PDL_ENTER();
    if (splits == 4) splitk_add_ln16_k<4>(y, z1, z2, p, bias, r, g1, b1, g2, b2, rows, n, eps, z8);
    else splitk_add_ln16_k<2>(y, z1, z2, p, bias, r, g1, b1, g2, b2, rows, n, eps, z8);
}

template <class Y, class X>
__device__ __forceinline__ void rms_norm_k(void* y_, const void* x_, const float* __restrict__ g, int n, float eps) {
    __shared__ float scratch[32];
    const X* xr = (const X*)x_ + (long long)blockIdx.x * n;
    Y* yr = (Y*)y_ + (long long)blockIdx.x * n;
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { float v = ldf(xr, i); s += v * v; }
    float inv = rsqrtf(block_sum(s, scratch) / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) stf(yr, i, ldf(xr, i) * inv * g[i]);
}
extern "C" __global__ void rms_norm(void* y, const void* x, const float* g, int n, float eps, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, rms_norm_k, y, x, g, n, eps);
}

// log = 0: softmax; 1: log_softmax. A row of -inf only gives zeros (softmax) / -inf (log).
template <class Y, class X>
__device__ __forceinline__ void softmax_k(void* y_, const void* x_, int n, int log) {
    __shared__ float scratch[32];
    const X* xr = (const X*)x_ + (long long)blockIdx.x * n;
    Y* yr = (Y*)y_ + (long long)blockIdx.x * n;
    float m = F_NEG_INF;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, ldf(xr, i));
    m = block_max(m, scratch);
    float ms = m == F_NEG_INF ? 0.f : m;
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += expf(ldf(xr, i) - ms);
    s = block_sum(s, scratch);
    if (log) {
        float ls = logf(s);
        for (int i = threadIdx.x; i < n; i += blockDim.x) stf(yr, i, ldf(xr, i) - ms - ls);
    } else {
        float inv = s > 0.f ? 1.f / s : 0.f;
        for (int i = threadIdx.x; i < n; i += blockDim.x) stf(yr, i, expf(ldf(xr, i) - ms) * inv);
    }
}
extern "C" __global__ void softmax(void* y, const void* x, int n, int log, int dt) { PDL_ENTER(); DISPATCH_YX(dt, softmax_k, y, x, n, log); }

// Row-wise argmax (first index of the maximum), so only ids leave the device. dt bit 1: x is f16.
template <class X>
__device__ __forceinline__ void argmax_k(u32* __restrict__ out, const void* x_, int n) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const X* xr = (const X*)x_ + (long long)blockIdx.x * n;
    float best = F_NEG_INF;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = ldf(xr, i);
        if (v > best || (v == best && i < bi)) { best = v; bi = i; }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) { sv[warp] = best; si[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        best = lane < nw ? sv[lane] : F_NEG_INF;
        bi = lane < nw ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
        }
        if (lane == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0u : (u32)bi;
    }
}
extern "C" __global__ void argmax(u32* out, const void* x, int n, int dt) {
    PDL_ENTER();
    if (dt & 2) argmax_k<h16>(out, x, n);
    else argmax_k<float>(out, x, n);
}

// Transformer-XL probabilities: row (r, i) of C query rows, ac (BH, C, T), bd (BH, C, T+C-1)
// (both of type X); score_j = (ac[j] + bd[C-1-i+j]) * scale, keys with keep[b][j] == 0
// (b = r / rows_per_batch, keep f32) dropped, softmax over j. One block per row; scores are
// recomputed per pass rather than parked in the (possibly f16) output.
template <class Y, class X>
__device__ __forceinline__ void rel_shift_softmax_k(void* y_, const void* ac_, const void* bd_, const float* __restrict__ keep,
                                                    int c, int t, int rows_per_batch, float scale) {
    __shared__ float scratch[32];
    long long row = blockIdx.x;
    int r = (int)(row / c), i = (int)(row % c);
    const X* a = (const X*)ac_ + row * t;
    const X* d = (const X*)bd_ + row * (long long)(t + c - 1) + (c - 1 - i);
    const float* k = keep ? keep + (long long)(r / rows_per_batch) * t : nullptr;
    Y* yr = (Y*)y_ + row * t;
#define RS_SCORE(j) ((k && k[j] == 0.f) ? F_NEG_INF : (ldf(a, j) + ldf(d, j)) * scale)
    float m = F_NEG_INF;
    for (int j = threadIdx.x; j < t; j += blockDim.x) m = fmaxf(m, RS_SCORE(j));
    m = block_max(m, scratch);
    float ms = m == F_NEG_INF ? 0.f : m;
    float s = 0.f;
    for (int j = threadIdx.x; j < t; j += blockDim.x) s += expf(RS_SCORE(j) - ms);
    s = block_sum(s, scratch);
    float inv = s > 0.f ? 1.f / s : 0.f;
    for (int j = threadIdx.x; j < t; j += blockDim.x) stf(yr, j, expf(RS_SCORE(j) - ms) * inv);
#undef RS_SCORE
}
extern "C" __global__ void rel_shift_softmax(void* y, const void* ac, const void* bd, const float* keep, int c, int t,
                                             int rows_per_batch, float scale, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, rel_shift_softmax_k, y, ac, bd, keep, c, t, rows_per_batch, scale);
}

// The same probabilities with one warp per row (8 rows per 256-thread block): a row is T ≈ 100–400
// keys, so a block per row left most threads idle and paid two block-wide reductions per row;
// batched passes have B·H·C rows (18k at 16 clips of 11 s). Scores of up to RSW_KEEP·32 keys stay
// in registers between the passes; longer rows are recomputed.
#define RSW_KEEP 8
template <class Y, class X>
__device__ __forceinline__ void rel_shift_softmax_rows_k(void* y_, const void* ac_, const void* bd_,
                                                         const float* __restrict__ keep, long long rows, int c, int t,
                                                         int rows_per_batch, float scale) {
    long long row = blockIdx.x * (long long)(blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int r = (int)(row / c), i = (int)(row % c);
    const X* a = (const X*)ac_ + row * t;
    const X* d = (const X*)bd_ + row * (long long)(t + c - 1) + (c - 1 - i);
    const float* k = keep ? keep + (long long)(r / rows_per_batch) * t : nullptr;
    Y* yr = (Y*)y_ + row * t;
#define RSW_SCORE(j) ((k && k[j] == 0.f) ? F_NEG_INF : (ldf(a, j) + ldf(d, j)) * scale)
    float sc[RSW_KEEP];
    float m = F_NEG_INF;
#pragma unroll
    for (int q = 0; q < RSW_KEEP; ++q) {
        int j = lane + 32 * q;
        sc[q] = j < t ? RSW_SCORE(j) : F_NEG_INF;
        m = fmaxf(m, sc[q]);
    }
    for (int j = lane + 32 * RSW_KEEP; j < t; j += 32) m = fmaxf(m, RSW_SCORE(j));
    m = warp_max(m);
    float ms = m == F_NEG_INF ? 0.f : m;
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < RSW_KEEP; ++q) {
        sc[q] = expf(sc[q] - ms);  // exp(-inf) = 0 for masked keys and the unused tail
        s += sc[q];
    }
    for (int j = lane + 32 * RSW_KEEP; j < t; j += 32) s += expf(RSW_SCORE(j) - ms);
    s = warp_sum(s);
    float inv = s > 0.f ? 1.f / s : 0.f;
#pragma unroll
    for (int q = 0; q < RSW_KEEP; ++q) {
        int j = lane + 32 * q;
        if (j < t) stf(yr, j, sc[q] * inv);
    }
    for (int j = lane + 32 * RSW_KEEP; j < t; j += 32) stf(yr, j, expf(RSW_SCORE(j) - ms) * inv);
#undef RSW_SCORE
}
extern "C" __global__ void rel_shift_softmax_rows(void* y, const void* ac, const void* bd, const float* keep, long long rows,
                                                  int c, int t, int rows_per_batch, float scale, int dt) {
    PDL_ENTER();
    DISPATCH_YX(dt, rel_shift_softmax_rows_k, y, ac, bd, keep, rows, c, t, rows_per_batch, scale);
}
