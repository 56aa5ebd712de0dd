"""`harness bench eval --part ref-share`: the 24-candidate batch both ways, at each count of workers per GPU, on a
CPU (the Triton interpreter; the pool's real workers)."""

from __future__ import annotations

import argparse

import pytest

from harness.bench import ref_share
from harness.commands import bench_cmd


@pytest.mark.slow  # four pools of sandboxed workers
def test_each_worker_count_runs_both_ways_with_its_own_ratio() -> None:
    report = ref_share.run(n=2, workers=(1, 2))
    rows = report["rows"]
    assert [(r["reference_timing"], r["workers"]) for r in rows] == [("shared", 1), ("own", 1), ("shared", 2),
                                                                      ("own", 2)]
    assert all(r["unexpected"] == {} and r["candidates"] == 2 for r in rows), rows
    assert set(report["on_over_off"]) == {"1", "2"}
    assert report["on_over_off"]["2"] == round(rows[2]["candidates_per_min"] / rows[3]["candidates_per_min"], 2)


def test_the_cli_refuses_a_bad_worker_count(capsys) -> None:
    parser = argparse.ArgumentParser()
    bench_cmd.add_arguments(parser)
    for bad in ("4,x", "-1", ""):
        args = parser.parse_args(["eval", "--part", "ref-share", "--workers", bad])
        assert bench_cmd.run(args) == 2
        assert "--workers: counts of workers per GPU" in capsys.readouterr().out
