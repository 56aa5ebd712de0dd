"""`harness bench eval`: repeatability and throughput of the evaluator on the current GPU.

repeatability: the same candidates, evaluated in separate evaluator sessions; the spread of
their measured speedups (max/min) is what a researcher would see between two runs.
throughput: a mixed batch of Triton and CUDA candidates (some failing) through one session
(workers kept alive, CUDA builds in parallel on the CPU cores), against a naive evaluator
that starts a fresh session (fresh worker process, one build at a time) per candidate,
on a subset of the same batch, side by side in one run.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from typing import Any

import torch

from eval import EvalConfig, Evaluator, Job
from harness.bench import candidates

REPEAT_SIZES = (1 << 16, 1 << 20, 1 << 23, 1 << 25, 1 << 27)


class _GpuBusySampler:
    """Samples NVML GPU utilisation (share of time a kernel ran) every 50 ms on a thread."""

    def __init__(self, index: int = 0):
        self.samples: list[float] = []
        self._stop = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = pynvml
        except Exception:  # noqa: BLE001  NVML missing: report no utilisation
            self._nvml = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu / 100.0)

    def __enter__(self) -> "_GpuBusySampler":
        if self._nvml is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._nvml is not None:
            self._thread.join()

    def busy_share(self) -> float | None:
        return statistics.mean(self.samples) if self.samples else None


def _config(cache_root: str, **overrides: Any) -> EvalConfig:
    return EvalConfig(device="cuda", cache_dir=cache_root, **overrides)


def repeatability(sessions: int = 5, sizes: tuple[int, ...] = REPEAT_SIZES) -> dict[str, Any]:
    """Evaluate one Triton candidate per size in `sessions` separate evaluator sessions."""
    rows: dict[int, dict[str, list[float]]] = {n: {"speedup": [], "candidate_us": [], "reference_us": [], "n": []} for n in sizes}
    for _ in range(sessions):
        with tempfile.TemporaryDirectory() as cache, Evaluator(_config(cache)) as ev:
            for n in sizes:
                r = ev.evaluate(candidates.problem(n), candidates.triton_candidate())
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
    return {"sessions": sessions, "rows": out}


def throughput(naive_subset: int = 6) -> dict[str, Any]:
    """Candidates per minute for the pipelined evaluator and for a naive one, side by side."""
    batch = candidates.throughput_batch()
    problem = candidates.problem(1 << 24)
    jobs = [Job(problem, src, backend) for _, src, backend in batch]
    with tempfile.TemporaryDirectory() as cache:
        with _GpuBusySampler() as sampler:
            t0 = time.perf_counter()
            with Evaluator(_config(cache)) as ev:
                results = ev.evaluate_many(jobs)
            wall = time.perf_counter() - t0
    statuses = {label: r.status.value for (label, _, _), r in zip(batch, results)}
    # naive: a fresh session per candidate, one build at a time; same mix (half Triton, half CUDA)
    half = naive_subset // 2
    subset = [b for b in batch if b[2] == "triton"][:half] + [b for b in batch if b[2] == "cuda"][:half]
    with tempfile.TemporaryDirectory() as cache:
        with _GpuBusySampler() as naive_sampler:
            t0 = time.perf_counter()
            naive_status = {}
            for label, src, backend in subset:
                with Evaluator(_config(cache, parallel_compiles=1)) as ev:
                    naive_status[label] = ev.evaluate(problem, src, backend).status.value
            naive_wall = time.perf_counter() - t0
    ours_per_min = len(jobs) / wall * 60
    naive_per_min = len(subset) / naive_wall * 60
    return {"candidates": len(jobs), "wall_s": wall, "candidates_per_min": ours_per_min,
            "gpu_busy_share": sampler.busy_share(), "statuses": statuses,
            "naive_candidates": len(subset), "naive_wall_s": naive_wall, "naive_candidates_per_min": naive_per_min,
            "naive_gpu_busy_share": naive_sampler.busy_share(), "naive_statuses": naive_status,
            "ratio": ours_per_min / naive_per_min}


def environment() -> dict[str, Any]:
    import triton

    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "sm_count": props.multi_processor_count, "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda, "cpu_cores": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d")}


def main(which: str = "all", sessions: int = 5, naive_subset: int = 6, out: str | None = None) -> int:
    """Run the chosen parts, print a table, optionally write the JSON to `out`."""
    if not torch.cuda.is_available():
        print("harness bench eval needs a CUDA GPU (timings are the point of it)")
        return 2
    report: dict[str, Any] = {"environment": environment()}
    print(json.dumps(report["environment"]))
    if which in ("all", "repeatability"):
        report["repeatability"] = repeatability(sessions)
        print(f"\nrepeatability ({sessions} separate sessions, Triton add+relu+scale vs eager)")
        print(f"{'elements':>11} {'cand us':>9} {'eager us':>9} {'speedup min..max':>18} {'max/min':>8}")
        for row in report["repeatability"]["rows"]:
            s = row["speedups"]
            print(f"{row['elements']:>11} {row['candidate_us_median']:>9.1f} {row['reference_us_median']:>9.1f} "
                  f"{min(s):>8.3f}..{max(s):<8.3f} {row['max_over_min']:>8.4f}")
    if which in ("all", "throughput"):
        t = throughput(naive_subset)
        report["throughput"] = t
        busy = lambda v: "n/a" if v is None else f"{v:.0%}"  # noqa: E731
        print(f"\nthroughput: {t['candidates']} candidates in {t['wall_s']:.1f} s = {t['candidates_per_min']:.1f}/min, "
              f"GPU busy {busy(t['gpu_busy_share'])}")
        print(f"naive (fresh session per candidate): {t['naive_candidates']} in {t['naive_wall_s']:.1f} s = "
              f"{t['naive_candidates_per_min']:.1f}/min, GPU busy {busy(t['naive_gpu_busy_share'])}")
        print(f"ratio: {t['ratio']:.2f}x")
        print("statuses:", json.dumps(t["statuses"]))
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
    return 0
