"""FLOPs, minimum bytes moved and peak memory of a problem's reference, without a GPU.

The reference runs under `FakeTensorMode` (shapes and dtypes only: no memory, no arithmetic),
so a 40 GB problem is measured in milliseconds on a laptop. Forwards whose output shapes depend
on data (`nonzero`, `.tolist()` split sizes, e.g. mixture-of-experts routing) cannot run on fake
tensors; with `allow_real=True` they run for real on the CPU instead.

- flops: `torch.utils.flop_counter` (matmul, convolution, attention kernels it knows). It does not
  count elementwise or reduction arithmetic, which never bounds the roofline of our problems, and it
  knows nothing of causality, so causal attention problems state their FLOPs by hand
  (`META["flops_method"] = "hand"`).
- bytes: every input, parameter, buffer and output touched exactly once (a perfect fusion), less the inputs
  the problem declares a correct kernel need not read (`Problem.unread_inputs`).
- peak_bytes: the most memory alive at once during a reference forward (inputs, parameters and
  the live intermediates), traced op by op; a second copy for the candidate is the caller's to add
  (`estimate_memory`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from problems.problem import Problem
from problems.runtime import build_model, load_module, make_inputs, output_tensors


@dataclass
class Cost:
    """Sizes of one reference forward, in FLOPs and bytes."""

    flops: int
    input_bytes: int
    param_bytes: int
    output_bytes: int
    peak_bytes: int
    method: str  # "fake" (traced without data) or "real" (ran on the CPU)
    unread_bytes: int = 0  # of the inputs declared unread (`Problem.unread_inputs`)

    @property
    def bytes(self) -> int:
        """Minimum bytes moved: inputs (less those declared unread), parameters/buffers and outputs, each once."""
        return self.input_bytes - self.unread_bytes + self.param_bytes + self.output_bytes


class _LiveBytes(TorchDispatchMode):
    """Tracks the bytes of tensors created by ops that are still alive, and their peak."""

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._alive: set[int] = set()

    def _release(self, key: int, nbytes: int) -> None:
        self._alive.discard(key)
        self.current -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            # views share their base's memory; an in-place op returns a tensor already counted
            if isinstance(t, torch.Tensor) and t._base is None and id(t) not in self._alive:
                nbytes = t.untyped_storage().nbytes()
                self._alive.add(id(t))
                self.current += nbytes
                weakref.finalize(t, self._release, id(t), nbytes)
        self.peak = max(self.peak, self.current)
        return out


def _unique_bytes(tensors: list[torch.Tensor]) -> int:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        key = id(t._base) if t._base is not None else id(t)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def _measure(problem: Problem, small: bool) -> Cost:
    module = load_module(problem, small=small)
    model = build_model(module, seed=0)
    inputs = make_inputs(module, seed=1)
    input_bytes = _unique_bytes([x for x in inputs if isinstance(x, torch.Tensor)])
    param_bytes = _unique_bytes(list(model.parameters()) + list(model.buffers()))
    live = _LiveBytes()
    with torch.no_grad(), live, FlopCounterMode(display=False) as counter:
        out = model(*inputs)
    outputs = output_tensors(out)
    return Cost(
        flops=int(counter.get_total_flops()),
        input_bytes=input_bytes,
        param_bytes=param_bytes,
        output_bytes=_unique_bytes(outputs),
        peak_bytes=input_bytes + param_bytes + live.peak,
        method="real",
        unread_bytes=_unique_bytes([x for i, x in enumerate(inputs)
                                    if i in problem.unread_inputs and isinstance(x, torch.Tensor)]),
    )


def measure_cost(problem: Problem, *, small: bool = False, allow_real: bool = False) -> Cost:
    """Cost of the problem's reference (full size unless `small`); see the module docstring."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode():
            cost = _measure(problem, small)
        cost.method = "fake"
        return cost
    except Exception:
        if not allow_real:
            raise
    return _measure(problem, small)


def static_bytes(problem: Problem) -> tuple[int, int]:
    """(input bytes, parameter+buffer bytes) at full size, traced without data or a forward.

    The fallback for forwards that cannot run on fake tensors: a lower bound on what they need.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        module = load_module(problem)
        model = build_model(module, seed=0)
        inputs = make_inputs(module, seed=1)
        return (
            _unique_bytes([x for x in inputs if isinstance(x, torch.Tensor)]),
            _unique_bytes(list(model.parameters()) + list(model.buffers())),
        )


def estimate_memory(cost: Cost) -> int:
    """Device memory an evaluation needs: the reference's peak plus the candidate's own copy of
    inputs, parameters and outputs (its intermediates are its own business), plus the outputs it
    returns, which the evaluator receives onto its device to compare beside the expected ones."""
    return cost.peak_bytes + cost.input_bytes + cost.param_bytes + 2 * cost.output_bytes


def describe_bytes(n: float | None) -> str:
    """Human-readable byte count."""
    if n is None:
        return "-"
    if n < 1000:
        return f"{n:.0f} B"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def describe_flops(n: float | None) -> str:
    """Human-readable FLOP count."""
    if n is None:
        return "-"
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} FLOP"
