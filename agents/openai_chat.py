"""The `openai` agent: Chat Completions through the official SDK, at any OpenAI-compatible base_url."""

from __future__ import annotations

from typing import Any, Mapping

import openai

from agents._sdk import Reply, SDKAgent
from agents.base import Message, Pricing, Usage


class OpenAIChatAgent(SDKAgent):
    """Chat Completions (OpenAI, vLLM, SGLang, Ollama, ...); the shared handling is `SDKAgent`'s."""

    provider = "openai"
    sdk = openai
    sdk_error = openai.OpenAIError

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        max_tokens_param: str = "max_completion_tokens",
        seed: int | None = None,
        reasoning_effort: str | None = None,
        timeout_s: float = 600.0,
        extra_body: Mapping[str, Any] | None = None,
        pricing: Pricing | None = None,
    ) -> None:
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(f"max_tokens_param must be max_tokens or max_completion_tokens, got {max_tokens_param!r}")
        super().__init__(model=model, base_url=base_url, api_key_env=api_key_env, pricing=pricing)
        self._client = openai.OpenAI(api_key=self._key, base_url=base_url, max_retries=0, timeout=timeout_s)
        params: dict[str, Any] = {
            "temperature": temperature,
            "top_p": top_p,
            max_tokens_param: max_tokens,
            "seed": seed,
            "reasoning_effort": reasoning_effort,
        }
        self._params = {k: v for k, v in params.items() if v is not None}
        if extra_body:
            self._params["extra_body"] = dict(extra_body)

    def _create(self, messages: list[Message]) -> Any:
        payload = [{"role": m.role, "content": m.content} for m in messages]
        return self._client.chat.completions.create(model=self.model, messages=payload, **self._params)

    def _read(self, raw: Any) -> Reply | None:
        """The first choice's text (or refusal); None when the reply has no choices."""
        choices = getattr(raw, "choices", None)
        if not choices:
            return None
        message = getattr(choices[0], "message", None)
        text = (getattr(message, "content", None) or getattr(message, "refusal", None) or "") if message else ""
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
