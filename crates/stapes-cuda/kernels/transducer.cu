// Greedy transducer (RNNT / TDT) label looping with its state on the device
// (stapes_core::transducer). `state` is (1, B, 8) f32, one row per clip:
//   [frame, frames, at_frame, steps, token, emitted, max_steps, -]
// `log` is (B, K, 6) f32, one record per step slot: [valid, token, frame, duration, margin, done].
// Every value is a small integer held exactly in f32, except the margin.

#define TS_FRAME 0
#define TS_FRAMES 1
#define TS_AT 2
#define TS_STEPS 3
#define TS_TOKEN 4
#define TS_EMITTED 5
#define TS_MAX_STEPS 6
#define TS_FIELDS 8
#define TR_FIELDS 6

__device__ __forceinline__ int ts_done(const float* row) {
    return row[TS_FRAME] >= row[TS_FRAMES] || row[TS_STEPS] >= row[TS_MAX_STEPS];
}

// out (B, 1, C) f32 = x[b, frame_b, :] of x (B, T, C); a finished clip's frame is clamped to T-1
// (its step is discarded). dt bit 1: x is f16.
template <class X>
__device__ __forceinline__ void frames_k(float* __restrict__ out, const X* __restrict__ x,
                                         const float* __restrict__ state, int B, int T, int C) {
    const long long n = (long long)B * C;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(e / C), c = (int)(e % C);
        const float f = state[b * TS_FIELDS + TS_FRAME];
        const int t = f >= 0.f ? min((int)fminf(f, 16777216.f), T - 1) : 0;
        out[e] = ldf(x, ((long long)b * T + t) * C + c);
    }
}
extern "C" __global__ void transducer_frames(float* out, const void* x, const float* state, int B,
                                             int T, int C, int dt) {
    if (dt & 2) frames_k<h16>(out, (const h16*)x, state, B, T, C);
    else frames_k<float>(out, (const float*)x, state, B, T, C);
}

// The joint input: out (B, 1, J) f32 = act(x[b, frame_b, :] + pred[b, :]), x (B, T, J), pred
// (B, 1, J). The activation is common.cuh's act_apply, so the fused form rounds as the separate
// add and activation do.
template <class X, class P>
__device__ __forceinline__ void joint_in_k(float* __restrict__ out, const X* __restrict__ x,
                                           const P* __restrict__ pred,
                                           const float* __restrict__ state, int B, int T, int C,
                                           int act) {
    const long long n = (long long)B * C;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(e / C), c = (int)(e % C);
        const float f = state[b * TS_FIELDS + TS_FRAME];
        const int t = f >= 0.f ? min((int)fminf(f, 16777216.f), T - 1) : 0;
        out[e] = act_apply(__fadd_rn(ldf(x, ((long long)b * T + t) * C + c), ldf(pred, e)), act);
    }
}
// dt bit 1: x is f16, bit 2: pred is f16.
extern "C" __global__ void transducer_joint_input(float* out, const void* x, const void* pred,
                                                  const float* state, int B, int T, int C,
                                                  int act, int dt) {
    switch ((dt >> 1) & 3) {
    case 0: joint_in_k<float, float>(out, (const float*)x, (const float*)pred, state, B, T, C, act); break;
    case 1: joint_in_k<h16, float>(out, (const h16*)x, (const float*)pred, state, B, T, C, act); break;
    case 2: joint_in_k<float, h16>(out, (const float*)x, (const h16*)pred, state, B, T, C, act); break;
    default: joint_in_k<h16, h16>(out, (const h16*)x, (const h16*)pred, state, B, T, C, act); break;
    }
}

// Running top-2 of a sequence: the first index of the maximum (`i < 0`: nothing seen yet) and
// the second largest value counting equal maxima twice, as the host's argmax and margin do.
struct Top2 {
    float a, b;
    int i;
};
__device__ __forceinline__ void top2_push(Top2& t, float x, int i) {
    if (t.i < 0 || x > t.a) {
        if (t.i >= 0) t.b = t.a;
        t.a = x;
        t.i = i;
    } else if (x > t.b) {
        t.b = x;
    }
}
// Merge two partial top-2s (either may be empty); equal maxima go to the lower index.
__device__ __forceinline__ Top2 top2_merge(Top2 u, Top2 v) {
    if (v.i < 0) return u;
    if (u.i < 0) return v;
    Top2 r;
    if (v.a > u.a || (v.a == u.a && v.i < u.i)) {
        r.a = v.a;
        r.i = v.i;
        r.b = fmaxf(u.a, fmaxf(u.b, v.b));
    } else {
        r.a = u.a;
        r.i = u.i;
        r.b = fmaxf(v.a, fmaxf(u.b, v.b));
    }
    return r;
}

// One greedy step of every clip: grid (B), 256 threads. logits (B, W) (W = V + nd) decide the
// token (argmax over V) and, for TDT (nd > 0), the duration class (argmax over the nd values
// after them, frames `durs[class]`); the clip's state row advances and the record goes to slot
// `slot` of its K. The rule is stapes_core::transducer::TransducerRule::advance.
template <class X>
__device__ __forceinline__ void advance_k(float* __restrict__ state, const X* __restrict__ logits,
                                          float* __restrict__ log, int W, int V, int blank, int nd,
                                          const int* durs, int max_sym, int K, int slot) {
    __shared__ float sa[256], sb[256];
    __shared__ int si[256];
    const int b = blockIdx.x;
    const X* lg = logits + (long long)b * W;
    Top2 t = {F_NEG_INF, F_NEG_INF, -1};
    // contiguous chunks per thread, so merging in thread order keeps the first maximum
    const int per = (V + blockDim.x - 1) / blockDim.x;
    const int lo = threadIdx.x * per, hi = min(V, lo + per);
    for (int i = lo; i < hi; ++i) top2_push(t, ldf(lg, i), i);
    sa[threadIdx.x] = t.a;
    sb[threadIdx.x] = t.b;
    si[threadIdx.x] = t.i;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            Top2 u = {sa[threadIdx.x], sb[threadIdx.x], si[threadIdx.x]};
            Top2 v = {sa[threadIdx.x + s], sb[threadIdx.x + s], si[threadIdx.x + s]};
            Top2 r = top2_merge(u, v);
            sa[threadIdx.x] = r.a;
            sb[threadIdx.x] = r.b;
            si[threadIdx.x] = r.i;
        }
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    float* row = state + (long long)b * TS_FIELDS;
    float* rec = log + ((long long)b * K + slot) * TR_FIELDS;
    row[TS_EMITTED] = 0.f;
    if (ts_done(row)) {
        for (int f = 0; f < TR_FIELDS; ++f) rec[f] = 0.f;
        rec[5] = 1.f;
        return;
    }
    const int token = si[0] < 0 ? 0 : si[0];
    const int is_blank = token == blank;
    float margin = sa[0] - sb[0];
    int at = (int)row[TS_AT];
    int duration;
    if (nd == 0) {
        if (is_blank) {
            at = 0;
            duration = 1;
        } else {
            at += 1;
            if (at >= max_sym) {
                at = 0;
                duration = 1;
            } else {
                duration = 0;
            }
        }
    } else {
        Top2 d = {F_NEG_INF, F_NEG_INF, -1};
        for (int i = 0; i < nd; ++i) top2_push(d, ldf(lg, V + i), i);
        margin = fminf(margin, d.a - d.b);
        int dd = durs[d.i < 0 ? 0 : d.i];
        if (is_blank && dd == 0) dd = 1;
        at = dd == 0 ? at + 1 : 0;
        if (at >= max_sym) {
            at = 0;
            duration = 1;
        } else {
            duration = dd;
        }
    }
    rec[0] = 1.f;
    rec[1] = (float)token;
    rec[2] = row[TS_FRAME];
    rec[3] = (float)duration;
    rec[4] = margin;
    row[TS_FRAME] += (float)duration;
    row[TS_AT] = (float)at;
    row[TS_STEPS] += 1.f;
    row[TS_TOKEN] = (float)token;
    row[TS_EMITTED] = is_blank ? 0.f : 1.f;
    rec[5] = ts_done(row) ? 1.f : 0.f;
}
extern "C" __global__ void transducer_advance(float* state, const void* logits, float* log, int W,
                                              int V, int blank, int nd, int d0, int d1, int d2,
                                              int d3, int d4, int d5, int d6, int d7, int max_sym,
                                              int K, int slot, int dt) {
    const int durs[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    if (dt & 2) advance_k<h16>(state, (const h16*)logits, log, W, V, blank, nd, durs, max_sym, K, slot);
    else advance_k<float>(state, (const float*)logits, log, W, V, blank, nd, durs, max_sym, K, slot);
}

// out (B, 1, D) f32 = table[token_b] of table (V, D); a token out of range reads row 0 (only
// emitting clips keep the prediction network's result). dt bit 1: table is f16.
template <class X>
__device__ __forceinline__ void embed_k(float* __restrict__ out, const X* __restrict__ table,
                                        const float* __restrict__ state, int B, int V, int D) {
    const long long n = (long long)B * D;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(e / D), c = (int)(e % D);
        const float f = state[b * TS_FIELDS + TS_TOKEN];
        const int id = (f >= 0.f && f < (float)V) ? (int)f : 0;
        out[e] = ldf(table, (long long)id * D + c);
    }
}
extern "C" __global__ void transducer_embed(float* out, const void* table, const float* state,
                                            int B, int V, int D, int dt) {
    if (dt & 2) embed_k<h16>(out, (const h16*)table, state, B, V, D);
    else embed_k<float>(out, (const float*)table, state, B, V, D);
}

// dst (B, n) = src where the clip's last step emitted a label; elements of `bytes` bytes (2 or
// 4), both tensors of one type.
extern "C" __global__ void transducer_keep(void* dst, const void* src, const float* state, int B,
                                           int n, int bytes) {
    const long long total = (long long)B * n;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(e / n);
        if (state[b * TS_FIELDS + TS_EMITTED] == 0.f) continue;
        if (bytes == 2) ((h16*)dst)[e] = ((const h16*)src)[e];
        else ((float*)dst)[e] = ((const float*)src)[e];
    }
}

__device__ __forceinline__ float ld_sel(const void* p, long long i, int f16) {
    return f16 ? h2f(((const h16*)p)[i]) : ((const float*)p)[i];
}

// One LSTM step's element-wise part (PyTorch gate order i, f, g, o) after its two GEMMs:
// gx, gh (rows, 4H), c (rows, H) -> h2, c2 (rows, H). Each product and sum rounds on its own
// (no FMA contraction), as the composed default's separate add/mul/activation kernels do, so
// the fused form gives the same bits. dt bits: 0 outputs f16, 1 gx f16, 2 gh f16, 3 c f16.
// With `state` (not null) the results land only in rows of clips whose last step emitted a
// label (`per_clip` rows each); h2, c2 may then be h, c themselves (updated in place: each
// element is read before it is written, by the same thread).
extern "C" __global__ void lstm_pointwise(void* h2, void* c2, const void* gx, const void* gh,
                                          const void* c, int rows, int H, int dt,
                                          const float* state, int per_clip) {
    const long long n = (long long)rows * H;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        const long long r = e / H;
        if (state && state[(r / per_clip) * TS_FIELDS + TS_EMITTED] == 0.f) continue;
        const int j = (int)(e % H);
        const long long g0 = r * 4 * H + j;
        float v[4];
#pragma unroll
        for (int q = 0; q < 4; ++q)
            v[q] = __fadd_rn(ld_sel(gx, g0 + q * H, dt & 2), ld_sel(gh, g0 + q * H, dt & 4));
        const float ig = 1.f / (1.f + expf(-v[0]));
        const float fg = 1.f / (1.f + expf(-v[1]));
        const float gg = tanhf(v[2]);
        const float og = 1.f / (1.f + expf(-v[3]));
        const float cn = __fadd_rn(__fmul_rn(fg, ld_sel(c, e, dt & 8)), __fmul_rn(ig, gg));
        const float hn = __fmul_rn(og, tanhf(cn));
        if (dt & 1) {
            ((h16*)h2)[e] = f2h(hn);
            ((h16*)c2)[e] = f2h(cn);
        } else {
            ((float*)h2)[e] = hn;
            ((float*)c2)[e] = cn;
        }
    }
}

// The label loop's linear (Backend::transducer_linear): y (m, n) = x (m, k) . W^T + bias for any
// m, each row's value the same whatever m is and wherever the row sits in the batch, so a clip
// decodes in a batch exactly as alone. Every operation is spelled out (__fmaf_rn / __fmul_rn /
// __fadd_rn: never contracted or split), so no unrolled copy of the row loop can round
// differently (with plain `a * b + c` the q8 epilogue of the 8th row came out differently on the
// H200); a row's arithmetic depends on k alone (lane split, chunk order, warp_sum). Only the
// weights are quantized (q8: int8 rows with one scale each), not the activations.
// Grid (ceil(n / cols), ceil(m / TG_ROWS)), 256 threads: 8 warps of cols / 8 columns each (cols a
// multiple of 8; a column is one warp's whole dot product, so cols changes no value, only how many
// blocks share the work).
// A block's TG_ROWS rows of x are staged in shared memory as f32 (`smem_floats` of them, 0 = not
// staged: read from global memory; same values either way), so every warp reads them there.
#define TG_ROWS 16

__device__ __forceinline__ void tg_w8(const h16* __restrict__ w, long long i, float* v) {
    const uint4 raw = *(const uint4*)(w + i);
    v[0] = h2f((h16)(raw.x & 0xffff)); v[1] = h2f((h16)(raw.x >> 16));
    v[2] = h2f((h16)(raw.y & 0xffff)); v[3] = h2f((h16)(raw.y >> 16));
    v[4] = h2f((h16)(raw.z & 0xffff)); v[5] = h2f((h16)(raw.z >> 16));
    v[6] = h2f((h16)(raw.w & 0xffff)); v[7] = h2f((h16)(raw.w >> 16));
}
__device__ __forceinline__ void tg_w8(const signed char* __restrict__ w, long long i, float* v) {
    const uint2 raw = *(const uint2*)(w + i);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        v[e] = (float)(signed char)((raw.x >> (8 * e)) & 0xff);
        v[4 + e] = (float)(signed char)((raw.y >> (8 * e)) & 0xff);
    }
}
__device__ __forceinline__ float tg_w1(const h16* w, long long i) { return h2f(w[i]); }
__device__ __forceinline__ float tg_w1(const signed char* w, long long i) { return (float)w[i]; }

// Rows of x from `src` (S: float when staged, else the tensor's type), `vec`: 8-wide chunks
// (k and the weight stride multiples of 8).
template <class Y, class S, class W>
__device__ __forceinline__ void tg_body(Y* __restrict__ y, const S* __restrict__ src, const W* __restrict__ w,
                                        const float* __restrict__ sw, const float* __restrict__ bias, int rows,
                                        int n, int k, int ldw, int cols, bool vec) {
    const int lane = threadIdx.x & 31;
    const int per_warp = cols / (blockDim.x >> 5);
    for (int c = 0; c < per_warp; ++c) {
        const int col = blockIdx.x * cols + (threadIdx.x >> 5) * per_warp + c;
        if (col >= n) return;
        const W* wr = w + (long long)col * ldw;
        float acc[TG_ROWS];
#pragma unroll
        for (int r = 0; r < TG_ROWS; ++r) acc[r] = 0.f;
        if (vec) {
#pragma unroll 2
            for (int i = lane * 8; i < k; i += 256) {
                float wv[8];
                tg_w8(wr, i, wv);
#pragma unroll
                for (int r = 0; r < TG_ROWS; ++r) {
                    if (r < rows) {
                        const long long o = (long long)r * k + i;
                        const float4 a = ld4(src + o, 0), b = ld4(src + o, 1);
                        float t = __fmul_rn(wv[0], a.x);
                        t = __fmaf_rn(wv[1], a.y, t);
                        t = __fmaf_rn(wv[2], a.z, t);
                        t = __fmaf_rn(wv[3], a.w, t);
                        t = __fmaf_rn(wv[4], b.x, t);
                        t = __fmaf_rn(wv[5], b.y, t);
                        t = __fmaf_rn(wv[6], b.z, t);
                        t = __fmaf_rn(wv[7], b.w, t);
                        acc[r] = __fadd_rn(acc[r], t);
                    }
                }
            }
        } else {
            for (int i = lane; i < k; i += 32) {
                const float wv = tg_w1(wr, i);
#pragma unroll
                for (int r = 0; r < TG_ROWS; ++r)
                    if (r < rows) acc[r] = __fmaf_rn(wv, ldf(src, (long long)r * k + i), acc[r]);
            }
        }
        const float s = sw ? sw[col] : 1.f;
        const float b = bias ? bias[col] : 0.f;
#pragma unroll
        for (int r = 0; r < TG_ROWS; ++r) {
            if (r < rows) {
                float v = warp_sum(acc[r]);
                if (sw) v = __fmul_rn(v, s);
                if (bias) v = __fadd_rn(v, b);
                if (lane == 0) stf(y, (long long)r * n + col, v);
            }
        }
    }
}

template <class Y, class X, class W>
__device__ __forceinline__ void tgemv_k(void* y_, const void* x_, const W* w, const float* sw, const float* bias,
                                        int m, int n, int k, int ldw, int cols, int smem_floats) {
    extern __shared__ float tg_xs[];
    const int r0 = blockIdx.y * TG_ROWS;
    const int rows = min(m - r0, TG_ROWS);
    if (rows <= 0) return;
    Y* y = (Y*)y_ + (long long)r0 * n;
    const X* x = (const X*)x_ + (long long)r0 * k;
    const bool vec = (k & 7) == 0 && (ldw & 7) == 0;
    if ((long long)rows * k <= smem_floats) {
        for (int i = threadIdx.x; i < rows * k; i += blockDim.x) tg_xs[i] = ldf(x, i);
        __syncthreads();
        tg_body<Y, float, W>(y, tg_xs, w, sw, bias, rows, n, k, ldw, cols, vec);
    } else {
        tg_body<Y, X, W>(y, x, w, sw, bias, rows, n, k, ldw, cols, vec);
    }
}
// dt bit 0: y is f16, bit 1: x is f16. W (n, k) f16, row stride k.
extern "C" __global__ void transducer_gemv_f16(void* y, const void* x, const h16* w, const float* bias, int m,
                                               int n, int k, int cols, int smem_floats, int dt) {
    switch (dt & 3) {
    case 0: tgemv_k<float, float, h16>(y, x, w, nullptr, bias, m, n, k, k, cols, smem_floats); break;
    case 1: tgemv_k<h16, float, h16>(y, x, w, nullptr, bias, m, n, k, k, cols, smem_floats); break;
    case 2: tgemv_k<float, h16, h16>(y, x, w, nullptr, bias, m, n, k, k, cols, smem_floats); break;
    default: tgemv_k<h16, h16, h16>(y, x, w, nullptr, bias, m, n, k, k, cols, smem_floats); break;
    }
}
// int8 weights (row stride k_pad) with one f32 scale per output row: y = sw[col] * (x . w8[col])
// + bias.
extern "C" __global__ void transducer_gemv_i8(void* y, const void* x, const signed char* w, const float* sw,
                                              const float* bias, int m, int n, int k, int k_pad, int cols,
                                              int smem_floats, int dt) {
    switch (dt & 3) {
    case 0: tgemv_k<float, float, signed char>(y, x, w, sw, bias, m, n, k, k_pad, cols, smem_floats); break;
    case 1: tgemv_k<h16, float, signed char>(y, x, w, sw, bias, m, n, k, k_pad, cols, smem_floats); break;
    case 2: tgemv_k<float, h16, signed char>(y, x, w, sw, bias, m, n, k, k_pad, cols, smem_floats); break;
    default: tgemv_k<h16, h16, signed char>(y, x, w, sw, bias, m, n, k, k_pad, cols, smem_floats); break;
    }
}
