// Token selection (stapes_core::select): per row of logits (rows, V), disable ids (a shared list
// and the row's own ranges), optionally the mass rule ("if logsumexp(y[B]) - lse > max(y[A]) -
// lse then disable A"), log-softmax, and the k best (log-prob + offset) with ties to the lowest
// id; optionally the raw softmax probability of one id. One block per row.
//
// Reductions follow the host's: maxima in f32, f32 exponentials summed in f64, lse = m +
// (float)log(sum); log-probs are (y - lse) in f32 so the ranking sees the host's values.
//
// params (u32 words): [V, rows, k, n_disabled, a0, a1, b0, b1, has_mass, prob_id (~0 = none)],
// then n_disabled ids, then per row SEL_ROW words: [n_ranges, mass_on, offset (f32 bits),
// lo0, hi0, lo1, hi1, ...]. out (u32 words), per row 2k+1: k ids, k scores (f32 bits), the
// probability (f32 bits).

#define SEL_MAXK 32
#define SEL_MAXR 8
#define SEL_HDR 10
#define SEL_ROW (3 + 2 * SEL_MAXR)
#define SEL_LOWEST (-3.40282347e+38f)

__device__ __forceinline__ double sel_warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// Every thread gets the sum; `scratch` holds 32 doubles.
__device__ __forceinline__ double sel_block_sum_d(double v, double* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = sel_warp_sum_d(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    double r = lane < nw ? scratch[lane] : 0.0;
    return sel_warp_sum_d(r);
}

// (value desc, id asc): whether a ranks before b. Empty slots are (-inf, ~0).
__device__ __forceinline__ bool sel_before(float av, u32 ai, float bv, u32 bi) {
    return av > bv || (av == bv && ai < bi);
}

struct SelShared {
    u32 lo[SEL_MAXR], hi[SEL_MAXR];
    int nr;
    float wv[32];
    u32 wi[32];
    float scratch[32];
    double dscratch[32];
};

// f(i, x[i]) over this thread's ids in increasing order (tid, tid + nt, ...), four loads in
// flight at a time. A template function, not a generic lambda: CUDA 13's NVRTC takes a generic
// lambda's call operator for a host function.
template <class X, class F>
__device__ __forceinline__ void sel_each(const X* __restrict__ x, u32 V, int tid, int nt, F&& f) {
    for (u32 base = tid; base < V; base += 4u * nt) {
        float xv[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const u32 i = base + u * nt;
            xv[u] = i < V ? ldf(x, i) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const u32 i = base + u * nt;
            if (i < V) f(i, xv[u]);
        }
    }
}

template <class X>
__device__ __forceinline__ void select_k(const X* __restrict__ logits, const u32* __restrict__ params,
                                         u32* __restrict__ out) {
    extern __shared__ u32 sel_bits[];  // (V + 31) / 32 words: the shared disabled list
    __shared__ SelShared sh;
    const u32 V = params[0], k = params[2], nd = params[3];
    const u32 a0 = params[4], a1 = params[5], b0 = params[6], b1 = params[7];
    const int has_mass = params[8] != 0;
    const u32 prob_id = params[9];
    const int r = blockIdx.x;
    const u32* rec = params + SEL_HDR + nd + (long long)r * SEL_ROW;
    const X* x = logits + (long long)r * V;
    const u32 words = (V + 31) >> 5;
    const int tid = threadIdx.x, nt = blockDim.x;

    for (u32 w = tid; w < words; w += nt) sel_bits[w] = 0;
    if (tid == 0) sh.nr = min((int)rec[0], SEL_MAXR);
    if (tid < SEL_MAXR) {
        sh.lo[tid] = min(rec[3 + 2 * tid], V);
        sh.hi[tid] = min(rec[4 + 2 * tid], V);
    }
    __syncthreads();
    for (u32 j = tid; j < nd; j += nt) {
        const u32 id = params[SEL_HDR + j];
        if (id < V) atomicOr(&sel_bits[id >> 5], 1u << (id & 31));
    }
    __syncthreads();
    const int nr = sh.nr;
    const int mass_on = has_mass && rec[1] != 0;
    const float off = __uint_as_float(rec[2]);

    // y: the logit x, or SEL_LOWEST where disabled (dis_a: the mass rule fired)
    auto mask = [&](u32 i, float xv, int dis_a) -> float {
        if ((sel_bits[i >> 5] >> (i & 31)) & 1u) return SEL_LOWEST;
        for (int q = 0; q < nr; ++q)
            if (i >= sh.lo[q] && i < sh.hi[q]) return SEL_LOWEST;
        if (dis_a && i >= a0 && i < a1) return SEL_LOWEST;
        return xv;
    };
    auto lse_of = [](float m, double s) -> float { return isfinite(m) ? m + (float)log(s) : m; };
    const int want_prob = prob_id != 0xffffffffu;

    // pass 1: maxima of y, y[A], y[B] and the raw row
    float m_all = F_NEG_INF, m_a = F_NEG_INF, m_b = F_NEG_INF, m_raw = F_NEG_INF;
    sel_each(x, V, tid, nt, [&](u32 i, float xv) {
        const float y = mask(i, xv, 0);
        m_all = fmaxf(m_all, y);
        if (i >= a0 && i < a1) m_a = fmaxf(m_a, y);
        if (i >= b0 && i < b1) m_b = fmaxf(m_b, y);
        m_raw = fmaxf(m_raw, xv);
    });
    m_all = block_max(m_all, sh.scratch);
    if (mass_on) {
        m_a = block_max(m_a, sh.scratch);
        m_b = block_max(m_b, sh.scratch);
    }
    if (want_prob) m_raw = block_max(m_raw, sh.scratch);

    // pass 2: the sums
    double s_all = 0.0, s_b = 0.0, s_raw = 0.0;
    sel_each(x, V, tid, nt, [&](u32 i, float xv) {
        const float y = mask(i, xv, 0);
        s_all += (double)expf(y - m_all);
        if (mass_on && i >= b0 && i < b1) s_b += (double)expf(y - m_b);
        if (want_prob) s_raw += (double)expf(xv - m_raw);
    });
    s_all = sel_block_sum_d(s_all, sh.dscratch);
    float lse = lse_of(m_all, s_all);
    int fired = 0;
    if (mass_on) {
        s_b = sel_block_sum_d(s_b, sh.dscratch);
        fired = (lse_of(m_b, s_b) - lse) > (m_a - lse);
    }
    float prob = 0.f;
    if (want_prob) {
        s_raw = sel_block_sum_d(s_raw, sh.dscratch);
        if (prob_id < V) prob = expf(ldf(x, prob_id) - lse_of(m_raw, s_raw));
    }
    if (fired) {
        // A disabled: the log-softmax over what remains
        float m2 = F_NEG_INF;
        sel_each(x, V, tid, nt, [&](u32 i, float xv) { m2 = fmaxf(m2, mask(i, xv, 1)); });
        m2 = block_max(m2, sh.scratch);
        double s2 = 0.0;
        sel_each(x, V, tid, nt, [&](u32 i, float xv) { s2 += (double)expf(mask(i, xv, 1) - m2); });
        s2 = sel_block_sum_d(s2, sh.dscratch);
        lse = lse_of(m2, s2);
    }

    // pass 3: each thread's own top k, in increasing id order (equal keys keep the lower id)
    float tv[SEL_MAXK];
    u32 ti[SEL_MAXK];
    u32 cnt = 0;
    sel_each(x, V, tid, nt, [&](u32 i, float xv) {
        const float key = (mask(i, xv, fired) - lse) + off;
        if (cnt == k && !(key > tv[k - 1])) return;
        u32 pos = cnt < k ? cnt : k - 1;
        while (pos > 0 && key > tv[pos - 1]) {
            tv[pos] = tv[pos - 1];
            ti[pos] = ti[pos - 1];
            --pos;
        }
        tv[pos] = key;
        ti[pos] = i;
        if (cnt < k) ++cnt;
    });

    // k rounds of a block arg-best over the threads' heads; the owner of the winner pops it
    u32 head = 0;
    u32* o = out + (long long)r * (2 * k + 1);
    const int lane = tid & 31, warp = tid >> 5, nw = (nt + 31) >> 5;
    for (u32 j = 0; j < k; ++j) {
        float bv = head < cnt ? tv[head] : F_NEG_INF;
        u32 bi = head < cnt ? ti[head] : 0xffffffffu;
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, s);
            const u32 oi = __shfl_xor_sync(0xffffffffu, bi, s);
            if (sel_before(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        __syncthreads();
        if (lane == 0) {
            sh.wv[warp] = bv;
            sh.wi[warp] = bi;
        }
        __syncthreads();
        bv = lane < nw ? sh.wv[lane] : F_NEG_INF;
        bi = lane < nw ? sh.wi[lane] : 0xffffffffu;
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, s);
            const u32 oi = __shfl_xor_sync(0xffffffffu, bi, s);
            if (sel_before(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        // every warp computed the same winner from the same shared words
        if (bi != 0xffffffffu && bi % (u32)nt == (u32)tid) ++head;
        if (tid == 0) {
            o[j] = bi;
            o[k + j] = __float_as_uint(bv);
        }
    }
    if (tid == 0) o[2 * k] = __float_as_uint(prob);
}

// 1024 threads a block (select.rs launches that many): the bound caps registers to fit.
extern "C" __global__ void __launch_bounds__(1024) select_topk(const void* logits, const u32* params, u32* out, int dt) {
    if (dt & 2) select_k<h16>((const h16*)logits, params, out);
    else select_k<float>((const float*)logits, params, out);
}

// ---- split form (the default; STAPES_CUDA_SELECT_SPLIT=0 turns it off): a row's ids in S ≤ 32 slices, one block of 256
// threads each, instead of one block walking the whole row on one SM. select_stats writes per
// (row, slice) maxima and f64 sums; select_split combines a row's slice stats in slice order
// (every block of the row gets the same lse and mass-rule decision), ranks its slice, and the
// last block of the row to finish merges the slices' sorted lists (ids are unique across slices,
// so value then id orders them exactly as one list).
// stats per (row, slice), doubles: [m_all, s_all, m_a, m_b, s_b, m_notA, s_notA, m_raw, s_raw].
#define SEL_STATS 9

// The slice's disabled bits (ids lo .. hi) and the row's ranges into shared memory.
__device__ __forceinline__ void sel_slice_setup(const u32* __restrict__ params, int r, u32 lo,
                                                u32 hi, u32* bits, SelShared& sh) {
    const u32 V = params[0], nd = params[3];
    const u32* rec = params + SEL_HDR + nd + (long long)r * SEL_ROW;
    const int tid = threadIdx.x, nt = blockDim.x;
    const u32 words = (hi - lo + 31) >> 5;
    for (u32 w = tid; w < words; w += nt) bits[w] = 0;
    if (tid == 0) sh.nr = min((int)rec[0], SEL_MAXR);
    if (tid < SEL_MAXR) {
        sh.lo[tid] = min(rec[3 + 2 * tid], V);
        sh.hi[tid] = min(rec[4 + 2 * tid], V);
    }
    __syncthreads();
    for (u32 j = tid; j < nd; j += nt) {
        const u32 id = params[SEL_HDR + j];
        if (id >= lo && id < hi) atomicOr(&bits[(id - lo) >> 5], 1u << ((id - lo) & 31));
    }
    __syncthreads();
}

__device__ __forceinline__ float sel_slice_mask(u32 i, float xv, int dis_a, const u32* bits, u32 lo,
                                                const SelShared& sh, u32 a0, u32 a1) {
    const u32 j = i - lo;
    if ((bits[j >> 5] >> (j & 31)) & 1u) return SEL_LOWEST;
    for (int q = 0; q < sh.nr; ++q)
        if (i >= sh.lo[q] && i < sh.hi[q]) return SEL_LOWEST;
    if (dis_a && i >= a0 && i < a1) return SEL_LOWEST;
    return xv;
}

__device__ __forceinline__ float sel_lse(float m, double s) {
    return isfinite(m) ? m + (float)log(s) : m;
}

// A slice holds at most SEL_PER ids per thread (select.rs: SLICE_IDS / SPLIT_THREADS): the
// thread's ids lo + tid + u·nt, loaded once, all in flight together, and kept in registers for
// every pass over them.
#define SEL_PER 8
template <class X>
__device__ __forceinline__ void sel_load(const X* __restrict__ x, u32 lo, u32 hi, float (&xv)[SEL_PER]) {
#pragma unroll
    for (int u = 0; u < SEL_PER; ++u) {
        const u32 i = lo + threadIdx.x + u * blockDim.x;
        xv[u] = i < hi ? ldf(x, i) : 0.f;
    }
}

// logsumexp of the row's slices' (max, sum relative to it) pairs at `field`, by warp 0's lanes
// (lane q: slice q, S <= 32); every lane gets the same (m, s), so every block of a row decides
// alike.
__device__ __forceinline__ void sel_combine_warp(const double* st, int S, int field, float& m, double& s) {
    const int lane = threadIdx.x & 31;
    const double mq = lane < S ? st[lane * SEL_STATS + field] : -1e308;
    const double sq = lane < S ? st[lane * SEL_STATS + field + 1] : 0.0;
    m = warp_max(lane < S ? (float)mq : F_NEG_INF);
    s = 0.0;
    if (!isfinite(m)) return;
    s = sel_warp_sum_d(mq > -1e300 ? sq * exp(mq - (double)m) : 0.0);
}

template <class X>
__device__ __forceinline__ void stats_k(const X* __restrict__ logits, const u32* __restrict__ params,
                                        double* __restrict__ stats, int S) {
    extern __shared__ u32 sel_bits[];
    __shared__ SelShared sh;
    const u32 V = params[0];
    const u32 a0 = params[4], a1 = params[5], b0 = params[6], b1 = params[7];
    const int s = blockIdx.x, r = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const u32 per = (V + S - 1) / S;
    const u32 lo = min(V, (u32)s * per), hi = min(V, lo + per);
    sel_slice_setup(params, r, lo, hi, sel_bits, sh);
    const X* x = logits + (long long)r * V;
    float xs[SEL_PER];
    sel_load(x, lo, hi, xs);
    float m_all = F_NEG_INF, m_a = F_NEG_INF, m_b = F_NEG_INF, m_na = F_NEG_INF, m_raw = F_NEG_INF;
#pragma unroll
    for (int u = 0; u < SEL_PER; ++u) {
        const u32 i = lo + tid + u * nt;
        if (i >= hi) break;
        const float xv = xs[u];
        const float y = sel_slice_mask(i, xv, 0, sel_bits, lo, sh, a0, a1);
        m_all = fmaxf(m_all, y);
        if (i >= a0 && i < a1) m_a = fmaxf(m_a, y);
        else m_na = fmaxf(m_na, y);
        if (i >= b0 && i < b1) m_b = fmaxf(m_b, y);
        m_raw = fmaxf(m_raw, xv);
    }
    m_all = block_max(m_all, sh.scratch);
    m_a = block_max(m_a, sh.scratch);
    m_b = block_max(m_b, sh.scratch);
    m_na = block_max(m_na, sh.scratch);
    m_raw = block_max(m_raw, sh.scratch);
    double s_all = 0.0, s_b = 0.0, s_na = 0.0, s_raw = 0.0;
#pragma unroll
    for (int u = 0; u < SEL_PER; ++u) {
        const u32 i = lo + tid + u * nt;
        if (i >= hi) break;
        const float xv = xs[u];
        const float y = sel_slice_mask(i, xv, 0, sel_bits, lo, sh, a0, a1);
        s_all += (double)expf(y - m_all);
        if (!(i >= a0 && i < a1)) s_na += (double)expf(y - m_na);
        if (i >= b0 && i < b1) s_b += (double)expf(y - m_b);
        s_raw += (double)expf(xv - m_raw);
    }
    s_all = sel_block_sum_d(s_all, sh.dscratch);
    s_b = sel_block_sum_d(s_b, sh.dscratch);
    s_na = sel_block_sum_d(s_na, sh.dscratch);
    s_raw = sel_block_sum_d(s_raw, sh.dscratch);
    if (tid == 0) {
        double* o = stats + ((long long)r * S + s) * SEL_STATS;
        o[0] = m_all;
        o[1] = s_all;
        o[2] = m_a;
        o[3] = m_b;
        o[4] = s_b;
        o[5] = m_na;
        o[6] = s_na;
        o[7] = m_raw;
        o[8] = s_raw;
    }
}

extern "C" __global__ void __launch_bounds__(256) select_stats(const void* logits, const u32* params,
                                                               double* stats, int S, int dt) {
    if (dt & 2) stats_k<h16>((const h16*)logits, params, stats, S);
    else stats_k<float>((const float*)logits, params, stats, S);
}

template <class X>
__device__ __forceinline__ void split_k(const X* __restrict__ logits, const u32* __restrict__ params,
                                        const double* __restrict__ stats, float* cand_v, u32* cand_i,
                                        u32* counters, u32* __restrict__ out, int S) {
    extern __shared__ u32 sel_bits[];
    __shared__ SelShared sh;
    __shared__ float c_lse;
    __shared__ int c_fired, c_last;
    const u32 V = params[0], k = params[2], nd = params[3];
    const u32 a0 = params[4], a1 = params[5], b0 = params[6], b1 = params[7];
    const int has_mass = params[8] != 0;
    const u32 prob_id = params[9];
    const int s = blockIdx.x, r = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const u32 per = (V + S - 1) / S;
    const u32 lo = min(V, (u32)s * per), hi = min(V, lo + per);
    const u32* rec = params + SEL_HDR + nd + (long long)r * SEL_ROW;
    const int mass_on = has_mass && rec[1] != 0;
    const float off = __uint_as_float(rec[2]);
    const double* st = stats + (long long)r * S * SEL_STATS;
    sel_slice_setup(params, r, lo, hi, sel_bits, sh);
    const X* x = logits + (long long)r * V;
    (void)b0;
    (void)b1;

    float xs[SEL_PER];
    sel_load(x, lo, hi, xs);
    if (tid < 32) {
        float m, mb, ma;
        double sm, sb;
        sel_combine_warp(st, S, 0, m, sm);
        float lse = sel_lse(m, sm);
        int fired = 0;
        if (mass_on) {
            ma = warp_max(tid < S ? (float)st[tid * SEL_STATS + 2] : F_NEG_INF);
            sel_combine_warp(st, S, 3, mb, sb);
            fired = (sel_lse(mb, sb) - lse) > (ma - lse);
        }
        if (fired) {
            // A disabled: its ids join the row as SEL_LOWEST
            float mn;
            double sn;
            sel_combine_warp(st, S, 5, mn, sn);
            const u32 acnt = min(a1, V) > min(a0, V) ? min(a1, V) - min(a0, V) : 0;
            if (acnt > 0 && !(mn > SEL_LOWEST)) {
                // nothing outside A above SEL_LOWEST: every disabled id counts exp(0)
                sn = (isfinite(mn) ? sn : 0.0) + (double)acnt;
                mn = SEL_LOWEST;
            }
            lse = sel_lse(mn, sn);
        }
        if (tid == 0) {
            c_lse = lse;
            c_fired = fired;
        }
    }
    __syncthreads();
    const float lse = c_lse;
    const int fired = c_fired;

    // this thread's own top k of the slice, in increasing id order
    float tv[SEL_MAXK];
    u32 ti[SEL_MAXK];
    u32 cnt = 0;
#pragma unroll
    for (int u = 0; u < SEL_PER; ++u) {
        const u32 i = lo + tid + u * nt;
        if (i >= hi) break;
        const float key = (sel_slice_mask(i, xs[u], fired, sel_bits, lo, sh, a0, a1) - lse) + off;
        if (cnt == k && !(key > tv[k - 1])) continue;
        u32 pos = cnt < k ? cnt : k - 1;
        while (pos > 0 && key > tv[pos - 1]) {
            tv[pos] = tv[pos - 1];
            ti[pos] = ti[pos - 1];
            --pos;
        }
        tv[pos] = key;
        ti[pos] = i;
        if (cnt < k) ++cnt;
    }

    // the slice's sorted list: k rounds of a block arg-best over the threads' heads
    float* mv = cand_v + ((long long)r * S + s) * k;
    u32* mi = cand_i + ((long long)r * S + s) * k;
    const int lane = tid & 31, warp = tid >> 5, nw = (nt + 31) >> 5;
    u32 head = 0;
    for (u32 j = 0; j < k; ++j) {
        float bv = head < cnt ? tv[head] : F_NEG_INF;
        u32 bi = head < cnt ? ti[head] : 0xffffffffu;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const u32 oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (sel_before(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        __syncthreads();
        if (lane == 0) {
            sh.wv[warp] = bv;
            sh.wi[warp] = bi;
        }
        __syncthreads();
        bv = lane < nw ? sh.wv[lane] : F_NEG_INF;
        bi = lane < nw ? sh.wi[lane] : 0xffffffffu;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const u32 oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (sel_before(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (bi != 0xffffffffu && (bi - lo) % (u32)nt == (u32)tid) ++head;
        if (tid == 0) {
            mv[j] = bv;
            mi[j] = bi;
        }
    }

    // the last block of the row merges the S lists (warp 0: lane q holds slice q's head)
    __threadfence();
    __syncthreads();
    if (tid == 0) c_last = atomicAdd(&counters[r], 1u) == (u32)(S - 1);
    __syncthreads();
    if (!c_last || tid >= 32) return;
    __threadfence();
    const volatile float* vv = cand_v + (long long)r * S * k;
    const volatile u32* vi = cand_i + (long long)r * S * k;
    u32* o = out + (long long)r * (2 * k + 1);
    u32 h = 0;
    for (u32 j = 0; j < k; ++j) {
        const int live = lane < S && h < k;
        const float mine_v = live ? vv[lane * k + h] : F_NEG_INF;
        const u32 mine_i = live ? vi[lane * k + h] : 0xffffffffu;
        float bv = mine_v;
        u32 bi = mine_i;
#pragma unroll
        for (int q = 16; q > 0; q >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, q);
            const u32 oi = __shfl_xor_sync(0xffffffffu, bi, q);
            if (sel_before(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (live && bi != 0xffffffffu && mine_i == bi) ++h;
        if (lane == 0) {
            o[j] = bi;
            o[k + j] = __float_as_uint(bv);
        }
    }
    float prob = 0.f;
    if (prob_id != 0xffffffffu && prob_id < V) {
        float mr;
        double sr;
        sel_combine_warp(st, S, 7, mr, sr);
        prob = expf(ldf(x, prob_id) - sel_lse(mr, sr));
    }
    if (lane == 0) {
        o[2 * k] = __float_as_uint(prob);
        counters[r] = 0;
    }
}

extern "C" __global__ void __launch_bounds__(256)
    select_split(const void* logits, const u32* params, const double* stats, float* cand_v,
                 u32* cand_i, u32* counters, u32* out, int S, int dt) {
    if (dt & 2) split_k<h16>((const h16*)logits, params, stats, cand_v, cand_i, counters, out, S);
    else split_k<float>((const float*)logits, params, stats, cand_v, cand_i, counters, out, S);
}

// The next decoding step's parameters from this one's answer: step = (position, the best id of
// each row), as the floats step.cu reads (step_int), so that a step chain queued behind the
// selection needs no host round trip. `rec` = 2k + 1 words a row. An id at or past V (the host
// reports it as an error) is written as V, which embed_step turns into NaN, not a stray read.
extern "C" __global__ void select_feed(const u32* __restrict__ out, float* __restrict__ step, int rows, int rec, int v,
                                       float position) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r == 0) step[0] = position;
    if (r < rows) step[1 + r] = (float)min(out[(long long)r * rec], (u32)v);
}
