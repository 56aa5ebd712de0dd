"""GPU timing under identical conditions for reference and candidate.

Method (see DESIGN.md): interleave the two callables (ABBA order to cancel drift), refill the
inputs from a rotating pool and flush the L2 cache (a write of 2x its size) before every
repetition, bracket each call with CUDA events on the current stream with no host
synchronisation inside the interval, and repeat until the relative standard error of both
medians is under the target or the time budget is spent.

`fixed_count` is KernelBench's method instead (its `time_execution_with_cuda_event`): a few
warm-up calls, then a fixed number of calls per side, each between CUDA events and followed by
a device synchronisation, the same inputs every call, optionally no L2 flush; the sides are
timed one after the other, not interleaved, so each keeps its own data in the cache.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

_SYNC_BATCH = 10  # repetitions between host synchronisations (outside every interval)


@dataclass
class TimedSide:
    """One side of a timing: `prepare(rep)` loads repetition rep's inputs (warm-up calls count below 0),
    `call()` runs it, `after(rep, out)` inspects its output outside the interval."""

    prepare: Callable[[int], None]
    call: Callable[[], Any]
    after: Callable[[int, Any], None] | None = None  # inspect the output of a timed call (outside the interval)


def summarize(samples_ms: list[float]) -> dict[str, float]:
    """Median, IQR, n, relative standard error of the median, min; mean, std and max too."""
    n = len(samples_ms)
    median = statistics.median(samples_ms)
    if n >= 4:
        q = statistics.quantiles(samples_ms, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = max(samples_ms) - min(samples_ms)
    # standard error of the median from a robust sigma (IQR / 1.349), normal approximation
    rse = (1.2533 * (iqr / 1.349) / math.sqrt(n)) / median if n > 1 and median > 0 else float("inf")
    return {"median_ms": median, "iqr_ms": iqr, "n": n, "rel_stderr": rse, "min_ms": min(samples_ms),
            "mean_ms": statistics.fmean(samples_ms), "std_ms": statistics.pstdev(samples_ms) if n > 1 else 0.0,
            "max_ms": max(samples_ms)}


class L2Flusher:
    """Before each timed call: evict the L2 cache, then keep the GPU busy for a moment.

    The flush writes a buffer of at least twice the L2 size. The spin that follows
    (`torch.cuda._sleep`, about `lead_us`) lets the host enqueue the start event, the call
    and the end event before the GPU reaches them, so the events bracket the call's GPU
    work instead of the host's launch latency (about 85 us per call on the H100 machine
    used here). A call whose host work outlasts the lead still shows it as idle GPU time.
    """

    def __init__(self, device: torch.device, lead_us: float = 200.0):
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or (64 << 20))
        self.nbytes = max(2 * l2, 8 << 20)
        self._buf = torch.empty(self.nbytes // 4, dtype=torch.int32, device=device)
        self._spin_cycles = int(lead_us * _cycles_per_us())

    def __call__(self) -> None:
        self._buf.zero_()
        torch.cuda._sleep(self._spin_cycles)


def _cycles_per_us() -> float:
    """GPU clock cycles per microsecond of `torch.cuda._sleep`, measured once."""
    cycles = 1_000_000
    torch.cuda._sleep(cycles)  # warm the clocks
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    return cycles / (start.elapsed_time(end) * 1000.0)


def interleaved(
    sides: dict[str, TimedSide],
    *,
    min_reps: int,
    max_reps: int,
    target_rel_stderr: float,
    budget_s: float,
    warmup_ms: float,
    flush: Callable[[], None],
) -> dict[str, list[float]]:
    """Time each side per repetition, interleaved; return the samples (ms) per side."""
    names = list(sides)
    _warm_up(sides, warmup_ms, flush)
    samples: dict[str, list[float]] = {n: [] for n in names}
    start_wall = time.perf_counter()
    rep = 0
    while rep < max_reps:
        pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        for _ in range(_SYNC_BATCH):
            order = names if rep % 2 == 0 else names[::-1]
            for name in order:
                side = sides[name]
                side.prepare(rep)
                flush()
                start, end, out = bracketed(side.call)
                pending.append((name, start, end))
                if side.after is not None:
                    side.after(rep, out)
                del out
            rep += 1
        torch.cuda.synchronize()
        for name, start, end in pending:
            samples[name].append(start.elapsed_time(end))
        if rep >= min_reps:
            done = all(summarize(samples[n])["rel_stderr"] < target_rel_stderr for n in names)
            if done or time.perf_counter() - start_wall > budget_s:
                break
    return samples


def fixed_count(
    sides: dict[str, TimedSide],
    *,
    reps: int,
    warmup_calls: int,
    flush: Callable[[], None] | None,
) -> dict[str, list[float]]:
    """KernelBench's timing: per side, `warmup_calls` synchronised calls, then `reps` calls, each
    between CUDA events and followed by `torch.cuda.synchronize()`; the same inputs throughout.

    The synchronisation after each call means the events also hold the host's launch latency
    of a short call, as they do in KernelBench. With `flush`, the L2 is cleared before each call.
    """
    samples: dict[str, list[float]] = {}
    for name, side in sides.items():
        side.prepare(0)
        for _ in range(warmup_calls):
            side.call()
            torch.cuda.synchronize()
        times: list[float] = []
        for _ in range(reps):
            if flush is not None:
                flush()
            start, end, out = bracketed(side.call)
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
            if side.after is not None:
                side.after(0, out)
            del out
        samples[name] = times
    return samples


def bracketed(call: Callable[[], Any]) -> tuple[torch.cuda.Event, torch.cuda.Event, Any]:
    """One call between two CUDA events on the current stream, with no host synchronisation between them."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    out = call()
    end.record()
    return start, end, out


def _warm_up(sides: dict[str, TimedSide], warmup_ms: float, flush: Callable[[], None]) -> None:
    deadline = time.perf_counter() + warmup_ms / 1000.0
    calls = 0
    while calls < 3 or time.perf_counter() < deadline:
        for side in sides.values():
            side.prepare(-1 - calls)
            flush()
            side.call()
        torch.cuda.synchronize()
        calls += 1
        if calls >= 1000:
            break


def back_to_back_excess(call: Callable[[], Any], reps: int) -> dict[str, float]:
    """Wall time of `reps` back-to-back calls ending in one sync, against the sum of their events.

    Work the call hides from the current stream (side streams, threads) finishes only by the
    final synchronisation, so it shows as wall time no event accounts for.
    """
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    t0 = time.perf_counter()
    for start, end in events:
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1000.0
    event_ms = sum(s.elapsed_time(e) for s, e in events)
    return {"wall_ms": wall_ms, "event_ms": event_ms, "excess_ms_per_call": (wall_ms - event_ms) / reps}
