"""`make_agent(cfg)`: build any agent kind from a config mapping (a Hydra node or a plain dict).

The keys, types and defaults of each kind are its settings class in `agents.settings`; a key a
mapping leaves out, or sets to null, takes the kind's default, except `api_key_env: null`: no key
needed. Every kind comes wrapped in `RetryingAgent`, so retries and rate limits are applied the
same way for all. API keys are read from the environment variable named by `api_key_env`, at
construction, so a missing key fails before any work.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from agents.base import Agent, ConfigError
from agents.retry import RateLimiter, RateLimits, RetryingAgent, RetryPolicy
from agents.settings import (SETTINGS, AnthropicSettings, CommandSettings, OpenAISettings,
                             ReferenceSettings, ReplaySettings, refuse_settings_that_cannot_work)

AGENT_KINDS: tuple[str, ...] = tuple(SETTINGS)


def make_agent(cfg: Mapping[str, Any], backend: str = "triton") -> Agent:  # issue 56: backend
    """Build the agent `cfg["kind"]` names, wrapped in `RetryingAgent`; `ConfigError` on bad config. `backend` is
    the run's: the reference agent serves that language's solutions."""
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"agent config must be a mapping with a `kind`, got {type(cfg).__name__}")
    cfg = _plain(cfg)
    kind = cfg.get("kind")
    if kind not in SETTINGS:
        raise ConfigError(f"unknown agent kind {kind!r}; valid: {', '.join(AGENT_KINDS)}")
    fields = dataclasses.fields(SETTINGS[kind])
    valid = {f.name for f in fields}
    unknown = sorted(set(cfg) - valid)
    if unknown:
        raise ConfigError(f"unknown key(s) for agent {kind!r}: {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    missing = [f.name for f in fields if f.metadata.get("required") and cfg.get(f.name) in (None, "")]
    if missing:
        raise ConfigError(f"agent {kind!r} needs {', '.join(missing)} (e.g. agent.{missing[0]}=...)")
    defaults = SETTINGS[kind]()
    retry = RetryPolicy.from_config(cfg.pop("retry", None), base=defaults.retry)
    rate_limit = RateLimits.from_config(cfg.pop("rate_limit", None))
    # null means "use the default", except api_key_env: null, which means "no key needed"
    args = {k: v for k, v in cfg.items() if v is not None or k == "api_key_env"}
    settings = dataclasses.replace(defaults, **args, retry=retry, rate_limit=rate_limit)
    refuse_settings_that_cannot_work(settings)
    try:
        inner = _reference(settings, backend) if kind == "reference" else _BUILDERS[kind](settings)  # issue 56
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"agent {kind!r}: {exc}") from None
    return RetryingAgent(inner, settings.retry, RateLimiter.of(settings.rate_limit))


def _openai(settings: OpenAISettings) -> Agent:
    from agents._openai_chat import OpenAIChatAgent

    return OpenAIChatAgent(settings)


def _anthropic(settings: AnthropicSettings) -> Agent:
    from agents._anthropic_messages import AnthropicAgent

    return AnthropicAgent(settings)


def _command(settings: CommandSettings) -> Agent:
    from agents._command import CommandAgent

    return CommandAgent(settings)


def _replay(settings: ReplaySettings) -> Agent:
    from agents._replay import ReplayAgent

    return ReplayAgent(settings)


def _reference(settings: ReferenceSettings, backend: str = "triton") -> Agent:  # issue 56: backend
    from agents._reference import ReferenceAgent

    return ReferenceAgent(settings, backend)  # issue 56


# imported when built: each SDK is an optional extra, loaded only for its own kind
_BUILDERS: dict[str, Callable[[Any], Agent]] = {
    "openai": _openai, "anthropic": _anthropic, "command": _command, "replay": _replay, "reference": _reference,
}


def _plain(value: Any) -> Any:
    """Hydra/OmegaConf nodes (or any mappings and sequences) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value
