"""Agents: LLM providers and offline sources of candidate kernels behind one interface.

    from agents import make_agent, PromptBuilder, TurnRecord, extract_code
    agent = make_agent({"kind": "reference"})
    messages = PromptBuilder("triton").messages(problem.source, history)
    response = agent.respond(messages, problem_id=problem.id, sample=1, turn=1)  # both count from 1
    code = extract_code(response.text)   # or ExtractionError -> a format_error turn
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ABSTENTION_REASON": "agents.base",
    "Agent": "agents.base",
    "AgentError": "agents.base",
    "AgentResponse": "agents.base",
    "AuthError": "agents.base",
    "CHARS_PER_TOKEN": "agents.base",
    "ConfigError": "agents.base",
    "Message": "agents.base",
    "Pricing": "agents.base",
    "RetryableError": "agents.base",
    "UnavailableError": "agents.base",
    "Usage": "agents.base",
    "ExtractionError": "agents.extract",
    "extract_code": "agents.extract",
    "AGENT_KINDS": "agents.factory",
    "make_agent": "agents.factory",
    "EXAMPLES_DIR": "agents.prompting",
    "PromptBuilder": "agents.prompting",
    "PromptError": "agents.prompting",
    "TurnRecord": "agents.prompting",
    "fenced": "agents.prompting",
    "visible_source": "agents.prompting",
    "RateLimiter": "agents.retry",
    "RetryPolicy": "agents.retry",
    "RetryingAgent": "agents.retry",
    "SETTINGS": "agents.settings",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Load an exported name on first use, so that importing the package loads none of its modules."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'agents' has no attribute {name!r}")
