"""`harness bench eval --part ref-share`: one reference timing for several candidates, on and off, side by side.

A batch of distinct honest Triton candidates of one problem (the scaling batch's largest size: 67M elements on a
GPU) goes through a fresh warm pool on GPU 0 twice: with `eval.share_reference_timing` on, then off. Each row
gives the rate, GPU busy share, phase medians, the GPU gate's shares, and how many candidates each result's
reference timing served (`reference_shared_with`: size -> results); `on_over_off` is the gain.
"""

from __future__ import annotations

from typing import Any

from harness.bench.pools import CPU_SIZES, GPU_SIZES, bench_device, run_pool
from harness.corpus import candidates


def batch(n: int) -> list[candidates.BenchJob]:
    """`n` distinct honest Triton candidates (two block sizes) of the largest problem of the scaling batch."""
    sizes = GPU_SIZES if bench_device() == "cuda" else CPU_SIZES
    largest = candidates.problem(sizes[-1]).id
    jobs = [j for j in candidates.honest_triton_batch(sizes, (n + 1) // 2) if j.problem.id == largest]
    return jobs[:n]


def run(n: int = 24) -> dict[str, Any]:
    """The same batch with the switch on, then off: one row each and the ratio of their rates."""
    jobs = batch(n)
    gpus = [0] if bench_device() == "cuda" else None
    rows = {}
    for name, on in (("shared", True), ("own", False)):
        row = run_pool(jobs, gpus=gpus, share_reference_timing=on)
        row.pop("statuses", None)
        rows[name] = row
        print(f"reference timing {name}: {row['candidates_per_min']:.1f}/min, windows "
              f"{row['reference_shared_with']}, gate {row['load']['gates']}", flush=True)
    return {"candidates": len(jobs), "problem": jobs[0].problem.id, "rows": rows,
            "on_over_off": round(rows["shared"]["candidates_per_min"] / rows["own"]["candidates_per_min"], 2)}
