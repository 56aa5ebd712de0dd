"""Requests carry nothing that tells a trial's kind (issue 52): every correctness trial, a published draw, a hidden
shape set, a hidden workload or inputs off the published distribution, reaches the worker as the same `Run` request
with the parent's inputs carried, and in an order shuffled with the evaluation's secret (the first is always a
published draw, the warm-up).

The class: a shortcut that is exact on the published distribution and wrong off it, taken everywhere except where
the candidate can tell the trial is off it. Before, the request's `distribution=` label said so, and the trials off
the distribution were always the last ones, so counting calls said so too. Asserted here on what the worker
receives (each frame's bytes as written on its pipe) and end to end, on the CPU pipeline."""

from __future__ import annotations

import json
import random
import types

import pytest

import eval.steps.context
import eval.steps.trials
import eval.crossing.wire
from eval import Status
from eval.crossing import protocol as p
from problems import derive_seed
from problems.problem import problem_from_source

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # every test runs sandboxed evaluator workers

EVALUATOR = dict(device="cpu", cache_dir=None, workers_per_gpu=1, import_timeout_s=120)

PROBLEM = '''
import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.clamp(x, min=-10.0)


def get_inputs():
    return [torch.randn(N)]


def get_extra_inputs():
    return [[torch.randn(1000)]]


def get_init_inputs():
    return []
'''

CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

CALLS = [0]


@triton.jit
def clamp_kernel(x_ptr, out_ptr, n, HONEST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.maximum(x, -10.0) if HONEST else x
    tl.store(out_ptr + offs, y, mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        CALLS[0] += 1
        out = torch.empty_like(x)
        clamp_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), HONEST={honest}, BLOCK=1024)
        return out
'''


def _problem():
    return problem_from_source(PROBLEM, name="clamp_extra", problem_id="t/clamp_extra")


@pytest.fixture
def frames(monkeypatch):
    """Every Run frame the parent writes to a worker's pipe: its JSON header, tensor specs included, as sent."""
    seen: list[bytes] = []
    real = eval.crossing.wire._frame_head

    def recording(header, specs, pipe_bytes):
        head = real(header, specs, pipe_bytes)
        if header.get("cmd") == "run":
            seen.append(head[eval.crossing.wire.PREFIX.size:])
        return head

    monkeypatch.setattr(eval.crossing.wire, "_frame_head", recording)
    return seen


def test_every_trial_kind_reaches_the_worker_as_the_same_request(evaluator, frames):
    """The published draws and the four off-distribution trials send byte-identical frames (same header, same
    tensor specs, same offsets); the hidden shape set differs only by its sizes, which its tensor shows anyway."""
    r = evaluator.evaluate(_problem(), CANDIDATE.format(honest="True"))
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-500:]}"
    assert len(frames) == r.trials, (len(frames), r.trials)
    decoded = [json.loads(f) for f in frames]
    for header in decoded:
        assert p.decode_request({k: v for k, v in header.items() if k != "tensors"}) == p.Run(args=header["args"])
    # the published draws and every trial of other values at the published size (off the distribution, value
    # shapes, regimes): one frame, byte for byte
    off = sum(1 for outcome in r.distributions.values() if outcome == "passed")
    assert off >= 4, r.distributions
    published = [f for f, h in zip(frames, decoded) if h["args"][0]["size"] == [4096] and h["args"][0]["stride"] == [1]]
    # (a layout workload that leaves a 1-D input as it is sends that frame too)
    assert len(published) >= 5 + off and len(set(published)) == 1, (len(published), off, set(published))
    hidden = [h for h in decoded if h["args"][0]["size"] == [1000]]
    assert len(hidden) == 1
    assert _without_sizes(hidden[0]) == _without_sizes(decoded[0])


def _without_sizes(header: dict) -> str:
    sizes = {"size", "stride", "shape", "nbytes", "offset"}
    strip = lambda v: ({k: strip(x) for k, x in v.items() if k not in sizes} if isinstance(v, dict)  # noqa: E731
                       else [strip(x) for x in v] if isinstance(v, list) else v)
    return json.dumps(strip(header), sort_keys=True)


def test_the_trial_order_is_secret_and_starts_with_a_published_draw():
    """Over secrets, the first trial is always a published draw and the off-distribution trials move about."""
    labels = ["trial0", "trial1", "trial2", "trial3", "trial4", "extra0", "dist-scaled", "dist-shifted",
              "dist-flipped", "dist-heavy-tailed"]
    orders = {tuple(_order(secret, labels)) for secret in range(1, 41)}
    assert all(order[0] == "trial0" for order in orders)
    assert len({order.index("dist-scaled") for order in orders}) >= 5, orders


def _order(secret: int, labels: list[str]) -> list[str]:
    """The order `trial_plan` gives `labels` under `secret` (its own shuffle, asserted in the test below)."""
    rest = labels[1:]
    random.Random(derive_seed(secret, "order")).shuffle(rest)
    return [labels[0], *rest]


def _plan_labels(evaluator, monkeypatch) -> list[str]:
    """The trial plan's labels before its shuffle, as `trial_plan` builds them for this problem (an honest run's)."""
    before: list[list[str]] = []

    class Recording(random.Random):
        def shuffle(self, x):  # type: ignore[override]
            before.append([t.label for t in x])
            super().shuffle(x)

    with monkeypatch.context() as patch:
        patch.setattr(eval.steps.trials.random, "Random", Recording)
        r = evaluator.evaluate(_problem(), CANDIDATE.format(honest="True") + "\n# plan\n")
    assert r.status is Status.CORRECT and before, f"{r.status}: {r.reason}"
    return ["trial0", *before[-1]]


def test_a_shortcut_taken_except_where_the_trial_position_was_off_distribution_fails(evaluator, monkeypatch):
    """The candidate copies its input (exact on standard normal draws: clamp at -10 never clamps) on its first 6
    calls, the published draws and the hidden shape set as the trials used to run, and is honest afterwards, where
    the four trials off the distribution used to be. Under a secret whose shuffle puts the trial scaled by 4 among
    the first 6, it is incorrect, there; the honest kernel passes under the same secret."""
    labels = _plan_labels(evaluator, monkeypatch)
    secret = next(s for s in range(1, 1000) if _order(s, labels).index("dist-scaled") < 6)
    monkeypatch.setattr(eval.steps.context, "secrets", types.SimpleNamespace(randbits=lambda bits: secret))
    plans = []
    real_plan = eval.steps.trials.trial_plan
    monkeypatch.setattr(eval.steps.trials, "trial_plan", lambda ctx: plans.append(real_plan(ctx)) or plans[-1])
    positional = CANDIDATE.format(honest="CALLS[0] > 6")
    r = evaluator.evaluate(_problem(), positional)
    assert [t.label for t in plans[-1]] == _order(secret, labels)
    assert r.status is Status.INCORRECT, f"{r.status}: {r.reason}"
    assert "every floating-point input multiplied by 4" in r.reason and r.distributions["scaled"] == "failed", (
        r.reason, r.distributions)
    r = evaluator.evaluate(_problem(), CANDIDATE.format(honest="True") + "\n# honest\n")
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-500:]}"


def test_past_the_carry_limit_published_draws_are_drawn_by_the_worker_and_the_rest_run_smaller(evaluator, frames,
                                                                                              monkeypatch):
    """Carrying every trial's inputs halved the 24-candidate batch's rate at 2**26 elements: past
    `CARRY_LIMIT_BYTES` (here 4 KiB, under one 16 KiB draw), a published draw is drawn by the worker from its seed
    (confirmed by fingerprint), and the trials off the published inputs run on the problem with N halved until a draw
    fits, carried. A kernel that is right only at the published size still fails there; the honest one passes."""
    monkeypatch.setattr(eval.steps.trials, "CARRY_LIMIT_BYTES", 4 << 10)
    r = evaluator.evaluate(_problem(), CANDIDATE.format(honest="True") + "\n# seeded\n")
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error[-500:]}"
    decoded = [json.loads(f) for f in frames]
    seeded = [h for h in decoded if h.get("seed")]
    carried = [h for h in decoded if not h.get("seed")]
    assert len(seeded) == 5 and all(h["args"] == [] for h in seeded)  # the published draws, nothing carried
    assert carried and all(h["args"][0]["size"][0] * 4 <= 4 << 10 for h in carried)  # the rest fit the limit
    assert any("ran at reduced sizes" in flag for flag in r.flags) and "4096" not in " ".join(r.flags)
    assert not any("inputs carried to the worker" in flag for flag in r.flags)  # the worker's draws matched
    fixed = CANDIDATE.format(honest="True").replace("x.numel(), HONEST", "4096, HONEST")  # the published size hard-coded
    r = evaluator.evaluate(_problem(), fixed)
    assert r.status is not Status.CORRECT, f"{r.status}: {r.reason}"
