"""Lint's driver: each problem linted in a subprocess of its own, many at once, within a memory budget.

A problem that hangs or crashes ends only its own subprocess (`lint_entry`, with a timeout); `lint_entries` runs
`jobs` of them at a time and lints the few problems too large for one job's budget again at the end, alone. The
subprocess is this module run with `-m`: it reads one problem as JSON on stdin, runs the checks of `problems.lint`
on it (`lint_problem_here`) and prints its report as one JSON line, both ends of that exchange kept here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from problems.kernelbench import Entry, LoadFailure
from problems.lint import DEFAULT_BUDGET_BYTES, Check, LintReport, lint_problem_here
from problems.problem import Problem, problem_from_source

_PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _problem_payload(problem: Problem) -> dict:
    return {"source": problem.source, "id": problem.id, "name": problem.name, "level": problem.level,
            "path": problem.path}


def lint_entry(entry: Entry, *, device: str = "cpu", scale: str = "auto", budget: int = DEFAULT_BUDGET_BYTES,
               timeout_s: float = 300.0, threads: int | None = None) -> LintReport:
    """Lint one loaded problem (or report its load failure) in a fresh subprocess with a timeout."""
    if isinstance(entry, LoadFailure):
        return LintReport(entry.id, [Check("load", "fail", entry.error)])
    payload = json.dumps({"problem": _problem_payload(entry), "device": device, "scale": scale, "budget": budget})
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "problems.lint_driver"], input=payload, capture_output=True, text=True,
            timeout=timeout_s, env=env, cwd=str(_PROJECT_ROOT),
        )
    except subprocess.TimeoutExpired:
        detail = f"timed out after {timeout_s:.0f} s (hangs, or far too slow here)"
        return LintReport(entry.id, [Check("run", "fail", detail)], seconds=time.perf_counter() - start)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])[:500]
        detail = f"lint worker exited with {proc.returncode}: {tail}"
        return LintReport(entry.id, [Check("run", "fail", detail)], seconds=time.perf_counter() - start)
    data = json.loads(lines[-1])
    return LintReport(data["problem_id"], [Check(**c) for c in data["checks"]], data["scale"], data["seconds"],
                      data.get("needs_bytes"))


def lint_entries(entries: list[Entry], *, device: str = "cpu", scale: str = "auto",
                 budget: int = DEFAULT_BUDGET_BYTES, timeout_s: float = 300.0, jobs: int = 1,
                 on_report: Callable[[LintReport], None] | None = None) -> list[LintReport]:
    """Lint many problems, `jobs` subprocesses at a time, each within `budget`; `on_report(report)` is called once
    per problem, as it finishes.

    With several jobs, a problem whose full-size run needs more than `budget` but fits what the jobs share
    (`jobs` x `budget`) is linted again at the end, alone, within that; only that report is given. So one command
    lints a whole checkout, the few large problems one at a time."""
    threads = max(1, (os.cpu_count() or 1) // jobs) if device == "cpu" else None
    lock = threading.Lock()
    alone_budget = jobs * budget

    def report(r: LintReport) -> LintReport:
        if on_report is not None:
            with lock:  # reports from parallel jobs print whole, one at a time
                on_report(r)
        return r

    def one(entry: Entry) -> LintReport:
        r = lint_entry(entry, device=device, scale=scale, budget=budget, timeout_s=timeout_s, threads=threads)
        return r if _later_alone(r, jobs, alone_budget) else report(r)

    if jobs <= 1:
        return [one(e) for e in entries]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        reports = list(pool.map(one, entries))
    alone_threads = os.cpu_count() if device == "cpu" else None
    return [report(lint_entry(e, device=device, scale=scale, budget=alone_budget, timeout_s=timeout_s,
                              threads=alone_threads))
            if _later_alone(r, jobs, alone_budget) else r for e, r in zip(entries, reports)]


def _later_alone(report: LintReport, jobs: int, alone_budget: int) -> bool:
    """Whether the budget alone stopped this problem's full-size run, and the jobs' whole budget would not."""
    return jobs > 1 and report.needs_bytes is not None and report.needs_bytes <= alone_budget


def _worker_main() -> int:
    """Subprocess entry: read one problem as JSON on stdin, print its report as one JSON line."""
    data = json.loads(sys.stdin.read())
    p = data["problem"]
    problem = problem_from_source(p["source"], name=p["name"], problem_id=p["id"], level=p["level"], path=p["path"])
    report = lint_problem_here(problem, device=data["device"], scale=data["scale"], budget=int(data["budget"]))
    result = {"problem_id": report.problem_id, "checks": [asdict(c) for c in report.checks], "scale": report.scale,
              "seconds": report.seconds, "needs_bytes": report.needs_bytes}
    sys.stdout.write("\n" + json.dumps(result) + "\n")  # after anything the problem itself printed
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main())
