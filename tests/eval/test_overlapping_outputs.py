"""An output whose elements share memory is not a dense output (`eval.crossing._capture.self_overlap`).

A problem whose output repeats one row (a broadcast) lets a candidate compute that row once and return an `expand`ed
or `as_strided` view of it: the values are right, the work is a fraction. The trials refuse such an output, and so do
both timing loops (the native one in C: tests/eval/native_loop_cpu_script.py).
"""

from __future__ import annotations

import pytest
import torch

from eval import Status
from eval.crossing._capture import self_overlap
from eval.worker.timing import output_leaves
from harness.corpus.candidates import edit
from harness.corpus.hostile import GOOD, PROBLEM
from problems import problem_from_source


@pytest.mark.parametrize("view, overlaps", [
    (lambda t: t, False), (lambda t: t.t(), False), (lambda t: t.permute(1, 0), False),
    (lambda t: t[:, ::2], False), (lambda t: t[1:3], False), (lambda t: t[:1].expand(4, 6), True),
    (lambda t: t.reshape(-1)[:6].as_strided((4, 3), (1, 1)), True),
    (lambda t: t.reshape(-1).as_strided((3, 4), (4, 1)), False),
    (lambda t: t.reshape(-1).as_strided((3, 4), (3, 1)), True),  # rows of 4 at a step of 3
    (lambda t: t[:1, :1].expand(1, 1), False), (lambda t: torch.zeros(0, 5).expand(3, 0, 5), False),
])
def test_the_overlap_rule(view, overlaps):
    t = view(torch.zeros(4, 6))
    assert self_overlap(list(t.shape), list(t.stride())) is overlaps
    problem = output_leaves(t)[1]
    assert ("overlaps itself" in problem) is overlaps, problem


EVALUATOR = dict(device="cpu", import_timeout_s=60, call_timeout_s=60)

# the output is relu(a + b) of the first row, broadcast to every row
ROW_PROBLEM = edit(edit(PROBLEM, "M = 1\nN = 4096\n", "M = 4\nN = 1024\n"), "        return torch.relu(a + b)\n",
                   "        return torch.relu(a[:1] + b[:1]).expand_as(a).contiguous()\n")
ONE_ROW = "        a = a.contiguous()\n        b = b.contiguous()\n        out = torch.empty_like(a)\n        n_elements = out.numel()\n"


def _row_kernel(returned: str) -> str:
    """The honest kernel over the first row only, returning `returned` (an expression of the row's result `out`)."""
    source = edit(GOOD, ONE_ROW, "        a_rows = a.shape[0]\n        a = a[:1].contiguous()\n        b = b[:1].contiguous()\n"
                                 "        out = torch.empty_like(a)\n        n_elements = out.numel()\n")
    return edit(source, "        return out\n", f"        return {returned}\n")


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("returned", ["out.expand(a_rows, -1)", "out.reshape(-1).as_strided((a_rows, out.numel()), (0, 1))"])
def test_a_broadcast_view_of_one_computed_row_is_refused(evaluator, returned):
    """One row computed, a view returned for all of them: the values are the reference's, and still it fails."""
    problem = problem_from_source(ROW_PROBLEM, name="row_broadcast")
    result = evaluator.evaluate(problem, _row_kernel(returned))
    assert result.status is Status.INCORRECT, result.reason + result.error
    assert "overlaps itself" in result.reason and "a dense tensor is required" in result.reason
    honest = evaluator.evaluate(problem, _row_kernel("out.expand(a_rows, -1).contiguous()"))
    assert honest.status is Status.CORRECT, honest.reason + honest.error  # the same work, materialised: correct
