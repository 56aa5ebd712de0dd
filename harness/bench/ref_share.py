"""`harness bench eval --part ref-share`: one reference timing for several candidates, on and off, side by side.

A batch of distinct honest Triton candidates of one problem (the scaling batch's largest size: 67M elements on a
GPU) goes through a fresh warm pool on GPU 0 twice: with `eval.share_reference_timing` on, then off. Each row
gives the rate, GPU busy share, phase medians, the GPU gate's shares, and how many candidates each result's
reference timing served (`reference_shared_with`: size -> results); `on_over_off` is the gain. `--workers 4,8`
runs both ways at each count of workers per GPU, side by side in one run (the batch is bound by the GPU gate:
more workers put more trials into each stretch between two timings).

`harness bench eval --part observed-cost`: the same batch with `eval.observed_timing` off, then on (what observed
timing costs the batch's rate, and whether it rejects or caps any honest candidate).
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


def run(n: int = 24, workers: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """The same batch with the switch on, then off, at each count of workers per GPU (0: the evaluator's default):
    a row each, and per count the ratio of their rates (`on_over_off`, keyed by the pool's size)."""
    jobs = batch(n)
    gpus = [0] if bench_device() == "cuda" else None
    rows, ratios = [], {}
    for count in workers:
        rates = {}
        for name, on in (("shared", True), ("own", False)):
            row = run_pool(jobs, gpus=gpus, share_reference_timing=on, workers_per_gpu=count)
            row.pop("statuses", None)
            row["reference_timing"] = name
            rows.append(row)
            rates[name] = row["candidates_per_min"]
            print(f"reference timing {name}, {row['workers']} workers: {row['candidates_per_min']:.1f}/min, windows "
                  f"{row['reference_shared_with']}, gate {row['load']['gates']}", flush=True)
        ratios[str(rows[-1]["workers"])] = round(rates["shared"] / rates["own"], 2)
    return {"candidates": len(jobs), "problem": jobs[0].problem.id, "rows": rows, "on_over_off": ratios}


def run_observed(n: int = 24) -> dict[str, Any]:
    """The batch with observed timing off, then on: a row each (with its verdicts), and the ratio of their rates."""
    jobs = batch(n)
    gpus = [0] if bench_device() == "cuda" else None
    rows = []
    for on in (False, True):
        row = run_pool(jobs, gpus=gpus, observed_timing=on)
        row["observed_timing"] = on
        rows.append(row)
        print(f"observed timing {'on' if on else 'off'}: {row['candidates_per_min']:.1f}/min, "
              f"unexpected {row['unexpected']}", flush=True)
    return {"candidates": len(jobs), "problem": jobs[0].problem.id, "rows": rows,
            "on_over_off": round(rows[1]["candidates_per_min"] / rows[0]["candidates_per_min"], 3)}
