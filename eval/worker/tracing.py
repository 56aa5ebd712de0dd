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

Gluon and Helion (issue 56) are Triton underneath, so their launches come through the same entry. Each record also
names its language: "gluon" when the launched function is exactly Triton's `GluonJITFunction` (a `@gluon.jit`
kernel), "helion" when it is a kernel Helion generated, else "triton". Helion writes the Triton code of each
`@helion.kernel` into a module of its own (torch's code cache), so its launches name that module, never the
candidate's: `arm_helion` wraps Helion's compile step (`BoundKernel.compile_config`) and notes, sealed too, which
generated module was compiled from a kernel defined in which module. A Helion launch then counts for the module
that defined the `@helion.kernel`, and only when its generated module was compiled while the tracer watched.
"""

from __future__ import annotations

import hmac
import os
import secrets
import sys
from collections import Counter
from typing import Any, Callable

import torch

Launch = tuple[str, str, str]  # (defining module, kernel name, language); issue 56: the language


class TracerTampered(Exception):
    """The launch records no longer match what the installed launch entry recorded."""


class TritonLaunchTracer:
    """Counts Triton kernel launches by (module, kernel name), sealed against edits from outside the entry."""

    __slots__ = ("_log", "_start", "_pristine", "_seal", "_entry", "_launcher",
                 "_made", "_made_seal", "_helion_entry", "_helion_cls")  # issue 56: Helion's compile records

    def __init__(self) -> None:
        self._log: list[Launch] = []
        self._start = 0  # records before it were made before the last reset
        self._pristine = hmac.new(secrets.token_bytes(32), digestmod="sha256")  # the key lives in OpenSSL only
        self._seal = self._pristine.copy()
        self._entry: Callable[..., Any] | None = None
        self._launcher: type | None = None
        self._made: dict[str, str] = {}  # issue 56: module Helion generated -> module of the @helion.kernel
        self._made_seal = self._pristine.copy()
        self._helion_entry: Callable[..., Any] | None = None
        self._helion_cls: type | None = None

    def install(self) -> None:
        try:
            if os.environ.get("TRITON_INTERPRET") == "1":
                from triton.runtime.interpreter import InterpretedFunction as launcher_cls
            else:
                from triton.runtime.jit import JITFunction as launcher_cls
        except ImportError:  # triton not installed: nothing to trace
            return
        original = launcher_cls.run
        log, seal, made = self._log, self._seal, self._made

        def traced_run(self_fn: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self_fn, *args, **kwargs)  # a launch that raises (bad arguments) does not count
            if not kwargs.get("warmup", False):
                fn = getattr(self_fn, "fn", None)
                module = str(getattr(fn, "__module__", "?"))  # issue 56: and the launch's language
                gluon = sys.modules.get("triton.experimental.gluon._runtime")
                language = "gluon" if gluon is not None and type(self_fn) is getattr(gluon, "GluonJITFunction", None) \
                    else "helion" if module in made else "triton"
                launch = (made.get(module, module), str(getattr(fn, "__name__", "?")), language)
                log.append(launch)
                seal.update(_encoded(launch))
            return result

        launcher_cls.run = traced_run
        self._entry, self._launcher = traced_run, launcher_cls

    def arm_helion(self) -> None:  # issue 56
        """Watch Helion's compile step, so that launches of the code it generates count for the module that defined
        each `@helion.kernel`. Imports Helion (seconds), so the worker calls it only for a candidate that names it;
        nothing happens where Helion is not installed (the candidate's own import then says so)."""
        try:
            from helion.runtime.kernel import BoundKernel
        except ImportError:
            return
        if self._helion_cls is not None:
            return
        original = BoundKernel.compile_config
        made, seal = self._made, self._made_seal

        def traced_compile(self_bk: Any, *args: Any, **kwargs: Any) -> Any:
            compiled = original(self_bk, *args, **kwargs)
            generated = str(getattr(compiled, "__module__", "?"))
            defined = str(getattr(getattr(getattr(self_bk, "kernel", None), "fn", None), "__module__", "?"))
            if generated not in made:  # the first compile of a module names its maker for good
                made[generated] = defined
                seal.update(_encoded((generated, defined, "made")))
            return compiled

        BoundKernel.compile_config = traced_compile
        self._helion_entry, self._helion_cls = traced_compile, BoundKernel

    def own_launches(self, module_name: str) -> list[str]:
        """Names of kernels from `module_name` launched so far; `TracerTampered` if the records were edited."""
        self.verify()
        return sorted({name for mod, name, _ in self._log[self._start:] if mod == module_name})

    def own_languages(self, module_name: str) -> list[str]:  # issue 56
        """The languages ("triton", "gluon", "helion") of the kernels from `module_name` launched so far."""
        self.verify()
        return sorted({language for mod, _, language in self._log[self._start:] if mod == module_name})

    def verify(self) -> None:
        """Raise `TracerTampered` unless this tracer is the installed one and its records match its seal."""
        if self._launcher is None and self._log:
            raise TracerTampered("launch records in a tracer that never installed a launch entry")
        if self._launcher is not None and self._launcher.__dict__.get("run") is not self._entry:
            raise TracerTampered("Triton's launch entry is not the one the harness installed")
        replay = self._pristine.copy()
        for launch in self._log:
            if not (isinstance(launch, tuple) and all(type(s) is str for s in launch)):  # issue 56: the seal counts parts
                raise TracerTampered(f"a launch record is not one the launch entry writes ({launch!r:.80})")
            replay.update(_encoded(launch))
        if not hmac.compare_digest(replay.digest(), self._seal.digest()):
            raise TracerTampered("launch records were added or changed outside Triton's launch entry")
        if self._helion_cls is not None and self._helion_cls.__dict__.get("compile_config") is not self._helion_entry:
            raise TracerTampered("Helion's compile step is not the one the harness installed")  # issue 56
        made = self._pristine.copy()
        for generated, defined in self._made.items():  # issue 56: a generated module's maker, as the compile noted it
            if type(generated) is not str or type(defined) is not str:
                raise TracerTampered("a record of Helion's compiles is not one its compile step writes")
            made.update(_encoded((generated, defined, "made")))
        if not hmac.compare_digest(made.digest(), self._made_seal.digest()):
            raise TracerTampered("records of Helion's compiles were added or changed outside its compile step")

    def reset(self) -> None:
        """Forget the launches so far (the seal keeps covering them: it has no way back)."""
        self._start = len(self._log)


def _encoded(launch: Launch) -> bytes:
    """One record as the seal takes it: unambiguous, whatever the names contain."""
    return "".join(f"{len(part)}:{part}" for part in launch).encode() + b";"  # issue 56: three parts


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
