"""Observed timing, parent side: the speedup from what the trusted reference process saw, not from what the
candidate's worker says.

Everything in the candidate's process is the candidate's to rewrite, its channel and its timing loop included, so
its reported times can only be a diagnostic. Here the clean reference process keeps the clock
(`eval.worker.observed`): it releases each block's inputs inside a window of its own CUDA events, another process
runs the block behind a GPU-side flag, and the reference process closes the window on that process's done flag and
then checks every element of every output of the block against the reference's outputs for the same inputs. A
candidate that starts early, says done early, or works on another stream shows wrong outputs; one that lies in its
reply changes nothing that is counted.

Both sides are timed the same way. The candidate's blocks run in its worker; the reference's blocks run in the
clean client (`eval.process._reference_process.CleanClient`, a process that never loads candidate code), which loads the
same reference for the evaluation. So each side's block runs in a CUDA context of its own, on memory the reference
process exported, right after a switch between two contexts, and whatever that costs (an H200 ran the same eager
kernels 7-20 % slower there than in the reference process's own context, and a fused Triton kernel more) is paid by
both. A window holds the block plus a handover between the two contexts (about 290 us on an H200, within a few us),
measured in the same run with the clean client's empty windows, so the candidate cannot make it look longer. The
outputs' copies into their regions, which every block makes, are timed in the reference process's own block of the
reference. Per pair of blocks on the same inputs: each side's (window - handover - copies) / reps; the figures are
the medians over blocks, and the speedup is their ratio.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from eval.crossing import protocol as p
from problems import derive_seed

PAIRS = 5  # A B B A pairs of (handover, candidate window, reference block), after one warm-up pair
MAX_REPS = 64
BUFFER_BUDGET_BYTES = 2 << 30  # the exported buffer holds every repetition's inputs and outputs
# A window's GPU lead covers the request's way to the worker and the worker's enqueue of its block: the next lead of a
# side is LEAD_SLACK_US plus LEAD_SHARE times the enqueue its worker last reported. A worker that under-reports only
# starts its own block late (its window grows); one that over-reports lengthens its leads, up to MAX_LEAD_US. (The
# lead was once sized from the request's round trip, which holds the lead itself: it grew 1.5x a window, to 20-50 ms.)
FIRST_LEAD_US = 5000.0
LEAD_SLACK_US = 2000.0
LEAD_SHARE = 1.5
MAX_LEAD_US = 200_000.0
SWITCH_RETRIES = 3  # a window whose outputs' copy was not right behind its END is taken again, this many times


@dataclass
class Observation:
    """What the reference process observed: per block, in ms."""

    reps: int
    handover_ms: list[float] = field(default_factory=list)
    windows_ms: list[float] = field(default_factory=list)  # the candidate's windows
    reference_ms: list[float] = field(default_factory=list)  # the reference's windows, run by the clean client
    copies_ms: list[float] = field(default_factory=list)  # of each own block of the reference, its outputs' copies
    own_ms: list[float] = field(default_factory=list)  # those own blocks, whole (a diagnostic)
    reported_ms: list[float] = field(default_factory=list)  # the candidate's own events per block (diagnostic)
    leads_us: list[float] = field(default_factory=list)  # each candidate window's GPU lead (diagnostic)

    @property
    def handover(self) -> float:
        return statistics.median(self.handover_ms)

    def _per_rep(self, windows: list[float]) -> float:
        """The median over blocks of (window - handover - the paired own block's output copies) / reps."""
        h = self.handover
        return statistics.median(max(w - h - c, 0.0) / self.reps for w, c in zip(windows, self.copies_ms))

    @property
    def candidate_per_rep(self) -> float:
        return self._per_rep(self.windows_ms)

    @property
    def reference_per_rep(self) -> float:
        return self._per_rep(self.reference_ms)

    def summary(self) -> dict[str, float]:
        reported = statistics.median(self.reported_ms) / self.reps if self.reported_ms else float("nan")
        h_spread = max(self.handover_ms) - min(self.handover_ms)
        own = statistics.median((b - c) / self.reps for b, c in zip(self.own_ms, self.copies_ms)) if self.own_ms \
            else float("nan")
        return {"reference_ms": self.reference_per_rep, "candidate_ms": self.candidate_per_rep,
                "reference_own_context_ms": own,
                "speedup": self.reference_per_rep / max(self.candidate_per_rep, 1e-9),
                "handover_us": self.handover * 1000, "handover_spread_us": h_spread * 1000,
                "reps_per_block": float(self.reps), "blocks": float(len(self.windows_ms)),
                "reported_candidate_ms": reported,
                "lead_us": statistics.median(self.leads_us) if self.leads_us else float("nan")}


class ObservedFailure(Exception):
    """The observation failed: the candidate's `incorrect` outputs, `no_done`, `switched` (work after done), `no_time`
    (windows no longer than the handover), or a trusted side's window or a side's request failed (`kind` names the
    side: "candidate", "reference", "handover client")."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind


def reps_per_block(candidate_ms: float, reference_ms: float, rep_bytes: int, block_ms: float) -> int:
    """Repetitions per block: about `block_ms` (`eval.observed_block_ms`) of the faster side's time, within the
    buffer's budget."""
    per_rep = max(min(candidate_ms, reference_ms), 1e-4)
    by_time = int(block_ms / per_rep)
    by_memory = BUFFER_BUDGET_BYTES // max(rep_bytes, 1)
    return max(1, min(MAX_REPS, by_time, by_memory))


class _Session:
    """One evaluation's observed timing: the three processes and the window sequence numbers."""

    def __init__(self, reference: Any, subject: str, candidate: Any, client: Any, timeout_s: float,
                 tolerance: tuple[float, float], grad: bool):
        self.reference, self.subject, self.candidate, self.client = reference, subject, candidate, client
        self.timeout_s, (self.atol, self.rtol), self.grad = timeout_s, tolerance, grad
        self.seq = 0
        self.leads_us: dict[str, float] = {}  # per side, its next window's lead

    def _ask(self, worker: Any, message: p.Request, side: str) -> Any:
        reply, _ = worker.request(message, timeout=self.timeout_s)
        if not reply.ok:
            raise ObservedFailure(side, f"{side}: {message.cmd} failed ({reply.stage}): {reply.error[-400:]}")
        return reply

    def window(self, worker: Any, reps: int, seeds: list[int], side: str, subject: str = "candidate"
               ) -> tuple[float, float]:
        """One window around `worker`'s block of `subject`: (window ms, the worker's own ms). A window whose outputs'
        copy did not follow its END at once is taken again; one that never does is the candidate's doing. A trusted
        side's window that fails is the harness's failure (`kind` its side), never a verdict on the candidate."""
        def kind(failure: str) -> str:
            return failure if side == "candidate" else side

        copies = []
        for _ in range(SWITCH_RETRIES):
            close, own_ms = self._once(worker, reps, seeds, side, subject)
            if close.switched:
                copies.append(f"{close.snap_ms * 1000:.0f}")
                continue
            if close.window_ms < 0:
                raise ObservedFailure(kind("no_done"), f"the {side}'s block never signalled done within "
                                                       f"{self.timeout_s:g} s of its window")
            if close.mismatched:
                raise ObservedFailure(kind("incorrect"),
                                      f"a timed output of the {side}, read by the reference process after the window, "
                                      f"differs from the reference's for the same inputs: {close.detail}")
            return close.window_ms, own_ms
        raise ObservedFailure(kind("switched"),
                              f"in {SWITCH_RETRIES} windows in a row the GPU ran other work between the "
                              f"end of the {side}'s window and the copy of its outputs: work after its "
                              f"done signal (the copy took {', '.join(copies)} us; alone it takes at "
                              f"most {close.snap_limit_ms * 1000:.0f} us)")

    def _once(self, worker: Any, reps: int, seeds: list[int], side: str, subject: str) -> tuple[Any, float]:
        self.seq += 1
        self._ask(self.reference, p.WindowOpen(subject=self.subject, seq=self.seq, seeds=seeds,
                                               lead_us=self.lead_us(side)), "reference")
        closed = False
        try:
            run = self._ask(worker, p.WindowRun(seq=self.seq, reps=reps, grad=self.grad, subject=subject), side)
            enqueue_us = float(run.enqueue_us) if math.isfinite(run.enqueue_us) else MAX_LEAD_US
            self.leads_us[side] = min(MAX_LEAD_US, LEAD_SLACK_US + LEAD_SHARE * max(enqueue_us, 0.0))
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
        return close, run.own_ms

    def lead_us(self, side: str) -> float:
        return self.leads_us.get(side, FIRST_LEAD_US)

    def own_block(self, seeds: list[int]) -> tuple[float, float]:
        reply = self._ask(self.reference, p.OwnBlock(subject=self.subject, seeds=seeds, grad=self.grad), "reference")
        return float(reply.block_ms), float(reply.copies_ms)


def observe(reference: Any, subject: str, candidate: Any, client: Any, *, stage: p.Stage, secret: int, reps: int,
            timeout_s: float, tolerance: tuple[float, float], grad: bool = False) -> Observation:
    """Observed timing of one candidate against its reference (the caller holds the GPU alone). `reference` is the
    evaluation's session in the reference process (its `load`, then `stage`, give the clean client the same
    reference and the layout of its inputs), `candidate` its worker, `client` the clean client: the handover's
    windows and the reference's."""
    setup, _ = reference.request(p.WindowSetup(subject=subject, reps=reps), timeout=timeout_s)
    if not setup.ok:
        raise RuntimeError(f"the reference process could not set up observed timing: {setup.error[-400:]}")
    session = _Session(reference, subject, candidate, client, timeout_s, tolerance, grad)
    obs = Observation(reps)
    try:
        session._ask(client, reference.load, "reference")
        session._ask(client, stage, "reference")
        for worker, side in ((candidate, "candidate"), (client, "handover client")):
            session._ask(worker, p.WindowAttach(handle=setup.handle, layout=setup.layout), side)
        for pair in range(PAIRS + 1):
            seeds = [derive_seed(secret, f"observed:{pair}:{i}") for i in range(reps)]
            order = ("handover", "candidate", "reference", "own") if pair % 2 == 0 else \
                ("own", "reference", "candidate", "handover")
            for part in order:
                if part == "handover":
                    window, _ = session.window(client, 0, [], "handover client")
                    if pair:
                        obs.handover_ms.append(window)
                elif part == "candidate":
                    lead = session.lead_us("candidate")
                    window, own = session.window(candidate, reps, seeds, "candidate")
                    if pair:
                        obs.leads_us.append(lead)
                        obs.windows_ms.append(window)
                        obs.reported_ms.append(own)
                elif part == "reference":
                    window, _ = session.window(client, reps, seeds, "reference", subject=subject)
                    if pair:
                        obs.reference_ms.append(window)
                else:
                    block, copies = session.own_block(seeds)
                    if pair:
                        obs.own_ms.append(block)
                        obs.copies_ms.append(copies)
    finally:
        for worker, end in ((reference, p.WindowEnd()), (candidate, p.WindowEnd()), (client, p.WindowEnd()),
                            (client, p.Unload(subject=subject))):
            try:
                worker.request(end, timeout=timeout_s)
            except Exception:  # noqa: BLE001  a dead worker has nothing left to drop
                pass
    if obs.candidate_per_rep <= 0:
        raise ObservedFailure("no_time", "the candidate's windows took no longer than the handover and the output "
                                         f"copies ({obs.summary()['handover_us']:.1f} us): its work was not inside "
                                         "them")
    return obs
