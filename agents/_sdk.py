"""Shared plumbing of the SDK-backed agents: API keys from the environment, error sorting."""

from __future__ import annotations

import email.utils
import os
import time
from typing import Any

from agents.base import AgentError, AuthError, ConfigError, RetryableError

# Status codes worth retrying: request timeout, conflict (lock contention), rate limit, server errors.
_RETRY_STATUS = {408, 409, 429}
_AUTH_STATUS = {401, 403}
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
