"""Holding a candidate's worker still while the reference is timed (the parent's side).

The timing core (`eval.process._affinity`) is set aside by affinity masks, which a candidate may change for its own
threads, and a candidate may leave threads or processes (in sessions of their own) running between its requests. One that
runs while the reference process runs a block shares the timing core or the host with it: that slows a host-bound
reference, which inflates the candidate's speedup and loosens the wall bound. So while anything of the reference
side is timed (`held`), every process of the candidate's worker is stopped; it is resumed before the parent sends
the candidate its next request, so no request's timeout ever runs while its worker is stopped. Plans, the first that
works here (probed once; every result records it as `freeze`):

- "cgroup": the worker joins a cgroup v2 of its own (its pids cgroup where that is v2, else one made for this) when it
  starts (`eval.process.confine`), and `cgroup.freeze` stops all of it at once. No signal is involved, a child is born
  in its parent's cgroup, and a frozen task can still be killed.
- "signals": SIGSTOP, which cannot be caught or ignored, to every process of the worker (the members of its pids
  cgroup where it has one, and every process descended from its launcher, which in its PID namespace holds every
  orphan too: they are re-parented to the worker itself), repeated until every thread of them shows stopped.
- "signals-tree": the same without a PID namespace or a cgroup: a process that left the tree (a grandchild whose
  parent exited) is not found.

cgroup v1's freezer is not used: freezing one spinning process took 15 ms there (cgroup v2: 0.2 ms), and a task it
froze cannot be killed until thawed.

Stopping never waits on the worker: it polls the kernel's state for at most `STOP_WAIT_S`, and a block then runs with
whatever did not stop (`Freezer.stop` says so; the timing counts such blocks). Nothing the candidate reports enters.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from eval.process import _pids as pids, _proctree as proctree
from eval.process._reaper import owner_token

STOP_WAIT_S = 0.5  # a worker not stopped by then is timed beside (an honest one stops in well under a millisecond)
POLL_S = 0.0001  # between looks at the kernel's state: the tasks to be stopped need the CPU to stop
_PROBE_LOCK = threading.Lock()  # workers start on several threads; one probe answers them all


def cgroup_base() -> Path | None:
    """Where per-worker freezer cgroups go (this process's own cgroup v2), or None where none can be made and joined."""
    with _PROBE_LOCK:
        return _cgroup_base()


@functools.lru_cache(maxsize=1)
def _cgroup_base() -> Path | None:
    """`cgroup_base`, probed once. Stale groups of owners that are gone are removed on the way."""
    base = pids.unified_base()
    if base is None or os.environ.get("KH_NO_FREEZE_CGROUP"):
        return None
    probe = base / f"kh-probe-{owner_token()}-freeze"
    try:
        probe.mkdir()
    except OSError:
        return None
    try:
        works = (probe / "cgroup.freeze").exists() and pids.joinable(probe)
    finally:
        pids.remove(probe)
    if works:
        pids.sweep(base)
    return base if works else None


def create(name: str) -> Path:
    """A fresh cgroup v2 `name` for one worker to join and be frozen in."""
    base = cgroup_base()
    if base is None:
        raise OSError("no cgroup v2 is usable here")
    group = base / name
    group.mkdir()
    return group


def can_freeze(group: Path | None) -> bool:
    """Whether `group` is a cgroup v2 that `cgroup.freeze` can stop."""
    return group is not None and (group / "cgroup.freeze").exists()


class Freezer:
    """Stops and resumes every process of one worker: its launcher `pid`'s tree, `members` (its pids cgroup) and,
    with the "cgroup" plan, `group` as a whole."""

    def __init__(self, pid: int, *, group: Path | None, members: Path | None, pid_namespace: bool):
        self.pid, self.group, self.members = pid, group, members
        if can_freeze(group):
            self.mechanism = "cgroup"
        else:
            self.mechanism = "signals" if pid_namespace or members is not None else "signals-tree"

    def stop(self) -> bool:
        """Stop the worker; True when every thread of it was seen stopped within `STOP_WAIT_S`."""
        deadline = time.monotonic() + STOP_WAIT_S
        if self.mechanism == "cgroup":
            return self._set_frozen(True, deadline)
        return self._signal_until(lambda pid: not _stopped(pid), signal.SIGSTOP, deadline)

    def resume(self) -> bool:
        """Let the worker run again, and wait (at most `STOP_WAIT_S`) until the kernel shows every thread of it able to
        run; True when it did. Thawing is not instant, and a block sent to a worker still thawing would count the
        thaw in that worker's wall time. A worker that died meanwhile is left alone."""
        deadline = time.monotonic() + STOP_WAIT_S
        if self.mechanism == "cgroup":
            return self._set_frozen(False, deadline)
        return self._signal_until(_stopped_threads, signal.SIGCONT, deadline)

    def _signal_until(self, pending: Callable[[int], bool], sig: int, deadline: float) -> bool:
        """Send `sig` to each process of the worker for which `pending` holds until none does; False past `deadline`."""
        while True:
            left = [pid for pid in self._processes() if pending(pid)]
            if not left:
                return True
            if time.monotonic() > deadline:
                return False
            for pid in left:
                _signal(pid, sig)
            time.sleep(POLL_S)

    def _set_frozen(self, frozen: bool, deadline: float) -> bool:
        """`cgroup.freeze` 1 or 0, then wait for the kernel's `frozen 1` or `frozen 0` in `cgroup.events`."""
        state = "1" if frozen else "0"
        try:
            (self.group / "cgroup.freeze").write_text(state)
            while f"frozen {state}" not in (self.group / "cgroup.events").read_text().splitlines():
                if time.monotonic() > deadline:
                    return False
                time.sleep(POLL_S)
        except OSError:  # the group is gone with its worker: nothing of it runs
            pass
        return True

    def _processes(self) -> list[int]:
        """Every process of the worker found now: its launcher's tree and its pids cgroup's members."""
        found = set(proctree.processes(self.pid))
        if self.members is not None:
            try:
                found.update(int(p) for p in (self.members / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(found)


def _stopped(pid: int) -> bool:
    """Whether no thread of `pid` can run: each is stopped, traced while stopped, a zombie or gone."""
    return all(state in (b"T", b"t", b"Z", b"X") for state in _thread_states(pid))


def _stopped_threads(pid: int) -> bool:
    """Whether some thread of `pid` is stopped by a signal (state T)."""
    return b"T" in _thread_states(pid)


def _thread_states(pid: int) -> list[bytes]:
    """The scheduler state of each thread of `pid` (none when it is gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    states = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                states.append(fh.read().rsplit(b")", 1)[1].split()[0])
        except (OSError, IndexError):
            continue
    return states


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@contextlib.contextmanager
def held(*workers: Any) -> Iterator[bool]:
    """Keep every one of `workers` (`WorkerProcess`es, or None) stopped inside; yields whether each was fully stopped
    (True with nothing to stop). Each is resumed on the way out whatever happened inside, the block raising or timing
    out too."""
    freezers: list[Freezer] = [f for f in (getattr(w, "freezer", None) for w in workers) if f is not None]
    with contextlib.ExitStack() as resume:
        still = True
        for freezer in freezers:
            resume.callback(freezer.resume)
            still = freezer.stop() and still
        yield still
