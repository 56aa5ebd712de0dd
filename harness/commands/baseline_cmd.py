"""`harness baseline [SELECTION] [--json]`: eager and torch.compile times per problem on this GPU.

Timed with the evaluator's own method (interleaved, L2 flushed, adaptive repetitions) in a
clean worker, cached per device and torch version; with probed ceilings (`harness device probe`)
each row also shows the roofline floor and the SOL fraction of both baselines.
"""

from __future__ import annotations

import argparse
import json

import torch

from eval import EvalConfig, Evaluator
from eval.roofline import cached_ceilings
from problems.problem import ProblemError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("selection", nargs="?", default="smoke", help="problem selection (smoke, level1, L1/*softmax*, ...)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from problems import select_problems

    if not torch.cuda.is_available():
        print("harness baseline: no CUDA GPU is visible; baselines are GPU timings")
        return 2
    try:
        problems = select_problems(args.selection)
    except (ProblemError, ValueError) as exc:
        print(f"harness baseline: {exc}")
        return 2
    rows = []
    with Evaluator(EvalConfig(device="cuda")) as ev:
        ceilings = cached_ceilings(EvalConfig.cache_dir, ev.device_name)
        for problem in problems:
            base = ev.baseline(problem)
            eager, compiled = base["eager"]["median_ms"], base["compiled"]["median_ms"]
            floor = ceilings.floor_s(problem.flops, problem.bytes_moved, problem.dtype) if ceilings else None
            rows.append({"id": problem.id, "eager_ms": eager, "compile_ms": compiled,
                         "floor_ms": None if floor is None else floor * 1000,
                         "eager_sol": None if floor is None else floor * 1000 / eager,
                         "compile_sol": None if floor is None else floor * 1000 / compiled})
            if not args.json:
                r = rows[-1]
                sol = "" if floor is None else f"  floor {r['floor_ms'] * 1000:9.1f} us  SOL eager {r['eager_sol']:.0%} compile {r['compile_sol']:.0%}"
                print(f"{problem.id:40s} eager {eager * 1000:9.1f} us  compile {compiled * 1000:9.1f} us{sol}", flush=True)
    if args.json:
        print(json.dumps({"device": ev.device_name, "versions": ev.versions, "problems": rows}))
    elif ceilings is None:
        print("(no ceilings cached for this device: run `harness device probe` for floors and SOL fractions)")
    return 0
