"""`harness bench trusted`: the reference solutions through the two-process measurement, in rounds of one session.

Per solution and round: the verdict, the speedup and the wall bound's figures (the candidate's unexplained wall
time per repetition against the limit, `eval.timing.claim_bounds.wall_bound`); per round, the batch rate with a fresh
worker per candidate; per solution, the repeatability of its speedup across rounds (max/min). GPU only."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

from eval import EvalConfig, EvalResult, Evaluator, Job, Status
from harness.progress import Tally
from problems import LEVELS, suite_problem

SOLUTIONS = Path(__file__).resolve().parents[2] / "problems" / "solutions"


def solution_jobs() -> list[Job]:
    return [Job(suite_problem(f"{LEVELS[p.parent.name]}/{p.stem}"), p.read_text(), "triton")
            for level in sorted(LEVELS) for p in sorted((SOLUTIONS / level).glob("*.py"))]


def _largest_ratio(results: list[EvalResult], figure: str, limit: str) -> float | None:
    """The largest of a bound's figure over its limit among the honest solutions (how near they came to a reject)."""
    ratios = [r.wall_bound[figure] / r.wall_bound[limit] for r in results if r.wall_bound.get(limit)]
    return round(max(ratios), 3) if ratios else None


def _observed_line(r: EvalResult) -> str:
    """Observed timing's figures for one solution: the loop's speedup, the observed one, their ratio (the bound caps
    the score at OBSERVED_BOUND of it), and the blocks' shape."""
    o = r.observed
    if not o:
        return ""
    return (f"\n    observed: loop {o['loop_speedup']:.3f} observed {o['speedup']:.3f} ratio "
            f"{o['loop_speedup'] / max(o['speedup'], 1e-9):.3f} (candidate {o['candidate_ms'] * 1000:.1f} us, "
            f"reference {o['reference_ms'] * 1000:.1f} us, reported {o['reported_candidate_ms'] * 1000:.1f} us; handover "
            f"{o['handover_us']:.1f} us spread {o['handover_spread_us']:.1f}; {o['reps_per_block']:.0f} reps x "
            f"{o['blocks']:.0f} blocks)")


def main(rounds: int = 2, out: str | None = None, observed: bool = False) -> int:
    if not torch.cuda.is_available():
        print("harness bench trusted needs a CUDA GPU")
        return 2
    import triton

    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, Triton {triton.__version__}, "
          f"Python {platform.python_version()}", flush=True)
    report: dict[str, Any] = {"rounds": [], "speedups": {}}
    t0 = time.time()
    with Evaluator(EvalConfig(device="cuda", cache_dir=None, observed_timing=observed)) as ev:
        ev.wait_warm(300)
        print(f"pool warm in {time.time() - t0:.1f} s", flush=True)
        jobs = solution_jobs()
        tally = Tally(rounds * len(jobs))
        for rnd in range(rounds):

            def on_result(i: int, r: EvalResult) -> None:  # a line as each solution is judged
                w = r.wall_bound
                print(f"{tally.step()} {rnd} {jobs[i].problem.id:40s} {r.status.value:13s} speedup "
                      f"{r.speedup or 0:7.3f}  wall bound "
                      f"{w.get('unexplained_us', 0):8.1f} of {w.get('limit_us', 0):6.1f} us "
                      f"(reference overhead {w.get('reference_overhead_us', 0):7.1f}, from "
                      f"{w.get('reference_lowest_us', 0):.1f} to {w.get('reference_highest_us', 0):.1f}; candidate "
                      f"lowest {w.get('candidate_lowest_us', 0):.1f}, median {w.get('candidate_median_us', 0):.1f}; "
                      f"paired gap {w.get('paired_gap_median_us', 0):.1f}; call {w.get('call_us', 0):.1f}; blocks "
                      f"{w.get('blocks', 0)}; loop GPU gap {w.get('loop_gpu_gap_us', 0):.1f} of "
                      f"{w.get('loop_gpu_limit_us', 0):.1f}) SOL {r.sol_fraction or 0:.3f}"
                      + ("" if r.status is Status.CORRECT else f"  {r.reason[:200]}") + _observed_line(r), flush=True)

            t = time.time()
            results = ev.evaluate_many(jobs, on_result=on_result)
            wall = time.time() - t
            for job, r in zip(jobs, results):
                report["speedups"].setdefault(job.problem.id, []).append(r.speedup)
            correct = sum(r.status is Status.CORRECT for r in results)
            row = {"correct": correct, "of": len(results), "seconds": round(wall, 1),
                   "per_min": round(len(results) / wall * 60, 1),
                   "largest_wall_ratio": _largest_ratio(results, "unexplained_us", "limit_us"),
                   "largest_loop_gpu_ratio": _largest_ratio(results, "loop_gpu_gap_us", "loop_gpu_limit_us")}
            report["rounds"].append(row)
            report.setdefault("observed", []).extend(
                {"round": rnd, "problem": job.problem.id, **r.observed} for job, r in zip(jobs, results) if r.observed)
            report.setdefault("wall_bounds", []).extend(
                {"round": rnd, "problem": job.problem.id, **r.wall_bound} for job, r in zip(jobs, results))
            print(f"round {rnd}: {json.dumps(row)}", flush=True)
    for pid, speedups in report["speedups"].items():
        if None not in speedups:
            print(f"repeat {pid:40s} {[round(s, 3) for s in speedups]} max/min {max(speedups) / min(speedups):.4f}")
    if out:
        Path(out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
