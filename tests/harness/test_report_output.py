"""`harness report` outputs: the four files, their numbers, the comparison of unlike runs, a page
that is self-contained and escapes untrusted text, and a report of a real `harness run` on CPU."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from harness.cli import main
from harness.report import build_report, write_report
from harness.report.transcripts import read_script
from tests.paths import REPO
from tests.report_fixtures import SMOKE, config, write_run
from tests.run_fixtures import BROKEN, GOOD, WRONG, base_overrides, fenced, write_problem

EVIL = 'Done.</script><script>window.__pwned = 1</script><img src=x onerror="alert(1)"> & more'
EVIL_ID = 'L9/<b onmouseover="alert(1)">x'


def ties(tmp_path: Path, name: str = "ties", **cfg: object) -> Path:
    """smoke: speedups exactly 1.0, 1.5, 2.0, one incorrect, two unattempted (see test_report_metrics)."""
    return write_run(
        tmp_path / name,
        config(name, **cfg),
        [
            (SMOKE[0], 1, 1, "correct", 1.0, 0.2),
            (SMOKE[1], 1, 1, "correct", 1.5, 0.4),
            (SMOKE[2], 1, 1, "correct", 2.0, 0.9),
            (SMOKE[3], 1, 1, "incorrect", None, None),
        ],
    )


def md_rows(md: str) -> list[list[str]]:
    """Cells of the first Markdown table."""
    lines = md.split("\n\n")[2].splitlines()
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines if not line.startswith("|---")]


def embedded(html: str, element_id: str) -> object:
    m = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html, re.S)
    assert m, element_id
    return json.loads(m[1])


def transcripts(out: Path) -> dict[str, dict]:
    """The transcript files beside a written page, by their path as the page's index names them."""
    got = {}
    for path in sorted((out / "transcripts").rglob("*.js")):
        run, problem, data = read_script(path.read_text())
        assert path.relative_to(out).as_posix() == f"transcripts/{run}/{problem}.js"
        got[path.relative_to(out).as_posix()] = data
    return got


def test_one_run_writes_four_files_into_its_report_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = ties(tmp_path)
    assert main(["report", str(run), "--bootstrap", "300", "--seed", "2"]) == 0
    out = run / "report"
    assert sorted(p.name for p in out.iterdir()) == [
        "leaderboard.csv",
        "leaderboard.html",
        "leaderboard.json",
        "leaderboard.md",
        "transcripts",
    ]
    assert len(transcripts(out)) == 4  # one file per attempted problem
    assert "ties: 6 problems, correct 0.50, fast_1 0.33" in capsys.readouterr().out

    data = json.loads((out / "leaderboard.json").read_text())
    row = data["runs"][0]
    assert row["fast_p"]["1"] == pytest.approx(2 / 6) and row["fast_p"]["1.5"] == pytest.approx(1 / 6)
    assert data["bootstrap"] == {"level": 0.95, "n_boot": 300, "seed": 2, "over": "problems"}
    assert row["per_problem"][SMOKE[4]]["status"] == "missing" and row["tokens"] == 480
    lo, hi = row["fast_p_ci"]["1"]
    assert lo <= 2 / 6 <= hi

    records = list(csv.DictReader((out / "leaderboard.csv").open()))
    assert len(records) == 1 and records[0]["run"] == "ties" and records[0]["timings_measured"] == "True"
    assert float(records[0]["fast_1"]) == pytest.approx(2 / 6)
    assert (float(records[0]["fast_1_lo"]), float(records[0]["fast_1_hi"])) == pytest.approx((lo, hi))

    md = (out / "leaderboard.md").read_text()
    header, cells = md_rows(md)
    got = dict(zip(header, cells))
    assert got["fast_1"] == f"0.33 [{lo:.2f}, {hi:.2f}]" and got["fast_2"] == "0.00 [0.00, 0.00]"
    assert got["geomean"] == "1.44×" and got["compile"] == "0.67" and got["cost"] == "$0.04"
    assert "setting" not in header  # a single run is comparable with itself
    assert "## By level" in md and "| ties | level1 | 2 | 1.00 |" in md


def test_cpu_runs_say_timings_were_not_measured(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "cpu",
        config("cpu", limit=2),
        [
            (SMOKE[0], 1, 1, "correct", None, None),
            (SMOKE[1], 1, 1, "incorrect", None, None),
        ],
        timed=False,
        device="cpu (Triton interpreter)",
    )
    report = build_report([run])
    header, cells = md_rows(report.markdown)
    got = dict(zip(header, cells))
    assert [got[f"fast_{p}"] for p in ("0", "0.5", "0.8", "1", "1.5", "2")] == ["n/t"] * 6
    assert got["correct"].startswith("0.50") and "timings not measured" in report.markdown
    assert "it says nothing about how fast the kernels are" in report.markdown
    record = next(csv.DictReader(report.csv.splitlines()))
    assert record["timing_available"] == "False" and float(record["fast_1"]) == 0.0  # raw data stays honest
    assert "timings not measured (CPU): no speedups to plot" in report.html
    # a GPU run that solved nothing scores a real zero, shown as a number
    gpu = write_run(tmp_path / "gpu", config("gpu", limit=2), [(SMOKE[0], 1, 1, "incorrect", None, None)])
    header, cells = md_rows(build_report([gpu]).markdown)
    assert dict(zip(header, cells))["fast_1"] == "0.00 [0.00, 0.00]"


def test_runs_on_other_devices_or_settings_are_flagged(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = ties(tmp_path, "h100")
    b = write_run(
        tmp_path / "a100",
        config("a100", eval_overrides={"trials": 10}),
        [(SMOKE[0], 1, 1, "correct", 1.3, None)],
        device="NVIDIA A100-SXM4-80GB",
    )
    c = ties(tmp_path, "h100-again", eval_overrides={"cache_dir": "/elsewhere", "parallel_compiles": 3})
    assert main(["report", str(a), str(b), str(c), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "eval.trials: A = 5; B = 10" in out and "device: A = NVIDIA H100" in out
    md = (tmp_path / "cmp" / "leaderboard.md").read_text()
    header, *rows = md_rows(md)
    settings = {r[0]: r[header.index("setting")] for r in rows}
    assert settings == {"h100": "A", "a100": "B", "h100-again": "A"}  # cache_dir / parallel_compiles don't matter
    assert "compare numbers only within one setting" in md and "eval.trials: A = 5; B = 10" in md
    assert "eval.cache_dir" not in md
    data = json.loads((tmp_path / "cmp" / "leaderboard.json").read_text())
    assert data["comparison"]["comparable"] is False and data["runs"][1]["setting"] == "B"


def test_runs_with_the_same_name_are_told_apart(tmp_path: Path) -> None:
    a = ties(tmp_path / "one", "same")
    b = ties(tmp_path / "two", "same")
    report = build_report([a, b])
    assert [m.name for m in report.metrics] == ["one/same", "two/same"]
    assert report.comparison.comparable


def test_command_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = ties(tmp_path)
    assert main(["report", str(run), str(ties(tmp_path, "other"))]) == 2
    assert "several runs need --out" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert main(["report", str(run), str(run), "--out", str(tmp_path / "x")]) == 2
    assert "given twice" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (run / "report").exists()


def test_page_is_self_contained_and_escapes_untrusted_text(tmp_path: Path) -> None:
    cfg = config('run<i onclick="x">', limit=1)
    run = write_run(
        tmp_path / "evil",
        cfg,
        [(SMOKE[0], 1, 1, "correct", 1.2, None), (EVIL_ID, 1, 1, "incorrect", None, None)],
        reply=EVIL,
    )
    report = build_report([run])
    html = report.html
    write_report(report, tmp_path / "out")
    # offline: the markup loads nothing from anywhere (the SVG namespace is a name, not a fetch)
    markup = re.sub(r'<script type="application/json".*?</script>', "", html, flags=re.S)
    assert "<link" not in markup and " src=" not in markup and "url(" not in markup
    assert set(re.findall(r"https?://[^\s\"'<>]+", markup)) == {"http://www.w3.org/2000/svg"}
    # only the page's own script may run, pinned by its hash
    scripts = re.findall(r"<script(?: [^>]*)?>", html)
    assert scripts == [
        '<script type="application/json" id="leaderboard-data">',
        '<script type="application/json" id="transcript-data">',
        "<script>",
    ]
    code = html.rsplit("<script>", 1)[1].split("</script>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in html and "default-src 'none'" in html
    # untrusted text never becomes markup, but survives intact as data
    for raw in ("<script>window.__pwned", "<img src=x", '<b onmouseover="alert(1)">', '<i onclick="x">'):
        assert raw not in html
    assert "&lt;b onmouseover=&quot;alert(1)&quot;&gt;x" in html  # the heatmap's row label
    tx = embedded(html, "transcript-data")
    assert tx["runs"][0]["name"] == 'run<i onclick="x">'
    assert [p["id"] for p in tx["runs"][0]["problems"]] == [SMOKE[0], EVIL_ID]
    files = transcripts(tmp_path / "out")
    assert sorted(files) == sorted(p["file"] for p in tx["runs"][0]["problems"])
    assert all(EVIL in data["strings"] for data in files.values())
    for path in (tmp_path / "out" / "transcripts").rglob("*.js"):  # a transcript file is base64 in one string
        assert re.fullmatch(r'khTranscript\(0,\d+,"[A-Za-z0-9+/=]*"\);\n', path.read_text())
    assert embedded(html, "leaderboard-data")["runs"][0]["name"] == 'run<i onclick="x">'


def test_transcript_texts_are_stored_once(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "many",
        config("many", turns=3),
        [(pid, 1, t, "incorrect", None, None) for pid in SMOKE for t in (1, 2, 3)],
    )
    write_report(build_report([run]), tmp_path / "out")
    files = transcripts(tmp_path / "out")
    assert len(files) == len(SMOKE)
    for data in files.values():
        assert data["strings"].count("You write Triton kernels.") == 1  # the shared system prompt
    attempts = [(data, a) for data in files.values() for a in data["attempts"]]
    assert len(attempts) == 18 and all(
        data["strings"][a["prompt"][0][1]] == "You write Triton kernels." for data, a in attempts
    )


@pytest.mark.slow
def test_report_of_a_real_run_on_cpu(tmp_path: Path) -> None:
    """`harness run` (replaying recorded replies; the real evaluator judges them), then `harness report`."""
    replies = tmp_path / "replies.jsonl"
    script = {1: [fenced(BROKEN), fenced(WRONG), fenced(GOOD)], 2: [EVIL, fenced(GOOD), fenced(GOOD)]}
    replies.write_text(
        "".join(
            json.dumps({"problem_id": "add_relu", "sample": s, "turn": t + 1, "reply": r}) + "\n"
            for s, rs in script.items()
            for t, r in enumerate(rs)
        )
    )
    base = base_overrides(tmp_path, write_problem(tmp_path / "problems"), tmp_path / "eval_cache")
    code = main(["run", *base, "agent=replay", f"agent.path={replies}", "turns=3", "samples=2", "name=real"])
    assert code == 0
    run = tmp_path / "runs" / "real"
    assert main(["report", str(run)]) == 0

    data = json.loads((run / "report" / "leaderboard.json").read_text())
    m = data["runs"][0]
    assert (m["n_problems"], m["samples"], m["turns"], m["attempts"]) == (1, 2, 3, 6)
    assert m["statuses"] == {"correct": 3, "compile_error": 1, "format_error": 1, "incorrect": 1}
    assert m["device"] == "cpu (Triton interpreter)" and m["timing_available"] is False
    assert [(t["turn"], t["correct_rate"]) for t in m["by_turn"]] == [(1, 0.0), (2, 1.0), (3, 1.0)]
    assert [(a["k"], a["pass_at_k"]) for a in m["at_k"]] == [(1, 1.0), (2, 1.0)]
    assert m["compile_rate"] == 1.0 and m["fast_p"]["0"] == 0.0
    html = (run / "report" / "leaderboard.html").read_text()
    tx = embedded(html, "transcript-data")
    data = transcripts(run / "report")[tx["runs"][0]["problems"][0]["file"]]
    turns = [(a["sample"], a["turn"], a["status"]) for a in data["attempts"]]
    assert sorted(turns) == [
        (1, 1, "compile_error"),
        (1, 2, "incorrect"),
        (1, 3, "correct"),
        (2, 1, "format_error"),
        (2, 2, "correct"),
        (2, 3, "correct"),
    ]
    assert EVIL in data["strings"] and GOOD in data["strings"] and "<script>window" not in html


def test_the_readmes_report_folders_are_ignored_by_git() -> None:
    """`harness report ... --out reports/abc` (the README's example) and runs/ write nothing `git status` shows."""
    for path in ("reports/abc/leaderboard.md", "runs/NAME/report/leaderboard.html"):
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO)
        assert done.returncode == 0, f"{path} is not ignored by .gitignore"
