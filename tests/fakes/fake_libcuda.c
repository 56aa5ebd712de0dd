/* A fake libcuda.so.1 for CPU tests of timed_loop.c's host logic (tests/eval/test_native_loop_cpu.py):
 * host memory for device memory, counters for events, the loop's fill and copy kernels done on the host, other
 * launches that only note n and a marker. */
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
static long counter = 0;
long fake_launches = 0;
size_t fake_limit = 0;
int fake_fail_record = 0;
size_t fake_fill_words = 0;
unsigned fake_spin_blocks = 0, fake_spin_threads = 0, fake_capture_blocks = 0;

CUresult cuGetErrorName(CUresult r, const char **s) { (void)r; *s = "FAKE_ERROR"; return 0; }
CUresult cuCtxGetCurrent(void **c) { *c = (void *)0x1234; return 0; }
CUresult cuCtxGetLimit(size_t *v, int l) { *v = fake_limit; return l == 6 ? 0 : 1; }
CUresult cuCtxSetLimit(int l, size_t v) { (void)l; fake_limit = v; return 0; }
CUresult cuCtxResetPersistingL2Cache(void) { return 0; }
CUresult cuStreamGetAttribute(void *s, int a, void *v) { (void)s; (void)a; memset(v, 0, 64); return 0; }
CUresult cuStreamSetAttribute(void *s, int a, const void *v) { (void)s; (void)a; (void)v; return 0; }
CUresult cuStreamSynchronize(void *s) { (void)s; return 0; }
CUresult cuEventCreate(void **e, unsigned f) { (void)f; *e = calloc(1, sizeof(long)); return 0; }
CUresult cuEventDestroy_v2(void *e) { free(e); return 0; }
CUresult cuEventRecord(void *e, void *s) { (void)s; if (fake_fail_record) return 700; *(long *)e = ++counter; return 0; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { *ms = (float)(*(long *)b - *(long *)a); return 0; }
CUresult cuMemAlloc_v2(unsigned long long *p, size_t n) { *p = (unsigned long long)calloc(1, n); return 0; }
CUresult cuMemFree_v2(unsigned long long p) { free((void *)p); return 0; }
CUresult cuMemcpyDtoH_v2(void *d, unsigned long long s, size_t n) { memcpy(d, (void *)s, n); return 0; }
/* a device of 4 SMs, 2048 thread slots each, blocks of up to 1024 threads */
CUresult cuCtxGetDevice(int *d) { *d = 0; return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, int d) {
    (void)d;
    switch (a) {
        case 1: *v = 1024; return 0;   /* MAX_THREADS_PER_BLOCK */
        case 16: *v = 4; return 0;     /* MULTIPROCESSOR_COUNT */
        case 39: *v = 2048; return 0;  /* MAX_THREADS_PER_MULTIPROCESSOR */
        case 82: *v = 65536; return 0; /* MAX_REGISTERS_PER_MULTIPROCESSOR */
        case 106: *v = 32; return 0;   /* MAX_BLOCKS_PER_MULTIPROCESSOR */
        default: return 1;
    }
}
/* the capture's partial kernel: 64 registers a thread, so 4 blocks of 256 fill the registers; the others 16 */
static int fake_regs(void *f) { return strcmp((const char *)f, "kh_capture_partial") ? 16 : 64; }
CUresult cuFuncGetAttribute(int *v, int a, void *f) { if (a != 4) return 1; *v = fake_regs(f); return 0; }
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int threads, size_t smem) {
    (void)smem;
    int by_threads = 2048 / threads, by_regs = 65536 / (threads * fake_regs(f));
    *n = by_threads < by_regs ? by_threads : by_regs;
    return 0;
}
CUresult cuModuleLoadData(void **m, const void *d) { (void)d; *m = (void *)1; return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *n) { (void)m; *f = (void *)n; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, void *s, void **p, void **x) {
    (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s; (void)x;
    fake_launches++;
    if (!strcmp((const char *)f, "kh_spin")) { fake_spin_blocks = gx; fake_spin_threads = bx; }
    if (!strcmp((const char *)f, "kh_capture_partial")) fake_capture_blocks = gx;
    if (!strcmp((const char *)f, "kh_fill")) { /* writes, so a short buffer shows */
        unsigned *words = *(unsigned **)p[0];
        unsigned long long n = *(unsigned long long *)p[1];
        for (unsigned long long i = 0; i < n; ++i) words[i] = *(unsigned *)p[2];
        fake_fill_words += n;
    }
    if (!strcmp((const char *)f, "kh_copy"))
        memcpy(*(void **)p[0], *(const void **)p[1], (size_t)*(unsigned long long *)p[2]);
    if (!strcmp((const char *)f, "kh_capture_final")) { /* n where eval/crossing/_capture.py puts it, and a marker */
        double *out = *(double **)p[2];
        out[14] = (double)*(long long *)p[3];
        out[0] = 7.0;
    }
    return 0;
}
