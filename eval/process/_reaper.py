"""The evaluator's temporary folders, and their removal however the evaluating process ends.

Every folder the evaluator makes is `kh-<kind>-<owner>-...` in the temporary folder, where the owner is
`<pid>.<start time>`: pids are reused (a long test suite wraps a 32768-pid space), so a pid alone would let a
dead owner's reaper remove a newer process's folders, or keep a dead owner's folders as if it lived. The worker
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

FOLDER_KINDS = ("worker", "build", "extensions", "probe", "bytecode")
_watching: dict[int, int] = {}  # pid -> write end of its reaper's pipe (kept open for the owner's life)


def owned_tempdir(kind: str) -> Path:
    """A fresh temporary folder tagged with this process's identity, which the reaper and `sweep_stale` know."""
    assert kind in FOLDER_KINDS
    return Path(tempfile.mkdtemp(prefix=f"kh-{kind}-{owner_token()}-"))


def owner_token(pid: int | None = None) -> str | None:
    """`<pid>.<start time>` of a running process (this one by default), or None once it is gone.

    The start time (clock ticks after boot, /proc/<pid>/stat) tells a pid's new holder from its old one."""
    pid = os.getpid() if pid is None else pid
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone, or no /proc (not Linux: there `sweep_stale` and the reaper do nothing)
        return f"{pid}.0" if pid == os.getpid() else None
    return f"{pid}.{stat.rsplit(')', 1)[1].split()[19]}"  # field 22; the name in parentheses may hold spaces


def owner_of(folder: Path) -> str | None:
    """The owner token of a `kh-<kind>-<pid>.<start>-...` folder, or None for any other name."""
    parts = folder.name.split("-")
    if len(parts) < 4 or parts[0] != "kh" or parts[1] not in FOLDER_KINDS:
        return None
    pid, _, start = parts[2].partition(".")
    return parts[2] if pid.isdigit() and start.isdigit() else None


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
    removed: list[Path] = []
    if not sys.platform.startswith("linux"):
        return removed
    for folder in Path(root or tempfile.gettempdir()).glob("kh-*-*-*"):
        owner = owner_of(folder)
        if owner is None or owner_token(int(owner.split(".")[0])) == owner:
            continue
        remove_folder(folder)
        removed.append(folder)
    return removed


def watch_this_process() -> None:
    """Start this process's reaper, once per process (a forked child starts its own)."""
    pid, token = os.getpid(), owner_token()
    if pid in _watching or token is None or not sys.platform.startswith("linux"):
        return
    read_end, write_end = os.pipe()  # both non-inheritable: no other child of ours holds the write end
    try:
        subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), str(read_end), token,
                          tempfile.gettempdir()], pass_fds=(read_end,), start_new_session=True, close_fds=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    except OSError:
        os.close(write_end)
        return  # no reaper: the next start-up's sweep removes what this process leaves
    finally:
        os.close(read_end)
    _watching[pid] = write_end


def _reap(read_end: int, owner: str, root: str) -> None:
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
    _reap(int(sys.argv[1]), sys.argv[2], sys.argv[3])
