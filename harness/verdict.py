"""From an agent's reply to the evaluator's verdict, the same way wherever a reply is judged.

`harness run`'s loop, `harness serve` (and `KernelEnv` through it) and the inspect judges all take the candidate out
of a reply with `extract_candidate` and judge it with `evaluate_safely`, so one reply gets one verdict everywhere.
Kept apart from the loop so that those callers need none of its machinery.
"""

from __future__ import annotations

from typing import Protocol

from agents import ExtractionError, extract_code
from eval import DEFAULT_BACKEND, EvalResult, EvaluatorClosed, Status
from problems import Problem


class Evaluates(Protocol):
    """What judging a candidate needs of an evaluator (`eval.Evaluator`): the loop's, serve's and the judges'."""

    def evaluate(self, problem: Problem, source: str, backend: str = DEFAULT_BACKEND) -> EvalResult: ...


def extract_candidate(reply: str, problem_id: str, backend: str) -> tuple[str | None, EvalResult | None]:
    """The code in an agent's reply, or (None, the `format_error` result an attempt records for it).

    The one place a reply becomes a candidate: `harness run`, `harness serve` and `KernelEnv` all use it."""
    try:
        return extract_code(reply), None
    except ExtractionError as exc:
        return None, EvalResult(status=Status.FORMAT_ERROR, reason=str(exc), problem_id=problem_id, backend=backend)


def evaluate_safely(evaluator: Evaluates, problem: Problem, code: str, backend: str) -> EvalResult:
    """The evaluator's verdict; an evaluator exception becomes a recorded `crash` (the harness failed, not the
    candidate), so neither a run nor a served request ends because of one."""
    try:
        return evaluator.evaluate(problem, code, backend=backend)
    except EvaluatorClosed:  # no verdict at all: the attempt is not recorded, and a resume evaluates it again
        raise
    except Exception as exc:  # noqa: BLE001 (a harness-side failure must not end the run)
        return EvalResult(
            status=Status.CRASH,
            reason=f"the evaluator raised {type(exc).__name__}: {exc}",
            problem_id=problem.id,
            backend=backend,
            flags=["evaluator_exception: the harness, not the candidate, failed here"],
        )
