"""Scores over problems: fast_p, geometric-mean speedup, compile and correctness rates.

`results` maps every problem id in the selection to its result (None when the problem has
no result), so missing problems count as failures instead of silently shrinking the
denominator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

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
