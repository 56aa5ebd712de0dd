"""Tamper detection inside the worker: what a candidate must not change about the process.

The worker snapshots the identity of every function a verdict or a timing depends on before
the candidate is imported, and compares after each candidate call. A candidate that patches
`torch.allclose`, CUDA events, timers, the worker itself, or turns on TF32 is rejected.
Comparisons of outputs happen in the parent anyway; this catches attempts and sabotage of
the reference's timing in the shared worker.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

import torch

_WATCHED_MODULE_NAMES = (
    "torch", "torch.nn.functional", "torch.testing", "torch.cuda", "torch.cuda.streams",
    "torch.autograd.profiler", "torch.profiler", "time", "gc", "threading", "os", "random",
    "eval.worker.serve", "eval.worker.timing", "eval.worker.integrity", "eval.worker.tracing", "eval.wire",
    "eval.protocol", "problems.runtime", "problems.compare",
    "triton.runtime.jit", "triton.runtime.autotuner", "triton.runtime.interpreter", "triton.testing",
)
_WATCHED_CLASSES = (torch.Tensor, torch.nn.Module)


def _watched_objects() -> dict[str, Any]:
    objs: dict[str, Any] = {}
    for name in _WATCHED_MODULE_NAMES:
        module = sys.modules.get(name)
        if module is None:
            continue
        objs[name] = module
        for attr, value in vars(module).items():
            if callable(value) or isinstance(value, types.ModuleType):
                objs[f"{name}.{attr}"] = value
            if isinstance(value, type) and (value.__module__ or "").startswith(("torch", "triton", "eval")):
                for cattr, cvalue in vars(value).items():
                    if callable(cvalue):
                        objs[f"{name}.{attr}.{cattr}"] = cvalue
    for cls in _WATCHED_CLASSES:
        for attr, value in vars(cls).items():
            objs[f"{cls.__module__}.{cls.__qualname__}.{attr}"] = value
    return objs


def precision_settings() -> dict[str, Any]:
    """The numeric-mode switches a candidate could flip to trade accuracy for speed."""
    settings = {
        "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "matmul.allow_fp16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "matmul.allow_bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }
    return settings


class Snapshot:
    """Identity snapshot of watched functions, precision settings and live threads."""

    def __init__(self) -> None:
        self.ids = {k: id(v) for k, v in _watched_objects().items()}
        self.precision = precision_settings()
        self.threads = {t.ident for t in threading.enumerate()}
        self.perf_counter = time.perf_counter

    def violations(self) -> list[str]:
        """What changed since the snapshot, as readable reasons (empty when clean)."""
        problems: list[str] = []
        now = _watched_objects()
        changed = sorted(k for k, v in self.ids.items() if k in now and id(now[k]) != v)
        removed = sorted(k for k in self.ids if k not in now)
        if changed:
            problems.append("replaced " + ", ".join(changed[:8]) + (" ..." if len(changed) > 8 else ""))
        if removed:
            problems.append("deleted " + ", ".join(removed[:8]))
        precision = precision_settings()
        flipped = [f"{k}: {self.precision[k]} -> {precision[k]}" for k in precision if precision[k] != self.precision[k]]
        if flipped:
            problems.append("changed numeric precision settings (" + "; ".join(flipped) + ")")
        new_threads = [t.name for t in threading.enumerate() if t.ident not in self.threads and t.is_alive()]
        if new_threads:
            problems.append("left threads running: " + ", ".join(new_threads[:5]))
        return problems
