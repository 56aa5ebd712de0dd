"""On a GPU (`pytest -m gpu`): the GPU-idle probe (`eval.timing._gpu_idle`) sees another process's work, and work a
candidate leaves on the GPU neither raises its speedup nor slows, or gets rejected, the honest candidate next to it.

The first test prints the probe's rounds idle and beside each kind of work (`-s` shows them): the policy's
constants (`gpu_idle.BUSY_MARGIN_US`, `IDLE_CAP_US`, `KILL_GRACE_S`) rest on them.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import pytest
import torch

from eval import Evaluator, Job, Status
from eval.timing import _gpu_idle as gpu_idle
from eval.timing._gpu_idle import Reading, busy_us
from eval.worker.idle_probe import IdleProbe
from harness.corpus.hostile import GOOD, PROBLEM, RETURN, at_import, variant
from problems.problem import problem_from_source

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

EVALUATOR = dict(device="cuda", cache_dir=None, workers_per_gpu=2)

# Another process's work, from its own CUDA context: one long spin kernel, or a queue of 20 us ones (the launch
# queue fills, so the host keeps it full). It prints "go" once its work is on the GPU, and runs until killed.
_OTHER = '''
import sys, torch
torch.zeros(1, device="cuda")
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record(); torch.cuda._sleep(10_000_000); end.record(); end.synchronize()
per_us = 10_000_000 / (start.elapsed_time(end) * 1000)
if sys.argv[1] == "long":
    torch.cuda._sleep(int(60e6 * per_us))
    print("go", flush=True)
else:
    for i in range(3_000_000):
        torch.cuda._sleep(int(20 * per_us))
        if i == 2000:
            print("go", flush=True)
sys.stdin.read()
'''


def _rounds(probe: IdleProbe, n: int = 30) -> list[float]:
    return [min(probe.rounds(gpu_idle.PROBE_ROUNDS)) for _ in range(n)]


def _summary(times: list[float]) -> str:
    return f"median {statistics.median(times):.1f} us, min {min(times):.1f}, max {max(times):.1f}"


@pytest.mark.parametrize("work", ["long", "queue"])
def test_the_probe_reads_idle_alone_and_busy_beside_another_processs_work(work):
    probe = IdleProbe(torch.device("cuda"))
    probe.calibrate()
    idle = _rounds(probe)
    print(f"\ncalibration {probe.idle_us:.1f} us; readings idle: {_summary(idle)}")
    assert all(busy_us(Reading((t,), probe.idle_us)) == 0.0 for t in idle)
    other = subprocess.Popen([sys.executable, "-c", _OTHER, work], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "go"
        busy = _rounds(probe)
        print(f"beside a {work} kernel: {_summary(busy)}")
        assert all(busy_us(Reading((t,), probe.idle_us)) > 0 for t in busy)
    finally:
        ended = time.perf_counter()
        other.kill()
        other.wait()
    # its work ends with its process: what `candidates_work` settles who pays by
    while busy_us(Reading(tuple(probe.rounds(gpu_idle.PROBE_ROUNDS)), probe.idle_us)):
        assert time.perf_counter() - ended < gpu_idle.KILL_GRACE_S, "the GPU stayed busy after the process ended"
    print(f"idle {(time.perf_counter() - ended) * 1000:.1f} ms after the kill")


# A loop kernel of about 50 ms (its iterations timed once), launched on a side stream and not waited for.
_BUSY = '''import _thread
import time


@triton.jit
def busy_kernel(x_ptr, n_iter):
    acc = tl.load(x_ptr)
    for _ in range(n_iter):
        acc = acc * 0.999999 + 0.000001
    tl.store(x_ptr, acc)


_state = {}


def leave_busy_work():
    """~50 ms of GPU work on a side stream, left running."""
    if not _state:
        scratch = torch.zeros(1, device="cuda")
        n = 1 << 20
        busy_kernel[(1,)](scratch, n)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        busy_kernel[(1,)](scratch, n)
        end.record()
        end.synchronize()
        iters = int(n * 50.0 / max(start.elapsed_time(end), 1e-3))
        _state.update(scratch=scratch, side=torch.cuda.Stream(), iters=iters)
    with torch.cuda.stream(_state["side"]):
        busy_kernel[(1,)](_state["scratch"], _state["iters"])


'''
# at the end of forward
SIDE_STREAM = variant(RETURN, "        leave_busy_work()\n" + RETURN, at_import(_BUSY))
# from a thread (unlisted: no `threading.Thread`), once forward has been quiet for 50 us: past the worker's
# synchronisation at the end of a request
_LATER = _BUSY + '''_calls = [0.0, 0]


def _leave_after_each_request():
    launched = 0
    while True:
        time.sleep(0.00005)
        last, calls = _calls
        if calls != launched and time.perf_counter() - last > 0.00005:
            launched = calls
            leave_busy_work()


_thread.start_new_thread(_leave_after_each_request, ())


'''
AFTER_REQUESTS = variant(RETURN, "        _calls[:] = [time.perf_counter(), _calls[1] + 1]\n" + RETURN,
                         at_import(_LATER))


def _no_gain(result, honest) -> None:
    """Rejected, or no faster than its honest twin (within 1.15x)."""
    if result.status is Status.REJECTED:
        return
    assert result.status is Status.CORRECT, f"{result.status}: {result.reason}"
    assert result.speedup is not None and result.speedup < 1.15 * honest.speedup, (result.speedup, honest.speedup)


def test_work_left_on_the_gpu_gains_nothing_and_never_harms_the_honest_candidate_next_to_it(evaluator: Evaluator):
    problem = problem_from_source(PROBLEM, name="add_relu_gpu_idle")
    honest = evaluator.evaluate(problem, GOOD)
    assert honest.status is Status.CORRECT and honest.speedup is not None, f"{honest.status}: {honest.reason}"
    side_stream = evaluator.evaluate(problem, SIDE_STREAM)
    _no_gain(side_stream, honest)
    # the one that leaves work past its requests beside an honest one (2 workers: its trials' leftovers can meet the
    # honest candidate's timing), then an honest one right after it
    later, beside = evaluator.evaluate_many([Job(problem, AFTER_REQUESTS), Job(problem, GOOD)])
    after = evaluator.evaluate(problem, GOOD)
    print(f"\ncontended blocks: honest {honest.contended_blocks}, side stream {side_stream.contended_blocks} "
          f"({side_stream.status}), after requests {later.contended_blocks} ({later.status}: {later.reason[:200]}), "
          f"beside it {beside.contended_blocks}, after it {after.contended_blocks}")
    _no_gain(later, honest)
    for other in (beside, after):
        assert other.status is Status.CORRECT, f"{other.status}: {other.reason}"
        assert other.speedup is not None and 1 / 1.15 < other.speedup / honest.speedup < 1.15, (
            other.speedup, honest.speedup)
