"""What the worker reports of its own sandbox at hello: whether it has a network and whether it can write outside
its own folder and private /tmp (the parent decides what a missing isolation means)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def network_isolated() -> bool:
    """True when this process's network namespace has no interface but loopback."""
    try:
        lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    except OSError:
        return False
    names = [line.split(":", 1)[0].strip() for line in lines]
    return all(n == "lo" for n in names)


def filesystem_isolated() -> bool:
    """True when this process cannot create a file outside its own folder and its private /tmp: not in the project,
    not in /var/tmp, and not in /tmp or beside its folder unless /tmp is a tmpfs mounted for it."""
    here = Path.cwd().resolve()
    project = Path(__file__).resolve().parents[2]
    folders = [project, Path("/var/tmp")]
    if not private_tmp():
        folders += [here.parent, Path("/tmp")]
    for folder in folders:
        probe = folder / f".kh-write-probe-{os.getpid()}"
        try:
            fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except OSError:
            continue
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
        return False
    return True


def private_tmp() -> bool:
    """Whether /tmp is a tmpfs mount point of its own (the sandbox gives each worker one)."""
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            dash = fields.index("-")
            if fields[4] == "/tmp" and fields[dash + 1] == "tmpfs":
                return True
    except (OSError, ValueError, IndexError):
        pass
    return False
