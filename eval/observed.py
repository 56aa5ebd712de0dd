"""Observed timing, parent side: the speedup from what the trusted reference process saw, not from what the
candidate's worker says.

Everything in the candidate's process is the candidate's to rewrite, its channel and its timing loop included, so
its reported times can only be a diagnostic. Here the clean reference process keeps the clock
(`eval.worker.observed`): it releases each block's inputs inside a window of its own CUDA events, the candidate's
worker runs the block behind a GPU-side flag, and the reference process closes the window on the candidate's done
flag and then checks every element of every output of the block against the reference's outputs for the same
inputs. A candidate that starts early, says done early, or works on another stream shows wrong outputs; one that
lies in its reply changes nothing that is counted.

A window holds the candidate's block plus a handover between two CUDA contexts (about 315 us on an H200, within a
few us). The handover is measured in the same run, alternating with the candidate's windows, with a process that
never loaded candidate code (`eval._reference_process.CleanClient`), so the candidate cannot make it look longer.
The reference's blocks run the same sequence (inputs, flush, its forward, outputs copied into the same regions) in
its own process, and time those copies apart. Per pair of blocks on the same inputs: the candidate's
(window - handover - copies) / reps against the reference's (block - copies) / reps; the figures are the medians
over blocks, and the speedup is their ratio.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from eval import protocol as p
from problems import derive_seed

PAIRS = 5  # A B B A pairs of (handover, candidate window, reference block), after one warm-up pair
# A block's repetitions add up to about this much of the faster side's time: short enough that the GPU does not
# switch to the reference process's context (its stream waits on done) in the middle of the candidate's block. With
# 4 ms blocks an honest add kernel on an H200 ran 40% slower in its window than in its own events' loop, and its own
# events said the same: the contexts took turns; 130 us blocks showed none of it (2026-12-02).
BLOCK_MS = 0.5
MAX_REPS = 64
BUFFER_BUDGET_BYTES = 2 << 30  # the exported buffer holds every repetition's inputs and outputs
FIRST_LEAD_US = 5000.0
LEAD_SHARE = 1.5  # the next lead is this many times the last block's round trip (the candidate's enqueue inside it)
MAX_LEAD_US = 200_000.0
SWITCH_RETRIES = 3  # a window whose outputs' copy was not right behind its END is taken again, this many times


@dataclass
class Observation:
    """What the reference process observed: per block, in ms."""

    reps: int
    handover_ms: list[float] = field(default_factory=list)
    windows_ms: list[float] = field(default_factory=list)
    reference_ms: list[float] = field(default_factory=list)
    copies_ms: list[float] = field(default_factory=list)  # of each reference block, its outputs' copies
    reported_ms: list[float] = field(default_factory=list)  # the candidate's own events per block (diagnostic)
    leads_us: list[float] = field(default_factory=list)  # each candidate window's GPU lead (diagnostic)

    @property
    def handover(self) -> float:
        return statistics.median(self.handover_ms)

    @property
    def candidate_per_rep(self) -> float:
        """The candidate's time per repetition: the median over blocks of (window - handover - the paired reference
        block's output copies) / reps."""
        h = self.handover
        return statistics.median(max(w - h - c, 0.0) / self.reps for w, c in zip(self.windows_ms, self.copies_ms))

    @property
    def reference_per_rep(self) -> float:
        return statistics.median((r - c) / self.reps for r, c in zip(self.reference_ms, self.copies_ms))

    def summary(self) -> dict[str, float]:
        reported = statistics.median(self.reported_ms) / self.reps if self.reported_ms else float("nan")
        h_spread = max(self.handover_ms) - min(self.handover_ms)
        return {"reference_ms": self.reference_per_rep, "candidate_ms": self.candidate_per_rep,
                "speedup": self.reference_per_rep / max(self.candidate_per_rep, 1e-9),
                "handover_us": self.handover * 1000, "handover_spread_us": h_spread * 1000,
                "reps_per_block": float(self.reps), "blocks": float(len(self.windows_ms)),
                "reported_candidate_ms": reported,
                "lead_us": statistics.median(self.leads_us) if self.leads_us else float("nan")}


class ObservedFailure(Exception):
    """The observation failed: `incorrect` outputs, `no_done`, `switched` (work after done), `no_time` (windows no
    longer than the handover), or a side's request failed (`kind` names the side)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind


def reps_per_block(candidate_ms: float, reference_ms: float, rep_bytes: int) -> int:
    """Repetitions per block: about BLOCK_MS of the faster side's time, within the buffer's budget."""
    per_rep = max(min(candidate_ms, reference_ms), 1e-4)
    by_time = int(BLOCK_MS / per_rep)
    by_memory = BUFFER_BUDGET_BYTES // max(rep_bytes, 1)
    return max(1, min(MAX_REPS, by_time, by_memory))


class _Session:
    """One evaluation's observed timing: the three processes and the window sequence numbers."""

    def __init__(self, reference: Any, subject: str, candidate: Any, client: Any, timeout_s: float,
                 tolerance: tuple[float, float], grad: bool):
        self.reference, self.subject, self.candidate, self.client = reference, subject, candidate, client
        self.timeout_s, (self.atol, self.rtol), self.grad = timeout_s, tolerance, grad
        self.seq = 0
        self.lead_us = FIRST_LEAD_US

    def _ask(self, worker: Any, message: p.Request, side: str) -> Any:
        reply, _ = worker.request(message, timeout=self.timeout_s)
        if not reply.ok:
            raise ObservedFailure(side, f"{side}: {message.cmd} failed ({reply.stage}): {reply.error[-400:]}")
        return reply

    def window(self, worker: Any, reps: int, seeds: list[int], side: str) -> tuple[float, float]:
        """One window around `worker`'s block: (window ms, the worker's own ms). A window whose outputs' copy did
        not follow its END at once is taken again; one that never does is the candidate's doing."""
        copies = []
        for _ in range(SWITCH_RETRIES):
            close, own_ms = self._once(worker, reps, seeds, side)
            if close.switched:
                copies.append(f"{close.snap_ms * 1000:.0f}")
                continue
            if close.window_ms < 0:
                raise ObservedFailure("no_done", f"the {side}'s block never signalled done within "
                                                 f"{self.timeout_s:g} s of its window")
            if close.mismatched:
                raise ObservedFailure("incorrect", "a timed output, read by the reference process after the window, "
                                                   f"differs from the reference's for the same inputs: {close.detail}")
            return close.window_ms, own_ms
        raise ObservedFailure("switched", f"in {SWITCH_RETRIES} windows in a row the GPU ran other work between the "
                                          f"end of the {side}'s window and the copy of its outputs: work after its "
                                          f"done signal (the copy took {', '.join(copies)} us; alone it takes at "
                                          f"most {close.snap_limit_ms * 1000:.0f} us)")

    def _once(self, worker: Any, reps: int, seeds: list[int], side: str) -> tuple[Any, float]:
        self.seq += 1
        self._ask(self.reference, p.WindowOpen(subject=self.subject, seq=self.seq, seeds=seeds, lead_us=self.lead_us),
                  "reference")
        closed = False
        try:
            t0 = time.perf_counter()
            run = self._ask(worker, p.WindowRun(seq=self.seq, reps=reps, grad=self.grad), side)
            round_trip_us = (time.perf_counter() - t0) * 1e6
            close = self._ask(self.reference, p.WindowClose(subject=self.subject, seq=self.seq,
                                                            timeout_s=self.timeout_s, atol=self.atol, rtol=self.rtol),
                              "reference")
            closed = True
        finally:
            if not closed:  # the reference process's stream waits on done: release it before anything else
                try:
                    self.reference.request(p.WindowClose(subject=self.subject, seq=self.seq, timeout_s=0.5),
                                           timeout=self.timeout_s)
                except Exception:  # noqa: BLE001  the first failure is the one reported
                    pass
        if side == "candidate":
            self.lead_us = min(MAX_LEAD_US, max(500.0, LEAD_SHARE * round_trip_us))
        return close, run.own_ms

    def own_block(self, seeds: list[int]) -> tuple[float, float]:
        reply = self._ask(self.reference, p.OwnBlock(subject=self.subject, seeds=seeds, grad=self.grad), "reference")
        return float(reply.block_ms), float(reply.copies_ms)


def observe(reference: Any, subject: str, candidate: Any, client: Any, *, secret: int, reps: int,
            timeout_s: float, tolerance: tuple[float, float], grad: bool = False) -> Observation:
    """Observed timing of one candidate against its reference (the caller holds the GPU alone). `reference` is the
    evaluation's session in the reference process, `candidate` its worker, `client` the clean handover client."""
    setup, _ = reference.request(p.WindowSetup(subject=subject, reps=reps), timeout=timeout_s)
    if not setup.ok:
        raise RuntimeError(f"the reference process could not set up observed timing: {setup.error[-400:]}")
    session = _Session(reference, subject, candidate, client, timeout_s, tolerance, grad)
    obs = Observation(reps)
    try:
        for worker, side in ((candidate, "candidate"), (client, "handover client")):
            session._ask(worker, p.WindowAttach(handle=setup.handle, layout=setup.layout), side)
        for pair in range(PAIRS + 1):
            seeds = [derive_seed(secret, f"observed:{pair}:{i}") for i in range(reps)]
            order = ("handover", "candidate", "reference") if pair % 2 == 0 else ("reference", "candidate", "handover")
            for part in order:
                if part == "handover":
                    window, _ = session.window(client, 0, [], "handover client")
                    if pair:
                        obs.handover_ms.append(window)
                elif part == "candidate":
                    lead = session.lead_us
                    window, own = session.window(candidate, reps, seeds, "candidate")
                    if pair:
                        obs.leads_us.append(lead)
                        obs.windows_ms.append(window)
                        obs.reported_ms.append(own)
                else:
                    block, copies = session.own_block(seeds)
                    if pair:
                        obs.reference_ms.append(block)
                        obs.copies_ms.append(copies)
    finally:
        for worker in (reference, candidate, client):
            try:
                worker.request(p.WindowEnd(), timeout=timeout_s)
            except Exception:  # noqa: BLE001  a dead worker has nothing left to drop
                pass
    if obs.candidate_per_rep <= 0:
        raise ObservedFailure("no_time", "the candidate's windows took no longer than the handover and the output "
                                         f"copies ({obs.summary()['handover_us']:.1f} us): its work was not inside them")
    return obs
