"""`harness problems list|show|lint` through the real dispatcher."""

from __future__ import annotations

import json

from harness.cli import main
from problems.suite import load_suite
from tests.paths import KERNELBENCH as FIXTURE

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
    assert "[1/2, " in out and "[2/2, " in out  # progress as each problem finishes
    assert "2 problems linted, 1 failed: 2_Min_clamp_zero" in out


def test_lint_json_and_verbose(capsys):
    assert main(["problems", "lint", "L1/13_softmax", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert "[1/1, " in captured.err and "L1/13_softmax" in captured.err  # progress on stderr, stdout stays JSON
    assert report["problem_id"] == "L1/13_softmax" and report["ok"] and report["scale"] == "small"
    assert {c["name"] for c in report["checks"]} >= {"memory", "metadata", "run", "zero-output", "constant-output"}
    assert main(["problems", "lint", "L1/13_softmax", "--verbose"]) == 0
    assert "PASS input-dependence" in capsys.readouterr().out


def test_lint_unknown_selection(capsys):
    assert main(["problems", "lint", "nothing/*"]) == 2
    assert "no problem matches" in capsys.readouterr().err


def test_an_unknown_selection_names_the_valid_specs_not_a_docstring(capsys):
    assert main(["problems", "list", "L9/*"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no problem matches 'L9/*'; a selection is smoke, all, level1" in err
    assert "Turning a selection string" not in err


def test_the_solution_column_is_not_called_sol(capsys):
    """SOL means the speed-of-light fraction everywhere else; this column says whether a solution exists."""
    assert main(["problems", "list", "L1/13_softmax,L1/01_square_matmul"]) == 0
    header, softmax, matmul, _ = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "LEVEL", "DTYPE", "FLOPS", "BYTES", "SOLUTION", "TAGS"]
    assert softmax.split()[-2] == "yes" and matmul.split()[-2] == "-"


def test_a_binary_problem_file_is_a_one_line_error_everywhere(tmp_path, capsys):
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    nul = tmp_path / "nul.py"
    nul.write_bytes(b"import torch\x00\n")  # valid UTF-8, but no Python source
    for args in (["list", "--file", str(binary)], ["lint", f"file:{binary}"], ["show", str(binary)]):
        assert main(["problems", *args]) == 2
        err = capsys.readouterr().err
        assert err == f"harness problems {args[0]}: {binary}: not a text file (not UTF-8: byte 0x89 at offset 0)\n"
    assert main(["problems", "list", "--file", str(nul)]) == 2
    assert f"{nul}: not Python source" in capsys.readouterr().err
