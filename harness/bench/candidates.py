"""Problems and candidates for the evaluator benchmarks: sized elementwise problems with
Triton and CUDA solutions, honest and failing, each source distinct so nothing is cached."""

from __future__ import annotations

from dataclasses import dataclass

from problems.problem import Problem, problem_from_source

_PROBLEM = '''
import torch
import torch.nn as nn

N = {n}


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return torch.relu(x + y) * self.scale


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return [1.5]
'''

TRITON = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_relu_scale(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + y, 0.0) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_relu_scale[(triton.cdiv(n, {block}),)](x, y, out, n, self.scale, BLOCK={block}, num_warps={warps})
        return out
'''

CUDA = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
__global__ void add_relu_scale_cuda_{tag}(const float* __restrict__ x, const float* __restrict__ y,
                                          float* __restrict__ out, long n, float scale) {{
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{ float v = x[i] + y[i]; out[i] = (v > 0.f ? v : 0.f) * scale; }}
}}
torch::Tensor add_relu_scale(torch::Tensor x, torch::Tensor y, double scale) {{
    auto out = torch::empty_like(x);
    long n = x.numel();
    int threads = {threads};
    add_relu_scale_cuda_{tag}<<<(n + threads - 1) / threads, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                                                    out.data_ptr<float>(), n, (float)scale);
    {extra}
    return out;
}}
"""
cpp_src = "torch::Tensor add_relu_scale(torch::Tensor x, torch::Tensor y, double scale);"
ext = load_inline(name="add_relu_scale_{tag}", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["add_relu_scale"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return ext.add_relu_scale(x.contiguous(), y.contiguous(), self.scale)
'''


def problem_source(n: int) -> str:
    """Source of relu(x + y) * 1.5 over n float32 elements (three eager kernels; one fused kernel suffices)."""
    return _PROBLEM.format(n=n)


def problem(n: int) -> Problem:
    """The `problem_source(n)` problem, with a stable id."""
    return problem_from_source(problem_source(n), name=f"add_relu_scale_{n}", problem_id=f"bench/add_relu_scale_{n}")


def triton_candidate(block: int = 1024, warps: int = 4) -> str:
    return TRITON.format(block=block, warps=warps)


def cuda_candidate(tag: str, threads: int = 256, extra: str = "") -> str:
    return CUDA.format(tag=tag, threads=threads, extra=extra)


@dataclass(frozen=True)
class BenchJob:
    """One candidate of a benchmark batch and the verdict it must get."""

    label: str
    problem: Problem
    source: str
    backend: str
    expected: str


def mixed_batch(sizes: tuple[int, int, int], with_cuda: bool = True) -> list[BenchJob]:
    """The throughput batch: three problem sizes; Triton and CUDA; honest, failing, crashing and hanging candidates."""
    small, mid, large = (problem(n) for n in sizes)
    good = triton_candidate()
    jobs = [BenchJob(f"triton_ok_{n.id.rsplit('_', 1)[-1]}_{block}", n, triton_candidate(block, warps), "triton", "correct")
            for n in (small, mid, large) for block, warps in ((512, 4), (2048, 8))]
    jobs += [
        BenchJob("triton_incorrect", mid, good.replace("tl.maximum(x + y, 0.0)", "(x + y)"), "triton", "incorrect"),
        BenchJob("triton_raises", small, good.replace("out = torch.empty_like(x)", "raise RuntimeError('bad launch')"),
                 "triton", "runtime_error"),
        BenchJob("triton_syntax", small, good.replace("def forward(self, x, y):", "def forward(self, x, y)"), "triton",
                 "compile_error"),
        BenchJob("triton_pytorch_fallback", mid, good.replace(
            "add_relu_scale[(triton.cdiv(n, 1024),)](x, y, out, n, self.scale, BLOCK=1024, num_warps=4)",
            "out = torch.relu(x + y) * self.scale"), "triton", "rejected"),
        BenchJob("triton_crash", mid, good.replace("out = torch.empty_like(x)", "import os\n        os._exit(3)"),
                 "triton", "crash"),
        BenchJob("triton_timeout", small, good.replace("out = torch.empty_like(x)", "while True:\n            pass"),
                 "triton", "timeout"),
    ]
    if with_cuda:
        jobs += [BenchJob("cuda_ok", large, cuda_candidate("bench_ok"), "cuda", "correct"),
                 BenchJob("cuda_compile_error", mid, cuda_candidate("bench_bad", 256, "this is not C++;"), "cuda",
                          "compile_error")]
    return jobs
