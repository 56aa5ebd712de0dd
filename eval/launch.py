"""Launch-bound timings, parent side: the host-bound check and the CUDA-graph timing mode's record.

A call is host-bound when the host's work to make it (Python in forward, kernel launches,
allocator work, any synchronisation) is large next to the GPU work it enqueues: its time then
measures the CPU, the driver and the machine's load as much as the GPU, and it moves between runs
and machines of the same GPU type (an eager LSTM reference measured 41 ms, then 58 ms, on two H100
runs). The `host_bound` step has the worker measure, for both sides and under the timing's own
conditions, the host's time from the call to its return (`host_ms`, no synchronisation) and the
event-timed call (`event_ms`) and, for a side whose host time is over `HOST_FLOOR_MS`, the GPU time
of the call's kernels (`kernel_ms`, profiler). A side under the floor is never host-bound (below),
so it is not profiled: the four profiler sessions took 0.06-0.1 s of every candidate's exclusive
GPU time, about a sixth of it (`harness bench eval --part steps`, H100, 2026-11-23).

A side is host-bound when its host time is at least `HOST_SHARE_AT` (0.5) of its GPU time and
more than `HOST_FLOOR_MS`. Why a share of the GPU time and not the GPU's busy share: the GPU can
stay busy through a call while the host only just keeps ahead of it, and then a host that is 2x
slower (another machine, a loaded one) starves it. The first detector, GPU busy under 50 %, did
not fire on the LSTM and GRU references whose eager times moved 1.29x and 1.46x between sessions
(busy 60-100 %). At half the GPU time, a host twice as slow would already idle the GPU. The floor
is the timing's GPU lead (`L2Flusher`, 200 us): host work shorter than that is enqueued while the
GPU spins, before the start event, so it cannot show in the time.

The flag changes no verdict and no speedup: it says which numbers depend on the host, and
`eval.cuda_graphs=auto` times replays of captured graphs instead, which take most of the host out
of both sides.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from eval import protocol as p

if TYPE_CHECKING:
    from eval.checks import Context

HOST_SHARE_AT = 0.5
HOST_FLOOR_MS = 0.2
_SHARE_CAP = 1000.0  # a side with (almost) no kernel time: its share is "huge", kept finite for JSON
BUSY_CALLS = 5  # event-timed and profiled eager calls per side


def host_bound(ctx: "Context") -> None:
    """Measure both sides' host and GPU time per call; record them and flag the result when a side is host-bound."""
    reply, _ = ctx.request(p.Busy(calls=BUSY_CALLS, flush=ctx.config.l2_flush, profile_above_ms=HOST_FLOOR_MS),
                           timeout=ctx.config.timing_timeout_s)
    result = ctx.result
    bound = []
    for side in ("reference", "candidate"):
        values = reply.sides.get(side, {})
        busy, host_ms, kernel_ms = (_finite(values.get(key)) for key in ("busy", "host_ms", "kernel_ms"))
        if busy is not None:
            result.gpu_busy[side] = round(min(max(busy, 0.0), 1.0), 4)
        if host_ms is None:
            continue
        host_ms = max(host_ms, 0.0)
        result.host_ms[side] = round(host_ms, 4)
        if kernel_ms is None:  # not profiled: its host time is under the floor
            continue
        kernel_ms = max(kernel_ms, 0.0)
        share = min(host_ms / kernel_ms, _SHARE_CAP) if kernel_ms > 0 else _SHARE_CAP
        result.host_share[side] = round(share, 4)
        if host_ms > HOST_FLOOR_MS and share >= HOST_SHARE_AT:
            bound.append(side)
    result.host_bound = bound
    if bound:
        result.flags.append(host_bound_flag(result.host_share, bound, result.timing_mode))


def _finite(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def host_bound_flag(host_share: dict[str, float], sides: list[str], timing_mode: str) -> str:
    """The human-readable note for a host-bound result."""
    shares = ", ".join(f"{side} {share:.2f}" for side, share in host_share.items())
    which = " and ".join(sides)
    text = (f"host-bound: making an eager call of the {which} takes the host at least {HOST_SHARE_AT:.0%} of the "
            f"call's GPU time (host time over GPU time per call: {shares}); such a time depends on the host "
            "(Python, kernel launches) and moves between runs and machines")
    if timing_mode == "cuda_graph":
        return text + "; these timings are CUDA-graph replays, which take most of that host time out"
    return text + "; compare its speedup with care (eval.cuda_graphs=auto times CUDA-graph replays instead)"


def record_mode(ctx: "Context", reply: p.TimeReply) -> None:
    """Which way the timed calls ran, and why graphs were not used when they were asked for."""
    ctx.result.timing_mode = "cuda_graph" if reply.timing_mode == "cuda_graph" else "eager"
    if ctx.graphs and ctx.result.timing_mode != "cuda_graph":
        ctx.result.flags.append("cuda_graphs: " + (reply.graph_note[:400] or "graphs were not used"))
