"""The check pipeline: plain functions, run in order on one evaluation's `Context`.

load -> correctness trials -> stage timing inputs -> own kernels -> hidden work -> time ->
timed outputs -> speed of light -> replies in order. Each step either returns (the candidate passed it) or
raises `Verdict`. Each declares the access to its GPU it needs (`GpuGate`): consecutive
steps with the same access share one hold, and only the steps whose numbers depend on
having the GPU alone (kernel shares, back-to-back wall time, timing) hold it exclusively.
The timing step may time several candidates of one problem against one timing of the reference
(`eval._windows`, `measure.time_group`); each is then judged on its own measurement, as alone.
The correctness trials hold it shared one trial at a time ("per_trial"): a timing waiting for
the GPU then waits for the trial in flight, not for every trial of every other candidate.

The rules come from `EvalConfig`: the defaults are the strict ones; a preset such as
`eval=kernelbench` changes the tolerance, precision, seeding, hidden shapes, own-kernel
policy, the two integrity checks a preset may drop (hidden work, timed outputs) and the timing
method. Everything a strict check adds beyond those stays on under every preset, since it is
the sandbox itself (static refusals, the tamper snapshot, output type and aliasing checks,
poisoned allocations, unchanged inputs).
"""

from __future__ import annotations

import random
import re
import secrets
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, NoReturn

import torch

from eval import protocol as p
from eval import _affinity as affinity, _freeze as freeze, _gpu_idle as gpu_idle, measure, observed, static_checks
from eval.backends import TRITON_DIALECTS  # issue 56
from eval.builds import Build
from eval._kernel_symbols import kernels_under
from eval.config import EvalConfig
from eval.problem_check import broken
from eval.pool import Lease
from eval._windows import Seat
from eval._reference_process import Session
from eval._reference import Reference, encode_args, encode_trial_args, problem_size, traced_cost, wide_check_budget
from eval.result import UNFINISHED, EvalResult, KernelShare, Status, Timing
from eval.roofline import IMPLAUSIBLE_BELOW_FLOOR, REJECT_BELOW_BYTE_FLOOR, Ceilings
from problems import (
    DISTRIBUTIONS,
    HEADROOM,
    LAYOUTS,
    REGIMES,
    VALUE_SHAPES,
    Mismatch,
    Problem,
    compare,
    compare_structure,
    derive_seed,
    derived_workloads,
    draw_inputs,
    float64_miss,
    input_fingerprint,
    input_only_constants,
    kernelbench_trial_seeds,
    load_source,
    magnitude,
    precision,
    public_source,
    scaled_atol,
    scaled_floats,
    sizes_varied_by_extras,
    transformed,
)

ERROR_CHARS = 3000
# Hidden work, back-to-back: batches of calls (each ending in one device synchronisation), the candidate's
# and the reference's interleaved; per batch, wall time minus the sum of the calls' CUDA events, per call.
# Host noise (preemption, page faults, other workers' builds) only ever adds wall time, and to some batches;
# work hidden on a side stream or thread adds to every batch. So the statistic is the candidate's LOWEST
# batch minus the reference's MEDIAN batch: an honest candidate is rejected only if all
# _HIDDEN_WORK_BATCHES of its batches are disturbed by more than the limit. The limit per call is
# max(_HIDDEN_WORK_FLOOR_MS, _HIDDEN_WORK_SHARE x the candidate's median event time per call). Why these:
# an undisturbed batch's excess is the host's loop between two event records (a few us per call, on both
# sides alike) plus one synchronisation spread over the batch (<= ~1 us per call at 50 calls); a us-scale
# candidate's single 20-call batch used to exceed 20 us per call from one 0.4 ms host stall
# (correct at 674x, then rejected), which the lowest of 7 batches no longer sees. The attacks stay far
# above the floor: the side-stream candidates queue 0.1-1 ms of hidden GPU work per call (5-50x), in every
# batch. The batches stop as soon as the verdict is settled (`settled_clean`): one batch whose excess is at most
# the floor passes whatever the others show, so an honest candidate mostly needs its first batch alone, and the
# reference none (0.26 s of the GPU held alone a candidate, against 0.04-0.05 s, at 2**26 elements on an H200).
# `harness bench eval --part flips` prints the largest honest statistic seen against this limit.
_HIDDEN_WORK_SHARE = 0.5
_HIDDEN_WORK_FLOOR_MS = 0.02
_HIDDEN_WORK_BATCHES = 7
_BACK_TO_BACK = 50  # calls per batch at most (fewer for long calls: a batch lasts about _BATCH_MS)
_BATCH_MS = 20.0
# observed: a worker whose own times per repetition are below this share of the observed ones is flagged (its reply
# does not count either way)
OBSERVED_AGREEMENT = 0.9


class Verdict(Exception):
    """Raised inside an evaluation to end it with a status."""

    def __init__(self, status: Status, reason: str, error: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error


class RetryEager(Exception):
    """A CUDA-graph capture failed in the worker, which may have left its CUDA state unusable: evaluate again in
    a new worker with both sides timed as eager calls."""

    def __init__(self, note: str):
        super().__init__(note)
        self.note = note


OUT_OF_MEMORY_BESIDE_OTHERS = "ran out of device memory beside other evaluations"


class RetryAlone(Exception):
    """Something other evaluations on the GPU may have caused (`why`): run this one again, in a new worker, holding
    the GPU alone throughout, and judge it on that."""

    def __init__(self, why: str = OUT_OF_MEMORY_BESIDE_OTHERS):
        super().__init__(why)
        self.why = why


def trim(text: str, n: int = ERROR_CHARS) -> str:
    """Keep the start (what failed first) and the end (the final error) of a long log."""
    if len(text) <= n:
        return text
    head = n // 3
    return f"{text[:head]}\n... [{len(text) - n} characters trimmed] ...\n{text[-(n - head):]}"


# What a failed reply's stage makes the verdict, and its reason ({error}: the worker's text, {last}: its last line,
# {broken}: the problem named as broken): the one table from stage to verdict. Every stage is here, so a reply
# decoded (`protocol.FailureStage`, strictly) always has one.
VERDICT_OF_STAGE: dict[p.FailureStage, tuple[Status, str]] = {
    p.FailureStage.PROBLEM: (Status.PROBLEM_ERROR, "{broken}"),
    p.FailureStage.IMPORT: (Status.COMPILE_ERROR, "importing the candidate failed"),
    p.FailureStage.BUILD: (Status.COMPILE_ERROR, "building the candidate failed"),
    p.FailureStage.FORMAT: (Status.FORMAT_ERROR, "{error}"),
    p.FailureStage.CONSTRUCT: (Status.RUNTIME_ERROR, "constructing ModelNew failed"),
    p.FailureStage.INTEGRITY: (Status.REJECTED, "integrity: {error}"),
    p.FailureStage.OUTPUT: (Status.INCORRECT, "{error}"),
    p.FailureStage.STAGE: (Status.RUNTIME_ERROR, "forward raised: {last}"),
    p.FailureStage.RUN: (Status.RUNTIME_ERROR, "forward raised: {last}"),
    p.FailureStage.NONE: (Status.RUNTIME_ERROR, "forward raised: {last}"),  # a reply not ok that names no stage
}


@dataclass
class Context:
    """Everything one evaluation's steps share."""

    problem: Problem
    source: str
    report: static_checks.SourceReport
    config: EvalConfig
    lease: Lease
    result: EvalResult
    small: bool
    build: Build | None = None
    ceilings: Ceilings | None = None
    alone: bool = False  # the evaluation holds its GPU exclusively throughout (a retry after running out of memory)
    graphs: bool = False  # time both sides as CUDA-graph replays (eval.cuda_graphs=auto, unless a capture failed)
    secret: int = field(default_factory=lambda: secrets.randbits(62))
    seat: Seat | None = None  # its place in a timing window shared with candidates of the same problem (`eval._windows`)
    reference: Reference | None = None
    session: Session | None = None  # this evaluation's reference in the clean reference process
    worker_draws: bool = True  # the worker draws inputs from seeds (false once its draw did not match ours)
    output_bytes: int = 0  # the largest reference output of this evaluation (bytes per forward), once trials start
    input_bytes: int = 0  # one timing input set's bytes, once staged
    unscored: str = ""  # why no speedup is scored (a degenerate problem); the steps that only score are left out

    @property
    def shared_secret(self) -> int:
        """What the reference's weights and the timing inputs derive from: the timing window's secret, which every
        candidate sharing the window has (their references are then one and the same), else this evaluation's own.
        Trial inputs always derive from `secret`, the evaluation's own."""
        return self.seat.secret if self.seat is not None else self.secret

    @property
    def on_gpu(self) -> bool:
        return self.lease.device.type == "cuda"

    @property
    def timed(self) -> bool:
        """Whether this evaluation times its candidate: on a GPU, or on the CPU when `eval.cpu_timing` asks (the
        whole two-process pipeline then runs; its times mean nothing)."""
        return self.on_gpu or self.config.cpu_timing

    def sides(self) -> tuple[measure.Side, measure.Side]:
        """The two processes of a timing: the clean reference process (re-keyed to the candidate worker's capture
        key; the candidate's worker is held stopped while it is timed, and on a GPU its kept blocks run on an idle
        GPU) and the candidate's own worker."""
        assert self.session is not None
        watch = gpu_idle.Watch(gpu_idle.probing(self.session, self.config.call_timeout_s)) if self.on_gpu else None
        return (measure.Side("reference", self.session, self.session.label, key=self.lease.worker.capture_key,
                             hold=self.lease.worker, watch=watch),
                measure.Side("candidate", self.lease.worker, "candidate"))

    def request(self, message: p.Request, tensors: list[torch.Tensor] | None = None,
                timeout: float | None = None, worker: Any = None) -> tuple[Any, list[torch.Tensor]]:
        """Ask the candidate's worker (or `worker`: the reference session); a failed reply becomes the verdict it
        implies. Reply tensors land on the evaluation's device."""
        reply, out = (worker or self.lease.worker).request(message, tensors, timeout=timeout, device=self.lease.device)
        if not reply.ok:
            self.fail_from_reply(reply, message.cmd)
        return reply, out

    def fail_from_reply(self, reply: p.Reply, cmd: str = "") -> NoReturn:
        """The verdict of a failed reply to `cmd`: by its stage (`VERDICT_OF_STAGE`), a device out of memory
        first (evaluated again alone, or named when it was alone), a sticky CUDA error ending the worker."""
        if reply.oom and not self.alone:
            raise RetryAlone()
        if reply.cuda_error:
            self.lease.worker.kill()  # a sticky CUDA error: this worker is done
        last = reply.error.strip().splitlines()[-1] if reply.error.strip() else "forward failed"
        if reply.oom:  # alone on the GPU, so not another evaluation's doing
            raise Verdict(Status.RUNTIME_ERROR, f"the device ran out of memory in the '{cmd or reply.stage}' step "
                                                f"with this evaluation alone on it: {trim(last, 400)}", reply.error)
        status, form = VERDICT_OF_STAGE[reply.stage]
        reason = form.format(error=trim(reply.error or "failed", 600), last=trim(last, 400),
                             broken=broken(self.problem.id, "it failed to load in the worker"))
        raise Verdict(status, _with_limit(self, reason, reply.error), reply.error)

    def tolerance(self) -> tuple[float, float]:
        return self.config.tolerance(self.problem.dtype, self.problem.atol, self.problem.rtol)

    @property
    def kernelbench_seeding(self) -> bool:
        return self.config.seeding == "kernelbench"

    def allow_outputs(self, expected: list[torch.Tensor]) -> None:
        """Let replies carry the reference's own output size per forward, however large: an honest candidate returns
        exactly those bytes, so `eval.max_output_bytes` bounds only what the reference does not justify."""
        self.output_bytes = max(self.output_bytes, tensor_bytes(expected))
        self.lease.worker.cap_replies(reply_cap(self.config, self.output_bytes))

    def draw_timing_inputs(self, seed: int) -> list[Any]:
        """A timing input set as the worker draws it from `seed` (on the CPU and moved, under KernelBench's seeding)."""
        assert self.reference is not None
        return draw_inputs(self.reference.module, seed, self.lease.device, None, on_cpu=self.kernelbench_seeding)

    def expected(self, inputs: list[Any]) -> list[torch.Tensor]:
        """Reference outputs under the preset's precision (the parent is strict unless told otherwise)."""
        assert self.reference is not None
        if self.config.precision == "strict":
            return self.reference.outputs(inputs)
        with precision(self.config.precision):
            return self.reference.outputs(inputs)


# -- the steps ---------------------------------------------------------------------------------
def load(ctx: Context) -> None:
    """Build the reference here and the candidate in the worker, from the same weight seed.

    The seed is secret, or KernelBench's public one under `seeding=kernelbench`; the reference's
    parameters are copied into ModelNew unless `copy_reference_state` is off.
    """
    weight_seed = ctx.config.public_seed if ctx.kernelbench_seeding else derive_seed(ctx.shared_secret, "weights")
    ctx.reference = Reference(ctx.problem, weight_seed, ctx.lease.device, ctx.small)
    overrides = ctx.problem.meta["small"] if ctx.small else {}
    rules = {} if ctx.config.precision == "strict" and ctx.config.copy_reference_state else {
        "precision": ctx.config.precision, "copy_state": ctx.config.copy_reference_state}
    label = ctx.problem.path or f"<{ctx.problem.id}>"
    reply, _ = ctx.lease.worker.request(
        p.Load(problem_source=public_source(ctx.problem.source), problem_label=label, candidate_source=ctx.source,
               weight_seed=weight_seed, size_overrides=overrides,
               extensions_dir=ctx.build.extensions_dir if ctx.build else None, **rules),
        timeout=ctx.config.import_timeout_s)
    if reply.ok:
        if reply.state_note:
            ctx.result.flags.append(f"state: {reply.state_note}")
        if ctx.timed:
            ctx.session = ctx.lease.reference.open(
                p.Load(problem_source=ctx.problem.source, problem_label=label, weight_seed=weight_seed,
                       size_overrides=overrides, **rules), timeout=ctx.config.import_timeout_s)
        return
    ctx.fail_from_reply(reply, "load")


def soundness(ctx: Context) -> None:
    """Refuse to score a degenerate problem as a speedup: where the reference's outputs do not depend on its inputs,
    or all zeros or a constant pass (lint's rule, `problems.degenerate_outputs`), a kernel that does no work is
    "correct" and arbitrarily fast (a KernelBench problem lint flags scored a constant kernel at 185x). The candidate
    is still judged for correctness; the steps that only score it are left out, and the result says why."""
    assert ctx.reference is not None
    why = ctx.reference.degenerate((derive_seed(ctx.secret, "sound-a"), derive_seed(ctx.secret, "sound-b")),
                                   *ctx.tolerance())
    if why:
        ctx.unscored = f"the problem is degenerate ({why})"
        ctx.result.unscored = ctx.unscored


def _with_limit(ctx: Context, reason: str, error: str) -> str:
    """`reason`, naming the sandbox limit that the worker hit, if any."""
    hit = ctx.lease.worker.limit_note(error)
    return f"{reason} ({hit})" if hit else reason


def reply_cap(config: EvalConfig, reference_output_bytes: int = 0) -> int:
    """The most tensor bytes one worker reply may carry: one forward's outputs, at most `eval.max_output_bytes` or,
    when larger, the reference's own output size (a block's captures are far smaller than the default)."""
    return max(config.max_output_bytes, reference_output_bytes)


# The most tensor bytes one trial's inputs may take: the worker's channel takes at most this much a request
# (`wire.Channel`'s default `max_payload_bytes`). Every trial is carried (`p.Run`); past this a trial off the
# published inputs is skipped and recorded so, and a published draw ends the evaluation as `skipped`, naming the size.
MAX_CARRIED_INPUT_BYTES = 8 << 30
# Past this many bytes of inputs, carrying every trial's inputs (twice across the host: the parent's GPU to the
# channel, the channel to the worker's GPU) halved the 24-candidate batch's rate on the H200 (2**26 elements,
# 2026-12-02): there a published draw is drawn by the worker from its seed (`p.Run.seed`), and the trials off the
# published inputs run on the problem with its input-only sizes halved until one draw fits (`_fitting_module`).
CARRY_LIMIT_BYTES = 64 << 20


@dataclass(frozen=True)
class Trial:
    """One correctness trial of the plan. Every kind reaches the worker as the same request, the parent's inputs
    carried (`p.Run`): which kind a trial is, only the parent knows."""

    label: str  # what its secret seed derives from
    draw: Callable[[int], list[Any] | None]  # its seed -> its inputs on the evaluation's device (None: not applicable)
    record: str = ""  # the result's field that records it ("distributions", "workloads"); "": a published draw
    name: str = ""  # its entry there; a verdict names it by `where`
    where: str = ""  # how a verdict names the trial, never with hidden sizes
    off: bool = False  # values off the published distribution: atol grown with the outputs, run where well-conditioned
    decided: bool = False  # runs only where the float64 check decided the reference well-conditioned (not undecided)
    hidden: bool = False  # shapes never shown to the agent: a verdict gives no index or size of them
    headroom: float = 0.0  # runs only where the reference stays finite on its inputs scaled by this (`HEADROOM`)


def trials(ctx: Context) -> None:
    """Run the trial plan (`trial_plan`): outputs compared here, inputs must stay unchanged. Each trial holds the GPU
    gate shared on its own (the step is "per_trial"); the first, the worker's first call of the candidate, as its
    warm-up (`GpuGate`: the other workers' trials go on while a timing waits for its JIT compiles)."""
    plan = trial_plan(ctx)
    public = kernelbench_trial_seeds(ctx.config.public_seed, len(plan)) if ctx.kernelbench_seeding else []
    published: list[float] = []  # mean |output| per output on the first trial's published inputs
    scales = any(trial.off for trial in plan)
    for index, trial in enumerate(plan):
        seed = public[index] if public else derive_seed(ctx.secret, trial.label)
        with ctx.lease.gate.hold("warm_up" if index == 0 else "shared"):
            outcome = _trial(ctx, trial, index, seed, published if scales else None)
        if outcome is None:
            continue
        mismatch, reply = outcome
        if trial.record:
            _entries(ctx, trial)[trial.name] = "failed" if mismatch is not None else "passed"
        if mismatch is not None:
            _incorrect(ctx, mismatch, f"trial {index}{trial.where}", hidden=trial.hidden)
        if reply.mutated_inputs:
            raise Verdict(Status.INCORRECT, f"the candidate modified input(s) {reply.mutated_inputs} in place; "
                                            "the reference leaves its inputs unchanged")


def trial_plan(ctx: Context) -> list[Trial]:
    """Fresh published draws (at least 2), every hidden shape set and hidden workload (unless `eval.hidden_shapes`
    is off), and the inputs moved off the published distribution (unless `eval.distribution_trials` is off). The
    first is a published draw (the warm-up); the rest are in an order shuffled with the evaluation's secret, so a
    trial's position does not tell its kind either. KernelBench's seeding keeps its own order and public seeds."""
    assert ctx.reference is not None
    ref, device, kb = ctx.reference, ctx.lease.device, ctx.kernelbench_seeding
    plan = [Trial(f"trial{t}", _draws(ref.module, device, kb)) for t in range(max(2, ctx.config.trials))]
    if ctx.config.hidden_shapes:
        plan += [Trial(f"extra{j}", _draws(ref.module, device, kb, j), where=f" on hidden input shapes #{j}",
                       hidden=True) for j in range(ref.extra_count())]
    off, overrides = (ref.module, {}) if kb else _fitting_module(ctx)
    if ctx.config.distribution_trials and not kb:
        plan += [Trial(f"dist-{name}", partial(_moved, off, device, name), "distributions", name,
                       f", inputs off the published distribution: {DISTRIBUTIONS[name][0]}; atol grown with the "
                       "outputs' mean |value| (`problems._compare.scaled_atol`)", off=True) for name in DISTRIBUTIONS]
        plan += [_variant_trial(off, device, name, what, change, "a value shape inside the published range")
                 for name, (what, change) in VALUE_SHAPES.items()]
        plan += [_variant_trial(off, device, name, what, change, "a value regime")
                 for name, (what, change) in REGIMES.items()]
    if ctx.config.hidden_shapes and not kb:
        plan += derived_workload_trials(ctx, off, overrides) + [
            Trial(f"layout-{name}", partial(_laid_out, off, device, change), "workloads", name,
                  f", on a hidden workload with {name}", hidden=True) for name, change in LAYOUTS.items()]
    if kb:
        return plan
    rest = plan[1:]
    random.Random(derive_seed(ctx.secret, "order")).shuffle(rest)
    return [plan[0], *rest]


def _fitting_module(ctx: Context) -> tuple[Any, dict[str, Any]]:
    """The module the trials off the published inputs draw from, and its size overrides: the reference's own where
    one published draw's inputs take at most `CARRY_LIMIT_BYTES`; past that, the problem with its input-only
    constants (batch, sequence...: `runtime.input_only_constants`, which leave the model unchanged) halved until a
    draw fits (`Reference.fitted`, once per problem), so carrying every such trial stays cheap. Flagged, never with
    the sizes (the flag reaches the agent)."""
    assert ctx.reference is not None
    module, overrides = ctx.reference.fitted(CARRY_LIMIT_BYTES, input_only_constants(ctx.problem.source))
    if module is not ctx.reference.module:
        ctx.result.flags.append("the trials off the published inputs ran at reduced sizes (the published inputs are "
                                f"over {CARRY_LIMIT_BYTES >> 20} MiB a trial)")
    return module, overrides


def _draws(module: Any, device: torch.device, on_cpu: bool, extra: int | None = None) -> Callable[[int], list[Any]]:
    return lambda seed: draw_inputs(module, seed, device, extra, on_cpu=on_cpu)


def _moved(module: Any, device: torch.device, distribution: str, seed: int) -> list[Any]:
    return transformed(draw_inputs(module, seed, device), distribution, seed)


def _variant_trial(module: Any, device: torch.device, name: str, what: str, change: Any, kind: str) -> Trial:
    """A trial of `problems.variants` on a published draw: values changed, so run only where decided well-conditioned."""
    return Trial(f"variant-{name}", partial(_varied, module, device, change), "distributions", name,
                 f", {kind}: {what}; atol grown with the outputs' mean |value|", off=True, decided=True,
                 headroom=HEADROOM.get(name, 0.0))


def _varied(module: Any, device: torch.device, change: Any, seed: int) -> list[Any] | None:
    return change(draw_inputs(module, seed, device), seed)


def _laid_out(module: Any, device: torch.device, change: Any, seed: int) -> list[Any] | None:
    return change(draw_inputs(module, seed, device))


# the derived workloads of a problem with hidden shapes of its own: only those past its shapes (which already
# make its sizes odd and small), over the sizes those shapes vary (`runtime.sizes_varied_by_extras`)
PAST_OWN_SHAPES = ("wide rows", "narrow rows")


def derived_workload_trials(ctx: Context, module: Any, fitted: dict[str, Any]) -> list[Trial]:
    """Hidden workloads, never shown to the agent, for every problem: its constants that only get_inputs() reads
    (batch, sequence...) made odd, prime, a single row, wide or narrow rows (`runtime.derived_workloads`), from
    `module`'s sizes (its `fitted` overrides: `_fitting_module`), drawn from that module; for a problem whose own
    hidden shapes read those sizes (none is input-only then), wide and narrow rows over the sizes its shapes vary,
    from its sizes fitted the same way. Skipped where the reference itself fails on it. A verdict names the kind,
    never the sizes."""
    assert ctx.reference is not None
    names, kinds = input_only_constants(ctx.problem.source), None
    if not names and (names := sizes_varied_by_extras(ctx.problem.source)):
        module, fitted = ctx.reference.fitted(CARRY_LIMIT_BYTES, names)
        kinds = PAST_OWN_SHAPES
    trials = []
    for kind, workload in derived_workloads(module, names).items():
        if kinds is not None and kind not in kinds:
            continue
        overrides = {**(ctx.problem.meta["small"] if ctx.small else {}), **fitted, **workload}
        try:
            module = load_source(ctx.problem.source, f"<{ctx.problem.id} derived>", overrides)
        except Exception as exc:  # noqa: BLE001  the reference's own limits: not the candidate's fault
            ctx.result.workloads[kind] = f"skipped: the reference fails on it ({trim(str(exc), 160)})"
            continue
        trials.append(Trial(f"derived-{kind}", _draws(module, ctx.lease.device, False), "workloads", kind,
                            f", on a hidden workload with {kind}", hidden=True))
    return trials


def _entries(ctx: Context, trial: Trial) -> dict[str, str]:
    """Where the result records `trial` (an unrecorded published draw: a scratch dict)."""
    return getattr(ctx.result, trial.record) if trial.record else {}


def _trial(ctx: Context, trial: Trial, index: int, seed: int, published: list[float] | None
           ) -> tuple[Mismatch | None, p.RunReply] | None:
    """One trial: its inputs drawn here and carried, its outputs compared; None where it is skipped (recorded why)."""
    entries = _entries(ctx, trial)
    try:
        inputs = trial.draw(seed)
        expected = ctx.expected(inputs) if inputs is not None else []
    except Exception as exc:  # noqa: BLE001  the reference's own limits on inputs it was not written for
        if not trial.record:
            raise
        entries[trial.name] = f"skipped: the reference fails on it ({trim(str(exc), 160)})"
        return None
    if inputs is None:
        entries[trial.name] = "skipped: it does not apply to this problem's inputs"
        return None
    atol = scaled_atol(ctx.tolerance()[0], published or [], [magnitude(t) for t in expected]) if trial.off else None
    why = _why_not(ctx, trial, inputs, expected, atol)
    if why:
        entries[trial.name] = f"skipped: {why}"
        return None
    ctx.allow_outputs(expected)
    if trial.record:  # stays so if the candidate raises, crashes or hangs on these inputs
        entries[trial.name] = UNFINISHED
    reply, outputs = _run(ctx, trial, seed, inputs)
    ctx.result.trials += 1
    if published is not None and not published:
        published += [magnitude(t) for t in expected]
    mismatch = _trial_mismatch(ctx, expected, reply, outputs, index, atol)
    if mismatch is not None and mismatch.output >= 0 and _within_float64(ctx, inputs, expected, outputs, atol):
        ctx.result.float64_decided += 1
        mismatch = None
    del inputs, expected, outputs
    return mismatch, reply


def _within_float64(ctx: Context, inputs: list[Any], expected: list[torch.Tensor], outputs: list[torch.Tensor],
                    atol: list[float] | None) -> bool:
    """Whether outputs that missed the reference's values are within tolerance of its float64 forward: the reference
    is a rounding of the answer too, and an honest kernel that rounds otherwise (another order of a sum, wider
    accumulators) can miss it while meeting the answer. Only values are so decided: outputs of another shape or
    dtype than the reference's miss whatever their values (the answer is rounded to the reference's dtypes). False
    where the float64 forward cannot run here (its traced peak over the budget, or an operator or memory failing)."""
    assert ctx.reference is not None
    if len(outputs) != len(expected) or any(o.dtype != e.dtype or o.shape != e.shape
                                            for o, e in zip(outputs, expected)):
        return False
    cost = traced_cost(ctx.problem, ctx.small)
    if cost is None or 2 * cost.peak_bytes > wide_check_budget(ctx.lease.device):
        return False
    problem_atol, rtol = ctx.tolerance()
    try:
        return float64_miss(ctx.reference.model, inputs, outputs, problem_atol if atol is None else atol, rtol) is None
    except Exception:  # noqa: BLE001  no float64 forward here
        return False


def _run(ctx: Context, trial: Trial, seed: int, inputs: list[Any]) -> tuple[p.RunReply, list[torch.Tensor]]:
    """Ask the worker to run one trial: its inputs carried, or, for a published draw past `CARRY_LIMIT_BYTES`, drawn
    by the worker from the trial's seed where its draws match ours (checked by fingerprint; else carried from then on)."""
    timeout = ctx.config.call_timeout_s
    if (ctx.worker_draws and not trial.record and not trial.hidden and not ctx.kernelbench_seeding
            and tensor_bytes(inputs) > CARRY_LIMIT_BYTES):
        reply, outputs = ctx.request(p.Run(seed=seed), timeout=timeout)
        if reply.fingerprint == input_fingerprint(inputs):
            return reply, outputs
        _stop_worker_draws(ctx)
    spec, tensors = encode_trial_args(inputs)
    return ctx.request(p.Run(args=spec), tensors, timeout=timeout)


def _why_not(ctx: Context, trial: Trial, inputs: list[Any], expected: list[torch.Tensor],
             atol: list[float] | None) -> str:
    """Why `trial` is not run on these inputs (or ""): too large to carry, the reference not finite on them, or it
    ill-conditioned there (`Reference.ill_conditioned`). A published draw too large ends the evaluation."""
    assert ctx.reference is not None
    size = tensor_bytes(inputs)
    if size > MAX_CARRIED_INPUT_BYTES:
        too_large = (f"its inputs take {size / 2**30:.1f} GiB, over the {MAX_CARRIED_INPUT_BYTES / 2**30:.0f} GiB a "
                     "trial's inputs may take (checks.MAX_CARRIED_INPUT_BYTES)")
        if not trial.record:
            raise Verdict(Status.SKIPPED, f"a trial cannot be run: {too_large}")
        return too_large
    if not trial.record:
        return ""
    if not all(_finite(t) for t in expected):
        return "the reference is not finite on these inputs"
    if trial.headroom and not all(_finite(t) for t in ctx.expected(scaled_floats(inputs, trial.headroom))):
        return (f"too close to overflow: the reference overflows on these inputs scaled by {trial.headroom:g}, where "
                "the order of a sum decides whether a result is finite")
    if atol is None:
        return ""
    why = ctx.reference.ill_conditioned(trial.name, inputs, partial(_strict_outputs, ctx, inputs, expected), atol,
                                        ctx.tolerance()[1])
    if why is None:
        return "the float64 check could not decide whether the reference is well-conditioned here" if trial.decided else ""
    return f"ill-conditioned: {why}" if why else ""


def _trial_mismatch(ctx: Context, expected: list[torch.Tensor], reply: p.RunReply, outputs: list[torch.Tensor],
                    trial: int, atol: list[float] | None = None) -> Mismatch | None:
    """How a trial's outputs differ from the reference's: their containers first, then their values (`atol`: per
    output, off the published distribution; else the problem's)."""
    assert ctx.reference is not None
    problem_atol, rtol = ctx.tolerance()
    return (compare_structure(ctx.reference.structure, reply.output_structure, trial)
            or compare(expected, outputs, problem_atol if atol is None else atol, rtol, trial=trial))


def _incorrect(ctx: Context, mismatch: Mismatch, where: str, hidden: bool = False) -> NoReturn:
    """The verdict of a trial whose outputs are wrong, naming the output and the trial; on hidden shapes without
    their sizes (no shapes, no index: the verdict reaches the agent)."""
    if hidden:
        mismatch.worst_index = None
        if mismatch.reason.startswith("shape "):
            mismatch.reason = "shape differs from the reference's"
    ctx.result.mismatch = mismatch
    output = f"output {mismatch.output}: " if mismatch.output >= 0 else ""
    raise Verdict(Status.INCORRECT, f"{output}{mismatch.reason} ({where})")


def _strict_outputs(ctx: Context, inputs: list[Any], expected: list[torch.Tensor]) -> list[torch.Tensor]:
    """The reference's outputs in its own dtypes without reduced precision: `expected` under the strict default,
    else computed again so (conditioning is the problem's, whatever a preset allows)."""
    assert ctx.reference is not None
    return expected if ctx.config.precision == "strict" else ctx.reference.outputs(inputs)


def _finite(t: torch.Tensor) -> bool:
    """Whether a reference output holds no NaN or infinity (float8 has no isfinite of its own)."""
    if not t.is_floating_point():
        return True
    return bool(torch.isfinite(t.float() if t.element_size() == 1 else t).all())


def _stop_worker_draws(ctx: Context) -> None:
    ctx.worker_draws = False
    ctx.result.flags.append("inputs carried to the worker: its draws from the same seed differed from the "
                            "parent's (get_inputs() is not reproducible across processes)")


def stage_timing_inputs(ctx: Context) -> None:
    """`_stage` with the parent's cached device memory handed back before and after, when an evaluation's tensors
    are past a worker's budget: the trials' outputs compared here, and the sets drawn here to check fingerprints,
    stay cached in this process otherwise (20 GiB for a 6 GiB problem on the H100, which ran the candidate's
    staging out of memory)."""
    _release_if_large(ctx, holds_large_tensors(ctx))
    try:
        _stage(ctx)
    finally:
        budget = device_budget(ctx.lease.device)
        _release_if_large(ctx, holds_large_tensors(ctx) or (budget is not None and ctx.input_bytes > budget))


def _release_if_large(ctx: Context, large: bool) -> None:
    if large and ctx.lease.device.type == "cuda":
        torch.cuda.empty_cache()


def _stage(ctx: Context) -> None:
    """Send the timing input sets ahead to both processes, so the exclusive window holds only GPU work.

    Both get the same sets: repetition r runs on the same inputs on both sides. Where the worker
    draws its sets itself, the parent draws each once to check its fingerprint and keeps only the
    seeds (it never holds every set at once); the reference process draws as the parent does.
    KernelBench's seeding times both on the inputs of its public seed.
    """
    kb = ctx.kernelbench_seeding
    draw = ctx.draw_timing_inputs
    first_seed = ctx.config.public_seed if kb else derive_seed(ctx.shared_secret, "time0")
    first = draw(first_seed)
    ctx.input_bytes = tensor_bytes(first)
    count = staged_set_count(ctx, ctx.input_bytes)
    seeds = [first_seed] + [derive_seed(ctx.shared_secret, f"time{k}") for k in range(1, count)]
    spec, tensors = encode_args(first)
    n_tensors = len(tensors)
    reference, candidate = ctx.sides()
    timeout = ctx.config.call_timeout_s
    if ctx.worker_draws:
        fingerprints = [input_fingerprint(first)]
        del first, tensors
        fingerprints += [input_fingerprint(draw(seed)) for seed in seeds[1:]]
        replies = [ctx.request(p.Stage(subject=side.subject, args=spec, n_inputs=n_tensors, sets=count, seeds=seeds,
                                       on_cpu=kb), timeout=timeout, worker=side.worker)[0]
                   for side in (candidate, reference)]
        if all(r.fingerprints == fingerprints for r in replies):
            return
        _stop_worker_draws(ctx)
        first = draw(seeds[0])
    sets = [first] + [draw(seed) for seed in seeds[1:]]
    carried = [t for s in sets for t in encode_args(s)[1]]
    for side in (candidate, reference):
        ctx.request(p.Stage(subject=side.subject, args=spec, n_inputs=n_tensors, sets=count), carried,
                    timeout=timeout, worker=side.worker)


# Each process's staged timing sets take at most this share of the device's memory (a GPU's 4 evaluations: a
# quarter together, the reference process's copies included). Past it, the sides get fewer sets, down to one.
# Sets that large are far bigger than L2, which is flushed before every repetition anyway, and under the strict
# rules every repetition gets fresh values: fewer sets change no measurement, where holding 3 + 3 sets of a
# 6 GiB input (KernelBench's scaled level 1) ran the device out of memory and failed an honest candidate.
DEVICE_SHARE = 1 / 16


def tensor_bytes(values: list[Any]) -> int:
    """Bytes held by the tensors among `values` (inputs or outputs of one forward)."""
    return sum(t.nbytes for t in values if isinstance(t, torch.Tensor))


def device_budget(device: torch.device) -> int | None:
    """Bytes of device memory one worker's staged sets, or its kept outputs, may take (None: no device limit)."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(device).total_memory * DEVICE_SHARE)


def fitting_set_count(wanted: int, set_bytes: int, device: torch.device) -> int:
    """Timing input sets per side: `wanted`, fewer (at least one) where one process's sets would not fit its budget."""
    budget = device_budget(device)
    wanted = max(1, wanted)
    if budget is None or set_bytes <= 0:
        return wanted
    return max(1, min(wanted, budget // set_bytes))


def staged_set_count(ctx: Context, set_bytes: int) -> int:
    """`fitting_set_count` for this evaluation; a smaller count than `eval.timed_input_sets` is flagged."""
    wanted = max(1, ctx.config.timed_input_sets)  # as fitting_set_count counts it
    pool = fitting_set_count(wanted, set_bytes, ctx.lease.device)
    if pool < wanted:
        ctx.result.flags.append(f"timed on {pool} input set(s) per side, not {wanted}: one set takes "
                                f"{set_bytes / 2**30:.2f} GiB, and a worker's staged sets stay under "
                                f"{DEVICE_SHARE:.2%} of the device's memory")
    return pool


def fresh_sets_per_block(ctx: Context) -> int:
    """How many repetitions' fresh inputs one process may stage for a block within its device budget."""
    budget = device_budget(ctx.lease.device)
    return measure.MAX_BLOCK_REPS if not budget or not ctx.input_bytes else max(2, budget // ctx.input_bytes)


def holds_large_tensors(ctx: Context) -> bool:
    """Whether this evaluation's outputs were past the budget: then the parent hands its cached device memory back
    when the evaluation ends, so the next evaluations' workers can have it."""
    budget = device_budget(ctx.lease.device)
    return budget is not None and ctx.output_bytes > budget


KEPT_KERNEL_NAMES = 64  # kernel names a result keeps of each list (the count of those defined is kept whole)


def own_kernels(ctx: Context) -> None:
    """The candidate's own kernels must have run; on a GPU, report their share of GPU time.

    Own means defined by the candidate's own code, never named in its text: CUDA kernels whose host stubs
    the files it built hold (`eval._kernel_symbols`: the build folder, and the worker's own folder, read here
    once forward has run) and Triton kernels whose launches the worker's tracer recorded from the candidate's
    module. A profiled kernel is own when its
    qualified name (namespaces and name) is one of those and it is no library's: not by its namespace or
    vendor pattern (`is_library_kernel`) and not one the problem's reference launches, profiled in the clean
    reference process (so a kernel built under cuBLAS's `gemv2T_kernel_val` and never launched does not
    make `torch.mv`'s launches its own)."""
    reply, _ = ctx.request(p.Kernels(), timeout=ctx.config.call_timeout_s)
    built = _built_kernels(ctx)
    own_paths = {qualified_name(n) for n in [*reply.triton_own, *built]}
    profile = [(str(n), float(ms)) for n, ms in reply.profile]
    launched = set(reply.triton_own)
    share = None
    library_named: set[str] = set()
    if profile:
        total = sum(ms for _, ms in profile)
        own = [(n, ms) for n, ms in profile if qualified_name(n) in own_paths and not is_library_kernel(n)]
        library_named = {kernel_base_name(n) for n, _ in profile if qualified_name(n) in own_paths} - {
            kernel_base_name(n) for n, _ in own}
        if own:
            referenced = _reference_kernels(ctx)
            library_named |= {kernel_base_name(n) for n, _ in own if qualified_name(n) in referenced}
            own = [(n, ms) for n, ms in own if qualified_name(n) not in referenced]
        launched |= {kernel_base_name(n) for n, _ in own}
        share = sum(ms for _, ms in own) / total if total > 0 else None
    defined = sorted({*ctx.report.triton_kernels, *ctx.report.gluon_kernels, *ctx.report.helion_kernels,  # issue 56
                      *(kernel_base_name(n) for n in built)})
    ctx.result.kernels = KernelShare(own_kernels_launched=sorted(launched)[:KEPT_KERNEL_NAMES],
                                     own_kernels_defined=defined[:KEPT_KERNEL_NAMES], own_kernels_defined_count=len(defined),
                                     own_time_fraction=share, top_kernels=profile[:8])
    if ctx.config.own_kernel_policy != "reject":
        return
    hint = (f" (kernels named like a library's, {', '.join(sorted(library_named))}, never count as the candidate's "
            "own: rename them)") if library_named else ""
    if not launched:
        built_note = "" if built or not ctx.report.cuda_kernels else (
            "; no CUDA kernel was found in what its build or its run produced, and kernels named only in the source "
            "text do not count")
        named = ", ".join(defined[:8]) + (f" and {len(defined) - 8} more" if len(defined) > 8 else "")
        raise Verdict(Status.REJECTED, "none of the candidate's own kernels ran during forward (defined: "
                                       f"{named or 'none'}{built_note}); the work was done by PyTorch "
                                       f"or a fallback path{hint}")
    language = ctx.result.backend  # issue 56: a Gluon or Helion candidate's work runs in kernels of its language
    if language in TRITON_DIALECTS and language not in reply.languages:
        raise Verdict(Status.REJECTED, f"backend={language}: none of the candidate's own {language.capitalize()} "
                                       f"kernels ran during forward (its own launches: {', '.join(sorted(launched))}, "
                                       f"in {', '.join(reply.languages) or 'no Triton dialect'}); write the work in "
                                       f"{language.capitalize()}")
    shortfall = own_share_shortfall(share, ctx.config.min_own_time_fraction)
    if shortfall:
        raise Verdict(Status.REJECTED, shortfall + hint)


def _built_kernels(ctx: Context) -> list[str]:
    """Mangled names of the CUDA kernels the candidate's code built: at import, in the build worker (read from the
    build folder once that worker was gone; later calls it could make ahead too: `eval.worker.lazy_builds`), and at
    run time in its evaluating worker (other `load_inline` calls in `__init__` or a lazy first forward: read now, after forward ran, from the worker's own folder and its private /tmp and
    /dev/shm, as the parent pinned them before any candidate code ran; never from a list the worker sends)."""
    at_build = ctx.build.kernels if ctx.build else []
    at_run = [k for folder in ctx.lease.worker.own_folders for k in kernels_under(folder)]
    return sorted({*at_build, *at_run})


def _reference_kernels(ctx: Context) -> set[tuple[str, ...]]:
    """Qualified names of the kernels the problem's reference launches, profiled in the clean reference process
    on its staged timing inputs: library kernels by construction (no candidate code ever runs there)."""
    if ctx.session is None:
        return set()
    reply, _ = ctx.request(p.Kernels(subject=ctx.session.label), timeout=ctx.config.call_timeout_s,
                           worker=ctx.session)
    return {qualified_name(str(n)) for n, _ in reply.profile}


def own_share_shortfall(share: float | None, minimum: float) -> str | None:
    """Why own kernels' share of forward's GPU time is too small (`eval.min_own_time_fraction`), or None.

    A share that could not be measured (None: CPU interpreter, no profile) or a minimum of 0 never rejects.
    """
    if share is None or minimum <= 0 or share >= minimum:
        return None
    return (f"the candidate's own kernels took {share:.2%} of forward's GPU time, under the minimum of "
            f"{minimum:.2%} (eval.min_own_time_fraction): library kernels (PyTorch, cuBLAS) did the work and the "
            "own kernels look like a decoy; write the substantial part of the computation as your own kernels")


def hidden_work(ctx: Context) -> None:
    """Work left running after return (side streams, threads) must not exist. The reference's batches run in the
    clean reference process, interleaved with the candidate's."""
    reference, candidate = ctx.sides()
    timeout = ctx.config.timing_timeout_s
    try:
        _, cand, ref = measure.back_to_back(candidate, reference, calls=3, batches=1, timeout=timeout)
        slowest = max(b["wall_ms"] / b["calls"] for b in cand + ref)
        calls = max(3, min(_BACK_TO_BACK, int(_BATCH_MS / max(slowest, 1e-3))))
        first, cand, ref = measure.back_to_back(candidate, reference, calls, _HIDDEN_WORK_BATCHES, timeout,
                                                settled=settled_clean)
    except measure.BlockFailed as exc:
        _block_failed(ctx, exc)
    if first.violations:
        raise Verdict(Status.REJECTED, "integrity: " + "; ".join(first.violations))
    if first.stream_mismatches:
        raise Verdict(Status.REJECTED, "integrity: the output changed after a device-wide synchronisation, so work "
                                       "was still running outside the current stream when forward returned")
    finding, ctx.result.hidden_work = judge_back_to_back(cand, ref)
    if finding:
        raise Verdict(Status.REJECTED, f"integrity: {finding}")


def settled_clean(candidate: list[dict[str, float]]) -> bool:
    """True once the candidate's batches so far pass the back-to-back check whatever the batches still to come
    show, the reference's included: the lowest excess can only fall, it is at most the floor, which no limit is
    under, and the reference's excess (never below 0) is subtracted from it. So the verdict is the one that all
    `_HIDDEN_WORK_BATCHES` batches of both sides would give, and the batches stop here."""
    return bool(candidate) and min(b["excess_ms_per_call"] for b in candidate) <= _HIDDEN_WORK_FLOOR_MS


def judge_back_to_back(candidate: list[dict[str, float]],
                       reference: list[dict[str, float]]) -> tuple[str | None, dict[str, float]]:
    """Why back-to-back batches show work outside the timed stream (or None), and the numbers, in us per call.

    Each batch: `wall_ms`, `event_ms`, `excess_ms_per_call`, `calls`. Unexplained wall time per call is
    the candidate's lowest batch excess minus the reference's median; it must stay under the limit
    (see `_HIDDEN_WORK_SHARE`). Batches that stopped once settled (`settled_clean`) may have no reference batch:
    the unexplained time is then the candidate's lowest excess, an upper bound of it.
    """
    if not candidate or not (reference or settled_clean(candidate)):
        raise ValueError("hidden-work check: no back-to-back batches measured")
    lowest = min(b["excess_ms_per_call"] for b in candidate)
    reference_excess = max(statistics.median(b["excess_ms_per_call"] for b in reference), 0.0) if reference else 0.0
    per_call = statistics.median(b["event_ms"] / max(b["calls"], 1) for b in candidate)
    limit = max(_HIDDEN_WORK_FLOOR_MS, _HIDDEN_WORK_SHARE * per_call)
    unexplained = lowest - reference_excess
    numbers = {"unexplained_us": round(unexplained * 1000, 3), "limit_us": round(limit * 1000, 3),
               "candidate_lowest_us": round(lowest * 1000, 3), "reference_median_us": round(reference_excess * 1000, 3),
               "call_us": round(per_call * 1000, 3), "batches": len(candidate), "reference_batches": len(reference),
               "calls": int(candidate[0]["calls"])}
    if unexplained <= limit:
        return None, numbers
    return (f"in every one of {len(candidate)} batches of {numbers['calls']} back-to-back calls, wall time exceeded "
            f"the sum of the calls' CUDA events by at least {lowest * 1000:.1f} us per call (the reference's median: "
            f"{reference_excess * 1000:.1f} us; allowed beyond it: {limit * 1000:.1f} us, for calls of "
            f"{per_call * 1000:.1f} us): work runs outside the timed stream (side streams, threads)"), numbers


def _block_failed(ctx: Context, exc: measure.BlockFailed) -> NoReturn:
    """A failed block: the candidate's is a verdict; the reference process's is the harness's failure (or, out of
    memory beside other evaluations, a retry alone)."""
    if exc.side == "candidate":
        ctx.fail_from_reply(exc.reply)
    if exc.reply.oom and not ctx.alone:
        raise RetryAlone()
    raise RuntimeError(f"the reference process failed ({exc.reply.stage}): {trim(exc.reply.error, 600)}")


def _time_window(members: list[Context], rule: measure.TimingRule, fresh: bool, min_pairs: int
                 ) -> list[measure.Measurement]:
    """One timing of every member's candidate against the first member's reference (`measure.time_group`), with
    the GPU held alone; one measurement per member, in order."""
    lead = members[0]
    with lead.lease.gate.hold("exclusive"):
        return measure.time_group([m.sides() for m in members], rule,
                                  nonce=secrets.randbits(62) | 1 if fresh else 0, graphs=lead.graphs,
                                  timeout=lead.config.timing_timeout_s,
                                  max_block_reps=min(fresh_sets_per_block(m) for m in members), min_pairs=min_pairs,
                                  core=affinity.timing_core(lead.lease.gpu_index) if lead.on_gpu else None)


def _first_look(ctx: Context, rule: measure.TimingRule, fresh: bool) -> measure.Measurement:
    """The first timing: in the window of this evaluation's seat, shared with the other candidates of its problem
    that reach timing with it; alone without a seat."""
    if ctx.seat is None:
        return _time_window([ctx], rule, fresh, min_pairs=2)[0]
    window = lambda members: _time_window(members, rule, fresh, min_pairs=2)  # noqa: E731
    meas: measure.Measurement = ctx.seat.time(ctx, window)
    return meas


def _judged(ctx: Context, meas: measure.Measurement) -> measure.Measurement:
    """A timing's failure as this candidate's verdict, its violations (or the tamper snapshot's after it) a
    rejection; else the measurement."""
    exc = meas.failure
    if isinstance(exc, measure.BlockFailed):
        _block_failed(ctx, exc)
    if isinstance(exc, measure.CaptureFailed):  # the failing process's CUDA state is suspect: both start over
        ctx.lease.worker.kill()
        if exc.side == "reference" and ctx.session is not None:
            ctx.lease.reference.restart(ctx.session.generation)
        raise RetryEager(f"the {exc.side}'s forward could not be captured in a CUDA graph ({exc.note})"[:400])
    if isinstance(exc, measure.Forged):
        if exc.side != "candidate":
            raise RuntimeError(f"the reference process's reply was malformed: {exc}")
        raise Verdict(Status.REJECTED, f"integrity: {exc}")
    if isinstance(exc, gpu_idle.Busy):
        if meas.shared_with > 1 and not ctx.alone:  # whose work it was is told apart only alone
            raise RetryAlone("the GPU was found busy around a reference block shared with other candidates")
        reference, _ = ctx.sides()
        assert reference.watch is not None
        if gpu_idle.candidates_work(exc, ctx.lease.worker, reference.watch):
            raise Verdict(Status.REJECTED, f"integrity: {exc}, and it fell idle once the candidate's worker was ended: "
                                           "the candidate left work running on the GPU, which slows the reference's "
                                           "timing")
        raise RuntimeError(f"{exc}; not the candidate's work: the reference could not be timed on an idle GPU")
    if exc is not None:  # what a worker's request raised (a timeout, a death): the evaluator's to judge
        raise exc
    ctx.result.contended_blocks += meas.contended_blocks
    integrity, _ = ctx.request(p.Integrity(), timeout=ctx.config.call_timeout_s)
    violations = meas.violations + [f"candidate: {v}" for v in integrity.violations]
    if violations:
        raise Verdict(Status.REJECTED, "integrity: " + "; ".join(violations[:4]))
    return meas


def time_candidate(ctx: Context) -> None:
    """Time the reference (in the clean reference process) against the candidate (in its own worker), blocks
    alternating; check every timed output against the reference's for the same inputs; bound the candidate's
    reported times by the wall time observed here. Under the strict rule every repetition gets unseen inputs.
    The first timing may share the reference's blocks with other candidates of the problem (`_first_look`); a
    second look, when the wall bound asks for one, is always alone. Timed alone, the timing and its judging are one
    hold of the GPU (each hold waits for the other evaluations' trials in flight to drain)."""
    rule = ctx.config.timing_rule()
    fresh = rule.method == "adaptive" and rule.check_outputs and ctx.worker_draws
    if ctx.seat is not None and not fresh:
        ctx.seat.leave()
        ctx.seat = None
    with ctx.lease.gate.hold("exclusive" if ctx.seat is None else "none"):  # a shared window waits unheld
        _time_and_judge(ctx, rule, fresh)


def _time_and_judge(ctx: Context, rule: measure.TimingRule, fresh: bool) -> None:
    """The first look, then its judging with the GPU held (a second look alone if the wall bound asks for one)."""
    config, result = ctx.config, ctx.result
    meas = _first_look(ctx, rule, fresh)
    result.reference_shared_with = meas.shared_with
    with ctx.lease.gate.hold("exclusive"):
        meas = _judged(ctx, meas)
        finding, result.wall_bound = measure.wall_bound(meas) if ctx.on_gpu else (None, {})
        if finding:  # a second, longer look: judged on it alone
            meas = _judged(ctx, _time_window([ctx], rule, fresh, min_pairs=measure.SECOND_LOOK_PAIRS)[0])
            finding, result.wall_bound = measure.wall_bound(meas)
            result.wall_bound["second_look"] = 1.0
        if finding and config.hidden_work_check and not ctx.alone:
            # Beside other evaluations an honest candidate's blocks can run 50-150 us/rep slower than the reference's
            # (H100: 2-5 of 64 honest candidates, 8 evaluations at once): judged again alone, in a new worker. Work
            # hidden outside the timed intervals stays in every block, whatever else runs.
            raise RetryAlone(f"{_over_bound(result.wall_bound)} while other evaluations could run beside it")
        _record_timing(ctx, rule, fresh, meas, finding)


def _over_bound(numbers: dict[str, float]) -> str:
    """Which bound a timing was over, in a few words (a retry's flag)."""
    if numbers.get("unexplained_us", 0) > numbers.get("limit_us", 0):
        return f"the wall bound found {numbers['unexplained_us']:.0f} us per repetition unexplained"
    return f"the loop's own GPU work took {numbers.get('loop_gpu_gap_us', 0):.0f} us per repetition longer"


def _record_timing(ctx: Context, rule: measure.TimingRule, fresh: bool, meas: measure.Measurement,
                   finding: str | None) -> None:
    """What a judged timing shows: flags, the timed outputs' check, the wall bound's finding, the speedup."""
    config, result = ctx.config, ctx.result
    record_mode(ctx, meas)
    if meas.unheld_blocks:
        result.flags.append(f"a worker held still while another side was timed was not seen fully stopped "
                            f"({result.freeze}) through {meas.unheld_blocks} blocks within {freeze.STOP_WAIT_S:g} s: "
                            "its processes may have run beside them")
    if fresh and not meas.fresh_inputs:
        result.flags.append("timed inputs rotated among the staged sets: the problem's get_inputs() draws other "
                            "shapes each time, so fresh inputs per repetition could not be used")
    if rule.check_outputs:
        wrong = measure.first_capture_mismatch(meas, *ctx.tolerance())
        if wrong:
            raise Verdict(Status.INCORRECT, wrong)
    ref, cand = meas.summary("reference"), meas.summary("candidate")
    result.reference_timing, result.candidate_timing = Timing.from_dict(ref), Timing.from_dict(cand)
    if not ctx.on_gpu:  # host-clock times of the CPU pipeline: no bound, no speedup
        return
    result.wall_bound["pinned_threads"] = float(meas.pinned_threads)  # recorded for a rejection too
    if finding and config.hidden_work_check:
        raise Verdict(Status.REJECTED, f"integrity: {finding}")
    if finding:  # the preset leaves work outside the timed intervals unjudged, as KernelBench does: a flag only
        result.flags.append(f"wall bound (not judged: eval.hidden_work_check=false): {finding}")
    judge_concentration(ctx, meas, rule)
    result.timing_meaningful = True
    key = "median_ms" if rule.statistic == "median" else "mean_ms"
    result.speedup = ref[key] / cand[key]
    if rule.method != "adaptive" or rule.statistic != "median" or not rule.flush:
        result.flags.append(timing_note(config, ref, cand))


def judge_concentration(ctx: Context, meas: measure.Measurement, rule: measure.TimingRule) -> None:
    """Reject work concentrated in a few calls of every block (`measure.concentration`), judged alone: beside other
    evaluations, an honest candidate's blocks can meet another CUDA context's work (the GPU takes turns between
    contexts), which lengthens a few calls (on the H200, 1 of 480 honest candidates, 8 evaluations at once). A
    candidate that concentrates its work does so alone too."""
    concentrated, ctx.result.wall_bound["concentration"] = measure.concentration(meas)
    if not concentrated or rule.statistic != "median":
        return
    if not ctx.config.hidden_work_check:
        ctx.result.flags.append(f"concentration (not judged: eval.hidden_work_check=false): {concentrated}")
    elif not ctx.alone:
        raise RetryAlone(f"{concentrated}, while other evaluations could run beside it")
    else:
        raise Verdict(Status.REJECTED, f"integrity: {concentrated}")


def host_bound(ctx: Context) -> None:
    """Measure both sides' host and GPU time per call, each in its own process; record them and flag the result when
    a side is host-bound (`measure.HOST_SHARE_AT`). The flag changes no verdict and no speedup."""
    result = ctx.result
    bound = []
    for side in ctx.sides():
        msg = p.Busy(subject=side.subject, calls=measure.BUSY_CALLS, flush=ctx.config.l2_flush,
                     profile_above_ms=measure.HOST_FLOOR_MS)
        with freeze.held(side.hold):
            reply, _ = ctx.request(msg, timeout=ctx.config.timing_timeout_s, worker=side.worker)
        measured = measure.host_time(reply.side)
        for per_side, value in ((result.gpu_busy, measured.busy), (result.host_ms, measured.host_ms),
                                (result.host_share, measured.share)):
            if value is not None:
                per_side[side.name] = value
        if measured.bound:
            bound.append(side.name)
    result.host_bound = bound  # flagged once timing tells how the timed calls ran (`record_mode`)


def record_mode(ctx: Context, meas: measure.Measurement) -> None:
    """Which way the timed calls ran, why graphs were not used when they were asked for, and what that means for a
    host-bound side."""
    result = ctx.result
    result.timing_mode = "cuda_graph" if meas.timing_mode == "cuda_graph" else "eager"
    if ctx.graphs and result.timing_mode != "cuda_graph":
        result.flags.append("cuda_graphs: " + (meas.graph_note[:400] or "graphs were not used"))
    if result.host_bound:
        result.flags.append(measure.host_bound_flag(result.host_share, result.host_bound, result.timing_mode))


def in_order(ctx: Context) -> None:
    """The worker's replies are still in step: no reply a candidate forged earlier displaced a real one."""
    ctx.request(p.Sync(), timeout=ctx.config.call_timeout_s)


def observed_timing(ctx: Context) -> None:
    """The speedup from what the clean reference process observed (`eval.observed`): its own windows around the
    candidate's blocks, every timed output checked in full. The worker's own times stay as a diagnostic; a candidate
    whose blocks it reports as faster than observed is flagged."""
    result = ctx.result
    if (ctx.session is None or ctx.lease.client is None or result.speedup is None or result.candidate_timing is None
            or result.reference_timing is None or ctx.config.timing_rule().method != "adaptive"):
        return
    reps = observed.reps_per_block(result.candidate_timing.median_ms, result.reference_timing.median_ms,
                                   ctx.input_bytes + 2 * ctx.output_bytes)  # the outputs, and their copy at END
    try:
        obs = observed.observe(ctx.session, ctx.session.label, ctx.lease.worker, ctx.lease.client,
                               secret=derive_seed(ctx.secret, "observed"), reps=reps,
                               timeout_s=ctx.config.timing_timeout_s, tolerance=ctx.tolerance())
    except observed.ObservedFailure as exc:
        if exc.kind == "incorrect":
            raise Verdict(Status.INCORRECT, trim(str(exc), 600)) from None
        if exc.kind in ("no_done", "switched", "no_time"):
            raise Verdict(Status.REJECTED, f"integrity: {trim(str(exc), 600)}") from None
        if exc.kind == "candidate":
            raise Verdict(Status.RUNTIME_ERROR, trim(str(exc), 600)) from None
        raise RuntimeError(str(exc)) from None
    result.observed = {**obs.summary(), "loop_speedup": result.speedup}  # the worker loop's, a diagnostic
    reported = result.observed["reported_candidate_ms"]
    if reported < OBSERVED_AGREEMENT * result.observed["candidate_ms"]:
        result.flags.append(f"observed: the worker reported {reported * 1000:.2f} us per repetition, the reference "
                            f"process observed {result.observed['candidate_ms'] * 1000:.2f} us; the observed figure "
                            "is the one scored")
    result.speedup = result.observed["speedup"]


def speed_of_light(ctx: Context) -> None:
    """SOL fraction against the probed ceilings; flag times under the roofline floor, and reject times under the
    byte floor that no correct kernel can reach (`roofline.REJECT_BELOW_BYTE_FLOOR`)."""
    result = ctx.result
    if ctx.ceilings is None or result.candidate_timing is None:
        return
    flushed = ctx.config.l2_flush and not ctx.small  # the floor holds for full-size inputs fetched from memory
    candidate_ms = result.observed.get("candidate_ms", result.candidate_timing.median_ms)  # observed, where it ran
    if candidate_ms <= 0:
        return
    result.sol_fraction, flag, rejection = judge_speed(ctx.problem, ctx.ceilings, candidate_ms / 1000.0,
                                                       flushed=flushed)
    if flag:
        result.flags.append(flag)
    if rejection:
        raise Verdict(Status.REJECTED, rejection)


def judge_speed(problem: Problem, ceilings: Ceilings, seconds: float, *, flushed: bool = True
                ) -> tuple[float | None, str, str]:
    """SOL fraction of a measured time, an audit flag when it beats the roofline floor, and a rejection when it
    beats the byte floor by more than any correct kernel can (only for a timing that flushed the L2).

    FLOPs and bytes come from the problem's META, or are traced from its source when it has none.
    """
    flops, nbytes = problem_size(problem)
    floor = ceilings.floor_s(flops, nbytes, problem.dtype)
    if floor is None:
        return None, "", ""
    byte_floor = ceilings.byte_floor_s(nbytes)
    if flushed and byte_floor and seconds < REJECT_BELOW_BYTE_FLOOR * byte_floor:
        return floor / seconds, "", (
            f"implausible: {seconds * 1e6:.1f} us is under {REJECT_BELOW_BYTE_FLOOR:.0%} of the {byte_floor * 1e6:.1f} "
            f"us that reading every input and parameter once and writing every output once ({nbytes / 1e6:.1f} MB) "
            f"takes at this device's measured copy bandwidth ({ceilings.copy_bytes_per_s / 1e12:.2f} TB/s): the "
            "kernel cannot have done the work (an input a correct kernel need not read is declared in "
            "META['unread_inputs'])")
    if seconds < IMPLAUSIBLE_BELOW_FLOOR * floor:
        return floor / seconds, (f"implausible: {seconds * 1e6:.1f} us beats the roofline floor of {floor * 1e6:.1f} "
                                 "us (FLOPs / peak, bytes / bandwidth); audit this result"), ""
    return floor / seconds, "", ""


@dataclass(frozen=True)
class Step:
    """One check: its name (a key of `phase_seconds`), function, GPU access, and where it runs: "any" device,
    only on a GPU, or wherever timings are taken ("timed": a GPU, or the CPU with `eval.cpu_timing`).

    access: "shared", "exclusive", "none", "per_trial" (the step holds the gate itself, shared,
    around each unit of its GPU work) or "window" (the step holds it itself, exclusively, once the candidates
    that share its timing window are all there: none of them waits for the others while holding it).
    """

    name: str
    run: Callable[[Context], None]
    access: str
    runs: str = "any"
    enabled: Callable[[EvalConfig], bool] = lambda config: True  # a preset may leave the step out
    scores: bool = False  # the step only serves the speedup: left out where none is scored (`Context.unscored`)


PIPELINE: tuple[Step, ...] = (
    Step("load", load, "shared"),
    Step("soundness", soundness, "shared"),
    Step("correctness", trials, "per_trial"),
    Step("stage", stage_timing_inputs, "shared", runs="timed", scores=True),
    Step("kernels", own_kernels, "exclusive"),
    Step("hidden_work", hidden_work, "exclusive", runs="gpu", enabled=lambda c: c.hidden_work_check, scores=True),
    Step("host_bound", host_bound, "exclusive", runs="gpu", scores=True),  # before timing: one hold with the above
    Step("timing", time_candidate, "window", runs="timed", scores=True),
    Step("observed", observed_timing, "exclusive", runs="gpu", enabled=lambda c: c.observed_timing, scores=True),
    Step("speed_of_light", speed_of_light, "none", runs="gpu", scores=True),
    Step("in_order", in_order, "none"),
)


def run_pipeline(ctx: Context, pipeline: Sequence[Step] = PIPELINE) -> None:
    """Run every step of `pipeline` in order, holding the GPU gate per run of same-access steps; decide `correct` at
    the end."""
    ctx.result.preset = ctx.config.preset
    runs = {"any", "timed", "gpu"} if ctx.on_gpu else {"any", "timed"} if ctx.timed else {"any"}
    steps = [s for s in pipeline if s.runs in runs and s.enabled(ctx.config)]
    i = 0
    while i < len(steps):
        j = i
        while j < len(steps) and steps[j].access == steps[i].access:
            j += 1
        with ctx.lease.gate.hold("none" if steps[i].access in ("per_trial", "window") else steps[i].access):
            for step in steps[i:j]:
                if step.scores and ctx.unscored:
                    continue
                t0 = time.perf_counter()
                try:
                    step.run(ctx)
                except torch.OutOfMemoryError:  # the parent's own share of the GPU ran out
                    if ctx.alone:
                        raise
                    raise RetryAlone() from None
                finally:
                    ctx.result.phase_seconds[step.name] = round(time.perf_counter() - t0, 4)
        i = j
    notes = [f"not scored as a speedup: {ctx.unscored}"] if ctx.unscored else []
    if not ctx.on_gpu:
        notes.append("CPU interpreter: timings not meaningful")
    if ctx.small:
        notes.append("checked at the problem's reduced sizes")
    ctx.result.status = Status.CORRECT
    ctx.result.reason = "correct" + (f" ({'; '.join(notes)})" if notes else "")


def timing_note(config: EvalConfig, reference: dict[str, float], candidate: dict[str, float]) -> str:
    """How a non-default timing was taken, with both sides' mean and median (Timing keeps only the median).

    Times are printed to the nanosecond, so the speedup can be recomputed from the note even at a few µs."""
    if config.timing_method == "fixed":
        method = (f"{config.fixed_reps} calls after {config.fixed_warmup_calls} warm-up calls and a dropped one, "
                  "each synchronised, no lead, the candidate with autograd on")
    else:
        method = "adaptive, interleaved"
    flushed = f"flushed ({config.l2_flush_bytes or 'twice its size in'} bytes written)" if config.l2_flush else "not flushed"
    return (f"timing ({config.preset}): {method}, L2 {flushed}, speedup from "
            f"the {config.timing_statistic}; reference mean {reference.get('mean_ms', float('nan')):.6f} ms, "
            f"median {reference['median_ms']:.6f} ms; candidate mean {candidate.get('mean_ms', float('nan')):.6f} ms, "
            f"median {candidate['median_ms']:.6f} ms")


# Kernels of the libraries a candidate calls: PyTorch (incl. its FlashAttention copy), CUB/Thrust, CUTLASS, cuBLAS,
# cuDNN. Namespaces honest code would reuse for its own kernels (`flash`, say) are left out; vendor GEMM names
# are recognised by their tile shapes (`ampere_sgemm_128x64_nn`), not by a prefix an honest name could start with.
_LIBRARY_NAMESPACES = frozenset({"at", "c10", "cub", "thrust", "cutlass", "cudnn", "xmma_cudnn", "pytorch_flash",
                                 "cublas", "cublasLt"})
_LIBRARY_NAME = re.compile(r"^(nvjet_|cutlass_\d|cublas|cudnn|(ampere|volta|turing|maxwell|sm\d+)_\w*?\d+x\d+)|_cublas$")


def kernel_base_name(profiler_name: str) -> str:
    """A kernel's own name as the profiler reports it, in any of the forms a CUDA kernel takes.

    `void ns::my_kernel<float>(float*, int)`, `void (anonymous namespace)::k<16>(float*)` and the
    mangled `_ZN2ns9my_kernelIfEEvPfi` or `_Z9my_kernelPfi` all give `my_kernel`/`k`; Triton and
    `extern "C"` names pass through.
    """
    return _qualified_name(profiler_name)[-1]


def qualified_name(kernel: str) -> tuple[str, ...]:
    """A kernel's namespaces and name, from a profiled name in any form or from a mangled symbol: `void
    kh::inner::k<1>(float*)` and `_ZN2kh5inner1kILi1EEvPf` both give ("kh", "inner", "k")."""
    return tuple(_qualified_name(kernel))


def is_library_kernel(profiler_name: str) -> bool:
    """Whether a profiled kernel belongs to a library (PyTorch, CUB, CUTLASS, cuBLAS, cuDNN, ...).

    Such a kernel never counts as the candidate's own, whatever the candidate named its kernels: a
    decoy could otherwise define (or launch on one element) a kernel named like the library kernel
    that does the real work, e.g. `vectorized_elementwise_kernel`, and have that work counted as its own.
    """
    parts = _qualified_name(profiler_name)
    return (len(parts) > 1 and parts[0] in _LIBRARY_NAMESPACES) or bool(_LIBRARY_NAME.search(parts[-1]))


def _qualified_name(profiler_name: str) -> list[str]:
    """The namespace path and name of a profiled kernel, template arguments and signature dropped."""
    name = profiler_name.strip()
    if name.startswith("_Z"):
        return _demangled_path(name) or [name]
    name = name.replace("(anonymous namespace)", "_anonymous_")
    name = name.split("(", 1)[0]
    depth, kept = 0, []
    for ch in name:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            kept.append(ch)
    words = "".join(kept).split()
    return (words[-1] if words else name).split("::")


def _demangled_path(mangled: str) -> list[str]:
    """The identifiers of an Itanium-mangled function name (`_Z<len><id>` or `_ZN<len><id>...[I...]E`)."""
    nested = mangled.startswith("_ZN")
    rest = mangled[3:] if nested else mangled[2:]
    path = []
    while rest and rest[0].isdigit():
        digits = len(rest) - len(rest.lstrip("0123456789"))
        length = int(rest[:digits])
        path.append(rest[digits:digits + length])
        rest = rest[digits + length:]
        if not nested:
            break
    return ["_anonymous_" if part.startswith("_GLOBAL__N") else part for part in path]
