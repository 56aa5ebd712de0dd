"""The correctness trials: the plan (published draws, hidden shapes and workloads, inputs off the published
distribution, value shapes, regimes and layouts, in the secret's order) and each trial's run and comparison against
the reference, decided in the parent."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, NoReturn

import torch

from eval.crossing import protocol as p
from eval.steps.context import Context, Verdict, tensor_bytes, trim
from eval._reference import encode_trial_args, traced_cost, wide_check_budget
from eval.result import UNFINISHED, Status
from problems import (
    DISTRIBUTIONS,
    HEADROOM,
    LAYOUTS,
    REGIMES,
    VALUE_SHAPES,
    Mismatch,
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
    scaled_atol,
    scaled_floats,
    sizes_varied_by_extras,
    transformed,
)


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
        stop_worker_draws(ctx)
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


def stop_worker_draws(ctx: Context) -> None:
    ctx.worker_draws = False
    ctx.result.flags.append("inputs carried to the worker: its draws from the same seed differed from the "
                            "parent's (get_inputs() is not reproducible across processes)")
