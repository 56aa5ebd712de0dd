// Device kernels of the native timing loop, compiled at run time with NVRTC (no headers needed).
// kh_spin keeps the GPU busy so the host enqueues a timed call before the GPU reaches it; kh_fill (the L2
// flush) and kh_copy (a repetition's inputs) are the loop's other work outside the timed calls. The three are
// launched to fill every SM (`fill_geometry` in timed_loop.c: all thread slots taken), so no block of another
// kernel is resident beside them: work a candidate queued on another stream cannot run hidden in the loop's
// own GPU time, it waits and adds to the block's wall time;
// kh_capture_partial / kh_capture_final compute the capture of eval/_capture.py (the
// specification) in float64, in a fixed order: a fixed grid of per-block partials, reduced by
// one block in a fixed tree. No atomics, so the result is deterministic.

#define KH_MAX_DIMS 8
#define KH_THREADS 256
#define KH_BLOCKS 2048  // the capture's partial sums: as in timed_loop.c
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
// Thread 0 of each block spins; the others hold their thread slots at the barrier.
extern "C" __global__ void kh_spin(unsigned long long ns) {
    if (threadIdx.x == 0) {
        unsigned long long start, now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        do {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        } while (now - start < ns);
    }
    __syncthreads();
}

// words[0..n) = value, grid-stride (the L2 flush).
extern "C" __global__ void kh_fill(unsigned int* words, unsigned long long n, unsigned int value) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        words[i] = value;
}

// dst[0..n) = src[0..n) in bytes, grid-stride, 16 bytes at a time where both ends and n allow it, with
// KH_COPY_LOADS loads in flight per thread; its launch bounds keep it to 32 registers a thread, so that it still fills
// every SM (2048 threads of 64K registers).
#define KH_COPY_LOADS 4
extern "C" __global__ void __launch_bounds__(1024, 2) kh_copy(unsigned char* dst, const unsigned char* src, unsigned long long n) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if ((((unsigned long long)dst | (unsigned long long)src | n) & 15) == 0) {
        uint4* d = (uint4*)dst;
        const uint4* s = (const uint4*)src;
        const unsigned long long n16 = n / 16;
        for (unsigned long long i = first; i < n16; i += KH_COPY_LOADS * stride) {
            uint4 v[KH_COPY_LOADS];
#pragma unroll
            for (int k = 0; k < KH_COPY_LOADS; ++k)
                if (i + k * stride < n16) v[k] = s[i + k * stride];
#pragma unroll
            for (int k = 0; k < KH_COPY_LOADS; ++k)
                if (i + k * stride < n16) d[i + k * stride] = v[k];
        }
    } else {
        for (unsigned long long i = first; i < n; i += stride) dst[i] = src[i];
    }
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

// Logical block b of kh_capture_partial (threads b * KH_THREADS + t, elements tid, tid + stride, ...).
__device__ void kh_capture_block(const kh_leaf& L, int b, double* partials, double* out) {
    __shared__ double red[KH_THREADS];
    const double inf = __longlong_as_double(0x7ff0000000000000LL);
    const long long tid = (long long)b * KH_THREADS + threadIdx.x;
    const long long stride = (long long)KH_BLOCKS * KH_THREADS;

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

    kh_block_sums(acc, red, partials + b * KH_QUANTITIES);
}

// KH_BLOCKS logical blocks of KH_THREADS: writes the samples to out[0, samples) and logical block b's partial sums to
// partials[b * KH_QUANTITIES + q]. The grid holds as many blocks as the SMs hold at once (timed_loop.c); each takes
// logical blocks blockIdx.x, blockIdx.x + gridDim.x, ... So no block retires before its last one, and no block of
// another kernel gets a retiring block's place mid-capture (work queued on another stream ran there for free, while
// 2048 blocks went through in waves). The sums do not depend on the grid.
extern "C" __global__ void kh_capture_partial(kh_leaf L, double* partials, double* out) {
    for (int b = blockIdx.x; b < KH_BLOCKS; b += gridDim.x) kh_capture_block(L, b, partials, out);
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
