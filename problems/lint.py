"""Suite lint: is each problem sound enough to score candidates against?

The checks of one problem, in this process (`lint_problem_here`); `problems.lint_driver` runs each problem in a
subprocess of its own (so one that hangs or crashes cannot stall the rest), several at once:

- load:          the source parses, defines Model/get_inputs/get_init_inputs and imports
- memory:        at full size, what an evaluation needs fits the budget: the reference's traced peak
                 plus a candidate's copy of inputs, parameters and outputs and the outputs it returns
                 (`problems.cost.estimate_memory`, no allocation needed). Lint itself holds more (a
                 second input set, more output sets: `_lint_need`); when only that is over the budget,
                 the problem is not run and the run check says so
- metadata:      META's flops/bytes (if given) agree with the measured ones
- run:           Model(*get_init_inputs())(*get_inputs()) runs and returns tensors
- finite:        every output is finite
- deterministic: a second forward on the same inputs gives the same outputs
- input-dependence: outputs for another input seed differ by far more than the tolerance
- zero-output:   an all-zero output fails the evaluator's tolerance check
- constant-output: a constant output (mean or median of another seed's output, i.e. something
                 a candidate could hard-code) fails the tolerance check; the median is exact up to
                 _MEDIAN_SAMPLE elements, beyond that the median of an evenly strided sample
- trivial-expression: no output is matched by a one-line elementwise expression of the float
                 inputs while the reference does counted FLOPs (GEMM, conv, bmm...) beyond
                 TRIVIAL_FLOPS_PER_ELEMENT per output element: otherwise a candidate skips the real
                 work and still passes. The fixed family, over inputs that broadcast to the output:
                 `x`, `-x`, `x * x`, `abs(x)`, `relu(x)`, `sigmoid(x)`, `tanh(x)`, and over pairs of
                 distinct inputs `a + b`, `a - b`, `b - a`, `a * b` (at most MAX_EXPRESSIONS per
                 output: `problems._trivial_expressions`). A match without such FLOPs (a ReLU problem)
                 is the problem's own form: pass. Fails only when every output is matched: the FLOPs
                 are counted for the whole forward, so while one output is not, they may all be that
                 output's.
- extra-inputs:  every `get_extra_inputs()` set runs and gives finite outputs
- distributions: which of the evaluator's trials off the published distribution (`runtime.DISTRIBUTIONS`) run,
                 and which it skips: where the reference is not finite, or ill-conditioned (its own outputs
                 miss float64 past the tolerance: `problems.conditioning`, the evaluator's rule); fails when
                 it would skip them all (the problem is then open to a shortcut that relies on
                 get_inputs()'s distribution)

Every comparison walks outputs in bounded pieces (`problems._compare.flat_chunks`): its scratch memory
does not grow with the output. It needs nothing but the KernelBench format, so it runs unchanged on
KernelBench itself.
On the CPU, problems that declare `META["small"]` run at those reduced sizes (`--scale auto`);
the memory check always uses the full sizes.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils.flop_counter import FlopCounterMode

from problems._compare import (
    Mismatch,
    compare,
    compare_scratch_bytes,
    flat_chunks,
    magnitude,
    scaled_atol,
    take_flat,
    tolerance,
)
from problems._trivial_expressions import matching_expressions
from problems.conditioning import ill_conditioned
from problems.cost import Cost, describe_bytes, describe_flops, estimate_memory, measure_cost, static_bytes
from problems.problem import Problem, ProblemError
from problems.runtime import (
    DISTRIBUTIONS,
    build_model,
    draw_inputs,
    has_small_sizes,
    load_module,
    make_extra_inputs,
    make_inputs,
    output_tensors,
    run_forward,
    strict_precision,
    transformed,
)

DEFAULT_BUDGET_BYTES = 24 * 10**9
_TOO_BIG = "not run: the full-size problem does not fit the memory budget"
MODEL_SEED = 1234
SEED_A, SEED_B, SEED_EXTRA = 1, 2, 3
DEPENDENCE_RATIO = 10.0  # outputs across seeds must differ by this many tolerances ...
DEPENDENCE_FRACTION = 0.01  # ... on at least this share of elements
DETERMINISM_SHARE = 0.01  # reruns may differ (GPU reductions) by at most this share of the tolerance
# The flop counter counts 2*K per output element of a GEMM/bmm (K: reduction length) and
# 2*Cin*kh*kw/groups of a conv, elementwise ops 0: above 8, the reference contracts over more than
# 4 elements per output, work an elementwise expression cannot stand in for.
TRIVIAL_FLOPS_PER_ELEMENT = 8.0
# the constant-output median is taken over at most this many elements: exact below, and sorting a whole
# multi-GB output would need several copies of it
_MEDIAN_SAMPLE = 1 << 24


@dataclass
class Check:
    """One lint check: status is "pass", "fail" or "skip" (could not be assessed; detail says why)."""

    name: str
    status: str
    detail: str = ""


@dataclass
class LintReport:
    """All checks of one problem."""

    problem_id: str
    checks: list[Check] = field(default_factory=list)
    scale: str = "full"
    seconds: float = 0.0
    needs_bytes: int | None = None  # set when the budget stopped a full-size run: what lint needed

    @property
    def ok(self) -> bool:
        """No check failed (skipped checks do not fail a problem)."""
        return all(c.status != "fail" for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]


def _tolerance(problem: Problem) -> tuple[float, float]:
    return tolerance(problem.dtype, problem.atol, problem.rtol)


def _as_float(t: torch.Tensor) -> torch.Tensor:
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.double() if (t.dtype == torch.float64 or not t.is_floating_point()) else t.float()


def _excess(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> tuple[float, float]:
    """(max |a-b| / (atol + rtol|b|), share of elements beyond tolerance), with b as the expected value."""
    if a.shape != b.shape:
        return float("inf"), 1.0
    worst, beyond, count = 0.0, 0, 0
    for _, (piece_a, piece_b) in flat_chunks(a, b):
        fa, fb = _as_float(piece_a), _as_float(piece_b)
        ratio = torch.nan_to_num((fa - fb).abs() / (atol + rtol * fb.abs()), nan=float("inf"))
        worst = max(worst, float(ratio.max()))
        beyond += int((ratio > 1).sum())
        count += ratio.numel()
    return worst, (beyond / count if count else 0.0)


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal element for element, NaN equal to NaN (same-shaped tensors)."""
    return all(torch.equal(_as_float(piece_a).nan_to_num(), _as_float(piece_b).nan_to_num())
               for _, (piece_a, piece_b) in flat_chunks(a, b))


def _all_finite(t: torch.Tensor) -> bool:
    """No NaN or Inf anywhere (integers always pass)."""
    return all(bool(torch.isfinite(_as_float(piece)).all()) for _, (piece,) in flat_chunks(t))


def _finite_mean(t: torch.Tensor) -> float:
    """Mean of the finite values (0 if none), summed in float64."""
    total, count = 0.0, 0
    for _, (piece,) in flat_chunks(t):
        values = _as_float(piece).double()
        finite = torch.isfinite(values)
        total += float(torch.where(finite, values, 0.0).sum())
        count += int(finite.sum())
    return total / count if count else 0.0


def _finite_median(t: torch.Tensor) -> float:
    """torch's median (the lower middle value) of the finite values (0 if none): of all of them up to
    _MEDIAN_SAMPLE elements, of an evenly strided sample of at most that many beyond."""
    step = max(1, -(-t.numel() // _MEDIAN_SAMPLE))
    values = _as_float(take_flat(t, torch.arange(0, t.numel(), step, device=t.device))).reshape(-1)
    finite = values[torch.isfinite(values)]
    return float(finite.median()) if finite.numel() else 0.0


def _constant_like(t: torch.Tensor, source: torch.Tensor, how: str) -> torch.Tensor:
    """A tensor shaped like `t` filled with the mean or median of `source` (in t's dtype)."""
    value = _finite_mean(source) if how == "mean" else _finite_median(source)
    if not (t.is_floating_point() or t.is_complex()):
        value = round(value)
    return torch.full_like(t, value)


def _lint_need(cost: Cost) -> int:
    """Device memory lint itself needs at full size, beyond an evaluation's `estimate_memory`.

    The reference's peak, plus beside a forward the clones `run_forward` makes of its inputs, the
    other seed's inputs and one kept output set; or beside the checks' two kept output sets one made
    output (zeros, a constant, an expression): at most two more input and two more output sets,
    and a comparison's scratch.
    """
    scratch = compare_scratch_bytes(cost.output_bytes)  # an output has at most as many elements as bytes
    return cost.peak_bytes + 2 * cost.input_bytes + 2 * cost.output_bytes + scratch


def _memory_check(problem: Problem, budget: int) -> tuple[Check, Check | None, str | None, int | None, int | None]:
    """(memory check, metadata check or None, why not to run at full size or None, lower bound, the bytes
    lint needed where the budget is why) from a traced full-size cost.

    The memory check judges the problem (does an evaluation fit?); lint runs it only if lint's own
    larger working set fits too.

    When the forward cannot be traced without data, the check is decided from the inputs and
    parameters alone if they already exceed the budget, is settled by the measured peak of the real
    run on a GPU, and is skipped otherwise; the lower bound (bytes) is returned for that.
    """
    try:
        cost = measure_cost(problem)
    except Exception as exc:  # data-dependent shapes, ops without a fake kernel, numpy inside
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}" if str(exc) else type(exc).__name__
        try:
            lower = 2 * sum(static_bytes(problem))
        except Exception:
            return Check("memory", "skip", f"full size could not be traced ({reason})"), None, None, None, None
        if lower > budget:
            detail = (f"inputs and parameters alone need {describe_bytes(lower)} with a candidate copy, "
                      f"over {describe_bytes(budget)}")
            return Check("memory", "fail", detail), None, _TOO_BIG, lower, None  # intermediates unknown
        detail = (
            f"forward not traceable without data ({reason}); inputs+params with a candidate copy need "
            f"{describe_bytes(lower)}, intermediates unknown"
        )
        return Check("memory", "skip", detail), None, None, lower, None
    need, own = estimate_memory(cost), _lint_need(cost)
    detail = (
        f"needs ~{describe_bytes(need)} (reference peak {describe_bytes(cost.peak_bytes)} + candidate copy of "
        f"inputs/params/outputs + the outputs it returns) of a {describe_bytes(budget)} budget"
    )
    memory = Check("memory", "pass" if need <= budget else "fail", detail)
    if need > budget:
        not_run = _TOO_BIG
    elif own > budget:
        not_run = (f"not run: fits the evaluator (~{describe_bytes(need)}) but lint itself needs "
                   f"~{describe_bytes(own)} (the reference's peak, two more input and output sets, compare "
                   f"scratch) over the {describe_bytes(budget)} budget; raise --budget-gb")
    else:
        not_run = None
    metadata = None
    if "bytes" in problem.meta or "flops" in problem.meta:
        stale = []
        if problem.bytes_moved is not None and abs(problem.bytes_moved - cost.bytes) > 0.01 * max(cost.bytes, 1):
            stale.append(f"bytes {problem.bytes_moved:.0f} != measured {cost.bytes}")
        if (
            problem.flops is not None
            and problem.meta.get("flops_method") != "hand"
            and abs(problem.flops - cost.flops) > 0.01 * max(cost.flops, 1)
        ):
            stale.append(f"flops {problem.flops:.0f} != measured {cost.flops}")
        metadata = Check(
            "metadata",
            "fail" if stale else "pass",
            "; ".join(stale) + " (run python -m problems.update_meta --write)" if stale else "flops/bytes match",
        )
    return memory, metadata, not_run, None, max(need, own) if not_run else None


def _run_checks(problem: Problem, device: str, scale: str, budget: int, report: LintReport) -> None:
    checks = report.checks
    small = scale == "small" or (scale == "auto" and device == "cpu" and has_small_sizes(problem))
    report.scale = "small" if small and has_small_sizes(problem) else "full"
    memory, metadata, not_run, lower_bound, needed = _memory_check(problem, budget)
    checks.append(memory)
    if metadata is not None:
        checks.append(metadata)
    if report.scale == "full" and not_run:
        checks.append(Check("run", "skip", not_run))
        report.needs_bytes = needed
        return
    try:
        module = load_module(problem, small=report.scale == "small")
    except Exception as exc:
        checks.append(Check("load", "fail", _short_exc(exc)))
        return
    checks.append(Check("load", "pass"))
    atol, rtol = _tolerance(problem)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    try:
        model = build_model(module, MODEL_SEED, device)
        inputs_a = make_inputs(module, SEED_A, device)
        out_a = output_tensors(run_forward(model, inputs_a))
        out_a2 = output_tensors(run_forward(model, inputs_a))
    except Exception as exc:
        checks.append(_run_failure(exc))
        return
    deterministic = _check_deterministic(out_a, out_a2, atol, rtol)
    del out_a2  # at most two output sets kept at once (`_lint_need`)
    try:
        out_b = output_tensors(run_forward(model, make_inputs(module, SEED_B, device)))
    except Exception as exc:
        checks.append(_run_failure(exc))
        return
    if not out_a:
        checks.append(Check("run", "fail", "forward returned no tensors"))
        return
    shapes = ", ".join(f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}" for t in out_a)
    checks.append(Check("run", "pass", f"outputs {shapes}"))
    if device == "cuda" and report.scale == "full" and memory.status == "skip" and lower_bound is not None:
        # settle the untraceable case with the measured peak, + a candidate copy (the lower bound's half)
        # and its returned outputs, as `estimate_memory` adds them
        outputs = sum(t.numel() * t.element_size() for t in out_a)
        need = torch.cuda.max_memory_allocated() + lower_bound // 2 + 2 * outputs
        memory.status = "pass" if need <= budget else "fail"
        memory.detail = (f"measured: needs ~{need / 1e9:.2f} GB (peak allocated + candidate copy + returned "
                         f"outputs) of {budget / 1e9:.1f} GB")
    finite = _check_finite(out_a)
    checks.append(finite)
    checks.append(deterministic)
    checks.append(_check_dependence(out_a, out_b, atol, rtol))
    checks.extend(_check_degenerate(out_a, out_b, atol, rtol))
    del out_b
    checks.append(_check_trivial_expression(model, inputs_a, out_a, atol, rtol))
    checks.append(_check_unread_inputs(problem, module, model, inputs_a, out_a, device, atol, rtol))
    published = [magnitude(t) for t in out_a]
    del inputs_a, out_a  # the extra input sets run beside the model alone
    checks.append(_check_extra_inputs(module, model, device))
    tolerances = (atol, rtol, published)
    unsound = [c.name for c in (finite, deterministic) if c.status != "pass"]  # then every trial fails, not these
    checks.append(Check("distributions", "skip", f"the reference fails {' and '.join(unsound)} on the published "
                                                 "inputs already") if unsound else
                  _check_distributions(problem, report.scale, module, model, device, tolerances))


def _run_failure(exc: Exception) -> Check:
    if isinstance(exc, ProblemError):  # outputs flattened as the evaluator flattens them, and not all tensors
        return Check("run", "fail", str(exc))
    return Check("run", "fail", _short_exc(exc))


def _check_finite(outs: list[torch.Tensor]) -> Check:
    bad = [i for i, t in enumerate(outs) if (t.is_floating_point() or t.is_complex()) and not _all_finite(t)]
    return Check("finite", "fail", f"non-finite values in output(s) {bad}") if bad else Check("finite", "pass")


def _check_deterministic(first: list[torch.Tensor], second: list[torch.Tensor], atol: float, rtol: float) -> Check:
    if len(first) != len(second) or any(a.shape != b.shape for a, b in zip(first, second)):
        return Check("deterministic", "fail", "two forwards on the same inputs return different shapes")
    if all(_identical(a, b) for a, b in zip(first, second)):
        return Check("deterministic", "pass", "bitwise identical reruns")
    worst = max(_excess(b, a, atol, rtol)[0] for a, b in zip(first, second))
    if worst <= DETERMINISM_SHARE:  # e.g. atomics in GPU reductions: harmless next to the tolerance
        return Check("deterministic", "pass", f"reruns differ by {worst:.2g} of the tolerance")
    return Check("deterministic", "fail",
                 f"two forwards on the same inputs differ by {worst:.3g}x the tolerance (randomness in forward?)")


def _check_dependence(out_a: list[torch.Tensor], out_b: list[torch.Tensor], atol: float, rtol: float) -> Check:
    weak = []
    for i, (a, b) in enumerate(zip(out_a, out_b)):
        ratio, share = _excess(a, b, atol, rtol)
        if ratio < DEPENDENCE_RATIO or share < DEPENDENCE_FRACTION:
            weak.append(f"output {i} changes by at most {ratio:.3g}x the tolerance, on {share:.2%} of elements")
    if weak:
        return Check("input-dependence", "fail", "; ".join(weak))
    return Check("input-dependence", "pass", f"atol={atol:g} rtol={rtol:g}")


def _check_degenerate(out_a: list[torch.Tensor], out_b: list[torch.Tensor], atol: float, rtol: float) -> list[Check]:
    """Would an all-zero output, or a constant a candidate could hard-code, pass the evaluator's check?"""
    zero = _made_mismatch(out_a, lambda i: torch.zeros_like(out_a[i]), atol, rtol)
    if zero is None:
        zero_check = Check("zero-output", "fail", "an all-zero output passes the tolerance check")
    else:
        share = zero.mismatch_fraction or 0
        zero_check = Check("zero-output", "pass", f"zeros mismatch {share:.1%} of output {zero.output}")
    passing = [
        how for how in ("mean", "median")
        if _made_mismatch(out_a, lambda i: _constant_like(out_a[i], out_b[i], how), atol, rtol) is None
    ]
    if passing:
        detail = f"a constant output (the {' and '.join(passing)} of another seed's output) passes the tolerance check"
        return [zero_check, Check("constant-output", "fail", detail)]
    return [zero_check, Check("constant-output", "pass")]


def degenerate_outputs(out_a: list[torch.Tensor], out_b: list[torch.Tensor], atol: float, rtol: float) -> str:
    """Why a problem cannot be scored honestly, judged from the reference's outputs on two independent input draws
    (`out_a`, `out_b`), or "": lint's input-dependence, zero-output and constant-output checks, the ones a kernel
    that skips the work entirely passes. The evaluator refuses to score such a problem as a speedup, so it uses this
    one rule too."""
    failed = [c for c in (_check_dependence(out_a, out_b, atol, rtol), *_check_degenerate(out_a, out_b, atol, rtol))
              if c.status == "fail"]
    return "; ".join(f"{c.name}: {c.detail}" for c in failed)


def _made_mismatch(expected: list[torch.Tensor], make: Callable[[int], torch.Tensor], atol: float,
                   rtol: float) -> Mismatch | None:
    """compare(expected, [make(0), make(1), ...]), making one output at a time: a whole made set
    would be one more output set beside the two lint keeps."""
    for i, exp in enumerate(expected):
        mismatch = compare([exp], [make(i)], atol, rtol)
        if mismatch is not None:
            mismatch.output = i
            return mismatch
    return None


def _counted_flops(model: torch.nn.Module, inputs: list) -> int:
    """FLOPs of one reference forward, by the counter `problems.cost` uses (elementwise ops count 0)."""
    with FlopCounterMode(display=False) as counter:
        run_forward(model, inputs)
    return int(counter.get_total_flops())


def _check_trivial_expression(model: torch.nn.Module, inputs: list, outs: list[torch.Tensor],
                              atol: float, rtol: float) -> Check:
    """Could a one-line elementwise expression of the inputs stand in for a reference that does real work?"""
    matched, tried = matching_expressions(inputs, outs, atol, rtol)
    if not matched:
        return Check("trivial-expression", "pass", f"no output matches any of {tried} tried expressions")
    found = "; ".join(f"output {i} is matched by `{text}`" for i, text in matched.items())
    if len(matched) < len(outs):  # the other outputs still need the reference's work, and its FLOPs
        rest = [i for i in range(len(outs)) if i not in matched]
        return Check("trivial-expression", "pass", f"{found}; output(s) {rest} are not")
    try:
        flops = _counted_flops(model, inputs)
    except Exception as exc:
        return Check("trivial-expression", "skip", f"{found}; FLOPs not countable: {_short_exc(exc)}")
    per_element = flops / max(1, sum(t.numel() for t in outs))
    if per_element > TRIVIAL_FLOPS_PER_ELEMENT:
        return Check("trivial-expression", "fail", f"{found} although the reference does {describe_flops(flops)} "
                                                   f"({per_element:.3g} per output element)")
    return Check("trivial-expression", "pass", f"{found}: the problem's own elementwise form "
                                               f"({describe_flops(flops)} counted)")


def _check_unread_inputs(problem: Problem, module, model: torch.nn.Module, inputs: list, out: list[torch.Tensor],
                         device: str, atol: float, rtol: float) -> Check:
    """Does each input the byte floor counts change the output, and does none declared unread?

    The evaluator rejects a time under a share of the byte floor (every input read once), so an input whose values
    never reach the output must be declared in META['unread_inputs'], or an honest kernel that skips it may be
    rejected; and a declared one must truly not matter. Each input in turn is redrawn (another seed), the rest
    kept."""
    try:
        other = make_inputs(module, SEED_B, device)
        ignored, needed = [], []
        for i, (a, b) in enumerate(zip(inputs, other)):
            if not isinstance(a, torch.Tensor) or _identical(a, b):
                continue  # not a tensor, or the same in every draw: nothing to learn by redrawing it
            mixed = list(inputs)
            mixed[i] = b
            changed = _made_mismatch(out, lambda k, o=output_tensors(run_forward(model, mixed)): o[k], atol, rtol)
            if changed is None and i not in problem.unread_inputs:
                ignored.append(i)
            elif changed is not None and i in problem.unread_inputs:
                needed.append(i)
        del other
    except Exception as exc:
        return Check("unread-inputs", "skip", _short_exc(exc))
    if needed:
        return Check("unread-inputs", "fail", f"META['unread_inputs'] declares input(s) {needed} unread, but redrawing "
                                              "them changes the output")
    if ignored:
        return Check("unread-inputs", "fail", f"redrawing input(s) {ignored} leaves the output unchanged within "
                                              "tolerance: either a correct kernel need not read them (declare them "
                                              "in META['unread_inputs'], or the byte floor counts their bytes), or "
                                              "under get_inputs()'s distribution the output does not depend on their "
                                              "values (a shortcut that reads only the rest passes: draw them so "
                                              "that it does)")
    declared = f"; declared unread: {list(problem.unread_inputs)}" if problem.unread_inputs else ""
    return Check("unread-inputs", "pass", f"every counted input changes the output{declared}")


def _check_extra_inputs(module, model: torch.nn.Module, device: str) -> Check:
    try:
        extra = make_extra_inputs(module, SEED_EXTRA, device)
        bad = []
        for j, inputs in enumerate(extra):
            outs = output_tensors(run_forward(model, inputs))
            if not outs or not all(_all_finite(t) for t in outs):
                bad.append(f"set {j}: no tensors or non-finite outputs")
    except Exception as exc:
        return Check("extra-inputs", "fail", _short_exc(exc))
    if bad:
        return Check("extra-inputs", "fail", "; ".join(bad))
    if not extra:
        return Check("extra-inputs", "skip", "none defined")
    return Check("extra-inputs", "pass", f"{len(extra)} set(s)")


def _check_distributions(problem: Problem, scale: str, module, model: torch.nn.Module, device: str,
                         tolerances: tuple[float, float, list[float]]) -> Check:
    """The evaluator's trials off the published distribution that run here, decided as it decides them: the
    reference's outputs on SEED_A's inputs moved there must be finite and well-conditioned, with `atol` grown as the
    evaluator grows it (`tolerances`: atol, rtol and the published outputs' mean |value|); one input set at a time."""
    atol, rtol, published = tolerances
    try:
        cost = measure_cost(problem, small=scale == "small")
    except Exception:  # noqa: BLE001  a data-dependent forward: conditioning is not decided, as in the evaluator
        cost = None
    runs, not_finite, ill = [], [], []
    for name in DISTRIBUTIONS:
        inputs = transformed(draw_inputs(module, SEED_A, device), name, SEED_A)
        try:
            outs = output_tensors(run_forward(model, inputs))
        except Exception as exc:
            return Check("distributions", "fail", f"the reference raised on the {name} trial's inputs "
                                                  f"({_short_exc(exc)[:300]}): every evaluation would end there")
        if not outs or not all(_all_finite(t) for t in outs):
            not_finite.append(name)
            continue
        trial_atol = scaled_atol(atol, published, [magnitude(t) for t in outs])
        why = ill_conditioned(model, inputs, outs, trial_atol, rtol, cost.peak_bytes if cost else None)
        (ill if why else runs).append(f"{name} ({why})" if why else name)
        del inputs, outs
    detail = (f"runs: {', '.join(runs) or 'none'}; skipped, the reference not finite: {', '.join(not_finite) or 'none'}"
              f"; skipped, ill-conditioned: {', '.join(ill) or 'none'}")
    if not runs:
        return Check("distributions", "fail", detail + " (no trial off the published distribution can run: a "
                                                       "shortcut that relies on get_inputs()'s distribution passes)")
    return Check("distributions", "pass", detail)


def _short_exc(exc: BaseException) -> str:
    tail = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return tail[:500]


def lint_problem_here(problem: Problem, *, device: str = "cpu", scale: str = "auto",
                      budget: int = DEFAULT_BUDGET_BYTES) -> LintReport:
    """Lint one problem in this process (`problems.lint_driver`'s subprocess calls this; so can trusted tests)."""
    if device == "cuda":
        strict_precision()
        torch.backends.cudnn.benchmark = False
    report = LintReport(problem.id)
    start = time.perf_counter()
    try:
        _run_checks(problem, device, scale, budget, report)
    except Exception as exc:  # a bug surfacing through a weird problem must still give a report
        report.checks.append(Check("lint", "fail", f"lint itself failed: {_short_exc(exc)}"))
    report.seconds = time.perf_counter() - start
    return report
