"""The `reference` agent: no network, serves the suite's hand-written solutions (`problems/solutions/`).

It is the default agent, so `harness run` works offline and exercises the whole loop. Where a
problem has no solution it says so honestly, with no code, and abstains: the loop records that turn as
`skipped` (not a format error of a model's reply) rather than inventing a candidate.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from agents.base import AgentResponse, Message, Usage
from agents.prompting import fenced
from agents.settings import ReferenceSettings
from problems import ProblemError, solution_path, suite_problem


class ReferenceAgent:
    """Replies with the reference solution of `problem_id` (a suite id such as `L1/13_softmax`).

    solutions_dir: another tree laid out like problems/solutions/ (`<level folder>/<stem>.py`),
    e.g. the best kernels of an earlier run; None means problems/solutions/.
    """

    name = "reference"

    def __init__(self, settings: ReferenceSettings, backend: str = "triton") -> None:  # issue 56: backend
        solutions_dir = settings.solutions_dir
        if solutions_dir is not None and not Path(solutions_dir).is_dir():
            raise ValueError(f"solutions_dir {str(solutions_dir)!r} is not a directory")
        self.solutions_dir = None if solutions_dir is None else Path(solutions_dir)
        self.backend = backend  # issue 56: whose solutions, the run's backend (problems.solution_path)
        self._paths: dict[str, Path | None] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ReferenceAgent(solutions_dir={None if self.solutions_dir is None else str(self.solutions_dir)!r})"

    def solution_for(self, problem_id: str) -> Path | None:
        """The solution file of `problem_id`; None for problems outside the suite or without one."""
        with self._lock:
            if problem_id not in self._paths:
                self._paths[problem_id] = self._find(problem_id)
            return self._paths[problem_id]

    def _find(self, problem_id: str) -> Path | None:
        try:
            problem = suite_problem(problem_id)
        except ProblemError:
            return None
        if self.solutions_dir is None:
            return solution_path(problem, self.backend)  # issue 56
        suite_file = Path(problem.path or "")
        candidate = self.solutions_dir / suite_file.parent.name / suite_file.name
        return candidate if candidate.is_file() else None

    def respond(self, messages: list[Message], *, problem_id: str, sample: int, turn: int) -> AgentResponse:
        """The same reply on every turn: the solution in one fenced block, or an honest note."""
        start = time.perf_counter()
        path = self.solution_for(problem_id)
        if path is None:
            where = (("problems/solutions/" + ("" if self.backend == "triton" else f"{self.backend}/"))  # issue 56
                     if self.solutions_dir is None else str(self.solutions_dir))
            text = f"There is no reference solution for problem {problem_id!r} in {where}, so this reply contains no code."
        else:
            text = f"The reference solution for {problem_id} ({path.name}):\n\n{fenced(path.read_text(encoding='utf-8'))}\n"
        return AgentResponse(
            text=text, usage=Usage(), cost_usd=0.0, latency_s=time.perf_counter() - start, model="reference",
            abstained=path is None,
        )
