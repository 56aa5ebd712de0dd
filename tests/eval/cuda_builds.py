"""The CUDA candidate that two test files build without a GPU (compile-only), built once for both.

A build costs a minute of CPU. The compile-only tests (tests/eval/test_cuda_cpu) need a candidate that builds,
whose module code tries to write outside its build folder (`PLANT`) and whose kernel is C++20 (`CXX20`); the
own-kernel tests (tests/eval/test_own_kernels) need one whose build defines a kernel of every name form, a decoy
named like cuBLAS's kernel, and a kernel name that sits in a string only (`FORMS`, `NOT_BUILT`). `BUILT` is both,
and tests/conftest.py's `build_evaluator` (one evaluator session for the two files, which `SHARED_GROUPS` runs on
one process) builds it once.
"""

from __future__ import annotations

from harness.corpus import candidates

# nvcc builds on a loaded 2-core machine can take minutes: a generous bound, not the default 180 s, so that only a
# build that hangs fails here (three builds failed under load at 180 s, and passed alone)
BUILD_LIMIT_S = 1200.0
# module code that tries to write beside its own build folder and records what happened, in its own build folder
PLANT = ("import os as _os, pathlib as _pl\n"
         "_own = _pl.Path(_os.environ['TORCH_EXTENSIONS_DIR'])\n"
         "try:\n"
         "    (_own.parent / 'planted').write_text('into the evaluator build folders')\n"
         "    _outcome = 'written'\n"
         "except OSError as _exc:\n"
         "    _outcome = _exc.strerror\n"
         "(_own / 'outcome').write_text(_outcome)\n")
CXX20 = 'static_assert(requires { n + 1; }, "a requires-expression: C++20");'
FORMS = r'''
template <int U> __global__ void k_tmpl(float* x) { x[0] = U; }
namespace kh { namespace inner { __global__ void k_ns(float* x) { x[0] = 1.f; } } }
namespace { __global__ void k_anon(float* x) { x[0] = 2.f; } }
extern "C" __global__ void k_c(float* x) { x[0] = 3.f; }
__global__ __launch_bounds__(256) void k_lk(float* x) { x[0] = 4.f; }
__global__ void gemv2T_kernel_val(float* x) { x[0] = 5.f; }  // never launched, named like cuBLAS's kernel
void kh_forms(float* x) {
    k_tmpl<1><<<1, 1>>>(x); kh::inner::k_ns<<<1, 1>>>(x); k_anon<<<1, 1>>>(x); k_c<<<1, 1>>>(x);
    void* args[] = {&x};
    cudaLaunchKernel((const void*)k_lk, dim3(1), dim3(1), args, 0, 0);
}
'''
NOT_BUILT = 'text_only = "__global__ void text_only_kernel(float* x) {}"\n'
_HOST = "torch::Tensor add_relu_scale(torch::Tensor x, torch::Tensor y, double scale) {"
BUILT = NOT_BUILT + PLANT + candidates.edit(candidates.cuda_candidate("cpuok", 256, CXX20), _HOST, FORMS + _HOST)
