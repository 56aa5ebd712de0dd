"""`harness bench store`: its progress on stderr, a counter line per problem synthesized and per timed step, so a
run of minutes shows where it is (the figures themselves are the benchmark's, not asserted here)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from harness.bench import store_bench
from problems import select_problems


def test_progress_counts_each_problem_then_each_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problems = select_problems("all")[:3]  # the counter, not the suite's size, is under test
    measured: list[list[str]] = []

    def measure(argv: list[str], log: Path) -> dict:
        measured.append(argv)
        return {"rc": 0, "wall_s": 1.5, "peak_mb": 42.0}

    monkeypatch.setattr(store_bench, "select_problems", lambda spec: problems)
    monkeypatch.setattr(store_bench, "COMPARED", 2)
    monkeypatch.setattr(store_bench, "measure", measure)
    progress = io.StringIO()
    report = store_bench.run_store_bench(1, tmp_path, browser=False, progress=progress)

    lines = progress.getvalue().splitlines()
    synthesized = [re.fullmatch(r"\[(\d)/3, \d+s\] synthesized (\S+): (\d+) attempts", line) for line in lines[:3]]
    assert [(m.group(1), m.group(2)) for m in synthesized] == [(str(i), p.id) for i, p in enumerate(problems, 1)]
    assert sum(int(m.group(3)) for m in synthesized) == report["attempts"]
    steps = [re.fullmatch(r"\[(\d)/5, \d+s\] (.+)", line) for line in lines[3:]]
    assert [m.group(1) for m in steps] == list("12345")
    texts = [m.group(2) for m in steps]
    assert texts[:2] == ["resume: 1.5s, 42 MB, rc 0", "report: 1.5s, 42 MB, rc 0"]
    runs = [re.fullmatch(r"comparison run (\d)/2 synthesized: (\d+) attempts", text) for text in texts[2:4]]
    assert [m.group(1) for m in runs] == ["1", "2"]
    assert sum(int(m.group(2)) for m in runs) == report["comparison"]["attempts"]
    assert texts[4] == "comparison report: 1.5s, 42 MB, rc 0"
    assert len(measured) == 3  # resume, report, the comparison's report: one line each


def test_no_progress_stream_prints_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(store_bench, "select_problems", lambda spec: select_problems("all")[:2])
    _, _, n = store_bench.synthesize(tmp_path, 1)
    assert n > 0 and capsys.readouterr() == ("", "")
