"""The `openai` agent: Chat Completions through the official SDK, at any OpenAI-compatible base_url."""

from __future__ import annotations

import json
import time
from typing import Any, Mapping

import openai

from agents._sdk import api_key_from_env, redact, sort_sdk_error
from agents.base import AgentResponse, Message, Pricing, RetryableError, Usage, priced


class OpenAIChatAgent:
    """Chat Completions (OpenAI, vLLM, SGLang, Ollama, ...). The SDK's own retries are off;
    `agents.retry.RetryingAgent` retries instead. The key lives only inside the SDK client."""

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
        self._key = api_key_from_env("openai", api_key_env)
        self.model = model
        self.base_url = base_url
        self.name = f"openai:{model}"
        self.pricing = pricing
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

    def __repr__(self) -> str:
        return f"OpenAIChatAgent(model={self.model!r}, base_url={self.base_url!r})"

    def respond(self, messages: list[Message], *, problem_id: str, sample: int, turn: int) -> AgentResponse:
        """One Chat Completions request; errors sorted into AuthError / RetryableError / AgentError."""
        payload = [{"role": m.role, "content": m.content} for m in messages]
        start = time.perf_counter()
        try:
            completion = self._client.chat.completions.create(model=self.model, messages=payload, **self._params)
        except openai.OpenAIError as exc:
            raise sort_sdk_error(exc, openai, "openai", self._key) from None
        except json.JSONDecodeError as exc:  # a 200 whose body is not JSON
            raise RetryableError(f"openai: malformed response body ({exc})") from None
        latency = time.perf_counter() - start
        choices = getattr(completion, "choices", None)
        if not isinstance(completion, openai.BaseModel) or not choices:
            raise RetryableError(redact(f"openai: malformed response without choices: {str(completion)[:200]}", self._key))
        choice = choices[0]
        message = getattr(choice, "message", None)
        text = (getattr(message, "content", None) or getattr(message, "refusal", None) or "") if message else ""
        usage = _usage(getattr(completion, "usage", None))
        return AgentResponse(
            text=text,
            usage=usage,
            cost_usd=priced(usage, self.pricing),
            latency_s=latency,
            model=getattr(completion, "model", None) or self.model,
            raw_id=getattr(completion, "id", None),
            finish_reason=getattr(choice, "finish_reason", None),
        )


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    details = getattr(raw, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(
        input_tokens=int(getattr(raw, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(raw, "completion_tokens", 0) or 0),
        cached_tokens=int(cached or 0),
    )
