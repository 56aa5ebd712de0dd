"""The evaluator under `eval=kernelbench` against the default rules, on CPU (Triton interpreter),
and the reasons the paired report gives for GPU-only disagreements (synthetic runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval import Evaluator, Status
from harness.presets import preset_config
from harness.report.load import load_run
from harness.report.paired import paired_report, to_markdown
from problems.problem import problem_from_source
from tests import report_fixtures as fx
from harness.corpus.hostile import FORWARD, HOSTILE, PROBLEM, REGENERATE_PUBLIC_INPUTS, RELU, variant

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # every test runs sandboxed evaluator workers

LINEAR = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return self.lin(x)


N = 16


def get_inputs():
    return [torch.randn(4, N)]


def get_init_inputs():
    return [N]
'''
SAME_INIT = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        {extra}self.lin = nn.Linear(n, n)

    def forward(self, x):
        return self.lin(x)
'''


@pytest.fixture(scope="module")
def evaluators():
    limits = {"device": "cpu", "cache_dir": None, "workers_per_gpu": 1, "import_timeout_s": 20, "call_timeout_s": 10}
    with Evaluator(preset_config("default", own_kernel_policy="report", **limits)) as strict, \
            Evaluator(preset_config("kernelbench", **limits)) as kb:
        yield strict, kb


def test_models_share_the_seed_not_the_state_under_kernelbench(evaluators) -> None:
    strict, kb = evaluators
    problem = problem_from_source(LINEAR, name="linear")
    same = SAME_INIT.format(extra="")
    shifted = SAME_INIT.format(extra="torch.randn(3)  # draws before its layer: other initial weights\n        ")
    # built in the same order after the same seed: the same weights, with or without a copy
    assert strict.evaluate(problem, same).status is Status.CORRECT
    r = kb.evaluate(problem, same)
    assert r.status is Status.CORRECT and r.preset == "kernelbench" and r.trials == 5
    # other draws first: the strict rules copy the reference's weights over; KernelBench does not
    assert strict.evaluate(problem, shifted).status is Status.CORRECT
    r = kb.evaluate(problem, shifted)
    assert r.status is Status.INCORRECT and "values differ beyond atol=0.01" in r.reason


def test_what_each_preset_catches(evaluators) -> None:
    strict, kb = evaluators
    problem = problem_from_source(PROBLEM, name="add_relu")
    off = variant(RELU, RELU + " + 0.003")
    far = variant(RELU, RELU + " + 0.05")
    public = variant(FORWARD, REGENERATE_PUBLIC_INPUTS + FORWARD)
    cases = {
        "off": (off, "incorrect", "correct"),  # 3e-3: within 1e-2, outside 1e-4
        "far": (far, "incorrect", "incorrect"),  # 5e-2: outside both
        "public_inputs": (public, "incorrect", "correct"),  # recomputes KernelBench's public inputs, ignores its own
        "cached_first_output": (HOSTILE["cached_first_output"][0], "incorrect", "incorrect"),
        "decoy_kernel": (HOSTILE["decoy_kernel"][0], "correct", "correct"),  # strict here runs with policy=report
        "patch_allclose": (HOSTILE["patch_allclose"][0], "rejected", "rejected"),  # the sandbox stays on
        "enables_tf32": (HOSTILE["enables_tf32"][0], "rejected", "rejected"),
    }
    got = {name: (strict.evaluate(problem, src).status.value, kb.evaluate(problem, src).status.value)
           for name, (src, _, _) in cases.items()}
    assert got == {name: (a, b) for name, (_, a, b) in cases.items()}


def test_the_default_preset_still_rejects_pytorch_only_candidates() -> None:
    config = preset_config("default", device="cpu", cache_dir=None, workers_per_gpu=1)
    assert config.own_kernel_policy == "reject" and config.hidden_shapes and config.hidden_work_check
    with Evaluator(config) as ev:
        r = ev.evaluate(problem_from_source(PROBLEM, name="add_relu"), HOSTILE["decoy_kernel"][0])
    assert r.status is Status.REJECTED and r.preset == "default"


# -- reasons of disagreements only a GPU produces (timing, precision), from synthetic runs ----------
def _pair(tmp_path: Path, a: list[tuple], b: list[tuple], eval_b: dict) -> list:
    run_a = fx.write_run(tmp_path / "a", fx.config("a", spec="L1/13_softmax,L1/16_rms_norm"), a)
    run_b = fx.write_run(tmp_path / "b", fx.config("b", spec="L1/13_softmax,L1/16_rms_norm", eval_overrides=eval_b), b)
    return paired_report(load_run(run_a), load_run(run_b), n_boot=50)


def test_timing_and_precision_reasons_on_a_gpu(tmp_path) -> None:
    kb = {"preset": "kernelbench", "precision": "torch_default", "atol": 0.01, "rtol": 0.01}
    report = _pair(tmp_path,
                   [("L1/13_softmax", 1, 1, "correct", 0.9, None), ("L1/16_rms_norm", 1, 1, "incorrect", None, None)],
                   [("L1/13_softmax", 1, 1, "correct", 1.3, None), ("L1/16_rms_norm", 1, 1, "correct", 1.1, None)], kb)
    reasons = {r.problem_id: r.reason for r in report.rows}
    # 0.9x against 1.3x: fast_1 differs, so it is listed, as a timing difference
    assert reasons["L1/13_softmax"] == "timing"
    # wrong by 0.5 (beyond 1e-2) on a GPU, under different TF32 settings: precision, not tolerance
    assert reasons["L1/16_rms_norm"] == "precision"
    assert report.fast_p_a[1.0] == 0.0 and report.fast_p_b[1.0] == 1.0
    md = to_markdown(report)
    assert "2 of 2 problems disagree" in md and "0.90×" in md and "1.30×" in md


def test_close_speedups_agree(tmp_path) -> None:
    report = _pair(tmp_path,
                   [("L1/13_softmax", 1, 1, "correct", 1.5, None), ("L1/16_rms_norm", 1, 1, "rejected", None, None)],
                   [("L1/13_softmax", 1, 1, "correct", 1.4, None), ("L1/16_rms_norm", 1, 1, "rejected", None, None)],
                   {"preset": "kernelbench"})
    assert [r.agree for r in report.rows] == [True, True] and not report.disagreements
