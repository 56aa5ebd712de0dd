"""The Hydra configs of `harness run` stay in step with the code they configure."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agents import make_agent
from agents.base import Pricing
from agents.settings import SETTINGS
from eval.config import EvalConfig
from harness import overrides as ov
from harness.cli import main
from harness.store import VOLATILE_KEYS, config_differences
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


def test_runs_recorded_before_the_typed_schemas_still_resume() -> None:
    """The configs `harness run` composed from the untyped YAML files (as old runs stored them) differ from
    today's only in keys a resume may change, so the store accepts those runs."""
    added_since = ("stop_grace_s",)  # top-level keys added after those runs; each must be one a resume may change
    assert set(added_since) <= set(VOLATILE_KEYS)
    recorded = json.loads((REPO / "tests" / "fixtures" / "configs" / "before_typed_schemas.json").read_text())
    for case, overrides in recorded["overrides"].items():
        old, new = recorded["configs"][case], compose(*overrides)
        assert config_differences(old, new, (*VOLATILE_KEYS, "executor")) == [], case
        assert list(old) == [k for k in new if k not in added_since], case
        assert list(old["agent"]) == list(new["agent"]), case
        # a key added since (store.ADDED_KEYS) compares as the behaviour those runs had, and only as that
        timed_otherwise = compose(*overrides, "eval.observed_timing=true")
        assert config_differences(old, timed_otherwise, (*VOLATILE_KEYS, "executor")) == ["eval.observed_timing"]


@pytest.mark.parametrize("option", ov.groups()["agent"])
def test_agent_defaults_are_their_settings_class(option: str) -> None:
    """The YAML file of an agent kind adds nothing to its schema's defaults but the model preset's name and prices."""
    cfg = compose(f"agent={option}")["agent"]
    expected = dataclasses.asdict(SETTINGS[option]())
    if option in ("openai", "anthropic"):
        expected.update(model=None, pricing=None)  # model=custom: ${model.name} and ${model.pricing} are null
    assert cfg == expected


@pytest.mark.parametrize(("args", "expected"), [
    (["agent=openai", "agent.max_tokens=many"], "agent.max_tokens must be an integer or null, got 'many'"),
    (["agent=anthropic", "agent.temperature=hot"], "agent.temperature must be a number or null, got 'hot'"),
    (["agent.retry.max_attempts=two"], "agent.retry.max_attempts must be an integer, got 'two'"),
    (["agent.retry=5"], "agent.retry must be a mapping of RetryPolicy's keys, got 5"),
    (["executor=ray", "executor.num_actors=true"], "executor.num_actors must be an integer or null, got True"),
    (["turns=null"], "turns must be an integer, got null"),
    (["quiet=maybe"], "quiet must be true or false, got 'maybe'"),
    (["context.k=two"], "context.k must be an integer, got 'two'"),
    (["eval.trials=x"], "eval.trials must be an integer, got 'x'"),
    (["-m", "turns=1,x"], "turns must be an integer, got 'x'"),  # every value of a sweep is checked
])
def test_a_value_of_the_wrong_type_is_one_line_naming_the_key_and_the_type(args, expected, tmp_path, capsys) -> None:
    flags = [a for a in args if a.startswith("-")]
    code = main(["run", *flags, f"runs_dir={tmp_path / 'runs'}", *[a for a in args if not a.startswith("-")]])
    assert code == 2 and capsys.readouterr().err == f"error: {expected}\n"
    assert not (tmp_path / "runs").exists()


def test_values_of_the_right_type_pass() -> None:
    ov.validate(["agent=openai", "agent.pricing={input: 1, output: 2}", "agent.extra_body={top_k: 5}",
                 "target_speedup=2", "turns=${search.attempts}", "eval.gpus=[0,1]"])
    cfg = compose("agent=command", "agent.command=[python, -c, 'print(1)']", "target_speedup=2")
    assert cfg["agent"]["command"] == ["python", "-c", "print(1)"] and cfg["target_speedup"] == 2.0


def test_the_default_backend_is_the_first_backend_and_checked_by_the_evaluator() -> None:
    from eval.backends import BACKENDS, DEFAULT_BACKEND
    from eval.evaluator import Job

    assert compose()["backend"] == DEFAULT_BACKEND == BACKENDS[0]
    with pytest.raises(ValueError, match="unknown backend 'opencl'; valid: triton, cuda"):
        Job(problem=None, source="", backend="opencl")  # type: ignore[arg-type]
