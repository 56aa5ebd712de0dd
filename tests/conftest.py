"""Fixtures shared by the test folders (tests/eval, tests/harness, tests/agents, tests/problems).

Helpers that tests import by name live beside this file as modules (`tests.paths`,
`tests.run_fixtures`, ...): pytest advises against importing from a conftest.

The suite runs on two processes (`pytest -n 2 --dist loadgroup`, pytest-xdist): each test file is a group that one
process runs whole, so a module's evaluator session starts once; files that share something of the machine (Ray's
`/tmp/ray`) name one `xdist_group` and run one after another.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eval import EvalConfig, Evaluator
from problems.problem import Problem, problem_from_source
from harness.corpus.hostile import PROBLEM
from tests.run_fixtures import base_overrides, write_problem


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test without an `xdist_group` joins its file's group."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.fixture(scope="module")
def evaluator(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Evaluator]:
    """One evaluator session for a whole module: starting its warm workers is the slow part, and one session
    serving every case also shows that it survives each candidate.

    Its settings are the module's `EVALUATOR` (`EvalConfig` fields), as each module's cases need them. Without a
    `cache_dir` there, the module gets a fresh result cache of its own, never the project's `.eval_cache`."""
    settings = getattr(request.module, "EVALUATOR", None)
    if settings is None:
        raise pytest.UsageError(f"{request.module.__name__} uses the `evaluator` fixture but sets no EVALUATOR")
    if "cache_dir" not in settings:
        settings = {**settings, "cache_dir": str(tmp_path_factory.mktemp("eval_cache"))}
    with Evaluator(EvalConfig(**settings)) as ev:
        yield ev


@pytest.fixture(scope="module")
def problem() -> Problem:
    """The hostile corpus's problem (`harness.corpus.hostile.PROBLEM`); a module that tests on another defines its own."""
    return problem_from_source(PROBLEM, name="add_relu")


@pytest.fixture(scope="module")
def eval_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One evaluator result cache for a module's `harness run`s: an identical candidate is judged for real once."""
    return tmp_path_factory.mktemp("eval_cache")


@pytest.fixture
def base(tmp_path: Path, eval_cache: Path) -> list[str]:
    """Overrides for a `harness run` of the tiny problem (`tests.run_fixtures`), kept inside `tmp_path`."""
    return base_overrides(tmp_path, write_problem(tmp_path / "problems"), eval_cache)
