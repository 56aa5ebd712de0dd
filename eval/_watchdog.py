"""A resident-memory watchdog for worker process trees (the parent's side).

cgroup v2 `memory.max` is not delegated on many hosts (cgroup v1 here), and `RLIMIT_AS` breaks CUDA's address
space reservations, so the parent measures instead: every `TICK_S` it sums the resident memory (Pss) of each
registered worker and of every process descended from it (read from /proc), and kills the tree of one over its
limit, recording why so that the verdict names the limit.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

TICK_S = 0.25
GIB = 1 << 30


def default_limit_bytes(workers: int) -> int:
    """Per worker: an even share of the machine's memory among the workers and the parent (two shares), at least
    4 GiB (a GPU worker's CUDA context and libraries alone take 1-3 GiB)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 * GIB
    return max(4 * GIB, total // (max(1, workers) + 2))


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(ppid, []).append(int(name))
    return tree


def _resident_bytes(pid: int) -> int:
    """The process's proportional share of resident memory (Pss: a page shared by n processes counts 1/n in each,
    so forked children sharing their parent's pages are not counted n times), else its resident set."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def tree_rss(root: int, children: dict[int, list[int]] | None = None) -> int:
    """Resident bytes of `root` and all its descendants."""
    children = _children() if children is None else children
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _resident_bytes(pid)
        todo += children.get(pid, [])
    return total


class MemoryWatch:
    """One thread for all watched trees; `watch(pid, limit, kill)` until `forget(pid)`."""

    def __init__(self) -> None:
        self._watched: dict[int, tuple[int, Callable[[int], None]]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, pid: int, limit_bytes: int, over: Callable[[int], None]) -> None:
        """Call `over(rss_bytes)` once (then stop watching) when the tree of `pid` exceeds `limit_bytes`."""
        with self._lock:
            self._watched[pid] = (limit_bytes, over)
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
            children = _children()
            for pid, (limit, over) in watched.items():
                rss = tree_rss(pid, children)
                if rss > limit:
                    self.forget(pid)
                    over(rss)
            time.sleep(TICK_S)


WATCH = MemoryWatch()
