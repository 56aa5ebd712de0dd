"""The shortcuts lint's trivial-expression check tries: one-line elementwise expressions of a problem's float inputs.

A candidate could return one of these instead of doing the reference's work; lint (`problems.lint`) asks which
outputs one of them matches under the evaluator's comparison, and decides from the reference's counted FLOPs
whether a match is a shortcut or the problem's own form. The family is fixed: over inputs that broadcast to the
output, `x`, `-x`, `x * x`, `abs(x)`, `relu(x)`, `sigmoid(x)`, `tanh(x)`, and over pairs of distinct inputs
`a + b`, `a - b`, `b - a`, `a * b`, at most MAX_EXPRESSIONS per output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from problems._compare import compare

MAX_EXPRESSIONS = 64  # per output: 7 unary forms per input, 4 binary per pair (5 inputs fill it)
EXPRESSION_SAMPLE = 4096  # elements compared first, so a non-matching expression costs almost nothing


@dataclass
class _Expression:
    """One candidate shortcut: `fn(*inputs[i] for i in operands)`, shown as `text`."""

    text: str
    operands: tuple[int, ...]
    fn: Callable[..., torch.Tensor]


_UNARY: tuple[tuple[str, Callable[[torch.Tensor], torch.Tensor]], ...] = (
    ("{a}", lambda a: a),
    ("-{a}", torch.neg),
    ("{a} * {a}", lambda a: a * a),
    ("abs({a})", torch.abs),
    ("relu({a})", torch.relu),
    ("sigmoid({a})", torch.sigmoid),
    ("tanh({a})", torch.tanh),
)
_BINARY: tuple[tuple[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]], ...] = (
    ("{a} + {b}", torch.add),
    ("{a} - {b}", torch.sub),
    ("{b} - {a}", lambda a, b: b - a),
    ("{a} * {b}", torch.mul),
)


def matching_expressions(inputs: list, outs: list[torch.Tensor], atol: float,
                         rtol: float) -> tuple[dict[int, str], int]:
    """({output index: the text of the first expression of the family that the evaluator's comparison accepts for
    it}, how many expressions were tried), over the non-empty floating outputs."""
    matched: dict[int, str] = {}
    tried = 0
    with torch.no_grad():
        for i, out in enumerate(outs):
            if not out.is_floating_point() or out.numel() == 0:
                continue
            for expr in _expressions(inputs, out.shape):
                tried += 1
                if _expression_matches(expr, inputs, out, atol, rtol):
                    matched[i] = expr.text
                    break
    return matched, tried


def _broadcasts_to(t: torch.Tensor, shape: torch.Size) -> bool:
    try:
        return torch.broadcast_shapes(t.shape, shape) == shape
    except RuntimeError:
        return False


def _expressions(inputs: list, shape: torch.Size) -> list[_Expression]:
    """The fixed family over the float inputs that broadcast to `shape`, unary forms first, capped."""
    usable = [i for i, x in enumerate(inputs)
              if isinstance(x, torch.Tensor) and x.is_floating_point() and _broadcasts_to(x, shape)]
    names = {i: f"inputs[{i}]" for i in usable}
    family = [_Expression(text.format(a=names[i]), (i,), fn) for i in usable for text, fn in _UNARY]
    family += [_Expression(text.format(a=names[i], b=names[j]), (i, j), fn)
               for n, i in enumerate(usable) for j in usable[n + 1:] for text, fn in _BINARY]
    return family[:MAX_EXPRESSIONS]


def _expression_matches(expr: _Expression, inputs: list, out: torch.Tensor, atol: float, rtol: float) -> bool:
    """Does the evaluator's comparison accept `expr` for `out`? A sample of elements decides most cases cheaply."""
    operands = [inputs[i].broadcast_to(out.shape) for i in expr.operands]
    if out.numel() > EXPRESSION_SAMPLE:  # a mismatch on a sample is a mismatch on the whole
        flat = torch.arange(EXPRESSION_SAMPLE, device=out.device) * (out.numel() // EXPRESSION_SAMPLE)
        where = torch.unravel_index(flat, out.shape)
        sample = expr.fn(*(x[where] for x in operands)).to(out.dtype)
        if compare([out[where]], [sample], atol, rtol) is not None:
            return False
    return compare([out], [expr.fn(*operands).to(out.dtype)], atol, rtol) is None
