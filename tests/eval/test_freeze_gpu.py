"""On a GPU (`pytest -m gpu`): a candidate whose thread spins on the timing core through the reference's blocks
gains nothing: its worker is stopped while the reference is timed (`eval.process._freeze`), so the
host-bound reference is timed as it is beside the honest candidate."""

from __future__ import annotations

import pytest
import torch

from eval import Status
from harness.corpus.candidates import edit
from harness.corpus.hostile import GOOD, PROBLEM, at_import
from problems.problem import problem_from_source

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

EVALUATOR = dict(device="cuda", cache_dir=None)

# relu(a + b), then 300 exact multiplications by 1: the reference's time is its host's (300 launches)
HOST_BOUND = edit(PROBLEM, "        return torch.relu(a + b)\n", """        out = torch.relu(a + b)
        for _ in range(300):
            out = out * 1.0
        return out
""")
# a thread pinned to the highest core (the timing core of GPU 0, `affinity.reserve`), spinning from import on (hidden
# from the worker's thread check)
SPINNER = at_import('''import _thread, os


def _spin(core):
    os.sched_setaffinity(0, {core})
    while True:
        pass


_thread.start_new_thread(_spin, (os.cpu_count() - 1,))


''')


def test_threads_spinning_on_the_timing_core_do_not_slow_the_reference(evaluator):
    problem = problem_from_source(HOST_BOUND, name="add_relu_host_bound")
    honest, spinner = (evaluator.evaluate(problem, source) for source in (GOOD, SPINNER))
    assert honest.status is Status.CORRECT, f"{honest.status}: {honest.reason}"
    # the spinner shares the core with its own blocks too (all its threads run there then): the wall bound may reject it
    assert spinner.status in (Status.CORRECT, Status.REJECTED), f"{spinner.status}: {spinner.reason}"
    for r in (honest, spinner):
        assert r.freeze in ("cgroup", "signals", "signals-tree") and r.reference_timing is not None
        assert not [f for f in r.flags if "not seen fully stopped" in f], r.flags
    ratio = spinner.reference_timing.median_ms / honest.reference_timing.median_ms
    assert ratio < 1.15, f"the reference took {ratio:.2f}x as long beside the spinner"
    if spinner.speedup is not None:
        assert spinner.speedup < 1.15 * honest.speedup, (spinner.speedup, honest.speedup)
