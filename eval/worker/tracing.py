"""Evidence that the candidate's own kernels run.

Triton launches are recorded by wrapping the launch entry point of Triton's JIT
(`JITFunction.run`, or `InterpretedFunction.run` under TRITON_INTERPRET=1, where Triton's
launch hooks do not fire). Each record carries the module the kernel was defined in, so a
kernel counts as the candidate's own only when it comes from the candidate's file.
On a GPU, `profile_kernels` lists every kernel with its GPU time (CUDA-extension kernels
included) so the share of time in the candidate's own kernels can be reported.

The records live in the candidate's process, so nothing makes them unforgeable there (ctypes writes any
memory). What the tracer does is make the shortcuts found so far fail with a named reason: a record is
made only inside the installed launch entry, after the launch returned, and every record is also fed
into an HMAC whose random key exists only inside OpenSSL's state (`seal`). A record added, raised or
changed any other way (through the entry point's closure, or through the worker reached on the stack)
no longer matches the seal, and a tracer that is not the installed one (swapped in on the worker) is
told apart by the entry point it installed. A forger that feeds the seal in the tracer's own format,
or replaces the entry point and the snapshot's view of it, is not stopped here.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections import Counter
from typing import Any, Callable

import torch

Launch = tuple[str, str]  # (defining module, kernel name)


class TracerTampered(Exception):
    """The launch records no longer match what the installed launch entry recorded."""


class TritonLaunchTracer:
    """Counts Triton kernel launches by (module, kernel name), sealed against edits from outside the entry."""

    __slots__ = ("_log", "_start", "_pristine", "_seal", "_entry", "_launcher")

    def __init__(self) -> None:
        self._log: list[Launch] = []
        self._start = 0  # records before it were made before the last reset
        self._pristine = hmac.new(secrets.token_bytes(32), digestmod="sha256")  # the key lives in OpenSSL only
        self._seal = self._pristine.copy()
        self._entry: Callable[..., Any] | None = None
        self._launcher: type | None = None

    def install(self) -> None:
        try:
            if os.environ.get("TRITON_INTERPRET") == "1":
                from triton.runtime.interpreter import InterpretedFunction as launcher_cls
            else:
                from triton.runtime.jit import JITFunction as launcher_cls
        except ImportError:  # triton not installed: nothing to trace
            return
        original = launcher_cls.run
        log, seal = self._log, self._seal

        def traced_run(self_fn: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self_fn, *args, **kwargs)  # a launch that raises (bad arguments) does not count
            if not kwargs.get("warmup", False):
                fn = getattr(self_fn, "fn", None)
                launch = (str(getattr(fn, "__module__", "?")), str(getattr(fn, "__name__", "?")))
                log.append(launch)
                seal.update(_encoded(launch))
            return result

        launcher_cls.run = traced_run
        self._entry, self._launcher = traced_run, launcher_cls

    def own_launches(self, module_name: str) -> list[str]:
        """Names of kernels from `module_name` launched so far; `TracerTampered` if the records were edited."""
        self.verify()
        return sorted({name for mod, name in self._log[self._start:] if mod == module_name})

    def verify(self) -> None:
        """Raise `TracerTampered` unless this tracer is the installed one and its records match its seal."""
        if self._launcher is None and self._log:
            raise TracerTampered("launch records in a tracer that never installed a launch entry")
        if self._launcher is not None and self._launcher.__dict__.get("run") is not self._entry:
            raise TracerTampered("Triton's launch entry is not the one the harness installed")
        replay = self._pristine.copy()
        for launch in self._log:
            if not (isinstance(launch, tuple) and len(launch) == 2 and all(type(s) is str for s in launch)):
                raise TracerTampered(f"a launch record is not one the launch entry writes ({launch!r:.80})")
            replay.update(_encoded(launch))
        if not hmac.compare_digest(replay.digest(), self._seal.digest()):
            raise TracerTampered("launch records were added or changed outside Triton's launch entry")

    def reset(self) -> None:
        """Forget the launches so far (the seal keeps covering them: it has no way back)."""
        self._start = len(self._log)


def _encoded(launch: Launch) -> bytes:
    """One record as the seal takes it: unambiguous, whatever the names contain."""
    module, name = launch
    return f"{len(module)}:{module}{len(name)}:{name};".encode()


def _device_time_us(evt: Any) -> float:
    for attr in ("self_device_time_total", "device_time_total", "self_cuda_time_total", "cuda_time_total"):
        value = getattr(evt, attr, None)
        if value:
            return float(value)
    return 0.0


def profile_kernels(fn: Callable[[], Any], repeats: int = 3) -> list[tuple[str, float]]:
    """Run `fn` under the CUDA profiler; return (kernel name, GPU ms per call), largest first."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    totals: Counter[str] = Counter()
    for evt in prof.key_averages():
        if str(getattr(evt, "device_type", "")).endswith("CUDA"):
            totals[evt.key] += _device_time_us(evt) / 1000.0 / repeats
    return [(name, ms) for name, ms in totals.most_common() if ms > 0]
