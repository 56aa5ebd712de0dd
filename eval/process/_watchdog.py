"""A resident-memory watchdog for worker process trees (the parent's side).

cgroup v2 `memory.max` is not delegated on many hosts (cgroup v1 here), and `RLIMIT_AS` breaks CUDA's address
space reservations, so the parent measures instead: every `TICK_S` it sums the resident memory (Pss) of each
registered worker and of every process descended from it (`eval.process._proctree`), and kills the tree of one over its
limit, recording why so that the verdict names the limit.

Each tick reads the trees' resident sets first (`statm`: counters, constant time), and their Pss only for a tree
whose resident set is over its limit: Pss is never larger, so that tree alone can be over. Pss (`smaps_rollup`)
walks every mapping of a process with its memory map locked; a CUDA worker has thousands, and reading it for every
worker on every tick took 3.4 ms a read and 27 % of a core of the parent on the H200 (2026-11-29, 24 candidates at
once), while stalling the workers' own allocations on that lock.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

from eval.process import _proctree as proctree

TICK_S = 0.25
GIB = 1 << 30
_PAGE = os.sysconf("SC_PAGE_SIZE")
_COUNTER_SLACK = 64 << 20


def default_limit_bytes(workers: int) -> int:
    """Per worker: an even share of the machine's memory among the workers and the parent (two shares), at least
    4 GiB (a GPU worker's CUDA context and libraries alone take 1-3 GiB)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 * GIB
    return max(4 * GIB, total // (max(1, workers) + 2))


def _resident_set_bytes(pid: int) -> int:
    """The process's resident set (every resident page it maps, shared ones whole): an upper bound of its Pss."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _proportional_bytes(pid: int) -> int:
    """The process's proportional share of resident memory (Pss: a page shared by n processes counts 1/n in each,
    so forked children sharing their parent's pages are not counted n times), else its resident set."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return _resident_set_bytes(pid)


def over_limit(root: int, limit_bytes: int, charged: Callable[[], int] | None = None) -> int | None:
    """What the tree holds where it is over `limit_bytes`, else None: the kernel's charge to its memory cgroup
    (`charged`, `eval.process._memcg`: shared memory it never maps included) or its Pss. Pss is read only where the
    resident sets, its upper bound, are over (with `_COUNTER_SLACK`: the kernel's resident counters may lag by a few
    pages per thread)."""
    if charged is not None and (held := charged()) > limit_bytes:
        return held
    pids = proctree.processes(root)
    if sum(_resident_set_bytes(pid) for pid in pids) + _COUNTER_SLACK <= limit_bytes:
        return None
    pss = sum(_proportional_bytes(pid) for pid in pids)
    return pss if pss > limit_bytes else None


class MemoryWatch:
    """One thread for all watched trees; `watch(pid, limit, kill)` until `forget(pid)`."""

    def __init__(self) -> None:
        self._watched: dict[int, tuple[int, Callable[[int], None], Callable[[], int] | None]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, pid: int, limit_bytes: int, over: Callable[[int], None],
              charged: Callable[[], int] | None = None) -> None:
        """Call `over(held_bytes)` once (then stop watching) when the tree of `pid` exceeds `limit_bytes` (by its
        memory cgroup's `charged` bytes, where it has one, or its Pss)."""
        with self._lock:
            self._watched[pid] = (limit_bytes, over, charged)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="kh-memory-watch", daemon=True)
                self._thread.start()

    def forget(self, pid: int) -> None:
        with self._lock:
            self._watched.pop(pid, None)

    def _run(self) -> None:
        while True:
            with self._lock:
                watched = dict(self._watched)
                if not watched:
                    self._thread = None
                    return
            for pid, (limit, over, charged) in watched.items():
                rss = over_limit(pid, limit, charged)
                if rss is not None:
                    self.forget(pid)
                    over(rss)
            time.sleep(TICK_S)


WATCH = MemoryWatch()
