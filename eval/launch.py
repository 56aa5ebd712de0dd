"""Launch-bound timings, parent side: the host-bound check and the CUDA-graph timing mode's record.

A call is host-bound when the GPU sits idle for much of it, waiting for the host (Python in
forward, kernel launches, allocator work): its time then measures the CPU, the driver and the
machine's load more than the GPU, and it moves between runs and machines of the same GPU type
(an eager LSTM reference measured 41 ms, then 58 ms, on two H100 runs). The `host_bound` step
measures, for both sides, the GPU busy share of an eager call (the worker's `Busy` command:
kernel time per call from the profiler over the event-timed call, under the timing's own
conditions) and flags the result when a side is below `HOST_BOUND_BELOW`.

The threshold is 0.5: below it the GPU is idle for more than half the call, so most of the timed
interval is host time, and a host that is 40 % slower (41 -> 58 ms above) moves the time by more
than 20 %, far beyond the 1 % the timing's stopping rule aims at. Above it, the worker's timing
already hides up to about 200 us of launch latency per call behind a GPU spin (`L2Flusher`), so
ordinary short references measure about 0.9 or more; the kernels' own gaps at the GPU front end
(a microsecond or two between back-to-back launches) only lower that for calls made of many
tiny kernels, which are launch-bound in the same sense. The flag changes no verdict and no
speedup: it says which numbers depend on the host, and `eval.cuda_graphs=auto` times replays of
captured graphs instead, which take most of the host out of both sides.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from eval import protocol as p

if TYPE_CHECKING:
    from eval.checks import Context

HOST_BOUND_BELOW = 0.5
BUSY_CALLS = 5  # event-timed and profiled eager calls per side


def host_bound(ctx: "Context") -> None:
    """Measure both sides' GPU busy share; record it and flag the result when a side is host-bound."""
    reply, _ = ctx.request(p.Busy(calls=BUSY_CALLS, flush=ctx.config.l2_flush), timeout=ctx.config.timing_timeout_s)
    busy = {}
    for side in ("reference", "candidate"):
        value = reply.sides.get(side, {}).get("busy")
        if value is not None and math.isfinite(value):
            busy[side] = round(min(max(float(value), 0.0), 1.0), 4)
    result = ctx.result
    result.gpu_busy = busy
    result.host_bound = [side for side, share in busy.items() if share < HOST_BOUND_BELOW]
    if result.host_bound:
        result.flags.append(host_bound_flag(busy, result.host_bound, result.timing_mode))


def host_bound_flag(busy: dict[str, float], sides: list[str], timing_mode: str) -> str:
    """The human-readable note for a host-bound result."""
    shares = ", ".join(f"{side} {share:.0%}" for side, share in busy.items())
    which = " and ".join(sides)
    text = (f"host-bound: the GPU is busy for under {HOST_BOUND_BELOW:.0%} of an eager call of the {which} "
            f"(GPU busy share: {shares}); such a time mostly measures the host (Python, kernel launches) and "
            "moves between runs and machines")
    if timing_mode == "cuda_graph":
        return text + "; these timings are CUDA-graph replays, which take most of that host time out"
    return text + "; compare its speedup with care (eval.cuda_graphs=auto times CUDA-graph replays instead)"


def record_mode(ctx: "Context", reply: p.TimeReply) -> None:
    """Which way the timed calls ran, and why graphs were not used when they were asked for."""
    ctx.result.timing_mode = "cuda_graph" if reply.timing_mode == "cuda_graph" else "eager"
    if ctx.graphs and ctx.result.timing_mode != "cuda_graph":
        ctx.result.flags.append("cuda_graphs: " + (reply.graph_note[:400] or "graphs were not used"))
