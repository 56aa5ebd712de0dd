"""Correctness trials beyond the published distribution (`runtime.DISTRIBUTIONS`), on the CPU pipeline.

The class: a candidate that relies on get_inputs()'s distribution instead of the inputs (KernelBench's uniform
HingeLoss, whose mean a kernel reading only the targets matched at 2111x). Here the published inputs are standard
normal, so clamp(x, min=-10) never clamps: a kernel that copies x is exact on every published draw. The defence
asserted: the trial with every input scaled by 4 finds it, and the verdict names that distribution; an honest
kernel passes all four, and a distribution on which the reference is not finite is skipped, not failed. The
heavy-tailed trial is for kernels that assume get_inputs()'s range: a softmax without the maximum subtracted
overflows there and nowhere else."""

from __future__ import annotations

import pytest

from eval import UNFINISHED, Status
from problems import DISTRIBUTIONS, REGIMES, VALUE_SHAPES
from problems.problem import problem_from_source

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # every test runs sandboxed evaluator workers

PROBLEM = '''
import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {body}


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def clamp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, {value}, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()  # the hidden workloads include transposed and strided inputs
        out = torch.empty_like(x)
        clamp_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''


EVALUATOR = dict(device="cpu", cache_dir=None, workers_per_gpu=1, import_timeout_s=120)


def _clamp_problem():
    return problem_from_source(PROBLEM.format(body="torch.clamp(x, min=-10.0)"), name="clamp", problem_id="t/clamp")


def test_a_shortcut_exact_on_the_published_distribution_fails_off_it(evaluator):
    r = evaluator.evaluate(_clamp_problem(), CANDIDATE.format(value="x"))
    assert r.status is Status.INCORRECT, f"{r.status}: {r.reason}"
    failed = [name for name, state in r.distributions.items() if state == "failed"]  # the first, in secret order
    assert failed in (["scaled"], ["heavy-tailed"], ["near-limits"], ["outlier"]), (r.reason, r.distributions)


def test_an_honest_kernel_passes_every_distribution(evaluator):
    r = evaluator.evaluate(_clamp_problem(), CANDIDATE.format(value="tl.maximum(x, -10.0)"))
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-500:]}"
    assert {k: r.distributions[k] for k in DISTRIBUTIONS} == {"scaled": "passed", "shifted": "passed",
                                                             "flipped": "passed", "heavy-tailed": "passed"}, r.distributions


def test_a_distribution_the_reference_is_not_finite_on_is_skipped(evaluator):
    """sqrt(x + 3) is finite on standard normal draws (almost surely) and on them shifted by 2; negated or
    scaled by 4, some elements fall below -3 and the reference gives NaN there: those two are skipped."""
    problem = problem_from_source(PROBLEM.format(body="torch.sqrt(torch.clamp(x, min=-3.0) + 3.0) * (x > -3.0) "
                                                      "+ torch.log(x + 6.0)"),
                                  name="log", problem_id="t/log")
    value = "tl.sqrt(tl.maximum(x, -3.0) + 3.0) * (x > -3.0).to(tl.float32) + tl.log(x + 6.0)"
    r = evaluator.evaluate(problem, CANDIDATE.format(value=value))
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-500:]}"
    assert r.distributions["shifted"] == "passed", r.distributions
    assert r.distributions["scaled"].startswith("skipped: the reference is not finite"), r.distributions


KB_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp(x, min=-10.0)


batch_size = 64
dim = 128


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


def test_a_kernelbench_problem_gets_a_hidden_derived_workload(evaluator):
    """A KernelBench problem has no get_extra_inputs(): its constants that only get_inputs() reads are roughly
    halved (batch_size 64 -> 33, dim 128 -> 65) for one more trial the agent never sees. A kernel that hard-codes
    the published shape fails there, and the verdict names the workload; the honest kernel passes it."""
    problem = problem_from_source(KB_PROBLEM, name="kb_clamp", problem_id="t/kb_clamp")
    honest = CANDIDATE.format(value="tl.maximum(x, -10.0)")
    r = evaluator.evaluate(problem, honest)
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-500:]}"
    assert {k: v for k, v in r.workloads.items() if v != "passed"} == {} and "odd sizes" in r.workloads, r.workloads
    hard_coded = honest.replace("out = torch.empty_like(x)", "out = torch.empty(64, 128)")
    r = evaluator.evaluate(problem, hard_coded)
    assert r.status is Status.INCORRECT, f"{r.status}: {r.reason}"
    failed = [k for k, v in r.workloads.items() if v == "failed"]  # the first, in secret order; no size named
    assert failed and f"on a hidden workload with {failed[0]}" in r.reason and "33" not in r.reason, (
        r.reason, r.workloads)


def test_a_trial_the_candidate_never_finishes_is_marked_unfinished(evaluator):
    """A kernel that raises on sizes or values it was never shown ends its evaluation in that trial; the trial's entry
    says so (`UNFINISHED`), so that the verdict can be told from one on the published inputs."""
    honest = CANDIDATE.format(value="tl.maximum(x, -10.0)")
    fixed_shape = honest.replace("out = torch.empty_like(x)", "assert x.shape == (64, 128), 'built for 64 x 128'\n"
                                 "        out = torch.empty_like(x)")
    r = evaluator.evaluate(problem_from_source(KB_PROBLEM, name="kb_clamp", problem_id="t/kb_clamp"), fixed_shape)
    assert r.status is Status.RUNTIME_ERROR and "built for 64 x 128" in r.reason, f"{r.status}: {r.reason}"
    assert [v for v in r.workloads.values() if v == UNFINISHED] == [UNFINISHED], r.workloads
    in_range = honest.replace("out = torch.empty_like(x)", "assert x.abs().max() < 8, 'inputs out of range'\n"
                              "        out = torch.empty_like(x)")
    r = evaluator.evaluate(_clamp_problem(), in_range)
    assert r.status is Status.RUNTIME_ERROR and "inputs out of range" in r.reason, f"{r.status}: {r.reason}"
    unfinished = [name for name, state in r.distributions.items() if state == UNFINISHED]
    assert len(unfinished) == 1 and unfinished[0] in ("scaled", "heavy-tailed", "near-limits", "outlier", "large-mean"), (
        r.distributions)  # the first, in secret order, that leaves |x| < 8


def test_constants_the_model_reads_are_never_scaled():
    from problems.runtime import input_only_constants

    source = KB_PROBLEM.replace("return torch.clamp(x, min=-10.0)", "return torch.clamp(x, min=-10.0)[:, :dim]")
    assert input_only_constants(KB_PROBLEM) == ["batch_size", "dim"]
    assert input_only_constants(source) == ["batch_size"]  # Model reads dim: the model built once could not follow


CUBES_PROBLEM = '''
import torch
import torch.nn as nn

META = {"atol": 1e-3, "rtol": 0.0}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return (x ** 3).sum(-1)


def get_inputs():
    return [torch.randn(64, 1024)]


def get_init_inputs():
    return []
'''

CUBES_CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cubes_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
        acc += tl.sum(x * x * x)
    tl.store(out_ptr + row, acc)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()  # the hidden workloads include transposed and strided inputs
        out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        cubes_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=64)
        return out
'''


def test_an_honest_sum_whose_rounding_grows_with_its_inputs_passes_every_distribution(evaluator, monkeypatch):
    """The same sum in another order (64-element pieces, as a Triton reduction loop runs it): its rounding error
    grows with the inputs as its outputs do, 64 times with the inputs scaled by 4, past the problem's fixed atol.
    The evaluator grows atol with the outputs there and judges it correct (the false reject of CUDA-L1's L3/50, in
    small); with atol held fixed and the float64 check off (`test_a_trial_where_rounding_alone_...`), as before,
    the same evaluation is incorrect on a trial off the distribution (scaled by 4, or another)."""
    import eval._reference
    import eval.steps.trials

    problem = problem_from_source(CUBES_PROBLEM, name="cubes", problem_id="t/cubes")
    r = evaluator.evaluate(problem, CUBES_CANDIDATE)
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-500:]}"
    assert {k: r.distributions[k] for k in DISTRIBUTIONS} == {"scaled": "passed", "shifted": "passed",
                                                             "flipped": "passed", "heavy-tailed": "passed"}, r.distributions

    monkeypatch.setattr(eval.steps.trials, "scaled_atol", lambda atol, published, trial: [atol] * len(trial))
    monkeypatch.setattr(eval._reference.Reference, "ill_conditioned", lambda self, *args: "")
    r = evaluator.evaluate(problem, CUBES_CANDIDATE)
    assert r.status is Status.INCORRECT, f"{r.status}: {r.reason}"
    failed = [name for name, state in r.distributions.items() if state == "failed"]  # the first, in secret order
    named = {**{k: f"inputs off the published distribution: {what}" for k, (what, _) in DISTRIBUTIONS.items()},
             **{k: what for k, (what, _) in {**VALUE_SHAPES, **REGIMES}.items()}}
    assert len(failed) == 1 and named[failed[0]] in r.reason, (r.reason, r.distributions)


SOFTMAX_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return []
'''

SOFTMAX_CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=-float("inf"))
    e = tl.exp({shifted})
    tl.store(out_ptr + row * n + offs, e / tl.sum(e), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()  # the hidden workloads include transposed and strided inputs
        out = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=1024)
        return out
'''


def test_a_softmax_that_assumes_the_published_range_fails_on_heavy_tails_and_a_careful_one_passes(evaluator):
    """exp(x) without the row's maximum subtracted is exact on standard normal draws, and on them scaled by 4
    (|x| < 25, far from fp32's overflow at 88.7), shifted or negated. With heavy tails some elements pass 88.7
    (about 17 expected in 256 x 1024; the chance of none is about 1e-7), exp overflows, and that row is NaN: the
    heavy-tailed trial fails it and the verdict names it. The same kernel with the maximum subtracted passes all."""
    problem = problem_from_source(SOFTMAX_PROBLEM, name="softmax", problem_id="t/softmax")
    r = evaluator.evaluate(problem, SOFTMAX_CANDIDATE.format(shifted="x"))
    assert r.status is Status.INCORRECT, f"{r.status}: {r.reason}"
    failed = [name for name, state in r.distributions.items() if state == "failed"]  # the first, in secret order
    assert failed in (["heavy-tailed"], ["large-mean"], ["outlier"], ["near-limits"]), (r.reason, r.distributions)
    r = evaluator.evaluate(problem, SOFTMAX_CANDIDATE.format(shifted="x - tl.max(x, axis=0)"))
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-500:]}"
    assert {k: r.distributions[k] for k in DISTRIBUTIONS} == {"scaled": "passed", "shifted": "passed",
                                                             "flipped": "passed", "heavy-tailed": "passed"}, r.distributions


TAN_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tan(x * 3.0 + 0.1)


def get_inputs():
    return [torch.rand(65536) * 0.45]


def get_init_inputs():
    return []
'''

TAN_CANDIDATE = CANDIDATE.replace("tl.store(out_ptr + offs, {value}, mask=m)",
                                  "a = (x + 0.1 / 3.0) * 3.0\n    tl.store(out_ptr + offs, tl.sin(a) / tl.cos(a), mask=m)")


def test_a_trial_where_rounding_alone_moves_the_answer_is_skipped_as_ill_conditioned(evaluator, monkeypatch):
    """On the published inputs the argument 3x + 0.1 stays in [0.1, 1.45), short of the pole at pi/2. Scaled by 4
    (up to 5.5) or heavy-tailed, some arguments land within about 1e-5 of a pole, where one rounding of the argument
    moves the answer by percents: the fp32 reference itself misses its float64 result there past the tolerance. An
    honest kernel that rounds the argument another way (here (x + 0.1/3) * 3; on a GPU, a fused multiply-add does
    the same) then fails those trials, a false reject. The evaluator decides per problem, from the reference alone,
    that those two trials are ill-conditioned and skips them, naming why; shifted by 2 ([6.1, 7.45)) or negated, the
    argument stays clear of every pole, and those trials run. With the check off the kernel is incorrect, on the
    scaled trial."""
    import eval._reference

    problem = problem_from_source(TAN_PROBLEM, name="tan", problem_id="t/tan")
    r = evaluator.evaluate(problem, TAN_CANDIDATE)
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-500:]}"
    assert (r.distributions["shifted"], r.distributions["flipped"]) == ("passed", "passed"), r.distributions
    for name in ("scaled", "heavy-tailed"):
        assert r.distributions[name].startswith("skipped: ill-conditioned: the reference itself misses its float64 "
                                                "result past the tolerance"), r.distributions

    monkeypatch.setattr(eval._reference.Reference, "ill_conditioned", lambda self, *args: "")
    r = evaluator.evaluate(problem, TAN_CANDIDATE)
    assert r.status is Status.INCORRECT, f"{r.status}: {r.reason}"
    failed = [name for name, state in r.distributions.items() if state == "failed"]  # the first, in secret order
    assert len(failed) == 1 and r.status is Status.INCORRECT, (r.reason, r.distributions)
