"""`harness bench eval --part draws` on the CPU: both seedings draw the same values, and each, and the whole draw,
is timed from both stack depths (the figures themselves are the bench's to print, not a test's to bound)."""

from __future__ import annotations

from harness.bench import draws


def test_the_draws_bench_compares_two_seedings_that_draw_the_same_values(capsys) -> None:
    report = draws.run(rounds=2, per_round=3, n=64)
    assert report["same_values"] is True and report["device"] == "cpu" and report["elements"] == 64
    assert set(report["host_us"]) == {"harness", "torch.manual_seed", "whole draw"}
    for by_depth in report["host_us"].values():
        assert set(by_depth) == {"shallow", "deep"} and all(us > 0 for us in by_depth.values())
    draws.print_table(report)
    assert "| seeding: torch.manual_seed |" in capsys.readouterr().out
