"""Fixtures shared by the test folders (tests/eval, tests/harness, tests/agents, tests/problems).

Helpers that tests import by name live beside this file as modules (`tests.paths`,
`tests.run_fixtures`, ...): pytest advises against importing from a conftest.

The suite runs on two processes (`pytest -n 2`, pytest-xdist) that each take whole test files
(`pytest_xdist_make_scheduler`), so a module's evaluator session starts once; files that share something of the
machine name one group in `SHARED_GROUPS` and run one after another on one process.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eval import EvalConfig, Evaluator
from problems.problem import Problem, problem_from_source
from harness.corpus.hostile import PROBLEM
from tests.eval.cuda_builds import BUILD_LIMIT_S
from tests.run_fixtures import base_overrides, write_problem


# Ray: `ray start --head` leaves /tmp/ray/ray_current_cluster, which a local `ray.init()` joins; CUDA builds: one
# `build_evaluator` session builds the candidate both files build (`tests.eval.cuda_builds`)
SHARED_GROUPS = {"tests/harness/test_ray_executor.py": "ray", "tests/harness/test_serve_ray.py": "ray",
                 "tests/eval/test_cuda_cpu.py": "cuda-builds", "tests/eval/test_own_kernels.py": "cuda-builds"}
# the longest groups (measured on 2 cores), handed out first so that no long one starts last and leaves the other
# process idle at the end; the rest go most tests first
LONGEST_FIRST = ["cuda-builds", "tests/eval/test_hostile.py", "ray", "tests/harness/test_run_signals.py",
                 "tests/eval/test_sandbox.py", "tests/eval/test_pool.py", "tests/eval/test_shared_timing.py",
                 "tests/problems/test_solutions.py", "tests/eval/test_prebuilt.py", "tests/harness/test_run_resume.py",
                 "tests/harness/test_run_e2e.py", "tests/harness/test_run_cli.py", "tests/eval/test_frames.py"]


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist (the `test` extra)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole files (or `SHARED_GROUPS`) to each process, `LONGEST_FIRST` first, then the most tests first.
    pytest-xdist's `loadgroup` cannot do it under pytest 9 (it renames `item._nodeid`, which pytest 9 no longer
    reads), so the group is the scope here."""
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SHARED_GROUPS.get(path, path)

        def _assign_work_unit(self, node: Any) -> None:
            for scope in LONGEST_FIRST:
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
                    break
            super()._assign_work_unit(node)

    return FileGroups(config, log)


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


@pytest.fixture(scope="session")
def build_evaluator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Evaluator]:
    """One evaluator session that builds CUDA candidates without a GPU (compile-only) for the files that build the
    same candidate (`tests.eval.cuda_builds`): the second file joins the first's build. Its warm workers are never
    used (CUDA candidates do not run on a CPU); a fresh result cache of its own."""
    cache = str(tmp_path_factory.mktemp("eval_cache"))
    config = EvalConfig(device="cpu", import_timeout_s=BUILD_LIMIT_S, cache_dir=cache)
    with Evaluator(config) as ev:
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


@pytest.fixture
def stop_handlers() -> Iterator[None]:
    """SIGINT raising `KeyboardInterrupt` (as from a terminal; a pytest-xdist worker ignores it) for a test in this
    process, and every stop handler as it was afterwards."""
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {s: signal.getsignal(s) for s in stops}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
