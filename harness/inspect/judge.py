"""Where the inspect solver and scorer get prompts and verdicts: this process's evaluator, or `harness serve`.

Both judges give exactly what `harness run` gives for the same reply: its prompts (`harness.app.prompt_builder`),
its reply extraction and crash-safe evaluation (`harness.verdict`), its feedback (`eval.render_feedback`). The
in-process judge starts its evaluator on the first candidate (a run of format errors starts none), one per
executor and evaluator settings, kept until the process exits: several evals in one process share its warm workers.
"""

from __future__ import annotations

import atexit
import json
import threading
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from agents import TurnRecord
from eval import EvalConfig, EvalResult, render_feedback
from harness.app import prompt_builder
from harness.client import EvalClient
from harness.executors import make_evaluator
from harness.verdict import evaluate_safely, extract_candidate
from problems import Problem


@dataclass(frozen=True)
class Verdict:
    """One judged reply: the code extracted from it (None for a format error), the result and its feedback."""

    code: str | None
    result: EvalResult
    feedback: str


class Judge(Protocol):
    """What the solver and the scorer need: each sample's problem (by sample id), the conversation of the next
    turn, and a reply's verdict."""

    backend: str
    problems: dict[str, Problem]

    def messages(self, problem: Problem, history: Sequence[TurnRecord]) -> list[dict[str, str]]: ...

    def verdict(self, problem: Problem, reply: str, turn: int) -> Verdict: ...


class LocalJudge:
    """Prompts and verdicts in this process, from a `harness run` config (`harness.overrides.compose_config`)."""

    def __init__(self, config: dict[str, Any], problems: dict[str, Problem]) -> None:
        self.backend = str(config["backend"])
        self.problems = problems
        self._prompts = prompt_builder(config, self.backend)
        self._config = config

    def messages(self, problem: Problem, history: Sequence[TurnRecord]) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.content} for m in self._prompts.messages(problem.source, history)]

    def verdict(self, problem: Problem, reply: str, turn: int) -> Verdict:
        code, refused = extract_candidate(reply, problem.id, self.backend)
        result = refused or evaluate_safely(shared_evaluator(self._config), problem, code or "", self.backend)
        return Verdict(code, result, render_feedback(result))


_EVALUATORS: dict[str, Any] = {}
_EVALUATORS_LOCK = threading.Lock()


def shared_evaluator(config: dict[str, Any]) -> Any:
    """The evaluator `harness run` would use for this config (`executor=`, `eval.*`), started on first use."""
    key = json.dumps([config["executor"], config["eval"]], sort_keys=True)
    with _EVALUATORS_LOCK:
        if key not in _EVALUATORS:
            _EVALUATORS[key] = make_evaluator(config["executor"], EvalConfig(**config["eval"]))
            atexit.register(_EVALUATORS[key].close)
        return _EVALUATORS[key]


class ServedJudge:
    """Prompts and verdicts from a `harness serve` at `url` (its settings: preset, prompts, device). A problem it
    serves goes by id; any other (the self-check's own problem) by its source."""

    def __init__(self, url: str, backend: str, problems: dict[str, Problem]) -> None:
        self.backend = backend
        self.problems = problems
        self._client = EvalClient(url)
        self._served = {p["id"] for p in self._client.problems()}

    def _problem(self, problem: Problem) -> str | dict[str, str]:
        return problem.id if problem.id in self._served else {"source": problem.source, "name": problem.name}

    def messages(self, problem: Problem, history: Sequence[TurnRecord]) -> list[dict[str, str]]:
        records = [{"turn": h.turn, "reply": h.reply, "code": h.code, "feedback": h.feedback} for h in history]
        return self._client.messages(self._problem(problem), self.backend, records)

    def verdict(self, problem: Problem, reply: str, turn: int) -> Verdict:
        answer = self._client.evaluate(self._problem(problem), reply, backend=self.backend, turn=turn)
        return Verdict(answer.get("code"), EvalResult.from_dict(answer["result"]), answer["feedback"])
