"""The report's fast_p by backend (issue 56): runs pooled by the language they were written in, every (run,
problem) counted once."""

from __future__ import annotations

from pathlib import Path

from harness.report import build_report
from harness.report.tables import backend_table
from tests.report_fixtures import SMOKE, config, write_run


def _run(tmp_path: Path, name: str, backend: str, rows: list) -> Path:
    cfg = config(name)
    cfg["backend"] = backend
    return write_run(tmp_path / name, cfg, rows)


def test_fast_p_by_backend_pools_the_runs_of_each_language(tmp_path: Path) -> None:
    triton_a = _run(tmp_path, "triton-a", "triton", [(SMOKE[0], 1, 1, "correct", 1.5, 0.4),
                                                      (SMOKE[1], 1, 1, "correct", 0.9, 0.4)])
    triton_b = _run(tmp_path, "triton-b", "triton", [(SMOKE[0], 1, 1, "correct", 2.5, 0.4)])
    helion = _run(tmp_path, "helion-a", "helion", [(SMOKE[2], 1, 1, "correct", 1.2, 0.9),
                                                    (SMOKE[3], 1, 1, "rejected", None, None)])
    report = build_report([triton_a, triton_b, helion], n_boot=50, seed=1)
    headers, rows = backend_table(report.metrics)
    got = {row[0]: dict(zip(headers, row)) for row in rows}
    assert sorted(got) == ["helion", "triton"]
    # 6 smoke problems a run: triton has 12 (run, problem) pairs, 2 of them above a speedup of 1; helion 6, 1 of them
    assert got["triton"]["runs"] == "2" and got["triton"]["problems"] == "12"
    assert got["triton"]["fast_1"] == f"{2 / 12:.2f}" and got["triton"]["correct"] == f"{3 / 12:.2f}"
    assert got["helion"]["fast_1"] == f"{1 / 6:.2f}" and got["helion"]["fast_1.5"] == "0.00"
    assert "## By backend" in report.markdown and "<h2>By backend</h2>" in report.html
