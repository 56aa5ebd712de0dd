"""Bytecode for the workers' imports: written by the harness, only read by its workers.

Every candidate gets a fresh worker, and a worker's start imports torch, Triton and, at the profiler's first use,
torch._dynamo, sympy and the rest of what torch's profiler pulls in: about 900 modules besides torch's own. Where the
installation holds no bytecode for them (installed with `pip install --no-compile`, or built into an image with
PYTHONDONTWRITEBYTECODE set, as container images often are), every start compiled each one from source: on the H200
host, 3.6 s of the 4.5 s that the profiler's first use took, and much of torch's import, on every start.

Workers never write bytecode: a file one candidate's worker wrote, the next worker would run. So the parent primes a
folder of its own once per process, in a trusted child that runs no candidate code and imports what a worker imports
at its start (`eval.worker.serve.prime`), and each worker reads that folder through `-X pycache_prefix`, bound
read-only into its sandbox. Python checks every file it reads there against its source's modification time and size,
so a stale entry is compiled again in memory, never run. Where the installation has its bytecode (pip compiles it at
install time by default), nothing changes: the folder is neither made nor used.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

from eval.process._reaper import owned_tempdir
from eval.process.confine import PROJECT_ROOT

PRIME_TIMEOUT_S = 300.0


def installed_without_bytecode(package: str = "torch") -> bool:
    """Whether `package` (torch: then the rest of the install too) has no bytecode beside its source."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return False
    source = Path(spec.origin)
    return not (source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc").exists()


@functools.lru_cache(maxsize=None)
def primed_folder(visible_gpu: str | None, force: bool = False) -> Path | None:
    """The folder of bytecode for a worker's imports on the GPU that CUDA_VISIBLE_DEVICES entry `visible_gpu` names
    (None: the CPU), primed once per process; None where the installation has its own bytecode (unless `force`), or
    where priming failed (workers then compile from source, as before)."""
    if not (force or installed_without_bytecode()):
        return None
    folder = owned_tempdir("bytecode")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    root = str(PROJECT_ROOT)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    env["CUDA_VISIBLE_DEVICES"] = visible_gpu or ""
    device = "cpu" if visible_gpu is None else "cuda:0"
    command = [sys.executable, "-X", f"pycache_prefix={folder}", "-c",
               f"from eval.worker import serve; serve.prime({device!r})"]
    try:
        done = subprocess.run(command, env=env, cwd=root, capture_output=True, timeout=PRIME_TIMEOUT_S)
        primed = done.returncode == 0
    except (OSError, subprocess.SubprocessError):
        primed = False
    if not primed:  # nothing half-written is ever read
        shutil.rmtree(folder, ignore_errors=True)
        return None
    _readable_by_all(folder)
    return folder


_left_out = False


def workers_folder(visible_gpu: str | None) -> Path | None:
    """What an evaluator's workers read: `primed_folder`, unless a diagnostic leaves it out (`bytecode_left_out`)."""
    return None if _left_out else primed_folder(visible_gpu)


@contextlib.contextmanager
def bytecode_left_out() -> Iterator[None]:
    """Evaluators made meanwhile give their workers no primed folder: a diagnostic only, never a way to evaluate
    (`harness bench eval --part bytecode` compares the two)."""
    global _left_out
    _left_out = True
    try:
        yield
    finally:
        _left_out = False


def interpreter_flags(folder: Path | None) -> list[str]:
    """The flags that make a worker's interpreter read bytecode from `folder` (none without one)."""
    return [] if folder is None else ["-X", f"pycache_prefix={folder}"]


def _readable_by_all(folder: Path) -> None:
    """Workers run as another user where the harness is root: every folder 0755, every file 0644, none writable but
    by the harness (the sandbox binds it read-only besides)."""
    folder.chmod(0o755)
    for parent, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(parent, name), 0o755)
        for name in files:
            os.chmod(os.path.join(parent, name), 0o644)
