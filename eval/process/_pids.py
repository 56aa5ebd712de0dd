"""A per-worker limit on processes and threads (the parent's side).

RLIMIT_NPROC alone counts tasks per uid, so every worker of one uid would share one budget: a fork bomb in one
worker would make thread creation fail in the others. Two plans keep the count per worker, the first that works
here is used (probed once) and every result records it (`process_limit`):

- "cgroup": the worker joins a pids cgroup of its own (cgroup v2, or the v1 `pids` hierarchy) whose `pids.max`
  is the limit; the kernel refuses a fork past it, and `pids.events` tells the parent the limit was hit. Needs a
  cgroup folder this harness may create children in (root, or a delegated subtree).
- "userns": the worker enters a user namespace of its own and only then sets RLIMIT_NPROC; since Linux 5.14 the
  kernel counts tasks per user namespace (ucounts), so the limit is the worker's own, and the uid's own limit
  outside stays the outer bound. The verdict names the limit when the candidate's error shows a refused fork.
- "uid": RLIMIT_NPROC for the uid, shared with its other processes (where no user namespace can be made).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from eval.process._reaper import owner_of, owner_token

_PROBE_LOCK = threading.Lock()  # workers start on several threads; one probe answers them all


def hierarchies() -> list[tuple[int, Path, list[str]]]:
    """This process's own cgroup in each mounted hierarchy: (version, folder, controllers), v2 first."""
    own: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            own[controllers] = path
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except (OSError, ValueError):
        return []
    found = []
    for line in mounts:
        fields = line.split()
        sep = fields.index("-")
        point, fstype, options = fields[4], fields[sep + 1], fields[sep + 3].split(",")
        if fstype == "cgroup2" and "" in own:
            found.append((2, Path(point + own[""]), []))
        elif fstype == "cgroup":
            path = next((p for c, p in own.items() if set(c.split(",")) & set(options)), None)
            if path is not None:
                found.append((1, Path(point + path), options))
    return sorted(found, key=lambda h: -h[0])


def _candidate_bases() -> list[Path]:
    """This process's own cgroup in each hierarchy that has a pids controller (v2 first, then v1)."""
    return [path for version, path, options in hierarchies() if version == 2 or "pids" in options]


def unified_base() -> Path | None:
    """This process's own cgroup in the v2 hierarchy, where one is mounted."""
    return next((path for version, path, _ in hierarchies() if version == 2), None)


def joinable(group: Path) -> bool:
    """Can a child process of this one join `group`?"""
    join = f"open({str(group / 'cgroup.procs')!r}, 'w').write('0')"
    try:
        return subprocess.run([sys.executable, "-I", "-S", "-c", join], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _works(base: Path) -> bool:
    """Can this process make a child cgroup of `base` with `pids.max`, and can a child process join it?"""
    probe = base / f"kh-probe-{owner_token()}-pids"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        (probe / "pids.max").write_text("16")
        return joinable(probe)
    except OSError:
        return False
    finally:
        remove(probe)


def sweep(base: Path) -> None:
    """Remove the cgroups under `base` whose owners are gone (`eval.process._reaper`)."""
    for stale in base.glob("kh-*-*-*"):
        owner = owner_of(stale)
        if owner is not None and owner_token(int(owner.split(".")[0])) != owner:
            remove(stale)


def cgroup_base() -> Path | None:
    """Where per-worker pids cgroups go, or None when no hierarchy here lets this harness make them."""
    with _PROBE_LOCK:
        return _cgroup_base()


@functools.lru_cache(maxsize=1)
def _cgroup_base() -> Path | None:
    """`cgroup_base`, probed once. Stale cgroups of owners that are gone are removed on the way."""
    if not sys.platform.startswith("linux") or os.environ.get("KH_NO_PIDS_CGROUP"):
        return None
    for base in _candidate_bases():
        if _works(base):
            sweep(base)
            return base
    return None


def create(name: str, limit: int) -> Path:
    """A fresh pids cgroup `name` capped at `limit` tasks; the worker joins it by writing its `cgroup.procs`."""
    base = cgroup_base()
    if base is None:
        raise OSError("no pids cgroup hierarchy is usable here")
    group = base / name
    group.mkdir()
    (group / "pids.max").write_text(str(limit))
    return group


def times_hit(group: Path) -> int:
    """How many forks the cgroup's limit refused (the kernel's count, `pids.events`)."""
    try:
        for line in (group / "pids.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "max":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def remove(group: Path) -> None:
    """Kill whatever is left in the cgroup (a process that left the worker's process group too) and remove it. One
    that stays busy past ~5 s (its killed tasks not yet reaped) is left to the next start-up's sweep."""
    for _ in range(250):
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)  # the killed tasks are still exiting
