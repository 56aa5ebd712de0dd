"""The `openai` agent with the real SDK against a local fake Chat Completions server."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from agents import AuthError, ConfigError, Message, RetryableError, UnavailableError, extract_code, make_agent
from agents.base import AgentError
from agents.extract import ExtractionError
from tests.fakes.llm_server import FakeLLMServer, error, raw, reply, slow

KEY = "sk-test-0123456789abcdef"
MSGS = [Message("system", "be brief"), Message("user", "write ModelNew")]
FAST_RETRY = {"max_attempts": 3, "initial_delay_s": 0.01, "max_delay_s": 1.0}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    with FakeLLMServer(api_key=KEY) as srv:
        yield srv


def agent_for(server: FakeLLMServer, **extra: object):
    cfg = {"kind": "openai", "model": "fake-gpt", "base_url": server.openai_base_url,
           "api_key_env": "FAKE_OPENAI_KEY", "retry": FAST_RETRY, **extra}
    return make_agent(cfg)


def ask(agent, turn: int = 1):
    return agent.respond(MSGS, problem_id="p1", sample=1, turn=turn)


def test_reply_usage_cost_and_request(server: FakeLLMServer) -> None:
    agent = agent_for(
        server, temperature=0.2, top_p=0.9, max_tokens=512, seed=7, reasoning_effort="high",
        extra_body={"top_k": 20}, pricing={"input": 2.0, "output": 8.0, "cached_input": 0.5},
    )
    code = "class ModelNew:\n    pass\n"
    server.script(reply(f"Plan.\n```python\n{code}```", input_tokens=1000, output_tokens=200, cached_tokens=400))
    r = ask(agent)
    assert extract_code(r.text) == code
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.cached_tokens) == (1000, 200, 400)
    assert r.cost_usd == pytest.approx((600 * 2.0 + 400 * 0.5 + 200 * 8.0) / 1e6)
    assert r.model == "fake-gpt" and r.raw_id == "chatcmpl-fake-1" and r.finish_reason == "stop"
    assert r.attempts == 1 and r.latency_s > 0
    body = server.requests[0].body
    assert body["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "write ModelNew"}]
    assert (body["temperature"], body["top_p"], body["max_completion_tokens"], body["seed"]) == (0.2, 0.9, 512, 7)
    assert body["reasoning_effort"] == "high" and body["top_k"] == 20
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_unset_options_are_not_sent_and_cost_unknown_without_prices(server: FakeLLMServer) -> None:
    agent = agent_for(server, temperature=None, max_tokens=64, max_tokens_param="max_tokens")
    server.script(reply("hi"))
    r = ask(agent)
    body = server.requests[0].body
    assert "temperature" not in body and "seed" not in body and "reasoning_effort" not in body
    assert body["max_tokens"] == 64 and "max_completion_tokens" not in body
    assert r.cost_usd is None


def test_retries_429_and_500_then_success(server: FakeLLMServer, caplog: pytest.LogCaptureFixture) -> None:
    agent = agent_for(server)
    server.script(error(429, "slow down", retry_after=0.3), error(500, "boom"), reply("finally"))
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        r = ask(agent)
    assert r.text == "finally" and r.attempts == 3
    assert len(server.requests) == 3
    assert time.monotonic() - start >= 0.3  # Retry-After was honoured (backoff alone: ~0.03 s)
    assert "slow down" in caplog.text and KEY not in caplog.text


def test_retries_exhausted_raise_retryable(server: FakeLLMServer) -> None:
    agent = agent_for(server)
    server.script(error(503, "overloaded"), error(502, "bad gateway"), error(500, "still down"))
    with pytest.raises(RetryableError, match="HTTP 500: still down") as info:
        ask(agent)
    assert info.value.attempts == 3
    assert len(server.requests) == 3


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_timeout_is_retried_then_reported(server: FakeLLMServer) -> None:
    agent = agent_for(server, timeout_s=5, retry={"max_attempts": 2, "initial_delay_s": 0.01})
    server.script(slow(600), slow(600))
    start = time.monotonic()
    with pytest.raises(RetryableError, match="timed out") as info:
        ask(agent)
    assert info.value.attempts == 2
    assert time.monotonic() - start < 300  # cut by the timeouts (10 s), long before a reply (600 s)


def test_401_is_an_auth_error_without_retries_or_key(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = "sk-wrong-key-that-must-not-leak"
    monkeypatch.setenv("FAKE_OPENAI_KEY", wrong)
    agent = agent_for(server)
    with pytest.raises(AuthError, match="HTTP 401") as info:
        ask(agent)
    assert len(server.requests) == 1
    assert wrong not in str(info.value)  # the server echoed it; we redact it


def test_403_is_an_auth_error(server: FakeLLMServer) -> None:
    server.script(error(403, "model not allowed for this project"))
    with pytest.raises(AuthError, match="403: model not allowed"):
        ask(agent_for(server))


def test_other_4xx_is_a_plain_agent_error(server: FakeLLMServer) -> None:
    server.script(error(400, "context length exceeded"))
    with pytest.raises(AgentError, match="400: context length exceeded") as info:
        ask(agent_for(server))
    assert not isinstance(info.value, (RetryableError, AuthError))
    assert len(server.requests) == 1


def test_a_base_url_without_v1_is_unavailable_not_a_refusal(server: FakeLLMServer) -> None:
    """A 404 says nothing about this request: the attempt must stay unfinished (UnavailableError)."""
    agent = make_agent({"kind": "openai", "model": "fake-gpt", "base_url": server.url, "api_key_env": "FAKE_OPENAI_KEY",
                        "retry": FAST_RETRY})  # fmt: skip
    with pytest.raises(UnavailableError, match="HTTP 404: fake server: no endpoint /chat/completions") as info:
        ask(agent)
    assert "agent.base_url" in str(info.value) and not isinstance(info.value, RetryableError)
    assert len(server.requests) == 1  # not retried


def test_an_unreachable_server_is_unavailable_after_the_retries(server: FakeLLMServer) -> None:
    agent = make_agent({"kind": "openai", "model": "x", "base_url": "http://127.0.0.1:9/v1", "api_key_env": None,
                        "retry": {"max_attempts": 2, "initial_delay_s": 0.01}})  # fmt: skip
    with pytest.raises(UnavailableError, match="connection error.*gave up after 2 attempt"):
        ask(agent)


def test_missing_key_fails_at_construction_before_any_request(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAKE_OPENAI_KEY")
    with pytest.raises(ConfigError, match="FAKE_OPENAI_KEY, which is not set"):
        agent_for(server)
    assert server.requests == []


def test_no_key_needed_for_a_local_server() -> None:
    with FakeLLMServer(api_key=None) as srv:
        agent = make_agent({"kind": "openai", "model": "llama", "base_url": srv.openai_base_url, "api_key_env": None})
        srv.script(reply("local"))
        assert ask(agent).text == "local"


def test_key_never_in_repr_or_response(server: FakeLLMServer) -> None:
    agent = agent_for(server)
    server.script(reply("ok"))
    r = ask(agent)
    assert KEY not in repr(agent) and KEY not in str(agent.inner)
    assert KEY not in str(r.to_dict())


@pytest.mark.parametrize("body", [b"not json at all", b'{"object": "chat.completion"}', b'{"choices": []}'])
def test_malformed_replies_are_retryable_errors(server: FakeLLMServer, body: bytes) -> None:
    server.script(*[raw(body)] * 3)
    with pytest.raises(RetryableError, match="malformed"):
        ask(agent_for(server))
    assert len(server.requests) == 3


def test_malformed_then_good_reply_recovers(server: FakeLLMServer) -> None:
    server.script(raw(b"<html>gateway</html>", content_type="text/html"), reply("good"))
    assert ask(agent_for(server)).text == "good"


def test_empty_reply_is_a_response_that_extraction_refuses(server: FakeLLMServer) -> None:
    server.script(reply(""), reply(None, finish_reason="length"))  # type: ignore[arg-type]
    first, second = ask(agent_for(server)), ask(agent_for(server), turn=2)
    assert first.text == "" and second.text == "" and second.finish_reason == "length"
    with pytest.raises(ExtractionError, match="empty"):
        extract_code(first.text)


def test_agent_is_safe_across_threads(server: FakeLLMServer) -> None:
    from concurrent.futures import ThreadPoolExecutor

    agent = agent_for(server)
    server.script(*[reply(f"r{i}") for i in range(16)])
    with ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(lambda i: agent.respond(MSGS, problem_id=f"p{i}", sample=1, turn=1).text, range(16)))
    assert sorted(texts) == sorted(f"r{i}" for i in range(16))


def test_a_content_that_is_not_a_string_is_this_requests_error_not_retried(server: FakeLLMServer) -> None:
    server.script(raw(b'{"object": "chat.completion", "choices": [{"index": 0, "message": {"content": [1, 2]}}]}'))
    with pytest.raises(AgentError, match="its text is a list") as caught:
        ask(agent_for(server))
    assert not isinstance(caught.value, UnavailableError) and len(server.requests) == 1
