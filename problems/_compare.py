"""When do two forward outputs match: dtype-aware tolerances and the comparison itself.

A fact about problems, shared by the evaluator (which judges candidates with it in the trusted
parent) and lint (which checks that trivial outputs cannot pass), so both judge alike.
`Mismatch` is part of every stored result, so this module loads torch only when comparing:
reading results and reports never needs it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    # one check on a piece of (expected, got): (bad elements, how bad each is, or None: all alike)
    _Rule = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]

# Comparing needs ~10 float64 temporaries per element compared; taken in pieces of this many elements
# they stay under 1.6 GB however large the output (a float64 copy of a 6.4 GB float32 output alone is 12.8 GB).
_CHUNK_ELEMENTS = 1 << 24
_SCRATCH_PER_ELEMENT = 96  # bytes per piece element a comparison holds at most (81 measured: ~10 float64 temporaries)

DEFAULT_TOLERANCES: dict[str, float] = {
    "float32": 1e-4,
    "float64": 1e-7,
    "float16": 1e-2,
    "bfloat16": 1e-2,
}


def tolerance(dtype: str, atol: float | None = None, rtol: float | None = None) -> tuple[float, float]:
    """atol, rtol: the given values where set, else the dtype default."""
    default = DEFAULT_TOLERANCES.get(dtype, 1e-4)
    return (default if atol is None else atol), (default if rtol is None else rtol)


@dataclass
class Mismatch:
    """Where a candidate output first disagreed with the reference."""

    output: int
    reason: str
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    worst_index: list[int] | None = None
    mismatch_fraction: float | None = None
    trial: int | None = None
    expected: float | None = None
    got: float | None = None


def compare(expected: list[torch.Tensor], got: list[torch.Tensor], atol: float | list[float], rtol: float,
            trial: int | None = None) -> Mismatch | None:
    """First disagreement between output lists, or None when every output matches.

    Checks count, shape, dtype, the NaN pattern, +/-Inf positions, then |got - exp| <= atol + rtol*|exp|,
    each over the whole output before the next, in float64 pieces of at most _CHUNK_ELEMENTS elements.
    `atol` is one value for every output, or one per output (`scaled_atol`).
    """
    if len(expected) != len(got):
        return Mismatch(output=-1, reason=f"returned {len(got)} outputs, expected {len(expected)}", trial=trial)
    atols = atol if isinstance(atol, list) else [atol] * len(expected)
    for i, (exp, out) in enumerate(zip(expected, got)):
        mismatch = _compare_one(i, exp, out.to(exp.device), atols[i], rtol)
        if mismatch is not None:
            mismatch.trial = trial
            return mismatch
    return None


# The absolute tolerance follows the outputs' scale off the published distribution at most up to this share of the
# trial's mean |output|: past it, a tolerance would pass values unrelated to the answer.
_ATOL_SHARE_CAP = 1e-2


def magnitude(t: torch.Tensor) -> float:
    """Mean |t| over its finite elements (0.0 for none, or for a tensor that is not floating point)."""
    import torch

    if not t.is_floating_point() or t.numel() == 0:
        return 0.0
    total, count = 0.0, 0
    for _, (piece,) in flat_chunks(t):
        p = piece.double()
        finite = torch.isfinite(p)
        total += float(torch.where(finite, p.abs(), 0.0).sum())
        count += int(finite.sum())
    return total / count if count else 0.0


def scaled_atol(atol: float, published: list[float], trial: list[float]) -> list[float]:
    """Per output, `atol` grown by how much larger the output is on inputs moved off the published distribution.

    `atol` was chosen for the published outputs' scale. Inputs scaled by 4 make a degree-3 output 64 times larger,
    and with it every honest kernel's rounding error (a reordered sum of large terms that cancel): the fp32
    reference itself then misses the exact answer by more than `atol`. Growing `atol` with the mean |output| keeps
    the same demand relative to the answer; it never shrinks, and never passes an error over 1 % of the trial's
    mean |output| (a published mean near 0 would otherwise grow it without bound).
    """
    grown = []
    for pub, now in zip(published, trial):
        growth = now / max(pub, atol / _ATOL_SHARE_CAP) if now > 0 else 0.0
        grown.append(atol * max(1.0, growth))
    return grown


def compare_structure(expected: str, got: str, trial: int | None = None) -> Mismatch | None:
    """A Mismatch when the output containers differ (`problems.runtime.output_structure` texts), else None.

    Strict as the reference is written: a 1-tuple, a list or a dict holding the reference's tensor does
    not match a bare tensor, though all flatten to the same outputs.
    """
    if got == expected:
        return None
    return Mismatch(output=-1, reason=f"output structure differs: the reference returns {describe_structure(expected)}, "
                                      f"the candidate {describe_structure(got)}", trial=trial)


_STRUCTURE_CHARS = 200


def describe_structure(structure: str) -> str:
    """An output structure text as a phrase: "a tensor", "a dict {'y': (tensor,)}", "None"."""
    text = structure if len(structure) <= _STRUCTURE_CHARS else structure[:_STRUCTURE_CHARS] + "..."
    kinds = {"(": "a tuple ", "[": "a list ", "{": "a dict ", "<": "a value of type "}
    if structure in ("tensor", "None"):
        return "a tensor" if structure == "tensor" else "None"
    if not structure:
        return "nothing it described"
    return kinds.get(structure[0], "") + (text.strip("<>") if structure[0] == "<" else text)


def compare_scratch_bytes(elements: int) -> int:
    """Memory comparing outputs of at most `elements` elements needs beside them: one piece's worth."""
    return _SCRATCH_PER_ELEMENT * min(elements, _CHUNK_ELEMENTS)


def flat_chunks(*tensors: torch.Tensor) -> Iterator[tuple[int, list[torch.Tensor]]]:
    """(offset, pieces): same-shaped tensors read in row-major order, at most _CHUNK_ELEMENTS at a time.

    Pieces keep their tensor's dtype; contiguous tensors give views, others are gathered piece by piece,
    so walking a tensor never copies it whole.
    """
    numel = tensors[0].numel()
    for start in range(0, numel, _CHUNK_ELEMENTS):
        stop = min(numel, start + _CHUNK_ELEMENTS)
        yield start, [_flat_piece(t, start, stop) for t in tensors]


def _flat_piece(t: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    import torch

    if t.is_contiguous():
        return t.reshape(-1)[start:stop]
    return take_flat(t, torch.arange(start, stop, device=t.device))


def take_flat(t: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """t's elements at row-major indices `flat`, whatever its strides and dtype, without copying it whole."""
    import torch

    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(t.element_size())
    if bits is None:  # complex128: take supports it, no integer is that wide
        return torch.take(t, flat)
    return torch.take(t.view(bits), flat).view(t.dtype)  # as same-size integers: take lacks float8 and others


def _compare_one(i: int, exp: torch.Tensor, out: torch.Tensor, atol: float, rtol: float) -> Mismatch | None:
    if tuple(out.shape) != tuple(exp.shape):
        return Mismatch(output=i, reason=f"shape {tuple(out.shape)}, expected {tuple(exp.shape)}")
    if out.dtype != exp.dtype:
        return Mismatch(output=i, reason=f"dtype {out.dtype}, expected {exp.dtype}")
    if exp.numel() == 0:
        return None
    rules = _rules(exp, atol, rtol)
    if not any(_any_fires(rules, e, o) for _, (e, o) in flat_chunks(exp, out)):
        return None  # the common case, in one pass
    for reason, rule in rules:  # the first rule that fires anywhere names the mismatch, as the docstring orders them
        if any(bool(rule(e, o)[0].any()) for _, (e, o) in flat_chunks(exp, out)):
            return _located(i, reason, exp, out, rule)
    return None


def _any_fires(rules: list[tuple[str, _Rule]], e: torch.Tensor, o: torch.Tensor) -> bool:
    """Whether any rule finds a bad element in these pieces: their float64 copies made once, for all the rules, and
    one synchronisation (a GPU output of 67M elements took 12 passes and 12 waits rule by rule, 4 this way)."""
    if e.is_floating_point() or e.is_complex():
        e, o = e.double(), o.double()
    bad = rules[0][1](e, o)[0]
    for _, rule in rules[1:]:
        bad = bad | rule(e, o)[0]
    return bool(bad.any())


def _rules(exp: torch.Tensor, atol: float, rtol: float) -> list[tuple[str, _Rule]]:
    """The checks in order, each judging a whole output before the next looks at it."""
    if not (exp.is_floating_point() or exp.is_complex()):
        return [("values differ", _unequal)]
    return [
        ("NaN pattern differs (NaN where the reference has a number, or the reverse)", _nan_differs),
        ("Inf pattern differs", _inf_differs),
        (f"values differ beyond atol={atol:g}, rtol={rtol:g}", lambda e, o: _beyond_tolerance(e, o, atol, rtol)),
    ]


def _unequal(e: torch.Tensor, o: torch.Tensor) -> tuple[torch.Tensor, None]:
    return o != e, None  # in the integer dtype itself: float64 would merge int64 values past 2**53


def _nan_differs(e: torch.Tensor, o: torch.Tensor) -> tuple[torch.Tensor, None]:
    import torch

    return torch.isnan(e.double()) ^ torch.isnan(o.double()), None


def _inf_differs(e: torch.Tensor, o: torch.Tensor) -> tuple[torch.Tensor, None]:
    import torch

    e, o = e.double(), o.double()
    inf_e, inf_o = torch.isinf(e), torch.isinf(o)
    return (inf_e | inf_o) & ~(inf_e & inf_o & (torch.sign(e) == torch.sign(o))), None


def _beyond_tolerance(e: torch.Tensor, o: torch.Tensor, atol: float, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(bad, |o - e| where e is finite): computed in float64, so the tolerance boundary is exact."""
    import torch

    e, o = e.double(), o.double()
    diff = torch.where(torch.isfinite(e), (o - e).abs(), 0.0)
    return diff > atol + rtol * e.abs(), diff


def _located(i: int, reason: str, exp: torch.Tensor, out: torch.Tensor, rule: _Rule) -> Mismatch:
    """The Mismatch for `rule` over the whole output: errors over finite elements, the worst bad element
    (the first of equal ones, as argmax over the whole tensor picks it), the share of bad elements."""
    import torch

    max_abs = max_rel = 0.0
    bad_count, worst, worst_at = 0, float("-inf"), 0
    for start, (e_piece, o_piece) in flat_chunks(exp, out):
        bad, diff = rule(e_piece, o_piece)
        e, o = e_piece.double(), o_piece.double()
        abs_err = torch.where(torch.isfinite(e) & torch.isfinite(o), (o - e).abs(), 0.0)
        max_abs = max(max_abs, float(abs_err.max()))
        max_rel = _max_keeping_nan(max_rel, float((abs_err / e.abs().clamp_min(1e-12)).max()))
        bad_count += int(bad.sum())
        score = torch.where(bad, 1.0 if diff is None else diff.nan_to_num(posinf=1e300), -1.0)
        at = int(torch.argmax(score))
        if float(score[at]) > worst:  # strictly: an equal score in a later piece comes later
            worst, worst_at = float(score[at]), start + at
    index = [int(x) for x in torch.unravel_index(torch.tensor(worst_at), exp.shape)] if exp.dim() else []
    return Mismatch(
        output=i,
        reason=reason,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        worst_index=index,
        mismatch_fraction=bad_count / exp.numel(),
        expected=float(exp[tuple(index)].double()),
        got=float(out[tuple(index)].double()),
    )


def _max_keeping_nan(a: float, b: float) -> float:
    """max as torch's over a whole tensor: NaN if either is (a NaN in the reference makes the relative error NaN)."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)
