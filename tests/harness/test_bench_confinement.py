"""`harness bench eval --part confinement` on the CPU: both ways start real workers, and the confined ones are."""

from __future__ import annotations

import pytest

from eval.process.sandbox import sandbox_plan
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
    for way, parts in report["parts_median_s"].items():  # where the worker's own seconds went, from its Hello
        assert set(parts) == {"imports", "device", "loop", "warm_up"}, (way, parts)
        assert parts["imports"] > 0 and sum(parts.values()) <= report["median_s"][way]


def test_throughput_runs_the_same_batch_with_workers_confined_and_plain(capsys):
    """The throughput arm really changes the workers: the plain pool's results say its workers could write outside
    their folder, the confined pool's that they could not (where this machine confines workers)."""
    report = confinement.throughput(copies=1, rounds=1)
    assert report["candidates"] == 6 and report["unexpected"] == {"confined": [{}], "plain": [{}]}, report
    assert all(rate > 0 for rates in report["candidates_per_min"].values() for rate in rates)
    assert report["filesystem_isolated"]["plain"] == ["False"], report["filesystem_isolated"]
    if sandbox_plan().filesystem:
        assert report["filesystem_isolated"]["confined"] == ["True"], report["filesystem_isolated"]
    assert "round 1/1 confined" in capsys.readouterr().err
