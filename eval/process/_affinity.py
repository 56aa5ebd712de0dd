"""One CPU core per GPU for the two processes a timing alternates between.

The parent's wall bound (`eval.timing.claim_bounds.wall_bound`) compares the wall time of a candidate's blocks with the
clean reference process's. Part of each block is host work in the worker (drawing the fresh inputs, the request and the
reply), and its speed depended on the core each process happened to run on: on the H100 machine, drawing the
same inputs took 200 us a repetition in one process and 400-500 us in another, an offset the bound cannot tell
from hidden work. While one of the two runs a block, it (every thread of its process tree) runs on a core set aside for the GPU,
so that host work costs the same on both sides; between its blocks it is off that core, so a candidate's threads
never share it with the reference process's blocks. The pool sets
those cores aside when it starts (`reserve`), so its own spares, builds and threads do not crowd them (an honest
candidate timed beside three other evaluations was rejected before they were).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterable, Iterator

from eval.process._proctree import threads


_reserved: dict[int, int] = {}  # GPU index -> its timing core, once `reserve` has set them aside


def reserve(gpu_indices: list[int | None], cores_per_gpu: int = 4) -> dict[int, int]:
    """Set one core per GPU aside for timings: the highest-numbered cores this thread may use, taken out of its mask,
    so the threads and processes it starts later (the pool's spares, builds) stay off them. Where there are fewer
    than `cores_per_gpu` cores per GPU, none is set aside (pinning would then only crowd the timed processes)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return {}
    gpus = sorted({g or 0 for g in gpu_indices})
    fresh = [g for g in gpus if g not in _reserved]
    if fresh and len(cores) >= cores_per_gpu * len(gpus):
        free = [c for c in cores if c not in _reserved.values()]
        for g in fresh:
            _reserved[g] = free.pop()
        os.sched_setaffinity(0, set(free))
    return dict(_reserved)


def timing_core(gpu_index: int | None) -> int | None:
    """The core set aside for timings on GPU `gpu_index` (None: none was)."""
    return _reserved.get(gpu_index or 0)


@contextlib.contextmanager
def pinned(pids: Iterable[int | None], core: int | None) -> Iterator[int]:
    """Run every thread of the process trees of `pids` on `core` inside the block; yields how many were pinned.

    On the way out each thread gets its cores back, and a thread started inside the block (it inherited the timing
    core) gets the cores of the thread that called this, so nothing of a candidate stays on the core to crowd the
    reference process's blocks. Threads that exit, or that this process may not move, are left alone (the bound
    then sees their noise)."""
    saved: dict[int, set[int]] = {}
    live = [pid for pid in pids if pid is not None] if core is not None else []
    fallback = os.sched_getaffinity(0) if live else set()
    for pid in live:
        for tid in threads(pid):
            try:
                saved[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, {core})
            except OSError:
                saved.pop(tid, None)
    try:
        yield len(saved)
    finally:
        for pid in live:
            for tid in threads(pid):
                try:
                    os.sched_setaffinity(tid, saved.get(tid, fallback))
                except OSError:
                    pass
