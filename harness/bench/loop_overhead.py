"""`harness bench eval --part loop-overhead`: what a timed repetition costs besides the call it times.

The wall bound (`eval.timing.claim_bounds.wall_bound`) allows a candidate's blocks a share of the clean reference
process's per-repetition overhead beyond it, so the larger that overhead, the more noise the bound must absorb. Here the
native loop (`eval.worker.native_loop`) times blocks of one elementwise call over `elements` fp32 elements in this
process, once per variant with parts of the repetition turned off, alternating variants over `rounds` rounds:
per variant the median over rounds of (block wall time - sum of its events) / repetitions, and the same with the
worker's fresh-input draw (`problems.runtime.draw_inputs`, as `TimeBlock.seeds` asks) inside the wall time. The
whole repetition is also timed with the capture kernels built as in `KERNEL_VARIANTS` (a second loop, alternating
with the first), so a change to capture.cu is measured side by side. Each row also gives the loop's own GPU time a
repetition by part, from its events (`protocol.OUTSIDE_PARTS`), so the GPU's share of the excess is seen directly
and the rest is host time. A diagnostic of the loop, never a way to evaluate.
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

KERNEL_VARIANTS: dict[str, dict[str, int]] = {  # row name -> capture.cu macros
    "whole repetition, capture with 8 loads per thread in flight": {"KH_UNROLL": 8},
}


def run(elements: int = 1 << 24, reps: int = 16, rounds: int = 5) -> dict[str, Any]:
    """One row per variant (and the draw): median excess per repetition in us over `rounds` rounds."""
    from eval import OUTSIDE_PARTS, NativeLoop, compile_cubin
    from harness.corpus import candidates
    from problems import draw_inputs, load_source

    device = torch.device("cuda", 0)
    loop = NativeLoop(device, key=0x5EED)
    props = torch.cuda.get_device_properties(device)
    arch = f"sm_{props.major}{props.minor}"
    variants = {name: NativeLoop(device, key=0x5EED, cubin=compile_cubin(arch, defines=defines))
                for name, defines in KERNEL_VARIANTS.items()}
    problem = load_source(candidates.problem_source(elements), "loop_overhead_problem")
    sources = [x for x in draw_inputs(problem, 1, device) if isinstance(x, torch.Tensor)]
    buffers = [s.clone() for s in sources]

    def forward(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + y) * 1.5

    def block(switches: dict[str, bool], draw: bool, timer: NativeLoop = loop) -> tuple[float, list[float]]:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        drawn = [[x for x in draw_inputs(problem, 100 + i, device) if isinstance(x, torch.Tensor)]
                 for i in range(reps)] if draw else [sources] * reps
        copies = [list(zip(buffers, d)) for d in drawn] if switches["copies"] else None
        result = timer.block(forward, buffers, reps, first_rep=0, flush=switches["flush"], lead=switches["lead"],
                            capture=switches["capture"], copies=copies)
        wall_ms = (time.perf_counter() - t0) * 1000.0
        return (wall_ms - sum(result.times_ms)) / reps * 1000.0, [t / reps * 1000.0 for t in result.outside_ms]

    names = [*VARIANTS, "whole repetition + fresh draws", *variants]
    rows: dict[str, list[float]] = {name: [] for name in names}
    parts: dict[str, list[list[float]]] = {name: [] for name in names}

    def keep(name: str, seen: tuple[float, list[float]]) -> None:
        rows[name].append(seen[0])
        parts[name].append(seen[1])

    for _ in range(rounds):
        for name, switches in VARIANTS.items():
            block(switches, draw=False)  # warm
            keep(name, block(switches, draw=False))
        keep("whole repetition + fresh draws", block(VARIANTS["whole repetition"], draw=True))
        for name, timer in variants.items():
            block(VARIANTS["whole repetition"], draw=False, timer=timer)  # warm
            keep(name, block(VARIANTS["whole repetition"], draw=False, timer=timer))
    table = {name: {"median_us": round(statistics.median(v), 1), "min_us": round(min(v), 1),
                    "max_us": round(max(v), 1),
                    "gpu_us": {part: round(statistics.median(p[k] for p in parts[name]), 1)
                               for k, part in enumerate(OUTSIDE_PARTS)}}
             for name, v in rows.items()}
    return {"elements": elements, "reps": reps, "rounds": rounds, "loop": loop.info(), "excess_per_rep": table}


def print_table(report: dict[str, Any]) -> None:
    print(f"loop overhead: {report['elements']} elements, blocks of {report['reps']}, {report['rounds']} rounds; "
          f"{report['loop']}")
    for name, row in report["excess_per_rep"].items():
        gpu = ", ".join(f"{part} {us}" for part, us in row["gpu_us"].items())
        print(f"  {name:58s} median {row['median_us']:9.1f} us/rep  (min {row['min_us']}, max {row['max_us']}; "
              f"the loop's GPU time: {gpu})")
