"""`harness bench eval --part confinement` on the CPU: both ways start real workers, and the confined ones are."""

from __future__ import annotations

import pytest

from eval.sandbox import sandbox_plan
from harness.bench import confinement

pytestmark = pytest.mark.slow


def test_workers_start_both_ways_and_the_report_says_how_they_were_confined(capsys):
    report = confinement.run(starts=1)
    assert report["device"] == "cpu" and report["starts"] == 1
    assert all(len(values) == 1 and values[0] > 0 for values in report["seconds"].values())
    assert report["cost_s"] == pytest.approx(report["median_s"]["confined"] - report["median_s"]["plain"], abs=2e-3)
    plan = sandbox_plan()
    if plan.filesystem:  # this machine confines workers: the confined start used it, with a process limit
        assert "-m" in report["sandbox"].split() and report["process_limit"] != ["none"]
    else:
        assert report["sandbox"] == "none" and report["process_limit"] == ["none"]
    assert "[1/1, " in capsys.readouterr().err
