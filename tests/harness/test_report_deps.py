"""Dependencies run one way: `harness report` reads runs without loading the Hydra app or the evaluator.

Each check runs the real command in a fresh interpreter and looks at what it imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.paths import REPO as ROOT
from tests.report_fixtures import SMOKE, config, write_run

_PROBE = """
import json, sys
from harness.cli import main
code = main(["report", sys.argv[1], "--out", sys.argv[2]])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The modules `harness report RUN` imported, run in a fresh interpreter."""
    tmp = tmp_path_factory.mktemp("deps")
    run = write_run(tmp / "r", config("r", limit=1), [(SMOKE[0], 1, 1, "correct", 1.2, None)])
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(run), str(tmp / "out")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout.splitlines()[-1])
    assert data["code"] == 0 and (tmp / "out" / "leaderboard.html").exists()
    return set(data["modules"])


def test_report_does_not_load_hydra_or_the_run_app(imported: set[str]) -> None:
    assert not {m for m in imported if m == "hydra" or m.startswith("hydra.")}
    assert "harness.app" not in imported and "harness.loop" not in imported


def test_report_does_not_load_the_evaluator(imported: set[str]) -> None:
    assert "eval.evaluator" not in imported and "torch" not in imported
