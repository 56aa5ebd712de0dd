"""Agents: LLM providers and offline sources of candidate kernels behind one interface.

    from agents import make_agent, PromptBuilder, TurnRecord, extract_code
    agent = make_agent({"kind": "reference"})
    messages = PromptBuilder("triton").messages(problem.source, history)
    response = agent.respond(messages, problem_id=problem.id, sample=1, turn=1)  # both count from 1
    code = extract_code(response.text)   # or ExtractionError -> a format_error turn
"""

from agents.base import (
    ABSTENTION_REASON,
    Agent,
    AgentError,
    AgentResponse,
    AuthError,
    ConfigError,
    Message,
    Pricing,
    RetryableError,
    UnavailableError,
    Usage,
)
from agents.extract import ExtractionError, extract_code
from agents.factory import AGENT_KINDS, make_agent
from agents.prompting import PromptBuilder, PromptError, TurnRecord
from agents.retry import RateLimiter, RetryingAgent, RetryPolicy

__all__ = [
    "ABSTENTION_REASON",
    "AGENT_KINDS",
    "Agent",
    "AgentError",
    "AgentResponse",
    "AuthError",
    "ConfigError",
    "ExtractionError",
    "Message",
    "Pricing",
    "PromptBuilder",
    "PromptError",
    "RateLimiter",
    "RetryPolicy",
    "RetryableError",
    "RetryingAgent",
    "TurnRecord",
    "UnavailableError",
    "Usage",
    "extract_code",
    "make_agent",
]
