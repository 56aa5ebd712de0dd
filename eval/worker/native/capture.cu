// Device kernels of the native timing loop, compiled at run time with NVRTC (no headers needed).
// kh_spin keeps the GPU busy so the host enqueues a timed call before the GPU reaches it;
// kh_capture_partial / kh_capture_final compute the capture of eval/_capture.py (the
// specification) in float64, in a fixed order: a fixed grid of per-block partials, reduced by
// one block in a fixed tree. No atomics, so the result is deterministic.

#define KH_MAX_DIMS 8
#define KH_THREADS 256
#ifndef KH_UNROLL  // loads issued per thread before any is used, in kh_capture_partial
#define KH_UNROLL 1
#endif
#define KH_QUANTITIES 14  // 8 projections, sum_abs, sum_sq, nan, +inf, -inf, nonfinite_proj

// Must match struct kh_leaf in timed_loop.c field for field.
struct kh_leaf {
    unsigned long long data;  // address of the element at logical index 0 (data_ptr)
    long long sizes[KH_MAX_DIMS];
    long long strides[KH_MAX_DIMS];  // in elements
    long long n;
    unsigned long long key_rl;      // key ^ rl
    unsigned long long sample_seed; // key ^ 0xD1B54A32D192ED03 ^ rl
    int ndim;
    int dtype;  // index into SUPPORTED_DTYPES of eval/_capture.py
    int samples;
    int pad;
};

__device__ __forceinline__ unsigned long long kh_splitmix64(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN.
__device__ __forceinline__ double kh_e4m3fn(unsigned char b) {
    double sign = (b & 0x80) ? -1.0 : 1.0;
    int e = (b >> 3) & 0xF, m = b & 7;
    if (e == 15 && m == 7) return __longlong_as_double(0x7ff8000000000000LL);
    if (e == 0) return sign * ldexp((double)m, -9);  // subnormal: m/8 * 2^-6
    return sign * ldexp(8.0 + m, e - 10);             // (1 + m/8) * 2^(e-7)
}

// float8_e5m2: bias 15, IEEE-like infinities and NaNs.
__device__ __forceinline__ double kh_e5m2(unsigned char b) {
    double sign = (b & 0x80) ? -1.0 : 1.0;
    int e = (b >> 2) & 0x1F, m = b & 3;
    if (e == 31) return m ? __longlong_as_double(0x7ff8000000000000LL) : sign * __longlong_as_double(0x7ff0000000000000LL);
    if (e == 0) return sign * ldexp((double)m, -16);  // subnormal: m/4 * 2^-14
    return sign * ldexp(4.0 + m, e - 17);              // (1 + m/4) * 2^(e-15)
}

__device__ double kh_load(const kh_leaf& L, long long i) {
    long long off = 0;
    if (L.ndim == 1) {
        off = i * L.strides[0];  // the host merges dense dims, so this is the common case
    } else {
        for (int d = L.ndim - 1; d >= 0; --d) {
            long long size = L.sizes[d];
            off += (i % size) * L.strides[d];
            i /= size;
        }
    }
    switch (L.dtype) {
        case 0: return (double)((const float*)L.data)[off];
        case 1: {
            unsigned short h = ((const unsigned short*)L.data)[off];
            float f;
            asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
            return (double)f;
        }
        case 2: {
            unsigned int bits = ((unsigned int)((const unsigned short*)L.data)[off]) << 16;
            return (double)__int_as_float((int)bits);
        }
        case 3: return ((const double*)L.data)[off];
        case 4: return (double)((const signed char*)L.data)[off];
        case 5: return (double)((const unsigned char*)L.data)[off];
        case 6: return (double)((const short*)L.data)[off];
        case 7: return (double)((const int*)L.data)[off];
        case 8: return (double)((const long long*)L.data)[off];
        case 9: return ((const unsigned char*)L.data)[off] != 0 ? 1.0 : 0.0;  // bool
        case 10: return kh_e4m3fn(((const unsigned char*)L.data)[off]);
        default: return kh_e5m2(((const unsigned char*)L.data)[off]);
    }
}

// Spins on the global timer (nanoseconds), not clock64: the SM clock changes with load and power, so a
// lead counted in cycles lasted a different time in each process that calibrated it, and that difference
// showed up in the parent's wall bound as a per-process offset.
extern "C" __global__ void kh_spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

// Each quantity q of the block's threads' acc[q], summed in a fixed tree (so the result is deterministic); thread 0
// writes it to dst[q]. Every thread of a block of KH_THREADS must call it; red is the block's shared scratch.
__device__ __forceinline__ void kh_block_sums(const double (&acc)[KH_QUANTITIES], double* red, double* dst) {
#pragma unroll
    for (int q = 0; q < KH_QUANTITIES; ++q) {
        red[threadIdx.x] = acc[q];
        __syncthreads();
        for (int half = KH_THREADS / 2; half > 0; half >>= 1) {
            if (threadIdx.x < half) red[threadIdx.x] += red[threadIdx.x + half];
            __syncthreads();
        }
        if (threadIdx.x == 0) dst[q] = red[0];
        __syncthreads();
    }
}

// Grid: a fixed number of blocks of KH_THREADS. Writes the samples to out[0, samples) and
// block b's partial sums to partials[b * KH_QUANTITIES + q].
extern "C" __global__ void kh_capture_partial(kh_leaf L, double* partials, double* out) {
    __shared__ double red[KH_THREADS];
    const double inf = __longlong_as_double(0x7ff0000000000000LL);
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;

    for (long long j = tid; j < L.samples; j += stride) {
        double v;
        if (L.n <= L.samples) {
            v = j < L.n ? kh_load(L, j) : __longlong_as_double(0x7ff8000000000000LL);
        } else {
            unsigned long long g = kh_splitmix64(L.sample_seed ^ (unsigned long long)j);
            v = kh_load(L, (long long)(g % (unsigned long long)L.n));
        }
        out[j] = v;
    }

    double acc[KH_QUANTITIES];
#pragma unroll
    for (int q = 0; q < KH_QUANTITIES; ++q) acc[q] = 0.0;
    // KH_UNROLL > 1 issues that many loads per thread before using any. At 8 it took 92 registers against 64,
    // which halves the blocks an SM holds, and the capture measured 230 us a repetition (16M fp32, an H200) against
    // 143 us at 1 on another H200 host; `harness bench eval --part loop-overhead` times both side by side. Each
    // thread takes its elements tid, tid + stride, ... in that order whatever KH_UNROLL is, so the sums are too.
    for (long long base = tid; base < L.n; base += KH_UNROLL * stride) {
        double xs[KH_UNROLL];
#pragma unroll
        for (int u = 0; u < KH_UNROLL; ++u) {
            const long long i = base + u * stride;
            xs[u] = i < L.n ? kh_load(L, i) : 0.0;
        }
#pragma unroll
        for (int u = 0; u < KH_UNROLL; ++u) {
            const long long i = base + u * stride;
            if (i >= L.n) break;
            const double x = xs[u];
            unsigned long long h = kh_splitmix64(L.key_rl ^ (unsigned long long)i);
            if (x == x && x != inf && x != -inf) {
#pragma unroll
                for (int k = 0; k < 8; ++k) acc[k] += ((h >> k) & 1ULL) ? -x : x;
                acc[8] += x < 0 ? -x : x;
                acc[9] += x * x;
            } else {
                double code;
                if (x != x) { acc[10] += 1.0; code = 1.0; }
                else if (x > 0) { acc[11] += 1.0; code = 2.0; }
                else { acc[12] += 1.0; code = 3.0; }
                acc[13] += (h & 1ULL) ? -code : code;
            }
        }
    }

    kh_block_sums(acc, red, partials + blockIdx.x * KH_QUANTITIES);
}

// One block of KH_THREADS threads. Thread t sums blocks t, t + KH_THREADS, ... of every quantity, in that order;
// then each quantity is reduced over the threads by kh_block_sums, as in kh_capture_partial, so the result is
// deterministic. (One thread per quantity summing all blocks in order made 2048 dependent loads in a row: about
// 260 us a repetition on an H200, more than the flush and the lead together.) Then n and the reserved slot.
// out points at the capture's extra values (after the samples).
extern "C" __global__ void kh_capture_final(const double* partials, int blocks, double* out, long long n) {
    __shared__ double red[KH_THREADS];
    double acc[KH_QUANTITIES];
#pragma unroll
    for (int q = 0; q < KH_QUANTITIES; ++q) acc[q] = 0.0;
    for (int b = threadIdx.x; b < blocks; b += KH_THREADS) {
#pragma unroll
        for (int q = 0; q < KH_QUANTITIES; ++q) acc[q] += partials[b * KH_QUANTITIES + q];
    }
    kh_block_sums(acc, red, out);
    if (threadIdx.x == 0) {
        out[KH_QUANTITIES] = (double)n;
        out[KH_QUANTITIES + 1] = 0.0;
    }
}
