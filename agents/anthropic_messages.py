"""The `anthropic` agent: the Messages API through the official SDK, with optional extended thinking."""

from __future__ import annotations

import json
import time
from typing import Any, Mapping

import anthropic

from agents._sdk import api_key_from_env, redact, sort_sdk_error
from agents.base import AgentResponse, Message, Pricing, RetryableError, Usage, priced


class AnthropicAgent:
    """Messages API. System messages go into the separate `system` field; only text blocks make
    the reply (thinking blocks are dropped). The SDK's own retries are off (see `agents.retry`).
    temperature/top_p, when set, are sent as body fields (this SDK version has no parameters for
    them); any other request field (e.g. adaptive thinking, output_config) goes through `extra_body`."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key_env: str | None = "ANTHROPIC_API_KEY",
        max_tokens: int = 8192,
        temperature: float | None = None,
        top_p: float | None = None,
        thinking_budget: int | None = None,
        timeout_s: float = 600.0,
        extra_body: Mapping[str, Any] | None = None,
        pricing: Pricing | None = None,
    ) -> None:
        if thinking_budget is not None and not 1024 <= thinking_budget < max_tokens:
            raise ValueError(f"thinking_budget must be >= 1024 and below max_tokens ({max_tokens}), got {thinking_budget}")
        self._key = api_key_from_env("anthropic", api_key_env)
        self.model = model
        self.base_url = base_url
        self.name = f"anthropic:{model}"
        self.pricing = pricing
        self._client = anthropic.Anthropic(api_key=self._key, base_url=base_url, max_retries=0, timeout=timeout_s)
        self._params: dict[str, Any] = {"max_tokens": max_tokens}
        if thinking_budget is not None:
            self._params["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
        # This SDK version lists no sampling parameters; set ones go in the body, for the API to judge.
        sampling = {k: v for k, v in (("temperature", temperature), ("top_p", top_p)) if v is not None}
        if extra_body or sampling:
            self._params["extra_body"] = {**sampling, **dict(extra_body or {})}

    def __repr__(self) -> str:
        return f"AnthropicAgent(model={self.model!r}, base_url={self.base_url!r})"

    def respond(self, messages: list[Message], *, problem_id: str, sample: int, turn: int) -> AgentResponse:
        """One Messages request; errors sorted into AuthError / RetryableError / AgentError."""
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        payload = [{"role": m.role, "content": m.content} for m in messages if m.role != "system"]
        extra = {"system": system} if system else {}
        start = time.perf_counter()
        try:
            reply = self._client.messages.create(model=self.model, messages=payload, **extra, **self._params)
        except anthropic.AnthropicError as exc:
            raise sort_sdk_error(exc, anthropic, "anthropic", self._key) from None
        except json.JSONDecodeError as exc:  # a 200 whose body is not JSON
            raise RetryableError(f"anthropic: malformed response body ({exc})") from None
        latency = time.perf_counter() - start
        content = getattr(reply, "content", None)
        if not isinstance(reply, anthropic.BaseModel) or not isinstance(content, list):
            raise RetryableError(redact(f"anthropic: malformed response without content: {str(reply)[:200]}", self._key))
        text = "".join(getattr(block, "text", "") or "" for block in content if getattr(block, "type", None) == "text")
        usage = _usage(getattr(reply, "usage", None))
        return AgentResponse(
            text=text,
            usage=usage,
            cost_usd=priced(usage, self.pricing),
            latency_s=latency,
            model=getattr(reply, "model", None) or self.model,
            raw_id=getattr(reply, "id", None),
            finish_reason=getattr(reply, "stop_reason", None),
        )


def _usage(raw: Any) -> Usage:
    """Anthropic counts uncached input, cache reads and cache writes apart; ours holds the total."""
    if raw is None:
        return Usage()
    uncached = int(getattr(raw, "input_tokens", 0) or 0)
    read = int(getattr(raw, "cache_read_input_tokens", 0) or 0)
    written = int(getattr(raw, "cache_creation_input_tokens", 0) or 0)
    return Usage(
        input_tokens=uncached + read + written,
        output_tokens=int(getattr(raw, "output_tokens", 0) or 0),
        cached_tokens=read,
    )
