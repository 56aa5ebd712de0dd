"""`harness bench suite`: the problem suite on the current GPU, one table per level.

For every selected problem: eager and torch.compile times (`Evaluator.baseline`, the
evaluator's own timing method, cached per device and versions), the roofline floor from the
device's probed ceilings and the SOL fraction each baseline reaches; for problems with a
hand-written reference solution, that solution's verdict, speedup over eager (interleaved in
the same evaluation) and SOL fraction. Both caches make a killed run resumable: re-running
the command times only what is missing.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from eval import EvalConfig, EvalResult, Evaluator, Job, Status, cached_ceilings, probe_and_cache
from harness.baselines import baseline_row
from harness.bench.pools import environment
from harness.progress import Tally
from problems import select_problems, solution_path

SMALL_EAGER_US = 50.0  # the suite's stated lower bound for an eager reference on an H100


def _solution_fields(result: EvalResult) -> dict[str, Any]:
    return {"solution_status": result.status.value, "solution_speedup": result.speedup,
            "solution_sol": result.sol_fraction, "solution_flags": list(result.flags),
            "solution_reason": result.reason[:300] if result.status is not Status.CORRECT else "",
            "solution_us": result.candidate_timing.median_ms * 1000 if result.candidate_timing else None,
            "host_ms": dict(result.host_ms), "host_share": dict(result.host_share),
            "host_bound": list(result.host_bound)}


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def markdown_tables(rows: list[dict[str, Any]]) -> str:
    """One markdown table per level: baselines, floor, SOL and the reference solution's figures."""
    out: list[str] = []
    for level in dict.fromkeys(r["level"] for r in rows):
        out += [f"### {level}", "",
                "| problem | dtype | eager µs | compile µs | floor µs | eager SOL | compile SOL | solution speedup | solution SOL |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in (r for r in rows if r["level"] == level):
            if "error" in r:
                out.append(f"| {r['id']} | {r['dtype']} | baseline failed: {r['error'][:80]} | | | | | | |")
                continue
            if "solution_status" not in r:
                sol_speed, sol_sol = "", ""
            elif r["solution_status"] != "correct":
                sol_speed, sol_sol = f"**{r['solution_status']}**", ""
            else:
                sol_speed, sol_sol = _fmt(r["solution_speedup"], ".2f") + "×", _fmt(r["solution_sol"], ".0%")
            out.append(f"| {r['id']} | {r['dtype']} | {_fmt(r.get('eager_us'), ',.1f')} | {_fmt(r.get('compile_us'), ',.1f')}"
                       f" | {_fmt(r.get('floor_us'), ',.1f')} | {_fmt(r.get('eager_sol'), '.0%')}"
                       f" | {_fmt(r.get('compile_sol'), '.0%')} | {sol_speed} | {sol_sol} |")
        out.append("")
    return "\n".join(out)


def _sides(row: dict[str, Any]) -> str:
    return ", ".join(f"{side} {row['host_share'].get(side, 0.0):.2f}" for side in row["host_bound"])


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Plain findings: failures, solutions that are not faster than eager, too-small problems."""
    lines = []
    failed = [r["id"] for r in rows if "error" in r]
    solved = [r for r in rows if "solution_status" in r]
    slow = [r["id"] for r in solved if r["solution_status"] == "correct" and (r["solution_speedup"] or 0) <= 1.0]
    wrong = [r["id"] for r in solved if r["solution_status"] != "correct"]
    small = [f"{r['id']} ({r['eager_us']:.1f} µs)" for r in rows if r.get("eager_us", 1e9) < SMALL_EAGER_US]
    lines.append(f"problems: {len(rows)}; baselines failed: {len(failed)} {failed if failed else ''}".rstrip())
    lines.append(f"reference solutions: {len(solved)}; correct: {len(solved) - len(wrong)}; "
                 f"not faster than eager: {slow or 'none'}; not correct: {wrong or 'none'}")
    lines.append(f"eager under {SMALL_EAGER_US:.0f} µs: {small or 'none'}")
    if any("host_bound" in r for r in rows):
        bound = [f"{r['id']} ({_sides(r)})" for r in rows if r.get("host_bound")]
        lines.append(f"flagged host-bound (side, host/GPU): {bound or 'none'}")
    return lines


def main(selection: str = "all", out: str | None = None, solutions: bool = True, baselines: bool = True) -> int:
    """Run the suite benchmark and print its tables; returns a process exit code."""
    if not torch.cuda.is_available():
        print("harness bench suite: no CUDA GPU is visible; this benchmark times the suite on a GPU")
        return 2
    problems = select_problems(selection)
    env = environment()
    print(json.dumps(env), flush=True)
    config = EvalConfig(device="cuda")
    ceilings = cached_ceilings(config.cache_dir, env["device"]) or probe_and_cache(config.cache_dir)
    print(f"ceilings: copy {ceilings.copy_bytes_per_s / 1e12:.2f} TB/s, matmul TFLOP/s "
          + ", ".join(f"{k} {v / 1e12:.0f}" for k, v in ceilings.matmul_flops_per_s.items()), flush=True)
    rows: dict[str, dict[str, Any]] = {}
    with Evaluator(config) as ev:
        if solutions:
            jobs = [Job(p, path.read_text()) for p in problems if (path := solution_path(p)) is not None]
            solved = Tally(len(jobs))

            def on_result(i: int, result: EvalResult) -> None:
                job = jobs[i]
                fields = rows[job.problem.id] = _solution_fields(result)
                print(f"{solved.step()} solution {job.problem.id:42s} {result.status.value:10s} speedup "
                      f"{_fmt(result.speedup, '.2f')}  SOL {_fmt(result.sol_fraction, '.0%')}  "
                      f"{result.eval_seconds:.0f}s host/GPU {json.dumps(result.host_share)} host ms "
                      f"{json.dumps(result.host_ms)} {fields['solution_reason'][:120]}", flush=True)

            ev.evaluate_many(jobs, on_result=on_result)
        timed = Tally(len(problems))
        ordered = []
        for problem in problems:
            if not baselines:
                ordered.append({"id": problem.id, "level": problem.level, "dtype": problem.dtype,
                                **rows.get(problem.id, {})})
                continue
            row = {**baseline_row(ev, problem, ceilings), **rows.get(problem.id, {})}
            ordered.append(row)
            print(f"{timed.step()} baseline {problem.id:42s} eager {_fmt(row.get('eager_us'), '10.1f')} us  compile "
                  f"{_fmt(row.get('compile_us'), '10.1f')} us  floor {_fmt(row.get('floor_us'), '9.1f')} us  "
                  f"{row.get('baseline_seconds', 0)}s {row.get('error', '')}", flush=True)
    print()
    print(markdown_tables(ordered))
    for line in summary(ordered):
        print(line)
    if out:
        Path(out).write_text(json.dumps({"environment": env, "ceilings": asdict(ceilings), "problems": ordered}, indent=1))
    return 0
