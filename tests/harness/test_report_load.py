"""Reading runs for a report: nothing in the run directory changes, a live run can be read while
it is written, unusable directories are refused clearly, and the problem selection is recovered."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from harness.report import build_report, write_report
from harness.report.load import load_run
from harness.store import Attempt, RunStore, StoreError
from tests.report_fixtures import SMOKE, config, result, write_run


def snapshot(directory: Path, *, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file under `directory` (but `skip`) with its content hash."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name not in skip
    }


def attempt(problem: str, sample: int) -> Attempt:
    return Attempt(
        problem_id=problem,
        sample=sample,
        turn=1,
        status="correct",
        prompt=[{"role": "user", "content": "x"}],
        reply="r",
        code="c",
        result=result("correct", 1.2, problem=problem),
    )


def test_a_finished_run_is_left_byte_for_byte_unchanged(tmp_path: Path) -> None:
    run = write_run(tmp_path / "done", config("done", limit=3), [(SMOKE[0], 1, 1, "correct", 1.2, 0.5)])
    assert not (run / "attempts.sqlite-wal").exists()  # closed cleanly: the immutable read path
    before = snapshot(run)
    write_report(build_report([run]), tmp_path / "out")
    assert snapshot(run) == before


def test_a_live_run_is_read_while_it_is_written(tmp_path: Path) -> None:
    run_dir = tmp_path / "live"
    cfg = config("live", limit=2, samples=40)
    with RunStore.open(run_dir, cfg) as store:  # holds the run's lock and an open WAL connection
        store.begin_session()
        store.record(attempt(SMOKE[0], 1))
        assert (run_dir / "attempts.sqlite-wal").exists()
        # a WAL reader marks its snapshot in the -shm index (how SQLite readers and writers coordinate);
        # the data (database, WAL, jsonl, code, config) must not change
        before = snapshot(run_dir, skip=("attempts.sqlite-shm",))
        first = load_run(run_dir)
        assert snapshot(run_dir, skip=("attempts.sqlite-shm",)) == before
        assert len(first.attempts) == 1 and first.in_progress

        seen: list[int] = []
        done = threading.Event()

        def writer() -> None:
            for s in range(1, 40):
                store.record(attempt(SMOKE[s % 2], s))
                time.sleep(0.02)  # a pace at which reads interleave with writes
            done.set()

        thread = threading.Thread(target=writer)
        thread.start()
        while not done.is_set():
            seen.append(len(load_run(run_dir).attempts))
        thread.join()
        assert len(set(seen)) >= 3  # reads happened between writes
        assert seen == sorted(seen)  # every read is a consistent snapshot; counts never go back
        assert len(load_run(run_dir).attempts) == 40
        m = build_report([run_dir]).metrics[0]
        assert m.in_progress and m.attempts == 40


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is not a run directory: no attempts.sqlite"):
        load_run(tmp_path)
    (tmp_path / "config.yaml").write_text("name: x\n")
    with pytest.raises(StoreError, match="has config.yaml but no database"):
        load_run(tmp_path)


def test_other_schema_version_and_garbage_are_refused_unchanged(tmp_path: Path) -> None:
    run = write_run(tmp_path / "old", config("old", limit=1), [(SMOKE[0], 1, 1, "correct", 1.2, None)])
    conn = sqlite3.connect(run / "attempts.sqlite")
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = snapshot(run)
    with pytest.raises(StoreError, match="schema version 99"):
        load_run(run)
    assert snapshot(run) == before
    conn = sqlite3.connect(run / "attempts.sqlite")
    with conn:
        conn.execute("PRAGMA user_version = 2")
        conn.execute('UPDATE attempts SET result = \'{"status": "no-such-status"}\'')
    conn.close()
    with pytest.raises(StoreError, match="attempt of problem 'L1/13_softmax', sample 1, turn 1 cannot be read"):
        load_run(run)
    (run / "attempts.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot be read"):
        load_run(run)


def test_unresolvable_selection_falls_back_to_attempted_problems(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "gone", config("gone", spec=f"file:{tmp_path / 'moved.py'}"), [("moved", 1, 1, "correct", 1.2, None)]
    )
    data = load_run(run)
    assert [(p.id, p.level) for p in data.problems] == [("moved", "unknown")]
    assert any("could not be resolved" in w and "moved.py" in w for w in data.warnings)


def test_attempted_problems_outside_the_selection_still_count(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "extra",
        config("extra", limit=1),
        [
            (SMOKE[0], 1, 1, "correct", 1.2, None),
            ("L9/renamed", 1, 1, "correct", 3.0, None),
        ],
    )
    data = load_run(run)
    assert [p.id for p in data.problems] == [SMOKE[0], "L9/renamed"]
    assert any("not in the selection" in w and "L9/renamed" in w for w in data.warnings)


def test_changed_problem_sources_are_noted(tmp_path: Path) -> None:
    run = write_run(tmp_path / "chg", config("chg", limit=1), [(SMOKE[0], 1, 1, "correct", 1.2, None)])
    conn = sqlite3.connect(run / "attempts.sqlite")
    with conn:
        conn.execute("UPDATE attempts SET problem_hash = 'old'")
    conn.close()
    assert any("changed since the run" in w for w in load_run(run).warnings)
