"""Evidence that the candidate's own kernels run.

Triton launches are recorded by wrapping the launch entry point of Triton's JIT
(`JITFunction.run`, or `InterpretedFunction.run` under TRITON_INTERPRET=1, where Triton's
launch hooks do not fire). Each record carries the module the kernel was defined in, so a
kernel counts as the candidate's own only when it comes from the candidate's file.
On a GPU, `profile_kernels` lists every kernel with its GPU time (CUDA-extension kernels
included) so the share of time in the candidate's own kernels can be reported.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Callable

import torch


class TritonLaunchTracer:
    """Counts Triton kernel launches by (module, kernel name)."""

    def __init__(self) -> None:
        self.launches: Counter[tuple[str, str]] = Counter()
        self._installed: list[tuple[type, Callable[..., Any]]] = []

    def install(self) -> None:
        try:
            if os.environ.get("TRITON_INTERPRET") == "1":
                from triton.runtime.interpreter import InterpretedFunction as launcher_cls
            else:
                from triton.runtime.jit import JITFunction as launcher_cls
        except ImportError:  # triton not installed: nothing to trace
            return
        original = launcher_cls.run
        tracer = self

        def traced_run(self_fn: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self_fn, *args, **kwargs)  # a launch that raises (bad arguments) does not count
            if not kwargs.get("warmup", False):
                fn = getattr(self_fn, "fn", None)
                tracer.launches[(getattr(fn, "__module__", "?"), getattr(fn, "__name__", "?"))] += 1
            return result

        launcher_cls.run = traced_run
        self._installed.append((launcher_cls, original))

    def own_launches(self, module_name: str) -> list[str]:
        """Names of kernels from `module_name` launched so far."""
        return sorted({name for (mod, name), n in self.launches.items() if mod == module_name and n > 0})

    def reset(self) -> None:
        self.launches.clear()


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
