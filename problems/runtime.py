"""Executing a problem module: import its source, apply reduced sizes, build the model and inputs.

Used by lint, the cost counter and the tests (all trusted code running trusted references);
the evaluator has its own sandboxed path for candidates.

Reduced sizes: a problem may declare `META["small"] = {"NAME": value, ...}`, overrides of its
module-level shape constants that keep the same computation at a size a CPU (or the Triton
interpreter) handles in well under a second. They are applied by assigning the module globals
before `get_init_inputs()`/`get_inputs()` run, so those functions must read the constants at
call time (all of ours do).
"""

from __future__ import annotations

import itertools
import random
import sys
import types
from typing import Any

import torch

from problems.problem import Problem, ProblemError

_counter = itertools.count()


def load_module(problem: Problem, *, small: bool = False) -> types.ModuleType:
    """Execute the problem source as a fresh module; with `small`, apply `META["small"]`."""
    name = f"_kh_problem_{next(_counter)}"
    module = types.ModuleType(name)
    module.__file__ = problem.path or f"<{problem.id}>"
    sys.modules[name] = module  # some sources (dataclasses, pickling) look themselves up
    try:
        exec(compile(problem.source, module.__file__, "exec"), module.__dict__)
    finally:
        sys.modules.pop(name, None)
    for required in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, required):
            raise ProblemError(f"{problem.id}: module defines no {required}")
    if small:
        apply_small_sizes(module, problem)
    return module


def has_small_sizes(problem: Problem) -> bool:
    """Whether the problem declares reduced sizes."""
    return bool(problem.meta.get("small"))


def apply_small_sizes(module: types.ModuleType, problem: Problem) -> None:
    """Override the module's shape constants with `META["small"]`; unknown names are an error."""
    overrides = problem.meta.get("small") or {}
    if not isinstance(overrides, dict):
        raise ProblemError(f"{problem.id}: META['small'] must be a dict of shape constants")
    for key, value in overrides.items():
        if not hasattr(module, key):
            raise ProblemError(f"{problem.id}: META['small'] names {key!r}, which the module does not define")
        setattr(module, key, value)


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), Python's and NumPy's RNGs; the evaluator does this before each call."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:
        pass


def to_device(obj: Any, device: str | torch.device) -> Any:
    """Move tensors (also inside lists/tuples) to `device`; leave other values alone."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device) for o in obj)
    return obj


def build_model(module: types.ModuleType, seed: int, device: str | torch.device | None = None) -> torch.nn.Module:
    """Seed, construct `Model(*get_init_inputs())` and move it to `device` (None: leave it where it is)."""
    seed_everything(seed)
    init_inputs = module.get_init_inputs()
    model = module.Model(*init_inputs)
    return model if device is None else model.to(device)


def make_inputs(module: types.ModuleType, seed: int, device: str | torch.device | None = None) -> list[Any]:
    """Seed and draw `get_inputs()`, moved to `device` (None: leave them where they are)."""
    seed_everything(seed)
    inputs = list(module.get_inputs())
    return inputs if device is None else list(to_device(inputs, device))


def make_extra_inputs(module: types.ModuleType, seed: int, device: str | torch.device | None = None) -> list[list[Any]]:
    """Seed and draw `get_extra_inputs()` (empty when the problem defines none)."""
    if not hasattr(module, "get_extra_inputs"):
        return []
    seed_everything(seed)
    sets = [list(inputs) for inputs in module.get_extra_inputs()]
    return sets if device is None else [list(to_device(inputs, device)) for inputs in sets]


def output_tensors(out: Any) -> list[torch.Tensor]:
    """The tensors of a forward's output, in order (a single tensor, or a tuple/list of them)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in output_tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in output_tensors(o)]
    return []


def run_forward(model: torch.nn.Module, inputs: list[Any]) -> Any:
    """One reference forward without autograd, on clones so the caller's inputs stay pristine."""
    clones = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        return model(*clones)
