"""`eval.affinity`: both timed processes, every thread of their trees, on one core while a timing runs (CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from eval import affinity

CHILD = "import os, subprocess, sys, threading, time; threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); " \
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print(p.pid, flush=True); time.sleep(60)"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to see a thread moved")
def test_every_thread_of_the_process_tree_is_pinned_then_given_back() -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(proc.stdout.readline())
        time.sleep(0.2)  # the child's thread has started
        tids = affinity._threads(proc.pid)
        assert grandchild in tids and len(tids) >= 3  # the launcher's main thread and its thread, the grandchild
        before = {tid: os.sched_getaffinity(tid) for tid in tids}
        core = max(os.sched_getaffinity(0))
        with affinity.pinned([proc.pid, None], core) as count:
            assert count == len(tids)
            assert all(os.sched_getaffinity(tid) == {core} for tid in tids)
        assert {tid: os.sched_getaffinity(tid) for tid in tids} == before
    finally:
        proc.kill()
        proc.wait()


def test_no_core_pins_nothing_and_gone_processes_are_skipped() -> None:
    with affinity.pinned([os.getpid()], None) as count:
        assert count == 0
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with affinity.pinned([dead.pid], 0) as count:
        assert count == 0


def test_each_gpu_gets_its_own_core_where_there_are_enough() -> None:
    cores = sorted(os.sched_getaffinity(0))
    first = affinity.timing_core(0)
    if len(cores) < 4:
        assert first is None
        return
    assert first == cores[-1]
    second = affinity.timing_core(1)
    assert second is None if len(cores) < 8 else second == cores[-2]
