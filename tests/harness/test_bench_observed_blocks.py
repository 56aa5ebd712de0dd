"""`harness bench observed-blocks`: its fit of a fixed cost per window, its jobs and its CPU answer (the GPU run's
figures are in docs/benchmarks.md)."""

from __future__ import annotations

import pytest
import torch

from harness.bench import observed_blocks
from harness.bench.observed_blocks import Fit, fit_fixed_cost, jobs, summarize
from harness.cli import main


def test_the_fit_recovers_a_per_rep_time_and_a_fixed_cost_per_window() -> None:
    points = [(reps, 0.020 + 0.110 / reps) for reps in (2, 5, 11, 23)]
    fit = fit_fixed_cost(points)
    assert fit is not None
    assert fit.per_rep == pytest.approx(0.020) and fit.fixed == pytest.approx(0.110)


def test_no_fit_from_one_repetition_count() -> None:
    """Blocks of one repetition at every size (a large problem) say nothing about a fixed cost."""
    assert fit_fixed_cost([(1, 2.0), (1, 2.1), (1, 1.9)]) is None


def test_the_summary_sets_the_fitted_speedup_beside_the_loops() -> None:
    """A candidate with a 100 us fixed cost a window over a 20 us repetition, a reference with the same cost over
    40 us: the observed speedup climbs with the block, the fit gives 2.0, the loop says 2.0."""
    rows = [{"job": "x", "reps": n, "candidate_ms": 0.02 + 0.1 / n, "reference_ms": 0.04 + 0.1 / n,
             "loop_speedup": 2.0} for n in (3, 6, 12, 25)]
    s = summarize(rows)["x"]
    assert s["fitted_speedup"] == pytest.approx(2.0) and s["loop_speedup"] == 2.0
    assert Fit(**s["candidate"]).fixed == pytest.approx(0.1)
    assert all(r["reference_ms"] / r["candidate_ms"] < 2.0 for r in rows)  # what the windows read today


def test_the_jobs_are_the_add_its_reference_code_and_the_named_solutions() -> None:
    named = jobs(["LLM/03_silu_and_mul", "L1/16_rms_norm"])
    assert [n for n, _ in named] == ["add/triton", "add/reference-code", "LLM/03_silu_and_mul", "L1/16_rms_norm"]
    assert named[1][1].source.rstrip().endswith("ModelNew = Model")
    assert all("ModelNew" in job.source and job.backend == "triton" for _, job in named)
    assert named[2][1].problem.id == "LLM/03_silu_and_mul"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's answer")
def test_on_a_cpu_it_says_it_needs_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert observed_blocks.main() == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_bad_block_sizes_are_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "observed-blocks", "--blocks", "0.5,fast"]) == 2
    assert "--blocks: comma-separated milliseconds" in capsys.readouterr().out
    assert main(["bench", "observed-blocks", "--blocks", "0.5,-1"]) == 2
    assert "each > 0" in capsys.readouterr().out
