"""What the evaluator benchmarks share: a warm pool timed over a batch, with what bounds its rate.

Pooled evaluators start their clocks once their workers are warm (the start-up, paid once per
session, is reported apart as `start_s`). Besides the batch's rate, each row gives its GPU busy
share (NVML), per-phase medians, the host's and the parent's CPU load and each GPU gate's shares
of the wall time, and the rate between the first and last tenth of completions
(`steady_candidates_per_min`: ramp-up and tail left out, what a long study sees).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from eval import OUTSIDE_PARTS, PIPELINE, EvalConfig, EvalResult, Evaluator, Job, Step
from harness.corpus.candidates import BenchJob
from harness.progress import Tally

GPU_SIZES = (1 << 20, 1 << 24, 1 << 26)
CPU_SIZES = (1 << 10, 1 << 12, 1 << 14)
LIMITS = {"call_timeout_s": 10.0, "import_timeout_s": 240.0}  # the same wall-clock limits for every evaluator


class GpuBusySampler:
    """Samples NVML GPU utilisation (share of time a kernel ran), averaged over the given GPUs, every 50 ms."""

    def __init__(self, indices: list[int] | None = None):
        self.samples: list[float] = []
        self._stop = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in (indices or range(count))]
            self._nvml = pynvml
        except Exception:  # noqa: BLE001  NVML missing (CPU machine): report no utilisation
            self._nvml = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            rates = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu / 100.0 for h in self._handles]
            self.samples.append(sum(rates) / len(rates))

    def __enter__(self) -> "GpuBusySampler":
        if self._nvml is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._nvml is not None:
            self._thread.join()

    def busy_share(self) -> float | None:
        return statistics.mean(self.samples) if self.samples else None


def _host_cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole host so far, from /proc/stat (None where there is none)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


class Load:
    """Over a batch: the host's CPU busy share, the parent's CPU seconds per wall second (its threads summed),
    and the share of wall time each GPU's gate was held exclusively and shared (what bounds a GPU's rate)."""

    def __init__(self, ev: Any):
        self._ev = ev

    def __enter__(self) -> "Load":
        self._host, self._cpu = _host_cpu_ticks(), os.times()
        self._gates, self._t0 = self._ev.gate_usage(), time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        wall = max(time.perf_counter() - self._t0, 1e-9)
        host, cpu, gates = _host_cpu_ticks(), os.times(), self._ev.gate_usage()
        self.figures: dict[str, Any] = {
            "parent_cpu_per_wall_s": round((cpu.user + cpu.system - self._cpu.user - self._cpu.system) / wall, 2)}
        if host and self._host and host[1] > self._host[1]:
            self.figures["host_cpu_busy_share"] = round((host[0] - self._host[0]) / (host[1] - self._host[1]), 3)
        self.figures["gates"] = {g: _gate_shares({k: u[k] - self._gates[g][k] for k in u}, wall)
                                 for g, u in gates.items()}


def _gate_shares(used: dict[str, float], wall: float) -> dict[str, float]:
    """One gate's usage over a batch (`GpuGate.usage` differences) as shares of the wall time and per hold."""
    holds = max(1, used["exclusive_holds"])
    return {"exclusive_share": round(used["exclusive_s"] / wall, 3), "shared_share": round(used["shared_s"] / wall, 3),
            "exclusive_s_per_hold": round(used["exclusive_s"] / holds, 4),
            "exclusive_wait_s_per_hold": round(used["exclusive_wait_s"] / holds, 4)}


def steady_rate(finished_s: list[float], edge: float = 0.1) -> float | None:
    """Candidates per minute between the batch's first and last tenth of completions (its ramp-up and tail left
    out): the rate a long study sees. None for batches under 10."""
    times = sorted(finished_s)
    if len(times) < 10:
        return None
    first, last = int(len(times) * edge), int(len(times) * (1 - edge)) - 1
    span = times[last] - times[first]
    return round((last - first) / span * 60, 2) if span > 0 else None


def timed_batch(ev: Any, batch: list[BenchJob]) -> tuple[list[EvalResult], float, float | None]:
    """The batch through `ev.evaluate_many` (an `Evaluator` or a `RayEvaluator`): results, wall seconds and
    `steady_rate` of the completions. Each completion prints its counter and verdict on stderr (microseconds
    against evaluations of seconds, so the rates stay the evaluator's)."""
    finished: list[float] = []
    tally = Tally(len(batch))

    def done(index: int, result: EvalResult) -> None:
        finished.append(time.perf_counter() - t0)
        print(f"{tally.step()} {batch[index].label}: {result.status}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    results = ev.evaluate_many([Job(j.problem, j.source, j.backend) for j in batch], on_result=done)
    return results, time.perf_counter() - t0, steady_rate(finished)


def bench_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def bench_config(cache_root: str | None, **overrides: Any) -> EvalConfig:
    return EvalConfig(device=bench_device(), cache_dir=cache_root, **{**LIMITS, **overrides})


def phase_medians(phases: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for p in phases for k in p})
    return {k: round(statistics.median([p[k] for p in phases if k in p]), 3) for k in keys}


def summary(name: str, batch: list[BenchJob], statuses: list[str], wall: float,
             phases: list[dict[str, float]], busy: float | None, per_candidate_s: list[float]) -> dict[str, Any]:
    return {"evaluator": name, "candidates": len(batch), "wall_s": round(wall, 2),
            "candidates_per_min": round(len(batch) / wall * 60, 2), "gpu_busy_share": busy,
            "median_s_per_candidate": round(statistics.median(per_candidate_s), 3),
            "statuses": dict(zip((j.label for j in batch), statuses)),
            "unexpected": {j.label: s for j, s in zip(batch, statuses) if s != j.expected},
            "phase_medians": phase_medians(phases)}


RETRIED_ALONE = "evaluated again alone"  # in the flag the evaluator adds to a result it judged again alone


def bound_row(result: EvalResult) -> dict[str, Any]:
    """What the wall bound judged of one result: its verdict, whether it was judged again alone, its figures."""
    return {"status": result.status.value, "reason": result.reason,
            "retried_alone": any(RETRIED_ALONE in f for f in result.flags), **result.wall_bound}


def bound_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts of the wall bound's doubts over `bound_row`s, and the spread of the figures it judged (where it ran: on
    a GPU), the clean reference process's loop overhead and the loop's own GPU time by part included."""
    ratios = [r["unexplained_us"] / r["limit_us"] for r in rows if r.get("limit_us")]
    gaps = [r["paired_gap_median_us"] for r in rows if "paired_gap_median_us" in r]
    return {"correct": sum(r["status"] == "correct" for r in rows),
            "rejected": [r["reason"] for r in rows if r["status"] != "correct"],
            "retried_alone": sum(r["retried_alone"] for r in rows),
            "second_looks": sum(bool(r.get("second_look")) for r in rows),
            "unexplained_over_limit": _spread(ratios), "paired_gap_median_us": _spread(gaps),
            "reference_overhead_us": _spread([r["reference_overhead_us"] for r in rows if "reference_overhead_us" in r]),
            # the loop's own GPU time, candidate less reference (`claim_bounds._outside_gaps`): host noise or GPU work?
            **{key: _spread([r[key] for r in rows if key in r])
               for key in (f"{part}_gap_us" for part in (*OUTSIDE_PARTS, "host"))}}


def _spread(values: list[float]) -> dict[str, float] | None:
    """10th, 50th and 90th percentiles and the largest, or None with nothing to spread."""
    if len(values) < 2:
        return None
    p10, *_, p90 = statistics.quantiles(values, n=10, method="inclusive")
    return {"p10": round(p10, 3), "p50": round(statistics.median(values), 3), "p90": round(p90, 3),
            "max": round(max(values), 3)}


def results_summary(name: str, batch: list[BenchJob], results: list[EvalResult], wall: float,
                     busy: float | None) -> dict[str, Any]:
    row = summary(name, batch, [r.status.value for r in results], wall, [r.phase_seconds for r in results], busy,
                   [r.eval_seconds for r in results])
    row["unexpected_reasons"] = {j.label: r.reason[:300] for j, r in zip(batch, results) if r.status.value != j.expected}
    shared = [r.reference_shared_with for r in results]
    row["reference_shared_with"] = {size: shared.count(size) for size in sorted(set(shared))}  # size -> results
    row["wall_bound"] = bound_summary([bound_row(r) for r in results])
    row["filesystem_isolated"] = sorted({str(r.filesystem_isolated) for r in results})  # how the workers were confined
    return row


def run_pool(batch: list[BenchJob], confined: bool = True, pipeline: Sequence[Step] = PIPELINE,
             **overrides: Any) -> dict[str, Any]:
    """The warm pool over every GPU (or `overrides`), the whole batch in flight (`confined`, `pipeline`: see
    `Evaluator`)."""
    with tempfile.TemporaryDirectory() as cache:
        config = bench_config(cache, **overrides)
        t_start = time.perf_counter()
        with Evaluator(config, confined=confined, pipeline=pipeline) as ev:
            ev.wait_warm(600)
            warm_s = time.perf_counter() - t_start
            with GpuBusySampler(config.gpus) as sampler, Load(ev) as load:
                results, wall, steady = timed_batch(ev, batch)
            workers = ev.workers
    out = results_summary("pool", batch, results, wall, sampler.busy_share())
    out.update(workers=workers, start_s=round(warm_s, 2), load=load.figures, steady_candidates_per_min=steady)
    return out


def environment() -> dict[str, Any]:
    import triton

    env: dict[str, Any] = {"torch": torch.__version__, "triton": triton.__version__, "cpu_cores": os.cpu_count(),
                           "date": time.strftime("%Y-%m-%d"), "numa_nodes": numa_nodes()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(device=props.name, gpus=torch.cuda.device_count(), sm_count=props.multi_processor_count,
                   cuda=torch.version.cuda, gpu_numa_nodes=[gpu_numa_node(i) for i in range(torch.cuda.device_count())])
    else:
        env["device"] = "cpu (Triton interpreter)"
    return env


def numa_nodes(root: Path = Path("/sys/devices/system/node")) -> dict[str, str]:
    """Each NUMA node's CPU list (node name -> "0-15,32-47"): where the timing cores sit against each GPU's node
    bears on the wall bound's figures, so every bench records it."""
    return {node.name: (node / "cpulist").read_text().strip()
            for node in sorted(root.glob("node[0-9]*")) if (node / "cpulist").is_file()}


def gpu_numa_node(index: int) -> int | None:
    """The NUMA node of GPU `index`'s PCI device (None where the system does not say)."""
    props = torch.cuda.get_device_properties(index)
    if not hasattr(props, "pci_bus_id"):
        return None
    bus = f"{getattr(props, 'pci_domain_id', 0):04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    try:
        node = int(Path(f"/sys/bus/pci/devices/{bus}/numa_node").read_text())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None
