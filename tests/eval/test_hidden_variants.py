"""Trials a guard cannot tell apart, hidden workloads and value regimes (issues 52 item 3, 53 items 1-2;
`problems.variants`, `runtime.derived_workloads`), on the CPU pipeline and at the unit level.

Each class: a realistic wrong kernel that the published draws pass, caught by one variant, and its honest twin
passing every variant."""

from __future__ import annotations

import pytest
import torch

from eval import Status
from problems import (VALUE_SHAPES, compare, derive_seed, derived_workloads, input_only_constants, load_source,
                      sizes_varied_by_extras)
from problems.problem import problem_from_source
from problems.variants import HEAVY_COUNT

EVALUATOR = dict(device="cpu", cache_dir=None, workers_per_gpu=1, import_timeout_s=120)


def test_every_value_shape_stays_inside_each_inputs_published_range():
    published = [torch.rand(64, 512), torch.randn(64, 512) * 3 + 1, torch.randint(0, 512, (64,))]
    for name, (_, change) in VALUE_SHAPES.items():
        moved = change(published, 12345)
        if moved is None:
            continue
        for before, after in zip(published, moved):
            if before.is_floating_point():
                assert before.min() <= after.min() and after.max() <= before.max(), name
            assert after.shape == before.shape and after.dtype == before.dtype, name


SPARSE = ("sparse-heavy", "sparse-heavy-shared", "sparse-heavy-opposed")
REDUCTIONS = {  # realistic losses and reductions of two same-shaped inputs, as a candidate may compute them
    "mse": lambda x, y: ((x - y) ** 2).mean(),
    "l1": lambda x, y: (x - y).abs().mean(),
    "smooth-l1": lambda x, y: torch.nn.functional.smooth_l1_loss(x, y),
    "dot": lambda x, y: (x * y).mean(),
    "hinge": lambda x, y: torch.clamp(1 - x * y, min=0).mean(),
    "kl": lambda x, y: (y * (y.clamp_min(1e-6).log() - x.clamp_min(1e-6).log())).mean(),
    "mean-of-one": lambda x, y: y.mean(),
}


@pytest.mark.parametrize("draw", ["randn", "rand"])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_a_reduction_over_every_tenth_element_misses_a_sparse_heavy_trial_for_every_secret(name, draw):
    """A reduction computed over every 10th element (3 starts) is caught by at least one of the three sparse-heavy
    trials, at the evaluator's fp32 tolerance (1e-4), for every one of 20 secrets, not for some: 23 (a prime) heavy
    positions meet k * m != 23 of them. Positions of each input's own let two inputs' errors cancel (mse of two
    randn draws went through for 17 of 6,000 draws and secrets, a dot product for about half); positions shared by
    same-shaped inputs make them one kind of term, heavy for a product at like ends and for a difference at
    opposite ends. Divergences (a heavy and a light value) need positions of their own. The bound is a heavy term
    over the mean's count against atol, so the inputs are 4,096 elements (at 65,536 a rand draw's heavy terms of at
    most 1 are under it). The honest full reduction passes every trial."""
    g = torch.Generator().manual_seed(0)
    a, b = (getattr(torch, draw)(1 << 12, generator=g) for _ in range(2))
    reduce = REDUCTIONS[name]
    for secret in range(20):
        trials = [VALUE_SHAPES[kind][1]([a, b], derive_seed(secret, f"variant-{kind}")) for kind in SPARSE]
        for start in (0, 3, 9):
            missed = [kind for kind, (x, y) in zip(SPARSE, trials)
                      if compare([reduce(x.double(), y.double()).float()],
                                 [reduce(x[start::10], y[start::10])], 1e-4, 1e-4) is not None]
            assert missed, (secret, start)
        for x, y in trials:
            assert compare([reduce(x.double(), y.double()).float()], [reduce(x, y)], 1e-4, 1e-4) is None
    assert HEAVY_COUNT > 10 and all(HEAVY_COUNT % k for k in range(2, HEAVY_COUNT))


def test_shared_heavy_positions_are_one_set_per_shape_at_like_or_opposite_ends():
    g = torch.Generator().manual_seed(1)
    inputs = [torch.randn(64, 32, generator=g), torch.rand(64, 32, generator=g), torch.randn(64, 32, generator=g),
              torch.randn(2048, generator=g)]
    own, like, opposed = (VALUE_SHAPES[kind][1](inputs, 7) for kind in SPARSE)

    def heavy(t: torch.Tensor, source: torch.Tensor) -> set[int]:
        ends = (t == source.min()) | (t == source.max())
        return set(ends.reshape(-1).nonzero().reshape(-1).tolist())

    assert all(len(heavy(t, s)) == HEAVY_COUNT for trial in (own, like, opposed) for t, s in zip(trial, inputs))
    assert len({frozenset(heavy(t, s)) for t, s in zip(own[:3], inputs)}) == 3  # each input's own
    for trial in (like, opposed):
        assert len({frozenset(heavy(t, s)) for t, s in zip(trial[:3], inputs)}) == 1  # one set for the shape
        assert heavy(trial[3], inputs[3]) != heavy(trial[0], inputs[0])  # another shape, another set
    first_high = bool(inputs[0].max().abs() >= inputs[0].min().abs())
    pick = min(heavy(like[0], inputs[0]))
    ends = [lambda t: t.max(), lambda t: t.min()]
    for order in range(3):
        assert like[order].reshape(-1)[pick] == ends[not first_high](inputs[order])
        assert opposed[order].reshape(-1)[pick] == ends[(not first_high) != (order % 2 == 1)](inputs[order])


MEAN_PROBLEM = '''
import torch
import torch.nn as nn

META = {"atol": 1e-2, "rtol": 1e-2}
N = 65536


class Model(nn.Module):
    def forward(self, x):
        return x.mean().reshape(1)


def get_inputs():
    return [torch.rand(N)]


def get_init_inputs():
    return []
'''

MEAN_CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc) / n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(1, device=x.device, dtype=x.dtype)
        sum_kernel[(1,)](x, out, x.numel(), BLOCK=4096)
        {guard}
        return out
'''


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_closed_form_behind_a_range_guard_is_caught_and_the_honest_mean_passes(evaluator):
    """The shortcut returns 0.5 (the mean of torch.rand) whenever the first 64 inputs lie in [0, 1], the published
    range: every trial that moves the inputs (scaled, shifted, negated, heavy-tailed) leaves that range, so the guard
    sends them all to the honest path. A value shape that keeps the range (concentrated near one end) finds it."""
    problem = problem_from_source(MEAN_PROBLEM, name="mean", problem_id="t/mean")
    guarded = MEAN_CANDIDATE.format(guard="if bool(((x[:64] >= 0) & (x[:64] <= 1)).all()):\n"
                                          "            out = torch.full_like(out, 0.5)")
    r = evaluator.evaluate(problem, guarded)
    assert r.status is Status.INCORRECT, f"{r.status}: {r.reason}"
    caught_by = ("a value shape inside the published range", "a value regime", "a hidden workload with a single row")
    assert any(kind in r.reason for kind in caught_by), r.reason  # the first, in secret order, that stays in range
    r = evaluator.evaluate(problem, MEAN_CANDIDATE.format(guard=""))
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-500:]}"
    assert r.distributions["near-one-end"] == "passed" and r.distributions["sparse-heavy"] == "passed", r.distributions


ROWS_PROBLEM = '''
import torch
import torch.nn as nn

batch_size = 64
dim = 256


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

ROWS_CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, stride, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + offs, mask=offs < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n + offs, e / tl.sum(e), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        {prepare}
        out = torch.empty({shape}, device=x.device, dtype=x.dtype)
        softmax_kernel[({grid},)](x, out, {stride}, x.shape[1], BLOCK={block})
        return out
'''


HONEST_BLOCK = "triton.next_power_of_2(x.shape[1])"  # one tile as wide as the row, whatever its width


def _rows_problem():
    return problem_from_source(ROWS_PROBLEM, name="rows", problem_id="t/rows")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("bug, fields, kind", [
    ("contiguity assumed (row stride from the width)", dict(prepare="pass", stride="x.shape[1]"),
     ("non-contiguous inputs", "transposed inputs")),
    ("the published shape hard-coded", dict(shape="(64, 256)"), None),
    ("a tile as wide as the published row, no loop past it", dict(block="256"), ("wide rows",)),
], ids=["row-stride", "hard-coded-shape", "tile-of-the-published-width"])
def test_a_shape_bug_is_caught_on_a_hidden_workload_named_by_kind_without_sizes(evaluator, bug, fields, kind):
    honest = dict(prepare="x = x.contiguous()", grid="x.shape[0]", stride="x.stride(0)", shape="x.shape",
                  block=HONEST_BLOCK)
    r = evaluator.evaluate(_rows_problem(), ROWS_CANDIDATE.format(**{**honest, **fields}))
    assert r.status in (Status.INCORRECT, Status.RUNTIME_ERROR), f"{bug}: {r.status}: {r.reason}"
    assert "on a hidden workload with " in r.reason, r.reason
    if kind:
        assert any(f"on a hidden workload with {k}" in r.reason and r.workloads[k] == "failed" for k in kind), r.workloads
    for size in ("33", "31", "65", "63", "127", "129", "1025", "257"):  # no hidden size reaches the verdict
        assert size not in r.reason, r.reason


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_honest_row_kernel_passes_every_workload(evaluator):
    r = evaluator.evaluate(_rows_problem(), ROWS_CANDIDATE.format(prepare="x = x.contiguous()", grid="x.shape[0]",
                                                                  stride="x.stride(0)", shape="x.shape",
                                                                  block=HONEST_BLOCK))
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-500:]}"
    assert {k: v for k, v in r.workloads.items() if v != "passed"} == {}, r.workloads
    assert set(r.workloads) == {"odd sizes", "prime sizes", "a single row", "wide rows", "narrow rows",
                                "transposed inputs", "non-contiguous inputs"}, r.workloads


def test_derived_workloads_keep_to_the_published_element_count_and_need_a_width_for_wide_and_narrow_rows():
    rows = load_source(ROWS_PROBLEM, "<rows>")
    workloads = derived_workloads(rows, ["batch_size", "dim"])
    assert workloads["wide rows"] == {"batch_size": 12, "dim": 1025}
    assert workloads["narrow rows"] == {"batch_size": 257, "dim": 3}
    for kind, sizes in workloads.items():
        shape = {"batch_size": 64, "dim": 256, **sizes}
        assert shape["batch_size"] * shape["dim"] <= 64 * 256, kind
    flat = load_source(ROWS_PROBLEM.replace("dim = 256", "dim = 8"), "<flat>")
    assert set(derived_workloads(flat, ["batch_size", "dim"])) == {"odd sizes", "prime sizes", "a single row",
                                                                   "wide rows"}  # a row of 8: none narrower
    one = load_source(ROWS_PROBLEM, "<one>")
    assert set(derived_workloads(one, ["batch_size"])) == {"odd sizes", "prime sizes", "a single row"}  # no width


OWN_SHAPES_PROBLEM = '''
import torch
import torch.nn as nn

ROWS = 64
COLS = 256
HEAD_DIM = 32


class Model(nn.Module):
    def forward(self, x, y):
        return torch.softmax(x, dim=-1), y * 2


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, HEAD_DIM)]


def get_extra_inputs():
    return [[torch.randn(ROWS // 2 + 1, COLS // 4 + 3), torch.randn(ROWS // 2 + 1, HEAD_DIM)]]


def get_init_inputs():
    return []
'''


def test_a_problem_with_shapes_of_its_own_gets_wide_and_narrow_rows_over_the_sizes_they_vary():
    """Its own hidden shapes read every size, so none is input-only; the ones they compute another size from (ROWS,
    COLS) are the ones a kernel must take at any value, and the ones they pass on as they are (HEAD_DIM) stay."""
    assert input_only_constants(OWN_SHAPES_PROBLEM) == []
    assert sizes_varied_by_extras(OWN_SHAPES_PROBLEM) == ["COLS", "ROWS"]
    module = load_source(OWN_SHAPES_PROBLEM, "<own shapes>")
    workloads = derived_workloads(module, sizes_varied_by_extras(OWN_SHAPES_PROBLEM))
    assert workloads["wide rows"] == {"ROWS": 12, "COLS": 1025} and workloads["narrow rows"] == {"ROWS": 257, "COLS": 3}
    assert sizes_varied_by_extras(ROWS_PROBLEM) == []  # no shapes of its own: its sizes are input-only instead
