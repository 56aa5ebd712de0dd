"""CUDA/C++ candidates are built ahead, in throwaway sandboxes, on the CPU cores.

A build imports the candidate in a worker with no GPU so that its `load_inline` calls run
(compile-only with nvcc when the evaluator has no GPU), into a build folder the GPU worker
later loads from, read-only (`eval.worker.prebuilt`). Builds run in parallel, at a lower CPU priority than evaluation; an
identical source submitted twice is built once.

Disk stays bounded in a long study or service: an evaluation holds its build (`Builder.claim`) until it
ends, and a held folder is never removed; the finished folders nobody holds are kept, for identical
sources to come, up to `kept_bytes` together, past which the oldest are removed, those an evaluation
has loaded before those built ahead and still waiting for their first evaluation (`Builder.submit`).

A build's limit is wall-clock time, which other builds beside it stretch: one that runs out of time with company
is built again alone (no other build runs meanwhile), and only that attempt's outcome is the verdict's, so a slow
honest build is never judged by how busy the builder was.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

from eval.crossing import protocol
from eval.cache import cache_key
from eval._kernel_symbols import built_kernels
from eval.process._reaper import owned_tempdir
from eval.process.sandbox import UNPRIVILEGED_UID, WorkerDied, WorkerProcess, WorkerTimeout, can_drop_privileges
from eval.static_checks import SourceReport, refusal
from eval.crossing._build_record import read_record


def lazy_reply_margin_s(timeout_s: float) -> float:
    """How long before a build's limit its lazy builds stop being waited for: the reply must still arrive in time on
    a loaded host (a sixth of the limit, at most 20 s)."""
    return min(20.0, timeout_s / 6)


def unfinished_builds(ext_dir: Path) -> list[str]:
    """The names of the `load_inline` calls the build worker began and never finished (its record, which candidate
    code wrote: used for a note only, trimmed)."""
    return sorted({str(e.get("name"))[:80] for e in read_record(ext_dir).values() if e.get("building")})


def build_note(reply: protocol.PrepareReply, compile_only: bool, unfinished: list[str], limit_s: float) -> str:
    """What the verdict should say of a build that did not fail: a compile-only check, a build failure the candidate
    caught, a build for a call in forward that failed or that the limit cut off (`unfinished`)."""
    def first_line(text: str) -> str:
        return text.strip().splitlines()[0] if text.strip() else "no message"

    parts = ["compiled with nvcc (compile-only check): CUDA candidates cannot run without a GPU"] if compile_only else []
    if reply.ok and reply.handled:
        parts = [f"a load_inline build failed and the candidate caught the error, so it runs its own fallback (as "
                 f"with torch's load_inline): {first_line(reply.handled)}"]
        parts += ["CUDA candidates cannot run without a GPU"] if compile_only else []
    if reply.ok and reply.lazy_failed:
        parts.append(f"a load_inline build made in forward, built ahead, failed, so the candidate's call to it fails "
                     f"at once: {first_line(reply.lazy_failed)}")
    if reply.ok and unfinished:
        named = ", ".join(map(repr, unfinished[:5])) + (f" and {len(unfinished) - 5} more" if len(unfinished) > 5 else "")
        parts.append(f"load_inline({named}), made in forward and so built ahead, was "
                     f"still building when the build's limit of {limit_s:.0f} s ran out (eval.import_timeout_s): the "
                     f"candidate's call to it fails at once")
    return "; ".join(parts)


# A compiler's line for an include it cannot find: gcc/clang (`FILE:LINE:COL: fatal error: H: No such file or
# directory`) and nvcc's front end (`FILE(LINE): catastrophic error: cannot open source file "H"`)
_MISSING_HEADER = re.compile(r'^(?P<file>\S+?)(?::\d+:\d+: fatal error: (?P<gcc>[^:\s]+): No such file or directory'
                             r'|\(\d+\): catastrophic error: cannot open source file "(?P<nvcc>[^"]+)")', re.MULTILINE)
# The headers of the CUDA toolkit's own libraries (cuBLAS, cuSPARSE, cuSOLVER, cuRAND, cuFFT, NVTX, NVRTC, ...): a
# partial toolkit (nvcc alone, as pip's packages install it) lacks some, which torch's CUDA headers include
_TOOLKIT_HEADER = re.compile(r"^(cuda|cublas|cusparse|cusolver|curand|cufft|cudnn|nvtx|nccl|nvrtc|nvjpeg|npp|cupti)")


def missing_toolkit_header(error: str, build_folder: Path) -> str | None:
    """The toolkit header a failed compile-only build could not find, or None when the failure is the candidate's:
    a header counts as the toolkit's when it is one of its libraries' (`cusparse.h`), or when a file outside the
    candidate's build folder (torch's headers) includes it. A syntax error, or an include of a header of the
    candidate's own making, stays a compile error."""
    for m in _MISSING_HEADER.finditer(error or ""):
        header = m.group("gcc") or m.group("nvcc")
        outside = not Path(m.group("file")).resolve().is_relative_to(build_folder.resolve())
        if outside or _TOOLKIT_HEADER.match(Path(header).name):
            return header
    return None


def needs_build(report: SourceReport, backend: str, own_kernel_policy: str) -> bool:
    """A parsable candidate that builds CUDA/C++ extensions (or is declared CUDA) is built before it is loaded,
    unless its source alone refuses it (a PyTorch-only candidate declared CUDA would take a build slot for nothing)."""
    return (report.status is None and (report.uses_load_inline or backend == "cuda")
            and refusal(report, own_kernel_policy, backend) is None)  # issue 56: backend


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
    timed_out: bool = False


BUILT_AGAIN_ALONE = "and again with no other build beside it"  # in a timed-out build's error when it was retried


class _Company:
    """Which builds run now, so that a build can tell whether it ran alone, and one can run alone: `beside()` holds
    a place among the builds, `alone()` waits until none runs and keeps new ones out until it ends."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running = 0
        self._alone = False
        self._waiting_alone = 0  # builds waiting to run alone: no new build starts before them
        self._joined = 0  # builds begun so far: a build that saw this move, or others running, had company

    @contextmanager
    def beside(self) -> Iterator[Callable[[], bool]]:
        """Run among the others; yields `had_company()`, true if another build ran at any time during this one."""
        with self._changed:
            self._changed.wait_for(lambda: not self._alone and not self._waiting_alone)
            company = self._running > 0
            self._running += 1
            self._joined += 1
            joined = self._joined
        try:
            yield lambda: company or self._joined != joined  # one ran at the start, or one began since
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        with self._changed:
            self._waiting_alone += 1
            self._changed.wait_for(lambda: not self._alone and self._running == 0)
            self._waiting_alone -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._changed:
                self._alone = False
                self._changed.notify_all()


@dataclass(eq=False)
class _Entry:
    """One build and who holds it: `holders` evaluations now, `loaded` once one has ended; `idle` orders the
    folders nobody holds (oldest first); `size` is the folder's bytes, measured once the build is done."""

    future: Future[Build]
    folder: Path
    holders: int = 0
    loaded: bool = False
    size: int = 0
    idle: int = 0


class Claim:
    """An evaluation's hold on one build: its folder stays until `release()` (called once the evaluation ends)."""

    def __init__(self, builder: "Builder", key: str, entry: _Entry):
        self._builder, self._key, self._entry = builder, key, entry
        self.future = entry.future
        self._released = False

    def result(self) -> Build:
        return self.future.result()

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._builder._release(self._key, self._entry)


class Builder:
    """Runs builds on `parallel` threads, each in its own sandbox; keeps at most `kept_bytes` of finished build
    folders that no evaluation holds (see the module docstring)."""

    def __init__(self, *, parallel: int, arch: str, gpu_available: bool, timeout_s: float, log_cap_bytes: int,
                 isolate_network: bool, extra_env: dict[str, str], versions: dict[str, str], kept_bytes: int,
                 memory_limit_bytes: int | None = None, bytecode: Path | None = None):
        self._arch, self._gpu, self._timeout, self._memory = arch, gpu_available, timeout_s, memory_limit_bytes
        self._bytecode = bytecode  # `eval.process._bytecode`: what its build workers' imports read
        self._log_cap, self._isolate, self._extra_env, self._versions = log_cap_bytes, isolate_network, extra_env, versions
        self._kept_bytes = kept_bytes
        self.root = owned_tempdir("extensions")
        self.root.chmod(0o755)  # readable by the unprivileged worker wherever the cache lives
        self._threads = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="kh-build")
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.RLock()  # a build done before its callback is added runs `_finished` under `_entry`
        self._order = itertools.count()  # folder names and idle order: a rebuilt source never reuses a folder
        self._company = _Company()

    def submit(self, source: str) -> Future[Build]:
        """Start (or join) the build of `source`, holding nothing: a build started ahead of its evaluation, which
        claims it when it runs (until then the folder may go, past the bound; the evaluation then builds again)."""
        with self._lock:
            return self._entry(source).future

    def claim(self, source: str) -> Claim:
        """Start (or join) the build of `source` and hold its folder until the claim is released."""
        with self._lock:
            entry = self._entry(source)
            entry.holders += 1
            return Claim(self, self._key(source), entry)

    def kept(self) -> dict[str, Path]:
        """The build folders this builder has now, by their sources' keys (for tests and messages)."""
        with self._lock:
            return {key: entry.folder for key, entry in self._entries.items()}

    def close(self) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _key(self, source: str) -> str:
        return cache_key(candidate=source, versions=self._versions, arch=self._arch)[:24]

    def _entry(self, source: str) -> _Entry:
        """The live entry of `source`, started now if there is none (called under the lock)."""
        key = self._key(source)
        entry = self._entries.get(key)
        if entry is None:
            folder = self.root / f"{key}-{next(self._order)}"
            entry = self._entries[key] = _Entry(future=self._threads.submit(self._build, source, folder), folder=folder)
            entry.future.add_done_callback(lambda _, key=key, entry=entry: self._finished(key, entry))
        return entry

    def _finished(self, key: str, entry: _Entry) -> None:
        size = _bytes_under(entry.folder)
        with self._lock:
            entry.size = size
            if entry.holders == 0:
                entry.idle = next(self._order)
            doomed = self._over_bound()
        _remove(doomed)

    def _release(self, key: str, entry: _Entry) -> None:
        with self._lock:
            entry.holders -= 1
            entry.loaded = True
            if entry.holders == 0:
                entry.idle = next(self._order)
            doomed = self._over_bound()
        _remove(doomed)

    def _over_bound(self) -> list[Path]:
        """Take out of the table, oldest first (loaded ones before ones still waiting for their first evaluation),
        the finished folders nobody holds past `kept_bytes`; the caller removes them (called under the lock)."""
        idle = [(key, e) for key, e in self._entries.items() if e.holders == 0 and e.future.done()]
        total = sum(e.size for _, e in idle)
        doomed = []
        for key, entry in sorted(idle, key=lambda item: (not item[1].loaded, item[1].idle)):
            if total <= self._kept_bytes:
                break
            del self._entries[key]
            total -= entry.size
            doomed.append(entry.folder)
        return doomed

    def _build(self, source: str, ext_dir: Path) -> Build:
        """Build `source` beside the others; if that ran out of time with company, again alone (module docstring)."""
        with self._company.beside() as had_company:
            build = self._attempt(source, ext_dir)
            retry = build.timed_out and had_company()
        if not retry:
            return build
        shutil.rmtree(ext_dir, ignore_errors=True)  # what the first attempt left must not shape the second
        with self._company.alone():
            build = self._attempt(source, ext_dir)
        if build.timed_out:
            first, _, rest = build.error.partition("\n")
            build = replace(build, error=f"{first}, {BUILT_AGAIN_ALONE}\n{rest}")
        return build

    def _attempt(self, source: str, ext_dir: Path) -> Build:
        """One build of `source` into `ext_dir`, in a sandboxed worker with no GPU, within the builder's limit."""
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
                               memory_limit_bytes=self._memory, bytecode=self._bytecode)
        try:
            # lazy builds (made later, in forward) until a margin before the limit, so the reply stays inside it
            until = time.monotonic() + self._timeout - lazy_reply_margin_s(self._timeout)
            reply, _ = worker.request(protocol.Prepare(candidate_source=source, compile_only=compile_only,
                                                       lazy_build_until=until), timeout=self._timeout)
        except WorkerTimeout as exc:
            return Build(ok=False, error=f"building took longer than {self._timeout:.0f} s\n{exc.output}", timed_out=True)
        except WorkerDied as exc:
            return Build(ok=False, error=f"the build crashed: {exc.detail}\n{exc.output}")
        finally:
            worker.close()
        header = missing_toolkit_header(reply.error, ext_dir) if compile_only and not reply.ok else None
        if header is not None:  # the check, not the candidate, fell short: what a GPU machine's toolkit has is missing
            return Build(ok=True, extensions_dir=str(ext_dir), seconds=round(time.perf_counter() - t0, 3),
                         note=f"CUDA candidates cannot run without a GPU, and the compile-only check could not "
                              f"finish: this machine's CUDA toolkit lacks {header}, which the build includes")
        note = build_note(reply, compile_only, unfinished_builds(ext_dir), self._timeout)
        # read here, once the build worker is gone: what the build produced, never what the source says
        return Build(ok=reply.ok, error=reply.error, extensions_dir=str(ext_dir), note=note,
                     seconds=round(time.perf_counter() - t0, 3), kernels=built_kernels(ext_dir))


def _bytes_under(folder: Path) -> int:
    """The bytes of the files under `folder` (0 when it is gone); links are not followed."""
    total = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_size
            except OSError:
                pass
    return total


def _remove(folders: list[Path]) -> None:
    """Remove folders taken out of the table: no evaluation holds them, and a rebuild of their source gets another."""
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
