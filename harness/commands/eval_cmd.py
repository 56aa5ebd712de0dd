"""`harness eval --problem PATH --candidate PATH [--backend triton|cuda|gluon|helion] [--json]`.

Exits 0 whatever the verdict; non-zero only when the harness itself could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from eval import BACKENDS, DEFAULT_BACKEND, EvalConfig, EvalResult, Evaluator, Status, analyze, refusal, render_feedback
from problems import ProblemError, load_problem_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--problem", required=True, help="KernelBench-format problem file")
    parser.add_argument("--candidate", required=True, help="candidate source file defining ModelNew")
    parser.add_argument("--backend", choices=BACKENDS, default=DEFAULT_BACKEND)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--trials", type=int, default=EvalConfig.trials)
    parser.add_argument("--own-kernel-policy", choices=("reject", "report"), default="reject")
    parser.add_argument("--compile-baseline", action="store_true", help="also time torch.compile of the reference")
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the report")


def run(args: argparse.Namespace) -> int:
    try:
        problem = load_problem_file(args.problem)
        raw = Path(args.candidate).read_bytes()
    except (ProblemError, OSError) as exc:
        print(f"harness eval: {exc}", file=sys.stderr)
        return 2
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # the candidate's fault: a verdict, not a harness failure
        result = EvalResult(status=Status.FORMAT_ERROR, problem_id=problem.id, backend=args.backend,
                            reason=f"the candidate is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})")
    else:
        refused = refusal(analyze(source), args.own_kernel_policy, args.backend)  # issue 56: backend
        if refused:  # judged from its source alone: no worker needs to start
            result = EvalResult(status=refused[0], reason=refused[1], problem_id=problem.id, backend=args.backend)
        else:
            config = EvalConfig(device=args.device, trials=args.trials, own_kernel_policy=args.own_kernel_policy,
                                compile_baseline=args.compile_baseline,
                                cache_dir=None if args.no_cache else EvalConfig.cache_dir)
            try:
                with Evaluator(config) as evaluator:
                    result = evaluator.evaluate(problem, source, backend=args.backend)
            except (ProblemError, RuntimeError, ValueError) as exc:
                print(f"harness eval: {exc}", file=sys.stderr)
                return 1
    if args.json:
        print(json.dumps(result.to_dict(), indent=None))
    else:
        print(f"problem: {problem.id}   candidate: {args.candidate}   device: {result.device}")
        print(render_feedback(result))
        if result.network_isolated is None:  # no worker ran: refused from the source, or before any worker
            print("sandbox: no worker ran")
        else:
            print(f"sandbox: network isolated={result.network_isolated}, unprivileged={result.unprivileged}; "
                  f"{result.trials} trials; {result.eval_seconds:.1f} s{' (cached)' if result.cached else ''}")
    return 0
