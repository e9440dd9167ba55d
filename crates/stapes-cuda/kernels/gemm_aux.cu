// Helpers around the library GEMMs, and the small-M kernels that replace them for decoder steps.

// f32 -> f16 for the activations fed to the f16 tensor-core GEMM.
extern "C" __global__ void cast_f32_f16(h16* __restrict__ y, const float* __restrict__ x, long long n) {
    PDL_ENTER();
    if ((n & 3) == 0) {
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n >> 2); i += (long long)gridDim.x * blockDim.x) {
            float4 v = ((const float4*)x)[i];
            ((uint2*)y)[i] = make_uint2(pack_h2(v.x, v.y), pack_h2(v.z, v.w));
        }
        return;
    }
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = f2h(x[i]);
}

// A q8 weight's values as f16, for the shapes where the q8 lane runs the f16 tensor cores
// (q8_mix.rs): w16 (n, k) = f16(w8 (n_pad, k_pad) x sw (n)), the one rounding of the product.
// Runs once per weight, at load-time cost, outside any capture.
extern "C" __global__ void dequant_w8_f16(h16* __restrict__ w16, const signed char* __restrict__ w8,
                                          const float* __restrict__ sw, int n, int k, int k_pad) {
    long long total = (long long)n * k;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / k, c = i - r * k;
        w16[i] = f2h((float)w8[r * k_pad + c] * sw[r]);
    }
}

// Per-row symmetric int8 quantization of activations for the int8 GEMM. One warp per row
// (m_pad rows): amax reduced across the warp, then the row written back as packed int8. Rows >= m and columns >= k are zero
// so the padded GEMM dimensions add nothing. q (m_pad, k_pad) int8, sx (m_pad) the row scales;
// x f32 or f16 (dt bit 1).
#define QR_CACHE 16
template <class X>
__device__ __forceinline__ void quantize_rows_k(signed char* __restrict__ q, float* __restrict__ sx, const void* x_, int m, int k,
                                                int k_pad) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    int m_pad = gridDim.x * (blockDim.x >> 5);
    if (r >= m_pad) return;
    u32* qr = (u32*)(q + (long long)r * k_pad);
    int groups = k_pad >> 2;  // packed words per row
    if (r >= m) {
        for (int i = lane; i < groups; i += 32) qr[i] = 0u;
        if (lane == 0) sx[r] = 0.f;
        return;
    }
    const X* xr = (const X*)x_ + (long long)r * k;
    float a = 0.f;
    if ((k & 3) == 0 && k <= 32 * 4 * QR_CACHE) {
        // common case (K <= 2048): every load of the row issued up front and kept in registers,
        // so a warp waits for memory once instead of once per loop trip
        int k4 = k >> 2;
        float4 v[QR_CACHE];
#pragma unroll
        for (int j = 0; j < QR_CACHE; ++j) {
            int i4 = lane + j * 32;
            v[j] = i4 < k4 ? ld4(xr, i4) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int j = 0; j < QR_CACHE; ++j)
            a = fmaxf(a, fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w))));
        a = warp_max(a);
        float inv = a > 0.f ? 127.f / a : 0.f;
#pragma unroll
        for (int j = 0; j < QR_CACHE; ++j) {
            int i4 = lane + j * 32;
            if (i4 < groups) {
                int q0 = __float2int_rn(v[j].x * inv), q1 = __float2int_rn(v[j].y * inv);
                int q2 = __float2int_rn(v[j].z * inv), q3 = __float2int_rn(v[j].w * inv);
                qr[i4] = (u32)(q0 & 0xff) | ((u32)(q1 & 0xff) << 8) | ((u32)(q2 & 0xff) << 16) | ((u32)(q3 & 0xff) << 24);
            }
        }
        for (int i4 = lane + QR_CACHE * 32; i4 < groups; i4 += 32) qr[i4] = 0u;
    } else if ((k & 3) == 0) {
        // long rows: 16-byte loads, unrolled so several are in flight; the second pass hits L1/L2
        int k4 = k >> 2;
#pragma unroll 8
        for (int i4 = lane; i4 < k4; i4 += 32) {
            float4 v = ld4(xr, i4);
            a = fmaxf(a, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
        }
        a = warp_max(a);
        float inv = a > 0.f ? 127.f / a : 0.f;
#pragma unroll 8
        for (int i4 = lane; i4 < groups; i4 += 32) {
            float4 v = i4 < k4 ? ld4(xr, i4) : make_float4(0.f, 0.f, 0.f, 0.f);
            int q0 = __float2int_rn(v.x * inv), q1 = __float2int_rn(v.y * inv);
            int q2 = __float2int_rn(v.z * inv), q3 = __float2int_rn(v.w * inv);
            qr[i4] = (u32)(q0 & 0xff) | ((u32)(q1 & 0xff) << 8) | ((u32)(q2 & 0xff) << 16) | ((u32)(q3 & 0xff) << 24);
        }
    } else {
        for (int i = lane; i < k; i += 32) a = fmaxf(a, fabsf(ldf(xr, i)));
        a = warp_max(a);
        float inv = a > 0.f ? 127.f / a : 0.f;
        for (int i4 = lane; i4 < groups; i4 += 32) {
            u32 packed = 0;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int i = i4 * 4 + e;
                float v = i < k ? ldf(xr, i) * inv : 0.f;
                int qi = __float2int_rn(fminf(fmaxf(v, -127.f), 127.f));
                packed |= ((u32)(qi & 0xff)) << (8 * e);
            }
            qr[i4] = packed;
        }
    }
    if (lane == 0) sx[r] = a / 127.f;
}
extern "C" __global__ void quantize_rows_i8(signed char* q, float* sx, const void* x, int m, int k, int k_pad, int dt) {
    PDL_ENTER();
    if (dt & 2) quantize_rows_k<h16>(q, sx, x, m, k, k_pad);
    else quantize_rows_k<float>(q, sx, x, m, k, k_pad);
}

// int32 GEMM result (m rows, ldc columns, row-major) -> y (m, n) = acc * sx[row] * sw[col] + bias
// (+ resid (m, n), of y's type, when given: a residual stream added in the same pass),
// y f32 or f16 (dt bit 0). grid.y walks rows so no thread divides; four columns per thread when
// n allows vector stores.
template <class Y>
__device__ __forceinline__ void dequant_k(void* y_, const int* __restrict__ acc, const float* __restrict__ sx,
                                          const float* __restrict__ sw, const float* __restrict__ bias, const void* resid_,
                                          int m, int n, int ldc) {
    for (int r = blockIdx.y; r < m; r += gridDim.y) {
        const int* a = acc + (long long)r * ldc;
        Y* yr = (Y*)y_ + (long long)r * n;
        const Y* rr = resid_ ? (const Y*)resid_ + (long long)r * n : nullptr;
        float s = sx[r];
        if ((n & 3) == 0) {
            for (int c4 = blockIdx.x * blockDim.x + threadIdx.x; c4 < (n >> 2); c4 += gridDim.x * blockDim.x) {
                int4 iv = ((const int4*)a)[c4];
                float4 w = ((const float4*)sw)[c4];
                float4 o = make_float4((float)iv.x * s * w.x, (float)iv.y * s * w.y, (float)iv.z * s * w.z, (float)iv.w * s * w.w);
                if (bias) {
                    float4 bb = ((const float4*)bias)[c4];
                    o.x += bb.x; o.y += bb.y; o.z += bb.z; o.w += bb.w;
                }
                if (rr) {
                    float4 rv = ld4(rr, c4);
                    o.x += rv.x; o.y += rv.y; o.z += rv.z; o.w += rv.w;
                }
                st4(yr, c4, o);
            }
        } else {
            for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < n; c += gridDim.x * blockDim.x) {
                float v = (float)a[c] * s * sw[c];
                if (bias) v += bias[c];
                if (rr) v += ldf(rr, c);
                stf(yr, c, v);
            }
        }
    }
}
extern "C" __global__ void dequant_epilogue(void* y, const int* acc, const float* sx, const float* sw, const float* bias, int m,
                                            int n, int ldc, int dt) {
    PDL_ENTER();
    DISPATCH_Y(dt, dequant_k, y, acc, sx, sw, bias, nullptr, m, n, ldc);
}
// The same with a residual `resid` (m, n) of y's type added after the bias (Backend::linear_add).
extern "C" __global__ void dequant_epilogue_add(void* y, const int* acc, const float* sx, const float* sw, const float* bias,
                                                const void* resid, int m, int n, int ldc, int dt) {
    PDL_ENTER();
    DISPATCH_Y(dt, dequant_k, y, acc, sx, sw, bias, resid, m, n, ldc);
}

// The q8 MLP's middle in one pass (Backend::linear_act): one block per row r < m_pad of the int32
// GEMM result, y (m, n) = act(acc * sx[row] * sw[col] + bias) in Y, and the same values quantized
// per row for the next int8 GEMM: q (m_pad, k_pad) int8, sq (m_pad) scales, as quantize_rows_i8
// lays them out (rows >= m and columns >= n zero). The values are quantized before y's rounding
// to Y. Replaces the scaling epilogue, the activation pass and the next GEMM's quantize pass.
template <class Y>
__device__ __forceinline__ void dequant_act_quant_k(void* y_, signed char* __restrict__ q, float* __restrict__ sq,
                                                    const int* __restrict__ acc, const float* __restrict__ sx,
                                                    const float* __restrict__ sw, const float* __restrict__ bias, int m, int n,
                                                    int ldc, int k_pad, int act) {
    __shared__ float scratch[32];
    int r = blockIdx.x;
    u32* qr = (u32*)(q + (long long)r * k_pad);
    int groups = k_pad >> 2;
    if (r >= m) {
        for (int i = threadIdx.x; i < groups; i += blockDim.x) qr[i] = 0u;
        if (threadIdx.x == 0) sq[r] = 0.f;
        return;
    }
    const int* a = acc + (long long)r * ldc;
    Y* yr = (Y*)y_ + (long long)r * n;
    float s = sx[r];
    float amax = 0.f;
    if ((n & 3) == 0) {
        for (int c4 = threadIdx.x; c4 < (n >> 2); c4 += blockDim.x) {
            int4 iv = ((const int4*)a)[c4];
            float4 w = ((const float4*)sw)[c4];
            float4 bb = bias ? ((const float4*)bias)[c4] : make_float4(0.f, 0.f, 0.f, 0.f);
            float4 o = make_float4(act_apply((float)iv.x * s * w.x + bb.x, act), act_apply((float)iv.y * s * w.y + bb.y, act),
                                   act_apply((float)iv.z * s * w.z + bb.z, act), act_apply((float)iv.w * s * w.w + bb.w, act));
            st4(yr, c4, o);
            amax = fmaxf(amax, fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w))));
        }
    } else {
        for (int c = threadIdx.x; c < n; c += blockDim.x) {
            float v = act_apply((float)a[c] * s * sw[c] + (bias ? bias[c] : 0.f), act);
            stf(yr, c, v);
            amax = fmaxf(amax, fabsf(v));
        }
    }
    amax = block_max(amax, scratch);
    float inv = amax > 0.f ? 127.f / amax : 0.f;
    // second pass from the accumulators (the row was just read: L1/L2), so the quantized values
    // are exactly the ones the row maximum was taken over
    for (int i4 = threadIdx.x; i4 < groups; i4 += blockDim.x) {
        u32 packed = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            int c = i4 * 4 + e;
            float v = c < n ? act_apply((float)a[c] * s * sw[c] + (bias ? bias[c] : 0.f), act) * inv : 0.f;
            int qi = __float2int_rn(fminf(fmaxf(v, -127.f), 127.f));
            packed |= ((u32)(qi & 0xff)) << (8 * e);
        }
        qr[i4] = packed;
    }
    if (threadIdx.x == 0) sq[r] = amax / 127.f;
}
extern "C" __global__ void dequant_act_quant(void* y, signed char* q, float* sq, const int* acc, const float* sx, const float* sw,
                                             const float* bias, int m, int n, int ldc, int k_pad, int act, int dt) {
    PDL_ENTER();
    DISPATCH_Y(dt, dequant_act_quant_k, y, q, sq, acc, sx, sw, bias, m, n, ldc, k_pad, act);
}

#define GEMV_MAX_M 8

// Small-M linear with f16 weights: y (m, n) = x (m, k) . W(n, k)^T + bias, m <= 8.
// One warp per output column; the weight row is streamed once for all m rows of x. x and y f32
// or f16 (`dt`).
template <class Y, class X>
__device__ __forceinline__ void gemv_f16_k(void* y_, const void* x_, const h16* __restrict__ w, const float* __restrict__ bias,
                                           int m, int n, int k) {
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    int warps = blockDim.x >> 5;
    int col = blockIdx.x * warps + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (col >= n) return;
    const h16* wr = w + (long long)col * k;
    float acc[GEMV_MAX_M];
#pragma unroll
    for (int r = 0; r < GEMV_MAX_M; ++r) acc[r] = 0.f;
    if ((k & 7) == 0) {
        // 16-byte weight loads, several in flight: this kernel is bound by streaming W once
#pragma unroll 4
        for (int i = lane * 8; i < k; i += 256) {
            uint4 raw = *(const uint4*)(wr + i);
            float wv[8];
            wv[0] = h2f((h16)(raw.x & 0xffff)); wv[1] = h2f((h16)(raw.x >> 16));
            wv[2] = h2f((h16)(raw.y & 0xffff)); wv[3] = h2f((h16)(raw.y >> 16));
            wv[4] = h2f((h16)(raw.z & 0xffff)); wv[5] = h2f((h16)(raw.z >> 16));
            wv[6] = h2f((h16)(raw.w & 0xffff)); wv[7] = h2f((h16)(raw.w >> 16));
#pragma unroll
            for (int r = 0; r < GEMV_MAX_M; ++r) {
                if (r < m) {
                    const X* xr = x + (long long)r * k + i;
                    float4 a = ld4(xr, 0), b = ld4(xr, 1);
                    acc[r] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x + wv[5] * b.y + wv[6] * b.z + wv[7] * b.w;
                }
            }
        }
    } else {
        for (int i = lane; i < k; i += 32) {
            float wv = h2f(wr[i]);
#pragma unroll
            for (int r = 0; r < GEMV_MAX_M; ++r)
                if (r < m) acc[r] += wv * ldf(x, (long long)r * k + i);
        }
    }
#pragma unroll
    for (int r = 0; r < GEMV_MAX_M; ++r) {
        if (r < m) {
            float v = warp_sum(acc[r]);
            if (lane == 0) stf(y, (long long)r * n + col, bias ? v + bias[col] : v);
        }
    }
}
extern "C" __global__ void gemv_f16(void* y, const void* x, const h16* w, const float* bias, int m, int n, int k, int dt) {
    // [pdl] this warp's weight row towards L2 while the work ahead finishes
    const int col = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (col < n) pdl_prefetch_l2(w + (long long)col * k, (long long)k * 2);
    PDL_ENTER();
    DISPATCH_YX(dt, gemv_f16_k, y, x, w, bias, m, n, k);
}

// Small-M linear with int8 weights (row stride k_pad, a multiple of 4) and one scale per output
// row: y = sw[col] * (x . w8[col]) + bias. Activations are not quantized: only the weight is.
template <class Y, class X>
__device__ __forceinline__ void gemv_i8_k(void* y_, const void* x_, const signed char* __restrict__ w, const float* __restrict__ sw,
                                          const float* __restrict__ bias, int m, int n, int k, int k_pad) {
    Y* y = (Y*)y_;
    const X* x = (const X*)x_;
    int warps = blockDim.x >> 5;
    int col = blockIdx.x * warps + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (col >= n) return;
    const signed char* wr = w + (long long)col * k_pad;
    float acc[GEMV_MAX_M];
#pragma unroll
    for (int r = 0; r < GEMV_MAX_M; ++r) acc[r] = 0.f;
    int k4 = k & ~3;
    int start = 0;
    if ((k & 15) == 0) {
        // 16 weights per 16-byte load, several in flight
#pragma unroll 4
        for (int i = lane * 16; i < k; i += 512) {
            int4 raw = *(const int4*)(wr + i);
            int wq[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int r = 0; r < GEMV_MAX_M; ++r) {
                if (r < m) {
                    const X* xr = x + (long long)r * k + i;
                    float sum = 0.f;
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        float4 a = ld4(xr, e);
                        int v = wq[e];
                        sum += (float)(signed char)(v & 0xff) * a.x + (float)(signed char)((v >> 8) & 0xff) * a.y +
                               (float)(signed char)((v >> 16) & 0xff) * a.z + (float)(signed char)(v >> 24) * a.w;
                    }
                    acc[r] += sum;
                }
            }
        }
        start = k;
    }
    for (int i = start + lane * 4; i < k4; i += 128) {
        int raw = *(const int*)(wr + i);
        float w0 = (float)(signed char)(raw & 0xff), w1 = (float)(signed char)((raw >> 8) & 0xff);
        float w2 = (float)(signed char)((raw >> 16) & 0xff), w3 = (float)(signed char)((raw >> 24) & 0xff);
#pragma unroll
        for (int r = 0; r < GEMV_MAX_M; ++r) {
            if (r < m) {
                const X* xr = x + (long long)r * k + i;  // any alignment: k need not be a multiple of 4
                acc[r] += w0 * ldf(xr, 0) + w1 * ldf(xr, 1) + w2 * ldf(xr, 2) + w3 * ldf(xr, 3);
            }
        }
    }
    for (int i = (start > k4 ? start : k4) + lane; i < k; i += 32) {
        float wv = (float)wr[i];
#pragma unroll
        for (int r = 0; r < GEMV_MAX_M; ++r)
            if (r < m) acc[r] += wv * ldf(x, (long long)r * k + i);
    }
    float s = sw[col];
#pragma unroll
    for (int r = 0; r < GEMV_MAX_M; ++r) {
        if (r < m) {
            float v = warp_sum(acc[r]) * s;
            if (lane == 0) stf(y, (long long)r * n + col, bias ? v + bias[col] : v);
        }
    }
}
extern "C" __global__ void gemv_i8(void* y, const void* x, const signed char* w, const float* sw, const float* bias, int m, int n,
                                   int k, int k_pad, int dt) {
    // [pdl] as gemv_f16
    const int col = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (col < n) pdl_prefetch_l2(w + (long long)col * k_pad, (long long)k);
    PDL_ENTER();
    DISPATCH_YX(dt, gemv_i8_k, y, x, w, sw, bias, m, n, k, k_pad);
}
