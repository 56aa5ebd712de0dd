"""The trusted side of a problem: its module, the reference model and secret-seeded inputs.

Runs in the parent. Problem code is trusted (it comes from our suite or KernelBench); the
candidate never runs here. Inputs are drawn from per-evaluation secret seeds, so a candidate
cannot regenerate them, and reference outputs are computed on pristine copies.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from problems.problem import Problem, ProblemError
from problems.runtime import apply_small_sizes, has_small_sizes, seed_everything

_MODULE_DIR = Path(tempfile.mkdtemp(prefix="kh-problems-"))
atexit.register(shutil.rmtree, _MODULE_DIR, ignore_errors=True)
_modules: dict[str, ModuleType] = {}


def use_small_sizes(problem: Problem, scale: str, device: torch.device) -> bool:
    """Whether to evaluate at the problem's reduced sizes (`META["small"]`): asked for, or auto on a CPU."""
    return has_small_sizes(problem) and (scale == "small" or (scale == "auto" and device.type == "cpu"))


def problem_module(problem: Problem, small: bool = False) -> ModuleType:
    """Import the problem source (once per content hash and size) from a real file."""
    key = problem.source_hash[:20] + ("_small" if small else "")
    if key not in _modules:
        path = _MODULE_DIR / f"problem_{key}.py"
        path.write_text(problem.source)
        spec = importlib.util.spec_from_file_location(f"kh_ref_{key}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise ProblemError(f"{problem.path or problem.id}: importing the problem failed: {exc!r}") from exc
        sys.modules[spec.name] = module
        if small:
            apply_small_sizes(module, problem)
        _modules[key] = module
    return _modules[key]


def derive_seed(secret: int, label: str) -> int:
    """A sub-seed for one use (trial, timing pool, ...) that reveals nothing about the secret."""
    digest = hashlib.sha256(f"{secret}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2


class Reference:
    """The reference model of one problem, built with a given weight seed, on a device."""

    def __init__(self, problem: Problem, weight_seed: int, device: torch.device, small: bool = False):
        self.problem = problem
        self.module = problem_module(problem, small)
        self.device = device
        self.init_inputs = list(self.module.get_init_inputs())
        seed_everything(weight_seed)
        self.model = self.module.Model(*self.init_inputs).to(device)

    def inputs(self, seed: int, extra_index: int | None = None) -> list[Any]:
        """Fresh inputs from `seed` (on the evaluation device); extra_index picks a hidden shape."""
        seed_everything(seed)
        # drawn directly on the evaluation device: CPU random numbers dominate evaluation time otherwise
        with self.device:
            raw = self.module.get_inputs() if extra_index is None else self.module.get_extra_inputs()[extra_index]
        return [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in raw]

    def extra_count(self) -> int:
        getter = getattr(self.module, "get_extra_inputs", None)
        if getter is None:
            return 0
        seed_everything(0)
        return len(getter())

    def outputs(self, inputs: list[Any]) -> list[torch.Tensor]:
        """Reference outputs on pristine copies of the inputs."""
        copies = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        with torch.no_grad():
            out = self.model(*copies)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        return [o.detach() for o in outs]


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
