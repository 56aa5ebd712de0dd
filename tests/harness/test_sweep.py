"""A `harness run -m` sweep ends with one table across its runs, and `harness report` on the sweep folder gives the
same table (and the page and leaderboard.md carry it), with the offline reference agent on CPU."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from eval.scoring import DEFAULT_PS
from harness.cli import main
from harness.sweep import print_sweep, record_job, sweep_runs
from tests.report_fixtures import config, write_run
from tests.run_fixtures import write_problem


def _table_rows(out: str) -> list[list[str]]:
    """The cells of the sweep table's rows (rich box drawing: cells between │)."""
    return [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if "│ abl-" in line]


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_a_sweep_ends_with_one_table_and_report_gives_it_again(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")  # one line per row
    no_solution = write_problem(tmp_path / "problems")  # the reference agent has no solution: it abstains (skipped)
    runs = tmp_path / "runs"
    args = [f"runs_dir={runs}", f"eval.cache_dir={tmp_path / 'eval_cache'}", "eval.trials=2", "prompt.hardware=null",
            "agent=reference", "problems.limit=1", "quiet=false", "name=abl", f"problems.spec=smoke,file:{no_solution}"]
    assert main(["run", "-m", *args]) == 0
    out = capsys.readouterr().out
    assert out.count("sweep ") == 1  # one table, after the last job
    after = out[out.index("sweep "):]
    rows = _table_rows(after)
    header = next(line for line in after.splitlines() if "problems.spec" in line and "correct" in line)
    fast = [f"fast_{p:g}" for p in DEFAULT_PS]
    assert [c.strip() for c in header.split("┃")[1:-1]] == ["run", "problems.spec", "correct", *fast, "attempts",
                                                            "failed"]  # fmt: skip
    assert len(rows) == 2
    smoke = next(r for r in rows if r[1] == "smoke")
    (other,) = [r for r in rows if r is not smoke]
    assert smoke[0] == "abl-problems.spec-smoke" and other[1].startswith("file")
    n = len(DEFAULT_PS)
    assert smoke[2:] == ["1.00", *["n/t"] * n, "1", "0"]  # correct on CPU: timings not measured
    assert other[2:] == ["0.00", *["0.00"] * n, "1", "1"]  # skipped (no solution to serve): nothing passed
    sweep_dir = runs / ".sweeps" / "abl"
    assert main(["report", str(sweep_dir)]) == 0
    again = capsys.readouterr().out
    assert _table_rows(again) == rows
    md = (sweep_dir / "report" / "leaderboard.md").read_text()
    assert "## Sweep" in md and "| abl-problems.spec-smoke | smoke | 1.00 | n/t |" in md
    html = (sweep_dir / "report" / "leaderboard.html").read_text()
    assert 'id="sweep-table"' in html and "2 run(s)" in html


def test_the_latest_sweep_under_a_name_is_the_one_found(tmp_path: Path) -> None:
    """A sweep run again under the same name with fewer jobs: its folder's notes of the earlier, larger sweep are
    not counted; run directories are kept relative to the sweep folder (the runs folder can move)."""
    sweep = tmp_path / "runs" / ".sweeps" / "abl"
    for job, value in enumerate(("1", "2", "3")):
        record_job(sweep, 100, job, tmp_path / "runs" / f"abl-turns-{value}", {"turns": value})
    for job, value in enumerate(("4", "5")):
        record_job(sweep, 200, job, tmp_path / "runs" / f"abl-turns-{value}", {"turns": value})
    found = sweep_runs(sweep)
    assert [(r.run_dir.resolve(), r.overrides) for r in found] == [
        ((tmp_path / "runs" / "abl-turns-4").resolve(), {"turns": "4"}),
        ((tmp_path / "runs" / "abl-turns-5").resolve(), {"turns": "5"})]
    assert sweep_runs(tmp_path / "runs" / "abl-turns-4") == []  # a run directory is not a sweep folder


def _recorded_sweep(tmp_path: Path) -> Path:
    """A sweep folder noting two recorded runs with long names (`search=serial,parallel`)."""
    sweep = tmp_path / "runs" / ".sweeps" / "ablation-of-search"
    for job, value in enumerate(("serial", "parallel")):
        run = tmp_path / "runs" / f"ablation-of-search-search-{value}"
        write_run(run, config(run.name, search=value), [("L1/13_softmax", 1, 1, "correct", 1.3, 0.4)])
        record_job(sweep, 100, job, run, {"search": value})
    return sweep


def test_the_sweep_table_in_a_log_keeps_every_cell_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log (not a terminal) at 80 or 120 columns: rich used to cut every column to a few characters; the table
    is printed at its own width, so each run's name and every header reads whole."""
    sweep = _recorded_sweep(tmp_path)
    for width in (80, 120):
        buf = io.StringIO()
        assert print_sweep(Console(file=buf, width=width), sweep)
        out = buf.getvalue()
        header = next(line for line in out.splitlines() if "┃ run" in line)
        assert [c.strip() for c in header.split("┃")[1:-1]] == [
            "run", "search", "correct", *(f"fast_{p:g}" for p in DEFAULT_PS), "attempts", "failed"]
        assert "│ ablation-of-search-search-parallel │ parallel │" in out, out


def test_report_on_a_sweep_points_to_its_leaderboard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = _recorded_sweep(tmp_path)
    assert main(["report", str(sweep), "--bootstrap", "10"]) == 0
    out = capsys.readouterr().out
    assert f"the sweep in full (each fast_p with its interval, cost, tokens): {sweep / 'report' / 'leaderboard.md'}" in out
    assert (sweep / "report" / "leaderboard.md").is_file()
    assert "│ ablation-of-search-search-serial   │ serial   │" in out, out
