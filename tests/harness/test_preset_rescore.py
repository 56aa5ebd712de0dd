"""Strict against KernelBench-compatible in one command, on CPU with real runs.

A run judged by the default rules is recorded (the `command` agent serves one fixed reply per
problem, offline), then `harness presets rescore` replays it under `eval=kernelbench` and pairs
the two. Four problems, four candidates: an honest kernel, one off by 3e-3, a PyTorch-only one
and one that is right only at the shape it was shown.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli import main
from tests.run_fixtures import GOOD, PROBLEM, fenced, rows

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # every test runs sandboxed evaluator workers

OFF = GOOD.replace("tl.maximum(a + b, 0.0)", "tl.maximum(a + b, 0.0) + 0.003")
TORCH_ONLY = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
"""
FORWARD = "        out = torch.empty_like(a)"
SHAPED = GOOD.replace(FORWARD, "        if a.numel() != 4096:\n            return torch.zeros_like(a)\n" + FORWARD)
HIDDEN = "\n\ndef get_extra_inputs():\n    return [[torch.randn(1000), torch.randn(1000)]]\n"
CASES = {"p_good": (PROBLEM, GOOD), "p_off": (PROBLEM, OFF), "p_torch": (PROBLEM, TORCH_ONLY),
         "p_shape": (PROBLEM + HIDDEN, SHAPED)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int, str]:
    """The strict run, its re-scored twin, the rescore's exit code and what it printed (stdout)."""
    tmp = tmp_path_factory.mktemp("presets")
    replies = tmp / "replies"
    replies.mkdir()
    specs = []
    for pid, (problem, candidate) in CASES.items():
        path = tmp / "problems" / f"{pid}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(problem)
        (replies / f"{pid}.md").write_text(fenced(candidate))
        specs.append(f"file:{path}")
    common = [f"runs_dir={tmp / 'runs'}", f"eval.cache_dir={tmp / 'cache'}", "prompt.hardware=null", "quiet=true"]
    strict = ["run", "agent=command", f"agent.command='cat {replies}/$HARNESS_PROBLEM_ID.md'", "name=strict",
              f"problems.spec='{','.join(specs)}'", "eval.device=cpu", *common]
    assert main(strict) == 0
    run = tmp / "runs" / "strict"
    with _stdout() as buf:
        code = main(["presets", "rescore", str(run), "--eval", "kernelbench"])
    return run, tmp / "runs" / "strict-kernelbench", code, buf.getvalue()


@contextlib.contextmanager
def _stdout() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield buf


def test_rescore_replays_the_run_under_kernelbench_and_pairs_them(runs) -> None:
    strict, kb, code, out = runs
    assert code == 0, out
    assert rows(strict) == [("p_good", 1, 1, "correct"), ("p_off", 1, 1, "incorrect"),
                            ("p_shape", 1, 1, "incorrect"), ("p_torch", 1, 1, "rejected")]
    assert [r[3] for r in rows(kb)] == ["correct"] * 4
    # the replay evaluated the same code under the preset, and every result says so
    results = [json.loads(line) for line in (kb / "results.jsonl").read_text().splitlines()]
    assert {r["result"]["preset"] for r in results} == {"kernelbench"}
    assert (kb / "code" / "p_off" / "1_1.py").read_text() == OFF
    # the report: disagreements first, each with its reason; the agreeing row last
    table = [line for line in out.splitlines() if line.startswith("| p_")]
    assert [line.split(" | ")[0] for line in table][-1] == "| p_good"
    reasons = {line.split(" | ")[0][2:]: line.split(" | ")[6] for line in table}
    assert reasons == {"p_off": "tolerance", "p_torch": "own kernel", "p_shape": "hidden shapes", "p_good": ""}
    assert "3 of 4 problems disagree" in out
    assert "| strict | default | 0.25 |" in out and "| strict-kernelbench | kernelbench | 1.00 |" in out
    assert "n/t" in out  # CPU: no speedups, said so rather than shown as 0
    paired = json.loads((kb / "paired" / "paired.json").read_text())
    assert paired["reasons"] == {"hidden shapes": 1, "own kernel": 1, "tolerance": 1}
    assert paired["preset_a"] == "default" and paired["preset_b"] == "kernelbench"
    off = next(r for r in paired["rows"] if r["problem_id"] == "p_off")
    assert "within the other preset's atol=0.01" in off["detail"] and off["attempt"] == [1, 1]


def test_compare_and_the_leaderboard_label_the_presets(runs, capsys, tmp_path) -> None:
    strict, kb, code, _ = runs
    assert code == 0
    assert main(["presets", "compare", str(strict), str(kb), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["agree"] for r in data["rows"]] == [False, False, False, True]
    assert data["correct_a"] == 0.25 and data["correct_b"] == 1.0
    # same run twice: nothing disagrees, and the report warns that the presets are the same
    assert main(["presets", "compare", str(strict), str(strict), "--out", str(tmp_path / "same")]) == 0
    same = capsys.readouterr().out
    assert "0 of 4 problems disagree" in same and "same preset (default)" in same
    assert (tmp_path / "same" / "paired.md").read_text() == same
    # the leaderboard names each run's preset and explains the difference
    assert main(["report", str(strict), str(kb), "--out", str(tmp_path / "lb")]) == 0
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    assert "| eval |" in md and "| kernelbench |" in md and "| default |" in md
    assert "`kernelbench` follows KernelBench's published rules" in md
    lb = json.loads((tmp_path / "lb" / "leaderboard.json").read_text())
    assert [r["preset"] for r in lb["runs"]] == ["default", "kernelbench"]


def test_rescore_of_a_missing_run_is_a_clear_error(tmp_path, capsys) -> None:
    assert main(["presets", "rescore", str(tmp_path / "nope")]) == 2
    assert "error:" in capsys.readouterr().err
