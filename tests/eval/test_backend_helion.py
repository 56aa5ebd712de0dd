"""backend=helion on a CPU: Helion's generated Triton kernels run under Triton's interpreter (TRITON_INTERPRET=1),
so the whole pipeline is checked here: the prompt, the static checks, own kernels by what Helion compiled and
launched, the hostile candidates, and `harness run agent=reference backend=helion` over the Helion solutions.

The prompt and static checks need no Helion; the evaluations are skipped where it is not installed (`pip install -e
".[helion]"`; CI's default install has none). GPU counterparts: test_backend_helion_gpu.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from agents.extract import extract_code
from agents.prompting import EXAMPLES_DIR, PromptBuilder, fenced
from eval import Status
from eval.static_checks import analyze, refusal
from tests.eval import dialect_candidates as c
from tests.paths import REPO

needs_helion = pytest.mark.skipif(importlib.util.find_spec("helion") is None, reason='needs pip install -e ".[helion]"')

EVALUATOR = {"device": "cpu", "import_timeout_s": 120, "call_timeout_s": 60, "trials": 2}


def test_the_helion_prompt_teaches_helion_with_its_own_example() -> None:
    prompt = PromptBuilder("helion", hardware="H100-SXM").first_prompt("class Model: pass\n")
    assert "@helion.kernel" in prompt and "hl.tile" in prompt and "helion.Config(" in prompt
    assert (EXAMPLES_DIR / "add_relu_helion.py").read_text().strip() in prompt
    assert "$" not in prompt.replace("$$", "")
    example = (EXAMPLES_DIR / "add_relu_helion.py").read_text()
    assert extract_code(fenced(example)) == example


def test_helion_kernels_are_found_by_their_decorator_and_a_helion_run_needs_one() -> None:
    report = analyze(c.HELION_GOOD)
    assert report.helion_kernels == ["add_relu"] and report.triton_kernels == []
    assert refusal(report, "reject", "helion") is None
    aliased = analyze("from helion import jit\nimport torch\n@jit(config=None)\ndef k(x):\n    pass\nclass ModelNew: pass\n")
    assert aliased.helion_kernels == ["k"] and aliased.triton_kernels == []
    status, reason = refusal(analyze(c.HELION_AS_TRITON.replace("@helion.kernel", "@staticmethod")), "reject", "helion")
    assert status is Status.REJECTED and "defines no Helion kernel" in reason
    assert refusal(analyze(c.HELION_AS_TRITON.replace("@helion.kernel", "@staticmethod")), "reject", "triton") is None


@needs_helion
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_helion_worked_example_is_correct_and_its_generated_kernel_is_its_own(evaluator) -> None:
    result = evaluator.evaluate(c.example_problem(), c.HELION_GOOD, backend="helion")
    assert result.status is Status.CORRECT, (result.reason, result.error[-2000:])
    assert result.kernels.own_kernels_launched == ["_helion_add_relu"]
    assert result.kernels.own_kernels_defined == ["add_relu"]


@needs_helion
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name, why", [
    ("HELION_FALLBACK", "none of the candidate's own kernels ran during forward"),
    ("HELION_REF_MODE", "none of the candidate's own kernels ran during forward"),
    ("HELION_DECOY", "none of the candidate's own kernels ran during forward"),
    ("HELION_AS_TRITON", "backend=helion: none of the candidate's own Helion kernels ran during forward"),
])
def test_helion_in_name_only_is_rejected(evaluator, name, why) -> None:
    result = evaluator.evaluate(c.example_problem(), getattr(c, name), backend="helion")
    assert result.status is Status.REJECTED, (result.status, result.reason, result.error[-2000:])
    assert result.reason.startswith(why), result.reason


@needs_helion
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_same_plain_triton_candidate_passes_as_triton(evaluator) -> None:
    """The language check is what rejected HELION_AS_TRITON: the kernel itself is honest Triton."""
    result = evaluator.evaluate(c.example_problem(), c.HELION_AS_TRITON, backend="triton")
    assert result.status is Status.CORRECT, (result.reason, result.error[-2000:])


# The fp32 solutions. The others are checked on the GPU only (test_backend_helion_gpu.py): Helion lowers exp, rsqrt
# and tanh to libdevice calls, which Triton 3.9's interpreter leaves unimplemented (they return None: L1/13_softmax),
# and the interpreter truncates fp32 -> bf16 casts where the GPU rounds to nearest (LLM/01 gives NaN, LLM/03 is off by
# more than bf16's tolerance); the Triton solutions round by hand under the interpreter, Helion has no such hook.
CPU_SOLUTIONS = "L1/15_layer_norm,L1/16_rms_norm,L1/34_l2_normalize,L2/15_bias_residual_layernorm,L2/16_add_rmsnorm"


@needs_helion
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_harness_run_of_the_helion_reference_solutions_is_correct(tmp_path) -> None:
    from harness.cli import main
    from tests.run_fixtures import rows

    code = main(["run", "agent=reference", "backend=helion", f"problems.spec='{CPU_SOLUTIONS}'", "eval.trials=2",
                 f"runs_dir={tmp_path / 'runs'}", f"eval.cache_dir={tmp_path / 'cache'}", "prompt.hardware=null",
                 "quiet=true", "name=helion-ref"])
    assert code == 0
    statuses = rows(tmp_path / "runs" / "helion-ref", "problem_id, status")
    assert statuses == [(p, "correct") for p in sorted(CPU_SOLUTIONS.split(","))], statuses


@needs_helion
def test_the_record_of_helions_compiles_is_sealed(monkeypatch) -> None:
    """A generated module mapped to the candidate's by hand (to make, say, torch.compile's kernels count as its own)
    no longer matches the seal; nor does a compile step swapped after the tracer armed it."""
    from helion.runtime.kernel import BoundKernel

    from eval.worker import tracing

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from triton.runtime.interpreter import InterpretedFunction

    run, compile_config = InterpretedFunction.run, BoundKernel.compile_config
    tracer = tracing.TritonLaunchTracer()
    try:
        tracer.install()
        tracer.arm_helion()
        assert tracer.own_launches("kh_candidate") == []
        tracer._made["inductor_generated_module"] = "kh_candidate"
        with pytest.raises(tracing.TracerTampered, match="records of Helion's compiles were added or changed"):
            tracer.own_languages("kh_candidate")
        del tracer._made["inductor_generated_module"]
        BoundKernel.compile_config = compile_config
        with pytest.raises(tracing.TracerTampered, match="Helion's compile step is not the one the harness installed"):
            tracer.own_launches("kh_candidate")
    finally:
        InterpretedFunction.run, BoundKernel.compile_config = run, compile_config


@needs_helion
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_helion_solution_compiles_for_sm90_without_a_gpu() -> None:
    """What the interpreter cannot run (libdevice's exp, bf16 rounding) is compiled: each solution's forward at the
    problem's reduced sizes, every Triton kernel Helion generated compiled to an sm_90 cubin (`tests.eval.sm90_compile`,
    in a process without TRITON_INTERPRET)."""
    solutions = sorted((REPO / "problems" / "solutions" / "helion").glob("*/[0-9]*.py"))
    prefix = {"level1": "L1", "level2": "L2", "level3": "L3", "llm": "LLM"}
    entries = [f"{p}={prefix[p.parent.name]}/{p.stem}" for p in solutions]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "eval" / "sm90_compile.py"), *entries], cwd=REPO,
                          env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(found) == len(solutions) >= 5
    assert all(kernels and all(kernels) for kernels in found.values()), found
