"""`harness bench eval --part steps`: what bounds one GPU's rate, found by leaving steps out.

A diagnostic, never a way to evaluate: the scaling batch (honest Triton candidates) on GPU 0, once
with the whole check pipeline and once per variant with some of its exclusive steps left out, each
in a fresh pool. If leaving a step out raises the rate, that step is on the bound. Each row also
gives the GPU gate's shares of the wall time (`eval.process.pool.GpuGate.usage`): when exclusive plus shared
is about 1, the gate is the bound, and only shorter holds raise the rate.
"""

from __future__ import annotations

from typing import Any

from eval import PIPELINE, Step
from harness.bench.pools import GPU_SIZES, run_pool
from harness.corpus import candidates

VARIANTS: dict[str, frozenset[str]] = {
    "whole pipeline": frozenset(),
    "without host_bound": frozenset({"host_bound"}),
    "without hidden_work": frozenset({"hidden_work"}),
    "timing the only exclusive step": frozenset({"host_bound", "hidden_work", "kernels"}),
    "without timing": frozenset({"timing", "host_bound"}),
}


def pipeline_without(names: frozenset[str]) -> tuple[Step, ...]:
    """The whole check pipeline but the named steps; a name that is no step is refused (a renamed step would
    silently stay in)."""
    unknown = set(names) - {step.name for step in PIPELINE}
    if unknown:
        raise ValueError(f"no pipeline step named {sorted(unknown)}")
    return tuple(step for step in PIPELINE if step.name not in names)


def run(copies: int = 8) -> dict[str, Any]:
    """One row per variant: rate, GPU busy, phase medians and the gate's shares."""
    pipelines = {name: pipeline_without(left_out) for name, left_out in VARIANTS.items()}  # refused before any runs
    rows = {}
    for name, pipeline in pipelines.items():
        row = run_pool(candidates.honest_triton_batch(GPU_SIZES, copies), gpus=[0], pipeline=pipeline)
        row.pop("statuses", None)
        rows[name] = row
        busy = row["gpu_busy_share"]
        print(f"{name}: {row['candidates_per_min']:.1f}/min, GPU busy "
              f"{'n/a' if busy is None else f'{busy:.0%}'}, gate {row['load']['gates']}", flush=True)
    return {"candidates": 6 * copies, "variants": rows}
