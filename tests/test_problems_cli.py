"""`harness problems list|show|lint` through the real dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cli import main
from problems.suite import load_suite

FIXTURE = Path(__file__).parent / "fixtures" / "kernelbench"
SOUND = FIXTURE / "KernelBench" / "level1" / "1_Sound_matmul.py"
ZERO = FIXTURE / "KernelBench" / "level2" / "2_Min_clamp_zero.py"


def test_list_json_covers_the_suite(capsys):
    assert main(["problems", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == [p.id for p in load_suite()]
    softmax = next(r for r in rows if r["id"] == "L1/13_softmax")
    assert softmax["level"] == "level1" and softmax["dtype"] == "float32" and softmax["bytes"] > 0
    assert softmax["solution"].endswith("problems/solutions/level1/13_softmax.py")


def test_list_table_by_level_and_kernelbench(capsys):
    assert main(["problems", "list", "--level", "llm"]) == 0
    out = capsys.readouterr().out
    assert "LLM/01_rmsnorm" in out and "L1/" not in out and "bfloat16" in out
    assert main(["problems", "list", "--kernelbench", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "KB/L1/1_Sound_matmul" in out and "KB/L3/2_Hangs" in out
    assert "KB/L1/7_Missing_get_inputs  LOAD ERROR" in out and "13 problems, 1 failed to load" in out
    assert main(["problems", "list", "--file", str(SOUND)]) == 0
    assert "1_Sound_matmul" in capsys.readouterr().out


def test_show(capsys):
    assert main(["problems", "show", "L2/16_add_rmsnorm"]) == 0
    out = capsys.readouterr().out
    assert "level2" in out and "class Model(nn.Module)" in out and "def get_extra_inputs" in out
    assert main(["problems", "show", "L1/13_softmax", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["id"] == "L1/13_softmax" and "torch.softmax" in info["source"]
    assert main(["problems", "show", "KB/L2/1_Sound_gemm_relu", "--from", f"kernelbench:{FIXTURE}"]) == 0
    assert "torch.relu(self.linear(x))" in capsys.readouterr().out


def test_show_unknown_id_is_a_clear_error(capsys):
    assert main(["problems", "show", "L1/99_missing"]) == 2
    assert "no suite problem with id 'L1/99_missing'" in capsys.readouterr().err
    assert main(["problems", "show", "KB/L1/7_Missing_get_inputs", "--from", f"kernelbench:{FIXTURE}"]) == 2
    assert "missing get_inputs" in capsys.readouterr().err


def test_lint_exit_codes_and_output(capsys):
    assert main(["problems", "lint", f"file:{SOUND}"]) == 0
    assert "PASS 1_Sound_matmul" in capsys.readouterr().out
    assert main(["problems", "lint", f"file:{SOUND},file:{ZERO}"]) == 1
    out = capsys.readouterr().out
    assert "FAIL 2_Min_clamp_zero" in out and "zero-output: an all-zero output passes" in out
    assert "2 problems linted, 1 failed: 2_Min_clamp_zero" in out


def test_lint_json_and_verbose(capsys):
    assert main(["problems", "lint", "L1/13_softmax", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["problem_id"] == "L1/13_softmax" and report["ok"] and report["scale"] == "small"
    assert {c["name"] for c in report["checks"]} >= {"memory", "metadata", "run", "zero-output", "constant-output"}
    assert main(["problems", "lint", "L1/13_softmax", "--verbose"]) == 0
    assert "PASS input-dependence" in capsys.readouterr().out


def test_lint_unknown_selection(capsys):
    assert main(["problems", "lint", "nothing/*"]) == 2
    assert "no problem matches" in capsys.readouterr().err
