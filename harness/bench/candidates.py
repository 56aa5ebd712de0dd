"""Problems and candidates for the evaluator benchmarks: sized elementwise problems with
Triton and CUDA solutions, honest and failing, each source distinct so nothing is cached."""

from __future__ import annotations

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


def throughput_batch() -> list[tuple[str, str, str]]:
    """(label, source, backend) for a mixed batch: 12 Triton and 12 CUDA, a third of them failing."""
    batch: list[tuple[str, str, str]] = []
    for i, (block, warps) in enumerate([(256, 2), (512, 4), (1024, 4), (2048, 8), (4096, 8), (1024, 8), (512, 2), (2048, 4)]):
        batch.append((f"triton_ok_{i}", triton_candidate(block, warps), "triton"))
    good = triton_candidate()
    batch.append(("triton_wrong", good.replace("tl.maximum(x + y, 0.0)", "(x + y)"), "triton"))
    batch.append(("triton_raises", good.replace("out = torch.empty_like(x)", "raise RuntimeError('bad launch')"), "triton"))
    batch.append(("triton_syntax", good.replace("def forward(self, x, y):", "def forward(self, x, y)"), "triton"))
    batch.append(("triton_pytorch_only", good.replace("add_relu_scale[(triton.cdiv(n, 1024),)](x, y, out, n, self.scale, BLOCK=1024, num_warps=4)",
                                                      "out = torch.relu(x + y) * self.scale"), "triton"))
    for i, threads in enumerate([128, 256, 512, 1024, 64, 192, 384, 768]):
        batch.append((f"cuda_ok_{i}", cuda_candidate(f"ok{i}", threads), "cuda"))
    batch.append(("cuda_compile_error", cuda_candidate("bad", 256, "this is not C++;"), "cuda"))
    batch.append(("cuda_wrong", cuda_candidate("wrong", 256).replace("(v > 0.f ? v : 0.f) * scale", "v * scale"), "cuda"))
    batch.append(("cuda_partial", cuda_candidate("partial", 256).replace("(n + threads - 1) / threads", "(n / 2 + threads - 1) / threads"), "cuda"))
    batch.append(("cuda_oob", cuda_candidate("oob", 256).replace("out[i] =", "out[i + (1L << 40)] ="), "cuda"))
    return batch
