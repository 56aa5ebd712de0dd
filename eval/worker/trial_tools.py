"""The worker's tools for a correctness trial: memory poisoned while the candidate runs, exact comparison with NaN
equal to NaN (an input the call mutated, a repeated call's outputs), the reference's state copied into the
candidate's."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

_torch_equal = torch.equal  # captured at the worker's start, before any candidate can patch it


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exact equality that treats NaN as equal to NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() and a.element_size() < 4:
        a, b = a.float(), b.float()  # exact; fp8 has no CUDA nan_to_num/isnan kernels
    if a.is_floating_point() or a.is_complex():
        return bool(_torch_equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0))) and bool(
            _torch_equal(torch.isnan(a), torch.isnan(b))
        )
    return bool(_torch_equal(a, b))


@contextlib.contextmanager
def poisoned_memory(enabled: bool) -> Iterator[list[str]]:
    """Fill every new allocation (torch.empty & co.) with NaN / max-int while the candidate runs.

    Yields a list that names the switches found off at the end: the snapshot cannot see a candidate that
    turns poisoning off during its call, since the worker turns the switches off itself afterwards.
    """
    turned_off: list[str] = []
    if not enabled:
        yield turned_off
        return
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield turned_off
    finally:
        if not torch.are_deterministic_algorithms_enabled():
            turned_off.append("torch.use_deterministic_algorithms")
        if not torch.utils.deterministic.fill_uninitialized_memory:
            turned_off.append("torch.utils.deterministic.fill_uninitialized_memory")
        torch.use_deterministic_algorithms(False)


def copy_matching_state(reference: torch.nn.Module, candidate: torch.nn.Module) -> int:
    """Copy reference parameters/buffers into same-named, same-shaped candidate entries."""
    ref_state = reference.state_dict()
    new_state = candidate.state_dict()
    matching = {
        k: v for k, v in ref_state.items() if k in new_state and new_state[k].shape == v.shape and new_state[k].dtype == v.dtype
    }
    if matching:
        candidate.load_state_dict(matching, strict=False)
    return len(matching)
