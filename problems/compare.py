"""When do two forward outputs match: dtype-aware tolerances and the comparison itself.

A fact about problems, shared by the evaluator (which judges candidates with it in the trusted
parent) and lint (which checks that trivial outputs cannot pass), so both judge alike.
`Mismatch` is part of every stored result, so this module loads torch only when comparing:
reading results and reports never needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

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


def compare(expected: list[torch.Tensor], got: list[torch.Tensor], atol: float, rtol: float,
            trial: int | None = None) -> Mismatch | None:
    """First disagreement between output lists, or None when every output matches.

    Checks count, shape, dtype, the NaN pattern, +/-Inf positions, then |got - exp| <= atol + rtol*|exp|.
    """
    if len(expected) != len(got):
        return Mismatch(output=-1, reason=f"returned {len(got)} outputs, expected {len(expected)}", trial=trial)
    for i, (exp, out) in enumerate(zip(expected, got)):
        mismatch = _compare_one(i, exp, out.to(exp.device), atol, rtol)
        if mismatch is not None:
            mismatch.trial = trial
            return mismatch
    return None


def _compare_one(i: int, exp: torch.Tensor, out: torch.Tensor, atol: float, rtol: float) -> Mismatch | None:
    import torch

    if tuple(out.shape) != tuple(exp.shape):
        return Mismatch(output=i, reason=f"shape {tuple(out.shape)}, expected {tuple(exp.shape)}")
    if out.dtype != exp.dtype:
        return Mismatch(output=i, reason=f"dtype {out.dtype}, expected {exp.dtype}")
    if exp.numel() == 0:
        return None
    if not (exp.is_floating_point() or exp.is_complex()):
        wrong = out != exp
        if bool(wrong.any()):
            return _located(i, "values differ", exp.double(), out.double(), wrong)
        return None
    e, o = exp.double(), out.double()
    nan_e, nan_o = torch.isnan(e), torch.isnan(o)
    if not torch.equal(nan_e, nan_o):
        return _located(i, "NaN pattern differs (NaN where the reference has a number, or the reverse)", e, o, nan_e ^ nan_o)
    inf_e, inf_o = torch.isinf(e), torch.isinf(o)
    inf_bad = (inf_e | inf_o) & ~(inf_e & inf_o & (torch.sign(e) == torch.sign(o)))
    if bool(inf_bad.any()):
        return _located(i, "Inf pattern differs", e, o, inf_bad)
    finite = ~(nan_e | inf_e)
    diff = torch.where(finite, (o - e).abs(), torch.zeros_like(e))
    bad = diff > atol + rtol * e.abs()
    if bool(bad.any()):
        return _located(i, f"values differ beyond atol={atol:g}, rtol={rtol:g}", e, o, bad, diff)
    return None


def _located(i: int, reason: str, e: torch.Tensor, o: torch.Tensor, bad: torch.Tensor,
             diff: torch.Tensor | None = None) -> Mismatch:
    import torch

    if diff is None:
        diff = torch.where(bad, torch.ones_like(e), torch.zeros_like(e))
    finite = torch.isfinite(e) & torch.isfinite(o)
    abs_err = torch.where(finite, (o - e).abs(), torch.zeros_like(e))
    rel_err = abs_err / e.abs().clamp_min(1e-12)
    flat = int(torch.argmax(torch.where(bad, diff.nan_to_num(posinf=1e300), torch.full_like(diff, -1.0))))
    index = [int(x) for x in torch.unravel_index(torch.tensor(flat), e.shape)] if e.dim() else []
    return Mismatch(
        output=i,
        reason=reason,
        max_abs_err=float(abs_err.max()),
        max_rel_err=float(rel_err.max()),
        worst_index=index,
        mismatch_fraction=float(bad.double().mean()),
        expected=float(e.reshape(-1)[flat]),
        got=float(o.reshape(-1)[flat]),
    )
