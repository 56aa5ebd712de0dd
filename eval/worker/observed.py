"""Observed timing, in the worker processes: the trusted reference process keeps the clock, and every timed output.

The reference process (trusted: it never imports candidate code) exports one device buffer per evaluation: for
each repetition of a block, a region per input and per output, laid out as the staged inputs and the reference's
outputs are; and two flag words, `go` and `done` (`eval.worker.cuda_ipc`). For a block of a candidate it enqueues,
on a stream of its own:

    poison every output region (0xFF bytes: NaN in float, -1 in int), a GPU lead (a spin, so the candidate's host
    enqueues its block meanwhile), fresh inputs into every input region, an L2 flush, RELEASED, go := seq,
    wait until done >= seq, END, the outputs copied into memory of its own

and the candidate's worker enqueues: wait until go >= seq, its forward on each repetition's input regions with each
output copied into that repetition's output regions, done := seq. After END the reference process computes the
reference's outputs for the same inputs and compares every element of every repetition's output regions with
them, as copied at END (so work after done is not what is read; a GPU that ran the candidate between END and that
copy voids the window). The window END - RELEASED holds the candidate's block and a handover between the two CUDA contexts, which
the parent measures with a clean process that never loaded candidate code (`eval.timing.observed`).

What the candidate's process could do: start before go (its inputs are not there yet), say done before its work
ends (END then comes before its outputs, which are poisoned until written), do its work on another stream or
after done (the same), or lie in its reply (its reply carries only a diagnostic). Each leaves an output wrong or
a window long. The reference's blocks are timed the same way, run by the clean client (trusted, like this process)
behind go; the reference process's own blocks of the reference time the copies of its outputs into their regions
apart (every block makes the same copies), which both figures leave out.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from eval.worker import cuda_ipc
from problems import compare

FLAG_BYTES = cuda_ipc.ALIGN  # go at 0, done at 128
POISON = 0xFF
# A window's outputs are copied right behind its END; a copy that took longer than this share of the same copy in
# the reference's own block, plus the slack, had the GPU run something else between them (the candidate's context):
# the window does not count.
SNAP_SHARE = 1.5
SNAP_SLACK_MS = 0.05


def _aligned(n: int) -> int:
    return (n + cuda_ipc.ALIGN - 1) // cuda_ipc.ALIGN * cuda_ipc.ALIGN


def _span(size: list[int], stride: list[int], item: int) -> int:
    if any(s == 0 for s in size):
        return 0
    return (1 + sum((n - 1) * s for n, s in zip(size, stride))) * item


@dataclass
class Layout:
    """Where each repetition's inputs and outputs lie in the shared buffer: [offset, dtype, size, stride] each."""

    inputs: list[list[list[Any]]] = field(default_factory=list)
    outputs: list[list[list[Any]]] = field(default_factory=list)
    nbytes: int = FLAG_BYTES

    @staticmethod
    def plan(reps: int, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> "Layout":
        """Every repetition's inputs (laid out as staged), then every repetition's outputs (contiguous)."""
        layout, offset = Layout(), FLAG_BYTES
        for group, dest, contiguous in ((inputs, layout.inputs, False), (outputs, layout.outputs, True)):
            for _ in range(reps):
                row = []
                for t in group:
                    stride = _contiguous_strides(list(t.shape)) if contiguous else list(t.stride())
                    row.append([offset, str(t.dtype).removeprefix("torch."), list(t.shape), stride])
                    offset += _aligned(_span(list(t.shape), stride, t.element_size()))
                dest.append(row)
        layout.nbytes = offset
        return layout

    @property
    def outputs_start(self) -> int:
        return self.outputs[0][0][0] if self.outputs and self.outputs[0] else self.nbytes

    def views(self, base: torch.Tensor) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]]]:
        make = lambda e: cuda_ipc.view(base, e[0], getattr(torch, e[1]), e[2], e[3])  # noqa: E731
        return [[make(e) for e in row] for row in self.inputs], [[make(e) for e in row] for row in self.outputs]


def _contiguous_strides(size: list[int]) -> list[int]:
    strides, acc = [], 1
    for n in reversed(size):
        strides.append(acc)
        acc *= max(n, 1)
    return list(reversed(strides))


@functools.cache
def cycles_per_us() -> float:
    """`torch.cuda._sleep`'s cycles a microsecond on this GPU, measured once (the lead's clock)."""
    torch.cuda._sleep(1_000_000)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / (start.elapsed_time(end) * 1000)


def _spin(cycles: int) -> None:
    if cycles > 0:
        torch.cuda._sleep(cycles)


@dataclass
class Mismatch:
    """What the full check of a block's timed outputs found (count 0: every repetition agreed; else how many
    repetitions did not, and where the first one missed)."""

    count: int = 0
    detail: str = ""


@dataclass
class Closed:
    """A closed window: its time (None: the candidate never said done), the full check of its outputs, and the copy
    of its outputs behind END (`switched`: longer than the limit, the window does not count)."""

    window_ms: float | None
    mismatch: Mismatch = field(default_factory=Mismatch)
    switched: bool = False
    snap_ms: float = 0.0
    snap_limit_ms: float = 0.0


class Timekeeper:
    """The reference process's side of one evaluation's observed timing."""

    def __init__(self, reps: int, inputs: list[torch.Tensor], outputs: list[torch.Tensor], flush_bytes: int):
        self.layout = Layout.plan(reps, inputs, outputs)
        self.buffer = cuda_ipc.ExportedBuffer(self.layout.nbytes)
        self.in_slots, self.out_slots = self.layout.views(self.buffer.tensor)
        self.go, self.done = self.buffer.ptr, self.buffer.ptr + 128
        self.buffer.tensor[:FLAG_BYTES].zero_()
        # the outputs as they were at END, copied on this process's stream right behind it, into memory no other
        # process can reach: what the check reads
        self.snapshot = torch.empty(self.layout.nbytes - self.layout.outputs_start, dtype=torch.uint8, device="cuda")
        self.snap_slots = [[cuda_ipc.view(self.snapshot, e[0] - self.layout.outputs_start, getattr(torch, e[1]), e[2],
                                          e[3]) for e in row] for row in self.layout.outputs]
        self.stream = torch.cuda.Stream()
        self.cycles_per_us = cycles_per_us()
        self.flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
        self.pending: dict[str, Any] = {}
        self.own_lead_us = 2000.0
        torch.cuda.synchronize()
        # how long that copy takes with nothing else running, measured before any window: the first candidate window
        # comes before the reference's first own block, and a limit of the slack alone voided every window of it
        # (H200, 2026-12-03: every honest candidate "switched" three times)
        self.own_snap_ms = self._snapshot_alone_ms()

    def _snapshot_alone_ms(self, times: int = 3) -> float:
        """The median time of the outputs' copy into the snapshot, on this process's stream, the region poisoned
        first as a window leaves it."""
        spans = []
        for _ in range(times):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(self.stream):
                self._outputs_region().fill_(POISON)
                start.record(self.stream)
                self.snapshot.copy_(self._outputs_region())
                end.record(self.stream)
            end.synchronize()
            spans.append(start.elapsed_time(end))
        return sorted(spans)[len(spans) // 2]

    @property
    def snap_limit_ms(self) -> float:
        """The longest the outputs' copy behind a window's END may take before the window is voided."""
        return SNAP_SHARE * self.own_snap_ms + SNAP_SLACK_MS

    def _outputs_region(self) -> torch.Tensor:
        return self.buffer.tensor[self.layout.outputs_start:self.layout.nbytes]

    def _release(self, drawn: list[list[torch.Tensor]], flush: bool = True) -> None:
        """Enqueue the inputs' copy into their regions and the flush (inside the window, on the current stream)."""
        for slots, values in zip(self.in_slots, drawn):
            for slot, value in zip(slots, values):
                slot.copy_(value)
        if flush and self.flush.numel():
            self.flush.zero_()

    def open(self, seq: int, drawn: list[list[torch.Tensor]], lead_us: float, flush: bool = True) -> None:
        """Enqueue a candidate's window for `seq` over the repetitions `drawn` (every step up to END). A handover
        window (no repetitions) has no flush: the handover alone is what it measures."""
        released, end, snapped = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        self.stream.wait_stream(torch.cuda.current_stream())  # the draws
        with torch.cuda.stream(self.stream):
            self._outputs_region().fill_(POISON)
            _spin(int(lead_us * self.cycles_per_us))
            self._release(drawn, flush)
            released.record(self.stream)
            cuda_ipc.write_flag(self.stream, self.go, seq)
            cuda_ipc.wait_flag(self.stream, self.done, seq)
            end.record(self.stream)
            if drawn:
                self.snapshot.copy_(self._outputs_region())
            snapped.record(self.stream)
        self.pending = {"seq": seq, "released": released, "end": end, "snapped": snapped, "drawn": drawn}

    def close(self, seq: int, timeout_s: float, reference: Callable[[list[torch.Tensor]], list[torch.Tensor]],
              atol: float, rtol: float,
              arbiter: Callable[[list[torch.Tensor], list[torch.Tensor]], bool] | None = None
              ) -> Closed:
        """The window's time from its inputs' release to END (None when the candidate never said done within
        `timeout_s`), the full check of every timed output as it was at END against the reference's for the same
        inputs, and whether the GPU ran other work between END and that copy (the window then does not count: only
        so could work after done reach the outputs read)."""
        pending, self.pending = self.pending, {}
        if pending.get("seq") != seq:
            raise RuntimeError(f"no window {seq} is open")
        deadline = time.monotonic() + timeout_s
        while not pending["end"].query():
            if time.monotonic() > deadline:
                cuda_ipc.release_flag(self.done, seq)  # unblock our stream; the window does not count
                torch.cuda.synchronize()
                return Closed(None)
            time.sleep(0.0002)
        pending["snapped"].synchronize()
        closed = Closed(pending["released"].elapsed_time(pending["end"]),
                        snap_ms=pending["end"].elapsed_time(pending["snapped"]), snap_limit_ms=self.snap_limit_ms)
        closed.switched = bool(pending["drawn"]) and closed.snap_ms > closed.snap_limit_ms
        if not closed.switched:
            closed.mismatch = self.check(pending["drawn"], reference, atol, rtol, arbiter)
        return closed

    def check(self, drawn: list[list[torch.Tensor]], reference: Callable[[list[torch.Tensor]], list[torch.Tensor]],
              atol: float, rtol: float, arbiter: Callable[[list[torch.Tensor], list[torch.Tensor]], bool] | None
              ) -> Mismatch:
        torch.cuda.synchronize()
        return compare_block(drawn, self.snap_slots, reference, atol, rtol, arbiter)

    def own_block(self, drawn: list[list[torch.Tensor]], forward: Callable[[list[torch.Tensor]], list[torch.Tensor]]
                  ) -> tuple[float, float]:
        """The reference's block: the same sequence in this process, its forward in place of the handover, its lead
        grown until this process's own enqueue fits inside it. Returns (ms from the inputs' release to END, of which
        ms copying outputs into their regions): the copies are the loop's, not the forward's, and the candidate's
        block makes the same ones."""
        while True:
            released, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            lead_end = torch.cuda.Event()
            marks = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in drawn]
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                self._outputs_region().fill_(POISON)
                _spin(int(self.own_lead_us * self.cycles_per_us))
                lead_end.record(self.stream)
                t0 = time.perf_counter()
                self._release(drawn)
                released.record(self.stream)
                run_into_slots(self.in_slots, self.out_slots, len(drawn), forward, marks)
                end.record(self.stream)
                enqueue_us = (time.perf_counter() - t0) * 1e6
                late = lead_end.query()
            self.stream.synchronize()
            if not late:
                self.own_lead_us = max(300.0, 1.5 * enqueue_us)
                return released.elapsed_time(end), sum(a.elapsed_time(b) for a, b in marks)
            if self.own_lead_us > 1e6:
                raise RuntimeError("the reference's own enqueue outlasted a one-second lead")
            self.own_lead_us *= 2

    def close_buffer(self) -> None:
        self.buffer.close()


def compare_block(drawn: list[list[torch.Tensor]], out_slots: list[list[torch.Tensor]],
                  reference: Callable[[list[torch.Tensor]], list[torch.Tensor]], atol: float, rtol: float,
                  arbiter: Callable[[list[torch.Tensor], list[torch.Tensor]], bool] | None = None) -> Mismatch:
    """Every element of every repetition's output regions against the reference on that repetition's inputs, by the
    rule the correctness trials apply (`problems._compare.compare`: the NaN pattern, infinities, then the tolerance;
    a poisoned region is NaN or -1, so an unwritten one differs). Where a repetition misses the reference,
    `arbiter` (the float64 forward, when it can run) may find it within tolerance of the float64 answer: the
    reference's own rounding missed, not the candidate. `count` is the repetitions that missed both."""
    found = Mismatch()
    for rep, (values, slots) in enumerate(zip(drawn, out_slots)):
        want = reference(values)
        miss = compare(want, list(slots), atol, rtol)
        if miss is None or (arbiter is not None and arbiter(values, list(slots))):
            continue
        if not found.count:
            where = f" at {miss.worst_index}" if miss.worst_index is not None else ""
            found.detail = f"repetition {rep}, output {miss.output}: {miss.reason}{where}"
        found.count += 1
    return found


def run_into_slots(in_slots: list[list[torch.Tensor]], out_slots: list[list[torch.Tensor]], reps: int,
                   forward: Callable[[list[torch.Tensor]], list[torch.Tensor]],
                   marks: list[tuple[torch.cuda.Event, torch.cuda.Event]] | None = None) -> None:
    """Each repetition's forward on its input regions, its outputs copied into its output regions (current stream),
    the copies between `marks` when given. An output the regions cannot take (another count, shape or dtype) is
    left unwritten: poisoned, so wrong."""
    for rep in range(reps):
        outs = forward(in_slots[rep])
        if marks:
            marks[rep][0].record()
        for got, slot in zip(outs, out_slots[rep]):
            if type(got) is torch.Tensor and got.shape == slot.shape and got.dtype == slot.dtype:  # noqa: E721
                slot.copy_(got)
        if marks:
            marks[rep][1].record()


class Attached:
    """The candidate's side (untrusted, like all of its process): the buffer opened, each block run behind go."""

    def __init__(self, handle: str, layout: Layout):
        self.buffer = cuda_ipc.ImportedBuffer(handle, layout.nbytes)
        self.in_slots, self.out_slots = layout.views(self.buffer.tensor)
        self.go, self.done = self.buffer.ptr, self.buffer.ptr + 128
        self.stream = torch.cuda.Stream()

    def run(self, seq: int, reps: int, forward: Callable[[list[torch.Tensor]], list[torch.Tensor]]
            ) -> tuple[float, float]:
        """One block behind go; done said at its end, whatever happened. Returns its own event time (a diagnostic)
        and the µs its host took to enqueue the block (what the next window's lead must cover)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        with torch.cuda.stream(self.stream):
            cuda_ipc.wait_flag(self.stream, self.go, seq)
            start.record(self.stream)
            try:
                run_into_slots(self.in_slots, self.out_slots, reps, forward)
            finally:
                end.record(self.stream)
                cuda_ipc.write_flag(self.stream, self.done, seq)
        enqueue_us = (time.perf_counter() - t0) * 1e6
        self.stream.synchronize()
        return start.elapsed_time(end), enqueue_us

    def close(self) -> None:
        self.buffer.close()
