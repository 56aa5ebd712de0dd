"""backend=gluon on a CPU. Triton's interpreter never runs Gluon: `gluon.jit` makes a `GluonJITFunction` whatever
TRITON_INTERPRET says, and its launch asks for a GPU driver (Triton 3.9 on a CPU: "0 active drivers"). So a CPU
checks the prompt, the static checks, that the evaluator skips a Gluon candidate saying why, and that the worked
example and every Gluon solution compile for the H200 (sm_90) with the arguments their forward launches them with
(`tests.eval.sm90_compile`). Running them is for test_backend_gluon_gpu.py.
"""

from __future__ import annotations

import pytest
import torch

from agents.extract import extract_code
from agents.prompting import EXAMPLES_DIR, PromptBuilder, fenced
from eval import Status
from eval.static_checks import analyze, refusal
from tests.eval import dialect_candidates as c
from tests.eval.sm90_compile import compile_forward, compiling_launches
from tests.paths import REPO

EVALUATOR = {"device": "cpu", "import_timeout_s": 60, "call_timeout_s": 30}
SOLUTIONS = sorted((REPO / "problems" / "solutions" / "gluon").glob("*/[0-9]*.py"))


def test_the_gluon_prompt_teaches_gluon_with_its_own_example() -> None:
    prompt = PromptBuilder("gluon", hardware="H100-SXM").first_prompt("class Model: pass\n")
    assert "@gluon.jit" in prompt and "gl.BlockedLayout" in prompt and "num_warps" in prompt
    assert (EXAMPLES_DIR / "add_relu_gluon.py").read_text().strip() in prompt
    assert "$" not in prompt.replace("$$", "")
    assert extract_code(fenced(c.GLUON_GOOD)) == c.GLUON_GOOD


def test_gluon_kernels_are_found_by_their_decorator_and_a_gluon_run_needs_one() -> None:
    report = analyze(c.GLUON_GOOD)
    assert report.gluon_kernels == ["add_relu_kernel"] and report.triton_kernels == []
    assert refusal(report, "reject", "gluon") is None
    plain = analyze(c.GLUON_AS_TRITON.replace("@gluon.jit", "@staticmethod"))
    status, reason = refusal(plain, "reject", "gluon")
    assert status is Status.REJECTED and "defines no Gluon kernel" in reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path; a GPU runs the candidate")
def test_a_gluon_candidate_is_skipped_on_a_cpu_saying_why(evaluator) -> None:
    for backend in ("gluon", "triton"):  # its Gluon kernels cannot run here, whatever backend it was sent as
        result = evaluator.evaluate(c.example_problem(), c.GLUON_GOOD, backend=backend)
        assert result.status is Status.SKIPPED and "Triton's interpreter does not run them" in result.reason


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_each_gluon_solution_compiles_for_sm90_without_a_gpu(path) -> None:
    prefix = {"level1": "L1", "level2": "L2", "level3": "L3", "llm": "LLM"}[path.parent.name]
    from triton.experimental.gluon import GluonASTSource
    from triton.experimental.gluon._runtime import GluonJITFunction

    compiled = compile_forward(path, f"{prefix}/{path.stem}", GluonJITFunction, GluonASTSource)
    assert compiled and all(".target sm_90a" in k.asm["ptx"] for k in compiled)


def test_there_are_at_least_five_gluon_solutions() -> None:
    assert len(SOLUTIONS) >= 5, SOLUTIONS


def test_the_gluon_worked_example_compiles_for_sm90_without_a_gpu() -> None:
    from triton.experimental.gluon import GluonASTSource
    from triton.experimental.gluon._runtime import GluonJITFunction

    namespace: dict = {}
    exec(compile(c.GLUON_GOOD, str(EXAMPLES_DIR / "add_relu_gluon.py"), "exec"), namespace)
    compiled: list = []
    original = GluonJITFunction.run
    GluonJITFunction.run = compiling_launches(compiled, GluonASTSource)
    try:
        namespace["ModelNew"]()(torch.randn(64, 96), torch.randn(64, 96))
    finally:
        GluonJITFunction.run = original
    assert len(compiled) == 1 and ".target sm_90a" in compiled[0].asm["ptx"]
