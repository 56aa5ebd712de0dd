"""`harness baseline [SELECTION] [--json]`: eager and torch.compile times per problem on this GPU.

Timed with the evaluator's own method (interleaved, L2 flushed, adaptive repetitions) in a
clean worker, cached per device and torch version; with probed ceilings (`harness device probe`)
each row also shows the roofline floor and the SOL fraction of both baselines.
"""

from __future__ import annotations

import argparse
import json

import torch

from eval import EvalConfig, Evaluator, cached_ceilings
from harness.baselines import baseline_row
from problems import ProblemError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("selection", nargs="?", default="smoke", help="problem selection (smoke, level1, L1/*softmax*, ...)")
    parser.add_argument("--json", action="store_true")


def _line(row: dict) -> str:
    if "error" in row:
        return f"{row['id']:40s} failed: {row['error']}"
    line = f"{row['id']:40s} eager {row['eager_us']:9.1f} us  compile {row['compile_us']:9.1f} us"
    if row["floor_us"] is not None:
        line += f"  floor {row['floor_us']:9.1f} us  SOL eager {row['eager_sol']:.0%} compile {row['compile_sol']:.0%}"
    return line


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
            rows.append(baseline_row(ev, problem, ceilings))
            if not args.json:
                print(_line(rows[-1]), flush=True)
    if args.json:
        print(json.dumps({"device": ev.device_name, "versions": ev.versions, "problems": rows}))
    elif ceilings is None:
        print("(no ceilings cached for this device: run `harness device probe` for floors and SOL fractions)")
    return 0 if all("error" not in r for r in rows) else 1
