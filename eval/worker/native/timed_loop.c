/* kh_timed_loop: the timed repetitions of the evaluation harness, in C.
 *
 * Candidate code runs in the same process as the timing loop. A loop written in Python leaves
 * its hooks, events and buffers in frames and objects the candidate can reach and patch. Here,
 * between a timed call's start event and the launch of the kernels that capture its output,
 * only this file's code runs: the state lives in a C struct, and the CUDA driver is reached
 * through function pointers resolved here from libcuda.so.1 (no torch headers, no nvcc).
 *
 * The Python wrapper is eval/worker/native_loop.py; the capture layout is specified in
 * eval/crossing/_capture.py and computed by the kernels of capture.cu.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

/* ---- the few CUDA driver API types and constants used (values as in cuda.h) ---- */
typedef int CUresult;
typedef void *CUcontext, *CUstream, *CUevent, *CUfunction, *CUmodule;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

typedef struct {
    void *base_ptr;
    size_t num_bytes;
    float hitRatio;
    int hitProp;  /* CUaccessProperty */
    int missProp;
} CUaccessPolicyWindow;

typedef union { /* CUstreamAttrValue == CUlaunchAttributeValue: 64 bytes since CUDA 12 */
    CUaccessPolicyWindow accessPolicyWindow;
    char pad[64];
} CUstreamAttrValue;

#define CU_LIMIT_PERSISTING_L2_CACHE_SIZE 0x06
#define CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW 1
#define CU_EVENT_DEFAULT 0
#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK 1
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR 39
#define CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR 82
#define CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR 106
#define CU_FUNC_ATTRIBUTE_NUM_REGS 4

/* ---- capture constants, shared with capture.cu and eval/crossing/_capture.py ---- */
#define KH_MAX_DIMS 8
#define KH_MAX_LEAVES 16
#define KH_MAX_DEPTH 4
#define KH_CAPTURE_EXTRA 16
#define KH_QUANTITIES 14
#define KH_BLOCKS 2048  /* capture blocks: 16 per SM of an H100, so its loads hide memory latency */
#define KH_THREADS 256
#define KH_GOLDEN 0x9E3779B97F4A7C15ULL
#define KH_MIX1 0xBF58476D1CE4E5B9ULL
#define KH_MIX2 0x94D049BB133111EBULL
#define KH_SAMPLE_SALT 0xD1B54A32D192ED03ULL

/* Must match struct kh_leaf in capture.cu field for field. */
typedef struct {
    unsigned long long data;
    long long sizes[KH_MAX_DIMS];
    long long strides[KH_MAX_DIMS];
    long long n;
    unsigned long long key_rl;
    unsigned long long sample_seed;
    int ndim;
    int dtype;
    int samples;
    int pad;
} kh_leaf;

/* What "the same leaves" means between repetitions: dtype and shape. */
typedef struct {
    int dtype;
    int ndim;
    long long sizes[KH_MAX_DIMS];
} kh_sig;

/* ---- driver entry points ---- */
static struct {
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);
    CUresult (*FuncGetAttribute)(int *, int, CUfunction);
    CUresult (*CtxGetLimit)(size_t *, int);
    CUresult (*CtxSetLimit)(int, size_t);
    CUresult (*CtxResetPersistingL2Cache)(void);
    CUresult (*StreamGetAttribute)(CUstream, int, CUstreamAttrValue *);
    CUresult (*StreamSetAttribute)(CUstream, int, const CUstreamAttrValue *);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*EventCreate)(CUevent *, unsigned int);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, CUstream, void **, void **);
} cu;
static int cu_loaded = 0;

/* Resolve one symbol, trying the versioned names first (the ABI cuda.h maps the plain name to). */
static int resolve(void *lib, void **slot, const char *const *names) {
    for (; *names; ++names) {
        if ((*slot = dlsym(lib, *names)) != NULL) return 0;
    }
    return -1;
}

static int load_driver(void) {
    if (cu_loaded) return 0;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        PyErr_Format(PyExc_RuntimeError, "dlopen(libcuda.so.1) failed: %s", dlerror());
        return -1;
    }
#define RESOLVE(field, ...)                                                                   \
    do {                                                                                      \
        static const char *const names_[] = {__VA_ARGS__, NULL};                             \
        if (resolve(lib, (void **)&cu.field, names_) != 0) {                                  \
            PyErr_Format(PyExc_RuntimeError, "libcuda.so.1 has no %s", names_[0]);            \
            return -1;                                                                        \
        }                                                                                     \
    } while (0)
    RESOLVE(GetErrorName, "cuGetErrorName");
    RESOLVE(CtxGetCurrent, "cuCtxGetCurrent");
    RESOLVE(CtxGetDevice, "cuCtxGetDevice");
    RESOLVE(DeviceGetAttribute, "cuDeviceGetAttribute");
    RESOLVE(OccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    RESOLVE(FuncGetAttribute, "cuFuncGetAttribute");
    RESOLVE(CtxGetLimit, "cuCtxGetLimit");
    RESOLVE(CtxSetLimit, "cuCtxSetLimit");
    RESOLVE(CtxResetPersistingL2Cache, "cuCtxResetPersistingL2Cache");
    RESOLVE(StreamGetAttribute, "cuStreamGetAttribute");
    RESOLVE(StreamSetAttribute, "cuStreamSetAttribute");
    RESOLVE(StreamSynchronize, "cuStreamSynchronize");
    RESOLVE(EventCreate, "cuEventCreate");
    RESOLVE(EventDestroy, "cuEventDestroy_v2", "cuEventDestroy");
    RESOLVE(EventRecord, "cuEventRecord");
    RESOLVE(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
    RESOLVE(MemAlloc, "cuMemAlloc_v2");
    RESOLVE(MemFree, "cuMemFree_v2");
    RESOLVE(MemcpyDtoH, "cuMemcpyDtoH_v2");
    RESOLVE(ModuleLoadData, "cuModuleLoadData");
    RESOLVE(ModuleGetFunction, "cuModuleGetFunction");
    RESOLVE(LaunchKernel, "cuLaunchKernel");
#undef RESOLVE
    cu_loaded = 1;
    return 0;
}

static void cu_error(const char *call, CUresult r) {
    const char *name = NULL;
    if (cu.GetErrorName(r, &name) != 0 || name == NULL) name = "unknown";
    PyErr_Format(PyExc_RuntimeError, "%s failed: CUresult %d (%s)", call, r, name);
}

/* Every driver call goes through CU: on failure, a RuntimeError naming the call, then `goto fail`. */
#define CU(fn, args)                        \
    do {                                    \
        CUresult r_ = cu.fn args;           \
        if (r_ != 0) {                      \
            cu_error("cu" #fn, r_);         \
            goto fail;                      \
        }                                   \
    } while (0)

static unsigned long long splitmix64(unsigned long long z) {
    z += KH_GOLDEN;
    z = (z ^ (z >> 30)) * KH_MIX1;
    z = (z ^ (z >> 27)) * KH_MIX2;
    return z ^ (z >> 31);
}

/* A launch of one of the loop's own kernels (kh_spin, kh_fill, kh_copy, kh_capture_partial) that fills every SM
 * (`fill_geometry`). `fills` is 0 when its blocks leave room on an SM: another kernel's blocks could then be
 * resident beside it. */
typedef struct {
    unsigned int blocks, threads;
    int fills;
} kh_geometry;

/* ---- the Loop object ---- */
typedef struct {
    PyObject_HEAD
    int busy;                       /* run/set_lead in progress: no re-entry from candidate code */
    int device_index;
    int samples;
    int checks_limit;               /* the persisting-L2 limit can be read in this context */
    int checks_window;              /* the stream's access-policy window can be read */
    CUcontext ctx;
    CUstream stream;
    unsigned long long key;
    unsigned long long spin_ns;     /* the GPU lead before each start event, in global-timer nanoseconds */
    double lead_measured_us;        /* one spin of that length, as the events measured it */
    CUfunction spin, fill, copy, partial, final;
    kh_geometry spin_at, fill_at, copy_at, capture_at;
    CUdeviceptr flush_buf;
    size_t flush_words;             /* the default flush: words written before each call */
    size_t flush_cap;               /* words the buffer holds (grown for a larger flush on request) */
    CUdeviceptr partials;
    CUdeviceptr captures;
    size_t captures_bytes;
    CUevent *starts, *ends;     /* around each timed call */
    CUevent *pres, *posts;      /* each repetition's first and last work: its input copies, its capture */
    int n_events;
    /* trusted Python objects, saved before any candidate code was imported */
    PyObject *get_stream;   /* torch._C._cuda_getCurrentRawStream */
    PyObject *tensor_type;  /* torch.Tensor */
    PyObject *data_ptr, *size, *stride;  /* TensorBase method descriptors */
    PyObject *device_descr, *layout_descr, *dtype_descr;  /* TensorBase getset descriptors */
    PyObject *device;       /* torch.device("cuda", index) */
    PyObject *strided;      /* torch.strided */
    PyObject *dtypes;       /* tuple, in the order of eval/crossing/_capture.py SUPPORTED_DTYPES */
    PyObject *dtype_names;  /* tuple of str, same order */
} Loop;

static PyObject *descr_get(PyObject *descr, PyObject *obj) {
    return Py_TYPE(descr)->tp_descr_get(descr, obj, (PyObject *)Py_TYPE(obj));
}

/* Append a readable violation once per block. Returns -1 on a Python error. */
static int add_violation(PyObject *violations, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (!msg) return -1;
    int seen = PySequence_Contains(violations, msg);
    int rc = seen < 0 ? -1 : (seen ? 0 : PyList_Append(violations, msg));
    Py_DECREF(msg);
    return rc;
}

static int grow_events(Loop *self, int n) {
    if (n <= self->n_events) return 0;
    CUevent **arrays[] = {&self->starts, &self->ends, &self->pres, &self->posts};
    for (int a = 0; a < 4; ++a) {
        CUevent *grown = PyMem_Realloc(*arrays[a], sizeof(CUevent) * n);
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        *arrays[a] = grown;
    }
    for (; self->n_events < n; ++self->n_events) {
        for (int a = 0; a < 4; ++a) {
            CUresult r = cu.EventCreate(&(*arrays[a])[self->n_events], CU_EVENT_DEFAULT);
            if (r != 0) {
                for (int b = 0; b < a; ++b) cu.EventDestroy((*arrays[b])[self->n_events]);
                cu_error("cuEventCreate", r);
                return -1;
            }
        }
    }
    return 0;
}

/* 1: the thread's CUDA context and torch's current stream are the ones saved at init; 0: a
 * violation was recorded; -1: error. */
static int check_stream(Loop *self, PyObject *violations, const char *when) {
    CUcontext ctx = NULL;
    CU(CtxGetCurrent, (&ctx));
    if (ctx != self->ctx)
        return add_violation(violations, "the current CUDA context changed (found %s)", when) < 0 ? -1 : 0;
    PyObject *raw = PyObject_CallFunction(self->get_stream, "i", self->device_index);
    if (!raw) return -1;
    unsigned long long value = PyLong_AsUnsignedLongLongMask(raw);
    Py_DECREF(raw);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if ((CUstream)(uintptr_t)value != self->stream)
        return add_violation(violations, "torch's current CUDA stream changed to %llu (found %s)", value, when) < 0
                   ? -1 : 0;
    return 1;
fail:
    return -1;
}

/* Record a persisting-L2 limit or access-policy window left set (unless violations is NULL),
 * then clear both. 0 / -1 on error.
 *
 * cuCtxSetLimit waits for all of the context's work (measured on the H100: 101 ms behind 100 ms of
 * queued GPU work), so it is called only on a limit found set. Called every repetition, it drained
 * the queue each time, and the host's time between repetitions became idle GPU time that differed
 * from process to process: the parent's wall bound then could not tell it from hidden work. */
static int check_reset_l2(Loop *self, PyObject *violations) {
    if (self->checks_limit) {
        size_t limit = 0;
        CU(CtxGetLimit, (&limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE));
        if (limit != 0 && violations && add_violation(violations, "persisting L2 cache limit found set (%zu bytes)", limit) < 0)
            return -1;
        CU(CtxResetPersistingL2Cache, ());
        if (limit != 0) CU(CtxSetLimit, (CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0));
    }
    if (self->checks_window) {
        CUstreamAttrValue value;
        memset(&value, 0, sizeof value);
        CU(StreamGetAttribute, (self->stream, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value));
        if (violations && (value.accessPolicyWindow.base_ptr != NULL || value.accessPolicyWindow.num_bytes != 0)) {
            if (add_violation(violations, "persisting L2 access-policy window found set on the timed stream "
                              "(%zu bytes)", value.accessPolicyWindow.num_bytes) < 0)
                return -1;
        }
        memset(&value, 0, sizeof value);
        CU(StreamSetAttribute, (self->stream, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value));
    }
    return 0;
fail:
    return -1;
}

/* Collect the tensor leaves of `obj` (new references into leaves[]). 0 ok, 1 violation, -1 error. */
static int flatten(Loop *self, PyObject *obj, int depth, PyObject **leaves, int *count, PyObject *violations) {
    if (Py_TYPE(obj) == (PyTypeObject *)self->tensor_type) {
        if (*count >= KH_MAX_LEAVES)
            return add_violation(violations, "the output has more than %d tensors", KH_MAX_LEAVES) < 0 ? -1 : 1;
        Py_INCREF(obj);
        leaves[(*count)++] = obj;
        return 0;
    }
    int container = PyTuple_CheckExact(obj) || PyList_CheckExact(obj) || PyDict_CheckExact(obj);
    if (!container)
        return add_violation(violations, "the output holds a %s, not an exact torch.Tensor (or tuple, list, dict "
                             "of them)", Py_TYPE(obj)->tp_name) < 0 ? -1 : 1;
    if (depth >= KH_MAX_DEPTH)
        return add_violation(violations, "the output nests containers deeper than %d", KH_MAX_DEPTH) < 0 ? -1 : 1;
    if (PyDict_CheckExact(obj)) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(obj, &pos, &key, &value)) {
            int rc = flatten(self, value, depth + 1, leaves, count, violations);
            if (rc) return rc;
        }
        return 0;
    }
    PyObject *fast = PySequence_Fast(obj, "output container");
    if (!fast) return -1;
    int rc = 0;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(fast) && rc == 0; ++k)
        rc = flatten(self, PySequence_Fast_GET_ITEM(fast, k), depth + 1, leaves, count, violations);
    Py_DECREF(fast);
    return rc;
}

/* Read a tuple of ints (torch.Size or stride tuple) into out[]. */
static int read_ints(PyObject *seq, long long *out, Py_ssize_t n) {
    for (Py_ssize_t d = 0; d < n; ++d) {
        out[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, d));
        if (out[d] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

/* Whether two elements may share memory: `eval.crossing._capture.self_overlap`, the same rule (dims over 1 by stride, each
 * stride past every offset the smaller ones reach). */
static int self_overlap(const long long *sizes, const long long *strides, Py_ssize_t ndim) {
    long long size[KH_MAX_DIMS], stride[KH_MAX_DIMS];
    int n = 0;
    for (Py_ssize_t d = 0; d < ndim; ++d)
        if (sizes[d] == 0) return 0;  /* no elements, none shared */
    for (Py_ssize_t d = 0; d < ndim; ++d) {
        if (sizes[d] <= 1) continue;
        long long st = strides[d] < 0 ? -strides[d] : strides[d];
        int k = n++;
        while (k > 0 && stride[k - 1] > st) {  /* insertion sort by stride */
            stride[k] = stride[k - 1];
            size[k] = size[k - 1];
            --k;
        }
        stride[k] = st;
        size[k] = sizes[d];
    }
    long long reach = 0;
    for (int k = 0; k < n; ++k) {
        if (stride[k] <= reach) return 1;
        reach += stride[k] * (size[k] - 1);
    }
    return 0;
}

/* Check one tensor leaf and describe it for the kernels. 0 ok, 1 violation, -1 error. */
static int describe(Loop *self, PyObject *t, int index, kh_leaf *leaf, kh_sig *sig, PyObject *violations) {
    int rc = -1;
    PyObject *device = NULL, *layout = NULL, *dtype = NULL, *size = NULL, *stride = NULL, *ptr = NULL;
    if (!(device = descr_get(self->device_descr, t))) goto done;
    int same = PyObject_RichCompareBool(device, self->device, Py_EQ);
    if (same < 0) goto done;
    if (!same) {
        rc = add_violation(violations, "output tensor %d is on %R, not on the timed device %R", index, device,
                           self->device) < 0 ? -1 : 1;
        goto done;
    }
    if (!(layout = descr_get(self->layout_descr, t))) goto done;
    if (layout != self->strided) {
        rc = add_violation(violations, "output tensor %d has layout %R, not torch.strided", index, layout) < 0 ? -1 : 1;
        goto done;
    }
    if (!(dtype = descr_get(self->dtype_descr, t))) goto done;
    sig->dtype = -1;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(self->dtypes); ++k)
        if (PyTuple_GET_ITEM(self->dtypes, k) == dtype) sig->dtype = (int)k;
    if (sig->dtype < 0) {
        rc = add_violation(violations, "output tensor %d has unsupported dtype %R", index, dtype) < 0 ? -1 : 1;
        goto done;
    }
    if (!(size = PyObject_CallOneArg(self->size, t)) || !(stride = PyObject_CallOneArg(self->stride, t))) goto done;
    if (!PyTuple_Check(size) || !PyTuple_Check(stride) || PyTuple_GET_SIZE(size) != PyTuple_GET_SIZE(stride)) {
        PyErr_SetString(PyExc_RuntimeError, "Tensor.size()/stride() did not return tuples of one length");
        goto done;
    }
    Py_ssize_t ndim = PyTuple_GET_SIZE(size);
    if (ndim > KH_MAX_DIMS) {
        rc = add_violation(violations, "output tensor %d has %zd dimensions (at most %d)", index, ndim,
                           KH_MAX_DIMS) < 0 ? -1 : 1;
        goto done;
    }
    long long sizes[KH_MAX_DIMS], strides[KH_MAX_DIMS];
    if (read_ints(size, sizes, ndim) < 0 || read_ints(stride, strides, ndim) < 0) goto done;
    if (self_overlap(sizes, strides, ndim)) {
        rc = add_violation(violations, "output tensor %d overlaps itself (a stride-0 or overlapping view)",
                           index) < 0 ? -1 : 1;
        goto done;
    }
    if (!(ptr = PyObject_CallOneArg(self->data_ptr, t))) goto done;
    leaf->data = PyLong_AsUnsignedLongLong(ptr);
    if (PyErr_Occurred()) goto done;

    sig->ndim = (int)ndim;
    memset(sig->sizes, 0, sizeof sig->sizes);
    memcpy(sig->sizes, sizes, sizeof(long long) * ndim);
    /* Merge dims the kernels can walk as one (drop size-1 dims; d, d+1 when dense), so a
     * contiguous tensor is one dim and needs no index division. */
    long long n = 1;
    int out_dims = 0;
    for (Py_ssize_t d = 0; d < ndim; ++d) {
        n *= sizes[d];
        if (sizes[d] == 1) continue;
        if (out_dims > 0 && leaf->strides[out_dims - 1] == strides[d] * sizes[d]) {
            leaf->sizes[out_dims - 1] *= sizes[d];
            leaf->strides[out_dims - 1] = strides[d];
        } else {
            leaf->sizes[out_dims] = sizes[d];
            leaf->strides[out_dims] = strides[d];
            ++out_dims;
        }
    }
    leaf->ndim = out_dims;
    leaf->n = n;
    leaf->dtype = sig->dtype;
    leaf->samples = self->samples;
    leaf->pad = 0;
    rc = 0;
done:
    Py_XDECREF(device);
    Py_XDECREF(layout);
    Py_XDECREF(dtype);
    Py_XDECREF(size);
    Py_XDECREF(stride);
    Py_XDECREF(ptr);
    return rc;
}

/* The launch of `fn` that fills every SM of the current context's device (see kh_geometry): blocks of `threads`
 * (0: the most threads that divide an SM's thread slots), as many as all SMs hold at once (at most `most`, 0: no
 * limit). It fills an SM when the blocks it holds take all its thread slots or all its registers. */
static int fill_geometry(CUfunction fn, int threads, unsigned int most, kh_geometry *g) {
    static const int sizes[] = {1024, 768, 512, 384, 256, 128};
    CUdevice dev;
    int sms = 0, per_sm = 0, per_block = 0, blocks_per_sm = 0, regs_per_sm = 0, regs = 0, resident = 0;
    CU(CtxGetDevice, (&dev));
    CU(DeviceGetAttribute, (&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CU(DeviceGetAttribute, (&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev));
    CU(DeviceGetAttribute, (&per_block, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev));
    CU(DeviceGetAttribute, (&blocks_per_sm, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, dev));
    CU(DeviceGetAttribute, (&regs_per_sm, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, dev));
    CU(FuncGetAttribute, (&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn));
    if (threads <= 0) {
        threads = 256;
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
            if (sizes[k] <= per_block && per_sm % sizes[k] == 0 && per_sm / sizes[k] <= blocks_per_sm) {
                threads = sizes[k];
                break;
            }
        }
    }
    CU(OccupancyMaxActiveBlocksPerMultiprocessor, (&resident, fn, threads, 0));
    if (resident < 1) resident = 1;
    if (sms < 1) sms = 1;
    unsigned int all = (unsigned int)sms * (unsigned int)resident;
    g->threads = (unsigned int)threads;
    g->blocks = most && all > most ? most : all;
    /* registers are allocated per warp in units of 256 */
    long long warp_regs = ((long long)regs * 32 + 255) / 256 * 256;
    long long used = (long long)resident * ((threads + 31) / 32) * warp_regs;
    g->fills = g->blocks == all && (resident * threads == per_sm || used + 256 > regs_per_sm);
    return 0;
fail:
    return -1;
}

/* Launch one of the loop's own kernels so that it fills every SM. */
static int launch_filling(Loop *self, CUfunction fn, const kh_geometry *g, void **args) {
    CU(LaunchKernel, (fn, g->blocks, 1, 1, g->threads, 1, 1, 0, self->stream, args, NULL));
    return 0;
fail:
    return -1;
}

static int launch_capture(Loop *self, kh_leaf *leaf, long long rep, int index, CUdeviceptr row) {
    unsigned long long rl = splitmix64((unsigned long long)rep * KH_GOLDEN + (unsigned long long)index * KH_MIX1);
    leaf->key_rl = self->key ^ rl;
    leaf->sample_seed = self->key ^ KH_SAMPLE_SALT ^ rl;
    CUdeviceptr extra = row + sizeof(double) * (size_t)self->samples;
    int blocks = KH_BLOCKS;
    void *partial_args[] = {leaf, &self->partials, &row};
    void *final_args[] = {&self->partials, &blocks, &extra, &leaf->n};
    if (launch_filling(self, self->partial, &self->capture_at, partial_args) < 0) goto fail;
    CU(LaunchKernel, (self->final, 1, 1, 1, KH_THREADS, 1, 1, 0, self->stream, final_args, NULL));
    return 0;
fail:
    return -1;
}

/* Make room for reps x leaves capture rows; only called while no capture kernel is pending. */
static int reserve_captures(Loop *self, size_t bytes) {
    if (bytes <= self->captures_bytes) return 0;
    if (self->captures) {
        CU(MemFree, (self->captures));
        self->captures = 0;
        self->captures_bytes = 0;
    }
    CU(MemAlloc, (&self->captures, bytes));
    self->captures_bytes = bytes;
    return 0;
fail:
    return -1;
}

static PyObject *leaves_list(Loop *self, kh_sig *sigs, int count) {
    PyObject *list = PyList_New(count);
    if (!list) return NULL;
    for (int l = 0; l < count; ++l) {
        PyObject *shape = PyList_New(sigs[l].ndim);
        if (!shape) goto fail;
        for (int d = 0; d < sigs[l].ndim; ++d) {
            PyObject *v = PyLong_FromLongLong(sigs[l].sizes[d]);
            if (!v) { Py_DECREF(shape); goto fail; }
            PyList_SET_ITEM(shape, d, v);
        }
        PyObject *item = PyTuple_Pack(2, PyTuple_GET_ITEM(self->dtype_names, sigs[l].dtype), shape);
        Py_DECREF(shape);
        if (!item) goto fail;
        PyList_SET_ITEM(list, l, item);
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

PyDoc_STRVAR(run_doc,
"run(forward, args, reps, first_rep, flush_bytes, lead, sync_each, capture, copies) -> (times_ms, captures, leaves, violations,\n"
"outside_ms)\n\n"
"Time `reps` calls of forward(*args) between CUDA events (see eval/worker/native_loop.py). flush_bytes: bytes\n"
"written before each call to evict the L2 (-1: the default size, 0: no flush); lead: queue the spin kernel\n"
"before each start event. copies: None, or\n"
"bytes of (dst, src, nbytes) uint64 triples, the same number per repetition: device copies enqueued before\n"
"each call (its inputs), so no Python runs between one call's end and the next one's start. captures is a\n"
"bytearray of float64 [reps_done, leaves, samples + 16] (None unless capture); a violation that makes the\n"
"output meaningless ends the block early, and only the repetitions completed before it are returned.\n"
"outside_ms: the GPU time of the completed repetitions' own work, in events around it: (lead-in: the input\n"
"copies, flush and lead before each start event; capture: from each end event to the capture's last kernel;\n"
"between: from one repetition's capture to the next one's copies, the GPU waiting for the host).");

static PyObject *Loop_run(Loop *self, PyObject *args) {
    PyObject *forward, *fargs, *copies_obj;
    int reps, lead, sync_each, capture;
    long long first_rep;
    Py_ssize_t flush_bytes;
    if (!PyArg_ParseTuple(args, "OO!iLnpppO", &forward, &PyTuple_Type, &fargs, &reps, &first_rep, &flush_bytes, &lead,
                          &sync_each, &capture, &copies_obj))
        return NULL;
    const size_t flush_words = flush_bytes < 0 ? self->flush_words : (size_t)flush_bytes / 4;
    if (reps < 1) {
        PyErr_SetString(PyExc_ValueError, "reps must be at least 1");
        return NULL;
    }
    const unsigned long long *copies = NULL;
    Py_ssize_t per_rep = 0;
    if (copies_obj != Py_None) {
        if (!PyBytes_Check(copies_obj)) {
            PyErr_SetString(PyExc_TypeError, "copies must be bytes or None");
            return NULL;
        }
        Py_ssize_t size = PyBytes_GET_SIZE(copies_obj);
        Py_ssize_t triple = 3 * (Py_ssize_t)sizeof(unsigned long long);
        if (size % ((Py_ssize_t)reps * triple) != 0) {
            PyErr_SetString(PyExc_ValueError, "copies must hold the same number of (dst, src, nbytes) triples per repetition");
            return NULL;
        }
        per_rep = size / ((Py_ssize_t)reps * triple);
        copies = (const unsigned long long *)PyBytes_AS_STRING(copies_obj);
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the timed loop is already running (no re-entry)");
        return NULL;
    }
    self->busy = 1;

    PyObject *times = NULL, *violations = NULL, *leaves = NULL, *captures = NULL, *outside = NULL, *out = NULL,
             *result = NULL;
    PyObject *items[KH_MAX_LEAVES];
    int n_items = 0, n_leaves = 0, done = 0;
    kh_sig sigs[KH_MAX_LEAVES];
    const size_t row = sizeof(double) * ((size_t)self->samples + KH_CAPTURE_EXTRA);

    if (!(violations = PyList_New(0))) goto fail;
    if (grow_events(self, reps) < 0) goto fail;
    CU(StreamSynchronize, (self->stream));  /* earlier work is done: the buffers are free */
    if (flush_words > self->flush_cap) {
        CU(MemFree, (self->flush_buf));
        self->flush_buf = 0;
        self->flush_cap = 0;
        CU(MemAlloc, (&self->flush_buf, flush_words * 4));
        self->flush_cap = flush_words;
    }

    for (int i = 0; i < reps; ++i) {
        long long rep = first_rep + i;
        CU(EventRecord, (self->pres[i], self->stream));
        for (Py_ssize_t c = 0; c < per_rep; ++c) {
            const unsigned long long *t = copies + 3 * ((Py_ssize_t)i * per_rep + c);
            if (t[2]) {
                void *copy_args[] = {(void *)&t[0], (void *)&t[1], (void *)&t[2]};
                if (launch_filling(self, self->copy, &self->copy_at, copy_args) < 0) goto fail;
            }
        }
        int ok = check_stream(self, violations, "before a timed call");
        if (ok < 0) goto fail;
        if (!ok) break;
        if (check_reset_l2(self, violations) < 0) goto fail;
        if (flush_words) {
            unsigned long long n_words = flush_words;
            unsigned int zero = 0;
            void *fill_args[] = {&self->flush_buf, &n_words, &zero};
            if (launch_filling(self, self->fill, &self->fill_at, fill_args) < 0) goto fail;
        }
        if (lead && self->spin_ns) {
            void *spin_args[] = {&self->spin_ns};
            if (launch_filling(self, self->spin, &self->spin_at, spin_args) < 0) goto fail;
        }
        CU(EventRecord, (self->starts[i], self->stream));
        out = PyObject_Call(forward, fargs, NULL);
        if (!out) goto fail;
        CU(EventRecord, (self->ends[i], self->stream));
        if (sync_each) CU(StreamSynchronize, (self->stream));

        if ((ok = check_stream(self, violations, "after a timed call")) < 0) goto fail;
        if (!ok) break;
        int rc = flatten(self, out, 0, items, &n_items, violations);
        if (rc < 0) goto fail;
        if (rc) break;
        if (n_items == 0) {
            if (add_violation(violations, "the output holds no tensor") < 0) goto fail;
            break;
        }
        if (i > 0 && n_items != n_leaves) {
            if (add_violation(violations, "the output's tensors changed between repetitions (%d, then %d at "
                              "repetition %lld)", n_leaves, n_items, rep) < 0) goto fail;
            break;
        }
        kh_leaf descs[KH_MAX_LEAVES];
        for (int l = 0; l < n_items && rc == 0; ++l) {
            kh_sig sig;
            rc = describe(self, items[l], l, &descs[l], &sig, violations);
            if (rc == 0 && i == 0) {
                sigs[l] = sig;
            } else if (rc == 0 && (sig.dtype != sigs[l].dtype || sig.ndim != sigs[l].ndim ||
                                   memcmp(sig.sizes, sigs[l].sizes, sizeof sig.sizes) != 0)) {
                rc = add_violation(violations, "output tensor %d changed dtype or shape at repetition %lld", l, rep) < 0
                         ? -1 : 1;
            }
        }
        if (rc < 0) goto fail;
        if (rc) break;
        if (i == 0) {
            n_leaves = n_items;
            if (capture && reserve_captures(self, row * (size_t)reps * (size_t)n_leaves) < 0) goto fail;
        }
        if (capture) {
            for (int l = 0; l < n_leaves; ++l) {
                CUdeviceptr at = self->captures + row * ((size_t)i * n_leaves + l);
                if (launch_capture(self, &descs[l], rep, l, at) < 0) goto fail;
            }
        }
        CU(EventRecord, (self->posts[i], self->stream));
        for (; n_items > 0; --n_items) Py_DECREF(items[n_items - 1]);
        Py_CLEAR(out);
        ++done;
    }
    for (; n_items > 0; --n_items) Py_DECREF(items[n_items - 1]);
    Py_CLEAR(out);
    /* A limit or window set by the last call is found too. */
    if (check_reset_l2(self, violations) < 0) goto fail;
    CU(StreamSynchronize, (self->stream));

    if (!(times = PyList_New(done))) goto fail;
    double lead_in = 0.0, captured = 0.0, between = 0.0;
    for (int i = 0; i < done; ++i) {
        float ms = 0.0f, part = 0.0f;
        CU(EventElapsedTime, (&ms, self->starts[i], self->ends[i]));
        PyObject *v = PyFloat_FromDouble(ms);
        if (!v) goto fail;
        PyList_SET_ITEM(times, i, v);
        CU(EventElapsedTime, (&part, self->pres[i], self->starts[i]));
        lead_in += part;
        CU(EventElapsedTime, (&part, self->ends[i], self->posts[i]));
        captured += part;
        if (i > 0) {
            CU(EventElapsedTime, (&part, self->posts[i - 1], self->pres[i]));
            between += part;
        }
    }
    if (!(leaves = leaves_list(self, sigs, done ? n_leaves : 0))) goto fail;
    if (capture) {
        size_t bytes = row * (size_t)done * (size_t)n_leaves;
        if (!(captures = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)bytes))) goto fail;
        if (bytes) CU(MemcpyDtoH, (PyByteArray_AS_STRING(captures), self->captures, bytes));
    } else {
        captures = Py_NewRef(Py_None);
    }
    if (!(outside = Py_BuildValue("(ddd)", lead_in, captured, between))) goto fail;
    result = PyTuple_Pack(5, times, captures, leaves, violations, outside);
fail:
    for (; n_items > 0; --n_items) Py_DECREF(items[n_items - 1]);
    Py_XDECREF(out);
    Py_XDECREF(times);
    Py_XDECREF(violations);
    Py_XDECREF(leaves);
    Py_XDECREF(captures);
    Py_XDECREF(outside);
    self->busy = 0;
    return result;
}

PyDoc_STRVAR(set_lead_doc,
"set_lead(lead_us) -> measured_us\n\nSet the GPU lead queued before each start event (a spin on the global timer, so it\n"
"lasts the same in every process whatever the SM clock), and measure one spin of it with events.");

static PyObject *Loop_set_lead(Loop *self, PyObject *args) {
    double lead_us;
    if (!PyArg_ParseTuple(args, "d", &lead_us)) return NULL;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the timed loop is running");
        return NULL;
    }
    if (lead_us < 0.0 || lead_us > 1e6) {
        PyErr_SetString(PyExc_ValueError, "lead_us must be between 0 and 1e6");
        return NULL;
    }
    if (grow_events(self, 1) < 0) return NULL;
    unsigned long long ns = (unsigned long long)(lead_us * 1000.0);
    void *spin_args[] = {&ns};
    float ms = 0.0f;
    if (launch_filling(self, self->spin, &self->spin_at, spin_args) < 0) goto fail;  /* load the module */
    CU(EventRecord, (self->starts[0], self->stream));
    if (launch_filling(self, self->spin, &self->spin_at, spin_args) < 0) goto fail;
    CU(EventRecord, (self->ends[0], self->stream));
    CU(StreamSynchronize, (self->stream));
    CU(EventElapsedTime, (&ms, self->starts[0], self->ends[0]));
    if (ns && ms <= 0.0f) {
        PyErr_SetString(PyExc_RuntimeError, "the GPU lead's spin measured no time (no global timer?)");
        return NULL;
    }
    self->spin_ns = ns;
    self->lead_measured_us = ms * 1000.0;
    return PyFloat_FromDouble(self->lead_measured_us);
fail:
    return NULL;
}

static PyObject *Loop_info(Loop *self, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("{s:d,s:d,s:n,s:i,s:i,s:i,s:i,s:I,s:I,s:I}", "lead_us", self->spin_ns / 1000.0,
                         "lead_measured_us", self->lead_measured_us, "flush_bytes", (Py_ssize_t)(self->flush_words * 4),
                         "samples", self->samples, "checks_l2_limit", self->checks_limit, "checks_window",
                         self->checks_window, "fills_sms", self->spin_at.fills && self->fill_at.fills &&
                         self->copy_at.fills && self->capture_at.fills, "fill_blocks", self->spin_at.blocks,
                         "fill_threads", self->spin_at.threads, "capture_blocks", self->capture_at.blocks);
}

/* Probe whether a driver query works here (e.g. the access-policy window of the legacy default stream). */
static int probe_limit(void) {
    size_t limit = 0;
    return cu.CtxGetLimit(&limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE) == 0;
}

static int probe_window(CUstream stream) {
    CUstreamAttrValue value;
    memset(&value, 0, sizeof value);
    return cu.StreamGetAttribute(stream, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value) == 0;
}

static PyObject *Loop_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"cubin", "key", "samples", "flush_bytes", "device_index", "device", "get_stream",
                             "tensor_type", "data_ptr", "size", "stride", "device_descr", "layout_descr",
                             "dtype_descr", "strided", "dtypes", "dtype_names", NULL};
    Py_buffer cubin;
    PyObject *key;
    int samples, device_index;
    Py_ssize_t flush_bytes;
    PyObject *device, *get_stream, *tensor_type, *data_ptr, *size, *stride, *device_descr, *layout_descr,
        *dtype_descr, *strided, *dtypes, *dtype_names;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*OiniOOOOOOOOOOO!O!", kwlist, &cubin, &key, &samples,
                                     &flush_bytes, &device_index, &device, &get_stream, &tensor_type, &data_ptr,
                                     &size, &stride, &device_descr, &layout_descr, &dtype_descr, &strided,
                                     &PyTuple_Type, &dtypes, &PyTuple_Type, &dtype_names))
        return NULL;
    Loop *self = NULL;
    if (samples < 1 || flush_bytes < 4 || !PyType_Check(tensor_type) || PyTuple_GET_SIZE(dtypes) != PyTuple_GET_SIZE(dtype_names)) {
        PyErr_SetString(PyExc_ValueError, "Loop: bad samples, flush_bytes, tensor_type or dtypes");
        goto fail;
    }
    PyObject *descrs[] = {device_descr, layout_descr, dtype_descr};
    for (int k = 0; k < 3; ++k) {
        if (Py_TYPE(descrs[k])->tp_descr_get == NULL) {
            PyErr_SetString(PyExc_TypeError, "Loop: device/layout/dtype descriptors must be descriptors");
            goto fail;
        }
    }
    if (load_driver() < 0) goto fail;
    if (!(self = (Loop *)type->tp_alloc(type, 0))) goto fail;
    self->device_index = device_index;
    self->samples = samples;
    self->key = PyLong_AsUnsignedLongLongMask(key);
    if (PyErr_Occurred()) goto fail;
#define KEEP(field) (self->field = Py_NewRef(field))
    KEEP(device); KEEP(get_stream); KEEP(tensor_type); KEEP(data_ptr); KEEP(size); KEEP(stride);
    KEEP(device_descr); KEEP(layout_descr); KEEP(dtype_descr); KEEP(strided); KEEP(dtypes); KEEP(dtype_names);
#undef KEEP
    CU(CtxGetCurrent, (&self->ctx));
    if (self->ctx == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no current CUDA context: initialise torch on the device first");
        goto fail;
    }
    PyObject *raw = PyObject_CallFunction(get_stream, "i", device_index);
    if (!raw) goto fail;
    self->stream = (CUstream)(uintptr_t)PyLong_AsUnsignedLongLongMask(raw);
    Py_DECREF(raw);
    if (PyErr_Occurred()) goto fail;

    CUmodule module;
    CU(ModuleLoadData, (&module, cubin.buf));
    CU(ModuleGetFunction, (&self->spin, module, "kh_spin"));
    CU(ModuleGetFunction, (&self->fill, module, "kh_fill"));
    CU(ModuleGetFunction, (&self->copy, module, "kh_copy"));
    CU(ModuleGetFunction, (&self->partial, module, "kh_capture_partial"));
    CU(ModuleGetFunction, (&self->final, module, "kh_capture_final"));
    if (fill_geometry(self->spin, 0, 0, &self->spin_at) < 0 || fill_geometry(self->fill, 0, 0, &self->fill_at) < 0 ||
        fill_geometry(self->copy, 0, 0, &self->copy_at) < 0 ||
        fill_geometry(self->partial, KH_THREADS, KH_BLOCKS, &self->capture_at) < 0)
        goto fail;
    self->flush_words = self->flush_cap = (size_t)flush_bytes / 4;
    CU(MemAlloc, (&self->flush_buf, self->flush_words * 4));
    CU(MemAlloc, (&self->partials, sizeof(double) * KH_BLOCKS * KH_QUANTITIES));
    self->checks_limit = probe_limit();
    self->checks_window = probe_window(self->stream);
    /* The driver's own default may set a persisting-L2 limit (9.4 MB seen on an H100): clear it
     * here, so a limit found later was set by code that ran after this. */
    if (check_reset_l2(self, NULL) < 0) goto fail;
    PyBuffer_Release(&cubin);
    return (PyObject *)self;
fail:
    PyBuffer_Release(&cubin);
    Py_XDECREF(self);
    return NULL;
}

static void Loop_dealloc(Loop *self) {
    /* Errors are ignored here: at interpreter exit the driver may already be shut down. */
    if (cu_loaded) {
        for (int k = 0; k < self->n_events; ++k) {
            cu.EventDestroy(self->starts[k]);
            cu.EventDestroy(self->ends[k]);
            cu.EventDestroy(self->pres[k]);
            cu.EventDestroy(self->posts[k]);
        }
        if (self->flush_buf) cu.MemFree(self->flush_buf);
        if (self->partials) cu.MemFree(self->partials);
        if (self->captures) cu.MemFree(self->captures);
    }
    PyMem_Free(self->starts);
    PyMem_Free(self->ends);
    Py_XDECREF(self->get_stream);
    Py_XDECREF(self->tensor_type);
    Py_XDECREF(self->data_ptr);
    Py_XDECREF(self->size);
    Py_XDECREF(self->stride);
    Py_XDECREF(self->device_descr);
    Py_XDECREF(self->layout_descr);
    Py_XDECREF(self->dtype_descr);
    Py_XDECREF(self->device);
    Py_XDECREF(self->strided);
    Py_XDECREF(self->dtypes);
    Py_XDECREF(self->dtype_names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Loop_rekey(Loop *self, PyObject *arg) {
    unsigned long long key = PyLong_AsUnsignedLongLongMask(arg);
    if (PyErr_Occurred()) return NULL;
    self->key = key;
    Py_RETURN_NONE;
}

static PyMethodDef Loop_methods[] = {
    {"run", (PyCFunction)Loop_run, METH_VARARGS, run_doc},
    {"rekey", (PyCFunction)Loop_rekey, METH_O,
     "Set the capture key (the trusted reference process takes each evaluation's; a candidate's is set at start)."},
    {"set_lead", (PyCFunction)Loop_set_lead, METH_VARARGS, set_lead_doc},
    {"info", (PyCFunction)Loop_info, METH_NOARGS, "Lead, flush size and which L2 checks this device allows."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LoopType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kh_timed_loop.Loop",
    .tp_basicsize = sizeof(Loop),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The timed repetitions of one device; all state in C (see timed_loop.c).",
    .tp_new = Loop_new,
    .tp_dealloc = (destructor)Loop_dealloc,
    .tp_methods = Loop_methods,
};

static int module_exec(PyObject *m) {
    if (PyType_Ready(&LoopType) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Loop", (PyObject *)&LoopType) < 0) return -1;
    return PyModule_AddIntConstant(m, "CAPTURE_EXTRA", KH_CAPTURE_EXTRA);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

/* Multi-phase initialisation: loading it from a path does not enter it in sys.modules. */
static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, .m_name = "kh_timed_loop",
    .m_doc = "Timed repetitions in C (see eval/worker/native_loop.py).", .m_size = 0, .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit_kh_timed_loop(void) { return PyModuleDef_Init(&module_def); }
