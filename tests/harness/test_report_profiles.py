"""The report's profiles (`eval.profile`, issue 57): each attempt's table in the transcript viewer, a roofline per run,
and runs without profiles (stored before them, or profiled off) reported as before."""

from __future__ import annotations

import re
from pathlib import Path

from eval.result import EvalResult, KernelShare, Status
from harness.cli import main
from harness.report import profiles
from harness.report.load import load_run
from harness.report.transcripts import read_script
from harness.store import Attempt, RunStore
from tests.eval.test_profile import a_profile
from tests.report_fixtures import H100, SMOKE, config, write_run

EVIL = '<img src=x onerror="alert(1)">kernel'


def profiled_run(tmp_path: Path, name: str = "profiled") -> Path:
    """Two correct attempts of one problem, each with a profile (one of them naming a kernel like markup)."""
    run_dir = tmp_path / name
    with RunStore.open(run_dir, config(name, turns=2)) as store:
        store.begin_session()
        for turn in (1, 2):
            profile = a_profile("full")
            if turn == 2:
                profile.candidate.kernels[0].name = EVIL
            result = EvalResult(status=Status.CORRECT, reason="correct", problem_id=SMOKE[0], speedup=1.2 * turn,
                                timing_meaningful=True, device=H100, trials=5, profile=profile,
                                kernels=KernelShare(own_kernels_launched=["add_relu_kernel"], own_time_fraction=0.86))
            store.record(Attempt(problem_id=SMOKE[0], sample=1, turn=turn, status="correct",
                                 prompt=[{"role": "user", "content": "p"}], reply="r", code="c", result=result,
                                 feedback="Status: correct", speedup=result.speedup, input_tokens=1, output_tokens=1,
                                 cost_usd=0.0, latency_s=0.1, eval_s=1.0, model="m"))
        store.end_session("finished")
    return run_dir


def test_the_viewer_gets_each_kernel_as_a_row() -> None:
    view = profiles.viewer(a_profile("full"))
    assert view["columns"][:3] == ["side", "kernel", "share"]
    sides = [row[0] for row in view["rows"]]
    assert sides == ["own", "library", "reference", "reference"]
    own = view["rows"][0]
    assert own[1] == "add_relu_kernel" and own[2] == "85.9%" and own[4] == "83" and own[-1].startswith("long_scoreboard")
    assert "full" in view["summary"] and "ridge at 12 FLOP/byte" in view["summary"]
    assert profiles.viewer(None) is None


def test_the_page_shows_a_roofline_and_each_attempts_profile(tmp_path: Path) -> None:
    run = profiled_run(tmp_path)
    assert main(["report", str(run), "--bootstrap", "50"]) == 0
    page = (run / "report" / "leaderboard.html").read_text()
    assert '<section id="roofline"><h2>Roofline</h2>' in page
    svg = re.search(r'<figure id="plot-roofline">.*?</figure>', page, re.S).group(0)
    assert svg.count("<circle") == 2 * 2  # two attempts: own add_relu, reference add (the fill and relu count 0 FLOPs)
    assert "ridge at 12 FLOP/byte" in svg and "<img" not in svg and "&lt;img" in svg
    files = sorted((run / "report" / "transcripts").rglob("*.js"))
    _, _, data = read_script(files[0].read_text())
    shown = [a["profile"] for a in data["attempts"]]
    assert [p["rows"][0][1] for p in shown] == ["add_relu_kernel", EVIL]  # set as text by the viewer, never markup
    assert "function profileParts" in page and "textContent" in page


def test_runs_without_profiles_get_no_roofline(tmp_path: Path) -> None:
    run = write_run(tmp_path / "plain", config("plain"), [(SMOKE[0], 1, 1, "correct", 1.5, 0.4)])
    assert main(["report", str(run), "--bootstrap", "50"]) == 0
    page = (run / "report" / "leaderboard.html").read_text()
    assert 'id="roofline"' not in page
    _, _, data = read_script(next((run / "report" / "transcripts").rglob("*.js")).read_text())
    assert data["attempts"][0]["profile"] is None
    assert not profiles.has_profiles([load_run(run)])
