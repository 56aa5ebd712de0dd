"""The byte floor on a problem loaded from source, on a CUDA GPU (`pytest -m gpu tests/eval/test_floor_gpu.py`).

KernelBench's L1/100 (HingeLoss) as first published draws predictions uniformly in [0, 1) and targets as +-1, so
mean(clamp(1 - p*t, 0)) is within tolerance of 1 - mean(t)/2: a kernel that reads only the targets passes every
correctness check on the published distribution (2111x, with no flag, on the landed evaluator). Two defences are
asserted, each on its own: the byte floor (every input read once, the output written once, at the probed copy
bandwidth) rejects it, naming the floor; and the trials off the published distribution find it wrong."""

from __future__ import annotations

import re

import pytest
import torch

from eval import EvalConfig, Evaluator, Status
from problems.problem import problem_from_source

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

HINGE = '''
import torch
import torch.nn as nn

ROWS = 8192
COLS = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def get_inputs():
    return [torch.rand(ROWS, COLS), torch.randint(0, 2, (COLS,)).float() * 2 - 1]


def get_init_inputs():
    return []
'''

TARGETS_ONLY = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_of_targets(t_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        acc += tl.load(t_ptr + start + offs, mask=start + offs < n, other=0.0)
    tl.store(out_ptr, 1.0 - 0.5 * tl.sum(acc, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        out = torch.empty((), device=targets.device, dtype=torch.float32)
        mean_of_targets[(1,)](targets, out, targets.numel(), BLOCK=1024)
        return out
'''


def test_a_distribution_shortcut_under_the_byte_floor_is_rejected():
    """The floor alone (the trials off the published distribution and the hidden workloads, which also catch it,
    turned off)."""
    problem = problem_from_source(HINGE, name="hinge", problem_id="floor/hinge_uniform")
    with Evaluator(EvalConfig(device="cuda", cache_dir=None, distribution_trials=False, hidden_shapes=False)) as ev:
        r = ev.evaluate(problem, TARGETS_ONLY)
    assert r.status is Status.REJECTED, f"{r.status}: {r.reason}"
    assert "reading every input and parameter once" in r.reason and "implausible" in r.reason, r.reason
    # a rejected result carries no timing (`EvalResult.settle`): the reason holds both figures, its time and the floor's
    measured, floor = (float(v) for v in re.search(r"([\d.]+) us is under \d+% of the ([\d.]+) us", r.reason).groups())
    assert floor / measured > 4, r.reason


def test_the_same_shortcut_fails_the_trials_off_the_published_distribution():
    """With the default rules a trial off the published distribution catches it (which one first follows the
    evaluation's secret: the trials after the warm-up run in its order; H200, 2026-12-03: "shifted", every input plus
    2), unless a hidden workload does first."""
    problem = problem_from_source(HINGE, name="hinge", problem_id="floor/hinge_uniform")
    with Evaluator(EvalConfig(device="cuda", cache_dir=None)) as ev:
        r = ev.evaluate(problem, TARGETS_ONLY)
    assert r.status is Status.INCORRECT, f"{r.status}: {r.reason}"
    failed = [kind for kind, verdict in r.distributions.items() if verdict == "failed"]
    assert ("inputs off the published distribution" in r.reason and failed) or "hidden workload" in r.reason, \
        (r.reason, r.distributions)
