"""The `anthropic` agent: the Messages API through the official SDK, with optional extended thinking."""

from __future__ import annotations

from typing import Any

import anthropic

from agents._sdk import Reply, SDKAgent, reply_text
from agents.base import Message, Pricing, Usage
from agents.settings import AnthropicSettings


class AnthropicAgent(SDKAgent):
    """Messages API. System messages go into the separate `system` field; only text blocks make
    the reply (thinking blocks are dropped). temperature/top_p, when set, are sent as body fields
    (this SDK version has no parameters for them); any other request field (e.g. adaptive thinking,
    output_config) goes through `extra_body`. The shared handling is `SDKAgent`'s."""

    provider = "anthropic"
    sdk = anthropic
    sdk_error = anthropic.AnthropicError

    def __init__(self, settings: AnthropicSettings) -> None:
        s = settings
        if s.thinking_budget is not None and not 1024 <= s.thinking_budget < s.max_tokens:
            raise ValueError(f"thinking_budget must be >= 1024 and below max_tokens ({s.max_tokens}), "
                             f"got {s.thinking_budget}")
        super().__init__(model=str(s.model), base_url=s.base_url, api_key_env=s.api_key_env,
                         pricing=Pricing.from_config(s.pricing))
        self._client = anthropic.Anthropic(api_key=self._key, base_url=s.base_url, max_retries=0, timeout=s.timeout_s)
        self._params: dict[str, Any] = {"max_tokens": s.max_tokens}
        if s.thinking_budget is not None:
            self._params["thinking"] = {"type": "enabled", "budget_tokens": s.thinking_budget}
        # This SDK version lists no sampling parameters; set ones go in the body, for the API to judge.
        sampling = {k: v for k, v in (("temperature", s.temperature), ("top_p", s.top_p)) if v is not None}
        if s.extra_body or sampling:
            self._params["extra_body"] = {**sampling, **dict(s.extra_body or {})}

    def _create(self, messages: list[Message]) -> Any:
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        payload = [{"role": m.role, "content": m.content} for m in messages if m.role != "system"]
        extra = {"system": system} if system else {}
        return self._client.messages.create(model=self.model, messages=payload, **extra, **self._params)

    def _read(self, raw: Any) -> Reply | None:
        """The text blocks joined; None when the reply has no content list."""
        content = getattr(raw, "content", None)
        if not isinstance(content, list):
            return None
        text = "".join(reply_text(getattr(b, "text", None), self.provider) for b in content
                       if getattr(b, "type", None) == "text")
        return Reply(text, _usage(getattr(raw, "usage", None)), getattr(raw, "stop_reason", None))


def _usage(raw: Any) -> Usage | None:
    """Anthropic counts uncached input, cache reads and cache writes apart; ours holds the total."""
    if raw is None:  # the provider sent no usage: estimated by the caller, never recorded as 0
        return None
    uncached = int(getattr(raw, "input_tokens", 0) or 0)
    read = int(getattr(raw, "cache_read_input_tokens", 0) or 0)
    written = int(getattr(raw, "cache_creation_input_tokens", 0) or 0)
    return Usage(
        input_tokens=uncached + read + written,
        output_tokens=int(getattr(raw, "output_tokens", 0) or 0),
        cached_tokens=read,
    )
