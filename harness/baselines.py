"""One problem's baselines as a row: eager and torch.compile times, the roofline floor and the SOL fraction of each.

What `harness baseline` prints and `harness bench suite` tabulates, computed in one place.
"""

from __future__ import annotations

import time
from typing import Any

from eval import Ceilings, Evaluator
from problems import Problem


def baseline_row(ev: Evaluator, problem: Problem, ceilings: Ceilings | None) -> dict[str, Any]:
    """Eager and torch.compile times (µs) of one problem, its floor and SOL fractions, or its error."""
    row: dict[str, Any] = {"id": problem.id, "level": problem.level, "dtype": problem.dtype}
    floor = ceilings.floor_s(problem.flops, problem.bytes_moved, problem.dtype) if ceilings else None
    row["floor_us"] = None if floor is None else floor * 1e6
    t0 = time.perf_counter()
    try:
        base = ev.baseline(problem)
    except Exception as exc:  # noqa: BLE001  one failing problem must not end the benchmark
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        return row
    row["eager_us"] = base["eager"]["median_ms"] * 1000
    row["compile_us"] = base["compiled"]["median_ms"] * 1000
    row["baseline_seconds"] = round(time.perf_counter() - t0, 1)
    if floor is not None:
        row["eager_sol"] = row["floor_us"] / row["eager_us"]
        row["compile_sol"] = row["floor_us"] / row["compile_us"]
    return row
