"""`harness report RUN_DIR [RUN_DIR ...] [--out DIR]`: leaderboard files and an HTML page from runs; given a
sweep folder (`runs/.sweeps/NAME` of `harness run -m`), from the sweep's runs, with its comparison table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from harness.store import StoreError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directories (runs/NAME), or one sweep folder (runs/.sweeps/NAME)")
    parser.add_argument("--out", help="output folder (default for one run: RUN_DIR/report; required for several)")
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=2000,
        metavar="N",
        help="bootstrap resamples for the 95%% intervals (default 2000)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")


def run(args: argparse.Namespace) -> int:
    from harness.report import build_report, write_report
    from harness.sweep import comparison_table, leaderboard_path, print_whole, sweep_runs

    sweep = sweep_runs(args.run_dirs[0]) if len(args.run_dirs) == 1 else []
    run_dirs = [r.run_dir for r in sweep] or args.run_dirs
    if len(args.run_dirs) > 1 and not args.out:
        print("error: several runs need --out DIR (where the comparison goes)", file=sys.stderr)
        return 2
    if len(set(Path(d).resolve() for d in args.run_dirs)) < len(args.run_dirs):
        print("error: the same run directory is given twice", file=sys.stderr)
        return 2
    if args.bootstrap < 1:
        print(f"error: --bootstrap must be >= 1, got {args.bootstrap}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.run_dirs[0]) / "report"
    try:
        report = build_report(run_dirs, n_boot=args.bootstrap, seed=args.seed,
                              sweep=[r.overrides for r in sweep] if sweep else None)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        paths = write_report(report, out)
    except StoreError as exc:  # damage in the texts, read only for the transcripts
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        hint = "" if args.out else "; write it elsewhere with --out DIR"
        print(f"error: cannot write the report to {out}: {exc.strerror or exc}{hint}", file=sys.stderr)
        return 2
    for m in report.metrics:
        fast1 = f"fast_1 {m.fast_p[1.0]:.2f}" if m.timing_available else "fast_1 n/t (timings not measured)"
        print(f"{m.name}: {m.n_problems} problems, correct {m.correct_rate:.2f}, {fast1}")
    if report.sweep is not None:
        print_whole(Console(), comparison_table(report.metrics, report.sweep, args.run_dirs[0]))
        print(f"the sweep in full (each fast_p with its interval, cost, tokens): {leaderboard_path(out)}")
    if not report.comparison.comparable:
        print("note: these runs differ in device, versions, evaluator settings or problems:")
        for line in report.comparison.differences:
            print(f"  {line}")
    print(f"wrote {', '.join(p.name for p in paths)} to {out}")
    return 0
