"""`harness bench eval --part own-share`: the own-kernel share of GPU time (`eval.min_own_time_fraction`).

Evaluates the cases of `harness.corpus.own_share` (every reference solution, three honest hybrid
candidates, the smallest honest shares we know of, and a decoy) under the default rules, and prints one Markdown row per case: verdict, the share of
forward's GPU time in the candidate's own kernels and the largest kernel. The decoy must be
rejected by the share rule and every other case must be correct; the lowest honest share against
the highest decoy share is what the default minimum is chosen between (see `eval/config.py`).
"""


from __future__ import annotations

import tempfile
import time
from typing import Any

import torch

from eval import EvalConfig, EvalResult, Evaluator, Job, Status, share_text
from harness.corpus.own_share import ShareCase, cases, problem


def run(config: EvalConfig | None = None) -> dict[str, Any]:
    """Evaluate every case with the pool full; rows with verdict, share and the largest kernel."""
    chosen = cases()
    problems = {pid: problem(pid) for pid in {c.problem_id for c in chosen}}
    with tempfile.TemporaryDirectory() as cache:
        config = config or EvalConfig(device="cuda" if torch.cuda.is_available() else "cpu", cache_dir=cache)
        t0 = time.perf_counter()
        with Evaluator(config) as ev:
            results = ev.evaluate_many([Job(problems[c.problem_id], c.source) for c in chosen])
        wall = time.perf_counter() - t0
    rows = [_row(c, r) for c, r in zip(chosen, results)]
    honest = [r["own_share"] for r in rows if r["kind"] != "decoy" and r["own_share"] is not None]
    decoys = [r["own_share"] for r in rows if r["kind"] == "decoy" and r["own_share"] is not None]
    return {"minimum": config.min_own_time_fraction, "wall_s": round(wall, 1), "rows": rows,
            "lowest_honest_share": min(honest) if honest else None,
            "highest_decoy_share": max(decoys) if decoys else None,
            "unexpected": [r["case"] for r in rows if r["verdict"] != r["expected"]]}


def _row(case: ShareCase, result: EvalResult) -> dict[str, Any]:
    k = result.kernels
    top = k.top_kernels[0] if k and k.top_kernels else None
    return {"kind": case.kind, "case": case.label, "problem": case.problem_id, "verdict": result.status.value,
            "expected": case.expected, "own_share": k.own_time_fraction if k else None,
            "own_kernels": k.own_kernels_launched if k else [],
            "top_kernel": [top[0][:60], round(top[1] * 1000, 1)] if top else None,
            "reason": result.reason if result.status is not Status.CORRECT else ""}


def print_table(report: dict[str, Any]) -> None:
    """The Markdown table (paste into docs/benchmarks.md) and the two numbers the minimum sits between."""
    print(f"\nown-kernel share of forward's GPU time, default rules (eval.min_own_time_fraction = "
          f"{report['minimum']:.2%}); {len(report['rows'])} cases in {report['wall_s']} s\n")
    print("| kind | case | verdict | own share | largest kernel (us per call) |")
    print("|---|---|---|---:|---|")
    for r in report["rows"]:
        share = "n/a" if r["own_share"] is None else share_text(r["own_share"])
        top = f"{r['top_kernel'][0]} ({r['top_kernel'][1]})" if r["top_kernel"] else "—"
        verdict = r["verdict"] + ("" if r["verdict"] == r["expected"] else f" (expected {r['expected']})")
        print(f"| {r['kind']} | {r['case']} | {verdict} | {share} | {top.replace('|', '/')} |")
    low, high = report["lowest_honest_share"], report["highest_decoy_share"]
    print(f"\nlowest honest share: {'n/a' if low is None else share_text(low)}; highest decoy share: "
          f"{'n/a' if high is None else share_text(high)}; minimum: {share_text(report['minimum'])}; unexpected "
          f"verdicts: {', '.join(report['unexpected']) or 'none'}")
    for r in report["rows"]:
        if r["reason"]:
            print(f"  {r['case']}: {r['reason'][:300]}")
