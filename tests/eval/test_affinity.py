"""`eval.process._affinity`: both timed processes, every thread of their trees, on one core while a timing runs
(CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from eval.process import _affinity as affinity, _proctree as proctree
from tests.paths import REPO

CHILD = "import os, subprocess, sys, threading, time; threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); " \
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print(p.pid, flush=True); time.sleep(60)"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to see a thread moved")
def test_every_thread_of_the_process_tree_is_pinned_then_given_back() -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(proc.stdout.readline())
        time.sleep(0.2)  # the child's thread has started
        tids = proctree.threads(proc.pid)
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


RESERVE = """
import json, os, subprocess, sys, threading
from eval.process import _affinity as affinity, _proctree as proctree
cores = sorted(os.sched_getaffinity(0))
got = affinity.reserve([int(g) for g in sys.argv[2].split(",")], cores_per_gpu=int(sys.argv[1]))
seen = {}
t = threading.Thread(target=lambda: seen.update(thread=sorted(os.sched_getaffinity(0))))
t.start(); t.join()
child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"], capture_output=True,
                       text=True).stdout.strip()
print(json.dumps({"cores": cores, "reserved": got, "core0": affinity.timing_core(0), "core1": affinity.timing_core(1),
                  "thread": seen["thread"], "child": child}))
"""


def _reserve(cores_per_gpu: int, gpus: str = "0,1") -> dict:
    done = subprocess.run([sys.executable, "-c", RESERVE, str(cores_per_gpu), gpus], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a core left over after setting one aside")
def test_reserved_cores_are_one_per_gpu_and_kept_from_later_threads_and_processes() -> None:
    many = len(os.sched_getaffinity(0)) >= 3
    out = _reserve(cores_per_gpu=1, gpus="0,1" if many else "0")
    cores = out["cores"]
    assert out["core0"] == cores[-1] and out["core1"] == (cores[-2] if many else None)
    rest = cores[:-2] if many else cores[:-1]
    assert out["thread"] == rest and out["child"] == str(rest)  # started after: off the timing cores


def test_too_few_cores_sets_none_aside() -> None:
    out = _reserve(cores_per_gpu=len(os.sched_getaffinity(0)))  # 2 GPUs x all cores: more than there are
    assert out["reserved"] == {} and out["core0"] is None and out["thread"] == out["cores"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to see a thread moved")
def test_a_thread_started_inside_the_block_leaves_the_core_with_the_rest() -> None:
    """A candidate's thread started during its block inherits the timing core; on the way out it gets the caller's
    cores, so it cannot crowd the reference process's next block there."""
    import threading

    mine = os.sched_getaffinity(0)
    core = max(mine)
    release = threading.Event()
    seen: dict[str, int] = {}
    with affinity.pinned([os.getpid()], core):
        worker = threading.Thread(target=lambda: (seen.update(tid=threading.get_native_id()), release.wait(10)))
        worker.start()
        while "tid" not in seen:
            time.sleep(0.01)
        assert os.sched_getaffinity(seen["tid"]) == {core}
    try:
        assert os.sched_getaffinity(seen["tid"]) == mine and os.sched_getaffinity(0) == mine
    finally:
        release.set()
        worker.join()
