"""The problems a server serves and the prompts `harness run` would send for them.

Problems by id come from the config's selection (`problems.spec`); a `{"source", "name"}` problem is parsed
here. Prompts are built by the run's own `PromptBuilder` (`harness.app.prompt_builder`), one per backend.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from agents import PromptError, TurnRecord, visible_source
from harness.app import prompt_builder
from harness.store import safe_name
from problems import Problem, ProblemError, problem_from_source, select_problems

MAX_SOURCE_CHARS = 1 << 20  # one problem source
MAX_NAME_CHARS = 100  # a problem's name: a folder of the audit trail's code, which a file system bounds


class BadRequest(ValueError):
    """A request the service cannot take: HTTP 400 naming `field`."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def refuse_non_text(value: Any, field: str = "") -> None:
    """`BadRequest` naming the first string of a JSON value (`field`; "": the body) that UTF-8 cannot hold: a lone
    surrogate, which a JSON `\\u` escape can make, could be neither stored nor sent back. Iterative, since JSON
    nests as deep as it parses."""
    stack: list[tuple[str, Any]] = [(field, value)]
    while stack:
        field, item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError as exc:
                raise BadRequest(field or "body", f"holds a lone surrogate (U+{ord(item[exc.start]):04X} at "
                                                  f"character {exc.start}), which is not text") from None
        elif isinstance(item, dict):
            for key, v in reversed(item.items()):  # each key is checked before its value, in the body's order
                stack += [(f"{field}.{key}" if field else str(key), v), (f"{field or 'body'} (a key)", key)]
        elif isinstance(item, list):
            stack += [(f"{field or 'body'}[{i}]", v) for i, v in reversed(list(enumerate(item)))]


class NotFound(LookupError):
    """An unknown problem id: HTTP 404."""


class Catalog:
    """Served problems and their prompts. Thread-safe."""

    def __init__(self, config: dict[str, Any], *, allow_problem_source: bool = True) -> None:
        self.config = config
        self.allow_problem_source = allow_problem_source
        self._problems = {p.id: p for p in select_problems(str(config["problems"]["spec"]))}
        self._prompts: dict[str, Any] = {}
        self._lock = threading.Lock()

    def ids(self) -> list[str]:
        return sorted(self._problems)

    def find(self, spec: Any, field: str = "problem") -> Problem:
        """A served problem id, or `{"source": ..., "name": ...}` (a KernelBench-format file's text).

        A problem's source is reference code: the trusted parent runs it (as `harness eval --problem FILE` does), so
        only a token holder can send one, and `--no-problem-source` refuses them."""
        if isinstance(spec, str):
            if spec not in self._problems:
                raise NotFound(f"unknown problem {spec!r}; GET /v1/problems lists the {len(self._problems)} served")
            return self._problems[spec]
        if isinstance(spec, dict):
            if not self.allow_problem_source:
                raise BadRequest(field, "this server evaluates only its own problems (started with "
                                        "--no-problem-source); give a problem id")
            source, name = spec.get("source"), spec.get("name", "problem")
            if not isinstance(source, str) or not source.strip():
                raise BadRequest(f"{field}.source", "must be the problem file's text")
            if len(source) > MAX_SOURCE_CHARS:
                raise BadRequest(f"{field}.source", f"longer than {MAX_SOURCE_CHARS} characters")
            if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS or safe_name(name) != name:
                raise BadRequest(f"{field}.name", f"must be a name of 1 to {MAX_NAME_CHARS} letters, digits and . _ + -")
            try:
                return problem_from_source(source, name=name, problem_id=f"custom/{name}")
            except ProblemError as exc:
                raise BadRequest(f"{field}.source", str(exc)) from None
        raise BadRequest(field, "must be a problem id (string) or {\"source\": ..., \"name\": ...}")

    def messages(self, problem: Problem, backend: str, history: Sequence[TurnRecord] = ()) -> list[dict[str, str]]:
        """The exact conversation `harness run` would send for `problem` after `history`."""
        with self._lock:
            builder = self._prompts.get(backend)
            if builder is None:
                try:
                    builder = self._prompts[backend] = prompt_builder(self.config, backend)
                except PromptError as exc:
                    raise BadRequest("backend", str(exc)) from None
        return [{"role": m.role, "content": m.content} for m in builder.messages(problem.source, list(history))]

    @staticmethod
    def describe(problem: Problem) -> dict[str, Any]:
        """A problem as clients see it (its hidden shapes and metadata left out, as in the prompt)."""
        return {"id": problem.id, "name": problem.name, "level": problem.level, "dtype": problem.dtype,
                "tags": list(problem.tags), "source": visible_source(problem.source)}
