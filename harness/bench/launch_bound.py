"""`harness bench eval --part launch-bound`: do launch-bound references time the same across processes?

For each problem of the selection (default: the suite's recurrent problems and other references
made of many small kernels, plus one compute-bound control), `sessions` times over: a fresh
evaluator (so fresh worker processes) evaluates the reference itself as the candidate
(`class ModelNew(Model)`), once with `eval.cuda_graphs=off` and once, in another fresh evaluator,
with `auto`. Printed per problem: the reference's median per session under each mode, their
spread across processes (max/min of the medians), the GPU busy share of an eager call and
whether it was flagged host-bound, and the mode graphs actually ran in.

On a CPU no time is measured: one session runs at the problems' reduced sizes, so the code path
runs, and the table says `n/t`.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from typing import Any

import torch

from eval import EvalConfig, EvalResult, Evaluator, Job
from problems import Problem, select_problems

# recurrent references (a kernel or more per time step) and references of many small kernels, then a control
LAUNCH_BOUND = ("L3/06_lstm", "L3/11_gru", "L3/07_moe_layer")
CONTROL = ("L1/01_square_matmul",)
DEFAULT_SELECTION = ",".join(LAUNCH_BOUND + CONTROL)
MODES = ("off", "auto")
# only the reference's timing matters here: the checks that cost time and judge a candidate are thinned out
_SETTINGS: dict[str, Any] = {"own_kernel_policy": "report", "trials": 2, "hidden_shapes": False,
                             "hidden_work_check": False, "workers_per_gpu": 1, "call_timeout_s": 120.0}


def reference_as_candidate(problem: Problem) -> str:
    """The problem's own source with `ModelNew` = `Model`: both sides time the reference."""
    return problem.source + "\n\nclass ModelNew(Model):\n    pass\n"


def _config(mode: str, gpu: bool) -> EvalConfig:
    fields = {f.name for f in dataclasses.fields(EvalConfig)}
    settings = {k: v for k, v in _SETTINGS.items() if k in fields}
    if "min_own_time_fraction" in fields:  # the reference has no kernel of its own: no share to require
        settings["min_own_time_fraction"] = 0.0
    # no cache: every session measures afresh (and probes no roofline ceilings, which need one)
    return EvalConfig(device="cuda" if gpu else "cpu", gpus=[0] if gpu else None, cache_dir=None,
                      cuda_graphs=mode, **settings)


def _session(problems: list[Problem], mode: str, gpu: bool, label: str) -> list[EvalResult]:
    """One fresh evaluator (fresh worker processes) evaluates every problem's reference against itself.

    Each result is printed as it finishes, so a run cut short still shows what it measured."""
    def show(i: int, r: EvalResult) -> None:
        ref = f"{r.reference_timing.median_ms:.4f} ms" if r.reference_timing else "n/t"
        print(f"{label} cuda_graphs={mode} {problems[i].id}: {r.status.value}, reference {ref}, "
              f"mode {r.timing_mode}, busy {json.dumps(r.gpu_busy)}, host/GPU {json.dumps(r.host_share)}, "
              f"host ms {json.dumps(r.host_ms)}, host-bound {r.host_bound}", flush=True)

    with Evaluator(_config(mode, gpu)) as ev:
        return ev.evaluate_many([Job(pr, reference_as_candidate(pr)) for pr in problems], on_result=show)


def measure(selection: str = DEFAULT_SELECTION, sessions: int = 5, modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """Every problem's reference, `sessions` fresh evaluators per mode; one row per (problem, mode).

    `modes=("off",)` alone is a survey of the host-bound flag over many references (half the time)."""
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        raise ValueError(f"graph modes: choose from {', '.join(MODES)} (got {', '.join(modes) or 'none'})")
    gpu = torch.cuda.is_available()
    problems = select_problems(selection)
    sessions = sessions if gpu else 1
    runs: dict[tuple[str, str], list[EvalResult]] = {(pr.id, m): [] for pr in problems for m in modes}
    t0 = time.perf_counter()
    for s in range(sessions):
        for mode in modes:
            for pr, r in zip(problems, _session(problems, mode, gpu, f"session {s + 1}/{sessions}")):
                runs[(pr.id, mode)].append(r)
    rows = [_row(pid, mode, results) for (pid, mode), results in runs.items()]
    flagged = sorted({pid for (pid, _), results in runs.items() if any(r.host_bound for r in results)})
    return {"selection": selection, "sessions": sessions, "timed": gpu, "rows": rows, "flagged": flagged,
            "wall_s": round(time.perf_counter() - t0, 1)}


def _row(pid: str, mode: str, results: list[EvalResult]) -> dict[str, Any]:
    ref = [r.reference_timing.median_ms for r in results if r.reference_timing is not None]
    cand = [r.candidate_timing.median_ms for r in results if r.candidate_timing is not None]
    busy = [r.gpu_busy.get("reference") for r in results if r.gpu_busy.get("reference") is not None]
    return {"problem": pid, "cuda_graphs": mode, "statuses": [r.status.value for r in results],
            "timing_modes": sorted({r.timing_mode for r in results if r.reference_timing is not None}),
            "reference_ms": [round(x, 4) for x in ref], "candidate_ms": [round(x, 4) for x in cand],
            "reference_max_over_min": max(ref) / min(ref) if ref else None,
            "reference_busy": [round(b, 3) for b in busy],
            "reference_host_share": [r.host_share["reference"] for r in results if "reference" in r.host_share],
            "host_bound_sessions": sum(bool(r.host_bound) for r in results),
            "notes": sorted({f for r in results for f in r.flags if f.startswith(("cuda_graphs", "host-bound"))}
                            | {r.reason for r in results if not r.is_correct})}


def table(report: dict[str, Any]) -> str:
    """The rows as a fixed-width table (what the lead copies into docs/benchmarks.md)."""
    lines = [f"launch-bound references: {report['sessions']} fresh evaluator session(s) per mode, reference timed "
             "against itself (median per session)" + ("" if report["timed"] else "; CPU: nothing timed (n/t)"),
             f"{'problem':<24}{'graphs':>7}{'ran as':>12}{'median ms (min..max over sessions)':>38}{'max/min':>9}"
             f"{'GPU busy':>10}{'host/GPU':>10}{'host-bound':>12}"]
    for row in report["rows"]:
        ref = row["reference_ms"]
        spread = f"{statistics.median(ref):.3f} ({min(ref):.3f}..{max(ref):.3f})" if ref else "n/t"
        ratio = f"{row['reference_max_over_min']:.3f}" if row["reference_max_over_min"] else "n/t"
        busy = f"{statistics.median(row['reference_busy']):.0%}" if row["reference_busy"] else "n/t"
        host = row.get("reference_host_share") or []
        host = f"{statistics.median(host):.2f}" if host else "n/t"
        ran = "/".join(row["timing_modes"]) or "-"
        flagged = f"{row['host_bound_sessions']}/{len(row['statuses'])}"
        lines.append(f"{row['problem']:<24}{row['cuda_graphs']:>7}{ran:>12}{spread:>38}{ratio:>9}{busy:>10}{host:>10}{flagged:>12}")
    for row in report["rows"]:
        lines += [f"  {row['problem']} cuda_graphs={row['cuda_graphs']}: {note}" for note in row["notes"]]
    if "flagged" in report:
        lines.append(f"flagged host-bound in any session: {len(report['flagged'])} of "
                     f"{len({row['problem'] for row in report['rows']})} problems {report['flagged']}")
    return "\n".join(lines)


def main(sessions: int = 5, selection: str = DEFAULT_SELECTION, modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """Measure, print the table, return the report."""
    report = measure(selection, sessions, modes)
    print(table(report), flush=True)
    return report
