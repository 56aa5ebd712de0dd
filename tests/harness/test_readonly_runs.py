"""A runs directory on a read-only filesystem: `run` (new or resumed), `report` and `export` end with one line and
exit 2, `report` and `export` with a hint to write elsewhere; no traceback. The filesystem is really read-only (a
read-only bind mount in a mount namespace), so the check holds for root too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.report_fixtures import config, write_run



def _ro(folder: Path, *commands: list[str]) -> list[subprocess.CompletedProcess]:
    """Run each `harness` command with `folder` mounted read-only."""
    unshare = shutil.which("unshare")
    prefix = [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-U", "-r", "-m"]
    if unshare is None or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("mount namespaces are not permitted here")
    results = []
    for command in commands:
        harness = " ".join(f"'{a}'" for a in [sys.executable, "-m", "harness.cli", *command])
        script = f"mount --bind -o ro '{folder}' '{folder}' && exec {harness}"
        results.append(subprocess.run([*prefix, "sh", "-c", script], cwd=REPO, capture_output=True, text=True,
                                      env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=600))
    return results


def test_read_only_runs_directory_gives_one_line_and_exit_2(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run = write_run(runs / "done", config("done"), [("L1/13_softmax", 1, 1, "correct", 1.5, 0.5)])
    report, export, resume, new = _ro(
        runs, ["report", str(run)], ["export", str(run)],
        ["run", f"runs_dir={runs}", "name=done", "problems.spec=L1/13_softmax"],
        ["run", f"runs_dir={runs}", "name=fresh", "problems.spec=L1/13_softmax"])
    assert report.returncode == 2 and "Read-only file system; write it elsewhere with --out DIR" in report.stderr
    assert export.returncode == 2 and "Read-only file system; write it elsewhere with --out FILE" in export.stderr
    for done in (resume, new):
        assert done.returncode == 2 and "cannot write the run directory" in done.stderr, done.stderr
    for done in (report, export, resume, new):
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
