"""Reward functions: an `EvalResult` (and the turn) to one float, selected by name per request or by config.

A reward function takes `(result, turn)` and returns a float. Built in:

- `log_speedup` (default): a correct candidate earns 1 + ln(speedup) (clipped to [-1, 3]) when it was timed,
  1 when it was not (a CPU server: correctness only); failures earn fixed penalties, worst for `rejected`
  and `format_error`, so gaming an integrity check never pays more than an honest wrong answer.
- `fast_p` (`fast_1`, `fast_1.5`, `fast_0`...): 1 when correct and the measured speedup is at least p, else 0
  (`fast_0`: correct at all). An untimed correct result reaches only p = 0.
- `kevin`: Kevin-32B's per-turn score, 0.3 x correct + speedup x correct (speedup 0 when not timed). Its
  discounted per-turn return (gamma 0.4) is computed over a trajectory by `KernelEnv`.

Plug in your own with `register(name, fn)` in a module named by `harness serve --rewards MODULE`. Every
function is checked when registered: it must not give `rejected` more than `incorrect`.
"""

from __future__ import annotations

import math
import re
from typing import Callable

from eval import EvalResult, Status

RewardFn = Callable[[EvalResult, int], float]
DEFAULT = "log_speedup"

PENALTIES: dict[Status, float] = {  # log_speedup's reward for each failure status
    Status.INCORRECT: -0.25,
    Status.RUNTIME_ERROR: -0.5,
    Status.TIMEOUT: -0.5,
    Status.CRASH: -0.5,
    Status.SKIPPED: -0.5,  # not run here (CUDA on a CPU server): no reward for not being judged
    Status.PROBLEM_ERROR: -0.5,  # the problem is broken, not the candidate: not judged either (drop such samples)
    Status.COMPILE_ERROR: -0.75,
    Status.FORMAT_ERROR: -1.0,
    Status.REJECTED: -1.0,
}


class RewardError(ValueError):
    """An unknown reward name, or a reward function that breaks the rules."""


def log_speedup(result: EvalResult, turn: int = 1) -> float:
    """1 + ln(speedup) for a correct, timed candidate (clipped to [-1, 3]); 1 when untimed; penalties otherwise."""
    if result.status is not Status.CORRECT:
        return PENALTIES.get(result.status, PENALTIES[Status.REJECTED])
    if result.speedup is None or not result.timing_meaningful or not result.speedup > 0:
        return 1.0
    return max(-1.0, min(3.0, 1.0 + math.log(result.speedup)))


def fast_p(p: float) -> RewardFn:
    """1 when correct with a measured speedup >= p (p = 0: correct at all), else 0."""

    def reward(result: EvalResult, turn: int = 1) -> float:
        if result.status is not Status.CORRECT:
            return 0.0
        if p <= 0:
            return 1.0
        timed = result.speedup is not None and result.timing_meaningful
        return 1.0 if timed and result.speedup >= p else 0.0

    return reward


def kevin(result: EvalResult, turn: int = 1) -> float:
    """Kevin-32B's per-turn score: 0.3 for correct plus the speedup (0 when untimed); 0 for any failure."""
    if result.status is not Status.CORRECT:
        return 0.0
    timed = result.speedup is not None and result.timing_meaningful
    return 0.3 + (float(result.speedup) if timed else 0.0)


_REGISTRY: dict[str, RewardFn] = {}
_FAST = re.compile(r"^fast_(\d+(?:\.\d+)?)$")


def register(name: str, fn: RewardFn) -> None:
    """Add a reward function under `name`; refused if it pays a `rejected` verdict more than an `incorrect` one."""
    rejected = fn(EvalResult(status=Status.REJECTED, reason="integrity: probe"), 1)
    incorrect = fn(EvalResult(status=Status.INCORRECT, reason="probe"), 1)
    if not rejected <= incorrect:
        raise RewardError(f"reward {name!r} gives rejected ({rejected}) more than incorrect ({incorrect})")
    _REGISTRY[name] = fn


def get(name: str | None) -> RewardFn:
    """The reward function called `name` (None: the default); `fast_<p>` works for any p."""
    name = name or DEFAULT
    if name in _REGISTRY:
        return _REGISTRY[name]
    match = _FAST.match(name)
    if match:
        return fast_p(float(match.group(1)))
    raise RewardError(f"unknown reward {name!r}; valid: {', '.join(names())}, or fast_<p> for any p")


def names() -> list[str]:
    return sorted(_REGISTRY)


def score(name: str | None, result: EvalResult, turn: int = 1) -> float:
    """The reward `name` gives `result` (a float, never NaN)."""
    value = float(get(name)(result, turn))
    if math.isnan(value):
        raise RewardError(f"reward {name!r} returned NaN")
    return value


for _name, _fn in (("log_speedup", log_speedup), ("kevin", kevin), ("fast_0", fast_p(0.0)),
                   ("fast_1", fast_p(1.0)), ("fast_1.5", fast_p(1.5)), ("fast_2", fast_p(2.0))):
    register(_name, _fn)
