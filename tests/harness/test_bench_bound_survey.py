"""`harness bench eval --part bound-survey` on the CPU: real evaluations of honest candidates several at once, each
counted, and the summary's counts and spreads built from what the results say."""

from __future__ import annotations

import pytest

from harness.bench import bound_survey
from harness.bench.pools import bound_summary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # runs sandboxed evaluator workers


def test_every_honest_candidate_is_judged_and_counted(capsys):
    report = bound_survey.run(n=3, at_once=2)
    summary = report["summary"]
    assert report["candidates"] == 3 and len(report["rows"]) == 3
    assert summary["correct"] == 3 and summary["rejected"] == [] and summary["retried_alone"] == 0
    bound_survey.print_table(report)
    out = capsys.readouterr().out
    assert "correct 3/3, retried alone 0" in out and "[3/3, " in out


def test_the_summary_counts_doubts_and_spreads_the_bounds_figures():
    rows = [{"status": "correct", "reason": "", "retried_alone": i == 0, "second_look": 1.0 if i < 2 else None,
             "unexplained_us": float(i), "limit_us": 10.0, "paired_gap_median_us": float(10 * i),
             "reference_overhead_us": 1000.0 + i} for i in range(11)]
    rows.append({"status": "rejected", "reason": "work ran outside", "retried_alone": True})
    s = bound_summary(rows)
    assert (s["correct"], s["rejected"], s["retried_alone"], s["second_looks"]) == (11, ["work ran outside"], 2, 2)
    assert s["unexplained_over_limit"] == {"p10": 0.1, "p50": 0.5, "p90": 0.9, "max": 1.0}
    assert s["paired_gap_median_us"]["p50"] == 50.0 and s["reference_overhead_us"]["max"] == 1010.0
    assert bound_summary(rows[-1:])["unexplained_over_limit"] is None
