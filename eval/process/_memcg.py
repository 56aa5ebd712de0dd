"""Per-worker memory cgroups: what a worker holds that no Pss shows (the parent's side).

The watchdog (`eval.process._watchdog`) sums the Pss of a worker's processes, which counts only pages they map. Pages a
worker holds without mapping them are shared memory of the kernel's: a memfd or System V segment it filled and
unmapped, files in its private tmpfs (`/tmp`, `/dev/shm`, its own folder). Those escaped the limit (a never-mapped
memfd of any size passed). The kernel charges every such page to the memory cgroup of the task that made it, so a
worker that joins a memory cgroup of its own (`create`, joined in `eval.process.confine`'s confinement before any of its
code runs) has all of it counted: `charged_bytes` is its anonymous memory plus its shared memory, and the watchdog
holds the worker to the larger of that and its Pss.

A memory cgroup is made where this harness may make one: the v1 `memory` hierarchy (this process's own cgroup there)
or a v2 cgroup whose parent hands children the memory controller. Elsewhere `base()` is None, the Pss alone applies,
and each result's `memory_accounting` says which held the worker.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from pathlib import Path

from eval.process import _pids as pids
from eval.process._reaper import owner_token

_PROBE_LOCK = threading.Lock()
# memory.stat's fields that hold what a worker's own memory is: anonymous pages (its heap, CUDA's host allocations)
# and shared memory (memfd, System V, tmpfs), for the cgroup and its children; v2 names, then v1's
_FIELDS = {2: ("anon", "shmem"), 1: ("total_rss", "total_shmem")}


def base() -> tuple[int, Path] | None:
    """(cgroup version, folder) where per-worker memory cgroups go, or None where none can be made."""
    with _PROBE_LOCK:
        return _base()


@functools.lru_cache(maxsize=1)
def _base() -> tuple[int, Path] | None:
    if not sys.platform.startswith("linux") or os.environ.get("KH_NO_MEMORY_CGROUP"):
        return None
    for version, folder, options in pids.hierarchies():
        if version == 1 and "memory" not in options:
            continue
        if _works(folder):
            pids.sweep(folder)
            return version, folder
    return None


def _works(folder: Path) -> bool:
    """Can this process make a child cgroup of `folder` that has memory accounting, and can a child process join it?"""
    probe = folder / f"kh-probe-{owner_token()}-memory"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / "memory.stat").exists() and pids.joinable(probe)
    finally:
        pids.remove(probe)


def create(name: str) -> Path:
    """A fresh memory cgroup `name` for one worker to join; OSError where none can be made."""
    found = base()
    if found is None:
        raise OSError("no memory cgroup can be made here")
    group = found[1] / name
    group.mkdir()
    return group


def charged_bytes(group: Path) -> int:
    """The worker's anonymous and shared memory as the kernel charged it to `group` (0 when it cannot be read)."""
    found = base()
    fields = _FIELDS[found[0]] if found else ()
    total = 0
    try:
        for line in (group / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key in fields:
                total += int(value)
    except (OSError, ValueError):
        return 0
    return total
