"""A degenerate problem is judged for correctness but never scored as a speedup (`eval.pipeline.checks.soundness`).

A problem whose output does not depend on its inputs (or that all zeros or a constant match) lets a kernel that does
no work pass as correct at any speed: a KernelBench problem that lint flags scored a constant kernel at 185x. The
timing runs on the CPU here (`cpu_timing`), so the steps that would score a speedup are really there to leave out.
"""

from __future__ import annotations

import pytest

from eval import Status, render_feedback
from harness.corpus.candidates import edit
from harness.corpus.hostile import GOOD, PROBLEM, RELU
from problems import problem_from_source

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # sandboxed evaluator workers

EVALUATOR = dict(device="cpu", cpu_timing=True, import_timeout_s=60, call_timeout_s=60)

RETURN = "        return torch.relu(a + b)\n"
# the output is relu(a + b) times zero, plus one: the same for every input (KernelBench has such problems)
CONSTANT_PROBLEM = edit(PROBLEM, RETURN, "        return torch.relu(a + b) * 0.0 + 1.0\n")
# an honest kernel of it, and one that does no work at all and stores the constant
HONEST_OF_CONSTANT = edit(GOOD, RELU, "tl.maximum(a + b, 0.0) * 0.0 + 1.0")
NO_WORK = edit(GOOD, RELU, "tl.zeros_like(a) + 1.0")
# the sum over a dimension of a softmax over it: 1.0 whatever the inputs
SOFTMAX_SUM_PROBLEM = edit(PROBLEM, RETURN, "        return torch.softmax(a + b, dim=-1).sum(dim=-1, keepdim=True)\n")


@pytest.mark.parametrize("problem_source, candidate", [(CONSTANT_PROBLEM, HONEST_OF_CONSTANT),
                                                       (CONSTANT_PROBLEM, NO_WORK)],
                         ids=["honest", "no-work"])
def test_a_degenerate_problem_is_not_scored(evaluator, problem_source, candidate):
    problem = problem_from_source(problem_source, name="constant")
    result = evaluator.evaluate(problem, candidate)
    assert result.status is Status.CORRECT, result.reason + result.error
    assert result.speedup is None and result.candidate_timing is None and "timing" not in result.phase_seconds
    assert result.unscored.startswith("the problem is degenerate (input-dependence: output 0 changes by at most")
    assert "not scored as a speedup: the problem is degenerate" in result.reason
    assert "no speedup is scored on this problem" in render_feedback(result)


def test_a_constant_output_problem_of_another_shape_is_not_scored(evaluator):
    """The rule is lint's, not one problem's: a softmax summed over its own dimension is 1 whatever the inputs."""
    problem = problem_from_source(SOFTMAX_SUM_PROBLEM, name="softmax_sum")
    candidate = edit(edit(GOOD, RELU, "tl.zeros_like(a) + 1.0"), "out = torch.empty_like(a)",
                     "out = torch.empty((a.shape[0], 1), device=a.device)")
    result = evaluator.evaluate(problem, candidate)
    assert result.unscored and "input-dependence" in result.unscored, result.reason
    assert result.speedup is None


def test_a_sound_problem_is_timed_and_scored(evaluator):
    """The control: the same pipeline times the sound problem's honest kernel (on a CPU its times score nothing)."""
    result = evaluator.evaluate(problem_from_source(PROBLEM, name="add_relu"), GOOD)
    assert result.status is Status.CORRECT, result.reason + result.error
    assert result.unscored == "" and result.candidate_timing is not None and "timing" in result.phase_seconds
