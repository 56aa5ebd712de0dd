"""The answer is the float64 one (`eval.steps.trials._within_float64`, `problems.HEADROOM`): an honest kernel that
rounds better than the reference is not rejected for missing the reference's rounding, a wrong one still is, and a value
regime so near overflow that the order of a sum decides finiteness is not run.

Found on an H200 (2026-12-02): two of the 15 reference solutions failed value regimes, one by a NaN pattern at
magnitudes near float32's largest (its tf32x3 dots overflowed where the reference's IEEE float32 did not), one
beyond the tolerance of a reference whose own rounding it did not share.
"""

from __future__ import annotations

import pytest

from eval import Status
from problems import problem_from_source

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # sandboxed evaluator workers

EVALUATOR = dict(device="cpu", import_timeout_s=120, call_timeout_s=120)

# Row sums accumulated one column at a time in float32: each add rounds, so the reference is off the exact sum by
# about 1e-6 of it, ten times the tolerance.
SEQUENTIAL_SUM = '''
import torch
import torch.nn as nn

ROWS = 8
COLS = 512
META = {"atol": 1e-6, "rtol": 1e-7}


class Model(nn.Module):
    def forward(self, x):
        acc = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        for j in range(x.shape[1]):
            acc = acc + x[:, j]
        return acc


def get_inputs():
    return [torch.randn(ROWS, COLS) + 1000.0]


def get_init_inputs():
    return []
'''

# A kernel that sums each row in float64 and rounds once: the float32 answer, exactly.
EXACT_SUM = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + offs, mask=offs < cols, other=0.0).to(tl.float64)
    tl.store(out_ptr + row, tl.sum(x, axis=0).to(tl.float32))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
        return out
'''

# The same kernel with a boundary bug: the last column of every row is dropped.
DROPS_A_COLUMN = EXACT_SUM.replace("mask=offs < cols", "mask=offs < cols - 1")


def test_a_kernel_that_rounds_better_than_the_reference_is_correct(evaluator):
    result = evaluator.evaluate(problem_from_source(SEQUENTIAL_SUM, name="sequential_sum"), EXACT_SUM)
    assert result.status is Status.CORRECT, result.reason + result.error
    assert result.float64_decided >= 1  # the published draws missed the reference's rounding and met the answer


def test_a_wrong_kernel_misses_the_float64_answer_too(evaluator):
    result = evaluator.evaluate(problem_from_source(SEQUENTIAL_SUM, name="sequential_sum"), DROPS_A_COLUMN)
    assert result.status is Status.INCORRECT, result.reason
    assert result.float64_decided == 0


# The exact sum, returned in float64: nearer the answer than any float32, and of another dtype than the reference's.
EXACT_SUM_IN_FLOAT64 = (EXACT_SUM.replace("tl.sum(x, axis=0).to(tl.float32)", "tl.sum(x, axis=0)")
                        .replace("dtype=x.dtype", "dtype=torch.float64"))


def test_outputs_of_another_dtype_are_not_decided_by_the_float64_answer(evaluator):
    result = evaluator.evaluate(problem_from_source(SEQUENTIAL_SUM, name="sequential_sum"), EXACT_SUM_IN_FLOAT64)
    assert result.status is Status.INCORRECT, result.reason
    assert "dtype" in result.reason
    assert result.float64_decided == 0


# Row sums of squares of 128 values in [0.5, 1]: at the near-limits regime's magnitudes (the largest
# sqrt(max) / 16) every sum stays under float32's largest; scaled by the headroom of 4 every one overflows.
SUM_OF_SQUARES = '''
import torch
import torch.nn as nn

ROWS = 4
COLS = 128


class Model(nn.Module):
    def forward(self, x):
        return (x * x).sum(dim=-1)


def get_inputs():
    return [torch.rand(ROWS, COLS) * 0.5 + 0.5]


def get_init_inputs():
    return []
'''

SQUARES_KERNEL = EXACT_SUM.replace(".to(tl.float64)", "").replace("tl.sum(x, axis=0).to(tl.float32)",
                                                                   "tl.sum(x * x, axis=0)")


def test_a_regime_without_headroom_to_overflow_is_not_run(evaluator):
    result = evaluator.evaluate(problem_from_source(SUM_OF_SQUARES, name="sum_of_squares"), SQUARES_KERNEL)
    assert result.status is Status.CORRECT, result.reason + result.error
    assert result.distributions["near-limits"].startswith("skipped: too close to overflow"), result.distributions
    assert result.distributions["large-mean"] == "passed", result.distributions  # the other regimes still run
