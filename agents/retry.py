"""Retries and rate limits, handled once for every agent kind.

`RetryingAgent` wraps any `Agent`: it waits on a shared `RateLimiter` before each request,
retries `RetryableError`s with exponential backoff and jitter (honouring the provider's
Retry-After), and passes `AuthError` and other `AgentError`s through at once. Provider SDKs
are built with their own retries off, so these are the only ones.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from agents.base import Agent, AgentResponse, ConfigError, Message, RetryableError

log = logging.getLogger(__name__)


@dataclass
class RetryPolicy:
    """Exponential backoff: attempt n waits initial_delay_s * multiplier**(n-1), capped at max_delay_s,
    then scaled by a random factor in [1 - jitter, 1]. A provider's Retry-After raises the wait;
    one beyond max_delay_s ends the retries (a long quota wait should not hang the run).

    Also the `agent.retry` schema of `harness run` (`agents.settings`), so it is not frozen: Hydra writes
    overrides into it. Retries on 408/409/429/5xx, timeouts, connection errors and malformed bodies."""

    max_attempts: int = 5
    initial_delay_s: float = 1.0
    max_delay_s: float = 60.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"retry.max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_delay_s < 0 or self.max_delay_s < 0 or self.multiplier < 1:
            raise ConfigError("retry delays must be >= 0 and retry.multiplier >= 1")
        if not 0 <= self.jitter <= 1:
            raise ConfigError(f"retry.jitter must be in [0, 1], got {self.jitter}")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, base: "RetryPolicy | None" = None) -> "RetryPolicy":
        """`base` (default: this class's defaults) with the keys `cfg` sets; null values keep the base's."""
        return dataclasses.replace(base or cls(), **_known_fields(cls, cfg or {}, "retry"))

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float | None:
        """Seconds to wait after failed attempt number `attempt` (1-based); None means stop."""
        if attempt >= self.max_attempts:
            return None
        backoff = min(self.max_delay_s, self.initial_delay_s * self.multiplier ** (attempt - 1))
        backoff *= 1 - self.jitter * rng.random()
        if retry_after is None:
            return backoff
        if retry_after > self.max_delay_s:
            return None
        return max(backoff, retry_after)


@dataclass
class RateLimits:
    """The `agent.rate_limit` settings of a `RateLimiter`; null: unlimited."""

    requests_per_min: Optional[float] = None
    tokens_per_min: Optional[float] = None

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> "RateLimits":
        return cls(**_known_fields(cls, cfg or {}, "rate_limit"))


class RateLimiter:
    """Token buckets for requests per minute and tokens per minute, shared by threads.

    `acquire(estimate)` blocks until one request and `estimate` tokens are available;
    `settle(estimate, actual)` corrects the token bucket once the real usage is known (it may
    go negative, which holds back the next requests). None for a limit means unlimited.
    """

    def __init__(
        self,
        requests_per_min: float | None = None,
        tokens_per_min: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        for label, value in (("requests_per_min", requests_per_min), ("tokens_per_min", tokens_per_min)):
            if value is not None and value <= 0:
                raise ConfigError(f"rate_limit.{label} must be > 0 or null, got {value}")
        self.requests_per_min = requests_per_min
        self.tokens_per_min = tokens_per_min
        self._clock = clock
        self._cond = threading.Condition()
        self._requests = float(requests_per_min or 0)
        self._tokens = float(tokens_per_min or 0)
        self._stamp = clock()

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> "RateLimiter | None":
        """None when neither limit is set (no limiter at all)."""
        return cls.of(RateLimits.from_config(cfg))

    @classmethod
    def of(cls, limits: RateLimits) -> "RateLimiter | None":
        """The limiter these limits ask for; None when neither is set."""
        if limits.requests_per_min is None and limits.tokens_per_min is None:
            return None
        return cls(limits.requests_per_min, limits.tokens_per_min)

    def _refill(self) -> None:
        now = self._clock()
        elapsed, self._stamp = now - self._stamp, now
        if self.requests_per_min:
            self._requests = min(self.requests_per_min, self._requests + elapsed * self.requests_per_min / 60)
        if self.tokens_per_min:
            self._tokens = min(self.tokens_per_min, self._tokens + elapsed * self.tokens_per_min / 60)

    def _wait_needed(self, tokens: float) -> float:
        waits = [0.0]
        if self.requests_per_min and self._requests < 1:
            waits.append((1 - self._requests) * 60 / self.requests_per_min)
        if self.tokens_per_min and self._tokens < tokens:
            waits.append((tokens - self._tokens) * 60 / self.tokens_per_min)
        return max(waits)

    def acquire(self, estimated_tokens: int = 0) -> float:
        """Block until the request may go; returns the seconds waited."""
        tokens = min(float(estimated_tokens), float(self.tokens_per_min or 0))
        waited = 0.0
        with self._cond:
            while True:
                self._refill()
                wait = self._wait_needed(tokens)
                if wait <= 0:
                    break
                start = self._clock()
                self._cond.wait(timeout=wait)
                waited += self._clock() - start
            if self.requests_per_min:
                self._requests -= 1
            if self.tokens_per_min:
                self._tokens -= tokens
        return waited

    def settle(self, estimated_tokens: int, actual_tokens: int) -> None:
        """Charge the difference between the real token usage and the estimate."""
        if not self.tokens_per_min:
            return
        with self._cond:
            estimate = min(float(estimated_tokens), float(self.tokens_per_min))
            self._tokens -= actual_tokens - estimate
            self._cond.notify_all()


def estimate_tokens(messages: list[Message]) -> int:
    """A rough prompt-size estimate (4 characters per token) for the token bucket."""
    return sum(len(m.content) for m in messages) // 4 + 4 * len(messages)


class RetryingAgent:
    """Wraps an agent with central rate limiting and retries (see the module docstring)."""

    def __init__(
        self,
        inner: Agent,
        policy: RetryPolicy | None = None,
        limiter: RateLimiter | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.policy = policy or RetryPolicy()
        self.limiter = limiter
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RetryingAgent({self.inner!r}, {self.policy}, limiter={self.limiter is not None})"

    def respond(self, messages: list[Message], *, problem_id: str, sample: int, turn: int) -> AgentResponse:
        """Call the inner agent, retrying transient failures; raise the last one when they run out."""
        estimate = estimate_tokens(messages)
        attempt = 0
        while True:
            attempt += 1
            if self.limiter is not None:
                self.limiter.acquire(estimate)
            try:
                response = self.inner.respond(messages, problem_id=problem_id, sample=sample, turn=turn)
            except RetryableError as exc:
                with self._rng_lock:
                    wait = self.policy.delay(attempt, exc.retry_after, self._rng)
                if wait is None:
                    why = (
                        f"the provider asked to wait {exc.retry_after:g}s, more than retry.max_delay_s"
                        if exc.retry_after is not None and exc.retry_after > self.policy.max_delay_s
                        else f"gave up after {attempt} attempt(s)"
                    )
                    raise RetryableError(f"{exc} ({why})", retry_after=exc.retry_after, attempts=attempt) from None
                log.warning(
                    "%s: %s (problem %s, sample %s, turn %s); retry %d/%d in %.2fs",
                    self.name, exc, problem_id, sample, turn, attempt, self.policy.max_attempts - 1, wait,
                )
                self._sleep(wait)
                continue
            if self.limiter is not None:
                self.limiter.settle(estimate, response.usage.total_tokens)
            return dataclasses.replace(response, attempts=attempt)


def _known_fields(cls: type, cfg: Mapping[str, Any], section: str) -> dict[str, Any]:
    valid = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(cfg) - valid)
    if unknown:
        raise ConfigError(f"unknown {section} key(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    return {k: v for k, v in cfg.items() if v is not None}
