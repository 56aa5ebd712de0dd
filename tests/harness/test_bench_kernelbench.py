"""`harness bench kernelbench`'s placement: KernelBench's timed processes run on one core of their own, as our
evaluator's timed blocks do, so the side-by-side compares timing rather than where the scheduler put a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.paths import REPO

PROBE = """
import json, os, threading
from harness.bench.kernelbench_side_by_side import on_one_core
core = on_one_core()
seen = []
thread = threading.Thread(target=lambda: seen.append(sorted(os.sched_getaffinity(0))))
thread.start()
thread.join()
print(json.dumps({"core": core, "main": sorted(os.sched_getaffinity(0)), "thread": seen[0]}))
"""


def test_a_kernelbench_process_and_its_later_threads_stay_on_the_highest_core_or_nothing_is_pinned():
    cores = sorted(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    if len(cores) >= 4:  # a GPU host: the core our evaluator would set aside for GPU 0
        assert got == {"core": cores[-1], "main": [cores[-1]], "thread": [cores[-1]]}
    else:  # too few cores to set one aside (CI's 2): neither side pins
        assert got == {"core": None, "main": cores, "thread": cores}
