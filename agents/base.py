"""The agent interface: a conversation goes in, one response (text, usage, cost, latency) comes out.

Every agent kind (OpenAI, Anthropic, shell command, replay, reference) implements `Agent`, so the
run loop never knows which provider it talks to. Errors are sorted into kinds the loop acts on:
`AuthError` stops the run; `UnavailableError` (the agent could not be reached or run, including a
`RetryableError` once the central retries in `agents.retry` run out) leaves the attempt unfinished,
so a resume retries it; any other `AgentError` is a refusal of this request, recorded for the attempt.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Protocol, runtime_checkable

Role = Literal["system", "user", "assistant"]
ROLES: tuple[str, ...] = ("system", "user", "assistant")


class AgentError(RuntimeError):
    """An agent could not produce a reply; the message says why (never contains an API key)."""


class ConfigError(AgentError):
    """Bad agent configuration (unknown kind or key, missing API key); raised before any request."""


class AuthError(AgentError):
    """The provider refused the credentials (HTTP 401/403): retrying cannot help, stop the run."""


class UnavailableError(AgentError):
    """The agent could not be reached or run (connection refused, HTTP 404, a command that does not
    exist, retries exhausted): no answer about this request, so the attempt is not finished."""


class RetryableError(UnavailableError):
    """A transient failure (HTTP 408/429/5xx, timeout, connection error, malformed body).

    `retry_after` is the wait in seconds the provider asked for, if it said; `attempts` is set
    once the central retry loop gives up.
    """

    def __init__(self, message: str, *, retry_after: float | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.attempts = attempts


@dataclass(frozen=True)
class Message:
    """One message of a conversation."""

    role: Role
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"message role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"message content must be str, got {type(self.content).__name__}")


@dataclass(frozen=True)
class Usage:
    """Token counts of one request. `input_tokens` includes `cached_tokens` (the cached part). `estimated`: the
    provider sent no usage, so the counts were made here (`estimate_usage`), and so is any cost priced from them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class Pricing:
    """USD per million tokens; `cached_input` defaults to the input price when not given."""

    input: float
    output: float
    cached_input: float | None = None

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> "Pricing | None":
        """`{input, output, cached_input}` -> Pricing; None or {} -> None (cost unknown)."""
        if not cfg:
            return None
        valid = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(cfg) - valid)
        if unknown:
            raise ConfigError(f"unknown pricing key(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
        missing = [k for k in ("input", "output") if cfg.get(k) is None]
        if missing:
            raise ConfigError(f"pricing needs {' and '.join(missing)} (USD per million tokens)")
        values = {k: None if v is None else float(v) for k, v in cfg.items()}
        if any(v is not None and v < 0 for v in values.values()):
            raise ConfigError(f"prices must be >= 0, got {dict(cfg)}")
        return cls(**values)

    def cost(self, usage: Usage) -> float:
        """Cost in USD of one request with this usage."""
        cached_price = self.input if self.cached_input is None else self.cached_input
        uncached = max(usage.input_tokens - usage.cached_tokens, 0)
        return (uncached * self.input + usage.cached_tokens * cached_price + usage.output_tokens * self.output) / 1e6


# How an attempt where the agent offered no candidate is recorded (the reason starts so), and how a replay knows it.
ABSTENTION_REASON = "the agent offered no candidate"


@dataclass(frozen=True)
class AgentResponse:
    """What one call to an agent produced.

    cost_usd is None when no prices are configured (unknown, not free); finish_reason is the
    provider's stop reason ("stop", "length", "end_turn", "max_tokens", ...) when it gives one;
    attempts counts the requests made, retries included.
    """

    text: str
    usage: Usage
    cost_usd: float | None
    latency_s: float
    model: str
    raw_id: str | None = None
    finish_reason: str | None = None
    attempts: int = 1
    abstained: bool = False  # the agent says it has no candidate here (the reference agent without a solution)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", storable(self.text))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data for the run store."""
        return dataclasses.asdict(self)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` with each lone surrogate (which a JSON reply may carry, but no UTF-8 file or database can hold) as
    U+FFFD, so that any reply can be stored, shown and sent back."""
    return _LONE_SURROGATE.sub("\ufffd", text)


@runtime_checkable
class Agent(Protocol):
    """Anything that answers a conversation. Implementations must be safe to call from threads."""

    name: str

    def respond(self, messages: list[Message], *, problem_id: str, sample: int, turn: int) -> AgentResponse:
        """Reply to `messages` (system first, then alternating user/assistant, ending with user)."""
        ...


CHARS_PER_TOKEN = 4  # the stated estimate where no tokenizer is installed: about 4 characters per token


def count_tokens(text: str, model: str = "") -> int:
    """Tokens in `text`: the model's tokenizer where `tiktoken` is installed and has its encoding (OpenAI models),
    otherwise `CHARS_PER_TOKEN` characters per token, rounded up."""
    encoding = _encoding(model)
    if encoding is None:
        return -(-len(text) // CHARS_PER_TOKEN)
    return len(encoding.encode(text, disallowed_special=()))


@functools.lru_cache(maxsize=16)
def _encoding(model: str) -> Any:
    """`tiktoken`'s encoding for `model` (cl100k_base for a model it does not know), or None where tiktoken is not
    installed or cannot load it: it downloads encodings on first use, which an offline machine cannot (inspect-ai
    installs tiktoken as a dependency), so the estimate stands in, once, not a network retry per count."""
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        try:
            return tiktoken.encoding_for_model(model)
        except KeyError:
            return tiktoken.get_encoding("cl100k_base")
    except Exception:  # noqa: BLE001  no network, no cached encoding: the estimate
        return None


def estimate_usage(messages: list[Message], reply: str, model: str = "") -> Usage:
    """The usage of a request whose provider sent none (never 0 for a real exchange)."""
    prompt = sum(count_tokens(m.content, model) for m in messages)
    return Usage(input_tokens=prompt, output_tokens=count_tokens(reply, model), estimated=True)


def priced(usage: Usage, pricing: Pricing | None) -> float | None:
    """The cost of `usage`, or None when prices are unknown."""
    return None if pricing is None else pricing.cost(usage)
