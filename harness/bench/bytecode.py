"""`harness bench eval --part bytecode`: what the workers' primed bytecode saves at a start, and on throughput.

Every candidate gets a fresh worker. Where the installation holds no bytecode, each start compiles the ~900 modules
it imports from source unless the evaluator gives its workers the folder it primed (`eval/process/_bytecode.py`). This part
primes the folder (timed: once per process), starts workers confined as the evaluator does, with the folder and as
installed, alternately, and times each from spawn to its `Hello` reply; then, where the installation lacks
bytecode, the 6 x copies honest Triton candidates of one problem (the 24-candidate batch at 4 copies) go through the
pool on GPU 0 with the folder and without it, in rounds that alternate the order: candidates a minute and the host's
CPU busy share, each way. Where the installation has its bytecode there is nothing to save, and the part says so.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import torch

from eval import bytecode_left_out, installed_without_bytecode, prepare_native, primed_folder, visible_device_entry
from harness.bench import ref_share
from harness.bench.confinement import start
from harness.bench.pools import bench_device, run_pool
from harness.progress import counter_text

WAYS = ("primed", "as installed")


def run(starts: int = 5, copies: int = 4, rounds: int = 2) -> dict[str, Any]:
    """The priming, `starts` worker starts each way, then `rounds` batches each way where the install lacks
    bytecode (both alternating)."""
    gpu = torch.cuda.is_available()
    if gpu:  # as the evaluator does before its workers start: a confined worker sees the project read-only
        prepare_native(torch.cuda.get_device_capability(0))
    without = installed_without_bytecode()
    t0 = time.perf_counter()
    folder = primed_folder(visible_device_entry(0) if gpu else None, force=True)
    priming_s = time.perf_counter() - t0
    if folder is None:
        raise RuntimeError("priming the workers' bytecode failed")
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    t0 = time.perf_counter()
    for i in range(starts):
        for way in (WAYS if i % 2 == 0 else WAYS[::-1]):
            seconds[way].append(start(gpu, confined=True, bytecode=folder if way == "primed" else None)[0])
        print(f"{counter_text(i + 1, starts, time.perf_counter() - t0)} primed {seconds['primed'][-1]:.2f} s, as "
              f"installed {seconds['as installed'][-1]:.2f} s", file=sys.stderr, flush=True)
    medians = {way: round(statistics.median(v), 3) for way, v in seconds.items()}
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if gpu else "cpu", "installed_without_bytecode": without,
        "priming_s": round(priming_s, 2), "modules": sum(1 for _ in folder.rglob("*.pyc")), "starts": starts,
        "median_s": medians, "ratio": round(medians["primed"] / medians["as installed"], 3),
        "seconds": {way: [round(s, 3) for s in v] for way, v in seconds.items()}}
    if without:
        report["throughput"] = throughput(copies, rounds)
    return report


def throughput(copies: int, rounds: int) -> dict[str, Any]:
    """The batch through the pool on GPU 0, the evaluator's workers with the primed folder and without it."""
    jobs = ref_share.batch(6 * copies)
    gpus = [0] if bench_device() == "cuda" else None
    rows: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    for i in range(rounds):
        for way in (WAYS[::-1] if i % 2 == 0 else WAYS):  # as installed first: a fresh machine's first batch is slow
            if way == "primed":
                row = run_pool(jobs, gpus=gpus)
            else:
                with bytecode_left_out():
                    row = run_pool(jobs, gpus=gpus)
            rows[way].append({"candidates_per_min": row["candidates_per_min"], "start_s": row["start_s"],
                              "host_cpu_busy_share": row["load"].get("host_cpu_busy_share"),
                              "unexpected": row["unexpected"]})
            print(f"round {i + 1}/{rounds} {way}: {row['candidates_per_min']:.1f}/min", file=sys.stderr, flush=True)
    return {"candidates": len(jobs), "rounds": rounds, "rows": rows,
            "median_per_min": {way: statistics.median(r["candidates_per_min"] for r in v) for way, v in rows.items()}}


def print_table(report: dict[str, Any]) -> None:
    m = report["median_s"]
    print(f"workers' bytecode ({report['device']}; the install {'lacks' if report['installed_without_bytecode'] else 'has'}"
          f" bytecode): primed {report['modules']} modules in {report['priming_s']:.1f} s; {report['starts']} starts "
          f"each way, spawn to Hello reply, median primed {m['primed']:.3f} s, as installed {m['as installed']:.3f} s "
          f"({report['ratio']:.3f}x)")
    t = report.get("throughput")
    if t is None:
        print("  throughput: not compared (the install has its own bytecode, so workers read it either way)")
        return
    for way, rows in t["rows"].items():
        print(f"  {t['candidates']} honest Triton candidates, {way}: " + ", ".join(
            f"{r['candidates_per_min']:.1f}/min (start {r['start_s']:.1f} s, host CPU {r['host_cpu_busy_share']})"
            for r in rows))
