"""backend=helion on a GPU (`pytest -m gpu`): the worked example and every Helion solution correct and timed, and the
hostile candidates rejected (a PyTorch fallback behind a Helion kernel Helion refuses, reference mode, a decoy, plain
Triton doing the work beside a Helion decoy). Prints each solution's speedup (docs/benchmarks.md)."""

from __future__ import annotations

import pytest
import torch

from eval import Status
from problems import suite_problem
from tests.eval import dialect_candidates as c
from tests.paths import REPO

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
helion = pytest.importorskip("helion")

EVALUATOR = {"device": "cuda"}
SOLUTIONS = sorted((REPO / "problems" / "solutions" / "helion").glob("*/[0-9]*.py"))
_PREFIX = {"level1": "L1", "level2": "L2", "level3": "L3", "llm": "LLM"}


def test_the_helion_worked_example_is_correct_and_its_generated_kernel_is_its_own(evaluator) -> None:
    result = evaluator.evaluate(c.example_problem(), c.HELION_GOOD, backend="helion")
    assert result.status is Status.CORRECT, (result.reason, result.error[-2000:])
    assert result.kernels.own_kernels_launched == ["_helion_add_relu"] and result.kernels.own_time_fraction > 0.9
    print(f"helion example/add_relu: speedup {result.speedup:.2f}")


@pytest.mark.parametrize("name, why", [
    ("HELION_FALLBACK", "none of the candidate's own kernels ran during forward"),
    ("HELION_REF_MODE", "none of the candidate's own kernels ran during forward"),
    ("HELION_DECOY", "none of the candidate's own kernels ran during forward"),
    ("HELION_AS_TRITON", "backend=helion: none of the candidate's own Helion kernels ran during forward"),
])
def test_helion_in_name_only_is_rejected(evaluator, name, why) -> None:
    result = evaluator.evaluate(c.example_problem(), getattr(c, name), backend="helion")
    assert result.status is Status.REJECTED and result.reason.startswith(why), (result.status, result.reason)


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_each_helion_solution_is_correct_on_the_gpu(evaluator, path) -> None:
    problem = suite_problem(f"{_PREFIX[path.parent.name]}/{path.stem}")
    result = evaluator.evaluate(problem, path.read_text(), backend="helion")
    assert result.status is Status.CORRECT, (result.reason, result.error[-2000:])
    assert result.kernels.own_time_fraction > 0.9, result.kernels
    print(f"helion {problem.id}: speedup {result.speedup:.2f}")
