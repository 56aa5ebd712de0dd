"""On a GPU: a degenerate problem's candidate is judged but never timed or scored; a sound one's is, and its worker
had IPC and UTS namespaces of its own with CUDA working in them (`eval.process.sandbox`)."""

from __future__ import annotations

import pytest
import torch

from eval import Status
from harness.corpus.hostile import GOOD, PROBLEM
from problems import problem_from_source
from tests.eval.test_degenerate import CONSTANT_PROBLEM, NO_WORK

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

EVALUATOR = dict(device="cuda")


def test_a_degenerate_problem_is_judged_but_not_timed(evaluator):
    result = evaluator.evaluate(problem_from_source(CONSTANT_PROBLEM, name="constant"), NO_WORK)
    assert result.status is Status.CORRECT, result.reason + result.error
    assert result.unscored.startswith("the problem is degenerate") and result.speedup is None
    assert not ({"stage", "timing", "hidden_work", "host_bound", "speed_of_light"} & result.phase_seconds.keys())
    assert result.kernels is not None and result.kernels.own_kernels_launched  # own kernels are still judged


def test_a_sound_problem_is_timed_in_a_worker_with_its_own_ipc_namespace(evaluator):
    result = evaluator.evaluate(problem_from_source(PROBLEM, name="add_relu"), GOOD)
    assert result.status is Status.CORRECT, result.reason + result.error
    assert result.unscored == "" and result.speedup is not None and result.timing_meaningful
    assert result.ipc_isolated is True and result.filesystem_isolated is True
