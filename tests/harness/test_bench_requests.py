"""`harness bench eval --part requests` on the CPU: a real worker holding the example candidate answers both kinds
of request, and the report's difference is the tamper read's share of a request."""

from __future__ import annotations

import pytest

from harness.bench import requests


def test_both_kinds_of_request_are_answered_and_the_read_is_their_difference(capsys):
    report = requests.run(rounds=2, per_round=3)
    assert report["device"] == "cpu" and report["requests"] == 6
    median = report["median_ms"]
    assert median["sync"] > 0 and median["integrity"] > 0
    assert report["snapshot_read_ms"] == pytest.approx(median["integrity"] - median["sync"], abs=2e-3)
    requests.print_table(report)
    out, err = capsys.readouterr()
    assert "tamper read (Integrity)" in out and "[2/2, " in err
