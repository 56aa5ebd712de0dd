"""`harness bench eval --part draws`: the host time of drawing one repetition's inputs, as a timed block does.

A timed block draws every repetition's inputs (`problems.draw_inputs`) inside the wall time the parent judges, so
their host time is part of what the wall bound must allow for, and whatever of it differs between the reference's
process and the candidate's is noise in that bound. Side by side, alternating per round: the harness's seeding
(`problems.runtime.seed_everything`) and the one it replaced on 2026-11-28 (`torch.manual_seed`, which formats the
whole stack once per uninitialised backend), each called from this bench's stack and from 50 frames deeper (a
worker draws from deep in its request loop). Both must draw the same values (`same_values`).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
import types
from typing import Any, Callable
from unittest import mock

import numpy as np
import torch

from harness.progress import Tally
from problems import runtime

DEEPER = 50  # extra frames for the "deep" calls


def _torch_manual_seed(seed: int) -> None:
    """The seeding before 2026-11-28: `torch.manual_seed` and Python's and NumPy's."""
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))


def _problem(n: int) -> types.ModuleType:
    module = types.ModuleType("draws_problem")
    exec(f"import torch\n\ndef get_inputs():\n    return [torch.randn({n})]\n", module.__dict__)
    return module


def _deeper(frames: int, call: Callable[[], Any]) -> Any:
    return call() if frames == 0 else _deeper(frames - 1, call)


def _host_us_per_draw(problem: types.ModuleType, device: torch.device, seeds: range, depth: int) -> float:
    """Host time per draw of `seeds`' inputs on `device`, called `depth` frames deeper (the GPU's work not waited)."""
    def draws() -> None:
        for seed in seeds:
            runtime.draw_inputs(problem, seed, device)

    t0 = time.perf_counter()
    _deeper(depth, draws)
    host = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return host / len(seeds) * 1e6


def run(rounds: int = 20, per_round: int = 100, n: int | None = None) -> dict[str, Any]:
    """`rounds` rounds of `per_round` draws per seeding and depth, in alternating order; medians over rounds."""
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    n = n or (2**24 if device.type == "cuda" else 2**12)
    problem = _problem(n)
    seedings = {"harness": runtime.seed_everything, "torch.manual_seed": _torch_manual_seed}

    def with_seeding(name: str) -> Any:
        return mock.patch.object(runtime, "seed_everything", seedings[name])

    drawn = {}
    for name in seedings:
        with with_seeding(name):
            drawn[name] = runtime.draw_inputs(problem, 12345, device)[0].cpu()
    same_values = torch.equal(drawn["harness"], drawn["torch.manual_seed"])
    for name in seedings:  # warm-up: first calls, caches, the allocator
        with with_seeding(name):
            _host_us_per_draw(problem, device, range(10), 0)
    times: dict[str, dict[str, list[float]]] = {name: {"shallow": [], "deep": []} for name in seedings}
    tally = Tally(rounds)
    for r in range(rounds):
        order = list(seedings) if r % 2 == 0 else list(seedings)[::-1]
        for name in order:
            with with_seeding(name):
                seeds = range(r * per_round, (r + 1) * per_round)
                times[name]["shallow"].append(_host_us_per_draw(problem, device, seeds, 0))
                times[name]["deep"].append(_host_us_per_draw(problem, device, seeds, DEEPER))
        print(tally.step(), file=sys.stderr, flush=True)
    medians = {name: {depth: round(statistics.median(t), 2) for depth, t in by_depth.items()}
               for name, by_depth in times.items()}
    return {"device": str(device), "elements": n, "rounds": rounds, "per_round": per_round, "deeper_frames": DEEPER,
            "same_values": same_values, "host_us_per_draw": medians}


def print_table(report: dict[str, Any]) -> None:
    print(f"draws: host time of one repetition's draw (one randn of {report['elements']} elements on "
          f"{report['device']}), median of {report['rounds']} rounds of {report['per_round']}; same values: "
          f"{report['same_values']}")
    print(f"| seeding | from here (us) | {report['deeper_frames']} frames deeper (us) |\n|---|---:|---:|")
    for name, by_depth in report["host_us_per_draw"].items():
        print(f"| {name} | {by_depth['shallow']:.1f} | {by_depth['deep']:.1f} |")
