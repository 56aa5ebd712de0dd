"""A runs directory on a real size-capped filesystem (a small tmpfs in a mount namespace) that fills up during a
`harness run`: one line naming the path, exit 2, no temporary file left; once there is room, a resume finishes
with nothing lost and nothing recorded twice."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.run_fixtures import base_overrides, write_problem

SAMPLES, TURNS = 2, 3


def _namespace() -> list[str]:
    unshare = shutil.which("unshare")
    prefix = [unshare, "-m"] if unshare and os.geteuid() == 0 else []
    if not prefix or subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                                    capture_output=True).returncode != 0:  # fmt: skip
        pytest.skip("mounting a tmpfs in a mount namespace is not permitted here (needs root and unshare)")
    return prefix


@pytest.mark.slow  # two harness runs in a subprocess, one on a full disk
def test_a_full_disk_stops_the_run_with_one_line_and_a_resume_finishes(tmp_path: Path) -> None:
    prefix = _namespace()
    runs, out = tmp_path / "runs", tmp_path / "out"
    runs.mkdir()
    (out / "copy").mkdir(parents=True)
    agent = tmp_path / "agent.sh"  # a long reply with no code: each attempt stores about 100 KB, prompts grow
    agent.write_text("#!/bin/sh\ncat > /dev/null\nhead -c 100000 /dev/zero | tr '\\0' 'x'\necho\n")
    problem = write_problem(tmp_path / "problems")
    args = [*base_overrides(tmp_path, problem, tmp_path / "eval_cache"), "agent=command", f"agent.command=sh {agent}",
            f"samples={SAMPLES}", f"turns={TURNS}", "max_concurrency=1", "name=full"]  # fmt: skip
    harness = " ".join(f"'{a}'" for a in [sys.executable, "-m", "harness.cli", "run", *args])
    script = (
        f"mount -t tmpfs -o size=600k tmpfs '{runs}' || exit 99\n"
        f"{harness} > '{out}/1.out' 2> '{out}/1.err'; echo $? > '{out}/1.rc'\n"
        f"find '{runs}' -name '*.tmp' > '{out}/tmp.txt'\n"
        f"cp -a '{runs}/full' '{out}/copy/first'\n"
        f"mount -o remount,size=64m '{runs}' || exit 98\n"
        f"{harness} > '{out}/2.out' 2> '{out}/2.err'; echo $? > '{out}/2.rc'\n"
        f"cp -a '{runs}/full' '{out}/copy/final'\n"
    )
    done = subprocess.run([*prefix, "sh", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))  # fmt: skip
    assert done.returncode == 0, done.stderr
    err = (out / "1.err").read_text()
    assert (out / "1.rc").read_text().strip() == "2", err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "No space left on device" in err or "database or disk is full" in err, err
    assert f"cannot write {runs}/full/" in err  # names the path
    assert (out / "tmp.txt").read_text() == ""  # no temporary file left
    first = _keys(out / "copy" / "first")
    assert 0 < len(first) < SAMPLES * TURNS  # the disk filled up part-way
    assert (out / "2.rc").read_text().strip() == "0", (out / "2.err").read_text()
    final = out / "copy" / "final"
    expected = {("add_relu", s, t) for s in range(1, SAMPLES + 1) for t in range(1, TURNS + 1)}
    assert set(_keys(final)) == expected and len(_keys(final)) == len(expected)  # none lost, none twice
    lines = [json.loads(x) for x in (final / "results.jsonl").read_text().splitlines()]
    assert sorted((x["problem_id"], x["sample"], x["turn"]) for x in lines) == sorted(expected)


def _keys(run: Path) -> list[tuple[str, int, int]]:
    conn = sqlite3.connect(f"file:{run / 'attempts.sqlite'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT problem_id, sample, turn FROM attempts").fetchall()
    finally:
        conn.close()
