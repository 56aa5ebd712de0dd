"""One timing of the reference serves several candidates of one problem (`eval.process._windows`, `measure.time_group`),
on a CPU with real sandboxed workers and the Triton interpreter (`eval.cpu_timing`: the whole timing pipeline runs;
its times mean nothing). The repeatability of shared speedups needs a GPU: `test_measurement_gpu.py`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from eval import Evaluator, EvalConfig, Job, Status
from eval.crossing import protocol as p
from eval.process._reference_process import ReferenceProcess
from harness.corpus.hostile import GOOD, in_forward

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # real sandboxed workers

SETTINGS = dict(device="cpu", cache_dir=None, cpu_timing=True, share_reference_timing=True, workers_per_gpu=3, import_timeout_s=120,
                call_timeout_s=60, min_reps=60)
# honest through the correctness trials and the steps before timing (about a dozen calls), wrong from its 30th
# call on: inside the timing, where only the check of every timed output can catch it
PHASE_DETECTION = in_forward("""        self.calls = getattr(self, 'calls', 0) + 1
        if self.calls >= 30:
            return torch.zeros_like(a)
""")


def _honest(i: int) -> str:
    return GOOD + f"\n# distinct honest candidate {i}\n"


@pytest.fixture
def reference_blocks(monkeypatch) -> list[tuple[str, p.TimeBlock]]:
    """Every block the reference process is asked to run: (subject, request)."""
    seen: list[tuple[str, p.TimeBlock]] = []
    original = ReferenceProcess.timed_request  # every block goes through it

    def timed_request(self, message, *args, **kw):
        seen.append((message.subject, message))
        return original(self, message, *args, **kw)

    monkeypatch.setattr(ReferenceProcess, "timed_request", timed_request)
    return seen


@pytest.fixture(scope="module")
def shared() -> Iterator[Evaluator]:
    with Evaluator(EvalConfig(**SETTINGS)) as ev:
        yield ev


def _timed_blocks(blocks: list[tuple[str, p.TimeBlock]]) -> list[tuple[str, int]]:
    """(subject, first repetition) of the reference's timed blocks (captured, with a lead)."""
    return [(subject, m.first_rep) for subject, m in blocks if m.capture and m.lead]


def test_a_batch_of_one_problem_is_timed_in_one_window(shared: Evaluator, problem, reference_blocks) -> None:
    results = shared.evaluate_many([Job(problem, _honest(i)) for i in range(3)])
    for r in results:
        assert r.status is Status.CORRECT, r.reason + r.error
        assert r.reference_shared_with == 3 and r.candidate_timing is not None
        assert r.reference_timing is not None and r.reference_timing.n == r.candidate_timing.n >= 60
    timed = _timed_blocks(reference_blocks)
    # one reference subject timed, each repetition range once: once per window, not once per candidate
    assert len({subject for subject, _ in timed}) == 1
    assert all(n == 1 for n in Counter(timed).values())
    # the other two candidates' references only captured repetitions of the timed blocks, each once, untimed (a
    # candidate that settled first leaves the window earlier)
    untimed = [(subject, m.first_rep) for subject, m in reference_blocks if m.capture and not m.lead]
    assert len({subject for subject, _ in untimed}) == 2 and all(n == 1 for n in Counter(untimed).values())
    assert {rep for _, rep in untimed} <= {rep for _, rep in timed}


def test_a_hostile_candidate_in_a_window_is_caught_as_alone_and_spoils_no_neighbour(shared: Evaluator, problem,
                                                                                   reference_blocks) -> None:
    alone = shared.evaluate(problem, PHASE_DETECTION)
    assert alone.status is Status.INCORRECT and alone.reason.startswith("the output of timed repetition"), alone.reason
    assert alone.reference_shared_with == 1
    results = shared.evaluate_many([Job(problem, _honest(10)), Job(problem, PHASE_DETECTION + "\n# again\n"),
                                    Job(problem, _honest(11))])
    hostile = results[1]
    assert hostile.status is Status.INCORRECT and hostile.reason.startswith("the output of timed repetition")
    assert hostile.reference_shared_with == 3
    for r in (results[0], results[2]):
        assert r.status is Status.CORRECT, r.reason + r.error
        assert r.reference_shared_with == 3 and r.candidate_timing.n == r.reference_timing.n >= 60


def test_with_the_switch_off_each_candidate_has_a_reference_timing_of_its_own(problem, reference_blocks) -> None:
    with Evaluator(EvalConfig(**{**SETTINGS, "workers_per_gpu": 2, "share_reference_timing": False})) as ev:
        results = ev.evaluate_many([Job(problem, _honest(20 + i)) for i in range(2)])
    for r in results:
        assert r.status is Status.CORRECT, r.reason + r.error
        assert r.reference_shared_with == 1
    assert len({subject for subject, _ in _timed_blocks(reference_blocks)}) == 2
    assert not [m for _, m in reference_blocks if m.capture and not m.lead]  # no untimed capture blocks
