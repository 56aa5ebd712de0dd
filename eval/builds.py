"""CUDA/C++ candidates are built ahead, in throwaway sandboxes, on the CPU cores.

A build imports the candidate in a worker with no GPU so that its `load_inline` calls run
(compile-only with nvcc when the evaluator has no GPU), into a build folder the GPU worker
later loads from, read-only (`eval.worker.prebuilt`). Builds run in parallel, at a lower CPU priority than evaluation; an
identical source submitted twice is built once.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from eval import protocol
from eval.cache import cache_key
from eval._kernel_symbols import built_kernels
from eval._reaper import owned_tempdir
from eval.sandbox import UNPRIVILEGED_UID, WorkerDied, WorkerProcess, WorkerTimeout, can_drop_privileges


@dataclass
class Build:
    """Outcome of one build: `ok`, the compiler's error, the folder the extension is in, a note, and the kernels
    the build's files define (`eval._kernel_symbols`, read by the parent)."""

    ok: bool
    error: str = ""
    extensions_dir: str | None = None
    note: str = ""
    seconds: float = 0.0
    kernels: list[str] = field(default_factory=list)  # mangled names of the CUDA kernels the build defined


class Builder:
    """Runs builds on `parallel` threads, each in its own sandbox."""

    def __init__(self, *, parallel: int, arch: str, gpu_available: bool, timeout_s: float, log_cap_bytes: int,
                 isolate_network: bool, extra_env: dict[str, str], versions: dict[str, str],
                 memory_limit_bytes: int | None = None):
        self._arch, self._gpu, self._timeout, self._memory = arch, gpu_available, timeout_s, memory_limit_bytes
        self._log_cap, self._isolate, self._extra_env, self._versions = log_cap_bytes, isolate_network, extra_env, versions
        self.root = owned_tempdir("extensions")
        self.root.chmod(0o755)  # readable by the unprivileged worker wherever the cache lives
        self._threads = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="kh-build")
        self._futures: dict[str, Future[Build]] = {}
        self._lock = threading.Lock()

    def submit(self, source: str) -> Future[Build]:
        """Start (or join) the build of `source`."""
        key = cache_key(candidate=source, versions=self._versions, arch=self._arch)[:24]
        with self._lock:
            if key not in self._futures:
                self._futures[key] = self._threads.submit(self._build, source, self.root / key)
            return self._futures[key]

    def close(self) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _build(self, source: str, ext_dir: Path) -> Build:
        t0 = time.perf_counter()
        ext_dir.mkdir(parents=True, exist_ok=True)
        if can_drop_privileges():
            os.chown(ext_dir, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        compile_only = not self._gpu
        if compile_only and shutil.which("nvcc") is None:
            return Build(ok=True, note="CUDA candidates cannot run without a GPU, and nvcc is not installed, "
                                       "so not even a compile check was possible")
        env = {"TORCH_CUDA_ARCH_LIST": self._arch, "MAX_JOBS": "2", "TORCH_EXTENSIONS_DIR": str(ext_dir),
               **self._extra_env}
        worker = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=self._log_cap,
                               isolate_network=self._isolate, extra_env=env, kind="build",
                               memory_limit_bytes=self._memory)
        try:
            reply, _ = worker.request(protocol.Prepare(candidate_source=source, compile_only=compile_only),
                                      timeout=self._timeout)
        except WorkerTimeout as exc:
            return Build(ok=False, error=f"building took longer than {self._timeout:.0f} s\n{exc.output}")
        except WorkerDied as exc:
            return Build(ok=False, error=f"the build crashed: {exc.detail}\n{exc.output}")
        finally:
            worker.close()
        note = "compiled with nvcc (compile-only check): CUDA candidates cannot run without a GPU" if compile_only else ""
        if reply.ok and reply.handled:
            failed = reply.handled.strip().splitlines()[0] if reply.handled.strip() else "no message"
            note = (f"a load_inline build failed and the candidate caught the error, so it runs its own fallback (as "
                    f"with torch's load_inline): {failed}" + ("; CUDA candidates cannot run without a GPU"
                                                              if compile_only else ""))
        # read here, once the build worker is gone: what the build produced, never what the source says
        return Build(ok=reply.ok, error=reply.error, extensions_dir=str(ext_dir), note=note,
                     seconds=round(time.perf_counter() - t0, 3), kernels=built_kernels(ext_dir))
