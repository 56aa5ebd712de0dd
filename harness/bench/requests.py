"""`harness bench eval --part requests`: the host cost of one request to a candidate's worker.

On one GPU the rate of a batch is bound by the host work done under the GPU gate (the 24-candidate batch:
gate held 99 % of the wall time, GPU busy about a third). Every request of the exclusive steps (16 for the
hidden-work batches alone) is answered only after the worker has read its tamper snapshot
(`eval.worker.integrity`). This part loads the honest example candidate into a real sandboxed worker, as the
evaluator does, and alternates an empty request (`Sync`) with one that only reads the snapshot (`Integrity`):
their medians, and the difference, which is what the read adds to each such request.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import torch

from eval import Hello, Integrity, Load, Sync, WorkerProcess, prepare_native
from harness.corpus.candidates import EXAMPLE_TRITON, example_problem_source
from harness.progress import counter_text

_ELEMENTS = 4096


def _round_trip(worker: WorkerProcess, message: Any) -> float:
    t0 = time.perf_counter()
    reply, _ = worker.request(message, timeout=120)
    took = time.perf_counter() - t0
    if not reply.ok:
        raise RuntimeError(f"the worker failed '{message.cmd}': {reply.error}")
    return took


def run(rounds: int = 20, per_round: int = 25) -> dict[str, Any]:
    """`rounds` rounds of `per_round` requests of each kind, alternating which kind goes first."""
    gpu = torch.cuda.is_available()
    device = "cuda:0" if gpu else "cpu"
    if gpu:  # as the evaluator does before its workers start: a confined worker sees the project read-only
        prepare_native(torch.cuda.get_device_capability(0))
    worker = WorkerProcess(device="cuda" if gpu else "cpu", gpu_index=0 if gpu else None, log_cap_bytes=1 << 16,
                           isolate_network=True)
    seconds: dict[str, list[float]] = {"sync": [], "integrity": []}
    try:
        for message in (Hello(device=device, capture_key=1),
                        Load(problem_source=example_problem_source(_ELEMENTS), problem_label="<add_relu>",
                               candidate_source=EXAMPLE_TRITON, weight_seed=1)):
            _round_trip(worker, message)
        kinds = {"sync": Sync, "integrity": Integrity}
        t0 = time.perf_counter()
        for r in range(rounds):
            for name in (("sync", "integrity") if r % 2 == 0 else ("integrity", "sync")):
                seconds[name] += [_round_trip(worker, kinds[name]()) for _ in range(per_round)]
            print(f"{counter_text(r + 1, rounds, time.perf_counter() - t0)}", file=sys.stderr, flush=True)
    finally:
        worker.close()
    sync, integrity = (statistics.median(seconds[k]) * 1e3 for k in ("sync", "integrity"))
    return {"device": torch.cuda.get_device_name(0) if gpu else "cpu", "requests": rounds * per_round,
            "median_ms": {"sync": round(sync, 3), "integrity": round(integrity, 3)},
            "snapshot_read_ms": round(integrity - sync, 3)}


def print_table(report: dict[str, Any]) -> None:
    m = report["median_ms"]
    print(f"requests ({report['device']}): {report['requests']} of each kind to a worker holding the example "
          f"candidate, median round trip: empty (Sync) {m['sync']:.3f} ms, tamper read (Integrity) "
          f"{m['integrity']:.3f} ms: the read adds {report['snapshot_read_ms']:.3f} ms to each request that makes it")
