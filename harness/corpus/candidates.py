"""Problems and candidates for the evaluator's tests and benchmarks: sized elementwise problems with
Triton and CUDA solutions, honest and failing, each source distinct so nothing is cached.

The honest add-relu Triton kernel has one home, the prompts' worked example
(`agents/prompts/examples/add_relu_triton.py`): the benchmarks' Triton candidates, the test
fixtures and the hostile variants of `harness.corpus.hostile` are all that file with named edits
(`edit` fails loudly when an anchor is gone).
"""

from __future__ import annotations

from dataclasses import dataclass

from agents import EXAMPLES_DIR
from problems import Problem, problem_from_source

# the prompts' worked example: relu(a + b) and its Triton kernel `add_relu_kernel`
EXAMPLE_PROBLEM = (EXAMPLES_DIR / "add_relu_reference.py").read_text()
EXAMPLE_TRITON = (EXAMPLES_DIR / "add_relu_triton.py").read_text()


def edit(source: str, old: str, new: str) -> str:
    """`source` with its one occurrence of `old` replaced by `new` (an anchor that is gone, or not unique, fails)."""
    assert source.count(old) == 1, f"anchor occurs {source.count(old)} times, not once: {old!r}"
    return source.replace(old, new)


def example_problem_source(n: int) -> str:
    """The worked example's problem, relu(a + b), over 1 x n float32 elements."""
    return edit(EXAMPLE_PROBLEM, "M = 4096\nN = 4096\n", f"M = 1\nN = {n}\n")


# the worked example with a `scale` (the benchmark problem's init argument) and a chosen block and warp count
_LAUNCH = "add_relu_kernel[grid](a, b, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)"
TRITON_LAUNCH = "add_relu_kernel[grid](a, b, out, n_elements, self.scale, BLOCK_SIZE=BLOCK_SIZE, num_warps={warps})"
_SCALED = [
    ("n_elements, BLOCK_SIZE: tl.constexpr)", "n_elements, scale, BLOCK_SIZE: tl.constexpr)"),
    ("out = tl.maximum(a + b, 0.0)", "out = tl.maximum(a + b, 0.0) * scale"),
    ("    def __init__(self):\n        super().__init__()\n",
     "    def __init__(self, scale: float):\n        super().__init__()\n        self.scale = scale\n"),
    ("        BLOCK_SIZE = 1024\n", "        BLOCK_SIZE = {block}\n"),
    (_LAUNCH, TRITON_LAUNCH),
]

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
    """The worked example's kernel computing relu(a + b) * scale, launched with `block` elements and `warps` warps."""
    source = EXAMPLE_TRITON
    for old, new in _SCALED:
        source = edit(source, old, new.format(block=block, warps=warps))
    return source


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
    alloc = "out = torch.empty_like(a)"
    jobs = [BenchJob(f"triton_ok_{n.id.rsplit('_', 1)[-1]}_{block}", n, triton_candidate(block, warps), "triton", "correct")
            for n in (small, mid, large) for block, warps in ((512, 4), (2048, 8))]
    jobs += [
        BenchJob("triton_incorrect", mid, edit(good, "tl.maximum(a + b, 0.0)", "(a + b)"), "triton", "incorrect"),
        BenchJob("triton_raises", small, edit(good, alloc, "raise RuntimeError('bad launch')"), "triton", "runtime_error"),
        BenchJob("triton_syntax", small, edit(good, "-> torch.Tensor:\n        a = ", "-> torch.Tensor\n        a = "), "triton",
                 "compile_error"),
        BenchJob("triton_pytorch_fallback", mid, edit(good, TRITON_LAUNCH.format(warps=4), "out = torch.relu(a + b) * self.scale"),
                 "triton", "rejected"),
        BenchJob("triton_crash", mid, edit(good, alloc, "import os\n        os._exit(3)"), "triton", "crash"),
        BenchJob("triton_timeout", small, edit(good, alloc, "while True:\n            pass"), "triton", "timeout"),
    ]
    if with_cuda:
        jobs += [BenchJob("cuda_ok", large, cuda_candidate("bench_ok"), "cuda", "correct"),
                 BenchJob("cuda_compile_error", mid, cuda_candidate("bench_bad", 256, "this is not C++;"), "cuda",
                          "compile_error")]
    return jobs


def distinct_copies(batch: list[BenchJob], copies: int) -> list[BenchJob]:
    """`copies` copies of `batch` whose sources all differ (and CUDA extensions' names too), so none is cached."""
    if copies <= 1:
        return list(batch)
    out = []
    for k in range(copies):
        for j in batch:
            source = j.source.replace("add_relu_scale_", f"add_relu_scale_c{k}_") if j.backend == "cuda" else j.source
            out.append(BenchJob(f"{j.label}_c{k}", j.problem, source + f"\n# copy {k}\n", j.backend, j.expected))
    return out


def honest_triton_batch(sizes: tuple[int, int, int], copies: int) -> list[BenchJob]:
    """The scaling batch: `copies` distinct copies of the mixed batch's 6 honest Triton candidates."""
    return distinct_copies([j for j in mixed_batch(sizes, with_cuda=False) if j.expected == "correct"], copies)
