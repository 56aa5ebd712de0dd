"""The offline agents (command, replay, reference) and the `make_agent` factory."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agents import (
    AGENT_KINDS,
    AgentError,
    ConfigError,
    Message,
    RetryableError,
    UnavailableError,
    extract_code,
    make_agent,
)
from agents._command import render_conversation
from agents.extract import ExtractionError

MSGS = [Message("system", "sys text"), Message("user", "task text"), Message("assistant", "old reply"), Message("user", "feedback text")]
NO_RETRY = {"max_attempts": 1}


def ask(agent, problem_id: str = "L1/13_softmax", sample: int = 1, turn: int = 1):
    return agent.respond(MSGS, problem_id=problem_id, sample=sample, turn=turn)


# --- command -----------------------------------------------------------------

ECHO = "import os, sys; data = sys.stdin.read(); print(os.environ['HARNESS_PROBLEM_ID'], os.environ['HARNESS_SAMPLE'], os.environ['HARNESS_TURN']); print(data, end='')"


def test_command_gets_conversation_on_stdin_and_ids_in_env() -> None:
    agent = make_agent({"kind": "command", "command": [sys.executable, "-c", ECHO]})
    r = ask(agent, problem_id="L2/16_add_rmsnorm", sample=3, turn=2)
    first, rest = r.text.split("\n", 1)
    assert first == "L2/16_add_rmsnorm 3 2"
    assert rest == render_conversation(MSGS)
    assert rest.startswith("### System\n\nsys text\n\n### User\n\ntask text\n\n### Assistant\n\nold reply")
    assert r.cost_usd is None and r.usage.total_tokens == 0 and r.latency_s > 0


def test_command_string_runs_through_the_shell_with_json_input() -> None:
    agent = make_agent({"kind": "command", "command": f"{sys.executable} -c 'import sys; print(sys.stdin.read())' | tr a-z A-Z",
                        "input_format": "json", "model": "upper"})
    r = ask(agent)
    assert json.loads(r.text.lower()) == [{"role": m.role, "content": m.content} for m in MSGS]
    assert r.model == "upper" and agent.name == "command:upper"


def test_command_reply_with_code_is_extractable() -> None:
    script = "print('Here:'); print('```python'); print('class ModelNew:'); print('    pass'); print('```')"
    agent = make_agent({"kind": "command", "command": [sys.executable, "-c", script]})
    assert extract_code(ask(agent).text) == "class ModelNew:\n    pass\n"


def test_command_failure_is_a_clear_error() -> None:
    script = "import sys; sys.stderr.write('model not found: foo\\n'); sys.exit(3)"
    agent = make_agent({"kind": "command", "command": [sys.executable, "-c", script], "retry": NO_RETRY})
    with pytest.raises(AgentError, match="exited with status 3: model not found: foo") as info:
        ask(agent)
    assert not isinstance(info.value, UnavailableError)  # the tool ran and answered with a failure


def test_command_missing_executable() -> None:
    agent = make_agent({"kind": "command", "command": ["/nonexistent/llm-cli"]})
    with pytest.raises(UnavailableError, match="cannot start"):
        ask(agent)


def test_command_the_shell_cannot_find_is_unavailable() -> None:
    """`agent.command='nonexistent-llm-cli'` goes through /bin/sh, which exits 127: not an answer."""
    agent = make_agent({"kind": "command", "command": "nonexistent-llm-cli-7f3a", "retry": NO_RETRY})
    with pytest.raises(UnavailableError, match="'nonexistent-llm-cli-7f3a' was not found \\(exit 127\\)"):
        ask(agent)


def _running(pid: int) -> bool:
    """Whether `pid` is alive (a killed process nobody has reaped yet is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_command_timeout_kills_the_process_group_and_is_retryable(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    # the shell starts a grandchild that says its pid; both would run for 10 minutes. The timeout is one a busy
    # machine's shell starts well inside
    cmd = f"sh -c 'echo $$ > {pid_file}; exec sleep 600' & sleep 600"
    agent = make_agent({"kind": "command", "command": cmd, "timeout_s": 5, "retry": NO_RETRY})
    start = time.monotonic()
    with pytest.raises(RetryableError, match=r"timed out after 5s"):
        ask(agent)
    assert time.monotonic() - start < 300  # cut by the timeout, long before the command's end
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 120
    while _running(grandchild):
        assert time.monotonic() < deadline, f"the command's grandchild {grandchild} outlived the kill"
        time.sleep(0.1)


def test_command_empty_output_is_an_empty_reply() -> None:
    agent = make_agent({"kind": "command", "command": "true"})
    with pytest.raises(ExtractionError, match="empty"):
        extract_code(ask(agent).text)


@pytest.mark.parametrize("cfg, match", [
    ({"command": ""}, "needs command"),
    ({"command": []}, "needs command|is empty"),
    ({"command": "x", "input_format": "yaml"}, "input_format"),
    ({"command": "x", "timeout_s": 0}, "timeout_s"),
])
def test_command_bad_config(cfg: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_agent({"kind": "command", **cfg})


# --- replay ------------------------------------------------------------------

def write_results(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_replay_serves_recorded_replies_from_a_run_dir(tmp_path: Path) -> None:
    write_results(tmp_path / "results.jsonl", [
        {"problem_id": "L1/13_softmax", "sample": 1, "turn": 1, "reply": "first", "status": "compile_error", "model": "gpt-x"},
        {"problem_id": "L1/13_softmax", "sample": 1, "turn": 2, "reply": "second", "status": "correct"},
        {"problem_id": "L1/24_gelu", "sample": 2, "turn": 1, "reply": "gelu", "speedup": None},
    ])
    agent = make_agent({"kind": "replay", "path": str(tmp_path)})
    assert ask(agent, turn=1).text == "first"
    assert ask(agent, turn=1).model == "replay:gpt-x"
    assert ask(agent, turn=2).text == "second"
    r = ask(agent, problem_id="L1/24_gelu", sample=2)
    assert r.text == "gelu" and r.cost_usd == 0.0


def test_replay_of_a_file_that_counted_samples_from_zero(tmp_path: Path) -> None:
    """Runs written before samples counted from 1 replay with their samples numbered as now."""
    write_results(tmp_path / "results.jsonl", [
        {"problem_id": "p", "sample": 0, "turn": 1, "reply": "zero"},
        {"problem_id": "p", "sample": 1, "turn": 1, "reply": "one"},
    ])
    agent = make_agent({"kind": "replay", "path": str(tmp_path), "retry": NO_RETRY})
    assert [ask(agent, problem_id="p", sample=s).text for s in (1, 2)] == ["zero", "one"]
    with pytest.raises(AgentError, match="sample 0, turn 1"):
        ask(agent, problem_id="p", sample=0)


def test_replay_accepts_a_jsonl_path_and_reports_missing_entries(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    write_results(path, [{"problem_id": "p", "sample": 1, "turn": 1, "reply": "x"}])
    agent = make_agent({"kind": "replay", "path": str(path), "retry": NO_RETRY})
    with pytest.raises(AgentError, match=r"has no reply for problem 'p', sample 1, turn 2 \(it holds 1 attempts\)"):
        agent.respond(MSGS, problem_id="p", sample=1, turn=2)


def test_replay_of_an_attempt_without_reply(tmp_path: Path) -> None:
    write_results(tmp_path / "results.jsonl", [
        {"problem_id": "p", "sample": 1, "turn": 1, "reply": None, "error": "HTTP 400"},
        {"problem_id": "p", "sample": 1, "turn": 2, "reply": None},
        {"problem_id": "p", "sample": 1, "turn": 2, "reply": "recovered"},
    ])
    agent = make_agent({"kind": "replay", "path": str(tmp_path), "retry": NO_RETRY})
    with pytest.raises(AgentError, match="has no reply"):
        agent.respond(MSGS, problem_id="p", sample=1, turn=1)
    assert agent.respond(MSGS, problem_id="p", sample=1, turn=2).text == "recovered"


@pytest.mark.parametrize("content, match", [
    ('{"problem_id": "p", "sample": 0, "turn": 1, "reply": "a"}\n{not json\n', r"results.jsonl:2 is not valid JSON"),
    ('{"problem_id": "p", "sample": 0, "turn": 1}\n', r":1 lacks reply"),
    ('[1, 2]\n', "not a JSON object"),
    ('{"problem_id": "p", "sample": "zero", "turn": 1, "reply": "a"}\n', "non-integer sample or turn"),
    ('{"problem_id": "p", "sample": 0, "turn": 1, "reply": "a"}\n{"problem_id": "p", "sample": 0, "turn": 1, "reply": "b"}\n',
     r":2 and line 1 give different replies"),
    ("\n", "holds no attempts"),
])
def test_replay_bad_files_fail_at_construction(tmp_path: Path, content: str, match: str) -> None:
    (tmp_path / "results.jsonl").write_text(content)
    with pytest.raises(ConfigError, match=match):
        make_agent({"kind": "replay", "path": str(tmp_path)})


def test_replay_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read .*results.jsonl"):
        make_agent({"kind": "replay", "path": str(tmp_path)})


# --- reference ---------------------------------------------------------------

def test_reference_serves_the_solution_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import problems.suite

    solution = "import torch\n\nclass ModelNew(torch.nn.Module):\n    '''has ``` inside'''\n    pass\n"
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "13_softmax.py").write_text(solution)
    monkeypatch.setattr(problems.suite, "SOLUTIONS_DIR", tmp_path)
    agent = make_agent({"kind": "reference"})
    r = ask(agent, problem_id="L1/13_softmax", turn=3)
    assert extract_code(r.text) == solution
    assert r.cost_usd == 0.0 and r.model == "reference"


@pytest.mark.parametrize("problem_id", ["L1/13_softmax", "KB/L1/1_Square_matrix_multiplication_", "custom_problem"])
def test_reference_without_solution_says_so_honestly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, problem_id: str) -> None:
    import problems.suite

    monkeypatch.setattr(problems.suite, "SOLUTIONS_DIR", tmp_path)  # an empty solutions tree
    r = ask(make_agent({"kind": "reference"}), problem_id=problem_id)
    assert "no reference solution" in r.text and problem_id in r.text and r.abstained
    with pytest.raises(ExtractionError, match="no fenced code block"):
        extract_code(r.text)


def test_reference_round_trips_every_real_smoke_solution() -> None:
    from problems.select import SMOKE

    agent = make_agent({"kind": "reference"})
    served = 0
    for problem_id in SMOKE:
        path = agent.inner.solution_for(problem_id)
        if path is None:
            continue
        assert extract_code(ask(agent, problem_id=problem_id).text) == path.read_text()
        served += 1
    if not served:
        pytest.skip("no smoke problem has a reference solution yet")


# --- factory -----------------------------------------------------------------

def test_unknown_kind_lists_valid_kinds() -> None:
    with pytest.raises(ConfigError, match="unknown agent kind 'gpt'; valid: openai, anthropic, command, replay, reference"):
        make_agent({"kind": "gpt"})
    assert AGENT_KINDS == ("openai", "anthropic", "command", "replay", "reference")


def test_unknown_key_lists_valid_keys() -> None:
    with pytest.raises(ConfigError, match=r"unknown key\(s\) for agent 'openai': temprature; valid: .*temperature"):
        make_agent({"kind": "openai", "model": "m", "temprature": 0.1})


def test_missing_required_key() -> None:
    with pytest.raises(ConfigError, match="agent 'openai' needs model"):
        make_agent({"kind": "openai", "model": None})


def test_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="must be a mapping"):
        make_agent("openai")  # type: ignore[arg-type]


def test_bad_pricing() -> None:
    with pytest.raises(ConfigError, match="pricing needs output"):
        make_agent({"kind": "openai", "model": "m", "api_key_env": None, "pricing": {"input": 1.0}})
    with pytest.raises(ConfigError, match="unknown pricing key"):
        make_agent({"kind": "openai", "model": "m", "api_key_env": None, "pricing": {"input": 1, "output": 2, "cache": 1}})


def test_hydra_node_is_accepted() -> None:
    cfg = OmegaConf.create({"kind": "command", "command": [sys.executable, "-c", "print('hi')"],
                            "timeout_s": None, "retry": {"max_attempts": 2, "initial_delay_s": None}, "rate_limit": None})
    agent = make_agent(cfg)
    assert ask(agent).text == "hi\n"
    assert agent.policy.max_attempts == 2 and agent.limiter is None


def test_reference_from_another_solutions_dir(tmp_path: Path) -> None:
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "13_softmax.py").write_text("class ModelNew:\n    source = 'elsewhere'\n")
    agent = make_agent({"kind": "reference", "solutions_dir": str(tmp_path)})
    assert extract_code(ask(agent, problem_id="L1/13_softmax").text) == "class ModelNew:\n    source = 'elsewhere'\n"
    r = ask(agent, problem_id="L1/24_gelu")
    assert f"no reference solution for problem 'L1/24_gelu' in {tmp_path}" in r.text
    with pytest.raises(ConfigError, match="is not a directory"):
        make_agent({"kind": "reference", "solutions_dir": str(tmp_path / "missing")})
