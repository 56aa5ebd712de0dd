/* A fake libcuda.so.1 for CPU tests of timed_loop.c's host logic (tests/eval/test_native_loop_cpu.py):
 * host memory for device memory, counters for events, launches that only note n and a marker. */
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
static long counter = 0;
long fake_launches = 0;
size_t fake_limit = 0;
int fake_fail_record = 0;

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
size_t fake_memset_words = 0;
CUresult cuMemsetD32Async(unsigned long long p, unsigned v, size_t n, void *s) { /* writes, so a short buffer shows */
    (void)s; for (size_t i = 0; i < n; ++i) ((unsigned *)p)[i] = v;
    fake_memset_words += n; return 0;
}
CUresult cuMemcpyDtoH_v2(void *d, unsigned long long s, size_t n) { memcpy(d, (void *)s, n); return 0; }
CUresult cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, void *st) {
    (void)st; memcpy((void *)d, (const void *)s, n); return 0;
}
CUresult cuModuleLoadData(void **m, const void *d) { (void)d; *m = (void *)1; return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *n) { (void)m; *f = (void *)n; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, void *s, void **p, void **x) {
    (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s; (void)x;
    fake_launches++;
    if (!strcmp((const char *)f, "kh_capture_final")) { /* n where eval/_capture.py puts it, and a marker */
        double *out = *(double **)p[2];
        out[14] = (double)*(long long *)p[3];
        out[0] = 7.0;
    }
    return 0;
}
