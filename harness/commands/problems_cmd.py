"""`harness problems list|show|lint`: browse and check problem sets (our suite, KernelBench, files)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from harness.progress import Tally
from problems import (
    DEFAULT_BUDGET_BYTES,
    LintReport,
    LoadFailure,
    Problem,
    ProblemError,
    describe_bytes,
    describe_flops,
    lint_entries,
    select_entries,
    solution_path,
    suite_problem,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    ls = sub.add_parser("list", help="list problems with their level, dtype, FLOPs, bytes and whether a reference "
                                     "solution exists (SOLUTION)")
    source = ls.add_mutually_exclusive_group()
    source.add_argument("selection", nargs="?",
                        help="selection spec (default: all of our suite), e.g. level1, 'L2/*', smoke")
    source.add_argument("--level", help="one level of our suite: level1, level2, level3, llm")
    source.add_argument("--kernelbench", metavar="DIR", help="a local KernelBench checkout")
    source.add_argument("--file", metavar="PATH", help="a single problem file")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")

    show = sub.add_parser("show", help="print one problem's metadata and source")
    show.add_argument("id", help="a suite id (L1/01_square_matmul), or any id within --from")
    show.add_argument("--from", dest="source", metavar="SELECTION",
                      help="where to look, e.g. kernelbench:/path/KernelBench")
    show.add_argument("--json", action="store_true", help="print JSON metadata (with the source)")

    lint = sub.add_parser("lint", help="check problems for soundness (degenerate outputs, randomness, memory, ...)")
    lint.add_argument("selection", nargs="?", default="all", help="selection spec (default: all of our suite)")
    lint.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    lint.add_argument("--scale", choices=("auto", "full", "small"), default="auto",
                      help="auto: META['small'] sizes on the CPU when declared, full size otherwise")
    lint.add_argument("--budget-gb", type=float, default=DEFAULT_BUDGET_BYTES / 1e9, help="device memory budget per job (GB); a problem over it is linted again alone at the end, within --jobs x this")
    lint.add_argument("--timeout", type=float, default=300.0, help="seconds per problem before it counts as hung")
    lint.add_argument("--jobs", type=int, default=1, help="problems checked in parallel, each in its own process (on cuda, keep jobs x budget within the GPU's memory)")
    lint.add_argument("--verbose", action="store_true", help="print every check, not only failures")
    lint.add_argument("--json", action="store_true", help="print one JSON report per problem")


def _selection(args: argparse.Namespace) -> str:
    if args.level:
        return args.level
    if args.kernelbench:
        return f"kernelbench:{args.kernelbench}"
    if args.file:
        return f"file:{args.file}"
    return args.selection or "all"


def _describe(problem: Problem) -> dict:
    solution = solution_path(problem)
    return {
        "id": problem.id,
        "name": problem.name,
        "level": problem.level,
        "dtype": problem.dtype,
        "flops": problem.flops,
        "bytes": problem.bytes_moved,
        "atol": problem.atol,
        "rtol": problem.rtol,
        "tags": list(problem.tags),
        "extra_inputs": problem.has_extra_inputs,
        "path": problem.path,
        "solution": str(solution) if solution else None,
    }


def _list(args: argparse.Namespace) -> int:
    entries = select_entries(_selection(args))
    if args.json:
        rows = [
            {"id": e.id, "error": e.error, "origin": e.origin} if isinstance(e, LoadFailure) else _describe(e)
            for e in entries
        ]
        print(json.dumps(rows, indent=2))
        return 0
    width = max([len(e.id) for e in entries] + [2])
    print(f"{'ID':{width}}  {'LEVEL':7} {'DTYPE':9} {'FLOPS':>12} {'BYTES':>9}  SOLUTION  TAGS")
    for e in entries:
        if isinstance(e, LoadFailure):
            print(f"{e.id:{width}}  LOAD ERROR: {e.error}")
            continue
        sol = "yes" if solution_path(e) else "-"
        print(
            f"{e.id:{width}}  {e.level:7} {e.dtype:9} {describe_flops(e.flops):>12} {describe_bytes(e.bytes_moved):>9}"
            f"  {sol:8}  {','.join(e.tags)}"
        )
    failed = sum(isinstance(e, LoadFailure) for e in entries)
    print(f"{len(entries)} problems" + (f", {failed} failed to load" if failed else ""))
    return 0


def _find(args: argparse.Namespace) -> Problem:
    if args.source:
        for entry in select_entries(args.source):
            if entry.id == args.id:
                if isinstance(entry, LoadFailure):
                    raise ProblemError(f"{entry.id}: {entry.error}")
                return entry
        raise ProblemError(f"no problem {args.id!r} in {args.source!r}")
    if args.id.endswith(".py"):
        (entry,) = select_entries(f"file:{args.id}")
        return entry
    return suite_problem(args.id)


def _show(args: argparse.Namespace) -> int:
    problem = _find(args)
    info = _describe(problem)
    if args.json:
        print(json.dumps({**info, "source": problem.source}, indent=2))
        return 0
    for key, value in info.items():
        if key in ("flops", "bytes") and value is not None:
            value = f"{value:.0f} ({describe_flops(value) if key == 'flops' else describe_bytes(value)})"
        elif isinstance(value, list):
            value = ", ".join(value)
        print(f"{key:13} {value if value not in (None, '') else '-'}")
    print("-" * 72)
    print(problem.source.rstrip())
    return 0


def _print_report(report: LintReport, verbose: bool, progress: str) -> None:
    verdict = "PASS" if report.ok else "FAIL"
    print(f"{progress} {verdict} {report.problem_id} ({report.scale} size, {report.seconds:.1f} s)", flush=True)
    for check in report.checks:
        if verbose or check.status == "fail":
            print(f"    {check.status.upper():4} {check.name}: {check.detail}", flush=True)


def _lint(args: argparse.Namespace) -> int:
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("harness problems lint: --device cuda but no CUDA device is available", file=sys.stderr)
            return 2
    entries = select_entries(args.selection)
    jobs = max(1, args.jobs)
    tally = Tally(len(entries))

    def on_report(report: LintReport) -> None:
        progress = tally.step()
        if args.json:  # stdout stays one JSON object per line; the progress goes to stderr
            print(json.dumps({"problem_id": report.problem_id, "ok": report.ok, "scale": report.scale,
                              "seconds": report.seconds, "checks": [asdict(c) for c in report.checks]}), flush=True)
            print(f"{progress} {report.problem_id}", file=sys.stderr, flush=True)
        else:
            _print_report(report, args.verbose, progress)

    reports = lint_entries(entries, device=args.device, scale=args.scale, budget=int(args.budget_gb * 1e9),
                           timeout_s=args.timeout, jobs=jobs, on_report=on_report)
    failed = [r for r in reports if not r.ok]
    if not args.json:
        names = (": " + ", ".join(r.problem_id for r in failed)) if failed else ""
        print(f"{len(reports)} problems linted, {len(failed)} failed{names}")
    return 1 if failed else 0


def run(args: argparse.Namespace) -> int:
    try:
        return {"list": _list, "show": _show, "lint": _lint}[args.action](args)
    except ProblemError as exc:
        print(f"harness problems {args.action}: {exc}", file=sys.stderr)
        return 2
