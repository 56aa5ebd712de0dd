"""Launch-bound timing, worker side: CUDA-graph replays (`eval.cuda_graphs=auto`) and the GPU busy share.

`capture(side)` captures a subject's forward once in a CUDA graph, after a few eager calls on a
side stream (as PyTorch asks before a capture); `replayer` makes a forward that replays it and
returns the captured outputs. The inputs are the subject's fixed buffers, which the timing loop
refills (fresh values, outside the timed interval) before every repetition, so each replay
computes on new inputs and its outputs are captured like an eager call's. A replay runs no Python
of the forward, which is the point: it times the GPU work without the host's launch overhead. If a
subject cannot be captured (a host synchronisation, a CPU-side read of a tensor, an allocation the
capture refuses, ...), the block says "capture_failed" and why: a failed capture can leave the
process's CUDA state unusable (measured on the H100: the next random draw raised), so the parent
evaluates again with new processes, eagerly.

`busy_share(side)` measures, for one subject, the host's time to enqueue the call (from the call to its
return, no synchronisation) and the event-timed time of the call and, for a side whose host time is
over a threshold, the GPU time of its kernels per call (profiler), all under the timing's own
conditions (inputs refilled, L2 flushed, the GPU lead before the start event).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from eval.worker import timing, tracing

# captured before any candidate is imported
_CUDAGraph = torch.cuda.CUDAGraph
_graph_context = torch.cuda.graph
# the C++ method itself, so a candidate that rebinds the Python class's `replay` changes nothing here
_replay = getattr(torch._C._CUDAGraph, "replay", None) or torch.cuda.CUDAGraph.replay
_WARM_CALLS = 3
_NOTE_CHARS = 300


def _last_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    line = text.splitlines()[-1] if text else type(exc).__name__
    return line if len(line) <= _NOTE_CHARS else line[:_NOTE_CHARS] + "..."


def capture(side: timing.TimedSide) -> tuple[Any, Any]:
    """Warm the side up on a side stream, then capture one call; returns (graph, its outputs)."""
    side.prepare(-1)
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        for _ in range(_WARM_CALLS):
            side.call()
    torch.cuda.current_stream().wait_stream(warm)
    torch.cuda.synchronize()
    graph = _CUDAGraph()
    before = torch.cuda.current_stream()
    try:
        # a stream of its own per capture: a capture that fails leaves nothing routed to a shared capture stream
        with _graph_context(graph, stream=torch.cuda.Stream()):
            out = side.call()
    finally:
        # when the capture's end raises, torch.cuda.graph's exit stops before restoring the stream, which
        # would leave the dead capture stream current (later random draws then fail)
        torch.cuda.set_stream(before)
    torch.cuda.synchronize()
    return graph, out


def failure_note(exc: BaseException) -> str:
    """Why a capture failed, in one line, for the result's note."""
    return _last_line(exc)


def replayer(graph: Any, out: Any) -> Callable[[], Any]:
    """A forward that replays `graph` and returns the outputs it captured."""
    def call() -> Any:
        _replay(graph)
        return out
    return call


def _settle() -> None:
    """After a failed capture: wait for the device; the failed graph and its pool go with their last reference."""
    torch.cuda.synchronize()


def busy_share(side: timing.TimedSide, flush: Callable[[], None], calls: int,
               profile_above_ms: float = 0.0) -> dict[str, float]:
    """host_ms (median host time from the call to its return: enqueueing, Python, any sync), event_ms (median event
    time of a call) and, when host_ms exceeds `profile_above_ms`, kernel_ms (GPU time of its kernels per call) and
    busy (kernel_ms over event_ms).

    All use the timing's conditions: each call's inputs are refilled and the L2 flushed (with the GPU
    lead) first. The profile of the calls also holds the refill and the flush, so the same loop without
    the call is profiled too and its kernels' times are taken off, kernel name by kernel name.
    """
    times, host = [], []
    for k in range(calls):
        side.prepare(k)
        flush()
        t0 = time.perf_counter()
        start, end, result = timing.bracketed(side.call)
        host.append((time.perf_counter() - t0) * 1000.0)
        del result
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    event_ms, host_ms = statistics.median(times), statistics.median(host)
    if host_ms <= profile_above_ms:
        return {"event_ms": event_ms, "host_ms": host_ms}
    count = {"k": 0}

    def setup_only() -> None:
        side.prepare(count["k"])
        count["k"] += 1
        flush()

    def with_call() -> None:
        setup_only()
        side.call()

    base = dict(tracing.profile_kernels(setup_only, repeats=calls))
    count["k"] = 0
    full = tracing.profile_kernels(with_call, repeats=calls)
    kernel_ms = sum(max(0.0, ms - base.get(kernel, 0.0)) for kernel, ms in full)
    busy = min(1.0, kernel_ms / event_ms) if event_ms > 0 else 1.0
    return {"kernel_ms": kernel_ms, "event_ms": event_ms, "busy": busy, "host_ms": host_ms}
