"""The evaluator's temporary folders, and their removal however the evaluating process ends.

Every folder the evaluator makes is `kh-<kind>-<owner pid>-...` in the temporary folder; the worker
folders hold candidate sources. A process that ends normally removes its own. For every other end
(SIGKILL, SIGTERM, a crash) each evaluating process starts one reaper (`watch_this_process`): a small
process that holds the read end of a pipe whose write end only the owner holds. When the owner is gone,
however it went, the pipe reads end-of-file; the reaper then kills any process still working in the
owner's folders (orphaned workers, builds) and removes them. `sweep_stale` does the same at start-up
for owners whose reaper could not run (a reboot, say).

Standard library only: the reaper runs this file as `python -I -S reaper.py`, without torch.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

FOLDER_KINDS = ("worker", "build", "extensions", "probe")
_watching: dict[int, int] = {}  # owner pid -> write end of its reaper's pipe (kept open for the owner's life)


def owned_tempdir(kind: str) -> Path:
    """A fresh temporary folder tagged with this process's pid, which the reaper and `sweep_stale` know."""
    assert kind in FOLDER_KINDS
    return Path(tempfile.mkdtemp(prefix=f"kh-{kind}-{os.getpid()}-"))


def owner_of(folder: Path) -> int | None:
    """The pid a `kh-<kind>-<pid>-...` folder belongs to, or None for any other name."""
    parts = folder.name.split("-")
    if len(parts) < 4 or parts[0] != "kh" or parts[1] not in FOLDER_KINDS or not parts[2].isdigit():
        return None
    return int(parts[2])


def processes_in(folder: Path) -> list[int]:
    """Pids of the processes whose working directory is `folder` or below (a worker works in its folder)."""
    target = str(folder.resolve())
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd == target or cwd.startswith(target + os.sep):
            pids.append(int(proc.name))
    return pids


def remove_folder(folder: Path) -> None:
    """SIGKILL every process working in `folder` (or below), then delete it."""
    for pid in processes_in(folder):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(folder, ignore_errors=True)


def sweep_stale(root: str | None = None) -> list[Path]:
    """Remove the `kh-*` folders of owners that are gone; returns what was removed."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob("kh-*-*-*"):
        owner = owner_of(folder)
        if owner is None or _alive(owner):
            continue
        remove_folder(folder)
        removed.append(folder)
    return removed


def watch_this_process() -> None:
    """Start this process's reaper, once per process (a forked child starts its own)."""
    pid = os.getpid()
    if pid in _watching or not sys.platform.startswith("linux"):
        return
    read_end, write_end = os.pipe()  # both non-inheritable: no other child of ours holds the write end
    try:
        subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), str(read_end), str(pid),
                          tempfile.gettempdir()], pass_fds=(read_end,), start_new_session=True, close_fds=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    except OSError:
        os.close(write_end)
        return  # no reaper: the next start-up's sweep removes what this process leaves
    finally:
        os.close(read_end)
    _watching[pid] = write_end


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(read_end: int, owner: int, root: str) -> None:
    """Wait for the owner to go (end-of-file on the pipe), then remove its folders."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            if not os.read(read_end, 4096):
                break
        except InterruptedError:
            continue
    for folder in Path(root).glob(f"kh-*-{owner}-*"):
        if owner_of(folder) == owner:
            remove_folder(folder)


if __name__ == "__main__":
    _reap(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
