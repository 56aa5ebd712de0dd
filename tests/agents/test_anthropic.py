"""The `anthropic` agent with the real SDK against a local fake Messages server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents import AgentError, AuthError, ConfigError, Message, RetryableError, UnavailableError, make_agent
from tests.fakes.llm_server import FakeLLMServer, error, raw, reply, slow

KEY = "sk-ant-test-0123456789"
FAST_RETRY = {"max_attempts": 3, "initial_delay_s": 0.01, "max_delay_s": 1.0}
MSGS = [
    Message("system", "You write kernels."),
    Message("user", "turn 1 prompt"),
    Message("assistant", "turn 1 reply"),
    Message("user", "feedback on turn 1"),
]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", KEY)
    with FakeLLMServer(api_key=KEY) as srv:
        yield srv


def agent_for(server: FakeLLMServer, **extra: object):
    cfg = {"kind": "anthropic", "model": "claude-fake", "base_url": server.anthropic_base_url,
           "api_key_env": "FAKE_ANTHROPIC_KEY", "retry": FAST_RETRY, **extra}
    return make_agent(cfg)


def ask(agent):
    return agent.respond(MSGS, problem_id="p1", sample=2, turn=2)


def test_system_is_separate_and_usage_counts_cache_reads(server: FakeLLMServer) -> None:
    agent = agent_for(server, max_tokens=4096, extra_body={"output_config": {"effort": "high"}},
                      pricing={"input": 3.0, "output": 15.0, "cached_input": 0.3})
    server.script(reply("```python\nclass ModelNew: pass\n```", input_tokens=2000, output_tokens=300, cached_tokens=1500))
    r = ask(agent)
    body = server.requests[0].body
    assert body["system"] == "You write kernels."
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["max_tokens"] == 4096 and body["output_config"] == {"effort": "high"} and "thinking" not in body
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.cached_tokens) == (2000, 300, 1500)
    assert r.cost_usd == pytest.approx((500 * 3.0 + 1500 * 0.3 + 300 * 15.0) / 1e6)
    assert r.finish_reason == "end_turn" and r.raw_id == "msg_fake_1" and r.model == "claude-fake"


def test_thinking_budget_is_sent_and_thinking_text_dropped(server: FakeLLMServer) -> None:
    agent = agent_for(server, max_tokens=8000, thinking_budget=2048)
    server.script(reply("final answer", thinking="secret chain of thought"))
    r = ask(agent)
    assert server.requests[0].body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert r.text == "final answer"


@pytest.mark.parametrize("budget", [4000, 100])
def test_thinking_budget_must_be_valid(server: FakeLLMServer, budget: int) -> None:
    with pytest.raises(ConfigError, match="thinking_budget must be >= 1024 and below max_tokens"):
        agent_for(server, max_tokens=2000, thinking_budget=budget)


def test_sampling_parameters_are_sent_only_when_set(server: FakeLLMServer) -> None:
    server.script(reply("a"), reply("b"))
    ask(agent_for(server, temperature=0.3, top_p=None))
    ask(agent_for(server))
    first, second = (r.body for r in server.requests)
    assert first["temperature"] == 0.3 and "top_p" not in first
    assert "temperature" not in second and "top_p" not in second


def test_unknown_key_is_refused_by_name(server: FakeLLMServer) -> None:
    with pytest.raises(ConfigError, match="unknown key.*reasoning_effort.*valid: "):
        agent_for(server, reasoning_effort="high")


def test_overloaded_and_rate_limited_then_success(server: FakeLLMServer) -> None:
    server.script(error(529, "overloaded"), error(429, "rate limited", retry_after=0.01), reply("ok"))
    r = ask(agent_for(server))
    assert r.text == "ok" and r.attempts == 3


def test_retries_exhausted(server: FakeLLMServer) -> None:
    server.script(*[error(500, "internal")] * 3)
    with pytest.raises(RetryableError, match="anthropic HTTP 500: internal") as info:
        ask(agent_for(server))
    assert info.value.attempts == 3


def test_timeout(server: FakeLLMServer) -> None:
    server.script(slow(600), reply("ok"))  # a timeout a busy machine's prompt reply stays far inside
    r = ask(agent_for(server, timeout_s=5))
    assert r.text == "ok" and r.attempts == 2


def test_401_stops_at_once_and_hides_the_key(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", "sk-ant-wrong-secret")
    with pytest.raises(AuthError, match="anthropic HTTP 401") as info:
        ask(agent_for(server))
    assert "sk-ant-wrong-secret" not in str(info.value)
    assert len(server.requests) == 1


def test_a_wrong_base_url_is_unavailable(server: FakeLLMServer) -> None:
    agent = make_agent({"kind": "anthropic", "model": "claude-fake", "base_url": f"{server.url}/api",
                        "api_key_env": "FAKE_ANTHROPIC_KEY", "retry": FAST_RETRY})  # fmt: skip
    with pytest.raises(UnavailableError, match="anthropic HTTP 404: fake server: no endpoint /api/v1/messages"):
        ask(agent)
    assert len(server.requests) == 1


def test_missing_key_before_any_request(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAKE_ANTHROPIC_KEY")
    with pytest.raises(ConfigError, match="FAKE_ANTHROPIC_KEY"):
        agent_for(server)
    assert server.requests == []


@pytest.mark.parametrize("body", [b"{broken", b'{"type": "message"}'])
def test_malformed_replies(server: FakeLLMServer, body: bytes) -> None:
    server.script(*[raw(body)] * 3)
    with pytest.raises(RetryableError, match="malformed"):
        ask(agent_for(server))


def test_empty_text(server: FakeLLMServer) -> None:
    server.script(reply(""))
    assert ask(agent_for(server)).text == ""


@pytest.mark.parametrize("body, error", [
    (b'{"type": "message", "content": [{"type": "text", "text": 42}], "usage": {"input_tokens": 1, "output_tokens": 1}}',
     "its text is a int"),
    (b'{"type": "message", "content": [{"type": "text", "text": "\xff"}], "usage": {"input_tokens": 1, "output_tokens": 1}}',
     "not valid UTF-8"),
])
def test_a_reply_of_the_wrong_kind_is_this_requests_error_not_retried(server: FakeLLMServer, body: bytes,
                                                                      error: str) -> None:
    server.script(raw(body))
    with pytest.raises(AgentError, match=error) as caught:
        ask(agent_for(server))
    assert not isinstance(caught.value, UnavailableError) and len(server.requests) == 1


def test_a_lone_surrogate_in_the_text_is_replaced(server: FakeLLMServer) -> None:
    server.script(raw(b'{"type": "message", "content": [{"type": "text", "text": "a\\udc80b"}], "usage": {}}'))
    assert ask(agent_for(server)).text == "a\ufffdb"
