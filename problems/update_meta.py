"""Maintain the measured fields of suite problems' META: `flops` and `bytes`.

    python -m problems.update_meta [SELECTION]            # show measured vs. written values
    python -m problems.update_meta --write [SELECTION]    # write the measured values into the files
    python -m problems.update_meta --numerics [SELECTION] # check tolerances against higher precision

FLOPs come from `torch.utils.flop_counter`, bytes from the inputs, parameters and outputs, each
counted once (see `problems.cost`), both at full size. Problems whose META says
`"flops_method": "hand"` keep their hand-written FLOPs (the file says how they were counted).

`--numerics` runs each reference in its own precision and in a higher one (fp32 -> fp64,
bf16/fp16 -> fp32) and prints how much of the problem's tolerance the difference uses: a correct
candidate that merely sums in another order must fit comfortably (ratio well below 1).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch

from problems.cost import measure_cost
from problems.problem import Problem
from problems.runtime import build_model, load_module, make_inputs, output_tensors, run_forward, strict_precision
from problems.select import select_problems

_DEFAULT_TOL = {"float32": 1e-4, "float64": 1e-7, "float16": 1e-2, "bfloat16": 1e-2}


def _replace_field(source: str, key: str, value: int) -> str:
    pattern = re.compile(rf'("{key}":\s*)[-+0-9_.eE]+')
    if len(pattern.findall(source)) != 1:
        raise ValueError(f'expected exactly one "{key}": <number> entry in META')
    return pattern.sub(lambda m: f"{m.group(1)}{value}", source)


def update_file(problem: Problem, write: bool) -> str:
    """Measure one problem; return a report line (and rewrite its file when `write`)."""
    cost = measure_cost(problem, allow_real=True)
    hand = problem.meta.get("flops_method") == "hand"
    flops = int(problem.flops or 0) if hand else cost.flops
    changed = (flops, cost.bytes) != (int(problem.flops or 0), int(problem.bytes_moved or 0))
    if write and changed and problem.path:
        path = Path(problem.path)
        source = _replace_field(path.read_text(), "bytes", cost.bytes)
        if not hand:
            source = _replace_field(source, "flops", flops)
        path.write_text(source)
    note = f" (counter: {cost.flops})" if hand else ""
    mark = "updated" if (write and changed) else ("STALE" if changed else "ok")
    return f"{problem.id:44s} flops={flops}{note} bytes={cost.bytes} [{cost.method}] {mark}"


def _upcast(obj, dtype: torch.dtype):
    if isinstance(obj, torch.Tensor) and obj.is_floating_point():
        return obj.to(dtype)
    return obj


def numerics_ratio(problem: Problem, small: bool) -> float:
    """Max over outputs of |low - high| / (atol + rtol * |high|): the share of tolerance used."""
    module = load_module(problem, small=small)
    high = torch.float64 if problem.dtype == "float32" else torch.float32
    model = build_model(module, seed=0)
    inputs = make_inputs(module, seed=1)
    low_out = output_tensors(run_forward(model, inputs))
    model_high = build_model(module, seed=0).to(high)
    high_out = output_tensors(run_forward(model_high, [_upcast(x, high) for x in inputs]))
    atol = problem.atol if problem.atol is not None else _DEFAULT_TOL.get(problem.dtype, 1e-4)
    rtol = problem.rtol if problem.rtol is not None else _DEFAULT_TOL.get(problem.dtype, 1e-4)
    worst = 0.0
    for lo, hi in zip(low_out, high_out):
        lo64, hi64 = lo.double(), hi.double()
        worst = max(worst, float(((lo64 - hi64).abs() / (atol + rtol * hi64.abs())).max()))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m problems.update_meta", description=__doc__.split("\n")[0])
    parser.add_argument("selection", nargs="?", default="all", help="problem selection (default: all of our suite)")
    parser.add_argument("--write", action="store_true", help="write measured flops/bytes into the files")
    parser.add_argument("--numerics", action="store_true", help="compare with a higher-precision reference")
    parser.add_argument("--small", action="store_true", help="numerics at META['small'] sizes")
    args = parser.parse_args(argv)
    strict_precision()
    status = 0
    for problem in select_problems(args.selection):
        if args.numerics:
            ratio = numerics_ratio(problem, args.small)
            flag = "" if ratio < 0.5 else "  <-- tolerance too tight for a reordered but correct result"
            status |= ratio >= 0.5
            print(f"{problem.id:44s} tolerance used: {ratio:.3f}{flag}", flush=True)
        else:
            line = update_file(problem, args.write)
            status |= line.endswith("STALE")
            print(line, flush=True)
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
