"""backend=gluon and backend=helion through the entry points (issue 56): `harness eval --backend`, the prompts
`harness serve` hands out (built by the run's own `prompt_builder`), and the backend list `harness run` validates."""

from __future__ import annotations

import json

import pytest

from agents.prompting import EXAMPLES_DIR
from eval import BACKENDS
from harness.app import prompt_builder
from harness.cli import main
from harness.overrides import compose_config
from tests.eval import dialect_candidates as c


def _files(tmp_path, candidate: str) -> tuple[str, str]:
    problem, cand = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_text((EXAMPLES_DIR / "add_relu_reference.py").read_text().replace("4096", "64"))
    cand.write_text(candidate)
    return str(problem), str(cand)


def test_every_entry_point_knows_both_dialects() -> None:
    assert {"gluon", "helion"} <= set(BACKENDS)
    config = compose_config(["backend=helion", "prompt.hardware=null"])
    assert config["backend"] == "helion"
    for backend, decorator in (("gluon", "@gluon.jit"), ("helion", "@helion.kernel")):
        messages = prompt_builder(config, backend).messages("class Model: pass\n")
        assert decorator in messages[-1].content
        assert (EXAMPLES_DIR / f"add_relu_{backend}.py").read_text().strip() in messages[-1].content


def test_harness_eval_refuses_a_plain_triton_candidate_sent_as_helion_from_its_source(tmp_path, capsys) -> None:
    problem, cand = _files(tmp_path, c.HELION_AS_TRITON.replace("@helion.kernel", "@staticmethod"))
    assert main(["eval", "--problem", problem, "--candidate", cand, "--backend", "helion", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "rejected" and out["backend"] == "helion"
    assert "defines no Helion kernel" in out["reason"]


@pytest.mark.slow  # starts an evaluator
def test_harness_eval_skips_gluon_on_a_cpu(tmp_path, capsys) -> None:
    problem, cand = _files(tmp_path, c.GLUON_GOOD)
    assert main(["eval", "--problem", problem, "--candidate", cand, "--backend", "gluon", "--device", "cpu",
                 "--no-cache", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "skipped" and "Triton's interpreter does not run them" in out["reason"]
