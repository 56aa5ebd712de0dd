"""The untrusted worker: imports a candidate and runs it when the parent asks.

Runs as `python -m eval.worker READ_FD WRITE_FD` in a spawned, sandboxed process (see
`eval.sandbox`). It never sees the input seed or the reference outputs: the parent sends
inputs and receives outputs, and decides every verdict itself. The worker reports facts
(outputs, launched kernels, timings, tamper evidence); it never reports a verdict.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib.util
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

_TRACEBACK_CHARS = 4000


def _drop_privileges() -> None:
    """When started as root with KH_DROP_UID set, become that user before anything else runs."""
    uid = os.environ.pop("KH_DROP_UID", None)
    if uid is None or os.getuid() != 0:
        return
    os.setgroups([])
    os.setgid(int(uid))
    os.setuid(int(uid))


_drop_privileges()

import torch  # noqa: E402  (after the privilege drop)

from eval import integrity, timing, tracing  # noqa: E402
from eval.wire import Channel, ChannelClosed  # noqa: E402

_torch_equal = torch.equal  # captured before any candidate can patch them
_torch_allclose = torch.allclose


def _tail(text: str, n: int = _TRACEBACK_CHARS) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def _exc_text() -> str:
    return _tail(traceback.format_exc())


def _is_cuda_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(s in text for s in ("CUDA error", "cudaError", "illegal memory access", "CUBLAS_STATUS", "device-side assert"))


def _import_file(path: Path, module_name: str) -> Any:
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _flatten(out: Any) -> list[Any] | None:
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    start = t.untyped_storage().data_ptr()
    return start, start + t.untyped_storage().nbytes()


class Worker:
    """State of one worker process: the loaded problem, candidate and timing tools."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self.device = torch.device("cpu")
        self.tracer = tracing.TritonLaunchTracer()
        self.tracer.install()
        self.reference: torch.nn.Module | None = None
        self.candidate: torch.nn.Module | None = None
        self.candidate_module_name = ""
        self.snapshot: integrity.Snapshot | None = None
        self.flusher: timing.L2Flusher | None = None
        self._stream: Any = None
        self._loaded = 0

    # -- commands ---------------------------------------------------------------------------
    def cmd_hello(self, msg: dict[str, Any], tensors: list[torch.Tensor]) -> tuple[dict[str, Any], list[torch.Tensor]]:
        self.device = torch.device(msg["device"])
        info: dict[str, Any] = {
            "torch": torch.__version__,
            "python": sys.version.split()[0],
            "uid": os.getuid(),
            "network_isolated": _network_isolated(),
        }
        try:
            import triton

            info["triton"] = triton.__version__
        except ImportError:
            info["triton"] = "absent"
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            props = torch.cuda.get_device_properties(self.device)
            info.update(
                device_name=props.name,
                sm_count=props.multi_processor_count,
                l2_bytes=int(getattr(props, "L2_cache_size", 0)),
                capability=f"{props.major}.{props.minor}",
                cuda=torch.version.cuda,
            )
            self.flusher = timing.L2Flusher(self.device)
            self._stream = torch.cuda.current_stream()
        else:
            info["device_name"] = "cpu (Triton interpreter)"
        return {"ok": True, "info": info}, []

    def cmd_load(self, msg: dict[str, Any], tensors: list[torch.Tensor]) -> tuple[dict[str, Any], list[torch.Tensor]]:
        integrity.strict_precision()
        torch.use_deterministic_algorithms(False)
        workdir = Path.cwd()
        digest = hashlib.sha256((msg["problem_source"] + (msg["candidate_source"] or "")).encode()).hexdigest()[:16]
        problem_path = workdir / f"problem_{digest}.py"
        problem_path.write_text(msg["problem_source"])
        problem = _import_file(problem_path, f"kh_problem_{digest}_{self._loaded}")
        for name, value in (msg.get("size_overrides") or {}).items():
            setattr(problem, name, value)
        init_inputs = problem.get_init_inputs()
        torch.manual_seed(msg["weight_seed"])
        self.reference = problem.Model(*init_inputs).to(self.device)
        if msg.get("candidate_source") is None:  # baseline timing: the reference alone
            return {"ok": True}, []
        if msg.get("extensions_dir"):
            os.environ["TORCH_EXTENSIONS_DIR"] = msg["extensions_dir"]
        self.tracer.reset()
        self.snapshot = integrity.Snapshot()
        self.candidate_module_name = f"kh_candidate_{digest}_{self._loaded}"
        self._loaded += 1
        candidate_path = workdir / f"candidate_{digest}.py"
        candidate_path.write_text(msg["candidate_source"])
        t0 = time.perf_counter()
        try:
            module = _import_file(candidate_path, self.candidate_module_name)
        except BaseException as exc:  # noqa: BLE001  candidate code: anything can come out
            if isinstance(exc, SystemExit):
                return {"ok": False, "stage": "import", "error": f"candidate called sys.exit({exc.code}) at import"}, []
            return {"ok": False, "stage": "import", "error": _exc_text(), "cuda_error": _is_cuda_error(exc)}, []
        import_s = time.perf_counter() - t0
        model_new = getattr(module, "ModelNew", None)
        if model_new is None:
            return {"ok": False, "stage": "format", "error": "the candidate module defines no ModelNew"}, []
        try:
            torch.manual_seed(msg["weight_seed"])
            candidate = model_new(*init_inputs)
            if not isinstance(candidate, torch.nn.Module):
                return {"ok": False, "stage": "format", "error": "ModelNew(...) is not a torch.nn.Module"}, []
            copied = _copy_matching_state(self.reference, candidate)
            self.candidate = candidate.to(self.device)
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "stage": "construct", "error": _exc_text(), "cuda_error": _is_cuda_error(exc)}, []
        violations = self.snapshot.violations()
        if violations:
            return {"ok": False, "stage": "integrity", "error": "; ".join(violations)}, []
        return {"ok": True, "import_s": import_s, "state_copied": copied}, []

    def cmd_prepare(self, msg: dict[str, Any], tensors: list[torch.Tensor]) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """Import a candidate only to build its extensions (no GPU needed); report build failures."""
        from torch.utils import cpp_extension

        failures: list[str] = []
        original = cpp_extension.load_inline

        def recording_load_inline(*args: Any, **kwargs: Any) -> Any:
            try:
                if msg.get("compile_only"):
                    return _compile_only(*args, **kwargs)
                return original(*args, **kwargs)
            except _CompileOnlyDone:
                raise
            except BaseException as exc:  # noqa: BLE001
                failures.append(_tail(str(exc) or _exc_text()))
                raise

        cpp_extension.load_inline = recording_load_inline
        path = Path.cwd() / "candidate_prepare.py"
        path.write_text(msg["candidate_source"])
        try:
            _import_file(path, "kh_candidate_prepare")
        except _CompileOnlyDone:
            pass
        except BaseException:  # noqa: BLE001  non-build failures are judged later, on the GPU
            pass
        finally:
            cpp_extension.load_inline = original
        if failures:
            return {"ok": False, "error": failures[0]}, []
        return {"ok": True}, []

    def cmd_run(self, msg: dict[str, Any], tensors: list[torch.Tensor]) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """One correctness trial on the given inputs, memory poisoned while it runs."""
        assert self.candidate is not None and self.snapshot is not None
        inputs = [t.to(self.device) for t in tensors]
        inputs = _rebuild_args(msg["args"], inputs)
        pristine = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
        self._sync()
        try:
            with _poisoned_memory(msg.get("poison", True)), torch.no_grad():
                out = self.candidate(*inputs)
            self._sync()
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, SystemExit):
                return {"ok": False, "stage": "run", "error": f"candidate called sys.exit({exc.code}) in forward"}, []
            return {"ok": False, "stage": "run", "error": _exc_text(), "cuda_error": _is_cuda_error(exc)}, []
        violations = self.snapshot.violations()
        if violations:
            return {"ok": False, "stage": "integrity", "error": "; ".join(violations)}, []
        outputs, problem = self._check_outputs(out, inputs)
        if problem:
            return {"ok": False, "stage": "output", "error": problem}, []
        mutated = [i for i, (a, b) in enumerate(zip(inputs, pristine)) if isinstance(a, torch.Tensor) and not _same(a, b)]
        return {"ok": True, "structure": "tuple" if isinstance(out, (tuple, list)) else "tensor", "mutated_inputs": mutated}, outputs

    def cmd_kernels(self, msg: dict[str, Any], tensors: list[torch.Tensor]) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """Own Triton launches so far and, on a GPU, a profile of one more call."""
        assert self.candidate is not None
        reply: dict[str, Any] = {"ok": True, "triton_own": self.tracer.own_launches(self.candidate_module_name)}
        if self.device.type == "cuda":
            inputs = _rebuild_args(msg["args"], [t.to(self.device) for t in tensors])
            with torch.no_grad():
                reply["profile"] = tracing.profile_kernels(lambda: self.candidate(*inputs))
            reply["triton_own"] = self.tracer.own_launches(self.candidate_module_name)
        return reply, []

    def cmd_hidden_work(self, msg: dict[str, Any], tensors: list[torch.Tensor]) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """Output copied right after return vs after a full sync; back-to-back wall vs events."""
        assert self.candidate is not None and self.reference is not None and self.snapshot is not None
        n_in = msg["n_inputs"]
        inputs = _rebuild_args(msg["args"], [t.to(self.device) for t in tensors[:n_in]])
        ref_inputs = _rebuild_args(msg["args"], [t.to(self.device) for t in tensors[n_in:]])
        differs = 0
        with torch.no_grad():
            for _ in range(3):
                out = _flatten(self.candidate(*inputs))
                snap = [o.clone() if isinstance(o, torch.Tensor) else o for o in out]  # same stream, right after return
                torch.cuda.synchronize()
                differs += any(isinstance(o, torch.Tensor) and not _same(o, s) for o, s in zip(out, snap))
            reps = msg.get("reps", 20)
            cand = timing.back_to_back_excess(lambda: self.candidate(*inputs), reps)
            ref = timing.back_to_back_excess(lambda: self.reference(*ref_inputs), reps)
        violations = self.snapshot.violations()
        return {"ok": True, "stream_mismatches": differs, "candidate": cand, "reference": ref, "violations": violations}, []

    def cmd_time(self, msg: dict[str, Any], tensors: list[torch.Tensor]) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """Interleaved timing; returns samples summaries and the candidate's last output per pool set."""
        assert self.candidate is not None and self.reference is not None and self.snapshot is not None
        assert self.flusher is not None
        n_in, pool = msg["n_inputs"], msg["pool_size"]
        dev = [t.to(self.device) for t in tensors]
        ref_pool = [dev[k * n_in:(k + 1) * n_in] for k in range(pool)]
        cand_pool = [dev[(pool + k) * n_in:(pool + k + 1) * n_in] for k in range(pool)]
        ref_buf = [t.clone() for t in ref_pool[0]]
        cand_buf = [t.clone() for t in cand_pool[0]]
        ref_args = _rebuild_args(msg["args"], ref_buf)
        cand_args = _rebuild_args(msg["args"], cand_buf)
        first_out: dict[int, list[torch.Tensor]] = {}
        drift = {"count": 0}

        def check_candidate(k: int, out: Any) -> None:
            outs = [o.detach().clone() for o in _flatten(out) if isinstance(o, torch.Tensor)]
            if k not in first_out:
                first_out[k] = outs
            elif not all(_close(a, b) for a, b in zip(outs, first_out[k])):
                drift["count"] += 1

        sides = {
            "reference": timing.TimedSide(_refiller(ref_buf, ref_pool), lambda: self.reference(*ref_args)),
            "candidate": timing.TimedSide(_refiller(cand_buf, cand_pool), lambda: self.candidate(*cand_args), check_candidate),
        }
        with torch.no_grad():
            samples = timing.interleaved(
                sides,
                pool_size=pool,
                min_reps=msg["min_reps"],
                max_reps=msg["max_reps"],
                target_rel_stderr=msg["target_rel_stderr"],
                budget_s=msg["budget_s"],
                warmup_ms=msg["warmup_ms"],
                flush=self.flusher,
            )
        violations = self.snapshot.violations()
        outputs = [o for k in range(pool) for o in first_out.get(k, [])]
        reply = {
            "ok": True,
            "reference": timing.summarize(samples["reference"]),
            "candidate": timing.summarize(samples["candidate"]),
            "sum_ms": sum(samples["reference"]) + sum(samples["candidate"]),
            "inconsistent_timed_outputs": drift["count"],
            "violations": violations,
        }
        return reply, outputs

    def cmd_time_compiled(self, msg: dict[str, Any], tensors: list[torch.Tensor]) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """Time torch.compile(reference) against eager under the same method (baseline only)."""
        assert self.reference is not None and self.flusher is not None
        n_in, pool = msg["n_inputs"], msg["pool_size"]
        dev = [t.to(self.device) for t in tensors]
        ref_pool = [dev[k * n_in:(k + 1) * n_in] for k in range(pool)]
        buf_a = [t.clone() for t in ref_pool[0]]
        buf_b = [t.clone() for t in ref_pool[0]]
        compiled = torch.compile(self.reference)

        args_a = _rebuild_args(msg["args"], buf_a)
        args_b = _rebuild_args(msg["args"], buf_b)
        with torch.no_grad():
            samples = timing.interleaved(
                {
                    "eager": timing.TimedSide(_refiller(buf_a, ref_pool), lambda: self.reference(*args_a)),
                    "compiled": timing.TimedSide(_refiller(buf_b, ref_pool), lambda: compiled(*args_b)),
                },
                pool_size=pool, min_reps=msg["min_reps"], max_reps=msg["max_reps"],
                target_rel_stderr=msg["target_rel_stderr"], budget_s=msg["budget_s"],
                warmup_ms=max(msg["warmup_ms"], 200.0), flush=self.flusher,
            )
        return {"ok": True, "eager": timing.summarize(samples["eager"]), "compiled": timing.summarize(samples["compiled"])}, []

    def cmd_unload(self, msg: dict[str, Any], tensors: list[torch.Tensor]) -> tuple[dict[str, Any], list[torch.Tensor]]:
        self.candidate = self.reference = None
        for name in [n for n in sys.modules if n.startswith(("kh_candidate_", "kh_problem_"))]:
            del sys.modules[name]
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        return {"ok": True}, []

    # -- helpers ----------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def _check_outputs(self, out: Any, inputs: list[Any]) -> tuple[list[torch.Tensor], str]:
        outputs = _flatten(out)
        spans = [_storage_span(t) for t in inputs if isinstance(t, torch.Tensor)]
        for i, o in enumerate(outputs):
            if type(o) is not torch.Tensor:  # noqa: E721  subclasses (lazy or fake tensors) are refused
                return [], f"output {i} is a {type(o).__module__}.{type(o).__qualname__}, not a torch.Tensor"
            if o.layout != torch.strided:
                return [], f"output {i} has layout {o.layout}; a dense tensor is required"
            if o.device.type != self.device.type:
                return [], f"output {i} is on {o.device}, expected {self.device.type}"
            lo, hi = _storage_span(o)
            for j, (a, b) in enumerate(spans):
                if o.numel() and lo < b and a < hi:
                    return [], f"output {i} shares memory with input {j} (returns a view or the input itself)"
        return [o.detach() for o in outputs], ""

    # -- loop -------------------------------------------------------------------------------
    def serve(self) -> None:
        handlers: dict[str, Callable[..., tuple[dict[str, Any], list[torch.Tensor]]]] = {
            "hello": self.cmd_hello, "load": self.cmd_load, "run": self.cmd_run, "kernels": self.cmd_kernels,
            "hidden_work": self.cmd_hidden_work, "time": self.cmd_time, "time_compiled": self.cmd_time_compiled,
            "unload": self.cmd_unload, "prepare": self.cmd_prepare,
        }
        while True:
            try:
                msg, tensors = self.channel.recv()
            except ChannelClosed:
                return
            cmd = msg.get("cmd")
            if cmd == "exit":
                return
            try:
                reply, out = handlers[cmd](msg, tensors)
            except BaseException as exc:  # noqa: BLE001  report, never die silently
                reply, out = {"ok": False, "stage": cmd, "error": _exc_text(), "cuda_error": _is_cuda_error(exc)}, []
            reply["cmd"] = cmd
            try:
                self.channel.send(reply, out)
            except Exception:  # noqa: BLE001  e.g. an output dtype the wire cannot carry
                self.channel.send({"cmd": cmd, "ok": False, "stage": "output", "error": _exc_text()})


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
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


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(_torch_allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2, equal_nan=True))
    return bool(_torch_equal(a, b))


def _refiller(buf: list[torch.Tensor], pool: list[list[torch.Tensor]]) -> Callable[[int], None]:
    """`prepare(k)` for timing: copy input set k of the pool into the fixed input buffers."""
    def prepare(k: int) -> None:
        for b, src in zip(buf, pool[k]):
            b.copy_(src)
    return prepare


def _rebuild_args(spec: list[Any], tensors: list[torch.Tensor]) -> list[Any]:
    """Inputs travel as tensors plus literals: `{"t": i}` marks tensor i, anything else is a literal."""
    return [tensors[a["t"]] if isinstance(a, dict) and "t" in a else a for a in spec]


@contextlib.contextmanager
def _poisoned_memory(enabled: bool):
    """Fill every new allocation (torch.empty & co.) with NaN / max-int while the candidate runs."""
    if not enabled:
        yield
        return
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


def _copy_matching_state(reference: torch.nn.Module, candidate: torch.nn.Module) -> int:
    """Copy reference parameters/buffers into same-named, same-shaped candidate entries."""
    ref_state = reference.state_dict()
    new_state = candidate.state_dict()
    matching = {
        k: v for k, v in ref_state.items() if k in new_state and new_state[k].shape == v.shape and new_state[k].dtype == v.dtype
    }
    if matching:
        candidate.load_state_dict(matching, strict=False)
    return len(matching)


class _CompileOnlyDone(Exception):
    """Raised after a compile-only build succeeded: there is nothing to load without a GPU."""


def _compile_only(name: str, cpp_sources: Any = None, cuda_sources: Any = None, **kwargs: Any) -> Any:
    """Compile `cuda_sources` with nvcc to an object file, as load_inline would, without linking."""
    import subprocess
    import sysconfig

    from torch.utils import cpp_extension

    sources = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
    if not sources:
        raise _CompileOnlyDone()
    body = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" + "\n".join(sources)
    src = Path.cwd() / f"{name}_compile_only.cu"
    src.write_text(body)
    includes = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0").split(";")[0].replace(".", "")
    flags = [str(f) for f in (kwargs.get("extra_cuda_cflags") or [])]
    cmd = ["nvcc", "-c", "-std=c++17", f"-arch=sm_{arch}", "-o", str(src.with_suffix(".o")), *includes, *flags, str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("nvcc failed:\n" + _tail(proc.stderr + proc.stdout))
    raise _CompileOnlyDone()


def _network_isolated() -> bool:
    """True when this process's network namespace has no interface but loopback."""
    try:
        lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    except OSError:
        return False
    names = [line.split(":", 1)[0].strip() for line in lines]
    return all(n == "lo" for n in names)


def main() -> None:
    read_fd, write_fd = int(sys.argv[1]), int(sys.argv[2])
    Worker(Channel(read_fd, write_fd)).serve()
    # the parent is gone or asked us to exit: leave no directory behind even if it was killed
    import shutil

    shutil.rmtree(Path.cwd(), ignore_errors=True)


if __name__ == "__main__":
    main()
