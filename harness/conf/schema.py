"""The schema of `harness run`'s root config: every top-level key, its type and its default.

`config.yaml` holds only the defaults list (which group options a run starts from) and Hydra's own
settings; the groups have their own schemas (`agents.settings`, `harness.executor_settings`, `eval.config`),
registered beside this one in `harness.conf`. Hydra checks every value against these types, so a
wrong type is refused before a run starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from eval import DEFAULT_BACKEND, PROFILE_PROMPT_CHARS  # profile (issue 57): the last
from harness.loop import LoopSettings


@dataclass
class Search:
    """Set by search=serial|parallel (the ablation of how attempts are spent). attempts: attempts per problem
    that both search settings spend, as turns or as samples."""

    name: str = "none"
    attempts: int = 4


@dataclass
class Context:
    """policy: full (every earlier reply) | last_k (only the last k turns' code and feedback)."""

    policy: str = "full"
    k: int = 2


@dataclass
class Budget:
    """The whole run's, resumed sessions included; checked before each request. null: no limit."""

    max_tokens: Optional[int] = None
    max_cost_usd: Optional[float] = None


@dataclass
class ResponseCache:
    """Opt-in: replies keyed by a hash of the request, so repeated requests are free."""

    enabled: bool = False
    path: str = "${runs_dir}/response_cache.sqlite"


@dataclass
class Prompt:
    """Templates in agents/prompts/ (or prompts_dir, or a path to a .md file). template: null: the backend's own
    template. system: null sends no system message. hardware: auto (this GPU), a preset (H100-SXM, H100-PCIe,
    H200, A100-SXM4-80GB) or null. profile_chars: the most characters of an evaluation's profile block
    (`eval.profile`) that a feedback message carries; 0 leaves it out."""

    template: Optional[str] = None
    system: Optional[str] = "system"
    feedback: str = "feedback"
    hardware: Optional[str] = "auto"
    prompts_dir: Optional[str] = None
    profile_chars: int = PROFILE_PROMPT_CHARS  # profile (issue 57)


@dataclass
class RunConfig:
    """`harness run`'s config.

    name: the run directory is runs_dir/name; re-running a name resumes it.
    turns: attempts per sample, each after the evaluator's feedback on the previous one (numbered from 1).
    samples: independent samples per problem (numbered from 1).
    backend: the language candidates are written in (`eval.backends.BACKENDS`).
    max_concurrency: trajectories in flight at once (agent requests and evaluations overlap); null: the
      evaluator's workers over all its GPUs (at least 4); raise it for an LLM agent.
    target_speedup: stop a sample once a correct attempt reaches this measured speedup.
    stop_grace_s: after Ctrl-C, SIGTERM or SIGHUP, how long the attempts in flight may take to finish and be
      recorded before they are abandoned (a resume runs them again); keep it under the scheduler's kill delay.
    quiet: no progress bars or tables; prints only the run directory.
    agent, model, problems, eval, executor: the config groups, filled by the defaults list of config.yaml.
    """

    name: str = "${agent.kind}-${problems.name}"
    runs_dir: str = "runs"
    turns: int = LoopSettings.turns
    samples: int = LoopSettings.samples
    backend: str = DEFAULT_BACKEND
    max_concurrency: Optional[int] = None
    target_speedup: Optional[float] = None
    stop_grace_s: float = LoopSettings.stop_grace_s
    search: Search = field(default_factory=Search)
    context: Context = field(default_factory=Context)
    budget: Budget = field(default_factory=Budget)
    response_cache: ResponseCache = field(default_factory=ResponseCache)
    prompt: Prompt = field(default_factory=Prompt)
    quiet: bool = False
    agent: Any = MISSING
    model: Any = MISSING
    problems: Any = MISSING
    eval: Any = MISSING
    executor: Any = MISSING
