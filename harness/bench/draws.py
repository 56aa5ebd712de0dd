"""`harness bench eval --part draws`: the host time of a repetition's input draw, and of its seeding.

A timed block draws every repetition's inputs (`problems.draw_inputs`) inside the wall time the parent judges, so
their host time is part of what the wall bound must allow for, and whatever of it differs between the reference's
process and the candidate's is noise in that bound. The draw begins by seeding. Side by side, alternating per
round: the harness's seeding (`problems.seed_everything`) and the one it replaced on 2026-11-28 (`torch.manual_seed`,
which formats the whole stack once per uninitialised backend), each called from this bench's stack and from 50
frames deeper (a worker draws from deep in its request loop), and beside them the whole draw as a block makes it.
Both seedings must draw the same values (`same_values`).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
import types
from typing import Any, Callable

import numpy as np
import torch

from harness.progress import Tally
from problems import draw_inputs, seed_everything

DEEPER = 50  # extra frames for the "deep" calls


def _torch_manual_seed(seed: int) -> None:
    """The seeding before 2026-11-28: `torch.manual_seed` and Python's and NumPy's."""
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))


SEEDINGS: dict[str, Callable[[int], None]] = {"harness": seed_everything, "torch.manual_seed": _torch_manual_seed}


def _problem(n: int) -> types.ModuleType:
    module = types.ModuleType("draws_problem")
    exec(f"import torch\n\ndef get_inputs():\n    return [torch.randn({n})]\n", module.__dict__)
    return module


def _deeper(frames: int, call: Callable[[], Any]) -> Any:
    return call() if frames == 0 else _deeper(frames - 1, call)


def _host_us(call: Callable[[int], Any], seeds: range, depth: int, device: torch.device) -> float:
    """Host time per `call(seed)` over `seeds`, made `depth` frames deeper (GPU work queued, not waited for)."""
    def calls() -> None:
        for seed in seeds:
            call(seed)

    t0 = time.perf_counter()
    _deeper(depth, calls)
    host = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return host / len(seeds) * 1e6


def _same_values(device: torch.device) -> bool:
    drawn = []
    for seeding in SEEDINGS.values():
        seeding(12345)
        drawn.append((torch.randn(256, device=device).cpu(), torch.randn(16).clone(), random.random(),
                      float(np.random.rand())))
    (a, b, x, y), (c, d, z, w) = drawn
    return torch.equal(a, c) and torch.equal(b, d) and x == z and y == w


def run(rounds: int = 20, per_round: int = 100, n: int | None = None) -> dict[str, Any]:
    """`rounds` rounds of `per_round` calls of each seeding at each depth, and of the whole draw, in alternating
    order; medians over rounds."""
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    n = n or (2**24 if device.type == "cuda" else 2**12)
    problem = _problem(n)
    calls: dict[str, Callable[[int], Any]] = {**SEEDINGS, "whole draw": lambda s: draw_inputs(problem, s, device)}
    for call in calls.values():  # warm-up: first calls, caches, the allocator
        _host_us(call, range(10), 0, device)
    times: dict[str, dict[str, list[float]]] = {name: {"shallow": [], "deep": []} for name in calls}
    tally = Tally(rounds)
    for r in range(rounds):
        seeds = range(r * per_round, (r + 1) * per_round)
        for name in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            times[name]["shallow"].append(_host_us(calls[name], seeds, 0, device))
            times[name]["deep"].append(_host_us(calls[name], seeds, DEEPER, device))
        print(tally.step(), file=sys.stderr, flush=True)
    medians = {name: {depth: round(statistics.median(t), 2) for depth, t in by_depth.items()}
               for name, by_depth in times.items()}
    return {"device": str(device), "elements": n, "rounds": rounds, "per_round": per_round, "deeper_frames": DEEPER,
            "same_values": _same_values(device), "host_us": medians}


def print_table(report: dict[str, Any]) -> None:
    print(f"draws: host time a call on {report['device']}, median of {report['rounds']} rounds of "
          f"{report['per_round']}; the whole draw is one randn of {report['elements']} elements with the harness's "
          f"seeding; both seedings draw the same values: {report['same_values']}")
    print(f"| call | from here (us) | {report['deeper_frames']} frames deeper (us) |\n|---|---:|---:|")
    for name, by_depth in report["host_us"].items():
        label = name if name == "whole draw" else f"seeding: {name}"
        print(f"| {label} | {by_depth['shallow']:.1f} | {by_depth['deep']:.1f} |")
