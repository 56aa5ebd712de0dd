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


EVALUATOR = dict(device="cuda")  # no cache_dir: a fresh result cache for this module


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
