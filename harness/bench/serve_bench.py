"""`harness bench serve`: evaluations per GPU-hour and latency through `harness serve`, beside the in-process
evaluator, on the same kind of batch: distinct honest Triton candidates of relu(x + y) * 1.5 (16M elements on a
GPU, 4096 on a CPU, where the Triton interpreter runs them), every source distinct so nothing is cached or
coalesced.

Both sides run closed loops of the same number of concurrent callers (twice the evaluator's workers): each
caller takes the next candidate, waits for its verdict, and takes the next. Both run as many evaluations at
once as the evaluator has workers, first come, first served (the service's queue does; in-process, a thread
pool, as `evaluate_many`'s runners), so the extra callers wait their turn on both sides and the difference is
the service's own cost.
Latency is one call's wall time as its caller sees it (for the service: the HTTP round trip, queueing,
evaluation, reward and the stored attempt), and it is split into phases: `queue_s` (waiting for a slot),
`eval_s` (the evaluator), `handoff_s` (from the evaluation's end to the answer being built), `store_s` (the
attempt written to the audit trail) and `http_s` (the rest: HTTP, checks, JSON), from the answer's `timings`.
Each completion prints its `[done/total, elapsed]` counter and status on stderr.
Each round runs both sides, an in-process evaluator and a `harness serve` subprocess, the order alternating
(`--rounds`; in-process first in the first); both take their evaluator settings from the same Hydra overrides
(`harness bench serve eval.workers_per_gpu=6`), and neither side's start-up is timed. A side's rate moved by
10 % between device calls, more than the service's own phases cost, so its overhead is the median of the rounds'
paired ratios.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch

from eval import EvalConfig, Evaluator
from harness.bench.pools import RETRIED_ALONE, environment
from harness.client import EvalClient
from harness.corpus import candidates
from harness.overrides import compose_config
from harness.progress import Tally
from harness.serve.process import ServerProcess

GPU_N, CPU_N = 1 << 24, 1 << 12
_VARIANTS = ((512, 4), (1024, 4), (2048, 8), (4096, 8))


def batch(n: int, elements: int, tag: str) -> list[str]:
    """`n` distinct honest Triton candidates (launch variants, each source tagged) for `elements` elements."""
    return [candidates.triton_candidate(*_VARIANTS[i % len(_VARIANTS)]) + f"\n# {tag} {i}\n" for i in range(n)]


PHASES = ("queue_s", "eval_s", "handoff_s", "store_s", "http_s")
REQUEST_FAILED = "request_failed"  # the call raised (the service unreachable, an error answer): no verdict
_SERVER_TAIL_LINES = 40


def closed_loop(call: Callable[[str], dict[str, Any]], sources: list[str], callers: int,
                label: str = "") -> dict[str, Any]:
    """`callers` threads take the next source and call it; per-call latency, answers (status and server-side
    `timings`), wall time. Each completion prints its counter and status on stderr."""
    lock = threading.Lock()
    todo = list(enumerate(sources))
    latencies: list[float] = [0.0] * len(sources)
    answers: list[dict[str, Any]] = [{} for _ in sources]
    tally = Tally(len(sources))

    def caller() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i, source = todo.pop(0)
            t0 = time.perf_counter()
            try:
                answers[i] = call(source)
            except Exception as exc:  # noqa: BLE001  a failed request is a row of the figures, not a dead caller
                answers[i] = {"status": REQUEST_FAILED, "reason": f"{type(exc).__name__}: {exc}"}
            latencies[i] = time.perf_counter() - t0
            why = "" if answers[i]["status"] == "correct" else f" ({_reason(answers[i])[:300]})"
            print(f"{tally.step()} {label}: {answers[i]['status']}{why}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 2), "latencies": latencies, "statuses": [a["status"] for a in answers],
            "retried_alone": sum(any(RETRIED_ALONE in f for f in _flags(a)) for a in answers),
            "timings": [_phases(a.get("timings", {}), lat) for a, lat in zip(answers, latencies)]}


def _flags(answer: dict[str, Any]) -> list[str]:
    """An answer's result flags (an in-process answer's own, or the served result's)."""
    return list(answer.get("flags") or answer.get("result", {}).get("flags") or [])


def _reason(answer: dict[str, Any]) -> str:
    """Why an honest candidate was not judged correct (an in-process answer's own, or the served result's)."""
    return str(answer.get("reason") or answer.get("result", {}).get("reason", ""))


def _phases(timings: dict[str, float], latency: float) -> dict[str, float]:
    """A call's seconds per phase; `http_s` is what the caller waited beyond the server's own phases (HTTP, body
    parsing and checks, JSON both ways)."""
    known = {k: float(timings.get(k, 0.0)) for k in PHASES[:-1]}
    return {**known, "http_s": max(0.0, latency - sum(known.values()))}


def in_process_call(ev: Evaluator, problem: Any, runners: ThreadPoolExecutor) -> Callable[[str], dict[str, Any]]:
    """An in-process evaluation on `runners` (first come, first served, `ev.workers` at once, as the service's
    queue and `evaluate_many` run them: the pool keeps twice that many warm, so callers calling `evaluate`
    directly would run more at once than either), timed like an answer."""
    def call(source: str) -> dict[str, Any]:
        asked = time.perf_counter()

        def run() -> dict[str, Any]:
            started = time.perf_counter()
            result = ev.evaluate(problem, source, "triton")
            return {"status": result.status.value, "reason": result.reason, "flags": result.flags,
                    "timings": {"queue_s": started - asked, "eval_s": time.perf_counter() - started}}
        return runners.submit(run).result()
    return call


def _summary(name: str, runs: list[dict[str, Any]], gpus: int) -> dict[str, Any]:
    """One side's row over its rounds: the median round's wall time (and the rate from it), latencies and phases
    pooled, statuses and evaluations run twice summed."""
    lat = sorted(x for run in runs for x in run["latencies"])
    n, wall = len(lat), statistics.median(run["wall_s"] for run in runs)
    timings = [t for run in runs for t in run["timings"]]
    statuses = [s for run in runs for s in run["statuses"]]
    return {"side": name, "evaluations": n, "rounds": len(runs), "wall_s": round(wall, 2),
            "wall_s_per_round": [run["wall_s"] for run in runs],
            "evaluations_per_gpu_hour": round(n / len(runs) / wall * 3600 / max(1, gpus), 1),
            "p50_s": round(statistics.median(lat), 3), "p99_s": round(lat[min(n - 1, int(0.99 * n))], 3),
            "phase_p50_s": {k: round(statistics.median(t[k] for t in timings), 4) for k in PHASES},
            "retried_alone": sum(run["retried_alone"] for run in runs),
            "statuses": {s: statuses.count(s) for s in sorted(set(statuses))}}


def _in_process_side(overrides: list[str], cache: Path, problem: Any, sources: list[str], callers: int | None
                     ) -> tuple[dict[str, Any], int, int]:
    """One in-process round (start-up not timed): the run, its callers and its evaluations at once."""
    settings = compose_config(overrides)["eval"]  # the same evaluator settings as the service's
    with Evaluator(EvalConfig(**{**settings, "cache_dir": str(cache)})) as ev:
        ev.wait_warm(900)
        width, at_once = callers or 2 * ev.workers, max(1, int(ev.workers))
        with ThreadPoolExecutor(at_once, thread_name_prefix="kh-bench") as runners:
            return closed_loop(in_process_call(ev, problem, runners), sources, width, "in-process"), width, at_once


def _served_side(overrides: list[str], cache: Path, problem: Any, sources: list[str], callers: int
                 ) -> dict[str, Any]:
    """One round through a `harness serve` subprocess (start-up not timed)."""
    with ServerProcess([*overrides, f"eval.cache_dir={cache}", "--name", "bench", "--max-queue",
                        str(max(256, len(sources)))]) as server:
        client = EvalClient(server.url, timeout=3600)
        body = {"source": problem.source, "name": problem.name}
        served = closed_loop(lambda s: client.evaluate(body, s), sources, callers, "served")
        client.close()
        if REQUEST_FAILED in served["statuses"]:
            print("requests failed; the service's last lines:\n" + "".join(server.output[-_SERVER_TAIL_LINES:]),
                  file=sys.stderr)
    return served


def main(n: int | None = None, callers: int | None = None, out: str | None = None,
         extra_overrides: list[str] | None = None, rounds: int = 1) -> int:
    """`rounds` rounds of each side, the order alternating (in-process first in even rounds): the service's overhead
    is the median of the rounds' paired ratios, since one side's rate moves between rounds by more than the service
    costs."""
    if rounds < 1:
        raise ValueError("harness bench serve: --rounds must be at least 1")
    gpu = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if gpu else 0
    n = n or (96 if gpu else 6)
    elements = GPU_N if gpu else CPU_N
    problem = candidates.problem(elements)
    env = environment()
    print(f"device: {env['device']} x{max(1, gpus)}; torch {env['torch']}, triton {env['triton']}; "
          f"{n} distinct honest Triton candidates of {problem.id} per side and round, {rounds} round(s)")
    report: dict[str, Any] = {"environment": env, "problem": problem.id, "candidates": n, "rounds": rounds}
    runs: dict[str, list[dict[str, Any]]] = {"in-process": [], "harness serve": []}
    width = at_once = 0
    with tempfile.TemporaryDirectory() as tmp:
        device = "cuda" if gpu else "cpu"
        overrides = [f"runs_dir={Path(tmp) / 'runs'}", f"eval.device={device}", *(extra_overrides or [])]
        for i in range(rounds):
            for side in (("in-process", "harness serve") if i % 2 == 0 else ("harness serve", "in-process")):
                if side == "in-process":
                    run, width, at_once = _in_process_side(overrides, Path(tmp) / f"cache-inprocess-{i}", problem,
                                                           batch(n, elements, f"inprocess {i}"), callers)
                else:  # as many callers as the in-process side (measured first in round 0)
                    run = _served_side(overrides, Path(tmp) / f"cache-served-{i}", problem,
                                       batch(n, elements, f"served {i}"), width)
                runs[side].append(run)
    rows = [_summary(side, runs[side], gpus) for side in runs]
    ratios = [s["wall_s"] / p["wall_s"] for p, s in zip(runs["in-process"], runs["harness serve"])]
    report.update(callers=width, at_once=at_once, rows=rows, overhead_per_round=[round(r - 1, 4) for r in ratios],
                  overhead=round(statistics.median(ratios) - 1, 4),
                  p50_overhead_s=round(rows[1]["p50_s"] - rows[0]["p50_s"], 3))
    print(f"{'side':<14} {'evals':>6} {'wall s':>8} {'evals/GPU-hour':>15} {'p50 s':>7} {'p99 s':>7} "
          f"{'run twice':>9}  statuses")
    for r in rows:
        print(f"{r['side']:<14} {r['evaluations']:>6} {r['wall_s']:>8} {r['evaluations_per_gpu_hour']:>15} "
              f"{r['p50_s']:>7} {r['p99_s']:>7} {r['retried_alone']:>9}  {r['statuses']}")
    per_round = ", ".join(f"{r:+.1%}" for r in report["overhead_per_round"])
    print(f"overhead of the service: {report['overhead']:+.1%} wall (median of rounds: {per_round}), "
          f"{report['p50_overhead_s']:+.3f} s at p50 ({width} concurrent callers, {at_once} evaluations at once, "
          "each side)"
          + ("" if gpu else "; CPU: a smoke test, not a figure"))
    print("median seconds per phase of a call (http_s: the caller's wait beyond the others)")
    print(f"{'side':<14} " + " ".join(f"{k:>9}" for k in PHASES))
    for r in rows:
        print(f"{r['side']:<14} " + " ".join(f"{r['phase_p50_s'][k]:>9.4f}" for k in PHASES))
    if out:
        Path(out).write_text(json.dumps(report, indent=2))
    bad = [r for r in rows if set(r["statuses"]) != {"correct"}]
    return 1 if bad else 0
