"""Whether a reference is well-conditioned on given inputs, for the trials off the published distribution.

The reference's own outputs, computed in its dtypes, must stay within the trial's tolerance of the same forward in
float64. Where they do not, rounding alone moves the answer past the tolerance, so an honest kernel that rounds
differently (another order of a sum, a fused multiply-add) can miss it too: a trial there would reject honest work,
and the evaluator skips it (lint records the same decision per problem). An argument near a pole of tan, reached
only once the inputs are scaled, is such a case.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from problems._compare import Mismatch, compare
from problems.runtime import output_tensors, run_forward

# The float64 forward runs beside other evaluations on the same device, so only where twice the reference's traced
# peak stays under this; past it, or untraceable, nothing is decided and the trial runs unchecked.
WIDE_CHECK_MAX_BYTES = 2 << 30


def float64_miss(model: torch.nn.Module, inputs: list[Any], outputs: list[torch.Tensor], atol: float | list[float],
                 rtol: float) -> Mismatch | None:
    """How `outputs` (the model's own on `inputs`) miss the same forward in float64, or None within tolerance.

    A copy of the model and of the floating-point inputs is widened to float64 on their device; the float64
    outputs are rounded once to the outputs' dtypes and taken as the answer."""
    wide_model = copy.deepcopy(model).double()
    wide_inputs = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    truth = output_tensors(run_forward(wide_model, wide_inputs))
    del wide_model, wide_inputs
    if len(truth) != len(outputs):
        return Mismatch(output=-1, reason=f"float64 gave {len(truth)} outputs, the reference {len(outputs)}")
    return compare([t.to(o.dtype) for t, o in zip(truth, outputs)], outputs, atol, rtol)


def ill_conditioned(model: torch.nn.Module, inputs: list[Any], outputs: list[torch.Tensor], atol: float | list[float],
                    rtol: float, peak_bytes: int | None, budget_bytes: int = WIDE_CHECK_MAX_BYTES) -> str | None:
    """Why a trial on `inputs` would judge rounding rather than work ("" where it would not), or None where that is
    not decided: the reference's traced peak (`peak_bytes`) unknown or, doubled, over `budget_bytes`, or no float64
    forward."""
    if peak_bytes is None or 2 * peak_bytes > budget_bytes:
        return None
    try:
        miss = float64_miss(model, inputs, outputs, atol, rtol)
    except Exception:  # noqa: BLE001  an operator without float64, or memory: not decided
        return None
    return "" if miss is None else ("the reference itself misses its float64 result past the tolerance "
                                    f"(output {miss.output}: {miss.reason})")
