"""`harness bench eval --part confinement`: what confining a worker costs when it starts, and on throughput.

The evaluator starts a fresh sandboxed worker for every candidate, so the sandbox's price is paid at each
start: the namespaces, the mounts (private tmpfs folders, the read-only view of the host), the process limit
(a pids cgroup or a user namespace) and the dropped identity. Running code inside namespaces costs nothing
measurable afterwards; the start is where the cost is. This part starts workers confined as the evaluator
does and unconfined (no namespace, no limit, the same environment), alternately, and times each from spawn
to its reply to `Hello` (which initialises CUDA, Triton and the timing loop on a GPU). The medians and their
difference are the cost per candidate. Then the same batch of honest Triton candidates goes through the warm pool
on GPU 0 with its workers confined and plain, in rounds that alternate the order: the candidates a minute of each,
and their ratio, are the cost on throughput (spares start off the candidates' path, so most of the start cost is
hidden there).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from eval import Hello, WorkerProcess, prepare_native, process_limit_plan, sandbox_plan
from harness.bench.pools import CPU_SIZES, GPU_SIZES, bench_device, run_pool
from harness.corpus import candidates
from harness.progress import counter_text


def start(gpu: bool, confined: bool, bytecode: Path | None = None) -> tuple[float, str, dict[str, float]]:
    """Seconds from spawn to the `Hello` reply of one worker (reading its imports' bytecode from `bytecode`, if
    given), its process-limit plan, and where the worker's own seconds went (`start_parts_s`: its imports, the
    device's set-up, the timing loop, the warm-up)."""
    t0 = time.perf_counter()
    worker = WorkerProcess(device="cuda" if gpu else "cpu", gpu_index=0 if gpu else None, log_cap_bytes=16_384,
                           isolate_network=confined, isolate_filesystem=confined, bytecode=bytecode)
    try:
        reply, _ = worker.request(Hello(device="cuda:0" if gpu else "cpu", capture_key=1), timeout=300)
        if not reply.ok:
            raise RuntimeError(f"a {'confined' if confined else 'plain'} worker failed to start: {reply.error}")
        parts = {k: float(v) for k, v in reply.info.get("start_parts_s", {}).items() if v is not None}
        return time.perf_counter() - t0, worker.process_limit, parts
    finally:
        worker.close()


def run(starts: int = 10) -> dict[str, Any]:
    """`starts` workers each way, alternating (confined first in even rounds, plain first in odd ones)."""
    gpu = torch.cuda.is_available()
    seconds: dict[str, list[float]] = {"confined": [], "plain": []}
    parts: dict[str, list[dict[str, float]]] = {"confined": [], "plain": []}
    plans: set[str] = set()
    process_limit_plan(sandbox_plan())  # the one-time probes of what confinement this host allows: not timed
    if gpu:  # as the evaluator does before its workers start: a confined worker sees the project read-only
        prepare_native(torch.cuda.get_device_capability(0))
    t0 = time.perf_counter()
    for i in range(starts):
        order = ("confined", "plain") if i % 2 == 0 else ("plain", "confined")
        for way in order:
            took, plan, where = start(gpu, way == "confined")
            seconds[way].append(took)
            parts[way].append(where)
            if way == "confined":
                plans.add(plan)
        print(f"{counter_text(i + 1, starts, time.perf_counter() - t0)} confined {seconds['confined'][-1]:.2f} s, "
              f"plain {seconds['plain'][-1]:.2f} s", file=sys.stderr, flush=True)
    confined, plain = statistics.median(seconds["confined"]), statistics.median(seconds["plain"])
    return {"device": torch.cuda.get_device_name(0) if gpu else "cpu", "starts": starts,
            "sandbox": " ".join(sandbox_plan().prefix[1:-1]) or "none", "process_limit": sorted(plans),
            "median_s": {"confined": round(confined, 3), "plain": round(plain, 3)},
            "cost_s": round(confined - plain, 3), "ratio": round(confined / plain, 3),
            "parts_median_s": {way: _median_parts(rows) for way, rows in parts.items()},
            "seconds": {way: [round(s, 3) for s in values] for way, values in seconds.items()}}


def _median_parts(rows: list[dict[str, float]]) -> dict[str, float]:
    """The median of each part over the starts that reported it."""
    names = sorted({name for row in rows for name in row})
    return {name: round(statistics.median(row[name] for row in rows if name in row), 3) for name in names}


def throughput(copies: int = 2, rounds: int = 4) -> dict[str, Any]:
    """Candidates a minute through the pool on GPU 0, workers confined and plain, `rounds` times each, alternating
    (two rounds each could not tell a 5 % cost from none on an H200: one way's rounds spread 26-36/min)."""
    gpu = bench_device() == "cuda"
    rates: dict[str, list[float]] = {"confined": [], "plain": []}
    unexpected: dict[str, list[dict[str, str]]] = {"confined": [], "plain": []}
    isolated: dict[str, set[str]] = {"confined": set(), "plain": set()}
    for i in range(rounds):
        for way in (("confined", "plain") if i % 2 == 0 else ("plain", "confined")):
            batch = candidates.honest_triton_batch(GPU_SIZES if gpu else CPU_SIZES, copies)  # each run: a new cache
            row = run_pool(batch, confined=way == "confined", gpus=[0] if gpu else None)
            rates[way].append(row["candidates_per_min"])
            unexpected[way].append(row["unexpected"])
            isolated[way].update(row["filesystem_isolated"])
            print(f"round {i + 1}/{rounds} {way}: {row['candidates_per_min']:.1f}/min", file=sys.stderr, flush=True)
    confined, plain = statistics.median(rates["confined"]), statistics.median(rates["plain"])
    return {"candidates": 6 * copies, "rounds": rounds, "candidates_per_min": rates,
            "median_per_min": {"confined": confined, "plain": plain}, "ratio": round(confined / plain, 3),
            "unexpected": unexpected, "filesystem_isolated": {way: sorted(v) for way, v in isolated.items()}}


def print_table(report: dict[str, Any]) -> None:
    print(f"confinement ({report['device']}, sandbox {report['sandbox']}, process limit "
          f"{', '.join(report['process_limit'])}): {report['starts']} starts each way, spawn to Hello reply, median "
          f"confined {report['median_s']['confined']:.3f} s, plain {report['median_s']['plain']:.3f} s: "
          f"+{report['cost_s']:.3f} s per worker ({report['ratio']:.3f}x)")
    for way, medians in report["parts_median_s"].items():
        print(f"  {way}: the worker's own seconds, median: " + ", ".join(f"{k} {v:.3f}" for k, v in medians.items()))
    t = report.get("throughput")
    if t:
        print(f"throughput ({t['candidates']} honest Triton candidates, GPU 0, {t['rounds']} rounds each way): median "
              f"confined {t['median_per_min']['confined']:.1f}/min, plain {t['median_per_min']['plain']:.1f}/min: "
              f"{t['ratio']:.3f}x")
