"""`harness bench eval --part bound-survey` on the CPU: real evaluations of honest candidates several at once, each
counted and summed up (the summary itself: tests/harness/test_bench_pools.py)."""

from __future__ import annotations

import pytest

from harness.bench import bound_survey

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # runs sandboxed evaluator workers


def test_every_honest_candidate_is_judged_and_counted(capsys):
    report = bound_survey.run(n=3, at_once=2)
    summary = report["summary"]
    assert report["candidates"] == 3 and len(report["rows"]) == 3
    assert summary["correct"] == 3 and summary["rejected"] == [] and summary["retried_alone"] == 0
    bound_survey.print_table(report)
    out = capsys.readouterr().out
    assert "correct 3/3, retried alone 0" in out and "[3/3, " in out
