"""The host-bound flag: which timings depend on the host as much as the GPU (parent side).

A call is host-bound when the host's work to make it (Python in forward, kernel launches, allocator
work, any synchronisation) is large next to the GPU work it enqueues: its time then measures the CPU,
the driver and the machine's load as much as the GPU, and moves between runs and machines of the same
GPU type (an eager LSTM reference measured 41 ms, then 58 ms, on two H100 runs). A side is host-bound
when its host time is at least HOST_SHARE_AT of its GPU time and more than HOST_FLOOR_MS. Why a share of
the GPU time and not the GPU's busy share: the GPU can stay busy through a call while the host only just
keeps ahead of it, and then a host 2x slower starves it (the LSTM and GRU references moved 1.29x and 1.46x
between sessions at 60-100 % busy). The floor is the timing's GPU lead (200 us): host work shorter than
that is enqueued while the GPU spins, before the start event, so it cannot show in the time. A side under
the floor is not profiled (a profile costs tens of ms of exclusive GPU time). The flag changes no verdict:
it says which numbers depend on the host; `eval.cuda_graphs=auto` times graph replays instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOST_SHARE_AT = 0.5
HOST_FLOOR_MS = 0.2
BUSY_CALLS = 5  # event-timed and profiled eager calls per side
_SHARE_CAP = 1000.0  # a side with (almost) no kernel time: its share is "huge", kept finite for JSON


@dataclass(frozen=True)
class HostTime:
    """One side's busy share of the GPU, host time per call and host share (host time over GPU time), each None
    where it was not measured; `bound` when the side is host-bound."""

    busy: float | None = None
    host_ms: float | None = None
    share: float | None = None
    bound: bool = False


def host_time(values: dict[str, float]) -> HostTime:
    """A side's `Busy` reply read into a `HostTime`: out-of-range or non-finite values clamped or dropped."""
    busy, host_ms, kernel_ms = (_finite(values.get(key)) for key in ("busy", "host_ms", "kernel_ms"))
    busy = None if busy is None else round(min(max(busy, 0.0), 1.0), 4)
    if host_ms is None:
        return HostTime(busy)
    host_ms = max(host_ms, 0.0)
    if kernel_ms is None:  # not profiled: its host time is under the floor
        return HostTime(busy, round(host_ms, 4))
    kernel_ms = max(kernel_ms, 0.0)
    share = min(host_ms / kernel_ms, _SHARE_CAP) if kernel_ms > 0 else _SHARE_CAP
    return HostTime(busy, round(host_ms, 4), round(share, 4), host_ms > HOST_FLOOR_MS and share >= HOST_SHARE_AT)


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
