"""`harness run` end to end on CPU: the real OpenAI SDK agent against a local fake server, the real
evaluator (Triton interpreter), the run store on disk."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli import main
from tests.fakes.llm_server import FakeLLMServer, error, raw, reply, slow
from tests.run_fixtures import BROKEN, GOOD, WRONG, base_overrides, fenced, rows, write_problem

KEY = "sk-run-test-9f8e7d6c5b4a"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with FakeLLMServer(api_key=KEY) as srv:
        yield srv


def openai_args(server: FakeLLMServer, name: str, **extra: object) -> list[str]:
    args = ["agent=openai", f"agent.base_url={server.openai_base_url}", "agent.model=fake-coder", f"name={name}",
            "agent.retry.initial_delay_s=0.01", "agent.retry.max_delay_s=0.05", "agent.retry.max_attempts=3"]
    return args + [f"{k}={v}" for k, v in extra.items()]


def user_messages(server: FakeLLMServer, i: int) -> list[str]:
    return [m["content"] for m in server.requests[i].body["messages"] if m["role"] == "user"]


def results(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_three_turns_from_compile_error_to_incorrect_to_correct(server, base, tmp_path) -> None:
    server.script(
        reply(fenced(BROKEN, "First try."), input_tokens=1000, output_tokens=100),
        reply(fenced(WRONG, "Fixed the syntax."), input_tokens=2000, output_tokens=100),
        reply(fenced(GOOD, "Added the ReLU."), input_tokens=3000, output_tokens=100),
    )
    code = main(["run", *base, *openai_args(server, "multi", turns=3, samples=1, model="gpt-4o")])
    assert code == 0
    run = tmp_path / "runs" / "multi"
    assert rows(run, "turn, status") == [(1, "compile_error"), (2, "incorrect"), (3, "correct")]
    # each prompt carries the verdict on the previous turn
    assert len(server.requests) == 3
    first, second, third = (user_messages(server, i) for i in range(3))
    assert len(first) == 1 and "class Model(nn.Module)" in first[0] and "torch.relu(a + b)" in first[0]
    assert "Status: compile_error" in second[-1] and "syntax error at line 3" in second[-1]
    assert "Status: incorrect" in third[-1] and "values differ" in third[-1] and "Mismatch: output 0" in third[-1]
    assert "Status: compile_error" in third[1]  # full context: the whole history is resent
    assistant = [m["content"] for m in server.requests[2].body["messages"] if m["role"] == "assistant"]
    assert assistant == [fenced(BROKEN, "First try."), fenced(WRONG, "Fixed the syntax.")]
    lines = results(run)
    assert [(x["turn"], x["status"], x["best_turn"], x["best_status"]) for x in lines] == [
        (1, "compile_error", None, None), (2, "incorrect", None, None), (3, "correct", 3, "correct")]
    assert lines[2]["reply"] == fenced(GOOD, "Added the ReLU.") and lines[2]["result"]["trials"] >= 2
    assert (run / lines[2]["code_path"]).read_text() == GOOD
    # cost from the gpt-4o preset prices: $2.50 / $10 per million input / output tokens
    assert lines[0]["cost_usd"] == pytest.approx((1000 * 2.5 + 100 * 10) / 1e6)
    stored = rows(run, "prompt")
    assert json.loads(stored[2][0])[-1]["content"] == third[-1]
    # the API key is never written into the run directory
    assert not any(KEY in p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())
    assert "OPENAI_API_KEY" in (run / "config.yaml").read_text()  # only the variable's name


def test_the_documented_command_line(server, tmp_path, eval_cache) -> None:
    server.script(*[reply("I could not write it this time.")] * 3)
    code = main(["run", *openai_args(server, "doc"), "problems=smoke", "problems.limit=1", "turns=3", "samples=1",
                 f"runs_dir={tmp_path / 'runs'}", f"eval.cache_dir={eval_cache}", "quiet=true"])
    assert code == 0
    got = rows(tmp_path / "runs" / "doc")
    assert [(s, t, st) for _, s, t, st in got] == [(1, t, "format_error") for t in (1, 2, 3)]
    assert "no fenced code block" in user_messages(server, 1)[-1]


def test_last_k_context_keeps_only_recent_code_and_feedback(server, base, tmp_path) -> None:
    server.script(reply(fenced(BROKEN, "Reasoning one.")), reply("no code, just thoughts"),
                  reply(fenced(BROKEN, "Reasoning three.")))
    assert main(["run", *base, *openai_args(server, "lastk", turns=3), "context.policy=last_k", "context.k=1"]) == 0
    third = server.requests[2].body["messages"]
    assert "1 earlier attempt(s) are omitted" in third[1]["content"]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "user"]
    assert "no usable code block" in third[2]["content"] and "Reasoning one" not in json.dumps(third)
    assert "Status: format_error" in third[3]["content"]


def test_malformed_empty_and_ten_block_replies(server, base, tmp_path) -> None:
    blocks = "".join(fenced(f"helper_{i} = {i}\n", f"Block {i}.") for i in range(9))
    ten = blocks.replace("Block 6.", fenced(GOOD, "The real one.") + "Block 6.")
    assert ten.count("```python") == 10
    server.script(
        raw(b"{not json"),  # malformed body: retried
        reply(""),  # empty reply: a format error with feedback
        reply(ten),  # ten code blocks: the one defining ModelNew is evaluated
    )
    assert main(["run", *base, *openai_args(server, "odd", turns=2, samples=1)]) == 0
    lines = results(tmp_path / "runs" / "odd")
    assert [(x["turn"], x["status"], x["requests"]) for x in lines] == [(1, "format_error", 2), (2, "correct", 1)]
    assert "The reply was empty" in lines[0]["feedback"] and lines[0]["reply"] == ""
    assert "The reply was empty" in user_messages(server, 2)[-1]
    assert (tmp_path / "runs" / "odd" / lines[1]["code_path"]).read_text() == GOOD


def test_429_and_500_are_retried_then_left_for_a_resume(server, base, tmp_path, capsys) -> None:
    server.script(
        error(429, "slow down", retry_after=0.01), error(500, "oops"), reply(fenced(BROKEN)),  # sample 1: ok on try 3
        error(500, "down"), error(502, "down"), error(503, "still down"),  # sample 2: gives up
    )
    args = openai_args(server, "flaky", turns=1, samples=2, max_concurrency=1)
    assert main(["run", *base, *args]) == 5  # not finished: an attempt could not reach the agent
    err = capsys.readouterr().err
    assert "stopped: unreachable: 1 attempt(s) could not reach the agent" in err
    assert "HTTP 503: still down (gave up after 3 attempt(s))" in err
    lines = results(tmp_path / "runs" / "flaky")
    assert [(x["sample"], x["status"], x["requests"]) for x in lines] == [(1, "compile_error", 3)]
    # a resume retries the attempt that never reached the agent, and only that one
    server.script(reply(fenced(WRONG)))
    assert main(["run", *base, *args]) == 0 and len(server.requests) == 7
    assert [(x["sample"], x["status"]) for x in results(tmp_path / "runs" / "flaky")] == [
        (1, "compile_error"), (2, "incorrect")]


def test_a_refused_request_is_recorded_and_not_repeated(server, base, tmp_path) -> None:
    server.script(error(400, "context length exceeded"))
    args = openai_args(server, "refused", turns=2)
    assert main(["run", *base, *args]) == 0
    (line,) = results(tmp_path / "runs" / "refused")
    assert line["status"] == "agent_error" and "HTTP 400: context length exceeded" in line["error"]
    assert main(["run", *base, *args]) == 0 and len(server.requests) == 1


def test_401_stops_the_run_with_the_message(server, base, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    code = main(["run", *base, *openai_args(server, "denied", samples=3)])
    assert code == 4
    err = capsys.readouterr().err
    assert "HTTP 401" in err and "Incorrect API key" in err and "sk-wrong" not in err
    assert rows(tmp_path / "runs" / "denied") == []
    assert len(server.requests) <= 3  # no retries of a 401


def test_missing_api_key_fails_before_any_work(server, base, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    assert main(["run", *base, *openai_args(server, "nokey")]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "nokey").exists() and server.requests == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["turnz=3"], "unknown config key 'turnz'; valid keys at the top level: agent, backend, budget"),
        (["turnz=3"], "Did you mean turns?"),
        (["agent=gpt"], "unknown agent 'gpt'; valid choices for agent: anthropic, command, openai, reference, replay"),
        (["problems=level9"], "valid choices for problems: all, kernelbench, level1"),
        (["agent=openai", "agent.temprature=0.5"], "unknown config key 'agent.temprature' (with agent=openai); "
                                                   "valid keys under 'agent': api_key_env, base_url"),
        (["search=serial,sideways"], "unknown search 'sideways'"),
        (["budget.max_tokens=lots"], "budget.max_tokens must be an integer or null, got 'lots'"),
        (["turns=0"], "turns must be >= 1, got 0"),
        (["backend=opencl"], "unknown backend 'opencl'; valid: triton, cuda, gluon, helion"),
        (["name=../escape"], "name='../escape': use only letters, digits"),
    ],
)
def test_bad_overrides_get_a_clear_message(args, expected, tmp_path, capsys) -> None:
    code = main(["run", "-m", f"runs_dir={tmp_path / 'runs'}", *args])  # -m: the sweep case is checked too
    err = capsys.readouterr().err
    assert code != 0 and expected in err, err
    assert "Traceback" not in err
    runs = tmp_path / "runs"
    assert not runs.exists() or not [p for p in runs.iterdir() if not p.name.startswith(".")]  # no run dir made


def test_budget_stops_cleanly_and_a_resume_finishes_without_repeats(server, base, tmp_path) -> None:
    server.script(*[reply("thinking...", input_tokens=600, output_tokens=100)] * 4)
    args = openai_args(server, "budget", turns=2, samples=2, max_concurrency=1)
    assert main(["run", *base, *args, "budget.max_tokens=1000"]) == 3
    first = rows(tmp_path / "runs" / "budget")
    assert len(first) == 2 and len(server.requests) == 2  # stopped once 1400 tokens were spent
    assert main(["run", *base, *args, "budget.max_tokens=100000"]) == 0
    final = rows(tmp_path / "runs" / "budget")
    assert final[: len(first)] == first and len(final) == 4 and len(server.requests) == 4
    assert len(set(final)) == 4


def test_resume_with_a_different_config_is_refused(server, base, tmp_path, capsys, monkeypatch) -> None:
    server.script(reply("nothing"))
    assert main(["run", *base, *openai_args(server, "cfg")]) == 0
    import harness.app

    def no_pool(*args, **kwargs):  # refused before any evaluator worker starts (it used to start the pool first)
        raise AssertionError("the evaluator was started for a resume that the store refuses")

    monkeypatch.setattr(harness.app, "make_evaluator", no_pool)
    assert main(["run", *base, *openai_args(server, "cfg"), "context.policy=last_k"]) == 2
    assert "different config (context.policy differ; only turns, samples" in capsys.readouterr().err


def test_more_turns_extend_a_finished_run(server, base, tmp_path) -> None:
    """"Give the model 2 more turns": the same command with turns=3 continues every sample from its last turn;
    the first turn's attempt is kept, only the new turns are asked for, and the run is one run."""
    server.script(reply("nothing"), reply("still nothing"), reply("nothing again"))
    assert main(["run", *base, *openai_args(server, "grow")]) == 0
    first = rows(tmp_path / "runs" / "grow", "sample, turn, status, reply")
    assert main(["run", *base, *openai_args(server, "grow", turns=3)]) == 0
    grown = rows(tmp_path / "runs" / "grow", "sample, turn, status, reply")
    assert grown[:1] == first and [r[1] for r in grown] == [1, 2, 3] and len(server.requests) == 3
    assert "turns: 3" in (tmp_path / "runs" / "grow" / "config.yaml").read_text()


def test_response_cache_makes_a_repeated_run_free(server, base, tmp_path) -> None:
    server.script(reply("first"), reply("second"))
    cache = ["response_cache.enabled=true", f"response_cache.path={tmp_path / 'responses.sqlite'}"]
    assert main(["run", *base, *openai_args(server, "c1", turns=2), *cache]) == 0
    assert main(["run", *base, *openai_args(server, "c2", turns=2), *cache]) == 0
    assert len(server.requests) == 2
    one, two = results(tmp_path / "runs" / "c1"), results(tmp_path / "runs" / "c2")
    assert [x["reply"] for x in two] == [x["reply"] for x in one] == ["first", "second"]
    assert [x["from_cache"] for x in two] == [True, True] and [x["requests"] for x in two] == [0, 0]


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_multirun_sweep_writes_one_run_per_job(tmp_path, base) -> None:
    code = main(["run", "-m", *base, "name=abl", "search=serial,parallel", "search.attempts=2"])
    assert code == 0
    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir() if not p.name.startswith(".")) == [
        "abl-search-parallel", "abl-search-serial"]
    assert [(s, t) for _, s, t, _ in rows(runs / "abl-search-serial")] == [(1, 1), (1, 2)]
    assert [(s, t) for _, s, t, _ in rows(runs / "abl-search-parallel")] == [(1, 1), (2, 1)]
    assert "search:\n  name: serial" in (runs / "abl-search-serial" / "config.yaml").read_text()
    # the directory names work as they are in every documented command
    for run in ("runs/abl-search-serial", "runs/abl-search-parallel"):
        assert main(["export", str(tmp_path / run)]) == 0
        assert main(["report", str(tmp_path / run)]) == 0
    replay = ["agent=replay", f"agent.path={tmp_path}/runs/abl-search-serial", "name=again", "search=serial",
              "search.attempts=2"]  # fmt: skip
    assert main(["run", *base, *replay]) == 0
    assert rows(runs / "again") == rows(runs / "abl-search-serial")


def test_anthropic_agent_with_a_model_preset(server, base, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    server.script(reply("No code from me.", input_tokens=1000, output_tokens=200))
    args = ["agent=anthropic", "model=claude-haiku-4-5", f"agent.base_url={server.anthropic_base_url}", "name=claude"]
    assert main(["run", *base, *args]) == 0
    body = server.requests[0].body
    assert server.requests[0].path.endswith("/v1/messages") and body["model"] == "claude-haiku-4-5"
    assert body["system"] and body["messages"][0]["role"] == "user"
    (line,) = results(tmp_path / "runs" / "claude")
    assert line["status"] == "format_error" and line["cost_usd"] == pytest.approx((1000 * 1 + 200 * 5) / 1e6)


def test_summary_and_fast_p_table_unless_quiet(server, base, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # rich wraps at 80 columns off a terminal: the run's path stays on one line
    server.script(reply("nothing yet"), reply("still nothing"))
    assert main(["run", *base, *openai_args(server, "loud", turns=2), "quiet=false"]) == 0
    out = capsys.readouterr().out
    assert f"run {tmp_path / 'runs' / 'loud'}" in out and "stopped: finished" in out
    assert "statuses: format_error 2" in out and "best attempt per problem" in out
    assert "fast_p by turn" in out and "fast_1.5" in out
    assert "(summed over attempts in flight at once: agent" in out  # so evaluator time > wall time reads right
    assert main(["run", *base, *openai_args(server, "loud", turns=2), "quiet=true"]) == 0  # resume: nothing to do
    assert capsys.readouterr().out.strip() == str(tmp_path / "runs" / "loud")


def test_export_writes_prompts_and_code(server, base, tmp_path, capsys) -> None:
    server.script(reply(fenced(BROKEN)))
    assert main(["run", *base, *openai_args(server, "exp")]) == 0
    run = tmp_path / "runs" / "exp"
    assert main(["export", str(run)]) == 0
    (rec,) = [json.loads(x) for x in (run / "export.jsonl").read_text().splitlines()]
    assert rec["code"] == BROKEN and rec["prompt"][-1]["role"] == "user" and rec["status"] == "compile_error"
    assert main(["export", str(tmp_path / "nope")]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_resume_refuses_a_changed_problem(server, tmp_path, eval_cache, capsys) -> None:
    problem = write_problem(tmp_path / "problems")
    base = base_overrides(tmp_path, problem, eval_cache)
    server.script(reply("nothing"))
    assert main(["run", *base, *openai_args(server, "moved", turns=2), "budget.max_tokens=1"]) == 3
    problem.write_text(problem.read_text().replace("N = 4096", "N = 2048"))
    assert main(["run", *base, *openai_args(server, "moved", turns=2)]) == 2
    assert "1 problem(s) changed since this run recorded attempts for them (add_relu)" in capsys.readouterr().err
    assert len(rows(tmp_path / "runs" / "moved")) == 1


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_timeouts_are_retried_then_the_run_stops_unfinished(server, base, tmp_path, capsys) -> None:
    server.script(slow(600), slow(600), reply(fenced(BROKEN)), reply("no code"))
    args = openai_args(server, "slow", samples=2, max_concurrency=1) + ["agent.timeout_s=5", "agent.retry.max_attempts=2"]
    assert main(["run", *base, *args]) == 5  # nothing reached the agent: stop rather than fail every attempt
    assert "the agent could not be reached: openai: request timed out (gave up after 2 attempt(s))" in (
        capsys.readouterr().err)
    assert rows(tmp_path / "runs" / "slow") == [] and len(server.requests) == 2
    assert main(["run", *base, *args]) == 0
    assert [(x["sample"], x["status"]) for x in results(tmp_path / "runs" / "slow")] == [
        (1, "compile_error"), (2, "format_error")]


@pytest.mark.parametrize("damage", ["version", "corrupt"])
def test_unusable_run_directory_is_refused_untouched(server, base, tmp_path, capsys, damage) -> None:
    server.script(reply("nothing"))
    assert main(["run", *base, *openai_args(server, "old")]) == 0
    run = tmp_path / "runs" / "old"
    db = run / "attempts.sqlite"
    if damage == "version":
        conn = sqlite3.connect(db)
        conn.execute("PRAGMA user_version = 7")
        conn.commit()
        conn.close()
    else:
        db.write_bytes(b"\0" * 64 + db.read_bytes()[64:])
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert main(["run", *base, *openai_args(server, "old")]) == 2
    err = capsys.readouterr().err
    assert ("schema version 7" if damage == "version" else "is corrupted") in err and "Nothing was changed" in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert len(server.requests) == 1


def test_replay_of_a_recorded_run_reproduces_it(server, base, tmp_path) -> None:
    server.script(reply(fenced(BROKEN)), reply("no code"), error(400, "context length exceeded"))
    assert main(["run", *base, *openai_args(server, "orig", turns=2, samples=2, max_concurrency=1)]) == 0
    original = rows(tmp_path / "runs" / "orig", "sample, turn, status, reply, code")
    replay = ["agent=replay", f"agent.path={tmp_path / 'runs' / 'orig'}", "name=again", "turns=2", "samples=2"]
    assert main(["run", *base, *replay]) == 0
    assert rows(tmp_path / "runs" / "again", "sample, turn, status, reply, code") == original
    assert [r[2] for r in original] == ["compile_error", "format_error", "agent_error"]
    assert len(server.requests) == 3


def test_replay_takes_turns_samples_and_problems_from_its_source_run(server, base, tmp_path) -> None:
    """As the README shows it (`agent=replay agent.path=runs/NAME`, no turns or samples): the whole run is
    replayed, not its first turn (it used to replay 6 of 18 attempts and report the rest as missing)."""
    server.script(reply(fenced(BROKEN)), reply("no code"), error(400, "context length exceeded"))
    assert main(["run", *base, *openai_args(server, "orig", turns=2, samples=2, max_concurrency=1)]) == 0
    original = rows(tmp_path / "runs" / "orig", "sample, turn, status, reply, code")
    assert main(["run", *base, "agent=replay", f"agent.path={tmp_path / 'runs' / 'orig'}", "name=again"]) == 0
    assert rows(tmp_path / "runs" / "again", "sample, turn, status, reply, code") == original


def test_a_replay_that_would_drop_recorded_attempts_is_refused_naming_them(server, base, tmp_path, capsys) -> None:
    server.script(reply(fenced(BROKEN)), reply("no code"), error(400, "context length exceeded"))
    assert main(["run", *base, *openai_args(server, "orig", turns=2, samples=2, max_concurrency=1)]) == 0
    replay = ["agent=replay", f"agent.path={tmp_path / 'runs' / 'orig'}", "name=part", "turns=1"]
    assert main(["run", *base, *replay]) == 2
    err = capsys.readouterr().err
    assert "would leave out" in err and "turns up to 2" in err and "turns=1" in err, err
    assert not (tmp_path / "runs" / "part").exists()


def test_the_reference_agent_without_a_solution_is_skipped_not_a_format_error(base, tmp_path) -> None:
    """On a problem it has no solution for (here a problem file), the reference agent abstains: the attempt is
    recorded as `skipped` with its note, not as a model's malformed reply (69 of 84 read as format errors)."""
    assert main(["run", *base, "agent=reference", "name=ref"]) == 0
    ((status, reply),) = rows(tmp_path / "runs" / "ref", "status, reply")
    assert status == "skipped" and "no reference solution" in reply


def test_a_provider_that_sends_no_usage_is_counted_here_and_the_budget_holds(server, base, tmp_path, capsys) -> None:
    """A real local server that omits `usage`: tokens are estimated (never 0), the cost is priced from them and
    marked estimated, and the token budget stops the run, exceeded by at most one request."""
    server.script(*[reply("Still thinking, no code yet.", usage=False)] * 16)
    args = openai_args(server, "nousage", turns=2, samples=8, max_concurrency=4)
    budget = 5000
    code = main(["run", *base, *args, "agent.max_tokens=200", "agent.pricing={input: 2.0, output: 8.0}",
                 f"budget.max_tokens={budget}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3, err
    lines = results(tmp_path / "runs" / "nousage")
    assert 0 < len(lines) < 16 and len(lines) == len(server.requests)  # every request sent was recorded
    for line, request in zip(sorted(lines, key=lambda x: x["started_at"]), server.requests):
        assert line["usage_estimated"] is True and line["input_tokens"] > 0 and line["output_tokens"] > 0
        assert line["cost_usd"] == pytest.approx((line["input_tokens"] * 2.0 + line["output_tokens"] * 8.0) / 1e6)
    prompts = sorted(-(-sum(len(m["content"]) for m in r.body["messages"]) // 4) for r in server.requests)
    assert sorted(x["input_tokens"] for x in lines) == prompts  # the stated estimate: 4 characters per token
    spent = sum(x["input_tokens"] + x["output_tokens"] for x in lines)
    assert spent <= budget + max(x["input_tokens"] + x["output_tokens"] for x in lines)  # at most one request over
    assert f"stopped: budget: max_tokens={budget} reached; {spent:,} tokens spent (some counted here" in err


def test_a_request_refused_every_time_stops_the_run_and_a_resume_retries_it(server, base, tmp_path, capsys) -> None:
    """A real local server that rejects the model name (HTTP 400) on every request: the run stops after the same
    refusal on its first requests, exit 6 with the provider's message, recording nothing; once the server accepts
    the requests, a resume runs every attempt."""
    server.script(*[error(400, "The model `fake-coder` does not exist or you do not have access to it.")] * 8)
    args = openai_args(server, "badmodel", turns=2, samples=4, max_concurrency=2)
    code = main(["run", *base, *args])
    err = capsys.readouterr().err
    assert code == 6, err
    assert "stopped: refused: the provider refused the first 3 requests of this session the same way" in err
    assert "HTTP 400: The model `fake-coder` does not exist" in err and "Traceback" not in err
    assert rows(tmp_path / "runs" / "badmodel") == [] and not (tmp_path / "runs" / "badmodel" / "code").exists()
    refused = len(server.requests)
    assert 3 <= refused <= 4  # the requests in flight when the third refusal came finish; no new one starts
    with server._lock:  # noqa: SLF001 (the fix: the refusals not used are dropped, the server answers from now on)
        server._actions.clear()
    server.script(*[reply("No code yet.")] * 8)
    assert main(["run", *base, *args]) == 0
    got = rows(tmp_path / "runs" / "badmodel")
    assert sorted((s, t) for _, s, t, _ in got) == [(s, t) for s in range(1, 5) for t in (1, 2)]
    assert {status for *_, status in got} == {"format_error"} and len(server.requests) == refused + 8


def test_an_extension_takes_the_stored_config_and_only_what_the_command_line_changes(server, base, tmp_path) -> None:
    """README: `harness run name=my-run turns=5` extends a run made with any settings; its original overrides (the
    agent and its endpoint, the problems, the evaluator, the context policy) are not repeated."""
    server.script(reply("nothing"), reply("still nothing"))
    assert main(["run", *base, *openai_args(server, "ext"), "context.policy=last_k"]) == 0
    runs = tmp_path / "runs"
    assert main(["run", f"runs_dir={runs}", "name=ext", "turns=2", "quiet=true"]) == 0
    assert [t for _, _, t, _ in rows(runs / "ext")] == [1, 2] and len(server.requests) == 2
    stored = (runs / "ext" / "config.yaml").read_text()
    assert "turns: 2" in stored and "policy: last_k" in stored and "kind: openai" in stored


def test_a_changed_setting_on_resume_is_still_refused_without_repeating_the_others(server, base, tmp_path,
                                                                                   capsys) -> None:
    server.script(reply("nothing"))
    assert main(["run", *base, *openai_args(server, "same")]) == 0
    assert main(["run", f"runs_dir={tmp_path / 'runs'}", "name=same", "context.policy=last_k"]) == 2
    assert "different config (context.policy differ; only turns" in capsys.readouterr().err


def test_a_refused_model_name_is_fixed_by_resuming_with_the_right_one(server, base, tmp_path, capsys) -> None:
    """Exit 6 says "fix it and resume": the resume with the corrected `agent.model` (and nothing else repeated) runs
    the attempts under the new name; nothing was recorded under the refused one."""
    server.script(*[error(400, "The model `fake-codr` does not exist.")] * 4)
    args = openai_args(server, "typo", samples=4, max_concurrency=1)
    assert main(["run", *base, *args, "agent.model=fake-codr"]) == 6
    with server._lock:  # noqa: SLF001 (the server answers from now on)
        server._actions.clear()
    server.script(*[reply("No code yet.")] * 4)
    capsys.readouterr()
    code = main(["run", f"runs_dir={tmp_path / 'runs'}", "name=typo", "agent.model=fake-coder", "quiet=true"])
    assert code == 0, capsys.readouterr().err
    assert len(rows(tmp_path / "runs" / "typo")) == 4
    assert {r.body["model"] for r in server.requests[-4:]} == {"fake-coder"}


def test_a_refused_model_name_with_fewer_trajectories_than_the_threshold_is_not_finished(server, base, tmp_path,
                                                                                           capsys) -> None:
    """One trajectory, its request refused: exit 6 with nothing recorded (not exit 0, "finished", with an
    agent_error that a resume would never retry)."""
    server.script(error(400, "The model `fake-codr` does not exist."))
    code = main(["run", *base, *openai_args(server, "one", samples=1), "agent.model=fake-codr"])
    err = capsys.readouterr().err
    assert code == 6, err
    assert "stopped: refused: the provider refused every request of this session (1) the same way" in err
    assert rows(tmp_path / "runs" / "one") == []
