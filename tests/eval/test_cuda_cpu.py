"""CUDA candidates without a GPU: a compile-only nvcc check, then an explicit `skipped`.

One evaluator session builds every case (tests/conftest.py's `build_evaluator`, shared with the own-kernel tests):
its warm workers are never used here (CUDA candidates do not run on a CPU), so starting them once, not per test,
leaves the cores to nvcc. Each test checks only its own candidates' builds (`_build_folder`). A build costs a minute
of CPU, so the tests that need a candidate that builds share one (`BUILT`, `tests.eval.cuda_builds`: built once,
joined by the others and by tests/eval/test_own_kernels), so do the two that need one that nvcc refuses under
torch's flags (`HALVES`), and a broken candidate whose light build is not what its test checks leaves out the heavy
include, so it is built once, not light first and then as written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from eval import EvalConfig, Evaluator, Job, Status
from eval.worker import prebuilt
from harness.corpus import candidates
from tests.eval.cuda_builds import BUILD_LIMIT_S, BUILT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600),
              pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the candidate runs for real")]
# `__half` arithmetic, which torch's `-D__CUDA_NO_HALF_OPERATORS__` and `-D__CUDA_NO_HALF_CONVERSIONS__` turn off: a
# build error however the file includes torch (`torch/types.h` brings in `__half` too, through torch's `Half.h`)
HALVES = candidates.cuda_candidate("halves", 256, "__half kh_h = __float2half(1.f); kh_h = kh_h * kh_h;")


def _one_build(source: str) -> str:
    """`source` without the heavy torch include, so the build worker builds it once (no light build first)."""
    return candidates.edit(source, "#include <torch/extension.h>", "#include <torch/types.h>")


def _build_folder(ev: Evaluator, source: str) -> Path:
    """The build folder of `source` (already built: the builder joins the finished build of the same source)."""
    return Path(ev._builder.submit(source).result().extensions_dir)


def test_cuda_candidates_get_a_compile_only_check(build_evaluator):
    problem = candidates.problem(4096)
    good, broken = BUILT, HALVES
    ok, bad = build_evaluator.evaluate_many([Job(problem, good, "cuda"), Job(problem, broken, "cuda")])
    if shutil.which("nvcc") is None:
        assert ok.status is Status.SKIPPED and "nvcc is not installed" in ok.reason
        return
    # the light .cu (eval.worker.light_build) compiled for the good candidate; the broken one fell back, and
    # its build recorded both failures (eval.worker.prebuilt)
    failed = {entry["name"] for source in (good, broken)
              for entry in prebuilt.read_record(_build_folder(build_evaluator, source)).values() if entry.get("failed")}
    assert ok.status is Status.SKIPPED, ok.reason + ok.error
    assert "compiled with nvcc" in ok.reason
    assert bad.status is Status.COMPILE_ERROR, bad.reason
    assert "Error building extension 'add_relu_scale_halves'" in bad.error and "kh_h * kh_h" in bad.error
    assert failed == {"add_relu_scale_halves_kh_light", "add_relu_scale_halves"}, failed  # light, then as written


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the build runs only with nvcc")
def test_a_build_writes_only_its_own_build_folder(build_evaluator):
    """A CUDA candidate's module code runs in its build worker, beside other candidates' builds: it may write its
    own build folder (torch puts the extension there), and the evaluator's other build folders are mounted
    read-only to it (not merely closed by file permissions, which a worker keeping the parent's uid would pass)."""
    from eval.process.sandbox import sandbox_plan

    if not sandbox_plan().filesystem:
        pytest.skip("no mount namespace on this machine: the filesystem is not isolated")
    r = build_evaluator.evaluate(candidates.problem(4096), BUILT, "cuda")
    planted = list(build_evaluator._builder.root.glob("**/planted"))  # in any build folder of the session
    outcomes = [f.read_text() for f in build_evaluator._builder.root.glob("*/outcome")]  # only BUILT writes one
    assert r.status is Status.SKIPPED and "compiled with nvcc" in r.reason, f"{r.status}: {r.reason}"
    assert outcomes == ["Read-only file system"] and planted == [], (outcomes, planted)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the build runs only with nvcc")
def test_the_compile_check_builds_with_torchs_own_flags(build_evaluator):
    """The check is torch's own build, so it agrees with a GPU machine's build both ways: C++20 code (torch builds
    extensions with -std=c++20) passes, and `__half` arithmetic, which torch's `-D__CUDA_NO_HALF_OPERATORS__` and
    `-D__CUDA_NO_HALF_CONVERSIONS__` turn off, fails. A hand-written nvcc command with -std=c++17 and no defines
    got both wrong. Both candidates are the ones the compile-only test builds: this one joins their builds."""
    problem = candidates.problem(4096)
    honest, halves = build_evaluator.evaluate_many([Job(problem, BUILT, "cuda"), Job(problem, HALVES, "cuda")])
    assert honest.status is Status.SKIPPED and "compiled with nvcc" in honest.reason, honest.reason + honest.error
    assert halves.status is Status.COMPILE_ERROR, halves.reason
    assert "kh_h * kh_h" in halves.error and "error" in halves.error


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the build runs only with nvcc")
def test_a_build_failure_the_candidate_catches_is_not_a_compile_error(build_evaluator):
    """Published kernels (CUDA-L1's L1/12 and L1/25) wrap a `load_inline` that cannot build in try/except and fall
    back to PyTorch. With torch's own `load_inline` they run; the build must not fail them either. A candidate that
    re-raises (its own error, chained to the build's) still failed because of its build."""
    broken = _one_build(candidates.cuda_candidate("caught", 256, "this is not C++;"))
    guarded = candidates.edit(broken, "ext = load_inline(", "_kh_built = True\ntry:\n    ext = load_inline(")
    guarded = candidates.edit(guarded, "verbose=False)\n", "verbose=False)\nexcept Exception:\n    _kh_built = False\n")
    caught = candidates.edit(guarded, "        return ext.add_relu_scale(x.contiguous(), y.contiguous(), self.scale)",
                             "        if not _kh_built:\n            return torch.relu(x + y) * self.scale\n"
                             "        return ext.add_relu_scale(x.contiguous(), y.contiguous(), self.scale)")
    reraised = candidates.edit(guarded.replace("caught", "reraised"), "    _kh_built = False\n",
                               "    raise RuntimeError('no kernel, no model')\n")
    problem = candidates.problem(4096)
    handled, fatal = build_evaluator.evaluate_many([Job(problem, caught, "cuda"), Job(problem, reraised, "cuda")])
    assert handled.status is Status.SKIPPED, f"{handled.status}: {handled.reason} {handled.error}"
    assert "the candidate caught the error" in handled.reason and "add_relu_scale_caught" in handled.reason
    assert fatal.status is Status.COMPILE_ERROR, f"{fatal.status}: {fatal.reason}"
    assert "this is not C++" in fatal.error


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the build runs only with nvcc")
def test_prebuild_starts_the_build_that_evaluate_then_joins(build_evaluator):
    """`prebuild` (what `harness serve` calls as it queues a candidate) starts a CUDA candidate's build at once; the
    later `evaluate` joins it (one build, the same verdict as without it). It builds nothing for a Triton
    candidate, nor for a candidate whose verdict is cached. The first session is the shared one (the builds it held
    before are left out of the count); the second, on the same result cache, is a fresh one."""
    problem = candidates.problem(4096)
    cuda = candidates.cuda_candidate("early", 256)  # built by this test alone
    ev = build_evaluator
    before = ev._builder.kept()

    def new_folders() -> list[Path]:
        return [folder for key, folder in ev._builder.kept().items() if key not in before]

    assert ev.prebuild(problem, candidates.triton_candidate(512, 4), "triton") is None
    assert new_folders() == []
    build = ev.prebuild(problem, cuda, "cuda")
    (folder,) = new_folders()
    r = ev.evaluate(problem, cuda, "cuda")
    assert build.done() and new_folders() == [folder]
    assert set(ev._builder.root.iterdir()) == {*before.values(), folder}
    assert r.status is Status.SKIPPED and "compiled with nvcc" in r.reason, f"{r.status}: {r.reason}"
    config = EvalConfig(device="cpu", cache_dir=ev.config.cache_dir, import_timeout_s=BUILD_LIMIT_S)
    with Evaluator(config) as fresh:  # the same cache: the verdict is known, nothing to build
        assert fresh.prebuild(problem, cuda, "cuda") is None
        assert fresh._builder.kept() == {}


def test_a_candidate_refused_from_its_source_is_never_built(build_evaluator):
    """A PyTorch-only candidate declared CUDA (a published corpus has many) is refused before any build, so
    `evaluate_many` gives it no build slot, as `prebuild` gives it none."""
    problem = candidates.problem(4096)
    pytorch_only = candidates.edit(candidates.cuda_candidate("refused", 256), "ext.add_relu_scale(x.contiguous(), "
                                   "y.contiguous(), self.scale)", "torch.relu(x + y) * self.scale")
    pytorch_only = candidates.edit(pytorch_only, "__global__", "__device__")
    before = build_evaluator._builder.kept()
    (r,) = build_evaluator.evaluate_many([Job(problem, pytorch_only, "cuda")])
    assert r.status is Status.REJECTED and "defines no kernel of its own" in r.reason, f"{r.status}: {r.reason}"
    assert build_evaluator._builder.kept() == before


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the build runs only with nvcc")
def test_a_toolkit_header_this_machine_lacks_skips_the_candidate_and_a_syntax_error_still_fails(build_evaluator):
    """A partial CUDA toolkit (nvcc without the libraries' headers) fails an honest candidate's build on a header
    that a GPU machine's toolkit has (`ATen/cuda/CUDAContext.h` includes `cusparse.h`): `skipped`, saying so, not a
    `compile_error` that every study counts as the candidate's failure. Where the toolkit is whole, it compiles:
    `skipped` too. A syntax error in a kernel whose headers are all there is still a compile error (where a header
    is missing, the compiler stops at it, so this machine cannot tell)."""
    problem = candidates.problem(4096)
    plain = candidates.cuda_candidate("toolkit", 256, "")
    context = "#include <torch/types.h>\n#include <ATen/cuda/CUDAContext.h>"
    honest = candidates.edit(plain, "#include <torch/extension.h>", context)
    typo = _one_build(candidates.edit(plain, "int threads = 256;", "int threads = 256"))
    ok, bad = build_evaluator.evaluate_many([Job(problem, honest, "cuda"), Job(problem, typo, "cuda")])
    assert ok.status is Status.SKIPPED, ok.reason + ok.error
    assert "compiled with nvcc" in ok.reason or "this machine's CUDA toolkit lacks" in ok.reason, ok.reason
    assert bad.status is Status.COMPILE_ERROR, bad.reason
