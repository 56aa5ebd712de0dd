"""`harness bench eval --part flips`: do verdicts of honest microsecond-scale candidates flip between runs?

The honest Triton candidates of `harness.corpus.flips` (tiny problems: a call takes a few
microseconds, so host noise is as large as the GPU work) are evaluated again and again (distinct sources, nothing
cached), spread over several fresh pools (a new `Evaluator`: new workers), each pool's share of
the evaluations in flight together so the pool is full.
Every verdict other than `correct` is a false reject; a verdict that differs from the same
candidate's previous one is a verdict change. Each row also shows the back-to-back hidden-work
statistic (unexplained wall time per call, `EvalResult.hidden_work`) at its worst against the
limit, so the margin of that check is measured, not assumed (where the batches stopped once the verdict was
settled, `eval.steps.timing_steps.settled_clean`, the statistic is the candidate's lowest excess: an upper bound). Pools
stop starting once the time budget is near, so the part stays under about five minutes on an H100.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from typing import Any

import torch

from eval import EvalConfig, Evaluator, Job, Status
from harness.corpus.flips import honest_cases


def run(rounds: int = 20, pools: int = 5, budget_s: float = 280.0, device: str | None = None) -> dict[str, Any]:
    """Judge every candidate `rounds` times, spread over `pools` fresh pools (each with all of its share in
    flight together, so the pool is full); stop starting pools near the budget."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cases = honest_cases()
    verdicts: dict[str, list[str]] = {label: [] for label, _, _ in cases}
    reasons: dict[str, list[str]] = {label: [] for label, _, _ in cases}
    unexplained: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    limits: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    speedups: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    t_start = time.perf_counter()
    round_s: list[float] = []
    per_pool = [rounds // pools + (1 if k < rounds % pools else 0) for k in range(pools)]
    for k, copies in enumerate(c for c in per_pool if c):
        elapsed = time.perf_counter() - t_start
        if round_s and elapsed + max(round_s) > budget_s:
            print(f"flips: stopping after {k} pools ({elapsed:.0f} s; the next could pass the {budget_s:.0f} s budget)",
                  flush=True)
            break
        t0 = time.perf_counter()
        batch = [(label, problem, source + f"\n# flips pool {k} copy {c}\n")
                 for c in range(copies) for label, problem, source in cases]
        with tempfile.TemporaryDirectory() as cache, Evaluator(EvalConfig(device=device, cache_dir=cache)) as ev:
            results = ev.evaluate_many([Job(problem, source) for _, problem, source in batch])
        round_s.append(time.perf_counter() - t0)
        line = []
        for (label, _, _), r in zip(batch, results):
            verdicts[label].append(r.status.value)
            if r.status is not Status.CORRECT:
                reasons[label].append(r.reason[:300])
            if r.hidden_work:
                unexplained[label].append(r.hidden_work["unexplained_us"])
                limits[label].append(r.hidden_work["limit_us"])
            if r.speedup is not None:
                speedups[label].append(r.speedup)
            line.append(f"{label} {r.status.value}" + (f" ({r.hidden_work['unexplained_us']:.1f}/"
                                                       f"{r.hidden_work['limit_us']:.1f} us)" if r.hidden_work else ""))
        print(f"flips pool {k + 1}: {len(batch)} verdicts in {round_s[-1]:.1f} s; " + "; ".join(line), flush=True)
    rows = []
    for label, _, _ in cases:
        v = verdicts[label]
        rows.append({"case": label, "runs": len(v), "correct": v.count("correct"),
                     "false_rejects": sum(s != "correct" for s in v),
                     "verdict_changes": sum(a != b for a, b in zip(v, v[1:])),
                     "unexplained_us_max": max(unexplained[label]) if unexplained[label] else None,
                     "unexplained_us_median": statistics.median(unexplained[label]) if unexplained[label] else None,
                     "limit_us_min": min(limits[label]) if limits[label] else None,
                     "speedup_min": min(speedups[label]) if speedups[label] else None,
                     "speedup_max": max(speedups[label]) if speedups[label] else None,
                     "reasons": reasons[label][:3]})
    return {"pools": len(round_s), "wall_s": round(time.perf_counter() - t_start, 1),
            "round_s_median": round(statistics.median(round_s), 1) if round_s else None, "rows": rows,
            "false_rejects": sum(r["false_rejects"] for r in rows), "verdicts": sum(r["runs"] for r in rows),
            "verdict_changes": sum(r["verdict_changes"] for r in rows)}


def print_table(report: dict[str, Any]) -> None:
    """The Markdown table (paste into docs/benchmarks.md) and the one-line total."""
    def num(x: float | None, fmt: str) -> str:
        return "—" if x is None else format(x, fmt)

    print(f"\nflips: {report['pools']} fresh pools, {report['wall_s']} s (median {report['round_s_median']} s per pool)\n")
    print("| case | runs | correct | false rejects | verdict changes | hidden-work excess us/call, median / max "
          "(limit) | speedup min..max |")
    print("|---|---:|---:|---:|---:|---|---|")
    for r in report["rows"]:
        print(f"| {r['case']} | {r['runs']} | {r['correct']} | {r['false_rejects']} | {r['verdict_changes']} | "
              f"{num(r['unexplained_us_median'], '.1f')} / {num(r['unexplained_us_max'], '.1f')} "
              f"({num(r['limit_us_min'], '.1f')}) | {num(r['speedup_min'], '.2f')}..{num(r['speedup_max'], '.2f')} |")
    print(f"\n{report['false_rejects']} false rejects and {report['verdict_changes']} verdict changes in "
          f"{report['verdicts']} verdicts")
    for r in report["rows"]:
        for reason in r["reasons"]:
            print(f"  {r['case']}: {reason}")
