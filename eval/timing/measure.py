"""Timing, parent side: the plan, the blocks, the statistics and the speedup.

The reference is timed in its own clean process (`eval.process._reference_process`), never in one that has
imported candidate code, and the candidate in its own fresh worker. Both run the same native loop
(`eval.worker.timing`). This module alone decides how: it alternates blocks of repetitions between
the two processes (A B B A at block level, which cancels drift), gives repetition r the same inputs
on both sides, keeps each timed output's capture, and computes every statistic from the raw event times. What
it measured is judged by `eval.timing.claim_bounds`: the wall bound, the loop's GPU bound, concentration, and each
timed output's capture against the reference's for the same repetition.

One reference timing may serve several candidates of the same problem (`time_group`): the blocks then run in
a palindrome, R C1 .. Ck Ck .. C1 R, and each candidate gets the measurement it would have got alone (the
reference's blocks of its rounds, its own blocks, the reference's captures under its own key), so every bound
and check judges it as before. The reference's GPU time is then spent once for k candidates.

The caller holds the GPU exclusively while a timing runs (`eval.process.pool.GpuGate`).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, TypeVar

import torch

from eval.timing import _gpu_idle as gpu_idle
from eval.crossing import protocol as p
from eval.process import _affinity as affinity
from eval.process import _freeze as freeze
from problems import derive_seed

BLOCK_MS = 25.0  # a block of repetitions lasts about this long (more repetitions for short calls)
MAX_BLOCK_REPS = 64
PRIMING_REP = -2_000_000  # repetition indices of the block that primes fresh draws (never a timed repetition's)
T = TypeVar("T")


@dataclass
class TimingRule:
    """How both sides are timed (`EvalConfig.timing_rule()`). Only the parent plans with it: a worker is told to run
    blocks of repetitions (`protocol.TimeBlock`), never the rule, so nothing of the plan is the worker's to change.

    method "adaptive": blocks of repetitions alternate between the two processes (A B B A) until the
    relative standard error of both medians is under `target_rel_stderr` or `budget_s` is spent, with
    `min_reps`..`max_reps` repetitions per side. method "fixed" is KernelBench's timer (its
    `time_execution_with_cuda_event`): the candidate's process, then the reference's, each `warmup_calls` calls,
    one more that is dropped, then `reps` calls, each synchronised, with no GPU lead (KernelBench's L2 write before
    the start event is its only lead), the candidate with autograd on as KernelBench's eval times it. `flush`
    writes `flush_bytes` (0: twice the L2) before every call; `check_outputs` captures every timed output for
    the parent to check.
    """

    method: str = "adaptive"
    min_reps: int = 20
    max_reps: int = 1000
    target_rel_stderr: float = 0.01
    budget_s: float = 6.0
    warmup_ms: float = 25.0
    flush: bool = True
    flush_bytes: int = 0
    reps: int = 100
    warmup_calls: int = 3
    check_outputs: bool = True
    statistic: str = "median"


@dataclass
class Side:
    """One side of a timing: a process and the subject it calls there. `key` re-keys the process's captures (sent
    to the trusted reference process only; a candidate's worker got its key before its code was imported). `hold`
    is a worker kept stopped while this side is timed (`eval.process._freeze`): the candidate's, for the reference's
    side; in a window of several candidates every other candidate's worker is held too (`time_group`). `watch` (the
    reference's side, on a GPU) keeps each kept block to an idle GPU (`eval.timing._gpu_idle`)."""

    name: str
    worker: Any  # WorkerProcess, or a reference `Session` (both have `timed_request`)
    subject: str
    key: int = 0
    hold: Any = None
    watch: gpu_idle.Watch | None = None


@dataclass
class Block:
    first_rep: int
    reps: int
    wall_ms: float
    event_ms: float
    median_ms: float = 0.0  # the block's median event time
    # the GPU time of the loop's own work over the block, as the worker's events measured it (`protocol.OUTSIDE_PARTS`:
    # lead-in, capture, between); empty off a GPU. A candidate's are its own report: bounded (`claim_bounds.LOOP_GPU_FLOOR_MS`),
    # never trusted to explain time
    outside_ms: tuple[float, ...] = ()

    @property
    def excess_ms(self) -> float:
        """Wall time per repetition that no event accounts for."""
        return (self.wall_ms - self.event_ms) / max(self.reps, 1)


@dataclass
class Measurement:
    """Raw samples and observations of one timing, per side name."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    blocks: dict[str, list[Block]] = field(default_factory=dict)
    captures: dict[str, dict[int, torch.Tensor]] = field(default_factory=dict)  # rep -> [leaves, samples + extra]
    leaves: dict[str, list[list[Any]]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    fresh_inputs: bool = False
    timing_mode: str = "eager"
    graph_note: str = ""
    pinned_threads: int = 0  # the most threads of one side run on the timing core in a block (`eval.process._affinity`)
    unheld_blocks: int = 0  # blocks whose held workers were not all seen fully stopped through (`eval.process._freeze`)
    # kept blocks a side's `watch` found the GPU busy before or after (`eval.timing._gpu_idle`)
    contended_blocks: int = 0
    shared_with: int = 1  # candidates whose timings the reference's blocks served in this window, this one included
    failure: Exception | None = None  # why this candidate's timing ended early (`time_pair` raises it)

    def summary(self, name: str) -> dict[str, float]:
        return summarize(self.samples[name])


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


class BlockFailed(Exception):
    """A side's block failed (its forward raised, or it ran out of memory): the reply says how."""

    def __init__(self, side: str, reply: p.Reply):
        super().__init__(reply.error)
        self.side, self.reply = side, reply


class Forged(Exception):
    """A worker's reply that cannot be true (a candidate's worker is then judged on it)."""

    def __init__(self, side: str, reason: str):
        super().__init__(reason)
        self.side = side


class _Violated(Exception):
    """A block found violations: the timing of the side(s) it concerns stops there, with `Measurement.violations`
    set."""

    def __init__(self, violations: list[str]):
        super().__init__("; ".join(violations))
        self.violations = violations


class CaptureFailed(Exception):
    """A side's forward could not be captured in a CUDA graph (its process may be unusable now)."""

    def __init__(self, side: str, note: str):
        super().__init__(note)
        self.side, self.note = side, note


@dataclass
class _Seen:
    """A kept block, checked here: its repetitions' times, captures (a row each) and output leaves, its wall time."""

    first_rep: int
    times: list[float]
    rows: torch.Tensor | None
    leaves: list[list[Any]]
    wall_ms: float
    outside_ms: tuple[float, ...] = ()


def _block(side: Side, reps: int, first_rep: int, *, notes: list[Measurement], holds: list[Any], nonce: int,
           flush: bool, flush_bytes: int, sync_each: bool, capture: bool, graphs: bool, timeout: float,
           keep: bool = True, lead: bool = True, grad: bool = False, draw: bool = False,
           core: int | None = None) -> _Seen | None:
    """Run one block on one side with `holds` held still, observe its wall time here, and check what it reported;
    how it ran is noted in each of `notes`. Returns the kept block (None when not `keep`).

    With a `nonce`, each kept repetition gets fresh inputs from a seed derived here from the nonce, which never
    leaves this process: a worker learns a repetition's seed only in the request that times it, and draws its
    inputs inside that request's wall time (work on them ahead of the timed call is wall time too). `draw` also
    draws fresh inputs for a block that is not kept."""
    seeds = [fresh_seed(nonce, first_rep + i) for i in range(reps)] if nonce and (keep or draw) else []
    msg = p.TimeBlock(subject=side.subject, reps=reps, first_rep=first_rep, flush=flush, flush_bytes=flush_bytes,
                      lead=lead, grad=grad, sync_each=sync_each, capture=capture, graphs=graphs, key=side.key,
                      seeds=seeds)

    def timed() -> tuple[p.TimeBlockReply, list[torch.Tensor], float]:
        return side.worker.timed_request(msg, timeout=timeout, device=torch.device("cpu"))

    # the other sides held still and this one pinned, both outside the wall time (and the GPU idle around it)
    with freeze.held(*holds) as still, affinity.pinned([getattr(side.worker, "pid", None)], core) as pinned:
        (reply, tensors, wall_ms), contended = side.watch.idle(timed) if side.watch and keep else (timed(), False)
    for meas in notes:
        meas.pinned_threads = max(meas.pinned_threads, pinned)
        meas.unheld_blocks += not still
        meas.contended_blocks += contended
    if not reply.ok:
        raise BlockFailed(side.name, reply)
    if reply.timing_mode == "capture_failed":
        raise CaptureFailed(side.name, reply.graph_note)
    for meas in notes:
        meas.timing_mode, meas.fresh_inputs = reply.timing_mode, reply.fresh_inputs
    if reply.violations:  # a violation may end a block early: the timing stops here and the caller rejects
        raise _Violated([f"{side.name}: {v}" for v in reply.violations])
    if not keep:
        return None
    times = [float(t) for t in reply.times_ms]
    if len(times) != reps or not all(math.isfinite(t) and t >= 0 for t in times):
        raise Forged(side.name, f"the {side.name}'s block reported {len(times)} valid times for {reps} repetitions")
    outside = tuple(float(t) for t in reply.outside_ms)
    if outside and (len(outside) != len(p.OUTSIDE_PARTS) or not all(math.isfinite(t) and t >= 0 for t in outside)):
        raise Forged(side.name, f"the {side.name}'s block reported its loop's own GPU time as {list(outside)}")
    rows = None
    if capture:
        rows = tensors[0] if tensors else torch.empty(0)
        if rows.dim() != 3 or rows.shape[0] != reps or rows.dtype != torch.float64:
            raise Forged(side.name, f"the {side.name}'s block returned captures shaped {list(rows.shape)} for {reps} repetitions")
    return _Seen(first_rep, times, rows, reply.leaves, wall_ms, outside)


def _keep_times(meas: Measurement, name: str, seen: _Seen) -> None:
    meas.samples.setdefault(name, []).extend(seen.times)
    meas.blocks.setdefault(name, []).append(Block(seen.first_rep, len(seen.times), seen.wall_ms, sum(seen.times),
                                                  statistics.median(seen.times), seen.outside_ms))


def _keep_captures(meas: Measurement, name: str, seen: _Seen) -> None:
    if seen.rows is None:
        return
    for i in range(len(seen.times)):
        meas.captures.setdefault(name, {})[seen.first_rep + i] = seen.rows[i]
    known = meas.leaves.setdefault(name, seen.leaves)
    if known != seen.leaves:
        meas.violations.append(f"{name}: outputs changed between blocks ({seen.leaves} after {known})")


def fresh_seed(nonce: int, rep: int) -> int:
    """The seed of timed repetition `rep`'s fresh inputs (the same on every side of a window)."""
    return derive_seed(nonce, f"rep{rep}")


def time_pair(reference: Side, candidate: Side, rule: TimingRule, *, nonce: int, graphs: bool,
              timeout: float, max_block_reps: int = MAX_BLOCK_REPS, min_pairs: int = 2,
              core: int | None = None) -> Measurement:
    """Time both sides by `rule` (`time_group` with one candidate); raises `BlockFailed` (a side's forward failed),
    `CaptureFailed`, `Forged`, or what a worker's request raised."""
    meas, = time_group([(reference, candidate)], rule, nonce=nonce, graphs=graphs, timeout=timeout,
                       max_block_reps=max_block_reps, min_pairs=min_pairs, core=core)
    if meas.failure is not None:
        raise meas.failure
    return meas


def time_group(pairs: list[tuple[Side, Side]], rule: TimingRule, *, nonce: int, graphs: bool, timeout: float,
               max_block_reps: int = MAX_BLOCK_REPS, min_pairs: int = 2, core: int | None = None
               ) -> list[Measurement]:
    """Time K (reference, candidate) pairs in one window, the first pair's reference timed once for all; one
    `Measurement` per pair, in order, whose failure (`Measurement.failure`) or violations concern that pair alone.

    Every pair's reference must compute the same function (same problem, sizes, weights): the caller's promise.
    Each candidate's measurement is what `time_pair` would give it alone: the shared reference's blocks and
    samples of the rounds it took part in, its own blocks, and captures of the reference's output under its own
    worker's key for each of its repetitions (from the shared block where that was keyed for it, else from an
    untimed block of its own pair's reference on the same inputs).

    With a `nonce`, every timed repetition gets fresh inputs, drawn in its block (at most `max_block_reps`
    repetitions' inputs fit the device at once); repetition r gets the same seed on every side, so each
    candidate's captures are compared with the reference's for the same inputs. Sharing a window's seeds between
    candidates is safe: each worker learns a repetition's seed only in the request that times it, and fresh
    sandboxed workers cannot talk to each other, so no candidate learns a seed ahead of its own block. With a
    `core`, each side runs its blocks on it (`eval.process._affinity`). The fixed method times one pair only."""
    metas = [Measurement(shared_with=len(pairs)) for _ in pairs]
    common = dict(nonce=nonce, flush=rule.flush, flush_bytes=rule.flush_bytes, graphs=graphs, timeout=timeout,
                  core=core)
    if rule.method == "fixed":
        if len(pairs) != 1:
            raise ValueError("the fixed method times one candidate at a time")
        try:
            _fixed(*pairs[0], rule, metas[0], common)
        except Exception as exc:  # noqa: BLE001  the pair's outcome: `time_pair` raises it
            _stop(metas[0], exc)
        return metas
    _Window(pairs, rule, metas, common, most=max(2, max_block_reps), min_pairs=min_pairs).run()
    return metas


def _stop(meas: Measurement, exc: Exception) -> None:
    """Why a timing stopped early: violations, or the failure `time_pair` raises."""
    if isinstance(exc, _Violated):
        meas.violations += exc.violations
    else:
        meas.failure = exc


def _fixed(reference: Side, candidate: Side, rule: TimingRule, meas: Measurement, common: dict[str, Any]) -> None:
    """KernelBench's fixed count, one side after the other, in KernelBench's order (candidate first)."""
    for side in (candidate, reference):
        kb = dict(sync_each=True, lead=False, grad=side is candidate, notes=[meas], holds=_holds(side, [candidate]),
                  **common)
        _block(side, max(1, rule.warmup_calls), -rule.warmup_calls - 2, capture=False, keep=False, **kb)
        _block(side, 1, -1, capture=False, keep=False, **kb)  # KernelBench drops its first timed call
        seen = _block(side, rule.reps, 0, capture=rule.check_outputs, **kb)
        assert seen is not None
        _keep_times(meas, side.name, seen)
        _keep_captures(meas, side.name, seen)


def _holds(side: Side, candidates: list[Side]) -> list[Any]:
    """What is held still while `side` runs: its own `hold`, and every candidate's worker but its own."""
    held = [side.hold] + [c.worker for c in candidates if c.worker is not side.worker]
    return list({id(w): w for w in held if w is not None}.values())


class _Window:
    """One adaptive timing window (`time_group`): rounds of one block per side, in a palindrome order
    (R C1 .. Ck, then Ck .. C1 R), so linear drift cancels for every side (each side's mean time in a pair of
    rounds is the same, whatever the blocks' lengths). A candidate leaves after a round once it and the reference
    are settled (or its budget is spent), or at once when one of its blocks fails or finds a violation."""

    def __init__(self, pairs: list[tuple[Side, Side]], rule: TimingRule, metas: list[Measurement],
                 common: dict[str, Any], most: int, min_pairs: int):
        self.pairs, self.rule, self.metas, self.common = pairs, rule, metas, common
        self.most, self.min_pairs = most, min_pairs
        self.reference = pairs[0][0]
        self.candidates = [c for _, c in pairs]
        self.live = list(range(len(pairs)))
        self.spent = [0.0] * len(pairs)  # seconds of each candidate's timed blocks
        self.reference_spent = 0.0

    def run(self) -> None:
        try:
            per_rep = [self._warm_up(self.reference, self._live_metas())]
        except Exception as exc:  # noqa: BLE001  the shared reference failed: every candidate's timing stops
            return self._stop_all(exc)
        for i in list(self.live):
            warm = self._for(i, lambda i=i: self._warm_up(self.candidates[i], [self.metas[i]]))
            if warm is not None:
                per_rep.append(warm)
        reps = max(2, min(self.most, MAX_BLOCK_REPS, int(BLOCK_MS / max(max(per_rep), 1e-3))))
        if self.common["nonce"]:  # one block of fresh draws per side, not kept: the first draws of a size grow the
            try:  # caching allocator (cudaMalloc), which put 1-3 ms a repetition into a wall
                self._untimed_draws(self.reference, reps, self._live_metas())
            except Exception as exc:  # noqa: BLE001
                return self._stop_all(exc)
            for i in list(self.live):
                self._for(i, lambda i=i: self._untimed_draws(self.candidates[i], reps, [self.metas[i]]))
        first, rounds = 0, 0
        while self.live:
            forward = rounds % 2 == 0
            for i in ([None] + self.live if forward else self.live[::-1] + [None]):
                if i is None:
                    if not self._reference_block(reps, first, forward):
                        return None
                elif i in self.live:
                    self._for(i, lambda i=i: self._candidate_block(i, reps, first))
            first += reps
            rounds += 1
            if first >= self.rule.max_reps:
                break
            if first >= self.rule.min_reps and rounds >= self.min_pairs:
                self.live = [i for i in self.live if not self._done(i)]
        return None

    def _done(self, i: int) -> bool:
        """Whether candidate i's timing is over: both medians settled, or its budget spent."""
        meas, (reference, candidate) = self.metas[i], self.pairs[i]
        settled = all(meas.summary(s.name)["rel_stderr"] < self.rule.target_rel_stderr for s in (reference, candidate))
        return settled or self.reference_spent + self.spent[i] > self.rule.budget_s

    def _live_metas(self) -> list[Measurement]:
        return [self.metas[i] for i in self.live]

    def _for(self, i: int, run: Callable[[], T]) -> T | None:
        """run() on candidate i's behalf: what it raises stops candidate i's timing alone."""
        try:
            return run()
        except Exception as exc:  # noqa: BLE001  the candidate's outcome, judged by its own evaluation
            _stop(self.metas[i], exc)
            self.live.remove(i)
            return None

    def _stop_all(self, exc: Exception) -> None:
        for meas in self._live_metas():
            _stop(meas, exc)
        self.live = []

    def _warm_up(self, side: Side, notes: list[Measurement]) -> float:
        """Warm a side up for `rule.warmup_ms` (at least 3 calls, captures off); returns its wall time per
        repetition."""
        reps, spent, first = 3, 0.0, -1_000_000
        while True:
            t0 = time.perf_counter()
            _block(side, reps, first, notes=notes, holds=_holds(side, self.candidates), sync_each=False,
                   capture=False, keep=False, **self.common)
            wall = (time.perf_counter() - t0) * 1000.0
            spent += wall
            first += reps
            per_rep = wall / reps
            if spent >= self.rule.warmup_ms or reps >= 1000:
                return per_rep
            reps = min(1000, max(1, int((self.rule.warmup_ms - spent) / max(per_rep, 1e-3)) + 1))

    def _untimed_draws(self, side: Side, reps: int, notes: list[Measurement]) -> None:
        _block(side, reps, PRIMING_REP, notes=notes, holds=_holds(side, self.candidates), sync_each=False,
               capture=False, keep=False, draw=True, **self.common)

    def _reference_block(self, reps: int, first: int, forward: bool) -> bool:
        """The shared reference's timed block, kept for every live candidate (its captures, keyed for the first
        pair, for that candidate); each other live candidate's reference captures come from an untimed block of
        its own reference, on the same inputs, before the timed block in a forward round and after it in a
        backward one (so the palindrome holds in time too). False when the window is over."""
        if forward:
            self._capture_blocks(reps, first)
        t0 = time.perf_counter()
        try:
            seen = _block(self.reference, reps, first, notes=self._live_metas(),
                          holds=_holds(self.reference, self.candidates), sync_each=False,
                          capture=self.rule.check_outputs, **self.common)
        except Exception as exc:  # noqa: BLE001  the shared reference failed: every candidate's timing stops
            self._stop_all(exc)
            return False
        self.reference_spent += time.perf_counter() - t0
        assert seen is not None
        for i in self.live:
            _keep_times(self.metas[i], self.pairs[i][0].name, seen)
        if 0 in self.live:
            _keep_captures(self.metas[0], self.reference.name, seen)
        if not forward:
            self._capture_blocks(reps, first)
        return bool(self.live)

    def _capture_blocks(self, reps: int, first: int) -> None:
        if not self.rule.check_outputs:
            return
        for i in [i for i in self.live if i != 0]:
            self._for(i, lambda i=i: self._capture_block(i, reps, first))

    def _capture_block(self, i: int, reps: int, first: int) -> None:
        """Candidate i's reference captures of repetitions first.. under its key: untimed (no flush, no lead, and no
        GPU-idle probe around it, which only a timed block needs)."""
        reference = replace(self.pairs[i][0], watch=None)
        seen = _block(reference, reps, first, notes=[], holds=[], sync_each=False, capture=True,
                      **{**self.common, "flush": False}, lead=False)
        assert seen is not None
        _keep_captures(self.metas[i], reference.name, seen)

    def _candidate_block(self, i: int, reps: int, first: int) -> None:
        candidate, meas = self.candidates[i], self.metas[i]
        t0 = time.perf_counter()
        seen = _block(candidate, reps, first, notes=[meas], holds=_holds(candidate, self.candidates),
                      sync_each=False, capture=self.rule.check_outputs, **self.common)
        self.spent[i] += time.perf_counter() - t0
        assert seen is not None
        _keep_times(meas, candidate.name, seen)
        _keep_captures(meas, candidate.name, seen)


def back_to_back(candidate: Side, reference: Side, calls: int, batches: int, timeout: float,
                 settled: Callable[[list[dict[str, float]]], bool] | None = None
                 ) -> tuple[p.BackToBackReply, list[dict[str, float]], list[dict[str, float]]]:
    """Back-to-back batches of both sides, interleaved A B B A between the two processes, the candidate first; the
    candidate's first batch also compares its output right after return with the output after a full
    synchronisation. `settled(candidate's batches so far)` true ends the batches there: the caller's verdict can no
    longer change (`timing_steps.settled_clean`)."""
    sides: dict[str, list[dict[str, float]]] = {"candidate": [], "reference": []}
    first: p.BackToBackReply | None = None
    for k in range(batches):
        order = (candidate, reference) if k % 2 == 0 else (reference, candidate)
        for side in order:
            msg = p.BackToBack(subject=side.subject, calls=calls, batches=1,
                               check_stream=side is candidate and first is None)
            with freeze.held(side.hold):
                reply, _ = side.worker.request(msg, timeout=timeout)
            if not reply.ok:
                raise BlockFailed(side.name, reply)
            if side is candidate and first is None:
                first = reply
            sides[side.name].extend(reply.batches)
            if side is candidate and settled is not None and settled(sides["candidate"]):
                return first, sides["candidate"], sides["reference"]
    assert first is not None
    return first, sides["candidate"], sides["reference"]
