"""`harness bench eval --part throughput|latency|scaling|ray-scaling|repeatability`: the evaluator's rates.

throughput: one fixed mixed batch (`candidates.mixed_batch`: three problem sizes, Triton and
CUDA, honest and failing, one crash, one timeout, one incorrect) through three evaluators,
side by side in one run: the warm pool (every worker of every GPU, candidates pipelined),
a single warm worker evaluating one candidate at a time (no pipelining, builds on the
candidate's path), and a KernelBench-style process per candidate, which pays the start-up every
time. Each prints candidates/min, GPU busy share (NVML) and per-phase medians.
latency: one honest Triton candidate at 16M elements on a warm, otherwise idle pool.
scaling: the honest Triton candidates of the batch on one GPU, then on every visible GPU, with both
ratios (whole batch, and steady: between the first and last tenth of completions).
ray-scaling: the same batch through `executor=ray` (a local Ray instance): one actor, then one per GPU.
repeatability: the same candidates in separate evaluator sessions while the pool is full
(filler candidates keep the other workers busy); the spread (max/min) of their speedups.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from eval import Evaluator, Job
from harness.bench.pools import (CPU_SIZES, GPU_SIZES, LIMITS, GpuBusySampler, bench_config, bench_device,
                                 phase_medians, results_summary, run_pool, summary, timed_batch)
from harness.bench.process_per_candidate import evaluate_in_new_process
from harness.corpus import candidates
from harness.corpus.candidates import BenchJob

REPEAT_SIZES = (1 << 16, 1 << 20, 1 << 23, 1 << 25, 1 << 27)


def _ratios(many: dict[str, Any], one: dict[str, Any]) -> dict[str, float | None]:
    """Two pool rows' whole-batch and steady rate ratios."""
    steady = (many["steady_candidates_per_min"], one["steady_candidates_per_min"])
    return {"ratio": round(many["candidates_per_min"] / one["candidates_per_min"], 2),
            "steady_ratio": round(steady[0] / steady[1], 2) if None not in steady else None}


def run_single_worker(batch: list[BenchJob]) -> dict[str, Any]:
    """One warm worker on GPU 0, one candidate at a time, builds on the candidate's path."""
    with tempfile.TemporaryDirectory() as cache:
        config = bench_config(cache, workers_per_gpu=1, gpus=[0] if bench_device() == "cuda" else None)
        t_start = time.perf_counter()
        with Evaluator(config) as ev:
            ev.wait_warm(600)
            warm_s = time.perf_counter() - t_start
            with GpuBusySampler([0] if bench_device() == "cuda" else None) as sampler:
                t0 = time.perf_counter()
                results = [ev.evaluate(j.problem, j.source, j.backend) for j in batch]
                wall = time.perf_counter() - t0
    out = results_summary("single worker", batch, results, wall, sampler.busy_share())
    out["start_s"] = round(warm_s, 2)
    return out


def run_process_per_candidate(batch: list[BenchJob]) -> dict[str, Any]:
    """KernelBench's way: a fresh process per candidate (see `process_per_candidate`), under the same wall limits."""
    device = bench_device()
    os.environ["KH_BENCH_DEVICE"] = device
    statuses, phases, per = [], [], []
    with GpuBusySampler([0] if device == "cuda" else None) as sampler:
        t0 = time.perf_counter()
        for job in batch:
            # it has no per-call limit of its own: a forward gets 3x our call limit, a CUDA build our import limit
            limit = 3 * LIMITS["call_timeout_s"] + (LIMITS["import_timeout_s"] if job.backend == "cuda" else 0)
            with tempfile.TemporaryDirectory() as work:
                out = evaluate_in_new_process(job.problem.source, job.source, device, limit, Path(work))
            statuses.append(out["status"])
            phases.append(out["phase_seconds"])
            per.append(out["phase_seconds"]["total"])
        wall = time.perf_counter() - t0
    return summary("process per candidate", batch, statuses, wall, phases, sampler.busy_share(), per)


EVALUATORS = ("pool", "single", "process")


def throughput(copies: int = 1, evaluators: tuple[str, ...] = EVALUATORS) -> dict[str, Any]:
    """The evaluators on the same batch, side by side; the pool takes `copies` distinct copies of it.

    With one copy the pool's wall time is the batch's longest path (one `nvcc` build plus one
    evaluation, ~1 min on the H100), so it measures latency more than throughput. More copies
    (distinct sources: nothing is cached or built once for two) show the steady state of a study
    with many candidates in flight. The single worker and the process per candidate evaluate one
    candidate at a time, so their rate does not depend on the batch's length; they take one copy.
    """
    gpu = bench_device() == "cuda"
    batch = candidates.mixed_batch(GPU_SIZES if gpu else CPU_SIZES, with_cuda=gpu)
    runs = {"pool": lambda: run_pool(candidates.distinct_copies(batch, copies), gpus=[0] if gpu else None),
            "single": lambda: run_single_worker(batch), "process": lambda: run_process_per_candidate(batch)}
    rows = []
    for name in evaluators:
        rows.append(runs[name]())
        print(json.dumps(rows[-1]), flush=True)  # each row as soon as it is measured
    rate = {name: row["candidates_per_min"] for name, row in zip(evaluators, rows)}
    out: dict[str, Any] = {"batch": [j.label for j in batch], "pool_copies": copies, "rows": rows}
    if "pool" in rate and "single" in rate:
        out["pool_over_single"] = round(rate["pool"] / rate["single"], 2)
    if "pool" in rate and "process" in rate:
        out["pool_over_process_per_candidate"] = round(rate["pool"] / rate["process"], 2)
    return out


def latency(n: int = 1 << 24, repeats: int = 3) -> dict[str, Any]:
    """Wall time of one honest Triton candidate on a warm, otherwise idle pool (distinct sources, so nothing is cached)."""
    with tempfile.TemporaryDirectory() as cache, Evaluator(bench_config(cache, gpus=[0])) as ev:
        ev.evaluate(candidates.problem(1 << 10), candidates.triton_candidate() + "\n# warm every path once\n")
        runs = [ev.evaluate(candidates.problem(n), candidates.triton_candidate(1024, 4) + f"\n# latency {k}\n")
                for k in range(repeats)]
    return {"elements": n, "statuses": [r.status.value for r in runs],
            "eval_seconds": [round(r.eval_seconds, 3) for r in runs],
            "median_s": round(statistics.median(r.eval_seconds for r in runs), 3),
            "phase_medians": phase_medians([r.phase_seconds for r in runs])}


def scaling(copies: int = 4) -> dict[str, Any]:
    """Honest Triton candidates (distinct sources) on one GPU, then on every visible GPU."""
    batch = candidates.honest_triton_batch(GPU_SIZES, copies)
    one = run_pool(batch, gpus=[0])
    every = list(range(torch.cuda.device_count()))
    out = {"candidates": len(batch), "one_gpu": one}
    if len(every) > 1:
        out["all_gpus"] = run_pool(batch, gpus=every)
        out["gpus"] = len(every)
        out.update(_ratios(out["all_gpus"], one))
    return out


def ray_scaling(copies: int = 4) -> dict[str, Any]:
    """The `scaling` batch through `executor=ray` on a local Ray instance: one evaluator actor, then one per GPU."""
    from harness.executors import ExecutorConfig, RayEvaluator

    batch = candidates.honest_triton_batch(GPU_SIZES if bench_device() == "cuda" else CPU_SIZES, copies)
    gpus = max(1, torch.cuda.device_count())
    out: dict[str, Any] = {"candidates": len(batch), "gpus": gpus}
    for actors in sorted({1, gpus}):
        with tempfile.TemporaryDirectory() as cache:
            t_start = time.perf_counter()
            with RayEvaluator(bench_config(cache), ExecutorConfig(kind="ray", num_actors=actors)) as ev:
                ev.wait_warm(600)
                warm_s = time.perf_counter() - t_start
                with GpuBusySampler(list(range(actors))) as sampler:
                    results, wall, steady = timed_batch(ev, batch)
                nodes = sorted({f"{r.node}:{r.gpu_index}" for r in results})
        row = results_summary(f"ray, {actors} actor(s)", batch, results, wall, sampler.busy_share())
        row.update(actors=actors, start_s=round(warm_s, 2), placements=nodes,
                   steady_candidates_per_min=steady)
        out[f"actors_{actors}"] = row
        print(json.dumps(row), flush=True)
    if gpus > 1:
        out.update(_ratios(out[f"actors_{gpus}"], out["actors_1"]))
    return out


def repeatability(sessions: int = 5, sizes: tuple[int, ...] = REPEAT_SIZES, fillers: int = 6) -> dict[str, Any]:
    """Evaluate one Triton candidate per size in `sessions` separate sessions, with the pool kept full."""
    rows: dict[int, dict[str, list[float]]] = {n: {"speedup": [], "candidate_us": [], "reference_us": [], "n": []} for n in sizes}
    for session in range(sessions):
        measured = [(n, Job(candidates.problem(n), candidates.triton_candidate() + f"\n# session {session}\n"))
                    for n in sizes]
        filler = [(None, Job(candidates.problem(1 << 24), candidates.triton_candidate(256 << (k % 4), 4)
                             + f"\n# session {session} filler {k}\n")) for k in range(fillers)]
        batch = [x for pair in zip(filler, measured) for x in pair] + measured[len(filler):] + filler[len(measured):]
        with tempfile.TemporaryDirectory() as cache, Evaluator(bench_config(cache, gpus=[0])) as ev:
            results = ev.evaluate_many([job for _, job in batch])
        for (n, _), r in zip(batch, results):
            if n is None:
                continue
            if r.speedup is None:
                raise RuntimeError(f"repeatability candidate failed at n={n}: {r.status.value}: {r.reason} {r.error}")
            rows[n]["speedup"].append(r.speedup)
            rows[n]["candidate_us"].append(r.candidate_timing.median_ms * 1000)
            rows[n]["reference_us"].append(r.reference_timing.median_ms * 1000)
            rows[n]["n"].append(r.candidate_timing.n)
    out = []
    for n, row in rows.items():
        out.append({"elements": n, "candidate_us_median": statistics.median(row["candidate_us"]),
                    "reference_us_median": statistics.median(row["reference_us"]),
                    "speedups": [round(s, 4) for s in row["speedup"]],
                    "max_over_min": max(row["speedup"]) / min(row["speedup"]), "reps": row["n"]})
    return {"sessions": sessions, "fillers_per_session": fillers, "rows": out}


def print_throughput(t: dict[str, Any]) -> None:
    busy = lambda v: "n/a" if v is None else f"{v:.0%}"  # noqa: E731
    print(f"\nthroughput: a batch of {len(t['batch'])} candidates through each evaluator; the pool takes "
          f"{t['pool_copies']} distinct cop{'y' if t['pool_copies'] == 1 else 'ies'} of it")
    print(f"{'evaluator':<24}{'cands':>6}{'wall s':>8}{'cand/min':>10}{'s/cand (median)':>17}{'GPU busy':>10}"
          "  unexpected verdicts")
    for r in t["rows"]:
        print(f"{r['evaluator']:<24}{r['candidates']:>6}{r['wall_s']:>8.1f}{r['candidates_per_min']:>10.1f}"
              f"{r['median_s_per_candidate']:>17.2f}{busy(r['gpu_busy_share']):>10}  "
              f"{json.dumps(r['unexpected']) if r['unexpected'] else '-'}")
    for r in t["rows"]:
        print(f"  phase medians, {r['evaluator']}: {json.dumps(r['phase_medians'])}")
    ratios = [f"pool / single worker: {t['pool_over_single']:.2f}x"] if "pool_over_single" in t else []
    if "pool_over_process_per_candidate" in t:
        ratios.append(f"pool / process per candidate: {t['pool_over_process_per_candidate']:.2f}x")
    if ratios:
        print(";  ".join(ratios))


def print_latency(lat: dict[str, Any]) -> None:
    print(f"\nlatency: honest Triton candidate, {lat['elements']} elements, warm idle pool: median "
          f"{lat['median_s']:.2f} s {lat['eval_seconds']} {lat['statuses']}; phases {json.dumps(lat['phase_medians'])}")


def print_scaling(s: dict[str, Any]) -> None:
    print(f"\nscaling: {s['candidates']} honest Triton candidates; one GPU {s['one_gpu']['candidates_per_min']:.1f}/min"
          + (f", {s['gpus']} GPUs {s['all_gpus']['candidates_per_min']:.1f}/min = {s['ratio']:.2f}x (between the "
             f"first and last tenth of completions: {s['steady_ratio']}x)" if "ratio" in s else " (only one GPU visible)"))


def print_ray_scaling(r: dict[str, Any]) -> None:
    line = f"\nray scaling: {r['candidates']} honest Triton candidates; 1 actor {r['actors_1']['candidates_per_min']:.1f}/min"
    if "ratio" in r:
        every = r[f"actors_{r['gpus']}"]
        line += (f", {r['gpus']} actors {every['candidates_per_min']:.1f}/min = {r['ratio']:.2f}x (between the first "
                 f"and last tenth of completions: {r['steady_ratio']}x)")
    print(line)


def print_repeatability(report: dict[str, Any]) -> None:
    print(f"\nrepeatability ({report['sessions']} separate sessions, pool full, Triton add+relu+scale vs eager)")
    print(f"{'elements':>11} {'cand us':>9} {'eager us':>9} {'speedup min..max':>18} {'max/min':>8}")
    for row in report["rows"]:
        s = row["speedups"]
        print(f"{row['elements']:>11} {row['candidate_us_median']:>9.1f} {row['reference_us_median']:>9.1f} "
              f"{min(s):>8.3f}..{max(s):<8.3f} {row['max_over_min']:>8.4f}")
