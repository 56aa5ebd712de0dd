"""The memory watchdog's reading of a process tree (`eval.process._watchdog`): the verdict's figure is the tree's
Pss, and the cheap resident-set bound decides only whether Pss must be read."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eval.process import _proctree as proctree
from eval.process import _watchdog as watchdog

_MIB = 1 << 20
_HOLDER = ("import sys; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'x' * len(b[::4096]); "
           "print('ready', flush=True); sys.stdin.read()")


@pytest.fixture
def tree():
    """A parent holding nothing much, with a child that holds 200 MiB of touched memory."""
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', sys.argv[1], '200'], stdout=subprocess.PIPE,"
        " stdin=subprocess.PIPE); print(c.stdout.readline().decode().strip(), flush=True); sys.stdin.read()"), _HOLDER],
        stdout=subprocess.PIPE, stdin=subprocess.PIPE)
    assert parent.stdout.readline().strip() == b"ready"
    yield parent.pid
    parent.kill()
    parent.wait()


def test_a_tree_over_its_limit_is_reported_with_its_pss_children_included(tree):
    pids = proctree.processes(tree)
    assert len(pids) == 2, "the child is part of the tree"
    over = watchdog.over_limit(tree, 150 * _MIB)
    assert over is not None and over > 200 * _MIB
    assert abs(over - sum(watchdog._proportional_bytes(p) for p in pids)) < 16 * _MIB  # the same reading, later


def test_a_tree_under_its_limit_is_judged_from_the_resident_sets_alone(tree, monkeypatch):
    """Pss (a walk over every mapping, with the process's memory map locked) is not read for a tree whose resident
    sets, its upper bound, are under the limit."""
    read = []
    monkeypatch.setattr(watchdog, "_proportional_bytes", lambda pid: read.append(pid) or 0)
    assert watchdog.over_limit(tree, 4 << 30) is None
    assert read == []
    watchdog.over_limit(tree, 150 * _MIB)
    assert sorted(read) == sorted(proctree.processes(tree)), "over the bound, Pss decides"


def test_pss_never_exceeds_the_resident_set(tree):
    for pid in proctree.processes(tree):
        assert watchdog._proportional_bytes(pid) <= watchdog._resident_set_bytes(pid) + _MIB
