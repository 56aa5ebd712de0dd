"""Timing, worker side: the one loop every timed repetition runs in, and the measurements beside it.

On a GPU the worker times in the native loop (`eval.worker.native_loop`, which builds on this module's
types, so the worker, not this module, chooses between the two: `serve.timing_loop`): per repetition it
resets persisting L2, flushes L2, spins the GPU for a lead, records the start event, calls forward,
records the end event and enqueues the capture of the outputs, all in C, so no Python the candidate
could have patched runs between a call's end event and the capture of its output and times. The
worker returns raw event times and captures; the parent computes every statistic and checks every
capture against the reference process's (`eval.timing.measure`).

On the CPU (the Triton interpreter) `PythonLoop` has the same interface and computes the same
captures with `eval.crossing._capture`; its times are host times and mean nothing, and being Python it is no
wall against a hostile candidate. It exists so that the whole two-process pipeline runs in CI.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from eval.crossing import _capture as capture_math


# Sampled elements per captured output (all of them in outputs up to this size). The captures travel to the parent
# inside each block's wall time, so their size is noise in the wall bound: at 32768 samples (256 KiB a repetition)
# a block of 24 repetitions shipped 6 MB, which added 300-700 us a repetition that varied from block to block on
# the H100. Skipping work leaves a share of the output wrong, which 4096 samples hit at once; a handful of wrong
# elements with a large error moves the secret projections over every element.
CAPTURE_SAMPLES = 4096
_MAX_DEPTH, _MAX_LEAVES = 4, 16

# The inputs of each repetition of a block: (buffer, source) pairs, copied before the call. Both tensors of a pair
# have the same dtype, sizes and strides, so the copy is one of bytes over the span the strides reach.
Copies = list[list[tuple[torch.Tensor, torch.Tensor]]]


def span_bytes(t: torch.Tensor) -> int:
    """Bytes from t's first element to one past its last, by its sizes and (non-negative) strides."""
    if t.numel() == 0:
        return 0
    if any(s < 0 for s in t.stride()):
        raise ValueError("an input with a negative stride cannot be staged")
    return (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))) * t.element_size()


def same_layout_buffer(t: torch.Tensor) -> torch.Tensor:
    """A new tensor with t's dtype, device, sizes and strides, holding t's bytes over its span (views and expanded
    inputs keep their layout, which the candidate's kernel may depend on)."""
    buf = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    copy_span(buf, t)
    return buf


def copy_span(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst's bytes over its span = src's (both laid out alike; see `Copies`)."""
    n = span_bytes(src)
    if n:
        flat = lambda t: torch.as_strided(t, [n // t.element_size()], [1]).view(torch.uint8)  # noqa: E731
        flat(dst).copy_(flat(src))


def check_copies(copies: Copies) -> None:
    """Raise ValueError unless each pair is laid out alike on one device (the native loop copies raw bytes)."""
    for pairs in copies:
        for dst, src in pairs:
            if (dst.dtype, dst.shape, dst.stride(), dst.device) != (src.dtype, src.shape, src.stride(), src.device):
                raise ValueError(f"a timed input is laid out unlike its buffer ({src.dtype} {list(src.shape)} "
                                 f"strides {list(src.stride())}, buffer {list(dst.stride())})")


def output_leaves(out: Any) -> tuple[list[torch.Tensor], str]:
    """The tensors of a forward's output in order (tuple, list, dict values; depth <= 4, <= 16 tensors), or why the
    output cannot be captured. The native loop applies the same rules in C."""
    leaves: list[torch.Tensor] = []

    def walk(x: Any, depth: int) -> str:
        if type(x) is torch.Tensor:  # noqa: E721  subclasses (lazy or fake tensors) are refused
            if x.layout != torch.strided:
                return f"output {len(leaves)} has layout {x.layout}"
            if x.dtype not in capture_math.SUPPORTED_DTYPES:
                return f"output {len(leaves)} has dtype {x.dtype}, which cannot be captured"
            if capture_math.self_overlap(list(x.shape), list(x.stride())):
                return f"output {len(leaves)} overlaps itself (sizes {list(x.shape)}, strides {list(x.stride())})"
            leaves.append(x)
            return "" if len(leaves) <= _MAX_LEAVES else f"more than {_MAX_LEAVES} output tensors"
        if depth >= _MAX_DEPTH or type(x) not in (tuple, list, dict):
            return f"output leaf {len(leaves)} is a {type(x).__qualname__}, not a torch.Tensor"
        for item in (x.values() if type(x) is dict else x):
            if problem := walk(item, depth + 1):
                return problem
        return ""

    problem = walk(out, 0)
    return leaves, problem


@dataclass
class BlockResult:
    """What one block of timed repetitions gives: raw event times, captures [reps, leaves, samples + extra] (CPU
    float64), each output tensor's (dtype, shape) from the first repetition, what was found wrong, and (on a GPU)
    the GPU time of the loop's own work over the block, from events around it (`protocol.OUTSIDE_PARTS`)."""

    times_ms: list[float]
    captures: torch.Tensor
    leaves: list[tuple[str, list[int]]]
    violations: list[str]
    outside_ms: list[float] = field(default_factory=list)


class PythonLoop:
    """The CPU stand-in for `NativeLoop`: same `block` interface and captures, host clock times."""

    def __init__(self, key: int, samples: int = CAPTURE_SAMPLES):
        self._key, self._samples = key, samples

    def rekey(self, key: int) -> None:
        self._key = key

    def block(self, forward: Callable[..., Any], args: list[Any], reps: int, *, first_rep: int, flush: bool = True,
              flush_bytes: int = 0, lead: bool = True, sync_each: bool = False, capture: bool = True,
              copies: Copies | None = None) -> BlockResult:
        """As `NativeLoop.block`; a CPU has no L2 to flush and no GPU lead, so those are ignored."""
        times: list[float] = []
        rows: list[torch.Tensor] = []
        leaves: list[tuple[str, list[int]]] = []
        violations: list[str] = []
        for i in range(reps):
            rep = first_rep + i
            for dst, src in (copies[i] if copies else []):
                copy_span(dst, src)
            t0 = time.perf_counter()
            out = forward(*args)
            times.append((time.perf_counter() - t0) * 1000.0)
            if not capture:
                continue
            tensors, problem = output_leaves(out)
            if problem:
                violations.append(problem)
                break
            now = [(str(t.dtype).removeprefix("torch."), list(t.shape)) for t in tensors]
            if i == 0:
                leaves = now
            elif now != leaves:
                violations.append(f"repetition {rep} returned outputs {now}, repetition {first_rep} {leaves}")
                break
            rows.append(torch.stack([capture_math.capture(t, self._key, rep, j, self._samples)
                                     for j, t in enumerate(tensors)]))
        captures = torch.stack(rows) if rows else torch.empty(0, dtype=torch.float64)
        return BlockResult(times_ms=times, captures=captures, leaves=leaves, violations=violations)


@dataclass
class TimedSide:
    """A subject ready to call: `prepare(rep)` loads repetition rep's inputs into its buffers, `call()` runs forward."""

    prepare: Callable[[int], None]
    call: Callable[[], Any]


class L2Flusher:
    """Before each call of the host-bound measurement (`Busy`, a flag, not a timing): evict the L2, then keep the
    GPU busy for a moment. Timed repetitions do the same inside the native loop.

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


def bracketed(call: Callable[[], Any]) -> tuple[torch.cuda.Event, torch.cuda.Event, Any]:
    """One call between two CUDA events on the current stream, with no host synchronisation between them."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    out = call()
    end.record()
    return start, end, out


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
