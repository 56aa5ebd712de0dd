"""No reference block is kept that ran beside another process's GPU work.

Stopping the candidate's processes while the reference is timed (`eval.process._freeze`) does not stop GPU work they
already queued: a kernel, or a chain of them, left running after a request (from a thread, or a side stream past
the worker's last synchronisation) runs on through the reference's block. Without MPS the kernels of different
CUDA contexts never run at once: the GPU takes turns between contexts, so such work slows the reference's kernels
and so raises the candidate's speedup. The same holds for work another worker left behind.

The clean reference process probes the GPU (`eval.worker.idle_probe`: a one-element kernel and a synchronisation,
timed on its host; microseconds on an idle GPU, up to a time slice beside another context's work) and calibrates
the probe on its first use in each evaluation (the lowest median of its calibration rounds). The parent reads
each probe against that calibration (`busy_us`, a pure function) right before and right after every kept
reference block, with the candidate's worker stopped throughout (`Watch.idle`):

- busy before: it waits, polling the probe, until the GPU is idle, then times the block;
- busy after: the block is discarded, and timed again once the GPU is idle (at most `MAX_RUNS` runs);
- still busy after `IDLE_WAIT_S`: the timing stops (`Busy`). Who pays is then settled by ending the candidate's
  worker, whose GPU work ends with its CUDA context (`candidates_work`): the GPU idle within `KILL_GRACE_S`, the
  work was the candidate's, which is rejected; still busy, it was another process's, and the evaluation fails as
  the harness's. Work that comes back in every run of a block (the candidate stopped) fails it as the harness's too.

So an honest candidate is never rejected for another's leftovers, whether they were there before it was first
timed or came later, and work a candidate leaves itself is waited out (it gains nothing) or, past the limit,
rejected.

The kept blocks that met a busy GPU are counted (`Measurement.contended_blocks`). On the CPU there is no probe:
the reference process's answer is empty, which reads as idle, and the parent does not ask it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from eval.crossing import protocol as p

PROBE_ROUNDS = 3  # a reading is its fastest round: a round slowed by the host, or by the GPU's switch back to
# the reference's context after the candidate's block, says nothing of other work
IDLE_CAP_US = 100.0  # the policy reads a slower calibration as this (one taken beside other work is a time slice)
# Busy: the fastest round over BUSY_FACTOR x idle and over idle + BUSY_MARGIN_US. Work that delays the probe by
# less than the margin can take at most that much of a 25 ms block (`measure.BLOCK_MS`): 0.4 %.
BUSY_FACTOR = 3.0
BUSY_MARGIN_US = 100.0
IDLE_WAIT_S = 2.0  # the longest wait for an idle GPU
POLL_S = 0.002  # between probes while waiting
MAX_RUNS = 4  # runs of one block the probe may find the GPU busy after
KILL_GRACE_S = 1.0  # for the GPU to fall idle once the candidate's worker is ended

T = TypeVar("T")


@dataclass(frozen=True)
class Reading:
    """One probe as the reference process reported it: its rounds' host times and its calibration (us)."""

    latencies_us: tuple[float, ...]
    idle_us: float


def busy_us(reading: Reading) -> float:
    """How much longer than on the idle GPU the probe's fastest round took, when that shows another process's work on
    the GPU; 0.0 when it shows none (and on the CPU, which has no probe)."""
    if not reading.latencies_us:
        return 0.0
    idle = min(reading.idle_us, IDLE_CAP_US) if reading.idle_us > 0 else IDLE_CAP_US
    fastest = min(reading.latencies_us)
    return fastest - idle if fastest > max(BUSY_FACTOR * idle, idle + BUSY_MARGIN_US) else 0.0


class Busy(Exception):
    """The GPU was not idle enough to time the reference. `lasting`: it is busy still, so ending the candidate's
    worker tells whose work it is; otherwise the work came back in every run of a block, with the candidate
    stopped."""

    def __init__(self, reason: str, lasting: bool):
        super().__init__(reason)
        self.lasting = lasting


def probing(worker: Any, timeout: float) -> Callable[[bool], Reading]:
    """`probe(calibrate)`: one `p.Probe` of `worker` (the reference process's session), read."""
    def probe(calibrate: bool) -> Reading:
        reply, _ = worker.request(p.Probe(rounds=PROBE_ROUNDS, calibrate=calibrate), timeout=timeout)
        if not reply.ok:
            raise RuntimeError(f"the reference process's GPU-idle probe failed: {reply.error[-400:]}")
        return Reading(tuple(reply.latencies_us), reply.idle_us)
    return probe


class Watch:
    """The GPU-idle probe of one evaluation's reference side (`measure.Side.watch`): `measure` runs each kept
    reference block through `idle`."""

    def __init__(self, probe: Callable[[bool], Reading], wait_s: float = IDLE_WAIT_S, poll_s: float = POLL_S):
        self._probe, self._wait_s, self._poll_s = probe, wait_s, poll_s
        self._calibrated = False

    def read(self) -> Reading:
        """One probe; the first of the evaluation calibrates it."""
        reading = self._probe(not self._calibrated)
        self._calibrated = True
        return reading

    def idle(self, block: Callable[[], T]) -> tuple[T, bool]:
        """`block()` run with the GPU idle before and after it: waits for idle first, runs it again when the GPU was
        busy after; its last run's result, and whether the probe found the GPU busy at all."""
        contended = False
        for _ in range(MAX_RUNS):
            contended |= self.wait_idle()
            result = block()
            after = busy_us(self.read())
            if not after:
                return result, contended
            contended = True
        raise Busy(f"other processes' work ran on the GPU through each of {MAX_RUNS} runs of a reference block (the "
                   f"GPU-idle probe took {after:.0f} us longer than on the idle GPU after the last)", lasting=False)

    def wait_idle(self, limit_s: float | None = None) -> bool:
        """Wait, polling the probe, until the GPU is idle; whether it was busy. Raises `Busy` when it stays busy for
        `limit_s` (default: the watch's `wait_s`)."""
        limit = self._wait_s if limit_s is None else limit_s
        started = time.perf_counter()
        delay = busy_us(self.read())
        if not delay:
            return False
        while delay:
            if time.perf_counter() - started >= limit:
                raise Busy(f"the GPU stayed busy with other processes' work for {limit:g} s (the GPU-idle probe took "
                           f"{delay:.0f} us longer than on the idle GPU)", lasting=True)
            time.sleep(self._poll_s)
            delay = busy_us(self.read())
        return True


def candidates_work(exc: Busy, candidate: Any, watch: Watch) -> bool:
    """Whether the work that kept the GPU busy (`exc`) was the candidate's. Its worker is ended, and its GPU work with
    its CUDA context: a GPU idle within `KILL_GRACE_S` then was busy with the candidate's work; one still busy, with
    another process's. Work that came back in every run of a block, the candidate stopped, is never charged to it."""
    candidate.kill()
    if not exc.lasting:
        return False
    try:
        watch.wait_idle(KILL_GRACE_S)
    except Busy:
        return False
    return True
