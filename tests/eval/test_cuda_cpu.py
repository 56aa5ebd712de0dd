"""CUDA candidates without a GPU: a compile-only nvcc check, then an explicit `skipped`.

One evaluator session builds every case (the module's `evaluator` fixture): its warm workers are never used here
(CUDA candidates do not run on a CPU), so starting them once, not per test, leaves the cores to nvcc. Each test
checks only its own candidates' builds (`_build_folder`). A build costs a minute of CPU, so the tests that need an
honest candidate share one (`HONEST`: built once, joined by the others), and a broken candidate whose light build
is not what its test checks leaves out the heavy include, so it is built once, not light first and then as written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from eval import EvalConfig, Evaluator, Job, Status
from eval.worker import prebuilt
from harness.corpus import candidates

# nvcc builds on a loaded 2-core machine can take minutes: a generous bound, not the default 180 s, so that only a
# build that hangs fails here (three of these tests failed under load at 180 s, and passed alone)
BUILD_LIMIT_S = 1200.0
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600),
              pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the candidate runs for real")]
EVALUATOR = dict(device="cpu", import_timeout_s=BUILD_LIMIT_S)  # no cache_dir: a fresh result cache for this module
# module code that tries to write beside its own build folder and records what happened, in its own build folder
PLANT = ("import os as _os, pathlib as _pl\n"
         "_own = _pl.Path(_os.environ['TORCH_EXTENSIONS_DIR'])\n"
         "try:\n"
         "    (_own.parent / 'planted').write_text('into the evaluator build folders')\n"
         "    _outcome = 'written'\n"
         "except OSError as _exc:\n"
         "    _outcome = _exc.strerror\n"
         "(_own / 'outcome').write_text(_outcome)\n")
CXX20 = 'static_assert(requires { n + 1; }, "a requires-expression: C++20");'
HONEST = PLANT + candidates.cuda_candidate("cpuok", 256, CXX20)  # an honest kernel: the plant, C++20 code


def _one_build(source: str) -> str:
    """`source` without the heavy torch include, so the build worker builds it once (no light build first)."""
    return candidates.edit(source, "#include <torch/extension.h>", "#include <torch/types.h>")


def _build_folder(ev: Evaluator, source: str) -> Path:
    """The build folder of `source` (already built: the builder joins the finished build of the same source)."""
    return Path(ev._builder.submit(source).result().extensions_dir)


def test_cuda_candidates_get_a_compile_only_check(evaluator):
    problem = candidates.problem(4096)
    good = HONEST
    broken = candidates.cuda_candidate("cpubad", 256, "this is not C++;")
    ok, bad = evaluator.evaluate_many([Job(problem, good, "cuda"), Job(problem, broken, "cuda")])
    if shutil.which("nvcc") is None:
        assert ok.status is Status.SKIPPED and "nvcc is not installed" in ok.reason
        return
    # the light .cu (eval.worker.light_build) compiled for the good candidate; the broken one fell back, and
    # its build recorded both failures (eval.worker.prebuilt)
    failed = {entry["name"] for source in (good, broken)
              for entry in prebuilt.read_record(_build_folder(evaluator, source)).values() if entry.get("failed")}
    assert ok.status is Status.SKIPPED, ok.reason + ok.error
    assert "compiled with nvcc" in ok.reason
    assert bad.status is Status.COMPILE_ERROR, bad.reason
    assert "Error building extension 'add_relu_scale_cpubad'" in bad.error and "this is not C++" in bad.error
    assert failed == {"add_relu_scale_cpubad_kh_light", "add_relu_scale_cpubad"}, failed  # light, then as written


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the build runs only with nvcc")
def test_a_build_writes_only_its_own_build_folder(evaluator):
    """A CUDA candidate's module code runs in its build worker, beside other candidates' builds: it may write its
    own build folder (torch puts the extension there), and the evaluator's other build folders are mounted
    read-only to it (not merely closed by file permissions, which a worker keeping the parent's uid would pass)."""
    from eval.sandbox import sandbox_plan

    if not sandbox_plan().filesystem:
        pytest.skip("no mount namespace on this machine: the filesystem is not isolated")
    r = evaluator.evaluate(candidates.problem(4096), HONEST, "cuda")
    planted = list(evaluator._builder.root.glob("**/planted"))  # in any build folder of the session
    outcomes = [f.read_text() for f in evaluator._builder.root.glob("*/outcome")]  # only HONEST writes one
    assert r.status is Status.SKIPPED and "compiled with nvcc" in r.reason, f"{r.status}: {r.reason}"
    assert outcomes == ["Read-only file system"] and planted == [], (outcomes, planted)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the build runs only with nvcc")
def test_the_compile_check_builds_with_torchs_own_flags(evaluator):
    """The check is torch's own build, so it agrees with a GPU machine's build both ways: C++20 code (torch builds
    extensions with -std=c++20) passes, and `__half` arithmetic, which torch's `-D__CUDA_NO_HALF_OPERATORS__` and
    `-D__CUDA_NO_HALF_CONVERSIONS__` turn off, fails. A hand-written nvcc command with -std=c++17 and no defines
    got both wrong. (`torch/types.h` brings in `__half` too, through torch's `Half.h`.)"""
    half_ops = "__half kh_h = __float2half(1.f); kh_h = kh_h * kh_h;"
    problem = candidates.problem(4096)
    honest, halves = evaluator.evaluate_many([Job(problem, HONEST, "cuda"),  # holds CXX20
                                              Job(problem, _one_build(candidates.cuda_candidate("halves", 256, half_ops)),
                                                  "cuda")])
    assert honest.status is Status.SKIPPED and "compiled with nvcc" in honest.reason, honest.reason + honest.error
    assert halves.status is Status.COMPILE_ERROR, halves.reason
    assert "kh_h * kh_h" in halves.error and "error" in halves.error


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the build runs only with nvcc")
def test_a_build_failure_the_candidate_catches_is_not_a_compile_error(evaluator):
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
    handled, fatal = evaluator.evaluate_many([Job(problem, caught, "cuda"), Job(problem, reraised, "cuda")])
    assert handled.status is Status.SKIPPED, f"{handled.status}: {handled.reason} {handled.error}"
    assert "the candidate caught the error" in handled.reason and "add_relu_scale_caught" in handled.reason
    assert fatal.status is Status.COMPILE_ERROR, f"{fatal.status}: {fatal.reason}"
    assert "this is not C++" in fatal.error


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the build runs only with nvcc")
def test_prebuild_starts_the_build_that_evaluate_then_joins(tmp_path):
    """`prebuild` (what `harness serve` calls as it queues a candidate) starts a CUDA candidate's build at once; the
    later `evaluate` joins it (one build, the same verdict as without it). It builds nothing for a Triton
    candidate, nor for a candidate whose verdict is cached."""
    problem = candidates.problem(4096)
    cuda = candidates.cuda_candidate("early", 256)
    config = EvalConfig(device="cpu", cache_dir=str(tmp_path), import_timeout_s=BUILD_LIMIT_S)
    with Evaluator(config) as ev:
        assert ev.prebuild(problem, candidates.triton_candidate(512, 4), "triton") is None
        assert ev._builder.kept() == {}
        build = ev.prebuild(problem, cuda, "cuda")
        (folder,) = ev._builder.kept().values()
        r = ev.evaluate(problem, cuda, "cuda")
        assert build.done() and list(ev._builder.kept().values()) == [folder]
        assert list(ev._builder.root.iterdir()) == [folder]
    assert r.status is Status.SKIPPED and "compiled with nvcc" in r.reason, f"{r.status}: {r.reason}"
    with Evaluator(config) as ev:  # the same cache: the verdict is known, nothing to build
        assert ev.prebuild(problem, cuda, "cuda") is None
        assert ev._builder.kept() == {}


def test_a_candidate_refused_from_its_source_is_never_built(evaluator):
    """A PyTorch-only candidate declared CUDA (a published corpus has many) is refused before any build, so
    `evaluate_many` gives it no build slot, as `prebuild` gives it none."""
    problem = candidates.problem(4096)
    pytorch_only = candidates.edit(candidates.cuda_candidate("refused", 256), "ext.add_relu_scale(x.contiguous(), "
                                   "y.contiguous(), self.scale)", "torch.relu(x + y) * self.scale")
    pytorch_only = candidates.edit(pytorch_only, "__global__", "__device__")
    before = evaluator._builder.kept()
    (r,) = evaluator.evaluate_many([Job(problem, pytorch_only, "cuda")])
    assert r.status is Status.REJECTED and "defines no kernel of its own" in r.reason, f"{r.status}: {r.reason}"
    assert evaluator._builder.kept() == before
