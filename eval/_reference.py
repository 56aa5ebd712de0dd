"""The trusted side of a problem: its module, the reference model and secret-seeded inputs.

Runs in the parent. Problem code is trusted (it comes from our suite or KernelBench); the
candidate never runs here. Inputs are drawn from per-evaluation secret seeds, so a candidate
cannot regenerate them, and reference outputs are computed on pristine copies. Importing,
reduced sizes and seeding all go through `problems.runtime`, exactly as in the worker.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any, Callable

import torch

from problems import (
    Cost,
    Problem,
    ProblemError,
    WIDE_CHECK_MAX_BYTES,
    build_model,
    degenerate_outputs,
    extra_input_count,
    has_small_sizes,
    ill_conditioned,
    load_module,
    load_source,
    make_inputs,
    measure_cost,
    output_structure,
    output_tensors,
    run_forward,
)

_modules: dict[tuple[str, bool], ModuleType] = {}
_costs: dict[tuple[str, bool], Cost | None] = {}
_conditioning: dict[tuple[str, bool, str], str | None] = {}  # (source hash, small, trial) -> why not, "", or None
_degeneracy: dict[tuple[str, bool], str] = {}  # (source hash, small) -> why the problem cannot be scored, or ""
_fitted: dict[tuple[str, bool, int], tuple[ModuleType, dict[str, Any]]] = {}  # (source hash, small, limit) -> module
_modules_lock = threading.Lock()


def traced_cost(problem: Problem, small: bool = False) -> Cost | None:
    """The problem's cost (`problems.cost`, fake tensors, no data) at full or reduced size, traced once per source;
    None for a forward that cannot be traced without data."""
    key = (problem.source_hash, small)
    with _modules_lock:
        if key not in _costs:
            try:
                _costs[key] = measure_cost(problem, small=small)
            except Exception:  # noqa: BLE001  data-dependent forwards cannot be traced
                _costs[key] = None
        return _costs[key]


def problem_size(problem: Problem) -> tuple[float | None, float | None]:
    """(FLOPs, minimum bytes moved) of a problem: its META where given, else traced once from its source.

    KernelBench problems carry no META; tracing them gives every result a roofline floor, a SOL fraction and the
    implausibility checks all the same.
    """
    if problem.flops is not None and problem.bytes_moved is not None:
        return problem.flops, problem.bytes_moved
    cost = traced_cost(problem)
    traced = (float(cost.flops) or None, float(cost.bytes) or None) if cost else (None, None)
    return (problem.flops if problem.flops is not None else traced[0],
            problem.bytes_moved if problem.bytes_moved is not None else traced[1])


def use_small_sizes(problem: Problem, scale: str, device: torch.device) -> bool:
    """Whether to evaluate at the problem's reduced sizes (`META["small"]`): asked for, or auto on a CPU."""
    return has_small_sizes(problem) and (scale == "small" or (scale == "auto" and device.type == "cpu"))


def problem_module(problem: Problem, small: bool = False) -> ModuleType:
    """The problem's module (imported once per content hash and size)."""
    key = (problem.source_hash, small)
    with _modules_lock:
        if key not in _modules:
            _modules[key] = load_module(problem, small=small)
        return _modules[key]


class Reference:
    """The reference model of one problem, built with a given weight seed, on a device."""

    def __init__(self, problem: Problem, weight_seed: int, device: torch.device, small: bool = False):
        self.problem = problem
        self.small = small
        self.module = problem_module(problem, small)
        self.device = device
        self.model = build_model(self.module, weight_seed, device)
        self.structure = ""  # the containers of the last output (`runtime.output_structure`), for the trials

    def inputs(self, seed: int, extra_index: int | None = None) -> list[Any]:
        """Fresh inputs from `seed`, drawn on the evaluation device; extra_index picks a hidden shape set."""
        return make_inputs(self.module, seed, self.device, extra_index)

    def extra_count(self) -> int:
        return extra_input_count(self.module)

    def outputs(self, inputs: list[Any]) -> list[torch.Tensor]:
        """Reference outputs on pristine copies of the inputs, flattened as the worker flattens them; their
        containers are kept in `structure`. Its failure here, where no candidate code runs, is the problem's
        (`ProblemError`), except the device running out of memory, which the evaluation retries alone."""
        try:
            out = run_forward(self.model, inputs)
        except (ProblemError, torch.OutOfMemoryError):
            raise
        except Exception as exc:  # noqa: BLE001  whatever the reference raised
            raise ProblemError(f"the reference's forward raised {type(exc).__name__}: {exc}") from exc
        self.structure = output_structure(out)
        return [o.detach() for o in output_tensors(out)]

    def degenerate(self, seeds: tuple[int, int], atol: float, rtol: float) -> str:
        """Why this problem cannot be scored as a speedup (`problems.degenerate_outputs`: its outputs do not depend
        on its inputs, or all zeros or a constant pass), or "". Decided once per problem and size in this process,
        from the reference's outputs on two draws: a fact of the problem, not of any candidate."""
        key = (self.problem.source_hash, self.small)
        with _modules_lock:
            if key in _degeneracy:
                return _degeneracy[key]
        first = self.outputs(self.inputs(seeds[0]))
        second = self.outputs(self.inputs(seeds[1]))
        why = degenerate_outputs(first, second, atol, rtol)
        with _modules_lock:
            _degeneracy[key] = why
        return why

    def fitted(self, limit_bytes: int, names: list[str]) -> tuple[ModuleType, dict[str, Any]]:
        """The problem with its input-only constants `names` halved, the largest first, until one draw's inputs take at
        most `limit_bytes` (this module itself where they already do, or where no such constant is left), and its size
        overrides. Found once per problem, size and limit in this process: a fact of the problem's shapes, which costs
        a full-size draw and a load of the source a step."""
        key = (self.problem.source_hash, self.small, limit_bytes, tuple(names))
        with _modules_lock:
            if key in _fitted:
                return _fitted[key]
        module, overrides = self.module, dict(self.problem.meta["small"] if self.small else {})
        ints = [n for n in names if type(getattr(module, n, None)) is int]
        for _ in range(64):
            larger = [n for n in ints if getattr(module, n) > 1]
            if _input_bytes(module, self.device) <= limit_bytes or not larger:
                break
            name = max(larger, key=lambda n: getattr(module, n))
            overrides[name] = getattr(module, name) // 2
            module = load_source(self.problem.source, f"<{self.problem.id} fitted>", overrides)
        with _modules_lock:
            _fitted[key] = (module, overrides)
        return module, overrides

    def ill_conditioned(self, distribution: str, inputs: list[Any], outputs: Callable[[], list[torch.Tensor]],
                        atol: float | list[float], rtol: float) -> str | None:
        """Why the trial `distribution` would judge rounding rather than work on this problem
        (`problems.conditioning`), "" where it would not, or None where that cannot be told here. Decided on the first
        evaluation's inputs, once per problem, size and distribution in this process: `outputs` (the reference's own,
        strict) is asked for only then."""
        key = (self.problem.source_hash, self.small, distribution)
        with _modules_lock:
            if key in _conditioning:
                return _conditioning[key]
        cost = traced_cost(self.problem, self.small)
        why = ill_conditioned(self.model, inputs, outputs(), atol, rtol, cost.peak_bytes if cost else None,
                              wide_check_budget(self.device))
        with _modules_lock:
            _conditioning[key] = why
        return why


def _input_bytes(module: ModuleType, device: torch.device) -> int:
    """The tensor bytes of one draw of `module`'s inputs."""
    return sum(x.numel() * x.element_size() for x in make_inputs(module, 1, device) if isinstance(x, torch.Tensor))


def wide_check_budget(device: torch.device) -> int:
    """What the float64 conditioning check may take on `device`: `problems.WIDE_CHECK_MAX_BYTES` (2 GiB), or on a GPU
    a sixteenth of its memory where that is more (8.7 GiB on an H200: four evaluations in flight doing it at once stay
    under a quarter of it). At the fixed 2 GiB a full-size problem such as L2/06 (512 MiB score tensors) went
    undecided, its heavy-tailed trial ran on an ill-conditioned reference, and an honest tf32x3 kernel failed it
    once in two runs (H200, 2026-12-02)."""
    if device.type != "cuda":
        return WIDE_CHECK_MAX_BYTES
    return max(WIDE_CHECK_MAX_BYTES, torch.cuda.get_device_properties(device).total_memory // 16)


def encode_args(inputs: list[Any]) -> tuple[list[Any], list[torch.Tensor]]:
    """Split inputs into a JSON arg spec and the tensors it refers to."""
    spec: list[Any] = []
    tensors: list[torch.Tensor] = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            spec.append({"t": len(tensors)})
            tensors.append(x)
        elif x is None or isinstance(x, (bool, int, float, str)):
            spec.append(x)
        else:
            raise ProblemError(f"get_inputs() returned a {type(x).__name__}; only tensors and plain numbers are supported")
    return spec, tensors


def encode_trial_args(inputs: list[Any]) -> tuple[list[Any], list[torch.Tensor]]:
    """`encode_args` for a trial (`protocol.Run`): each tensor carried flat, the span of memory its view covers, with
    the size and strides that rebuild it, so the worker gets the parent's layout (transposed, sliced) and every trial's
    request has the same form."""
    spec, tensors = encode_args(inputs)
    for entry in spec:
        if isinstance(entry, dict):
            t = tensors[entry["t"]]
            entry.update(size=list(t.shape), stride=list(t.stride()))
            tensors[entry["t"]] = _flat_span(t)
    return spec, tensors


def _flat_span(t: torch.Tensor) -> torch.Tensor:
    """The elements from `t`'s first to its last, as a flat view (its strides are never negative)."""
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    return t.as_strided((span,), (1,))
