"""`harness run`'s start-up refusals, in real `harness run` processes: a second run of a name that another process is
still starting (or running) is refused at once, before the evaluator (torch) is imported, not after a start-up of its
own; a `runs_dir` that cannot be made is one line and exit 2, not Hydra's traceback (issue 60, item 7)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.harness.test_run_cli import _heavy_imports
from tests.paths import REPO
from tests.run_fixtures import agent_script

# The first run, held at the start of its evaluator (a minute on a loaded machine) until the test's gate file
# exists: the window in which a second run used to start an evaluator of its own before the lock refused it.
HELD_AT_EVALUATOR = """\
import os, sys, time
import harness.app as app
reached, gate, real = sys.argv[1], sys.argv[2], app.make_evaluator
def held(*args, **kwargs):
    open(reached, "w").close()
    while not os.path.exists(gate):
        time.sleep(0.05)
    return real(*args, **kwargs)
app.make_evaluator = held
from harness.cli import main
sys.exit(main(["run", *sys.argv[3:]]))
"""
START_BOUND_S = 600  # only catches a hang: a loaded 2-core machine takes well under this to reach the evaluator


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until `path` exists; fails if `proc` ends first or the bound passes."""
    deadline = time.monotonic() + START_BOUND_S
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first run never reached its evaluator"
        time.sleep(0.05)


def test_a_second_run_of_a_name_in_start_up_is_refused_before_the_evaluator(base, tmp_path) -> None:
    script, _ = agent_script(tmp_path)
    script.chmod(0o755)
    args = [*base, "agent=command", f"agent.command={script}", "name=busy", "quiet=false"]
    reached, gate = tmp_path / "reached", tmp_path / "gate"
    first = subprocess.Popen([sys.executable, "-c", HELD_AT_EVALUATOR, str(reached), str(gate), *args], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _wait_for(reached, first)
        code, heavy, err = _heavy_imports(*args)  # the same command again
        assert code == 2 and heavy == [], (code, heavy, err)
        assert err == (f"error: {tmp_path / 'runs' / 'busy'} is in use by another harness process; "
                       "wait for it or choose another name=\n")
        gate.touch()
        _, first_err = first.communicate(timeout=START_BOUND_S)
        assert first.returncode == 0, first_err  # the refused run left the first's directory and lock alone
        assert "evaluator worker(s)" in first_err
    finally:
        first.kill()
        first.wait()


def test_a_runs_dir_that_cannot_be_made_is_one_line_and_exit_2(tmp_path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder\n")
    for runs_dir in (a_file / "runs", a_file):
        code, heavy, err = _heavy_imports(f"runs_dir={runs_dir}", "name=x")
        assert code == 2 and heavy == [], (code, heavy, err)
        assert err == f"error: runs_dir={runs_dir} cannot be made: {a_file} is a file, not a folder\n"
