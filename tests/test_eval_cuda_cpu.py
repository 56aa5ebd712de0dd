"""CUDA candidates without a GPU: a compile-only nvcc check, then an explicit `skipped`."""

from __future__ import annotations

import shutil

import pytest
import torch

from eval import EvalConfig, Evaluator, Job, Status
from eval.worker.light_build import FAILED_MARKER
from harness.bench import candidates

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the candidate runs for real")]


def test_cuda_candidates_get_a_compile_only_check(tmp_path):
    problem = candidates.problem(4096)
    good = candidates.cuda_candidate("cpuok", 256)
    broken = candidates.cuda_candidate("cpubad", 256, "this is not C++;")
    with Evaluator(EvalConfig(device="cpu", cache_dir=str(tmp_path))) as ev:
        ok, bad = ev.evaluate_many([Job(problem, good, "cuda"), Job(problem, broken, "cuda")])
        # the light .cu (eval.worker.light_build) compiled for the good candidate; the broken one fell back
        fell_back = {p.parent.name for p in ev._builder.root.glob(f"*/*/{FAILED_MARKER}")}
    if shutil.which("nvcc") is None:
        assert ok.status is Status.SKIPPED and "nvcc is not installed" in ok.reason
        return
    assert ok.status is Status.SKIPPED, ok.reason + ok.error
    assert "compiled with nvcc" in ok.reason
    assert bad.status is Status.COMPILE_ERROR, bad.reason
    assert "nvcc failed" in bad.error and "error" in bad.error
    assert fell_back == {"add_relu_scale_cpubad_kh_light"}, fell_back
