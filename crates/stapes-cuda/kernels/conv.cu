// Convolutions. conv1d lowers to im2col + the lane's GEMM; depthwise and 2-D convolutions are
// direct (they are small: subsampling stems and conformer depthwise blocks).

// x (b, t, c) -> cols (b * t_out, c * kw) with column index ci * kw + kk (the [c_in][k] weight order).
extern "C" __global__ void im2col_1d(float* __restrict__ cols, const float* __restrict__ x, int b, int t, int c, int kw,
                                     int stride, int pad, int t_out) {
    long long n = (long long)b * t_out * c * kw;
    long long ck = (long long)c * kw;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long row = i / ck;
        int col = (int)(i - row * ck);
        int bi = (int)(row / t_out), to = (int)(row - (long long)bi * t_out);
        int ci = col / kw, kk = col - ci * kw;
        int ti = to * stride + kk - pad;
        cols[i] = (ti >= 0 && ti < t) ? x[((long long)bi * t + ti) * c + ci] : 0.f;
    }
}

// x (b, t, c), w (c, kw) -> y (b, t_out, c)
extern "C" __global__ void depthwise_conv1d(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                                            const float* __restrict__ bias, int b, int t, int c, int kw, int stride, int pad,
                                            int t_out) {
    long long n = (long long)b * t_out * c;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int ci = (int)(i % c);
        long long row = i / c;
        int bi = (int)(row / t_out), to = (int)(row - (long long)bi * t_out);
        float acc = bias ? bias[ci] : 0.f;
        for (int kk = 0; kk < kw; ++kk) {
            int ti = to * stride + kk - pad;
            if (ti >= 0 && ti < t) acc += w[ci * kw + kk] * x[((long long)bi * t + ti) * c + ci];
        }
        y[i] = acc;
    }
}

// x (b, ci, h, w), weight (co, ci/groups, kh, kw) -> y (b, co, ho, wo)
extern "C" __global__ void conv2d_direct(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ wt,
                                         const float* __restrict__ bias, int b, int ci, int h, int w, int co, int kh, int kw,
                                         int sh, int sw, int ph, int pw, int groups, int ho, int wo) {
    long long n = (long long)b * co * ho * wo;
    int cig = ci / groups, cog = co / groups;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int ox = (int)(i % wo);
        long long r = i / wo;
        int oy = (int)(r % ho);
        r /= ho;
        int oc = (int)(r % co);
        int bi = (int)(r / co);
        int g = oc / cog;
        float acc = bias ? bias[oc] : 0.f;
        for (int c = 0; c < cig; ++c) {
            const float* xp = x + ((long long)bi * ci + g * cig + c) * h * w;
            const float* wp = wt + ((long long)oc * cig + c) * kh * kw;
            for (int ky = 0; ky < kh; ++ky) {
                int iy = oy * sh + ky - ph;
                if (iy < 0 || iy >= h) continue;
                for (int kx = 0; kx < kw; ++kx) {
                    int ix = ox * sw + kx - pw;
                    if (ix >= 0 && ix < w) acc += wp[ky * kw + kx] * xp[(long long)iy * w + ix];
                }
            }
        }
        y[i] = acc;
    }
}
