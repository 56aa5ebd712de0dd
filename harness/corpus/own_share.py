"""Candidates around the own-kernel share rule (`eval.min_own_time_fraction`), for its tests and
`harness bench eval --part own-share`.

Three honest hybrid candidates (a cuBLAS GEMM through `torch.matmul`, then a hand-written Triton
epilogue: the smallest honest shares we know of) and a decoy (PyTorch does all the work; a Triton
kernel copies a few elements), each for a suite problem, and optionally the suite's reference
solutions: the decoy must be rejected by the share rule and every other case must be correct.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.corpus.solutions import solutions
from problems import Problem, select_problems

_EPILOGUE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def {name}(y_ptr, b_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    z = y + tl.load(b_ptr + offs % cols, mask=mask)
    {body}
    tl.store(y_ptr + offs, out, mask=mask)


class ModelNew(nn.Module):
    """cuBLAS GEMM (torch.matmul, without bias), then bias and activation in place in one Triton pass."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1])
        y = torch.matmul(x2, self.linear.weight.t())
        n, cols = y.numel(), y.shape[-1]
        {name}[(triton.cdiv(n, 1024),)](y, self.linear.bias, n, cols, BLOCK=1024)
        return y.reshape(*x.shape[:-1], cols)
'''

_RELU = "out = tl.maximum(z, 0.0)"
# tanh-approximated GELU, tanh(u) = 1 - 2 / (exp(2u) + 1)
_GELU = ("u = 0.7978845608028654 * (z + 0.044715 * z * z * z)\n"
         "    out = 0.5 * z * (2.0 - 2.0 / (tl.exp(2.0 * u) + 1.0))")

HYBRID_SCALE_RESIDUAL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_residual_epilogue(y_ptr, x_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x + alpha * y, mask=mask)


class ModelNew(nn.Module):
    """cuBLAS GEMM (torch.matmul), then x + alpha * y in place in one Triton pass."""

    def __init__(self, features: int, alpha: float):
        super().__init__()
        self.linear = nn.Linear(features, features, bias=False)
        self.alpha = alpha

    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.matmul(x2, self.linear.weight.t())
        n = y.numel()
        scale_residual_epilogue[(triton.cdiv(n, 1024),)](y, x2, n, self.alpha, BLOCK=1024)
        return y.reshape(x.shape)
'''

DECOY = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    """A decoy: PyTorch computes everything; the Triton kernel copies four elements onto themselves."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.relu(self.linear(x))
        touch_kernel[(1,)](y, min(y.numel(), 4), BLOCK=16)
        return y
'''


@dataclass(frozen=True)
class ShareCase:
    """One candidate for one suite problem and the verdict it must get under the default rules."""

    kind: str  # solution, hybrid or decoy
    label: str
    problem_id: str
    source: str
    expected: str


HYBRIDS: dict[str, tuple[str, str]] = {
    "hybrid_gemm_bias_relu": ("L2/01_gemm_bias_relu", _EPILOGUE.format(name="bias_relu_epilogue", body=_RELU)),
    "hybrid_gemm_bias_gelu": ("L2/02_gemm_bias_gelu", _EPILOGUE.format(name="bias_gelu_epilogue", body=_GELU)),
    "hybrid_matmul_scale_residual": ("L2/03_matmul_scale_residual", HYBRID_SCALE_RESIDUAL),
}
DECOYS: dict[str, tuple[str, str]] = {"decoy_gemm_bias_relu": ("L2/01_gemm_bias_relu", DECOY)}


def problem(problem_id: str) -> Problem:
    (found,) = select_problems(problem_id)
    return found


def cases(with_solutions: bool = True) -> list[ShareCase]:
    """The reference solutions (optional), the hybrids and the decoys."""
    out: list[ShareCase] = []
    if with_solutions:
        out += [ShareCase("solution", p.id, p.id, source, "correct") for p, source in solutions("all")]
    out += [ShareCase("hybrid", label, pid, src, "correct") for label, (pid, src) in HYBRIDS.items()]
    decoy = "rejected" if torch.cuda.is_available() else "correct"  # a CPU measures no share, so never rejects
    out += [ShareCase("decoy", label, pid, src, decoy) for label, (pid, src) in DECOYS.items()]
    return out
