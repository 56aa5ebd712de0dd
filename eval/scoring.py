"""Scores over problems: fast_p, geometric-mean speedup, compile and correctness rates.

`results` maps every problem id in the selection to its result (None when the problem has
no result), so missing problems count as failures instead of silently shrinking the
denominator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from eval.result import EvalResult

DEFAULT_PS: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)


@dataclass
class Scores:
    """Aggregate scores of one set of results."""

    n_problems: int
    fast_p: dict[float, float] = field(default_factory=dict)
    geomean_speedup: float | None = None
    compile_rate: float = 0.0
    correct_rate: float = 0.0


def fast_p(results: Mapping[str, EvalResult | None], p: float) -> float:
    """Share of problems whose result is correct with a measured speedup strictly above p."""
    if not results:
        return 0.0
    hits = sum(1 for r in results.values() if r is not None and r.is_correct and r.speedup is not None and r.speedup > p)
    return hits / len(results)


def geomean_speedup(results: Mapping[str, EvalResult | None]) -> float | None:
    """Geometric mean of speedups over correct results that have one (None if there are none)."""
    speedups = [r.speedup for r in results.values() if r is not None and r.is_correct and r.speedup and r.speedup > 0]
    if not speedups:
        return None
    return math.exp(sum(math.log(s) for s in speedups) / len(speedups))


def score(results: Mapping[str, EvalResult | None], ps: Sequence[float] = DEFAULT_PS) -> Scores:
    """All scores at once."""
    n = len(results)
    done = [r for r in results.values() if r is not None]
    return Scores(
        n_problems=n,
        fast_p={p: fast_p(results, p) for p in ps},
        geomean_speedup=geomean_speedup(results),
        compile_rate=sum(r.compiled for r in done) / n if n else 0.0,
        correct_rate=sum(r.is_correct for r in done) / n if n else 0.0,
    )


# --------------------------------------------------------------------------------------------------
# Per-sample metrics and confidence intervals (used by `harness report`).
#
# With n independent samples per problem, "best of all n" over-rewards runs that drew more samples.
# The unbiased estimator of Chen et al. (2021) gives the chance that at least one of k samples drawn
# without replacement from the n succeeds: 1 - C(n-c, k) / C(n, k), with c the successful samples.
# pass@k counts correct samples; fast_p@k counts samples correct with a speedup strictly above p.
# Missing samples (a run still going, an agent error) are failures: n is the planned sample count.
# --------------------------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of P(at least one of k samples succeeds) from c successes among n samples."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _solved(result: EvalResult | None, p: float | None) -> bool:
    """Correct (p None), or correct with a measured speedup strictly above p."""
    if result is None or not result.is_correct:
        return False
    return p is None or (result.speedup is not None and result.speedup > p)


def at_k_per_problem(
    samples: Mapping[str, Sequence[EvalResult | None]], k: int, n: int, p: float | None = None
) -> dict[str, float]:
    """Each problem's unbiased estimate of fast_p@k (or pass@k when p is None).

    `samples` maps every problem of the selection to its samples' results (each sample's best
    over its turns; fewer than n entries: the missing samples failed).
    """
    out = {}
    for pid, results in samples.items():
        if len(results) > n:
            raise ValueError(f"problem {pid} has {len(results)} samples, more than n={n}")
        out[pid] = pass_at_k(n, sum(_solved(r, p) for r in results), k)
    return out


def at_k(samples: Mapping[str, Sequence[EvalResult | None]], k: int, n: int, p: float | None = None) -> float:
    """fast_p@k (pass@k when p is None): the per-problem estimates averaged over all problems."""
    per_problem = at_k_per_problem(samples, k, n, p)
    return sum(per_problem.values()) / len(per_problem) if per_problem else 0.0


def bootstrap_ci(
    values: Sequence[float], *, level: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-problem `values` (problems resampled).

    Deterministic for a given seed: the same values give the same interval. With no values the
    mean is 0 by convention (as fast_p of an empty selection) and so is the interval.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return (float(lo), float(hi))
