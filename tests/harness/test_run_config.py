"""The Hydra configs of `harness run` stay in step with the code they configure."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agents import make_agent
from agents.base import Pricing
from eval.config import EvalConfig
from harness import overrides as ov
from tests.paths import REPO


def compose(*overrides: str) -> dict:
    return OmegaConf.to_container(ov._compose(list(overrides)), resolve=True)


def test_groups_hold_the_documented_options() -> None:
    groups = ov.groups()
    assert set(groups["agent"]) == {"openai", "anthropic", "command", "replay", "reference"}
    assert {"smoke", "level1", "level2", "level3", "llm", "kernelbench", "all"} <= set(groups["problems"])
    assert {"serial", "parallel"} == set(groups["search"]) and "default" in groups["eval"]
    assert len(groups["model"]) >= 5


def test_defaults_are_the_offline_reference_run() -> None:
    cfg = compose()
    assert cfg["agent"]["kind"] == "reference" and cfg["problems"]["spec"] == "smoke"
    assert cfg["name"] == "reference-smoke" and cfg["turns"] == 1 and cfg["samples"] == 1


@pytest.mark.parametrize("option", ov.groups()["eval"])
def test_eval_presets_map_onto_eval_config(option: str) -> None:
    cfg = compose(f"eval={option}")["eval"]
    assert set(cfg) == {f.name for f in dataclasses.fields(EvalConfig)}
    EvalConfig(**cfg)


@pytest.mark.parametrize("option", ov.groups()["model"])
def test_model_presets_have_valid_prices(option: str) -> None:
    model = compose(f"model={option}")["model"]
    if option == "custom":
        assert model == {"name": None, "pricing": None}
        return
    assert model["name"] and Pricing.from_config(model["pricing"]).output >= 0


@pytest.mark.parametrize("option", ov.groups()["agent"])
def test_agent_configs_are_accepted_by_make_agent(option: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-x")
    (tmp_path / "results.jsonl").write_text('{"problem_id": "p", "sample": 1, "turn": 1, "reply": "r"}\n')
    required = {"openai": ["model=gpt-4o"], "anthropic": ["model=claude-haiku-4-5"],
                "command": ["agent.command=cat"], "replay": [f"agent.path={tmp_path}"], "reference": []}
    agent = make_agent(compose(f"agent={option}", *required[option])["agent"])
    assert agent.name


def test_search_presets_spend_the_same_attempts() -> None:
    serial = compose("search=serial", "search.attempts=6")
    parallel = compose("search=parallel", "search.attempts=6")
    assert (serial["samples"], serial["turns"]) == (1, 6) and (parallel["samples"], parallel["turns"]) == (6, 1)
    assert compose("search=serial", "turns=3")["turns"] == 3  # the command line still wins


def test_help_lists_groups_and_examples() -> None:
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--help"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0
    assert "agent: anthropic, command, openai, reference, replay" in out.stdout
    assert "harness run -m search=serial,parallel" in out.stdout
    # every eval option the help lists is one `harness run` accepts (the schema it validates with is not one)
    listed = next(line for line in out.stdout.splitlines() if line.startswith("eval: "))
    assert listed == "eval: default, fast, kernelbench, thorough", listed
