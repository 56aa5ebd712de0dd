"""`harness run`: the Hydra app that runs (or resumes) one run per job.

The flow of one job: check the config, select the problems, build the agent (a missing API key
fails here, before anything is written), open the run store (resume checks), then run the loop
against one evaluator and print the summary. Exit codes: 0 finished, 2 bad input, 3 stopped
early but resumable (budget, Ctrl-C), 4 the provider refused the credentials, 1 anything else.
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

import hydra
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console

from agents import ConfigError, PromptBuilder, PromptError, make_agent
from eval import EvalConfig, Evaluator
from harness import overrides as ov
from harness.loop import LoopSettings, RunLoop
from harness.progress import QuietDisplay, RichDisplay
from harness.response_cache import ResponseCache
from harness.store import RunStore, StoreError, safe_name
from harness.summary import print_summary
from problems.problem import Problem, ProblemError
from problems.select import select_problems

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_STOPPED, EXIT_AUTH = 0, 1, 2, 3, 4
_SWEEP_ENV = "HARNESS_SWEEP_KEYS"  # swept keys, passed from `main` to every job (also in launcher subprocesses)
HARNESS_VERSION = "0.1.0"

# Settings a resumed run may change: they alter how the run proceeds, never what an attempt means.
VOLATILE_KEYS = (
    "name", "runs_dir", "quiet", "max_concurrency", "budget", "response_cache",
    "agent.retry", "agent.rate_limit", "agent.timeout_s", "agent.api_key_env",
    "eval.parallel_compiles", "eval.cache_dir", "eval.log_cap_bytes",
)  # fmt: skip

_exit_codes: list[int] = []


class BadInput(Exception):
    """A config the run cannot start with; the message is for the user."""


def main(argv: list[str]) -> int:
    """Entry point of `harness run ARGS...`: check the overrides, then hand over to Hydra."""
    args = get_args_parser().parse_args(argv)  # Hydra's own flags and overrides
    err = Console(stderr=True)
    try:
        ov.validate(args.overrides)
        swept = ov.sweep_keys(args.overrides) if args.multirun else []
    except ov.OverrideError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        return EXIT_BAD_INPUT
    _exit_codes.clear()
    with _argv(["harness run", *argv]), _env(_SWEEP_ENV, ",".join(swept)):
        _hydra_main()
    return max(_exit_codes, default=EXIT_OK)


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> int:
    code = run_job(cfg)
    _exit_codes.append(code)
    return code


def run_job(cfg: DictConfig) -> int:
    """Run one job of the Hydra app; return its exit code (messages go to stderr)."""
    err = Console(stderr=True)
    try:
        return _run(cfg, err)
    except BadInput as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        return EXIT_BAD_INPUT


def _run(cfg: DictConfig, err: Console) -> int:
    name = _job_name(cfg)
    try:
        config: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise BadInput(f"config: {exc}") from None
    config["name"] = name
    settings = _settings(config)
    problems = _problems(config["problems"])
    try:
        agent = make_agent(config["agent"], problems=problems)  # a missing API key stops here, before any work
        prompts = PromptBuilder(
            settings.backend, context=config["context"]["policy"], last_k=config["context"]["k"], **config["prompt"]
        )
        eval_config = EvalConfig(**config["eval"])
    except (ConfigError, PromptError, TypeError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    if settings.max_cost_usd is not None and config["agent"]["kind"] in ("openai", "anthropic") and not config[
        "agent"
    ].get("pricing"):
        raise BadInput(
            "budget.max_cost_usd is set but the agent has no prices: pick a model preset (model=gpt-4o, ...) "
            "or set agent.pricing={input: USD_PER_M, output: USD_PER_M}"
        )
    run_dir = Path(config["runs_dir"]) / name
    quiet = bool(config["quiet"])
    with ExitStack() as stack:
        try:
            evaluator = stack.enter_context(Evaluator(eval_config))
            store = stack.enter_context(
                RunStore.open(run_dir, config, volatile=VOLATILE_KEYS, harness_version=HARNESS_VERSION)
            )
        except (StoreError, ValueError, RuntimeError) as exc:
            raise BadInput(str(exc)) from None
        cache = None
        if config["response_cache"]["enabled"]:
            cache = ResponseCache(config["response_cache"]["path"])
            stack.callback(cache.close)
        store.begin_session()
        resumed = store.totals().attempts
        if resumed and not quiet:
            err.print(f"resuming {run_dir}: {resumed} attempt(s) already recorded", highlight=False)
        loop = RunLoop(
            store=store, agent=agent, evaluator=evaluator, problems=problems, prompts=prompts, settings=settings,
            display=QuietDisplay() if quiet else RichDisplay(err), response_cache=cache, agent_config=config["agent"],
        )  # fmt: skip
        try:
            outcome = loop.run()
        except KeyboardInterrupt:
            store.end_session("interrupted")
            err.print("interrupted; every finished attempt is saved. Re-run the same command to resume.")
            os._exit(EXIT_STOPPED)  # agent requests may still be in flight; their threads must not hold the exit
        store.end_session(outcome.stop_reason)
        if quiet:
            print(run_dir)
        else:
            print_summary(
                Console(), run_dir=str(run_dir), outcome=outcome, attempts=store.attempts(),
                problem_ids=[p.id for p in problems], turns=settings.turns,
            )  # fmt: skip
    for e in outcome.errors:
        err.print(f"[red]error:[/red] {e}", highlight=False)
    if outcome.finished and not outcome.errors:
        return EXIT_OK
    err.print(f"stopped: {outcome.stop_reason}. Finished attempts are saved; re-run the same command to resume.",
              highlight=False)  # fmt: skip
    if outcome.stop_reason.startswith("auth:"):
        return EXIT_AUTH
    if outcome.stop_reason.startswith(("budget:", "interrupted")):
        return EXIT_STOPPED
    return EXIT_ERROR


def _job_name(cfg: DictConfig) -> str:
    """`name`, plus the swept values in a multirun (`ablation-search=serial`), checked to be path-safe."""
    name = str(cfg.name)
    if safe_name(name) != name or name.startswith("."):
        raise BadInput(f"name={name!r}: use only letters, digits and . _ = + - (it names the run directory)")
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return name
    keys = [k for k in os.environ.get(_SWEEP_ENV, "").split(",") if k]
    parts = [o for o in hc.overrides.task if o.split("=", 1)[0].lstrip("+~") in keys]
    suffix = "-".join(safe_name(p) for p in parts) or f"job{hc.job.num}"
    return f"{name}-{suffix}"


def _settings(config: dict[str, Any]) -> LoopSettings:
    try:
        return LoopSettings(
            turns=int(config["turns"]),
            samples=int(config["samples"]),
            backend=str(config["backend"]),
            max_concurrency=int(config["max_concurrency"]),
            target_speedup=None if config["target_speedup"] is None else float(config["target_speedup"]),
            max_tokens=None if config["budget"]["max_tokens"] is None else int(config["budget"]["max_tokens"]),
            max_cost_usd=None if config["budget"]["max_cost_usd"] is None else float(config["budget"]["max_cost_usd"]),
        )
    except (TypeError, ValueError) as exc:
        raise BadInput(str(exc)) from None


def _problems(cfg: dict[str, Any]) -> list[Problem]:
    try:
        problems = select_problems(str(cfg["spec"]))
    except ProblemError as exc:
        raise BadInput(str(exc)) from None
    limit = cfg.get("limit")
    if limit is not None:
        if int(limit) < 1:
            raise BadInput(f"problems.limit must be >= 1 or null, got {limit}")
        problems = problems[: int(limit)]
    if not problems:
        raise BadInput(f"problems.spec={cfg['spec']!r} selects no problem")
    return problems


@contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


@contextmanager
def _env(key: str, value: str) -> Iterator[None]:
    saved = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved
