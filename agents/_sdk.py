"""What the SDK-backed agents (OpenAI, Anthropic) share: API keys from the environment, error
sorting, and the request/reply handling of `SDKAgent`; each provider only says how to send a
conversation and how to read its reply.
"""

from __future__ import annotations

import email.utils
import json
import os
import time
from typing import Any, NamedTuple

from agents import base
from agents.base import AgentError, AgentResponse, AuthError, ConfigError, RetryableError, UnavailableError

# Status codes worth retrying: request timeout, conflict (lock contention), rate limit, server errors.
_RETRY_STATUS = {408, 409, 429}
_AUTH_STATUS = {401, 403}
_UNAVAILABLE_STATUS = {404}  # no such endpoint or model: a wrong base_url (e.g. without /v1) or model name
_NO_KEY = "not-needed"  # local OpenAI-compatible servers without auth still want a non-empty key


def api_key_from_env(kind: str, env_name: str | None) -> str:
    """The API key held by environment variable `env_name`; a clear `ConfigError` when unset.

    `env_name` None (or "") means the server needs no key (a local vLLM/Ollama server).
    """
    if not env_name:
        return _NO_KEY
    key = os.environ.get(env_name, "").strip()
    if not key:
        raise ConfigError(
            f"agent {kind!r} needs an API key in the environment variable {env_name}, which is not set. "
            f"Export {env_name}=..., or point agent.api_key_env at another variable "
            f"(agent.api_key_env=null for a local server without authentication)."
        )
    return key


def redact(text: str, secret: str) -> str:
    """`text` with every occurrence of `secret` replaced, so error messages never carry a key."""
    return text.replace(secret, "***") if secret and secret != _NO_KEY else text


def parse_retry_after(headers: Any) -> float | None:
    """Seconds from `retry-after-ms` / `Retry-After` (seconds or an HTTP date); None if absent or bad."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(float(ms) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def sort_sdk_error(exc: Exception, sdk: Any, provider: str, secret: str) -> AgentError:
    """Map an exception of the `openai` or `anthropic` SDK module `sdk` to our error kinds."""
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        text = redact(f"{provider} HTTP {status}: {_status_message(exc)}", secret)
        if status in _AUTH_STATUS:
            return AuthError(text)
        if status in _UNAVAILABLE_STATUS:
            return UnavailableError(f"{text} (is agent.base_url right?)")
        if status in _RETRY_STATUS or status >= 500:
            return RetryableError(text, retry_after=parse_retry_after(exc.response.headers))
        return AgentError(text)
    if isinstance(exc, sdk.APITimeoutError):
        return RetryableError(f"{provider}: request timed out")
    if isinstance(exc, sdk.APIConnectionError):
        return RetryableError(redact(f"{provider}: connection error ({exc.__cause__ or exc})", secret))
    if isinstance(exc, sdk.APIResponseValidationError):
        return RetryableError(redact(f"{provider}: malformed response ({exc})", secret))
    return AgentError(redact(f"{provider}: {type(exc).__name__}: {exc}", secret))


def _status_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
    return str(getattr(exc, "message", exc))[:500]


def reply_text(value: Any, provider: str) -> str:
    """A reply's text field as sent (None: ""); `AgentError` for any other JSON value, such as a number: the provider
    answered this request, wrongly, so the attempt records that rather than retrying or failing the run."""
    if value is None or isinstance(value, str):
        return value or ""
    raise AgentError(f"{provider}: malformed reply: its text is a {type(value).__name__} ({str(value)[:80]}), "
                     "not a string")


class Reply(NamedTuple):
    """What a provider's reply says, read by the provider's agent."""

    text: str
    usage: base.Usage | None  # None: the provider sent no usage (estimated by `SDKAgent.respond`)
    finish_reason: str | None


class SDKAgent:
    """One request per call through a provider SDK, with the SDK's own retries off
    (`agents.retry.RetryingAgent` retries instead). The key lives only inside the SDK client.

    Subclasses set `provider`, `sdk` (the SDK module) and `sdk_error` (its base exception), build
    `self._client` and implement
    `_create` (send the conversation) and `_read` (a `Reply`, or None for a reply of the wrong shape).
    """

    provider: str
    sdk: Any
    sdk_error: type[Exception]

    def __init__(
        self, *, model: str, base_url: str | None, api_key_env: str | None, pricing: base.Pricing | None
    ) -> None:
        self._key = api_key_from_env(self.provider, api_key_env)
        self.model = model
        self.base_url = base_url
        self.name = f"{self.provider}:{model}"
        self.pricing = pricing

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    def _create(self, messages: list[base.Message]) -> Any:
        raise NotImplementedError

    def _read(self, raw: Any) -> Reply | None:
        raise NotImplementedError

    def respond(self, messages: list[base.Message], *, problem_id: str, sample: int, turn: int) -> AgentResponse:
        """One request; errors sorted into AuthError / UnavailableError / RetryableError / AgentError."""
        start = time.perf_counter()
        try:
            raw = self._create(messages)
        except self.sdk_error as exc:
            raise sort_sdk_error(exc, self.sdk, self.provider, self._key) from None
        except json.JSONDecodeError as exc:  # a 200 whose body is not JSON
            raise RetryableError(f"{self.provider}: malformed response body ({exc})") from None
        except UnicodeDecodeError as exc:  # a reply, not a gateway's page: answered (and billed), so not retried
            raise AgentError(f"{self.provider}: the reply is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
        latency = time.perf_counter() - start
        reply = self._read(raw) if isinstance(raw, self.sdk.BaseModel) else None
        if reply is None:
            raise RetryableError(redact(f"{self.provider}: malformed response: {str(raw)[:200]}", self._key))
        usage = reply.usage or base.estimate_usage(messages, reply.text, self.model)
        return AgentResponse(
            text=reply.text,
            usage=usage,
            cost_usd=base.priced(usage, self.pricing),
            latency_s=latency,
            model=getattr(raw, "model", None) or self.model,
            raw_id=getattr(raw, "id", None),
            finish_reason=reply.finish_reason,
        )
