"""`make_agent(cfg)`: build any agent kind from a config mapping (a Hydra node or a plain dict).

Every kind comes wrapped in `RetryingAgent`, so retries and rate limits are applied the same way
for all. Keys common to all kinds: `kind` (required), `retry` ({max_attempts, initial_delay_s,
max_delay_s, multiplier, jitter}), `rate_limit` ({requests_per_min, tokens_per_min}). Null
values mean "not set" (the default), except `api_key_env: null`: no key needed. API keys are read from the environment variable named by `api_key_env`,
at construction, so a missing key fails before any work.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from agents.base import Agent, ConfigError, Pricing
from agents.retry import RateLimiter, RetryingAgent, RetryPolicy

_COMMON = {"kind", "retry", "rate_limit"}
_KIND_KEYS: dict[str, set[str]] = {
    "openai": {
        "model", "base_url", "api_key_env", "temperature", "top_p", "max_tokens", "max_tokens_param",
        "seed", "reasoning_effort", "timeout_s", "extra_body", "pricing",
    },
    "anthropic": {
        "model", "base_url", "api_key_env", "max_tokens", "temperature", "top_p", "thinking_budget", "timeout_s",
        "extra_body", "pricing",
    },
    "command": {"command", "timeout_s", "input_format", "model"},
    "replay": {"path"},
    "reference": {"solutions_dir"},
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "openai": ("model",), "anthropic": ("model",), "command": ("command",), "replay": ("path",), "reference": (),
}
AGENT_KINDS: tuple[str, ...] = tuple(_KIND_KEYS)


def make_agent(cfg: Mapping[str, Any]) -> Agent:
    """Build the agent `cfg["kind"]` names, wrapped in `RetryingAgent`; `ConfigError` on bad config."""
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"agent config must be a mapping with a `kind`, got {type(cfg).__name__}")
    cfg = _plain(cfg)
    kind = cfg.get("kind")
    if kind not in _KIND_KEYS:
        raise ConfigError(f"unknown agent kind {kind!r}; valid: {', '.join(AGENT_KINDS)}")
    valid = _KIND_KEYS[kind] | _COMMON
    unknown = sorted(set(cfg) - valid)
    if unknown:
        raise ConfigError(f"unknown key(s) for agent {kind!r}: {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    missing = [k for k in _REQUIRED[kind] if cfg.get(k) in (None, "")]
    if missing:
        raise ConfigError(f"agent {kind!r} needs {', '.join(missing)} (e.g. agent.{missing[0]}=...)")
    policy = RetryPolicy.from_config(cfg.pop("retry", None))
    limiter = RateLimiter.from_config(cfg.pop("rate_limit", None))
    cfg.pop("kind")
    # null means "use the default", except api_key_env: null, which means "no key needed"
    args = {k: v for k, v in cfg.items() if v is not None or k == "api_key_env"}
    try:
        inner = _BUILDERS[kind](args)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"agent {kind!r}: {exc}") from None
    return RetryingAgent(inner, policy, limiter)


def _openai(args: dict[str, Any]) -> Agent:
    from agents.openai_chat import OpenAIChatAgent

    args["pricing"] = Pricing.from_config(args.get("pricing"))
    return OpenAIChatAgent(**args)


def _anthropic(args: dict[str, Any]) -> Agent:
    from agents.anthropic_messages import AnthropicAgent

    args["pricing"] = Pricing.from_config(args.get("pricing"))
    return AnthropicAgent(**args)


def _command(args: dict[str, Any]) -> Agent:
    from agents.command import CommandAgent

    return CommandAgent(**args)


def _replay(args: dict[str, Any]) -> Agent:
    from agents.replay import ReplayAgent

    return ReplayAgent(**args)


def _reference(args: dict[str, Any]) -> Agent:
    from agents.reference import ReferenceAgent

    return ReferenceAgent(**args)


_BUILDERS: dict[str, Callable[[dict[str, Any]], Agent]] = {
    "openai": _openai, "anthropic": _anthropic, "command": _command, "replay": _replay, "reference": _reference,
}


def _plain(value: Any) -> Any:
    """Hydra/OmegaConf nodes (or any mappings and sequences) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value
