"""Honest Triton candidates for tiny problems, for `harness bench eval --part flips` and the GPU tests of the
back-to-back hidden-work check: a call takes a few microseconds, so host noise is as large as the GPU work.
"""

from __future__ import annotations

from harness.corpus import candidates
from problems import Problem, problem_from_source

_ROW_PROBLEM = '''
import torch
import torch.nn as nn

ROWS = {rows}
COLS = {cols}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
'''

_ROW_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def {name}(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other={other})
    {body}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()  # the kernel reads rows at a stride of cols
        rows, cols = x.shape
        out = torch.empty({out_shape}, device=x.device, dtype=x.dtype)
        {name}[(rows,)](x, out, cols, BLOCK=triton.next_power_of_2(cols))
        return out
'''

_SOFTMAX = ("m = tl.max(x, axis=0)\n    e = tl.exp(x - m)\n"
            "    tl.store(out_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)")
_ROW_SUM = "tl.store(out_ptr + row, tl.sum(x, axis=0))"


def _row_problem(name: str, rows: int, cols: int, expr: str) -> Problem:
    return problem_from_source(_ROW_PROBLEM.format(rows=rows, cols=cols, expr=expr), name=name,
                               problem_id=f"bench/{name}")


def honest_cases() -> list[tuple[str, Problem, str]]:
    """(label, problem, source): elementwise and row-reduction problems at sizes where a call takes a few us."""
    softmax = _ROW_KERNEL.format(name="row_softmax", other='float("-inf")', body=_SOFTMAX, out_shape="x.shape")
    row_sum = _ROW_KERNEL.format(name="row_sum", other="0.0", body=_ROW_SUM, out_shape="(rows,)")
    return [
        ("add_relu_scale_4k", candidates.problem(1 << 12), candidates.triton_candidate(1024, 4)),
        ("add_relu_scale_64k", candidates.problem(1 << 16), candidates.triton_candidate(1024, 4)),
        ("softmax_64x256", _row_problem("softmax_64x256", 64, 256, "torch.softmax(x, dim=1)"), softmax),
        ("row_sum_128x512", _row_problem("row_sum_128x512", 128, 512, "x.sum(dim=1)"), row_sum),
    ]
