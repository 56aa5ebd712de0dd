"""`harness bench eval --part loop-overhead`: what a timed repetition costs besides the call it times.

The wall bound (`eval.measure.wall_bound`) allows a candidate's blocks a share of the clean reference process's
per-repetition overhead beyond it, so the larger that overhead, the more noise the bound must absorb. Here the
native loop (`eval.worker.native_loop`) times blocks of one elementwise call over `elements` fp32 elements in this
process, once per variant with parts of the repetition turned off, alternating variants over `rounds` rounds:
per variant the median over rounds of (block wall time - sum of its events) / repetitions, and the same with the
worker's fresh-input draw (`problems.runtime.draw_inputs`, as `TimeBlock.seeds` asks) inside the wall time. A
diagnostic of the loop, never a way to evaluate.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

VARIANTS: dict[str, dict[str, bool]] = {  # name -> the loop's switches
    "whole repetition": dict(flush=True, lead=True, capture=True, copies=True),
    "without capture": dict(flush=True, lead=True, capture=False, copies=True),
    "without flush": dict(flush=False, lead=True, capture=True, copies=True),
    "without lead": dict(flush=True, lead=False, capture=True, copies=True),
    "without input copies": dict(flush=True, lead=True, capture=True, copies=False),
    "call alone": dict(flush=False, lead=False, capture=False, copies=False),
}


def run(elements: int = 1 << 24, reps: int = 16, rounds: int = 5) -> dict[str, Any]:
    """One row per variant (and the draw): median excess per repetition in us over `rounds` rounds."""
    from eval.worker.native_loop import NativeLoop
    from harness.corpus import candidates
    from problems.runtime import draw_inputs, load_source

    device = torch.device("cuda", 0)
    loop = NativeLoop(device, key=0x5EED)
    problem = load_source(candidates.problem_source(elements), "loop_overhead_problem")
    sources = [x for x in draw_inputs(problem, 1, device) if isinstance(x, torch.Tensor)]
    buffers = [s.clone() for s in sources]

    def forward(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + y) * 1.5

    def block(switches: dict[str, bool], draw: bool) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        drawn = [[x for x in draw_inputs(problem, 100 + i, device) if isinstance(x, torch.Tensor)]
                 for i in range(reps)] if draw else [sources] * reps
        copies = [list(zip(buffers, d)) for d in drawn] if switches["copies"] else None
        result = loop.block(forward, buffers, reps, first_rep=0, flush=switches["flush"], lead=switches["lead"],
                            capture=switches["capture"], copies=copies)
        wall_ms = (time.perf_counter() - t0) * 1000.0
        return (wall_ms - sum(result.times_ms)) / reps * 1000.0

    rows: dict[str, list[float]] = {name: [] for name in [*VARIANTS, "whole repetition + fresh draws"]}
    for _ in range(rounds):
        for name, switches in VARIANTS.items():
            block(switches, draw=False)  # warm
            rows[name].append(block(switches, draw=False))
        rows["whole repetition + fresh draws"].append(block(VARIANTS["whole repetition"], draw=True))
    table = {name: {"median_us": round(statistics.median(v), 1), "min_us": round(min(v), 1),
                    "max_us": round(max(v), 1)} for name, v in rows.items()}
    return {"elements": elements, "reps": reps, "rounds": rounds, "loop": loop.info(), "excess_per_rep": table}


def print_table(report: dict[str, Any]) -> None:
    print(f"loop overhead: {report['elements']} elements, blocks of {report['reps']}, {report['rounds']} rounds; "
          f"{report['loop']}")
    for name, row in report["excess_per_rep"].items():
        print(f"  {name:34s} median {row['median_us']:9.1f} us/rep  (min {row['min_us']}, max {row['max_us']})")
