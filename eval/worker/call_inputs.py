"""A forward's inputs in the worker: rebuilt from what crossed the channel (tensors plus literals,
`eval.crossing.protocol.ArgSpec`), a trial's at addresses every trial reuses, a timed repetition's fresh or staged
ones."""

from __future__ import annotations

from typing import Any, Callable

import torch

from eval.crossing import protocol as p
from eval.worker import timing


def rebuild_args(spec: p.ArgSpec, tensors: list[torch.Tensor]) -> list[Any]:
    """Inputs travel as tensors plus literals: `{"t": i}` marks tensor i, anything else is a literal; with "size" and
    "stride" (a trial's), tensor i is carried flat and rebuilt as that view of it."""
    return [tensor_arg(a, tensors) if isinstance(a, dict) and "t" in a else a for a in spec]


def tensor_arg(entry: dict[str, Any], tensors: list[torch.Tensor]) -> torch.Tensor:
    t = tensors[entry["t"]]
    return t.as_strided(entry["size"], entry["stride"]) if "size" in entry else t


def inputs_of(subject: Any, fresh: dict[int, list[torch.Tensor]] | None, rep: int) -> list[torch.Tensor]:
    """Repetition rep's inputs: its fresh ones, or staged set `rep mod sets` (the other process copies the same ones
    for the same repetition)."""
    return fresh[rep] if fresh is not None else subject.sets[rep % len(subject.sets)]


def refiller(subject: Any, fresh: dict[int, list[torch.Tensor]] | None) -> Callable[[int], None]:
    """`refill(rep)`: copy repetition rep's inputs into the subject's buffers, outside the timed loop (graph capture,
    `Busy`); the loop itself is given the copies (`timing.Copies`)."""
    def refill(rep: int) -> None:
        for b, src in zip(subject.buffers, inputs_of(subject, fresh, rep)):
            timing.copy_span(b, src)
    return refill


def at_stable_addresses(inputs: list[Any], buffers: dict[tuple[Any, ...], torch.Tensor]) -> list[Any]:
    """The trial's inputs copied into buffers that every trial of the same shapes reuses.

    Each trial has new values at the same addresses, so a memo keyed on data pointers returns an
    earlier trial's output at the second trial, every time, whatever the allocator would have done.
    Tensors of unusual layout (views, expanded) or needing grad are passed as drawn.
    """
    stable = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.is_contiguous() and not x.requires_grad and x.layout == torch.strided:
            key = (i, tuple(x.shape), x.dtype, x.device)
            buf = buffers.get(key)
            if buf is None:
                buf = buffers[key] = torch.empty_like(x)
            buf.copy_(x)
            x = buf
        stable.append(x)
    return stable
