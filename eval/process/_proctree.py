"""A worker's process tree as /proc shows it, for the parent's per-block work on it (`eval.process._affinity`,
`eval.process._freeze`) and its memory watchdog (`eval.process._watchdog`): each thread's `children` file, so nothing
scans all of /proc."""

from __future__ import annotations

import os


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return []


def processes(pid: int) -> list[int]:
    """`pid` and every process descended from it (a sandboxed worker runs under a launcher)."""
    found, todo = [], [pid]
    while todo:
        proc = todo.pop()
        if proc in found:
            continue
        found.append(proc)
        for tid in _tasks(proc):
            try:
                with open(f"/proc/{proc}/task/{tid}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
            except (OSError, ValueError):
                pass
    return found


def threads(pid: int) -> list[int]:
    """Every thread of `pid` and of its descendants."""
    return [tid for proc in processes(pid) for tid in _tasks(proc)]
