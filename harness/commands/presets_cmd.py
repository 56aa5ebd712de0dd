"""`harness presets rescore|compare|bench`: our strict rules against KernelBench-compatible ones.

    harness presets rescore runs/NAME [--eval kernelbench] [--name NAME-kernelbench] [--out DIR]
    harness presets compare runs/A runs/B [--out DIR] [--json]
    harness presets bench [SELECTION] [--presets default,kernelbench] [--no-hostile] [--out FILE]

`rescore` replays a recorded run under another preset (the replay agent: free, deterministic,
the same code for every problem, sample and turn), then prints the paired report of the two.
`compare` pairs two existing runs. `bench` evaluates the suite's reference solutions and the
hostile candidates under each preset (`harness.bench.presets_bench`, reached through the bench command).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.store import StoreError

# evaluator settings that say where and how long a run may take, not what its rules are: a rescore keeps them
_CARRIED_EVAL_KEYS = ("device", "gpus", "workers_per_gpu", "cache_dir", "problem_scale", "import_timeout_s",
                      "call_timeout_s", "timing_timeout_s", "isolate_network", "parallel_compiles",
                      "kept_builds_gib")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    rescore = sub.add_parser("rescore", help="replay a run under another evaluator preset, then pair the two")
    rescore.add_argument("run_dir", metavar="RUN_DIR")
    rescore.add_argument("--eval", dest="preset", default="kernelbench", help="the preset to re-score under")
    rescore.add_argument("--name", help="the new run's name (default: NAME-PRESET, beside the original)")
    rescore.add_argument("--out", help="write paired.md and paired.json here (default: NEW_RUN_DIR/paired)")
    rescore.add_argument("overrides", nargs="*", help="extra `harness run` overrides (e.g. eval.fixed_reps=200)")
    compare = sub.add_parser("compare", help="pair two runs of the same attempts judged under two presets")
    compare.add_argument("run_a", metavar="RUN_A")
    compare.add_argument("run_b", metavar="RUN_B")
    compare.add_argument("--out", help="also write paired.md and paired.json here")
    compare.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    bench = sub.add_parser("bench", help="reference solutions and hostile candidates under each preset")
    bench.add_argument("selection", nargs="?", default="all", help="problems with a solution (all, smoke, level1, ...)")
    bench.add_argument("--presets", default="default,kernelbench", help="comma-separated presets (first is the baseline)")
    bench.add_argument("--no-hostile", action="store_true", help="reference solutions only")
    bench.add_argument("--no-solutions", action="store_true", help="hostile candidates only")
    bench.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    bench.add_argument("--out", help="write the rows as JSON here")


def run(args: argparse.Namespace) -> int:
    if args.action == "bench":
        from harness.commands import bench_cmd

        return bench_cmd.run_presets(args)
    if args.action == "compare":
        return _compare(Path(args.run_a), Path(args.run_b), args.out, args.json)
    return _rescore(args)


def _compare(run_a: Path, run_b: Path, out: str | None, as_json: bool) -> int:
    from harness.report.load import load_run
    from harness.report.paired import paired_report, to_json, to_markdown

    try:
        report = paired_report(load_run(run_a), load_run(run_b))
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    markdown, data = to_markdown(report), to_json(report)
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "paired.md").write_text(markdown, encoding="utf-8")
        (folder / "paired.json").write_text(data, encoding="utf-8")
    print(data if as_json else markdown, end="")
    if out:
        print(f"wrote paired.md, paired.json to {out}", file=sys.stderr)
    return 0


def _rescore(args: argparse.Namespace) -> int:
    from harness.app import main as run_main
    from harness.store import read_run

    run_dir = Path(args.run_dir)
    try:
        config = read_run(run_dir).config
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    name = args.name or f"{config.get('name') or run_dir.name}-{args.preset}"
    argv = rescore_overrides(config, run_dir, args.preset, name) + list(args.overrides)
    print(f"re-scoring {run_dir} under eval={args.preset} as {run_dir.parent / name}", file=sys.stderr)
    code = run_main(argv)
    if code != 0:
        print(f"error: the re-scoring run ended with exit code {code}; re-run this command to resume it",
              file=sys.stderr)
        return code
    return _compare(run_dir, run_dir.parent / name, args.out or str(run_dir.parent / name / "paired"), False)


def rescore_overrides(config: dict[str, Any], run_dir: Path, preset: str, name: str) -> list[str]:
    """`harness run` overrides that replay `run_dir` under `eval=preset`: same problems, samples, turns,
    backend and where-it-runs settings; the preset's rules."""
    problems = config.get("problems") or {}
    argv = ["agent=replay", f"agent.path={_value(str(run_dir))}", f"eval={preset}", f"name={name}",
            f"runs_dir={_value(str(run_dir.parent))}", f"problems.spec={_value(problems.get('spec'))}",
            f"problems.limit={_value(problems.get('limit'))}", f"turns={_value(config.get('turns', 1))}",
            f"samples={_value(config.get('samples', 1))}", f"backend={_value(config.get('backend', 'triton'))}",
            f"target_speedup={_value(config.get('target_speedup'))}", "quiet=true"]
    ev = config.get("eval") or {}
    argv += [f"eval.{k}={_value(ev[k])}" for k in _CARRIED_EVAL_KEYS if k in ev]
    return argv


def _value(v: Any) -> str:
    """A value in Hydra's override grammar (strings quoted, so commas and colons pass through)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    text = str(v).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"
