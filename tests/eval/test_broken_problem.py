"""A broken problem is named as the problem's fault (`problem_error`), never charged to the candidate, and cannot
take the harness down (issue 60, item 9): a reference that raises or returns no tensors, `os._exit` in its module or
its forward, a loop at import. `eval.problem_check` runs each problem once in a child process before this one (or a
worker) imports it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval import Evaluator, Status
from eval import problem_check
from harness.cli import main
from problems.problem import problem_from_source
from tests.run_fixtures import GOOD, PROBLEM, base_overrides, fenced, rows

# the check may take import_timeout_s + call_timeout_s in all: the loop at import is judged after 30 s
EVALUATOR = dict(device="cpu", cache_dir=None, workers_per_gpu=1, import_timeout_s=20, call_timeout_s=10)
FORWARD = "return torch.relu(a + b)"
assert PROBLEM.count(FORWARD) == 1

BROKEN = {  # kind -> (its source, what the verdict says broke)
    "raises": (PROBLEM.replace(FORWARD, "raise ValueError('no such layer')"),
               "running the reference's forward raised ValueError: no such layer"),
    "wrong type": (PROBLEM.replace(FORWARD, "return (a + b).sum().item()"),
                   "output 0 is a float, not a tensor"),
    "exit at import": (PROBLEM + "\nimport os\nos._exit(3)\n",
                       "its process exited with code 3 while importing the problem"),
    "exit in forward": (PROBLEM.replace(FORWARD, "import os; os._exit(4)"),
                        "its process exited with code 4 while running the reference's forward"),
    "loop at import": (PROBLEM + "\nwhile True:\n    pass\n", "importing the problem did not finish in 30 s"),
    # judged at its reduced sizes on a CPU, where the check runs everything for real (never on the meta device)
    "exit in forward at reduced sizes": (PROBLEM.replace(FORWARD, "import os; os._exit(5)")
                                         + '\nMETA = {"small": {"N": 64}}\n',
                                         "its process exited with code 5 while running the reference's forward"),
}


@pytest.mark.parametrize("kind", list(BROKEN))
def test_a_broken_problem_is_the_problems_fault_and_the_harness_goes_on(evaluator: Evaluator, kind: str) -> None:
    source, broke = BROKEN[kind]
    problem = problem_from_source(source, name=f"broken_{kind.replace(' ', '_')}")
    result = evaluator.evaluate(problem, GOOD)
    assert result.status is Status.PROBLEM_ERROR, (result.status, result.reason)
    assert result.reason.startswith(f"problem {problem.id} is broken, not the candidate: "), result.reason
    assert broke in result.reason, result.reason
    assert not result.compiled and result.trials == 0  # no candidate was judged


def test_a_sound_problems_honest_candidate_is_unaffected(evaluator: Evaluator, problem) -> None:
    """After every broken problem above, in the same process and evaluator: an honest kernel is correct, with no
    note of the check."""
    result = evaluator.evaluate(problem, GOOD)
    assert result.status is Status.CORRECT, result.reason
    assert not any("broken" in flag for flag in result.flags)
    assert problem_check.check(problem, False, 60).fault == ""


def test_a_forward_the_meta_device_cannot_run_is_run_for_real() -> None:
    """Shapes that depend on the data (a boolean mask) stop the pass on the meta device; the check then runs the
    forward on the CPU and judges it by that: sound where it runs, broken where it raises."""
    masked = PROBLEM.replace(FORWARD, "return torch.relu(a + b)[a > 0]")
    assert problem_check.check(problem_from_source(masked, name="masked"), False, 60).fault == ""
    raising = PROBLEM.replace(FORWARD, "if a[a > 0].numel() >= 0:\n            raise KeyError('w')\n        return a")
    fault = problem_check.check(problem_from_source(raising, name="masked_raising"), False, 60)
    assert fault.fault.endswith("running the reference's forward raised KeyError: 'w'"), fault
    assert "KeyError" in fault.log  # the problem's traceback, for the person who fixes it


def test_harness_run_on_a_broken_problem_file_records_a_named_result(tmp_path: Path, eval_cache: Path) -> None:
    """`harness run problems.spec=file:PATH` on a problem that calls os._exit at import: the run (this very process)
    goes on and ends 0, its one sample ends at turn 1 with the named verdict (no later turn can mend it), and
    `harness report` says the problem is broken."""
    problem = tmp_path / "problems" / "add_relu.py"
    problem.parent.mkdir()
    problem.write_text(BROKEN["exit at import"][0])
    reply = tmp_path / "reply.md"
    reply.write_text(fenced(GOOD))
    args = [*base_overrides(tmp_path, problem, eval_cache), "agent=command", f"agent.command='cat {reply}'",
            "name=broken", "turns=3", "eval.import_timeout_s=20", "eval.call_timeout_s=10"]
    assert main(["run", *args]) == 0
    run = tmp_path / "runs" / "broken"
    assert rows(run, "turn, status") == [(1, "problem_error")]
    (line,) = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    assert line["result"]["reason"] == ("problem add_relu is broken, not the candidate: its process exited with "
                                        "code 3 while importing the problem")
    assert "Status: problem_error" in line["feedback"]
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    leaderboard = (tmp_path / "report" / "leaderboard.md").read_text()
    assert "broken: 1 problem(s) are broken, not the candidates (problem_error): add_relu" in leaderboard
