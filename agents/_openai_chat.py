"""The `openai` agent: Chat Completions through the official SDK, at any OpenAI-compatible base_url."""

from __future__ import annotations

from typing import Any

import openai

from agents._sdk import Reply, SDKAgent, reply_text
from agents.base import Message, Pricing, Usage
from agents.settings import OpenAISettings


class OpenAIChatAgent(SDKAgent):
    """Chat Completions (OpenAI, vLLM, SGLang, Ollama, ...); the shared handling is `SDKAgent`'s."""

    provider = "openai"
    sdk = openai
    sdk_error = openai.OpenAIError

    def __init__(self, settings: OpenAISettings) -> None:
        s = settings
        if s.max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(f"max_tokens_param must be max_tokens or max_completion_tokens, got {s.max_tokens_param!r}")
        super().__init__(model=str(s.model), base_url=s.base_url, api_key_env=s.api_key_env,
                         pricing=Pricing.from_config(s.pricing))
        self._client = openai.OpenAI(api_key=self._key, base_url=s.base_url, max_retries=0, timeout=s.timeout_s)
        params: dict[str, Any] = {
            "temperature": s.temperature,
            "top_p": s.top_p,
            s.max_tokens_param: s.max_tokens,
            "seed": s.seed,
            "reasoning_effort": s.reasoning_effort,
        }
        self._params = {k: v for k, v in params.items() if v is not None}
        if s.extra_body:
            self._params["extra_body"] = dict(s.extra_body)

    def _create(self, messages: list[Message]) -> Any:
        payload = [{"role": m.role, "content": m.content} for m in messages]
        return self._client.chat.completions.create(model=self.model, messages=payload, **self._params)

    def _read(self, raw: Any) -> Reply | None:
        """The first choice's text (or refusal); None when the reply has no choices."""
        choices = getattr(raw, "choices", None)
        if not choices:
            return None
        message = getattr(choices[0], "message", None)
        content, refusal = (getattr(message, key, None) for key in ("content", "refusal"))
        text = reply_text(content, self.provider) or reply_text(refusal, self.provider)
        return Reply(text, _usage(getattr(raw, "usage", None)), getattr(choices[0], "finish_reason", None))


def _usage(raw: Any) -> Usage | None:
    if raw is None:  # the provider sent no usage: estimated by the caller, never recorded as 0
        return None
    details = getattr(raw, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(
        input_tokens=int(getattr(raw, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(raw, "completion_tokens", 0) or 0),
        cached_tokens=int(cached or 0),
    )
