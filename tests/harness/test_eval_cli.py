"""`harness eval`: a readable report or one JSON object; exit 0 whatever the verdict."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.corpus.hostile import GOOD, HOSTILE, PROBLEM


def _files(tmp_path, candidate: str):
    problem = tmp_path / "problem.py"
    cand = tmp_path / "candidate.py"
    problem.write_text(PROBLEM)
    cand.write_text(candidate)
    return str(problem), str(cand)


@pytest.mark.slow  # evaluates candidates in sandboxed workers
def test_json_verdicts_and_exit_codes(tmp_path, capsys):
    problem, cand = _files(tmp_path, GOOD)
    assert main(["eval", "--problem", problem, "--candidate", cand, "--device", "cpu", "--no-cache", "--json"]) == 0
    good = json.loads(capsys.readouterr().out)
    assert good["status"] == "correct" and good["speedup"] is None and good["reason"]
    assert good["kernels"]["own_kernels_launched"] == ["add_relu_kernel"]
    (tmp_path / "candidate.py").write_text(HOSTILE["wrong_values"][0])
    assert main(["eval", "--problem", problem, "--candidate", cand, "--device", "cpu", "--no-cache", "--json"]) == 0
    bad = json.loads(capsys.readouterr().out)
    assert bad["status"] == "incorrect" and bad["mismatch"]["max_abs_err"] > 0


@pytest.mark.slow
def test_readable_report(tmp_path, capsys):
    problem, cand = _files(tmp_path, GOOD)
    assert main(["eval", "--problem", problem, "--candidate", cand, "--device", "cpu", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "Status: correct" in out and "Own kernels launched: add_relu_kernel" in out


def test_harness_failure_is_nonzero(tmp_path, capsys):
    _, cand = _files(tmp_path, GOOD)
    assert main(["eval", "--problem", str(tmp_path / "missing.py"), "--candidate", cand]) == 2
    assert "missing.py" in capsys.readouterr().err
    broken = tmp_path / "broken.py"
    broken.write_text("class Model: pass\n")
    assert main(["eval", "--problem", str(broken), "--candidate", cand]) == 2
    assert "missing get_inputs, get_init_inputs" in capsys.readouterr().err


def test_binary_candidates_get_a_verdict(tmp_path, capsys):
    """A non-UTF-8 candidate is a format_error and a NUL byte a compile_error: verdicts with exit 0, no traceback."""
    problem, cand = _files(tmp_path, GOOD)
    (tmp_path / "candidate.py").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    assert main(["eval", "--problem", problem, "--candidate", cand, "--device", "cpu", "--no-cache", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "format_error" and "not UTF-8" in out["reason"] and "0x89 at offset 0" in out["reason"]
    (tmp_path / "candidate.py").write_bytes(GOOD.encode().replace(b"import torch\n", b"import torch\x00\n", 1))
    assert main(["eval", "--problem", problem, "--candidate", cand, "--device", "cpu", "--no-cache", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "compile_error" and "null bytes" in out["reason"]


def test_a_candidate_refused_from_its_source_starts_no_worker(tmp_path, capsys, monkeypatch):
    """Empty, syntax-error and PyTorch-only candidates are judged before the pool exists (it took 6-20 s to start
    first), and the report says no worker ran instead of `network isolated=None`."""
    import harness.commands.eval_cmd as eval_cmd

    def no_pool(*args, **kwargs):
        raise AssertionError("an Evaluator was started for a candidate its source already decides")

    monkeypatch.setattr(eval_cmd, "Evaluator", no_pool)
    problem, cand = _files(tmp_path, GOOD)
    pytorch_only = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                    "    def forward(self, a, b):\n        return torch.relu(a + b)\n")
    for source, status in (("", "format_error"), ("def (:\n", "compile_error"), (pytorch_only, "rejected")):
        (tmp_path / "candidate.py").write_text(source)
        assert main(["eval", "--problem", problem, "--candidate", cand, "--device", "cpu", "--no-cache"]) == 0
        out = capsys.readouterr().out
        assert f"Status: {status}" in out and "sandbox: no worker ran" in out and "None" not in out, out
