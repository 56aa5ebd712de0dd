"""`harness bench eval --part parents`: is the parent process what two GPUs lose throughput to?

The scaling batch (`candidates.honest_triton_batch`) runs, one configuration after another, as:
one GPU with 4, 6 and 8 warm workers; every GPU under one parent process (what `executor=local`
does); and a parent process per GPU, each evaluating its share of the batch, all started together
once every pool is warm (what `executor=ray` does on one node, without Ray). If a parent per GPU
scaled better than one parent for all, the shared parent (its GIL, threads, copies) would be the
bottleneck. Measured on 2x H200 it did not (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from eval import Evaluator, Job
from harness.bench.pools import GPU_SIZES, GpuBusySampler, bench_config, bench_device, run_pool
from harness.corpus import candidates

_WORKER_COUNTS = (4, 6, 8)
_START_TIMEOUT_S = 600.0


def per_gpu_parents(sizes: tuple[int, int, int], copies: int, gpus: int, **overrides: Any) -> dict[str, Any]:
    """The batch split over `gpus` parent processes (GPU g takes every gpus-th candidate), clocks started together."""
    with tempfile.TemporaryDirectory() as sync:
        command = [sys.executable, "-m", "harness.bench.parents", sync, json.dumps(
            {"sizes": list(sizes), "copies": copies, "gpus": gpus, "overrides": overrides})]
        procs = [subprocess.Popen(command + [str(g)], stdout=subprocess.PIPE, text=True) for g in range(gpus)]
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not all(Path(sync, f"ready{g}").exists() for g in range(gpus)):
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
                for p in procs:
                    p.kill()
                raise RuntimeError("a parent process failed to start its pool")
            time.sleep(0.05)
        with GpuBusySampler(list(range(gpus)) if bench_device() == "cuda" else None) as sampler:
            start = time.time()
            Path(sync, "go").touch()
            children = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    wall = max(c["end"] for c in children) - start
    total = sum(c["candidates"] for c in children)
    return {"evaluator": f"a parent per GPU ({gpus})", "candidates": total, "wall_s": round(wall, 2),
            "candidates_per_min": round(total / wall * 60, 2), "gpu_busy_share": sampler.busy_share(),
            "statuses": [s for c in children for s in c["statuses"]], "parents": children}


def _child(sync: str, spec: dict[str, Any], gpu: int) -> None:
    """One parent: its share of the batch on GPU `gpu`, after every parent's pool is warm."""
    batch = candidates.honest_triton_batch(tuple(spec["sizes"]), spec["copies"])[gpu::spec["gpus"]]
    with tempfile.TemporaryDirectory() as cache, Evaluator(bench_config(cache, gpus=[gpu], **spec["overrides"])) as ev:
        ev.wait_warm(_START_TIMEOUT_S)
        Path(sync, f"ready{gpu}").touch()
        while not Path(sync, "go").exists():
            time.sleep(0.002)
        results = ev.evaluate_many([Job(j.problem, j.source, j.backend) for j in batch])
        end = time.time()
    print(json.dumps({"gpu": gpu, "candidates": len(batch), "end": end,
                      "statuses": [r.status.value for r in results],
                      "median_s_per_candidate": sorted(r.eval_seconds for r in results)[len(results) // 2]}))


def main(copies: int) -> dict[str, Any]:
    """Every configuration on the same batch, one after another; each row printed as it is measured."""
    import torch

    batch = candidates.honest_triton_batch(GPU_SIZES, copies)
    gpus = torch.cuda.device_count()
    rows = []
    for workers in _WORKER_COUNTS:
        rows.append({**run_pool(batch, gpus=[0], workers_per_gpu=workers), "evaluator": f"1 GPU, {workers} workers"})
        print(json.dumps(_brief(rows[-1])), flush=True)
    if gpus > 1:
        rows.append({**run_pool(batch, gpus=list(range(gpus))), "evaluator": f"{gpus} GPUs, one parent"})
        print(json.dumps(_brief(rows[-1])), flush=True)
        rows.append(per_gpu_parents(GPU_SIZES, copies, gpus))
        print(json.dumps(_brief(rows[-1])), flush=True)
    return {"candidates": len(batch), "gpus": gpus, "rows": rows}


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("evaluator", "candidates", "wall_s", "candidates_per_min", "gpu_busy_share", "median_s_per_candidate")
    return {k: row[k] for k in keys if k in row}


if __name__ == "__main__":
    _child(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]))
