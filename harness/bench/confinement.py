"""`harness bench eval --part confinement`: what confining a worker costs when it starts.

The evaluator starts a fresh sandboxed worker for every candidate, so the sandbox's price is paid at each
start: the namespaces, the mounts (private tmpfs folders, the read-only view of the host), the process limit
(a pids cgroup or a user namespace) and the dropped identity. Running code inside namespaces costs nothing
measurable afterwards; the start is where the cost is. This part starts workers confined as the evaluator
does and unconfined (no namespace, no limit, the same environment), alternately, and times each from spawn
to its reply to `Hello` (which initialises CUDA, Triton and the timing loop on a GPU). The medians and their
difference are the cost per candidate.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import torch

from eval import Hello, WorkerProcess, process_limit_plan, sandbox_plan
from harness.progress import counter_text


def _start(gpu: bool, confined: bool) -> tuple[float, str]:
    """Seconds from spawn to the `Hello` reply of one worker, and its process-limit plan."""
    t0 = time.perf_counter()
    worker = WorkerProcess(device="cuda" if gpu else "cpu", gpu_index=0 if gpu else None, log_cap_bytes=16_384,
                           isolate_network=confined, isolate_filesystem=confined)
    try:
        reply, _ = worker.request(Hello(device="cuda:0" if gpu else "cpu", capture_key=1), timeout=300)
        if not reply.ok:
            raise RuntimeError(f"a {'confined' if confined else 'plain'} worker failed to start: {reply.error}")
        return time.perf_counter() - t0, worker.process_limit
    finally:
        worker.close()


def run(starts: int = 10) -> dict[str, Any]:
    """`starts` workers each way, alternating (confined first in even rounds, plain first in odd ones)."""
    gpu = torch.cuda.is_available()
    seconds: dict[str, list[float]] = {"confined": [], "plain": []}
    plans: set[str] = set()
    process_limit_plan(sandbox_plan())  # the one-time probes of what confinement this host allows: not timed
    t0 = time.perf_counter()
    for i in range(starts):
        order = ("confined", "plain") if i % 2 == 0 else ("plain", "confined")
        for way in order:
            took, plan = _start(gpu, way == "confined")
            seconds[way].append(took)
            if way == "confined":
                plans.add(plan)
        print(f"{counter_text(i + 1, starts, time.perf_counter() - t0)} confined {seconds['confined'][-1]:.2f} s, "
              f"plain {seconds['plain'][-1]:.2f} s", file=sys.stderr, flush=True)
    confined, plain = statistics.median(seconds["confined"]), statistics.median(seconds["plain"])
    return {"device": torch.cuda.get_device_name(0) if gpu else "cpu", "starts": starts,
            "sandbox": " ".join(sandbox_plan().prefix[1:-1]) or "none", "process_limit": sorted(plans),
            "median_s": {"confined": round(confined, 3), "plain": round(plain, 3)},
            "cost_s": round(confined - plain, 3), "ratio": round(confined / plain, 3),
            "seconds": {way: [round(s, 3) for s in values] for way, values in seconds.items()}}


def print_table(report: dict[str, Any]) -> None:
    print(f"confinement ({report['device']}, sandbox {report['sandbox']}, process limit "
          f"{', '.join(report['process_limit'])}): {report['starts']} starts each way, spawn to Hello reply, median "
          f"confined {report['median_s']['confined']:.3f} s, plain {report['median_s']['plain']:.3f} s: "
          f"+{report['cost_s']:.3f} s per worker ({report['ratio']:.3f}x)")
