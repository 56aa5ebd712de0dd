"""`harness presets bench`: the suite's reference solutions and the hostile candidates under each
evaluator preset (by default our strict rules and `eval=kernelbench`), and how verdicts and
speedups move between them.

Honest solutions should get the same verdict under both, with speedups close (the two timing
methods differ: median of L2-flushed, interleaved calls against the mean of synchronised calls
on warm caches). The hostile candidates (`harness.corpus.hostile`, with a few that aim at exactly
the rules KernelBench leaves out) show what the strict rules catch. On a CPU only verdicts are
compared, at the problems' reduced sizes; on a GPU, speedups too.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eval import EvalResult, Evaluator, Job
from harness.corpus import hostile
from harness.corpus.solutions import solutions
from harness.presets import preset_config
from problems import Problem, problem_from_source

# hostile candidates are judged with short limits: several of them hang on purpose
_HOSTILE_LIMITS = {"import_timeout_s": 20.0, "call_timeout_s": 10.0}


@dataclass(frozen=True)
class BenchCase:
    """One candidate for one problem: a reference solution (`kind` solution) or a hostile one."""

    kind: str
    label: str
    problem: Problem
    source: str
    strict_expected: str = ""  # the verdict the strict rules must give (hostile cases)


def solution_cases(selection: str) -> list[BenchCase]:
    """Every selected suite problem that has a hand-written solution."""
    return [BenchCase("solution", problem.id, problem, source) for problem, source in solutions(selection)]


def hostile_cases() -> list[BenchCase]:
    """`harness.corpus.hostile`'s candidates and its few aimed at the rules KernelBench leaves out."""
    problems = {hostile.PROBLEM: problem_from_source(hostile.PROBLEM, name="add_relu", problem_id="hostile/add_relu"),
                hostile.HIDDEN_SHAPES: problem_from_source(hostile.HIDDEN_SHAPES, name="add_relu_hidden",
                                                           problem_id="hostile/add_relu_hidden")}
    cases = [BenchCase("hostile", name, problems[hostile.PROBLEM], source, expected)
             for name, (source, expected, _) in sorted(hostile.HOSTILE.items())]
    gaps = hostile.kernelbench_gaps(on_gpu=torch.cuda.is_available())
    cases += [BenchCase("hostile", name, problems[prob], source, expected)
              for name, (prob, source, expected) in gaps.items()]
    return cases


def evaluate_all(cases: list[BenchCase], preset: str, device: str) -> list[EvalResult]:
    """Judge every case under one preset, the pool full (solutions with the preset's limits, hostile ones
    with short ones); one line per finished case, so a cut-off run still shows what it did."""
    results: dict[int, EvalResult] = {}
    for kind in ("solution", "hostile"):
        batch = [i for i, c in enumerate(cases) if c.kind == kind]
        if not batch:
            continue
        limits = _HOSTILE_LIMITS if kind == "hostile" else {}

        def report(j: int, result: EvalResult, batch: list[int] = batch) -> None:
            share = result.kernels.own_time_fraction if result.kernels else None
            print(f"  {preset:>12} {kind:<8} {cases[batch[j]].label:<40} {result.status.value:<14} "
                  f"{'—' if result.speedup is None else f'{result.speedup:.2f}x':>8} "
                  f"own {'—' if share is None else f'{share:.0%}':>4} {result.reason[:80]}", flush=True)

        with Evaluator(preset_config(preset, device=device, **limits)) as ev:
            found = ev.evaluate_many([Job(cases[i].problem, cases[i].source) for i in batch], on_result=report)
        results.update(zip(batch, found))
    return [results[i] for i in range(len(cases))]


def rows_for(cases: list[BenchCase], presets: list[str], results: dict[str, list[EvalResult]]) -> list[dict[str, Any]]:
    """One row per case: each preset's verdict, speedup and reason."""
    rows = []
    for i, case in enumerate(cases):
        row: dict[str, Any] = {"kind": case.kind, "case": case.label, "problem": case.problem.id,
                               "strict_expected": case.strict_expected}
        for preset in presets:
            r = results[preset][i]
            row[preset] = {"status": r.status.value, "speedup": r.speedup, "preset": r.preset,
                           "reason": r.reason[:300], "flags": list(r.flags),
                           "own_time_fraction": r.kernels.own_time_fraction if r.kernels else None,
                           "top_kernels": r.kernels.top_kernels[:4] if r.kernels else []}
        row["verdicts_agree"] = len({row[p]["status"] for p in presets}) == 1
        rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]], presets: list[str]) -> dict[str, Any]:
    """Verdict agreement of solutions, speedup ratios, and hostile candidates passed by one preset only."""
    base, *others = presets
    out: dict[str, Any] = {}
    sols = [r for r in rows if r["kind"] == "solution"]
    out["solutions"] = len(sols)
    out["solutions_agreeing"] = sum(r["verdicts_agree"] for r in sols)
    for other in others:
        ratios = [r[other]["speedup"] / r[base]["speedup"] for r in sols
                  if r[base]["speedup"] and r[other]["speedup"]]
        out[f"speedup_ratio_{other}_over_{base}"] = {
            "n": len(ratios),
            "geomean": math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None,
            "min": min(ratios) if ratios else None, "max": max(ratios) if ratios else None}
        hostile = [r for r in rows if r["kind"] == "hostile"]
        out[f"hostile_correct_only_under_{other}"] = [
            r["case"] for r in hostile if r[other]["status"] == "correct" and r[base]["status"] != "correct"]
    out["hostile_strict_unexpected"] = [r["case"] for r in rows if r["kind"] == "hostile" and r["strict_expected"]
                                        and r[base]["status"] != r["strict_expected"]]
    return out


def table(rows: list[dict[str, Any]], presets: list[str]) -> str:
    """Markdown: one row per case, the verdict and speedup under each preset, whether verdicts agree."""
    heads = ["kind", "case"] + [f"{p}" for p in presets] + [f"speedup {p}" for p in presets] + ["agree"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in sorted(rows, key=lambda r: (r["kind"] != "solution", r["verdicts_agree"], r["case"])):
        speeds = ["—" if r[p]["speedup"] is None else f"{r[p]['speedup']:.2f}×" for p in presets]
        lines.append("| " + " | ".join([r["kind"], r["case"], *(r[p]["status"] for p in presets), *speeds,
                                        "yes" if r["verdicts_agree"] else "NO"]) + " |")
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    """Where the numbers came from."""
    import triton

    env: dict[str, Any] = {"torch": torch.__version__, "triton": triton.__version__, "cpu_cores": os.cpu_count(),
                           "date": time.strftime("%Y-%m-%d")}
    env["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (Triton interpreter)"
    return env


def main(selection: str, presets: list[str], *, device: str = "auto", solutions: bool = True, hostile: bool = True,
         out: str | None = None) -> int:
    if len(presets) < 2:
        print("error: give at least two presets (--presets default,kernelbench)")
        return 2
    try:
        for p in presets:
            preset_config(p)  # an unknown preset fails before any work
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    cases = (solution_cases(selection) if solutions else []) + (hostile_cases() if hostile else [])
    if not cases:
        print(f"error: nothing to evaluate (selection {selection!r} has no solutions and the hostile candidates are off)")
        return 2
    t0 = time.perf_counter()
    results = {p: evaluate_all(cases, p, device) for p in presets}
    rows = rows_for(cases, presets, results)
    report = {"environment": environment(), "presets": presets, "selection": selection, "summary": summary(rows, presets),
              "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
    print(f"# Presets: {' vs '.join(presets)} on {report['environment']['device']} ({report['seconds']} s)\n")
    print(table(rows, presets))
    print("\n" + json.dumps(report["summary"], indent=2))
    if out:
        Path(out).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {out}")
    return 0
