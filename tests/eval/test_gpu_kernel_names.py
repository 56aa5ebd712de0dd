"""On a GPU (`pytest -m gpu`): the own-kernel check recognises a CUDA kernel in every
form its name can take (template, namespace, anonymous namespace, `extern "C"`, launched through
`cudaLaunchKernel` or a function pointer) and still catches a decoy of each form: a kernel that is built
but never runs while PyTorch does the work. Decoys named like the library kernel doing the work (CUDA
or Triton) are caught too."""

from __future__ import annotations

import pytest
import torch

from eval import Job, Status
from harness.corpus import candidates

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

_BODY = """(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, long n, float s) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i] + y[i]; out[i] = (v > 0.f ? v : 0.f) * s; }
}"""

# form -> (kernel definition, launch statement); the launch sees x, y, out (float*), n (long), s (float)
FORMS = {
    "template": (f"template <int UNROLL> __global__ void k_tmpl{_BODY}",
                 "k_tmpl<1><<<blocks, 256>>>(xp, yp, op, n, s);"),
    "namespace": (f"namespace kh {{ namespace inner {{ __global__ void k_ns{_BODY} }} }}",
                  "kh::inner::k_ns<<<blocks, 256>>>(xp, yp, op, n, s);"),
    "anonymous_namespace": (f"namespace {{ __global__ void k_anon{_BODY} }}",
                            "k_anon<<<blocks, 256>>>(xp, yp, op, n, s);"),
    "extern_c": (f'extern "C" __global__ void k_c{_BODY}',
                 "k_c<<<blocks, 256>>>(xp, yp, op, n, s);"),
    "cudaLaunchKernel": (f"__global__ void k_lk{_BODY}",
                         "void* args[] = {&xp, &yp, &op, &n, &s};\n"
                         "    cudaLaunchKernel((const void*)k_lk, dim3(blocks), dim3(256), args, 0, 0);"),
    "function_pointer": (f"__global__ void k_fp{_BODY}",
                         "void (*fn)(const float*, const float*, float*, long, float) = k_fp;\n"
                         "    fn<<<blocks, 256>>>(xp, yp, op, n, s);"),
    # not a name form but the same class: a decoy named like PyTorch's own elementwise kernel
    "library_name": (f"__global__ void vectorized_elementwise_kernel{_BODY}",
                     "vectorized_elementwise_kernel<<<blocks, 256>>>(xp, yp, op, n, s);"),
}

_CANDIDATE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
{definition}
torch::Tensor add_relu_scale(torch::Tensor x, torch::Tensor y, double scale) {{
    auto out = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* yp = y.data_ptr<float>();
    float* op = out.data_ptr<float>();
    long n = x.numel();
    float s = (float)scale;
    int blocks = (int)((n + 255) / 256);
    {launch}
    return out;
}}
"""
ext = load_inline(name="kernel_form_{tag}", cpp_sources="torch::Tensor add_relu_scale(torch::Tensor x, "
                  "torch::Tensor y, double scale);", cuda_sources=cuda_src, functions=["add_relu_scale"],
                  verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return {forward}
'''
_OWN = "ext.add_relu_scale(x.contiguous(), y.contiguous(), self.scale)"
_PYTORCH = "torch.relu(x + y) * self.scale"  # the extension is built and loaded, but never called

# A Triton decoy: launches a one-element kernel named like PyTorch's, and PyTorch does the work.
TRITON_LIBRARY_NAMED_DECOY = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def vectorized_elementwise_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        out = torch.relu(x + y) * self.scale
        vectorized_elementwise_kernel[(1,)](out, 1, BLOCK=16)
        return out
'''


def _cuda_jobs() -> dict[str, Job]:
    problem = candidates.problem(1 << 20)
    return {f"{form}/{role}": Job(problem, _CANDIDATE.format(
                definition=definition, launch=launch, tag=f"{form}_{role}",
                forward=_OWN if role == "honest" else _PYTORCH), backend="cuda")
            for form, (definition, launch) in FORMS.items() for role in ("honest", "decoy")
            if not (form == "library_name" and role == "honest")}


# no cache_dir: a fresh result cache for this module; a lazy first forward builds its extension within the first
# trial (`RUN_TIME_CASES`), which takes longer than eval.call_timeout_s's default allows for one call
EVALUATOR = dict(device="cuda", call_timeout_s=300.0)


@pytest.fixture(scope="module")
def results(evaluator):
    jobs = _cuda_jobs()  # built in parallel
    return dict(zip(jobs, evaluator.evaluate_many(jobs.values())))


@pytest.mark.parametrize("form", sorted(set(FORMS) - {"library_name"}))
def test_an_honest_kernel_of_each_form_is_its_own_and_correct(results, form):
    r = results[f"{form}/honest"]
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error}"
    assert r.kernels.own_kernels_launched, r.kernels
    assert r.kernels.own_time_fraction is not None and r.kernels.own_time_fraction > 0.9, r.kernels


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_decoy_of_each_form_is_rejected(results, form):
    r = results[f"{form}/decoy"]
    assert r.status is Status.REJECTED, f"{r.status}: {r.reason} {r.error}"
    assert "none of the candidate's own kernels ran" in r.reason, r.reason
    assert not r.kernels.own_kernels_launched, r.kernels


def test_a_triton_decoy_named_like_a_pytorch_kernel_is_rejected(evaluator):
    # at 64M elements PyTorch's three kernels take ~1 ms and the decoy's one-element kernel a few us: its share is
    # that of the decoy alone only if PyTorch's `at::native::vectorized_elementwise_kernel` is not counted as its own
    r = evaluator.evaluate(candidates.problem(1 << 26), TRITON_LIBRARY_NAMED_DECOY)
    assert r.status is Status.REJECTED, f"{r.status}: {r.reason} {r.error}"
    assert "eval.min_own_time_fraction" in r.reason, r.reason
    assert r.kernels.own_time_fraction is not None and r.kernels.own_time_fraction < 0.005, r.kernels


# `torch.mv` on float32 runs cuBLAS's `gemv2T_kernel_val` (the case found): a candidate that builds, and never
# launches, a kernel of that name must not have cuBLAS's launches counted as its own. The reference launches it too,
# profiled in the clean reference process, so it is a library kernel whatever the candidate built.
MV_PROBLEM = '''
import torch
import torch.nn as nn

M = 8192
K = 8192


class Model(nn.Module):
    def forward(self, a, x):
        return torch.mv(a, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K)]


def get_init_inputs():
    return []
'''

CUBLAS_NAMED_DECOY = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/types.h>
__global__ void gemv2T_kernel_val(const float* a, const float* x, float* y, int m, int k) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m) { float s = 0.f; for (int j = 0; j < k; ++j) s += a[(long)row * k + j] * x[j]; y[row] = s; }
}
torch::Tensor mv(torch::Tensor a, torch::Tensor x) {
    auto y = torch::empty({a.size(0)}, a.options());
    int m = (int)a.size(0), k = (int)a.size(1);
    gemv2T_kernel_val<<<(m + 255) / 256, 256>>>(a.data_ptr<float>(), x.data_ptr<float>(), y.data_ptr<float>(), m, k);
    return y;
}
"""
ext = load_inline(name="cublas_named_decoy", cpp_sources="torch::Tensor mv(torch::Tensor a, torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["mv"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, a, x):
        return torch.mv(a, x)  # the extension is built and loaded, but never called
'''


def test_a_kernel_built_under_cublas_name_and_never_launched_is_rejected(evaluator):
    from problems.problem import problem_from_source

    r = evaluator.evaluate(problem_from_source(MV_PROBLEM, name="mv"), CUBLAS_NAMED_DECOY, "cuda")
    assert r.status is Status.REJECTED, f"{r.status}: {r.reason} {r.error}"
    assert "none of the candidate's own kernels ran" in r.reason and "gemv2T_kernel_val" in r.reason, r.reason
    assert not r.kernels.own_kernels_launched and r.kernels.own_time_fraction == 0.0, r.kernels


# `load_inline` inside `__init__` or a lazy first forward (most CUDA-L1 kernels that use it): the build worker only
# imports the candidate, so the extension is built in the evaluating worker, at run time, and its kernels are read
# by the parent from that worker's own folder. An honest one is correct with its kernel its own; one built there and
# never launched while PyTorch does the work is still a decoy.
_RUN_TIME = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
__global__ void k_{tag}{body}
torch::Tensor add_relu_scale(torch::Tensor x, torch::Tensor y, double scale) {{
    auto out = torch::empty_like(x);
    long n = x.numel();
    k_{tag}<<<(int)((n + 255) / 256), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n,
                                              (float)scale);
    return out;
}}
"""


def _build():
    return load_inline(name="run_time_{tag}", cpp_sources="torch::Tensor add_relu_scale(torch::Tensor x, "
                       "torch::Tensor y, double scale);", cuda_sources=cuda_src, functions=["add_relu_scale"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.ext = {init}

    def forward(self, x, y):
        if self.ext is None:
            self.ext = _build()
        return {forward}
'''
RUN_TIME_CASES = {  # case -> (what __init__ sets self.ext to, what forward returns)
    "init": ("_build()", "self.ext.add_relu_scale(x.contiguous(), y.contiguous(), self.scale)"),
    "lazy_forward": ("None", "self.ext.add_relu_scale(x.contiguous(), y.contiguous(), self.scale)"),
    "init_decoy": ("_build()", "torch.relu(x + y) * self.scale"),
}


@pytest.fixture(scope="module")
def run_time_results(evaluator):
    problem = candidates.problem(1 << 20)
    jobs = {case: Job(problem, _RUN_TIME.format(tag=case, body=_BODY, init=init, forward=forward), backend="cuda")
            for case, (init, forward) in RUN_TIME_CASES.items()}
    return dict(zip(jobs, evaluator.evaluate_many(jobs.values())))


@pytest.mark.parametrize("case", ["init", "lazy_forward"])
def test_a_kernel_built_at_run_time_is_its_own_and_correct(run_time_results, case):
    r = run_time_results[case]
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error}"
    assert r.kernels.own_kernels_launched == [f"k_{case}"], r.kernels
    assert f"k_{case}" in r.kernels.own_kernels_defined, r.kernels
    assert r.kernels.own_time_fraction is not None and r.kernels.own_time_fraction > 0.9, r.kernels


def test_a_kernel_built_at_run_time_and_never_launched_is_rejected(run_time_results):
    r = run_time_results["init_decoy"]
    assert r.status is Status.REJECTED, f"{r.status}: {r.reason} {r.error}"
    assert "none of the candidate's own kernels ran" in r.reason and "k_init_decoy" in r.reason, r.reason
    assert not r.kernels.own_kernels_launched, r.kernels
