"""`harness bench eval --part stopwatch` on the CPU: real timed exchanges with a child, quiet and beside busy
threads, each kind counted and summarised."""

from __future__ import annotations

from harness.bench import stopwatch


def test_both_kinds_of_exchange_are_timed_and_summarised(capsys):
    report = stopwatch.run(rounds=2, per_round=5, busy=1)
    assert report["exchanges"] == 10 and report["busy_threads"] == 1
    for kind in ("quiet", "busy"):
        w = report["wall_ms"][kind]
        assert 0 < w["median_ms"] <= w["p99_ms"] <= w["max_ms"]
    stopwatch.print_table(report)
    out, err = capsys.readouterr()
    assert "| 1 busy Python threads |" in out and "[2/2, " in err
