"""The check pipeline: plain functions, run in order on one evaluation's `Context`.

load -> correctness trials -> stage timing inputs -> own kernels -> hidden work -> time ->
timed outputs -> speed of light -> replies in order. Each step either returns (the candidate passed it) or
raises `Verdict`. Each declares the access to its GPU it needs (`GpuGate`): consecutive
steps with the same access share one hold, and only the steps whose numbers depend on
having the GPU alone (kernel shares, back-to-back wall time, timing) hold it exclusively.
The timing step may time several candidates of one problem against one timing of the reference
(`eval.process._windows`, `measure.time_group`); each is then judged on its own measurement, as alone.
The correctness trials hold it shared one trial at a time ("per_trial"): a timing waiting for
the GPU then waits for the trial in flight, not for every trial of every other candidate.

The rules come from `EvalConfig`: the defaults are the strict ones; a preset such as
`eval=kernelbench` changes the tolerance, precision, seeding, hidden shapes, own-kernel
policy, the two integrity checks a preset may drop (hidden work, timed outputs) and the timing
method. Everything a strict check adds beyond those stays on under every preset, since it is
the sandbox itself (static refusals, the tamper snapshot, output type and aliasing checks,
poisoned allocations, unchanged inputs).

This module is the step table (`PIPELINE`) and its runner, with the first and last steps; the others live by job:
`trials` (correctness), `staging` (timing inputs on the device), `kernel_evidence` (own kernels) and
`timing_steps` (hidden work, host-bound sides, timing, observed timing, speed of light). What they share (the
`Context`, `Verdict`, the retries, the stage table) is in `context`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

import torch

from eval.crossing import protocol as p
from eval.config import EvalConfig
from eval.steps.context import Context, RetryAlone
from eval.steps.kernel_evidence import own_kernels
from eval._reference import Reference
from eval.result import Status
from eval.steps.staging import stage_timing_inputs
from eval.steps.timing_steps import hidden_work, host_bound, observed_timing, speed_of_light, time_candidate
from eval.steps.trials import trials
from problems import derive_seed, public_source


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


def in_order(ctx: Context) -> None:
    """The worker's replies are still in step: no reply a candidate forged earlier displaced a real one."""
    ctx.request(p.Sync(), timeout=ctx.config.call_timeout_s)


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
