"""The settings of each agent kind: their keys, types and defaults, in one place.

Each dataclass is the schema of one `agent=KIND` option of `harness run` (registered with Hydra in
`harness.conf`; `harness/conf/agent/KIND.yaml` holds only what differs, such as the model preset's
name and prices), what `make_agent` checks a config against, and what the agent's constructor takes.
Keys common to every kind: `kind`, `retry` (`agents.retry.RetryPolicy`) and `rate_limit`. A field with
`required` in its metadata must be set (it has no useful default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import urlsplit

from agents.base import ConfigError
from agents.retry import RateLimits, RetryPolicy


def required() -> Any:
    """A field that must be set (null until it is): `make_agent` names it when it is missing."""
    return field(default=None, metadata={"required": True})


@dataclass
class OpenAISettings:
    """OpenAI Chat Completions through the official SDK; any OpenAI-compatible server via base_url (vLLM,
    SGLang, Ollama, ...). The key is read from the environment variable `api_key_env` (null: a local server
    without authentication). max_tokens_param: `max_tokens` for servers that predate max_completion_tokens.
    reasoning_effort: low | medium | high, for reasoning models. pricing: USD per million tokens
    ({input, output, cached_input}); null: costs recorded as unknown."""

    kind: str = "openai"
    model: Optional[str] = required()
    base_url: Optional[str] = None
    api_key_env: Optional[str] = "OPENAI_API_KEY"
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    max_tokens: Optional[int] = None
    max_tokens_param: str = "max_completion_tokens"
    seed: Optional[int] = None
    reasoning_effort: Optional[str] = None
    timeout_s: float = 600.0
    extra_body: Any = None  # a mapping sent with each request (a typed dict here would break Hydra merging into null)
    pricing: Any = None  # checked by `agents.base.Pricing.from_config`
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    rate_limit: RateLimits = field(default_factory=RateLimits)


@dataclass
class AnthropicSettings:
    """Anthropic Messages API through the official SDK; key from the environment variable `api_key_env`.
    thinking_budget: extended thinking, in tokens (>= 1024 and below max_tokens)."""

    kind: str = "anthropic"
    model: Optional[str] = required()
    base_url: Optional[str] = None
    api_key_env: Optional[str] = "ANTHROPIC_API_KEY"
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    max_tokens: int = 8192
    thinking_budget: Optional[int] = None
    timeout_s: float = 600.0
    extra_body: Any = None  # a mapping sent with each request (a typed dict here would break Hydra merging into null)
    pricing: Any = None  # checked by `agents.base.Pricing.from_config`
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    rate_limit: RateLimits = field(default_factory=RateLimits)


@dataclass
class CommandSettings:
    """Any CLI model tool: the conversation goes to the command's stdin, its stdout is the reply.
    command: a shell command line (e.g. agent.command='llm -m mymodel'), or a list of arguments run directly. input_format: text (### Role
    sections) | json ([{role, content}, ...]). model: a label for reports; null: the command's first word."""

    kind: str = "command"
    command: Any = required()  # a string or a list of arguments
    timeout_s: float = 600.0
    input_format: str = "text"
    model: Optional[str] = None
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=3))
    rate_limit: RateLimits = field(default_factory=RateLimits)


@dataclass
class ReplaySettings:
    """Replays the replies an earlier run recorded for the same (problem, sample, turn): free and deterministic.
    path: a run directory (runs/NAME) or a results .jsonl file."""

    kind: str = "replay"
    path: Optional[str] = required()
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=1))
    rate_limit: RateLimits = field(default_factory=RateLimits)


@dataclass
class ReferenceSettings:
    """Offline: serves problems/solutions/ (and says so honestly where a problem has none). No network.
    solutions_dir: null: problems/solutions/."""

    kind: str = "reference"
    solutions_dir: Optional[str] = None
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=1))
    rate_limit: RateLimits = field(default_factory=RateLimits)


SETTINGS: dict[str, type] = {
    cls.kind: cls for cls in (OpenAISettings, AnthropicSettings, CommandSettings, ReplaySettings, ReferenceSettings)
}


def refuse_settings_that_cannot_work(settings: Any) -> None:
    """`ConfigError` naming a setting under which no request could ever succeed, so the run stops before any work
    with the setting named (a zero timeout fails every request; a base_url that is not a URL reads as an
    unreachable agent)."""
    kind = settings.kind
    timeout = getattr(settings, "timeout_s", None)
    if timeout is not None and not 0 < timeout < float("inf"):
        raise ConfigError(f"agent {kind!r}: timeout_s must be a number of seconds > 0, got {timeout}")
    base_url = getattr(settings, "base_url", None)
    if base_url is not None:
        parts = urlsplit(str(base_url))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"agent {kind!r}: base_url must be an http:// or https:// URL (such as "
                              f"http://localhost:8000/v1), got {base_url!r}")
