"""One CPU core per GPU for the two processes a timing alternates between.

The parent's wall bound (`eval.measure.wall_bound`) compares the wall time of a candidate's blocks with the clean
reference process's. Part of each block is host work in the worker (drawing the fresh inputs, the request and the
reply), and its speed depended on the core each process happened to run on: on the H100 machine, drawing the
same inputs took 200 us a repetition in one process and 400-500 us in another, an offset the bound cannot tell
from hidden work. While a timing runs, both processes (every thread of their process trees) run on the same core,
so that host work costs the same on both sides; afterwards each thread gets its own cores back.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterable, Iterator


def timing_core(gpu_index: int | None) -> int | None:
    """The core for timings on GPU `gpu_index`: one of the highest-numbered cores this process may use, a different
    one per GPU; None where there are too few cores to set one aside (fewer than 4 per GPU)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    index = gpu_index or 0
    if len(cores) < 4 * (index + 1):
        return None
    return cores[-1 - index]


def _threads(pid: int) -> list[int]:
    """Every thread of `pid` and of its descendants (a sandboxed worker runs under a launcher)."""
    threads, todo, seen = [], [pid], set()
    while todo:
        proc = todo.pop()
        if proc in seen:
            continue
        seen.add(proc)
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{proc}/task")]
        except OSError:
            continue
        threads += tids
        for tid in tids:
            try:
                with open(f"/proc/{proc}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                pass
    return threads


@contextlib.contextmanager
def pinned(pids: Iterable[int | None], core: int | None) -> Iterator[int]:
    """Run every thread of the process trees of `pids` on `core` inside the block; yields how many were pinned.
    Threads that exit, or that this process may not move, are left alone (the bound then sees their noise)."""
    saved: dict[int, set[int]] = {}
    if core is not None:
        for pid in pids:
            if pid is None:
                continue
            for tid in _threads(pid):
                try:
                    saved[tid] = os.sched_getaffinity(tid)
                    os.sched_setaffinity(tid, {core})
                except OSError:
                    saved.pop(tid, None)
    try:
        yield len(saved)
    finally:
        for tid, cores in saved.items():
            try:
                os.sched_setaffinity(tid, cores)
            except OSError:
                pass
