"""The suite's hand-written reference solutions as candidates: honest code every evaluator preset must keep."""

from __future__ import annotations

from problems import Problem, select_problems, solution_path


def solutions(selection: str) -> list[tuple[Problem, str]]:
    """(problem, solution source) for every selected suite problem that has a hand-written solution."""
    out = []
    for problem in select_problems(selection):
        path = solution_path(problem)
        if path is not None:
            out.append((problem, path.read_text()))
    return out
