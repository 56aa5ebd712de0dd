"""Trial inputs beyond the published draws that a correct kernel must survive (issues 52 and 53).

Each variant takes a published draw (a list of inputs) and a secret seed and returns the inputs of its trial, or
None where it does not apply to this problem's inputs. The evaluator runs a variant that changes values only where
the reference is well-conditioned on it (a float64 check decides) and finite; a layout variant keeps the values.

- `VALUE_SHAPES`: values kept inside each input's observed published [min, max], but from another shape, or another
  relation between inputs, so a guard that checks the range cannot tell the trial from a published one.
- `REGIMES`: rows a numerically careless kernel gets wrong (tiny variance, a large mean, zero rows, an outlier,
  magnitudes near the dtype's limit, exact ties).
- `LAYOUTS`: the published values in another memory layout (transposed, strided), for kernels that assume contiguity.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from problems.runtime import derive_seed

Variant = Callable[[list[Any], int], "list[Any] | None"]
# A secret sparse set of this many heavy positions per input shape: a prime, so no stride k but itself divides it, and
# a reduction over every k-th element (any start) sees k * (heavy ones it met) != HEAVY_COUNT of them: it is off by at
# least one heavy term, every time (`sparse_heavy`).
HEAVY_COUNT = 23
_LIGHT_SHRINK = 1 / 1024  # the other elements' spread around the range's middle: heavy ones dominate, past its noise


def _generator(t: torch.Tensor, seed: int, use: str) -> torch.Generator:
    return torch.Generator(device=t.device).manual_seed(derive_seed(seed, use))


def _floats(inputs: list[Any]) -> list[int]:
    return [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 1]


def _each_float(change: Callable[[torch.Tensor, int], torch.Tensor | None]) -> Variant:
    """A variant applying `change` to every floating-point input (seed `seed + i` for input i); None where it applies
    to none."""
    def variant(inputs: list[Any], seed: int) -> list[Any] | None:
        out, changed = list(inputs), False
        for i in _floats(inputs):
            new = change(inputs[i], (seed + i) % 2**63)
            if new is not None:
                out[i], changed = new.to(inputs[i].dtype), True
        return out if changed else None
    return variant


def _range(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    wide = t.double()
    return wide.min(), wide.max()


def _redrawn(t: torch.Tensor, seed: int, bimodal: bool) -> torch.Tensor:
    """Values inside t's observed [min, max], concentrated near one end (which: by the seed), or near both."""
    lo, hi = _range(t)
    u = torch.rand(t.shape, generator=_generator(t, seed, "redrawn"), device=t.device, dtype=torch.float64) ** 6
    if bimodal:
        near_hi = torch.rand(t.shape, generator=_generator(t, seed, "ends"), device=t.device) < 0.5
    else:
        near_hi = torch.full(t.shape, derive_seed(seed, "end") % 2 == 1, device=t.device)
    return torch.where(near_hi, hi - (hi - lo) * u, lo + (hi - lo) * u)


def sparse_heavy(shared: bool, opposed: bool = False) -> Variant:
    """HEAVY_COUNT secret heavy positions: each float input's own, or (`shared`) one set for every float input of a
    shape. At them an input takes an end of its observed range: the first of a set the end with the larger magnitude,
    the others the same end (high where the first took high) or, `opposed`, alternately the opposite one; the rest of
    each input is shrunk to 1/1024 of its spread around the range's middle. All values stay in range.

    A reduction over every k-th element (any k > 1 but HEAVY_COUNT, any start) meets m of a set's heavy positions and
    is off by |k * m - HEAVY_COUNT| >= 1 heavy terms. With shared positions a reduction over an elementwise function
    g of same-shaped inputs is one kind of heavy term, so no two inputs' errors can cancel (as they can with positions
    of their own, whose terms differ): a product is heavy with the ends alike, a difference (a loss of predictions
    and targets) with them opposed; a function of a heavy and a light value (a divergence) needs positions of their
    own. The guarantee is a heavy term against the tolerance: g's heavy value over the count a mean divides by, past
    atol. None where no float input has 4 * HEAVY_COUNT elements."""
    def variant(inputs: list[Any], seed: int) -> list[Any] | None:
        sets: dict[object, list[int]] = {}
        for i in _floats(inputs):
            if inputs[i].numel() >= 4 * HEAVY_COUNT:
                sets.setdefault(tuple(inputs[i].shape) if shared else i, []).append(i)
        out = list(inputs)
        for members in sets.values():
            first = inputs[members[0]]
            picks = torch.randperm(first.numel(), generator=_generator(first, (seed + members[0]) % 2**63, "heavy"),
                                   device=first.device)[:HEAVY_COUNT]
            lo, hi = _range(first)
            first_high = bool(hi.abs() >= lo.abs())
            for order, i in enumerate(members):
                out[i] = _heavy_at(inputs[i], picks, high=first_high != (opposed and order % 2 == 1))
        return out if sets else None
    return variant


def _heavy_at(t: torch.Tensor, picks: torch.Tensor, high: bool) -> torch.Tensor:
    """t shrunk around its range's middle, with the elements at `picks` (flat) at the high (or low) end of its range."""
    lo, hi = _range(t)
    mid = (lo + hi) / 2
    out = (mid + (t.double() - mid) * _LIGHT_SHRINK).reshape(-1)
    out[picks.to(t.device)] = hi if high else lo
    return out.reshape(t.shape).to(t.dtype)


def _permuted(inputs: list[Any], seed: int) -> list[Any] | None:
    """Every tensor input after the first with its rows (dim 0) shuffled: pairs (a prediction and its target) no
    longer belong together. None for a problem with fewer than two such inputs."""
    tensors = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.dim() and x.shape[0] > 1]
    if len(tensors) < 2:
        return None
    out = list(inputs)
    for i in tensors[1:]:
        x = inputs[i]
        order = torch.randperm(x.shape[0], generator=_generator(x, seed + i, "pairs"), device=x.device)
        out[i] = x[order]
    return out


def _target_correlated(inputs: list[Any], seed: int) -> list[Any] | None:
    """Where a float input (B, C, ...) has an integer input (B, ...) of class indices, the target class's value is set
    to the top of the float input's observed range: predictions agree with their targets (a loss is then small,
    unlike on independent draws). None where no such pair exists."""
    for f in _floats(inputs):
        x = inputs[f]
        for j, t in enumerate(inputs):
            if (isinstance(t, torch.Tensor) and not t.is_floating_point() and t.dtype != torch.bool and x.dim() >= 2
                    and tuple(t.shape) == tuple(x.shape[:1]) + tuple(x.shape[2:]) and t.numel()
                    and 0 <= int(t.min()) and int(t.max()) < x.shape[1]):
                out = list(inputs)
                out[f] = x.clone().scatter_(1, t.unsqueeze(1).long(), _range(x)[1].to(x.dtype).item())
                return out
    return None


VALUE_SHAPES: dict[str, tuple[str, Variant]] = {  # name -> (what it does, as a verdict says it; the variant)
    "near-one-end": ("values re-drawn inside each input's published range, concentrated near one end",
                     _each_float(lambda t, seed: _redrawn(t, seed, bimodal=False))),
    "bimodal": ("values re-drawn inside each input's published range, concentrated near both ends",
                _each_float(lambda t, seed: _redrawn(t, seed, bimodal=True))),
    "sparse-heavy": ("a secret sparse set of heavy elements inside each input's published range, the rest near its "
                     "middle", sparse_heavy(shared=False)),
    "sparse-heavy-shared": ("heavy elements at secret positions shared by same-shaped inputs, at like ends of their "
                            "published ranges, the rest near the middle", sparse_heavy(shared=True)),
    "sparse-heavy-opposed": ("heavy elements at secret positions shared by same-shaped inputs, at opposite ends of "
                             "their published ranges, the rest near the middle",
                             sparse_heavy(shared=True, opposed=True)),
    "permuted": ("the inputs' rows shuffled relative to each other", _permuted),
    "target-correlated": ("float inputs correlated with the integer targets", _target_correlated),
}


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t as (rows, last dim) in float64 (a 1-D input is one row)."""
    return t.double().reshape(-1, t.shape[-1])


def _regime(change: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]) -> Variant:
    """A per-row regime: `change(rows, scale, seed)` on each floating-point input of at least 2 elements a row."""
    def per_input(t: torch.Tensor, seed: int) -> torch.Tensor | None:
        if t.dim() == 0 or t.shape[-1] < 2:
            return None
        rows = _rows(t)
        scale = rows.abs().max().clamp_min(1e-30)
        return change(rows, scale, seed).reshape(t.shape)
    return _each_float(per_input)


def _row_mask(rows: torch.Tensor, seed: int) -> torch.Tensor:
    """About a quarter of the rows (at least one), chosen by the seed."""
    pick = torch.rand(rows.shape[0], generator=_generator(rows, seed, "rows"), device=rows.device) < 0.25
    pick[derive_seed(seed, "row") % rows.shape[0]] = True
    return pick.unsqueeze(1)


def _outlier(rows: torch.Tensor, scale: torch.Tensor, seed: int) -> torch.Tensor:
    at = torch.randint(rows.shape[1], (rows.shape[0], 1), generator=_generator(rows, seed, "outlier"),
                       device=rows.device)
    return rows.clone().scatter_(1, at, float(16 * scale))


REGIMES: dict[str, tuple[str, Variant]] = {
    "tiny-variance": ("rows with a tiny variance", _regime(lambda r, s, seed: r.mean(1, keepdim=True)
                                                          + (r - r.mean(1, keepdim=True)) * 1e-3)),
    "large-mean": ("rows with a large mean", _regime(lambda r, s, seed: r + 64 * s)),
    "zero-rows": ("zero rows", _regime(lambda r, s, seed: torch.where(_row_mask(r, seed), 0.0, r))),
    "outlier": ("one large outlier per row", _regime(_outlier)),
    "ties": ("values with exact ties", _regime(lambda r, s, seed: torch.round(r * 2 / s) * s / 2)),
}


def _near_limit(t: torch.Tensor, seed: int) -> torch.Tensor:
    """t scaled so its largest magnitude is the square root of its dtype's largest value over 16: products of two
    stay finite, sums of squares may not (the reference's finiteness decides)."""
    return t.double() * (torch.finfo(t.dtype).max ** 0.5 / 16 / t.double().abs().max().clamp_min(1e-30))


REGIMES["near-limits"] = ("values near the dtype's largest magnitudes", _each_float(_near_limit))
# Regimes run only where the reference stays finite on their inputs scaled by this much more: near overflow, whether a
# sum of products stays finite depends on the order of the sum and on how a kernel splits its operands (an honest
# flash attention with tf32x3 dots overflowed at logits the reference's IEEE float32 kept finite, H200, 2026-12-02).
HEADROOM: dict[str, float] = {"near-limits": 4.0}


def scaled_floats(inputs: list[Any], factor: float) -> list[Any]:
    """`inputs` with every floating-point tensor multiplied by `factor` (the headroom check's inputs)."""
    return [x * factor if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]


def _transposed(t: torch.Tensor) -> torch.Tensor | None:
    """The same values stored transposed (its last two dims swapped in memory): not contiguous."""
    if t.dim() < 2 or t.shape[-1] < 2 or t.shape[-2] < 2:
        return None
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def _strided(t: torch.Tensor) -> torch.Tensor | None:
    """The same values as the first half of each row of a buffer twice as wide: not contiguous, its row stride not
    its width (a slice of a wider tensor)."""
    if t.dim() == 0 or t.numel() < 2:
        return None
    wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    wide[..., :t.shape[-1]] = t
    return wide[..., :t.shape[-1]]


def _layout(change: Callable[[torch.Tensor], torch.Tensor | None]) -> Callable[[list[Any]], list[Any] | None]:
    def variant(inputs: list[Any]) -> list[Any] | None:
        out = [change(x) if isinstance(x, torch.Tensor) else None for x in inputs]
        if all(o is None for o in out):
            return None
        return [o if o is not None else x for o, x in zip(out, inputs)]
    return variant


LAYOUTS: dict[str, Callable[[list[Any]], list[Any] | None]] = {
    "transposed inputs": _layout(_transposed),
    "non-contiguous inputs": _layout(_strided),
}
