"""Tamper detection inside the worker: what a candidate must not change about the process.

The worker snapshots the process before the candidate is imported and compares after each
candidate call. A candidate that changed any of these for the code that runs after it (the
reference, the worker, the next call) is rejected:

- watched functions and classes: an attribute replaced or deleted (`torch.allclose`, CUDA events,
  timers, the worker itself), or added (`torch.Tensor.__mul__` where it was inherited, a new name in
  `torch`); a newly imported submodule is the one addition allowed;
- `sys.modules`: an entry replaced or removed;
- process state (`_STATE`): the torch function and dispatch mode stacks, every numeric-precision and
  backend switch, import hooks, trace/profile functions, gc callbacks, signal handlers and interval
  timers, torch's global module hooks and kernels registered for `aten` operators;
- live threads.

Comparisons of outputs happen in the parent anyway; this catches attempts and sabotage of the
reference's timing in the shared worker. It is defence in depth, never the wall.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
import types
from itertools import repeat as _repeat
from operator import is_ as _is
from typing import Any, Callable, Iterator, Mapping

import torch

# The comparison's own tools, bound when the worker imports this module, before any candidate code: a candidate
# that patches `builtins.all` or `operator.is_` to say "unchanged" does not change them here.
_all, _map, _zip, _sorted = all, map, zip, sorted

_WATCHED_MODULE_NAMES = (
    "torch", "torch.nn.functional", "torch.testing", "torch.cuda", "torch.cuda.streams",
    "torch.autograd.profiler", "torch.profiler", "torch.overrides", "torch.utils._python_dispatch",
    "torch.backends", "torch.backends.cuda", "torch.backends.cudnn", "time", "gc", "threading", "os", "random",
    "eval.worker.serve", "eval.worker.timing", "eval.worker.integrity", "eval.worker.tracing", "eval.crossing.wire",
    "eval.crossing.protocol", "problems.runtime", "problems._compare", "eval.worker.observed", "eval.worker.cuda_ipc",
    "eval.worker.observed_commands", "eval.worker.call_inputs", "eval.worker.trial_tools", "eval.worker.isolation",
    "triton.runtime.jit", "triton.runtime.autotuner", "triton.runtime.interpreter", "triton.testing",
)
# `torch._C.TensorBase` is immutable from Python, but its dict is reachable (gc.get_referents)
_WATCHED_CLASSES = (torch.Tensor, torch._C.TensorBase, torch.nn.Module)
_ADDED_FREELY = frozenset({"__warningregistry__"})  # written by `warnings` into any module that warns
_SHOWN = 8  # names per kind of change in a reason


def _owned_classes(module: types.ModuleType) -> dict[str, type]:
    """The classes a watched module holds that torch, Triton or the harness define (their methods matter)."""
    return {attr: value for attr, value in vars(module).items()
            if isinstance(value, type) and (value.__module__ or "").startswith(("torch", "triton", "eval"))}


def _watched_modules() -> dict[str, types.ModuleType]:
    """The watched modules imported so far (an entry replaced by a non-module counts as deleted)."""
    modules = {name: sys.modules.get(name) for name in _WATCHED_MODULE_NAMES}
    return {name: m for name, m in modules.items() if isinstance(m, types.ModuleType)}


# modules a library puts in sys.modules anew each time, by design: Triton's launcher stub of every kernel it compiles
# (found on the H100: every honest Triton solution was rejected for "replaced sys.modules['__triton_launcher']")
_TRANSIENT_MODULES = ("__triton_launcher",)


def _callable_or_module(value: Any) -> bool:
    return callable(value) or isinstance(value, types.ModuleType)


def _anything(value: Any) -> bool:
    return True


def _watched_spaces() -> dict[str, tuple[Mapping[str, Any], Callable[[Any], bool]]]:
    """Every watched namespace by dotted name (a module's, a class's by the class's own name, once however many
    modules hold it): its live attribute mapping, and which of its values a verdict or a timing depends on (a
    module's functions and submodules, an owned class's methods, everything of `_WATCHED_CLASSES`)."""
    classes: dict[type, Callable[[Any], bool]] = {}
    spaces: dict[str, tuple[Mapping[str, Any], Callable[[Any], bool]]] = {}
    for name, module in _watched_modules().items():
        spaces[name] = (vars(module), _callable_or_module)
        for cls in _owned_classes(module).values():
            classes.setdefault(cls, callable)
    for cls in _WATCHED_CLASSES:
        classes[cls] = _anything
    for cls, watched in classes.items():
        spaces[f"{cls.__module__}.{cls.__qualname__}"] = (vars(cls), watched)
    return spaces


_MISSING = object()


class _Space:
    """One namespace as the snapshot found it. Its mapping stays live (a module's dict, a class's proxy), and the
    watched values are held, not just their ids: a replaced original that was freed cannot leave its id to the
    replacement. Where nothing changed, comparing is a few C-level passes over each namespace, and names are
    built only for what changed (`harness bench eval --part requests` measures a read)."""

    def __init__(self, label: str, attrs: Mapping[str, Any], watched: Callable[[Any], bool]):
        self.label = label
        self.attrs = attrs
        self.names = frozenset(attrs)
        kept = [(k, v) for k, v in attrs.items() if watched(v)]
        self.watched = tuple(k for k, _ in kept)
        self.values = tuple(v for _, v in kept)

    def changes(self) -> tuple[list[str], list[str], list[str]]:
        """Dotted names replaced, deleted and added since the snapshot (a submodule imported meanwhile is no
        addition)."""
        replaced: list[str] = []
        deleted: list[str] = []
        if not _all(_map(_is, self._now(), self.values)):
            for attr, before, value in _zip(self.watched, self.values, self._now()):
                if value is not before:
                    (deleted if value is _MISSING else replaced).append(f"{self.label}.{attr}")
        added: list[str] = []
        if self.attrs.keys() != self.names:
            for attr in self.attrs.keys() - self.names - _ADDED_FREELY:
                value = self.attrs.get(attr)
                if not (isinstance(value, types.ModuleType) and sys.modules.get(f"{self.label}.{attr}") is value):
                    added.append(f"{self.label}.{attr}")
        return replaced, deleted, added

    def _now(self) -> Iterator[Any]:
        return _map(self.attrs.get, self.watched, _repeat(_MISSING))


class Ref:
    """An object compared by identity and shown by its name (a mode, a hook, a handler)."""

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ref) and self.obj is other.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        if self.obj is None or isinstance(self.obj, (bool, int, float, str)):
            return repr(self.obj)
        name = getattr(self.obj, "__qualname__", None) or type(self.obj).__qualname__
        return str(name)


def _refs(objs: Any) -> list[Ref]:
    return [Ref(o) for o in objs]


def _mode_stacks() -> dict[str, Any]:
    """Torch function and dispatch modes intercept every torch call, the reference's too, while on the stack
    (the dispatch stack counts the infrastructure modes: fake, proxy, functional)."""
    c = torch._C
    return {"torch function modes": _refs(c._get_function_stack_at(i) for i in range(c._len_torch_function_stack())),
            "torch dispatch modes": _refs(c._get_dispatch_stack_at(i) for i in range(c._len_torch_dispatch_stack())),
            "torch function handling enabled": c._is_torch_function_enabled()}


def _flushes_denormals() -> bool:
    """`torch.set_flush_denormal` has no getter: a denormal product is zero when it is on."""
    return (torch.full((1,), 1e-310, dtype=torch.float64) * 0.5).item() == 0.0


def _cuda_matmul() -> Any:
    return torch.backends.cuda.matmul


# Every torch switch that changes which kernels run or how precisely, by a readable name. A getter a torch
# version lacks reads as "<unreadable ...>" at both ends, so the table serves torch 2.4 through 2.13.
_SWITCHES: dict[str, Callable[[], Any]] = {
    "cuda.matmul.allow_tf32": lambda: _cuda_matmul().allow_tf32,
    "cuda.matmul.allow_fp16_reduced_precision_reduction": lambda: _cuda_matmul().allow_fp16_reduced_precision_reduction,
    "cuda.matmul.allow_bf16_reduced_precision_reduction": lambda: _cuda_matmul().allow_bf16_reduced_precision_reduction,
    "cuda.matmul.allow_fp16_accumulation": lambda: _cuda_matmul().allow_fp16_accumulation,
    "cuda.matmul.fp32_precision": lambda: _cuda_matmul().fp32_precision,
    "float32_matmul_precision": torch.get_float32_matmul_precision,
    "fp32_precision": lambda: torch.backends.fp32_precision,
    "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "cudnn.fp32_precision": lambda: torch.backends.cudnn.fp32_precision,
    "cudnn.conv.fp32_precision": lambda: torch.backends.cudnn.conv.fp32_precision,
    "cudnn.rnn.fp32_precision": lambda: torch.backends.cudnn.rnn.fp32_precision,
    "mkldnn.fp32_precision": lambda: torch.backends.mkldnn.fp32_precision,
    "onednn.allow_tf32": lambda: torch._C._get_onednn_allow_tf32(),
    "cpu.allow_fp16_reduced_precision_reduction": lambda: torch._C._get_cpu_allow_fp16_reduced_precision_reduction(),
    "math_sdp.allow_fp16_bf16_reduction": lambda: torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed(),
    "flush_denormal": _flushes_denormals,
    "default_dtype": torch.get_default_dtype,
    "default_device": lambda: torch.get_default_device(),
    "cudnn.enabled": lambda: torch.backends.cudnn.enabled,
    "cudnn.benchmark": lambda: torch.backends.cudnn.benchmark,
    "cudnn.benchmark_limit": lambda: torch.backends.cudnn.benchmark_limit,
    "cudnn.deterministic": lambda: torch.backends.cudnn.deterministic,
    "cuda.flash_sdp": lambda: torch.backends.cuda.flash_sdp_enabled(),
    "cuda.mem_efficient_sdp": lambda: torch.backends.cuda.mem_efficient_sdp_enabled(),
    "cuda.math_sdp": lambda: torch.backends.cuda.math_sdp_enabled(),
    "cuda.cudnn_sdp": lambda: torch.backends.cuda.cudnn_sdp_enabled(),
    "cuda.fa3_sdp": lambda: torch._C._get_fa3_sdp_enabled(),
    "cuda.sdp_priority_order": lambda: list(torch._C._get_sdp_priority_order()),
    "cuda.preferred_blas_library": lambda: str(torch.backends.cuda.preferred_blas_library()),
    "cuda.preferred_linalg_library": lambda: str(torch.backends.cuda.preferred_linalg_library()),
    "cuda.sm_carveout": lambda: torch._C._get_sm_carveout_experimental(),
    "mkldnn.enabled": lambda: torch.backends.mkldnn.enabled,
    "mkldnn.deterministic": lambda: torch.backends.mkldnn.deterministic,
    "nnpack.enabled": lambda: torch._C._get_nnpack_enabled(),
    "opt_einsum.enabled": lambda: torch.backends.opt_einsum.enabled,
    "opt_einsum.strategy": lambda: torch.backends.opt_einsum.strategy,
    # the worker turns these on around a correctness trial and back off (`trial_tools.poisoned_memory`); the
    # snapshot compares only between calls, where they are off again
    "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
    "deterministic_algorithms.warn_only": torch.is_deterministic_algorithms_warn_only_enabled,
    "deterministic.fill_uninitialized_memory": lambda: torch.utils.deterministic.fill_uninitialized_memory,
    "num_threads": torch.get_num_threads,
    "autograd_profiler": lambda: torch.autograd._profiler_enabled(),
}


def _switches() -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, read in _SWITCHES.items():
        try:
            values[name] = read()
        except Exception as exc:  # noqa: BLE001  absent in this torch version, or broken by the candidate
            values[name] = f"<unreadable: {type(exc).__name__}>"
    return values


def _import_hooks() -> dict[str, Any]:
    """Finders and path hooks decide what every later import (the worker's, Triton's JIT) loads."""
    return {"sys.meta_path": _refs(sys.meta_path), "sys.path_hooks": _refs(sys.path_hooks)}


def _interpreter_hooks() -> dict[str, Any]:
    """Code the interpreter runs inside other code: tracers, profilers, gc callbacks, signals and timers."""
    hooks: dict[str, Any] = {"sys.settrace": Ref(sys.gettrace()), "sys.setprofile": Ref(sys.getprofile()),
                             "threading.settrace": Ref(getattr(threading, "_trace_hook", None)),
                             "threading.setprofile": Ref(getattr(threading, "_profile_hook", None)),
                             "gc.callbacks": _refs(gc.callbacks)}
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+
    if monitoring is not None:
        hooks["sys.monitoring tools"] = [monitoring.get_tool(i) for i in range(6)]
    for sig in sorted(signal.valid_signals()):
        try:
            hooks[f"signal handler {signal.Signals(sig).name}"] = Ref(signal.getsignal(sig))
        except ValueError:  # a real-time signal without a name
            continue
    for timer in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"):
        hooks[f"signal.{timer}"] = signal.getitimer(getattr(signal, timer))
    return hooks


def _global_registrations() -> dict[str, Any]:
    """Hooks that run around every module's forward (the reference's too), and kernels a candidate registered
    for aten operators (`torch.library.Library("aten", "IMPL")`: the reference would run them)."""
    from torch.nn.modules import module as nn_module

    hooks = {f"torch.nn.modules.module.{name}": _refs(value.values())
             for name, value in sorted(vars(nn_module).items()) if name.startswith("_global_") and isinstance(value, dict)}
    for impl in getattr(torch.library, "_impls", set()):  # "namespace/op.overload/DispatchKey"
        if impl.startswith("aten/") and not impl.endswith("/Meta"):  # torch registers Meta kernels lazily
            hooks[f"torch.library kernel {impl}"] = "registered"
    return hooks


# Process state a candidate must leave as it found it: how a change is reported, and how it is read.
_STATE: dict[str, Callable[[], dict[str, Any]]] = {
    "changed numeric precision or backend switches": _switches,
    "left torch modes active": _mode_stacks,
    "changed the import system": _import_hooks,
    "installed interpreter hooks": _interpreter_hooks,
    "registered global torch hooks or kernels": _global_registrations,
}


def _shown(value: Any, n: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."


def _changes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    missing = "<absent>"
    return [f"{k}: {_shown(before.get(k, missing))} -> {_shown(now.get(k, missing))}"
            for k in sorted(before.keys() | now.keys()) if before.get(k, missing) != now.get(k, missing)]


def _listed(verb: str, names: list[str]) -> str:
    return f"{verb} " + ", ".join(names[:_SHOWN]) + (" ..." if len(names) > _SHOWN else "")


class Snapshot:
    """What the candidate must not change, read before it is imported; `violations` compares."""

    def __init__(self) -> None:
        self.spaces = [_Space(label, attrs, watched) for label, (attrs, watched) in _watched_spaces().items()]
        kept = [(k, m) for k, m in sys.modules.items() if not k.startswith(_TRANSIENT_MODULES)]
        self.module_names = tuple(k for k, _ in kept)
        self.modules = tuple(m for _, m in kept)
        self.state = {label: read() for label, read in _STATE.items()}
        self.threads = {t.ident for t in threading.enumerate()}

    def violations(self) -> list[str]:
        """What changed since the snapshot, as readable reasons (empty when clean)."""
        try:
            return self._violations()
        except Exception as exc:  # noqa: BLE001  the candidate broke something the comparison itself reads
            return [f"broke the tamper check itself ({type(exc).__name__}: {_shown(str(exc))})"]

    def _violations(self) -> list[str]:
        problems = self._attribute_changes() + self._module_table_changes()
        for label, read in _STATE.items():
            changes = _changes(self.state[label], read())
            if changes:
                problems.append(f"{label} (" + "; ".join(changes[:_SHOWN]) + ")")
        new_threads = [t.name for t in threading.enumerate() if t.ident not in self.threads and t.is_alive()]
        if new_threads:
            problems.append("left threads running: " + ", ".join(new_threads[:5]))
        return problems

    def _attribute_changes(self) -> list[str]:
        changed: list[str] = []
        removed: list[str] = []
        added: list[str] = []
        for space in self.spaces:
            replaced, deleted, new = space.changes()
            changed += replaced
            removed += deleted
            added += new
        return [_listed(verb, _sorted(names)) for verb, names in
                (("replaced", changed), ("deleted", removed), ("added", added)) if names]

    def _module_table_changes(self) -> list[str]:
        """`sys.modules` entries swapped or dropped: a later import of them would run the candidate's code."""
        now = sys.modules
        if _all(_map(_is, _map(now.get, self.module_names, _repeat(_MISSING)), self.modules)):
            return []
        pairs = list(_zip(self.module_names, self.modules))
        replaced = _sorted(f"sys.modules[{k!r}]" for k, m in pairs if k in now and now[k] is not m)
        removed = _sorted(f"sys.modules[{k!r}]" for k, _ in pairs if k not in now)
        return [_listed(verb, names) for verb, names in (("replaced", replaced), ("removed", removed)) if names]
