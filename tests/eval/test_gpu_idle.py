"""`eval.timing._gpu_idle` on a CPU: the parent's reading of the GPU-idle probe, its waits and redos, and who pays.

The probe itself needs a GPU (`test_gpu_idle_gpu.py`); on the CPU the reference process answers every probe with
nothing, which reads as idle. The policy is a pure function of the probe's rounds and its calibration
(`busy_us`), fed here the values a GPU gives: microseconds idle, a time slice (milliseconds) beside another
context's work. The waits and redos run through real sandboxed processes, with the readings scripted where the CPU
cannot give a busy one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from eval import Evaluator, Status
from eval.timing import claim_bounds, measure
from eval.timing import _gpu_idle as gpu_idle
from eval.crossing import protocol as p
from eval.timing._gpu_idle import Busy, Reading, Watch, busy_us
from eval.process.sandbox import WorkerProcess
from harness.corpus.hostile import GOOD
from tests.eval.worker_fixtures import staged_worker

IDLE = 15.0  # us: an H100's probe round on an idle GPU is of this order
SLICE = 2000.0  # us: a round that waited for another context's time slice


def reading(*latencies: float, idle: float = IDLE) -> Reading:
    return Reading(tuple(latencies), idle)


# -- the reading: a pure function ------------------------------------------------------------------------------------
def test_an_idle_round_reads_idle_and_a_time_slice_reads_busy_by_its_delay():
    assert busy_us(reading(IDLE, IDLE + 3, IDLE - 1)) == 0.0
    assert busy_us(reading(SLICE + 400, SLICE, SLICE + 100)) == SLICE - IDLE


def test_only_the_fastest_round_counts():
    """One round slowed by the host (or by the GPU's switch back to the reference's context) is not contention."""
    assert busy_us(reading(SLICE, IDLE + 2, 5 * SLICE)) == 0.0


def test_busy_starts_over_both_the_factor_and_the_margin():
    over = max(gpu_idle.BUSY_FACTOR * IDLE, IDLE + gpu_idle.BUSY_MARGIN_US)
    assert busy_us(reading(over)) == 0.0 and busy_us(reading(over + 1)) == pytest.approx(over + 1 - IDLE)
    slow = 60.0  # a slower host: the factor sets the bar
    assert busy_us(reading(gpu_idle.BUSY_FACTOR * slow, idle=slow)) == 0.0
    assert busy_us(reading(gpu_idle.BUSY_FACTOR * slow + 1, idle=slow)) > 0


def test_a_calibration_taken_beside_other_work_cannot_hide_it():
    """Calibrated while another context had work, the probe's idle time is a time slice; it is read as the cap."""
    assert busy_us(reading(SLICE, idle=SLICE)) == SLICE - gpu_idle.IDLE_CAP_US
    assert busy_us(reading(SLICE, idle=0.0)) == SLICE - gpu_idle.IDLE_CAP_US  # never calibrated: the cap too


def test_no_probe_reads_idle():
    assert busy_us(reading()) == 0.0 and busy_us(Reading((), 0.0)) == 0.0


# -- the watch, over scripted readings --------------------------------------------------------------------------------
class Script:
    """A probe that answers from a list of readings (the last one repeats) and logs each call in `log`."""

    def __init__(self, log: list[Any], *readings: Reading):
        self.log, self.readings = log, list(readings)

    def __call__(self, calibrate: bool) -> Reading:
        self.log.append(("probe", calibrate))
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def _block(log: list[Any]) -> Any:
    def block() -> int:
        log.append("block")
        return sum(1 for x in log if x == "block")
    return block


def test_an_idle_gpu_runs_the_block_once_between_two_probes_the_first_calibrating():
    log: list[Any] = []
    result, contended = Watch(Script(log, reading(IDLE))).idle(_block(log))
    assert (result, contended) == (1, False)
    assert log == [("probe", True), "block", ("probe", False)]


def test_busy_before_waits_for_idle_then_runs_the_block_once():
    log: list[Any] = []
    watch = Watch(Script(log, reading(SLICE), reading(SLICE), reading(IDLE)), poll_s=0.0)
    assert watch.idle(_block(log)) == (1, True)
    assert log == [("probe", True), ("probe", False), ("probe", False), "block", ("probe", False)]


def test_busy_after_discards_the_block_and_runs_it_again_on_an_idle_gpu():
    log: list[Any] = []
    watch = Watch(Script(log, reading(IDLE), reading(SLICE), reading(IDLE)), poll_s=0.0)
    assert watch.idle(_block(log)) == (2, True)  # the second run's result is the one kept
    assert log == [("probe", True), "block", ("probe", False), ("probe", False), "block", ("probe", False)]


def test_busy_after_every_run_stops_the_timing_and_is_not_lasting():
    log: list[Any] = []
    script = Script(log, *[r for _ in range(gpu_idle.MAX_RUNS) for r in (reading(IDLE), reading(SLICE))])
    with pytest.raises(Busy, match=f"each of {gpu_idle.MAX_RUNS} runs") as caught:
        Watch(script, poll_s=0.0).idle(_block(log))
    assert not caught.value.lasting and log.count("block") == gpu_idle.MAX_RUNS


def test_a_gpu_busy_past_the_limit_stops_the_timing_naming_the_delay():
    log: list[Any] = []
    with pytest.raises(Busy, match=f"stayed busy .* for 0.05 s .* {SLICE - IDLE:.0f} us longer") as caught:
        Watch(Script(log, reading(SLICE)), wait_s=0.05, poll_s=0.001).idle(_block(log))
    assert caught.value.lasting and "block" not in log


# -- real sandboxed processes ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reference() -> Iterator[WorkerProcess]:
    worker = staged_worker("ref", None)
    yield worker
    worker.kill()


@pytest.fixture(scope="module")
def candidate() -> Iterator[WorkerProcess]:
    worker = staged_worker("candidate", GOOD)
    yield worker
    worker.kill()


class Logged:
    """A real worker whose requests are logged in order (the reference process, seen from the parent)."""

    def __init__(self, worker: WorkerProcess, log: list[Any]):
        self.worker, self.log = worker, log

    @property
    def pid(self) -> int:
        return self.worker.pid

    def request(self, message: p.Request, tensors: Any = None, timeout: float | None = None, device: Any = None) -> Any:
        self.log.append(message)
        return self.worker.request(message, tensors, timeout=timeout, device=device)

    def timed_request(self, message: p.Request, timeout: float | None = None, device: Any = None) -> Any:
        self.log.append(message)
        return self.worker.timed_request(message, timeout=timeout, device=device)


RULE = measure.TimingRule(min_reps=8, max_reps=16, warmup_ms=1.0)


def _time(reference: Any, candidate: WorkerProcess, watch: Watch) -> measure.Measurement:
    return measure.time_pair(measure.Side("reference", reference, "ref", key=1, watch=watch),
                             measure.Side("candidate", candidate, "candidate"), RULE, nonce=0x5EED, graphs=False,
                             timeout=600)


@pytest.mark.slow
def test_the_cpu_reference_process_has_no_probe_and_its_answer_reads_idle(reference):
    for calibrate in (True, False):
        reply, _ = reference.request(p.Probe(rounds=3, calibrate=calibrate), timeout=600)
        assert reply.ok and reply.latencies_us == [] and reply.idle_us == 0.0
    probe = gpu_idle.probing(reference, 600)
    assert busy_us(probe(True)) == 0.0
    assert Watch(probe).idle(lambda: "ran") == ("ran", False)


@pytest.mark.slow
def test_each_kept_reference_block_is_probed_right_before_and_after_and_nothing_else_is(reference, candidate):
    log: list[Any] = []
    logged = Logged(reference, log)
    meas = _time(logged, candidate, Watch(gpu_idle.probing(logged, 600)))
    kept = [i for i, m in enumerate(log) if isinstance(m, p.TimeBlock) and m.capture]
    assert len(kept) >= 2 and meas.contended_blocks == 0
    for i in kept:
        assert isinstance(log[i - 1], p.Probe) and isinstance(log[i + 1], p.Probe)
    probes = [m for m in log if isinstance(m, p.Probe)]
    assert len(probes) == 2 * len(kept)  # warm-up and priming blocks are not probed
    assert [m.calibrate for m in probes] == [True] + [False] * (len(probes) - 1)
    assert len(meas.samples["reference"]) == len(meas.samples["candidate"])
    assert claim_bounds.first_capture_mismatch(meas, 1e-5, 1e-5) is None


@pytest.mark.slow
def test_a_block_found_busy_after_is_timed_again_with_the_same_inputs_and_kept_once(reference, candidate):
    """The CPU cannot be busy with another context: the second probe (after the first kept block) reads a time
    slice; every other reading is the real process's."""
    log: list[Any] = []
    logged = Logged(reference, log)
    real = gpu_idle.probing(logged, 600)
    reads = iter(range(1_000_000))

    def probe(calibrate: bool) -> Reading:
        real_reading = real(calibrate)
        return reading(SLICE) if next(reads) == 1 else real_reading

    meas = _time(logged, candidate, Watch(probe, poll_s=0.0))
    kept = [m for m in log if isinstance(m, p.TimeBlock) and m.capture]
    assert meas.contended_blocks == 1
    assert (kept[0].first_rep, kept[0].seeds) == (kept[1].first_rep, kept[1].seeds)  # the same block, run again
    assert len({(m.first_rep, m.reps) for m in kept}) == len(kept) - 1
    assert len(meas.samples["reference"]) == len(meas.samples["candidate"])  # its first run's samples were dropped
    assert [b.first_rep for b in meas.blocks["reference"]] == [b.first_rep for b in meas.blocks["candidate"]]
    assert claim_bounds.first_capture_mismatch(meas, 1e-5, 1e-5) is None


@pytest.fixture
def doomed() -> Iterator[WorkerProcess]:
    """A candidate's worker that the test ends (the way `candidates_work` settles who pays)."""
    worker = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=1 << 16, isolate_network=True)
    yield worker
    worker.kill()


@pytest.mark.slow
def test_work_that_ends_with_the_candidates_worker_is_charged_to_it(doomed):
    """The GPU stays busy exactly as long as the candidate's worker lives: its work ends with its CUDA context."""
    watch = Watch(lambda calibrate: reading(SLICE) if doomed.alive() else reading(IDLE), poll_s=0.001)
    assert gpu_idle.candidates_work(Busy("busy", lasting=True), doomed, watch)
    assert not doomed.alive()


@pytest.mark.slow
def test_work_that_outlives_the_candidates_worker_is_not_charged_to_it(doomed):
    watch = Watch(lambda calibrate: reading(SLICE), poll_s=0.001)
    assert not gpu_idle.candidates_work(Busy("busy", lasting=True), doomed, watch)


@pytest.mark.slow
def test_work_back_in_every_run_of_a_block_is_never_charged(doomed):
    """It came back while the candidate was stopped: not the candidate's, even if the GPU is idle now."""
    log: list[Any] = []
    assert not gpu_idle.candidates_work(Busy("busy", lasting=False), doomed, Watch(Script(log, reading(IDLE))))
    assert log == []


EVALUATOR = dict(device="cpu", cache_dir=None, cpu_timing=True, workers_per_gpu=1, import_timeout_s=120,
                 call_timeout_s=60)


@pytest.mark.slow
def test_the_cpu_pipeline_times_as_before_with_no_block_contended(evaluator: Evaluator, problem):
    result = evaluator.evaluate(problem, GOOD)
    assert result.status is Status.CORRECT, result.reason
    assert result.reference_timing is not None and result.candidate_timing is not None
    assert result.contended_blocks == 0
