"""`harness bench eval`: throughput, scaling and repeatability of the evaluator.

Pooled evaluators start their clocks once their workers are warm (the start-up, paid once
per session, is reported apart as `start_s`); a process per candidate pays it every time.
throughput: one fixed mixed batch (`candidates.mixed_batch`: three problem sizes, Triton and
CUDA, honest and failing, one crash, one timeout, one incorrect) through three evaluators,
side by side in one run: the warm pool (every worker of every GPU, candidates pipelined),
a single warm worker evaluating one candidate at a time (no pipelining, builds on the
candidate's path), and a KernelBench-style process per candidate. Each prints
candidates/min, GPU busy share (NVML) and per-phase medians.
latency: one honest Triton candidate at 16M elements on a warm, otherwise idle pool.
scaling: the honest Triton candidates of the batch on one GPU, then on every visible GPU. Besides the
whole batch's rate, each pool row gives its rate between the first and last tenth of completions
(`steady_candidates_per_min`, ramp-up and tail left out: what a long study sees), and the part gives both ratios.
ray-scaling: the same batch through `executor=ray` (a local Ray instance): one actor, then one per GPU.
steps (not part of all): the scaling batch on one GPU with exclusive steps left out, a diagnostic of what
bounds the rate (`harness/bench/steps.py`).
build (not part of all): one `load_inline` candidate's build time, as written against the light `.cu`
(`harness/bench/builds.py`; `--sessions` builds of each).
channel (not part of all): one 256 MB output from a child's GPU to the parent's across the channel, pageable
against pinned regions (`harness/bench/channel.py`).
parents: the same batch on one GPU with 4, 6 and 8 workers, on every GPU under one parent, and under a
parent process per GPU (`harness/bench/parents.py`): is the parent what two GPUs lose throughput to?
repeatability: the same candidates in separate evaluator sessions while the pool is full
(filler candidates keep the other workers busy); the spread (max/min) of their speedups.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from eval import EvalConfig, EvalResult, Evaluator, Job
from harness.bench import candidates
from harness.bench.process_per_candidate import evaluate_in_new_process

REPEAT_SIZES = (1 << 16, 1 << 20, 1 << 23, 1 << 25, 1 << 27)
GPU_SIZES = (1 << 20, 1 << 24, 1 << 26)
CPU_SIZES = (1 << 10, 1 << 12, 1 << 14)
_LIMITS = {"call_timeout_s": 10.0, "import_timeout_s": 240.0}  # the same wall-clock limits for every evaluator


class _GpuBusySampler:
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


def _host_cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole host so far, from /proc/stat (None where there is none)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


class _Load:
    """Over a batch: the host's CPU busy share, the parent's CPU seconds per wall second (its threads summed),
    and the share of wall time each GPU's gate was held exclusively and shared (what bounds a GPU's rate)."""

    def __init__(self, ev: Any):
        self._ev = ev

    def __enter__(self) -> "_Load":
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


def _timed_batch(ev: Any, batch: list[candidates.BenchJob]) -> tuple[list[EvalResult], float, float | None]:
    """The batch through `ev.evaluate_many` (an `Evaluator` or a `RayEvaluator`): results, wall seconds and
    `steady_rate` of the completions."""
    finished: list[float] = []
    t0 = time.perf_counter()
    results = ev.evaluate_many([Job(j.problem, j.source, j.backend) for j in batch],
                               on_result=lambda i, r: finished.append(time.perf_counter() - t0))
    return results, time.perf_counter() - t0, steady_rate(finished)


def _ratios(many: dict[str, Any], one: dict[str, Any]) -> dict[str, float | None]:
    """Two pool rows' whole-batch and steady rate ratios."""
    steady = (many["steady_candidates_per_min"], one["steady_candidates_per_min"])
    return {"ratio": round(many["candidates_per_min"] / one["candidates_per_min"], 2),
            "steady_ratio": round(steady[0] / steady[1], 2) if None not in steady else None}


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _config(cache_root: str | None, **overrides: Any) -> EvalConfig:
    return EvalConfig(device=_device(), cache_dir=cache_root, **{**_LIMITS, **overrides})


def _phase_medians(phases: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for p in phases for k in p})
    return {k: round(statistics.median([p[k] for p in phases if k in p]), 3) for k in keys}


def _summary(name: str, batch: list[candidates.BenchJob], statuses: list[str], wall: float,
             phases: list[dict[str, float]], busy: float | None, per_candidate_s: list[float]) -> dict[str, Any]:
    return {"evaluator": name, "candidates": len(batch), "wall_s": round(wall, 2),
            "candidates_per_min": round(len(batch) / wall * 60, 2), "gpu_busy_share": busy,
            "median_s_per_candidate": round(statistics.median(per_candidate_s), 3),
            "statuses": dict(zip((j.label for j in batch), statuses)),
            "unexpected": {j.label: s for j, s in zip(batch, statuses) if s != j.expected},
            "phase_medians": _phase_medians(phases)}


def _results_summary(name: str, batch: list[candidates.BenchJob], results: list[EvalResult], wall: float,
                     busy: float | None) -> dict[str, Any]:
    row = _summary(name, batch, [r.status.value for r in results], wall, [r.phase_seconds for r in results], busy,
                   [r.eval_seconds for r in results])
    row["unexpected_reasons"] = {j.label: r.reason[:300] for j, r in zip(batch, results) if r.status.value != j.expected}
    return row


def run_pool(batch: list[candidates.BenchJob], **overrides: Any) -> dict[str, Any]:
    """The warm pool over every GPU (or `overrides`), the whole batch in flight."""
    with tempfile.TemporaryDirectory() as cache:
        config = _config(cache, **overrides)
        t_start = time.perf_counter()
        with Evaluator(config) as ev:
            ev.wait_warm(600)
            warm_s = time.perf_counter() - t_start
            with _GpuBusySampler(config.gpus) as sampler, _Load(ev) as load:
                results, wall, steady = _timed_batch(ev, batch)
            workers = ev.workers
    out = _results_summary("pool", batch, results, wall, sampler.busy_share())
    out.update(workers=workers, start_s=round(warm_s, 2), load=load.figures, steady_candidates_per_min=steady)
    return out


def run_single_worker(batch: list[candidates.BenchJob]) -> dict[str, Any]:
    """One warm worker on GPU 0, one candidate at a time, builds on the candidate's path."""
    with tempfile.TemporaryDirectory() as cache:
        config = _config(cache, workers_per_gpu=1, gpus=[0] if _device() == "cuda" else None)
        t_start = time.perf_counter()
        with Evaluator(config) as ev:
            ev.wait_warm(600)
            warm_s = time.perf_counter() - t_start
            with _GpuBusySampler([0] if _device() == "cuda" else None) as sampler:
                t0 = time.perf_counter()
                results = [ev.evaluate(j.problem, j.source, j.backend) for j in batch]
                wall = time.perf_counter() - t0
    out = _results_summary("single worker", batch, results, wall, sampler.busy_share())
    out["start_s"] = round(warm_s, 2)
    return out


def run_process_per_candidate(batch: list[candidates.BenchJob]) -> dict[str, Any]:
    """KernelBench's way: a fresh process per candidate (see `process_per_candidate`), under the same wall limits."""
    device = _device()
    os.environ["KH_BENCH_DEVICE"] = device
    statuses, phases, per = [], [], []
    with _GpuBusySampler([0] if device == "cuda" else None) as sampler:
        t0 = time.perf_counter()
        for job in batch:
            # it has no per-call limit of its own: a forward gets 3x our call limit, a CUDA build our import limit
            limit = 3 * _LIMITS["call_timeout_s"] + (_LIMITS["import_timeout_s"] if job.backend == "cuda" else 0)
            with tempfile.TemporaryDirectory() as work:
                out = evaluate_in_new_process(job.problem.source, job.source, device, limit, Path(work))
            statuses.append(out["status"])
            phases.append(out["phase_seconds"])
            per.append(out["phase_seconds"]["total"])
        wall = time.perf_counter() - t0
    return _summary("process per candidate", batch, statuses, wall, phases, sampler.busy_share(), per)


EVALUATORS = ("pool", "single", "process")


def throughput(copies: int = 1, evaluators: tuple[str, ...] = EVALUATORS) -> dict[str, Any]:
    """The evaluators on the same batch, side by side; the pool takes `copies` distinct copies of it.

    With one copy the pool's wall time is the batch's longest path (one `nvcc` build plus one
    evaluation, ~1 min on the H100), so it measures latency more than throughput. More copies
    (distinct sources: nothing is cached or built once for two) show the steady state of a study
    with many candidates in flight. The single worker and the process per candidate evaluate one
    candidate at a time, so their rate does not depend on the batch's length; they take one copy.
    """
    gpu = _device() == "cuda"
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
    with tempfile.TemporaryDirectory() as cache, Evaluator(_config(cache, gpus=[0])) as ev:
        ev.evaluate(candidates.problem(1 << 10), candidates.triton_candidate() + "\n# warm every path once\n")
        runs = [ev.evaluate(candidates.problem(n), candidates.triton_candidate(1024, 4) + f"\n# latency {k}\n")
                for k in range(repeats)]
    return {"elements": n, "statuses": [r.status.value for r in runs],
            "eval_seconds": [round(r.eval_seconds, 3) for r in runs],
            "median_s": round(statistics.median(r.eval_seconds for r in runs), 3),
            "phase_medians": _phase_medians([r.phase_seconds for r in runs])}


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

    batch = candidates.honest_triton_batch(GPU_SIZES if _device() == "cuda" else CPU_SIZES, copies)
    gpus = max(1, torch.cuda.device_count())
    out: dict[str, Any] = {"candidates": len(batch), "gpus": gpus}
    for actors in sorted({1, gpus}):
        with tempfile.TemporaryDirectory() as cache:
            t_start = time.perf_counter()
            with RayEvaluator(_config(cache), ExecutorConfig(kind="ray", num_actors=actors)) as ev:
                ev.wait_warm(600)
                warm_s = time.perf_counter() - t_start
                with _GpuBusySampler(list(range(actors))) as sampler:
                    results, wall, steady = _timed_batch(ev, batch)
                nodes = sorted({f"{r.node}:{r.gpu_index}" for r in results})
        row = _results_summary(f"ray, {actors} actor(s)", batch, results, wall, sampler.busy_share())
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
        with tempfile.TemporaryDirectory() as cache, Evaluator(_config(cache, gpus=[0])) as ev:
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


def environment() -> dict[str, Any]:
    import triton

    env: dict[str, Any] = {"torch": torch.__version__, "triton": triton.__version__, "cpu_cores": os.cpu_count(),
                           "date": time.strftime("%Y-%m-%d")}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(device=props.name, gpus=torch.cuda.device_count(), sm_count=props.multi_processor_count,
                   cuda=torch.version.cuda)
    else:
        env["device"] = "cpu (Triton interpreter)"
    return env


def _print_throughput(t: dict[str, Any]) -> None:
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


def own_share_or_flips(which: str, rounds: int, out: str | None) -> int:
    """`--part own-share` (every solution, the hybrids and the decoy: each one's own-kernel share) or `--part flips`
    (honest microsecond-scale candidates judged `rounds` times each, over 5 fresh pools); each prints its table."""
    if which == "flips" and not torch.cuda.is_available():
        print("harness bench eval --part flips needs a CUDA GPU (the hidden-work check runs only there)")
        return 2
    report: dict[str, Any] = {"environment": environment()}
    print(json.dumps(report["environment"]), flush=True)
    if which == "own-share":
        from harness.bench import own_share

        report["own_share"] = own_share.run()
        own_share.print_table(report["own_share"])
    else:
        from harness.bench import flips

        report["flips"] = flips.run(rounds)
        flips.print_table(report["flips"])
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


def main(which: str = "all", sessions: int = 5, out: str | None = None, problems: str | None = None,
         copies: int = 4, evaluators: tuple[str, ...] = EVALUATORS, graph_modes: tuple[str, ...] | None = None) -> int:
    """Run the chosen parts, print tables, optionally write the JSON to `out`."""
    if which == "launch-bound":  # runs on a CPU too (nothing timed there): see harness/bench/launch_bound.py
        from harness.bench import launch_bound

        report = {"environment": environment()}
        print(json.dumps(report["environment"]))
        report["launch_bound"] = launch_bound.main(sessions, problems or launch_bound.DEFAULT_SELECTION,
                                                    graph_modes or launch_bound.MODES)
        if out:
            with open(out, "w") as f:
                json.dump(report, f, indent=1)
        return 0
    if which in ("repeatability", "scaling", "latency", "ray-scaling", "parents", "channel", "build", "steps") and not torch.cuda.is_available():
        print(f"harness bench eval --part {which} needs a CUDA GPU (timings are the point of it)")
        return 2
    report: dict[str, Any] = {"environment": environment()}
    print(json.dumps(report["environment"]))
    if which == "channel":
        from harness.bench import channel

        report["channel"] = channel.run()
        channel.print_table(report["channel"])
    if which == "steps":
        from harness.bench import steps

        report["steps"] = steps.run(copies)
    if which == "build":
        from harness.bench import builds

        report["build"] = builds.run(repeats=sessions)
        builds.print_table(report["build"])
    if which in ("all", "throughput"):
        report["throughput"] = throughput(copies if which == "throughput" else 1, evaluators)
        _print_throughput(report["throughput"])
    if which in ("all", "latency") and torch.cuda.is_available():
        lat = report["latency"] = latency()
        print(f"\nlatency: honest Triton candidate, {lat['elements']} elements, warm idle pool: median "
              f"{lat['median_s']:.2f} s {lat['eval_seconds']} {lat['statuses']}; phases {json.dumps(lat['phase_medians'])}")
    if which in ("all", "scaling") and torch.cuda.is_available():
        s = report["scaling"] = scaling(copies)
        print(f"\nscaling: {s['candidates']} honest Triton candidates; one GPU {s['one_gpu']['candidates_per_min']:.1f}/min"
              + (f", {s['gpus']} GPUs {s['all_gpus']['candidates_per_min']:.1f}/min = {s['ratio']:.2f}x (between the "
                 f"first and last tenth of completions: {s['steady_ratio']}x)" if "ratio" in s else " (only one GPU visible)"))
    if which == "ray-scaling":
        r = report["ray_scaling"] = ray_scaling(copies)
        line = f"\nray scaling: {r['candidates']} honest Triton candidates; 1 actor {r['actors_1']['candidates_per_min']:.1f}/min"
        if "ratio" in r:
            every = r[f"actors_{r['gpus']}"]
            line += (f", {r['gpus']} actors {every['candidates_per_min']:.1f}/min = {r['ratio']:.2f}x (between the first "
                     f"and last tenth of completions: {r['steady_ratio']}x)")
        print(line)
    if which == "parents":
        from harness.bench import parents

        report["parents"] = parents.main(copies)
    if which in ("all", "repeatability") and torch.cuda.is_available():
        report["repeatability"] = repeatability(sessions)
        print(f"\nrepeatability ({sessions} separate sessions, pool full, Triton add+relu+scale vs eager)")
        print(f"{'elements':>11} {'cand us':>9} {'eager us':>9} {'speedup min..max':>18} {'max/min':>8}")
        for row in report["repeatability"]["rows"]:
            s = row["speedups"]
            print(f"{row['elements']:>11} {row['candidate_us_median']:>9.1f} {row['reference_us_median']:>9.1f} "
                  f"{min(s):>8.3f}..{max(s):<8.3f} {row['max_over_min']:>8.4f}")
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
    return 0
