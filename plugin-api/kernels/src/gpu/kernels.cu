// The fused normalisation and softmax ops on a CUDA device (gpu.rs launches them; compiled at
// run time with NVRTC). Every tensor is contiguous; one warp serves one row, so a row's sums
// are warp shuffles and no shared memory is needed. The formulas are those of norm.rs and
// softmax.rs, the CPU ops these mirror.

__device__ inline float exp_of(float v) { return expf(v); }
__device__ inline double exp_of(double v) { return exp(v); }
__device__ inline float sqrt_of(float v) { return sqrtf(v); }
__device__ inline double sqrt_of(double v) { return sqrt(v); }
// -infinity, the start of a running maximum (NVRTC has no math.h for INFINITY).
__device__ inline void neg_inf(float* v) { *v = -__int_as_float(0x7f800000); }
__device__ inline void neg_inf(double* v) { *v = -__longlong_as_double(0x7ff0000000000000LL); }

template <typename T> __device__ inline T warp_sum(T v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <typename T> __device__ inline T warp_max(T v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        T other = __shfl_xor_sync(0xffffffffu, v, offset);
        v = other > v ? other : v;
    }
    return v;
}

// The row this warp serves (blockDim = (32, rows per block)), or -1 past the last.
__device__ inline long long warp_row(long long rows) {
    long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y;
    return row < rows ? row : -1;
}

// A row's mean (0 unless `centre`) and `r = (mean((x - mean)^2) + eps)^(-1/2)`.
template <typename T> __device__ inline void row_scale(const T* x, int n, T eps, int centre, T* mean, T* r) {
    T m = 0;
    if (centre) {
        T s = 0;
        for (int j = threadIdx.x; j < n; j += 32) s += x[j];
        m = warp_sum(s) / T(n);
    }
    T ss = 0;
    for (int j = threadIdx.x; j < n; j += 32) {
        T c = x[j] - m;
        ss += c * c;
    }
    *mean = m;
    *r = T(1) / sqrt_of(warp_sum(ss) / T(n) + eps);
}

// The gain of column j: g[j], or 1 where the norm has no gain (then g is never read).
template <typename T> __device__ inline T gain_at(const T* g, int has_gain, int j) { return has_gain ? g[j] : T(1); }

// y = act((x - mean) r g), act 0 = identity, 1 = ReLU.
template <typename T>
__device__ void norm_forward(const T* x, const T* g, T* y, long long rows, int n, T eps, int act, int centre,
                             int has_gain) {
    long long row = warp_row(rows);
    if (row < 0) return;
    const T* xr = x + row * n;
    T* yr = y + row * n;
    T mean, r;
    row_scale(xr, n, eps, centre, &mean, &r);
    for (int j = threadIdx.x; j < n; j += 32) {
        T u = (xr[j] - mean) * r * gain_at(g, has_gain, j);
        yr[j] = (act == 1 && !(u > T(0))) ? T(0) : u;
    }
}

// From dy: out[0] = dx = r (dx^ - x^ mean(dx^ x^) - mean(dx^)) (the last term when centred) with
// du = dy act'(u), dx^ = du g; out[1] = du x^, the rows the gain's gradient sums (only with a
// gain: without one, out holds dx alone).
template <typename T>
__device__ void norm_backward(const T* x, const T* g, const T* dy, T* out, long long rows, int n, T eps, int act,
                              int centre, int has_gain) {
    long long row = warp_row(rows);
    if (row < 0) return;
    const T* xr = x + row * n;
    const T* dyr = dy + row * n;
    T* dx = out + row * n;
    T* gain_terms = out + rows * n + row * n;
    T mean, r;
    row_scale(xr, n, eps, centre, &mean, &r);
    T along = 0, total = 0;
    for (int j = threadIdx.x; j < n; j += 32) {
        T xh = (xr[j] - mean) * r, gj = gain_at(g, has_gain, j);
        T du = (act == 1 && !(xh * gj > T(0))) ? T(0) : dyr[j];
        T dxh = du * gj;
        along += dxh * xh;
        total += dxh;
        if (has_gain) gain_terms[j] = du * xh;
    }
    along = warp_sum(along) / T(n);
    total = centre ? warp_sum(total) / T(n) : T(0);
    for (int j = threadIdx.x; j < n; j += 32) {
        T xh = (xr[j] - mean) * r, gj = gain_at(g, has_gain, j);
        T du = (act == 1 && !(xh * gj > T(0))) ? T(0) : dyr[j];
        dx[j] = r * (du * gj - xh * along - total);
    }
}

// Softmax of each row of length n.
template <typename T> __device__ void softmax_rows(const T* x, T* y, long long rows, int n) {
    long long row = warp_row(rows);
    if (row < 0) return;
    const T* xr = x + row * n;
    T* yr = y + row * n;
    T top;
    neg_inf(&top);
    for (int j = threadIdx.x; j < n; j += 32) top = xr[j] > top ? xr[j] : top;
    top = warp_max(top);
    T total = 0;
    for (int j = threadIdx.x; j < n; j += 32) {
        T e = exp_of(xr[j] - top);
        yr[j] = e;
        total += e;
    }
    T inv = T(1) / warp_sum(total);
    for (int j = threadIdx.x; j < n; j += 32) yr[j] *= inv;
}

// dx = y (dy - sum(y dy)) per row.
template <typename T> __device__ void softmax_rows_backward(const T* y, const T* dy, T* dx, long long rows, int n) {
    long long row = warp_row(rows);
    if (row < 0) return;
    const T* yr = y + row * n;
    const T* dyr = dy + row * n;
    T along = 0;
    for (int j = threadIdx.x; j < n; j += 32) along += yr[j] * dyr[j];
    along = warp_sum(along);
    for (int j = threadIdx.x; j < n; j += 32) dx[row * n + j] = yr[j] * (dyr[j] - along);
}

// Softmax down each column of `mats` row-major m x n matrices: one thread per column, so the
// threads of a warp read neighbouring entries of a row.
template <typename T> __device__ void softmax_columns(const T* x, T* y, long long mats, int m, int n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= mats * n) return;
    long long base = (t / n) * m * n + t % n;
    T top;
    neg_inf(&top);
    for (int i = 0; i < m; i++) top = x[base + (long long)i * n] > top ? x[base + (long long)i * n] : top;
    T total = 0;
    for (int i = 0; i < m; i++) {
        T e = exp_of(x[base + (long long)i * n] - top);
        y[base + (long long)i * n] = e;
        total += e;
    }
    T inv = T(1) / total;
    for (int i = 0; i < m; i++) y[base + (long long)i * n] *= inv;
}

template <typename T>
__device__ void softmax_columns_backward(const T* y, const T* dy, T* dx, long long mats, int m, int n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= mats * n) return;
    long long base = (t / n) * m * n + t % n;
    T along = 0;
    for (int i = 0; i < m; i++) along += y[base + (long long)i * n] * dy[base + (long long)i * n];
    for (int i = 0; i < m; i++) {
        long long at = base + (long long)i * n;
        dx[at] = y[at] * (dy[at] - along);
    }
}

#define FOR_TYPE(T, SUFFIX)                                                                                   \
    extern "C" __global__ void norm_forward_##SUFFIX(const T* x, const T* g, T* y, long long rows, int n,     \
                                                      T eps, int act, int centre, int has_gain) {             \
        norm_forward<T>(x, g, y, rows, n, eps, act, centre, has_gain);                                        \
    }                                                                                                         \
    extern "C" __global__ void norm_backward_##SUFFIX(const T* x, const T* g, const T* dy, T* out,            \
                                                       long long rows, int n, T eps, int act, int centre,    \
                                                       int has_gain) {                                        \
        norm_backward<T>(x, g, dy, out, rows, n, eps, act, centre, has_gain);                                 \
    }                                                                                                         \
    extern "C" __global__ void softmax_rows_##SUFFIX(const T* x, T* y, long long rows, int n) {               \
        softmax_rows<T>(x, y, rows, n);                                                                       \
    }                                                                                                         \
    extern "C" __global__ void softmax_rows_backward_##SUFFIX(const T* y, const T* dy, T* dx, long long rows, \
                                                               int n) {                                       \
        softmax_rows_backward<T>(y, dy, dx, rows, n);                                                         \
    }                                                                                                         \
    extern "C" __global__ void softmax_columns_##SUFFIX(const T* x, T* y, long long mats, int m, int n) {     \
        softmax_columns<T>(x, y, mats, m, n);                                                                 \
    }                                                                                                         \
    extern "C" __global__ void softmax_columns_backward_##SUFFIX(const T* y, const T* dy, T* dx,             \
                                                                  long long mats, int m, int n) {             \
        softmax_columns_backward<T>(y, dy, dx, mats, m, n);                                                   \
    }

FOR_TYPE(float, f32)
FOR_TYPE(double, f64)
