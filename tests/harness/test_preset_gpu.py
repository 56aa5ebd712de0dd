"""`eval=kernelbench` on a GPU: KernelBench's timing method and what the strict rules add (run with -m gpu)."""

from __future__ import annotations

import re

import pytest
import torch

from eval import Evaluator, Status
from harness.presets import preset_config
from problems.problem import problem_from_source
from harness.corpus.hostile import FORWARD, GOOD, side_stream, variant
from harness.corpus.candidates import example_problem_source

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def problem():
    return problem_from_source(example_problem_source(1 << 22), name="add_relu_4m")


def test_kernelbench_times_100_synchronised_calls_and_reports_the_mean(problem) -> None:
    with Evaluator(preset_config("kernelbench", device="cuda", cache_dir=None)) as ev:
        r = ev.evaluate(problem, GOOD)
    assert r.status is Status.CORRECT and r.timing_meaningful and r.preset == "kernelbench"
    assert r.candidate_timing.n == 100 and r.reference_timing.n == 100
    note = next(f for f in r.flags if f.startswith("timing (kernelbench)"))
    assert "100 calls after 3 warm-up calls and a dropped one" in note and "no lead" in note
    assert "L2 flushed (268435456 bytes written)" in note and "autograd on" in note
    ref_mean, cand_mean = (float(x) for x in re.findall(r"mean ([0-9.]+) ms", note))
    assert r.speedup == pytest.approx(ref_mean / cand_mean, rel=1e-3)
    assert "hidden_work" not in r.phase_seconds


def test_side_stream_work_fails_the_integrity_check_only_under_the_strict_rules(problem) -> None:
    source = variant(FORWARD, side_stream(FORWARD))
    with Evaluator(preset_config("default", device="cuda", cache_dir=None)) as ev:
        strict = ev.evaluate(problem, source)
    with Evaluator(preset_config("kernelbench", device="cuda", cache_dir=None)) as ev:
        kb = ev.evaluate(problem, source)
    assert strict.status is Status.REJECTED and strict.reason.startswith("integrity"), strict.reason
    # KernelBench's events see only the current stream, so its timer measures about 1 us of nothing here; on this
    # memory-bound problem the byte floor, on under every preset (no correct kernel beats it), rejects that
    assert kb.status is Status.REJECTED and kb.reason.startswith("implausible:"), kb.reason
