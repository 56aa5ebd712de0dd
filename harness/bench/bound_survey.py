"""`harness bench eval --part bound-survey`: how often the wall bound doubts honest candidates under load.

The parent bounds a worker's reported times by the wall time it observes for each timed block (`eval.timing.measure.
wall_bound`). Beside other evaluations an honest candidate's blocks can run slower than the reference's; such a
finding is looked at again, then judged again alone in a new worker (`context.RetryAlone`). Here `n` distinct honest
Triton candidates (launch variants of one 16M-element problem, calls of about 70 us on an H100) are evaluated from
`at_once` threads by one evaluator with `workers_per_gpu=at_once`: how many are rejected (the target is none), how
many needed a second look or a retry alone, and the distributions of unexplained time over its limit and of the
paired candidate-minus-reference gap. Every candidate is honest, so every doubt counted here is noise.
"""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from eval import Evaluator
from harness.bench.pools import bench_config, bench_device, bound_row, bound_summary, environment
from harness.bench.serve_bench import CPU_N, GPU_N, batch
from harness.corpus import candidates
from harness.progress import Tally


def run(n: int = 64, at_once: int = 8) -> dict[str, Any]:
    """Evaluate the batch `at_once` at a time; one row per candidate and the summary of the lot."""
    elements = GPU_N if bench_device() == "cuda" else CPU_N
    problem = candidates.problem(elements)
    sources = batch(n, elements, "bound-survey")
    tally = Tally(n)
    with tempfile.TemporaryDirectory() as tmp, Evaluator(bench_config(tmp, workers_per_gpu=at_once)) as ev:
        ev.wait_warm(900)

        def judge(source: str) -> dict[str, Any]:
            result = ev.evaluate(problem, source, "triton")
            row = {**bound_row(result), "speedup": result.speedup}
            print(f"{tally.step()} {row['status']}{' (retried alone)' if row['retried_alone'] else ''}",
                  flush=True)
            return row

        with ThreadPoolExecutor(at_once, thread_name_prefix="kh-survey") as runners:
            rows = list(runners.map(judge, sources))
    return {"environment": environment(), "problem": problem.id, "candidates": n, "at_once": at_once,
            "rows": rows, "summary": bound_summary(rows)}


def print_table(report: dict[str, Any]) -> None:
    s = report["summary"]
    print(f"bound survey: {report['candidates']} honest candidates of {report['problem']}, {report['at_once']} at once")
    print(f"correct {s['correct']}/{report['candidates']}, retried alone {s['retried_alone']}, "
          f"second looks {s['second_looks']}")
    print(f"unexplained / limit: {s['unexplained_over_limit']}")
    print(f"paired gap median (us/rep): {s['paired_gap_median_us']}")
    for reason in s["rejected"]:
        print(f"  rejected: {reason}")
