"""`harness bench eval --part bytecode`: the priming, worker starts each way, and the batch both ways where the
install lacks bytecode (on a CPU: sandboxed workers under the Triton interpreter)."""

from __future__ import annotations

import pytest

from eval import installed_without_bytecode
from harness.bench import bytecode


@pytest.mark.slow  # a trusted child imports torch; four workers start
def test_starts_alternate_each_way_and_the_report_says_what_was_primed(capsys) -> None:
    report = bytecode.run(starts=2, copies=1, rounds=1)
    assert report["modules"] > 500  # torch's and the worker's imports
    assert report["installed_without_bytecode"] is installed_without_bytecode()
    assert {w: len(s) for w, s in report["seconds"].items()} == {"primed": 2, "as installed": 2}
    assert all(s > 0 for seconds in report["seconds"].values() for s in seconds)
    assert report["ratio"] == round(report["median_s"]["primed"] / report["median_s"]["as installed"], 3)
    if report["installed_without_bytecode"]:  # then the batch ran both ways
        rows = report["throughput"]["rows"]
        assert all(len(r) == 1 and r[0]["unexpected"] == {} for r in rows.values()), rows
    else:
        assert "throughput" not in report
    bytecode.print_table(report)
    assert "starts each way" in capsys.readouterr().out
