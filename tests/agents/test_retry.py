"""Central retries (backoff, jitter, Retry-After) and the thread-safe rate limiter."""

from __future__ import annotations

import random
import threading
import time

import pytest

from agents.base import AgentError, AgentResponse, AuthError, ConfigError, Message, RetryableError, Usage
from agents.retry import RateLimiter, RetryingAgent, RetryPolicy

MSGS = [Message("user", "x" * 400)]


class ScriptedAgent:
    """Raises or returns the scripted outcomes in order; counts calls."""

    name = "scripted"

    def __init__(self, *outcomes: object) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    def respond(self, messages, *, problem_id, sample, turn):  # noqa: ANN001
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def ok(text: str = "done", tokens: int = 10) -> AgentResponse:
    return AgentResponse(text, Usage(tokens, tokens), 0.0, 0.01, "m")


def make(inner: ScriptedAgent, **policy: float) -> tuple[RetryingAgent, list[float]]:
    sleeps: list[float] = []
    agent = RetryingAgent(inner, RetryPolicy(**policy), sleep=sleeps.append, rng=random.Random(0))
    return agent, sleeps


def test_retries_then_success_counts_attempts() -> None:
    inner = ScriptedAgent(RetryableError("429"), RetryableError("500"), ok())
    agent, sleeps = make(inner, max_attempts=5, initial_delay_s=1.0, multiplier=2.0, jitter=0.0)
    response = agent.respond(MSGS, problem_id="p", sample=1, turn=1)
    assert response.text == "done"
    assert response.attempts == 3
    assert inner.calls == 3
    assert sleeps == [1.0, 2.0]  # exponential, no jitter


def test_jitter_stays_within_bounds_and_cap_applies() -> None:
    policy = RetryPolicy(max_attempts=10, initial_delay_s=1.0, max_delay_s=5.0, multiplier=2.0, jitter=0.5)
    rng = random.Random(1)
    delays = [policy.delay(n, None, rng) for n in range(1, 9)]
    for n, d in enumerate(delays, 1):
        base = min(5.0, 2.0 ** (n - 1))
        assert base * 0.5 <= d <= base
    assert len(set(delays)) == len(delays)  # jitter varies the waits


def test_retry_after_is_honoured() -> None:
    inner = ScriptedAgent(RetryableError("429", retry_after=3.0), ok())
    agent, sleeps = make(inner, initial_delay_s=0.01, max_delay_s=10.0)
    agent.respond(MSGS, problem_id="p", sample=1, turn=1)
    assert sleeps == [3.0]


def test_retry_after_beyond_max_delay_stops_at_once() -> None:
    inner = ScriptedAgent(RetryableError("429 quota", retry_after=3600.0), ok())
    agent, sleeps = make(inner, max_delay_s=60.0)
    with pytest.raises(RetryableError, match="asked to wait 3600s") as info:
        agent.respond(MSGS, problem_id="p", sample=1, turn=1)
    assert info.value.attempts == 1
    assert sleeps == []


def test_retries_exhausted_raise_retryable_with_attempts() -> None:
    inner = ScriptedAgent(*[RetryableError(f"500 #{i}") for i in range(3)])
    agent, sleeps = make(inner, max_attempts=3, initial_delay_s=0.0)
    with pytest.raises(RetryableError, match=r"500 #2 \(gave up after 3 attempt") as info:
        agent.respond(MSGS, problem_id="p", sample=1, turn=1)
    assert info.value.attempts == 3
    assert inner.calls == 3
    assert len(sleeps) == 2


@pytest.mark.parametrize("exc", [AuthError("401"), AgentError("400 bad request")])
def test_non_retryable_errors_pass_through_at_once(exc: AgentError) -> None:
    inner = ScriptedAgent(exc, ok())
    agent, sleeps = make(inner)
    with pytest.raises(type(exc)):
        agent.respond(MSGS, problem_id="p", sample=1, turn=1)
    assert inner.calls == 1
    assert sleeps == []


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"jitter": 2}, "jitter"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"backoff": 1}, r"unknown retry key\(s\) backoff; valid: "),
    ],
)
def test_bad_retry_config(cfg: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        RetryPolicy.from_config(cfg)


def test_rate_limiter_config() -> None:
    assert RateLimiter.from_config(None) is None
    assert RateLimiter.from_config({"requests_per_min": None, "tokens_per_min": None}) is None
    with pytest.raises(ConfigError, match="requests_per_min must be > 0"):
        RateLimiter.from_config({"requests_per_min": 0})
    with pytest.raises(ConfigError, match="unknown rate_limit key"):
        RateLimiter.from_config({"rpm": 10})


def test_request_limit_blocks_once_the_bucket_is_empty() -> None:
    limiter = RateLimiter(requests_per_min=600)  # a burst of 600, then one per 0.1 s
    assert all(limiter.acquire() == 0.0 for _ in range(600))  # the burst never waits, however busy the machine
    start = time.monotonic()
    for _ in range(3):
        limiter.acquire()
    elapsed = time.monotonic() - start
    # ~0.3 s; the upper bound only catches a rate off by a unit (per second taken as per minute: 18 s), never a
    # busy machine's stall (README: time limits in the tests only catch hangs)
    assert 0.25 <= elapsed < 5.0


def test_token_limit_and_settle_with_real_usage() -> None:
    limiter = RateLimiter(tokens_per_min=6000)  # 100 tokens per second
    assert limiter.acquire(6000) < 0.05
    limiter.settle(6000, 6000)
    start = time.monotonic()
    limiter.acquire(30)  # 30 tokens needs 0.3 s of refill (a unit slip would need 18 s)
    assert 0.2 <= time.monotonic() - start < 5.0
    # the response used 20 more tokens than estimated: the next request waits for those too
    limiter.settle(30, 50)
    start = time.monotonic()
    limiter.acquire(10)
    assert 0.2 <= time.monotonic() - start < 5.0


def test_rate_limiter_is_shared_safely_by_threads() -> None:
    limiter = RateLimiter(requests_per_min=1200)  # burst 1200, then 20 per second
    granted: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(155):
            limiter.acquire()
            with lock:
                granted.append(time.monotonic())

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 1240
    # 40 requests beyond the burst at 20/s take about 2 s, whatever the threads do (a unit slip: 120 s)
    assert 1.7 <= time.monotonic() - start < 30.0


def test_retrying_agent_uses_the_limiter_per_attempt() -> None:
    limiter = RateLimiter(requests_per_min=600)  # a burst of 600, then one per 0.1 s
    for _ in range(598):
        limiter.acquire()
    inner = ScriptedAgent(RetryableError("500"), ok())
    agent = RetryingAgent(inner, RetryPolicy(initial_delay_s=0.0), limiter, sleep=lambda s: None)
    agent.respond(MSGS, problem_id="p", sample=1, turn=1)
    assert inner.calls == 2
    start = time.monotonic()
    limiter.acquire()  # both attempts took a request from the bucket, so this one waits
    assert time.monotonic() - start >= 0.05


def test_parse_retry_after_forms() -> None:
    import email.utils

    from agents._sdk import parse_retry_after

    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= parse_retry_after({"retry-after": soon}) <= 31
    assert parse_retry_after({"retry-after": "soon-ish"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None
