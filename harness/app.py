"""`harness run`: the Hydra app that runs (or resumes) one run per job.

The flow of one job: check the config, select the problems, build the agent (a missing API key
fails here, before anything is written), take the run directory's lock (a second run of the name is
refused here, before any evaluator starts), open the run store (resume checks), then run the loop
against one evaluator and print the summary. Exit codes (docs/exit-codes.md): 0 finished, 2 bad
input or a run store that cannot be written (a full disk; resumable), 3 stopped early but
resumable (budget; Ctrl-C, SIGTERM or SIGHUP at any moment), 4 the provider refused the
credentials, 5 the agent could not be reached (attempts left unfinished, resumable), 6 the
provider refused the session's first requests (nothing recorded for them, resumable), 1 anything
else.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator, NoReturn

import hydra
from hydra._internal.utils import get_args_parser

import harness.conf  # noqa: F401  registers the config schemas with Hydra
from harness.conf.schema import RunConfig
from hydra import compose
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console

from agents import ConfigError, PromptBuilder, PromptError, make_agent
from eval import DEFAULT_BACKEND, EvalConfig
from harness import overrides as ov
from harness.cli import VERSION, stdout_closed
from harness.loop import (DISK, MIN_CONCURRENCY, REFUSED, UNREACHABLE, LoopOutcome, LoopSettings, RunLoop,
                          concurrency_for, unfinished)
from harness.progress import QuietDisplay, live_display
from harness.response_cache import ResponseCache
from harness.resume_config import changed_keys, kind_overrides, resumed
from harness.signals import (deferred as deferred_signals, hold as hold_signals, install as install_signal_handlers,
                             release as release_signals, stop_reason)
from harness.store import CONFIG_NAME, DB_NAME, VOLATILE_KEYS, RunStore, StoreError, safe_name
from harness.summary import print_summary
from harness.sweep import leaderboard_path, print_sweep, record_job
from problems import Problem, ProblemError, select_problems

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_STOPPED, EXIT_AUTH, EXIT_UNREACHABLE, EXIT_REFUSED = 0, 1, 2, 3, 4, 5, 6
_SWEEP_ENV = "HARNESS_SWEEP_KEYS"  # swept keys, passed from `main` to every job (also in launcher subprocesses)
_SWEEP_ID_ENV = "HARNESS_SWEEP_ID"  # this sweep's id (its start in ns), stamped on each job's note (harness.sweep)

_exit_codes: list[int] = []
_sweep_dirs: list[tuple[str, bool]] = []  # this process's jobs' sweep folders, and whether the job was quiet
INTERRUPTED = "interrupted; every finished attempt is saved. Re-run the same command to resume."


class BadInput(Exception):
    """A config the run cannot start with; the message is for the user."""


def main(argv: list[str]) -> int:
    """Entry point of `harness run ARGS...`: check the overrides, then hand over to Hydra."""
    install_signal_handlers()  # SIGTERM and SIGHUP stop the run as Ctrl-C does
    args = get_args_parser().parse_args(argv)  # Hydra's own flags and overrides
    try:
        for name in ov.values_of(args.overrides, "name"):  # checked before Hydra makes directories from it
            _check_name(name)
        for runs_dir in ov.values_of(args.overrides, "runs_dir") or [RunConfig.runs_dir]:
            _check_runs_dir(runs_dir)  # Hydra makes it before a job starts, and fails with a traceback
        if not args.multirun:
            ov.refuse_sweeps(args.overrides)
            kinds = _resumed_kinds(args.overrides)
            argv, args.overrides = [*kinds, *argv], [*kinds, *args.overrides]
        ov.validate(args.overrides)
        swept = ov.sweep_keys(args.overrides) if args.multirun else []
    except (ov.OverrideError, BadInput) as exc:
        _say(f"error: {exc}")
        return EXIT_BAD_INPUT
    _exit_codes.clear()
    _sweep_dirs.clear()
    with _argv(["harness run", *argv]), _env(_SWEEP_ENV, ",".join(swept)), _env(_SWEEP_ID_ENV, str(time.time_ns())):
        _hydra_main()
    if args.multirun and _sweep_dirs and not all(quiet for _, quiet in _sweep_dirs):
        _sweep_summary(_sweep_dirs[0][0])
    return max(_exit_codes, default=EXIT_OK)


def _sweep_summary(sweep_dir: str) -> None:
    """One table across the sweep's runs, after its last job (`harness report SWEEP_DIR` gives the same)."""
    try:
        print_sweep(Console(), sweep_dir)
    except Exception as exc:  # noqa: BLE001 (the runs are saved; a table that cannot be made must not hide that)
        _say(f"warning: the sweep's comparison table could not be made ({type(exc).__name__}: {exc}); "
             f"`harness report {sweep_dir}` makes it from the saved runs")
    else:
        _say(f"compare the sweep's runs again, in full, with: harness report {sweep_dir} "
             f"(it writes {leaderboard_path(Path(sweep_dir) / 'report')})")


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> int:
    try:
        code = run_job(cfg)
    except BrokenPipeError:  # the summary's reader went away (`harness run | head`); Hydra would print a traceback
        code = stdout_closed()
    _exit_codes.append(code)
    return code


def run_job(cfg: DictConfig) -> int:
    """Run one job of the Hydra app; return its exit code (messages go to stderr)."""
    try:
        return _run(cfg)
    except BadInput as exc:
        _say(f"error: {exc}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # a stop signal while starting or shutting down: no session is open
        _say(INTERRUPTED)
        return EXIT_STOPPED


def _close_and_report(store: RunStore, outcome: Any, run_dir: Path, quiet: bool, problems: list[Any], turns: int
                      ) -> int:
    """The session closed (a full disk leaves it open, with a warning) and the summary printed: the exit code."""
    try:
        with deferred_signals():  # a signal now is raised once the session is closed, not in the middle
            store.end_session(outcome.stop_reason)
    except StoreError as exc:  # a full disk: the session stays open (reports say the run did not finish)
        if not outcome.stop_reason.startswith(f"{DISK}:"):  # else the stop line says it already
            _say(f"warning: the session could not be closed: {exc}")
    except KeyboardInterrupt:  # held through the close: the session is closed, nothing is in flight to wait on
        _quit_now(None, "")
    try:
        if quiet:
            print(run_dir)
        else:
            print_summary(
                Console(), run_dir=str(run_dir), outcome=outcome, store=store,
                problem_ids=[p.id for p in problems], turns=turns,
            )  # fmt: skip
        code = _exit_code(outcome)
    except KeyboardInterrupt:  # the session is closed: only the summary is cut short
        _quit_now(None, "")
    return code


def _run(cfg: DictConfig) -> int:
    name = _job_name(cfg)
    try:
        config: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:  # an interpolation that fails, or resolves to a value of the wrong type
        where = f"{exc.full_key}: " if getattr(exc, "full_key", None) else ""
        raise BadInput(f"config: {where}{str(exc).splitlines()[0]}") from None
    config["name"] = name
    config = _with_the_stored_config(config)
    _replay_defaults(config)
    settings = _settings(config)
    problems = _problems(config["problems"])
    agent, eval_config = _build(config, settings)
    _refuse_partial_replay(agent, settings, problems)
    run_dir = Path(config["runs_dir"]) / name
    quiet = bool(config["quiet"])
    with ExitStack() as stack:
        volatile, problem_ids = (*VOLATILE_KEYS, "executor"), [p.id for p in problems]
        try:
            # a resume the store would refuse, or a run of this name that another process runs, is refused before any
            # worker starts; a new run's store is made only once the evaluator is up (a bad executor setting leaves
            # nothing behind)
            RunStore.check_resume(run_dir, config, volatile=volatile, problem_ids=problem_ids)
            stack.enter_context(RunStore.locked(run_dir))

            def open_store() -> RunStore:
                opened = stack.enter_context(RunStore.open(
                    run_dir, config, harness_version=VERSION, volatile=volatile, problem_ids=problem_ids, locked=True
                ))
                _check_problem_sources(opened, problems)
                return opened

            # a resume opens its (existing) run directory first: with nothing left to run, no evaluator is started
            store = open_store() if (run_dir / DB_NAME).exists() else None
            if store is not None and not unfinished(store.outline(), problem_ids, settings):
                evaluator: Any = _NoEvaluator()
                prompts = _prompts(config, settings, nothing_to_ask=True)
                if not quiet:
                    _say("nothing left to run: the evaluator is not started")
            else:
                prompts = _prompts(config, settings)
                evaluator = stack.enter_context(make_evaluator(config["executor"], eval_config, log=_say))
            if config["max_concurrency"] is None:  # every GPU's workers busy (the evaluator knows how many)
                settings = dataclasses.replace(settings, max_concurrency=concurrency_for(evaluator.workers))
            if not quiet and not isinstance(evaluator, _NoEvaluator):
                _say(f"{evaluator.workers} evaluator worker(s); up to {settings.max_concurrency} trajectories in flight")
            if store is None:  # a new run: its directory is made only once the evaluator is up
                store = open_store()
            cache = None
            if config["response_cache"]["enabled"]:
                cache = stack.enter_context(ResponseCache(config["response_cache"]["path"]))
        except (StoreError, ValueError, RuntimeError) as exc:  # unusable run dir or cache, no such device
            raise BadInput(str(exc)) from None
        except OSError as exc:  # a read-only or full runs directory, a missing parent
            raise BadInput(f"cannot write the run directory {run_dir}: {exc.strerror or exc}") from None
        release_signals()  # start-up is done: a stop signal held through it ends the run here, before any session
        store.begin_session()
        _note_sweep_job(run_dir, quiet)
        try:
            if (resumed := store.totals().attempts) and not quiet:
                _say(f"resuming {run_dir}: {resumed} attempt(s) already recorded")
            loop = RunLoop(
                store=store, agent=agent, evaluator=evaluator, problems=problems, prompts=prompts,
                settings=settings, display=QuietDisplay() if quiet else live_display(Console(stderr=True)),
                response_cache=cache, agent_config=config["agent"],
            )  # fmt: skip
            outcome = loop.run()
        except KeyboardInterrupt as exc:  # before the loop was waiting on attempts: none is in flight
            _quit_now(store, stop_reason(exc))
        code = _close_and_report(store, outcome, run_dir, quiet, problems, settings.turns)
        if outcome.abandoned:  # their threads may still wait on the agent or the evaluator: they must not hold the exit
            _say(f"{outcome.abandoned} attempt(s) still in flight were abandoned (nothing of them is recorded; "
                 "a resume runs them again)")
            sys.stdout.flush()
            os._exit(code)
    return code


def make_evaluator(executor: dict[str, Any], eval_config: EvalConfig, log: Any = None) -> Any:
    """`harness.executors.make_evaluator`, imported only once a run has work left: it loads torch and the evaluator,
    which a config error, `--help` or a resume with nothing left to run must not wait for."""
    from harness.executors import make_evaluator as make

    return make(executor, eval_config, log=log)


class _NoEvaluator:
    """Stands for the evaluator in a resume with nothing left to run (starting one would take seconds)."""

    workers = 0

    def evaluate(self, problem: Problem, source: str, backend: str = DEFAULT_BACKEND) -> Any:
        raise RuntimeError("no evaluator was started: this run had nothing left to run")


def _quit_now(store: RunStore | None, reason: str) -> NoReturn:
    """Close the session (when one is open) and exit at once with `EXIT_STOPPED`: threads that may still wait on the
    agent or the evaluator must not hold the exit."""
    if store is not None:
        hold_signals()  # the process quits right after: a signal meanwhile must not cut the close, nor be raised
        store.end_session(reason)
    _say(INTERRUPTED)
    sys.stdout.flush()
    os._exit(EXIT_STOPPED)


def _build(config: dict[str, Any], settings: LoopSettings) -> tuple[Any, EvalConfig]:
    """The agent (a missing API key fails here, before any work) and the evaluator settings."""
    agent_cfg = config["agent"]
    unpriced = agent_cfg["kind"] in ("openai", "anthropic") and not agent_cfg.get("pricing")
    if settings.max_cost_usd is not None and unpriced:
        raise BadInput(
            "budget.max_cost_usd is set but the agent has no prices: pick a model preset (model=gpt-4o, ...) "
            "or set agent.pricing={input: USD_PER_M, output: USD_PER_M}"
        )
    try:
        return make_agent(agent_cfg, backend=config["backend"]), EvalConfig(**config["eval"])  # issue 56: backend
    except (ConfigError, TypeError, ValueError) as exc:
        raise BadInput(str(exc)) from None


def _prompts(config: dict[str, Any], settings: LoopSettings, *, nothing_to_ask: bool = False) -> PromptBuilder:
    """The run's prompt builder, made before any evaluator starts (a bad template is refused first). With
    `nothing_to_ask` (a resume with nothing left) it names no hardware: probing the GPU imports torch, and no
    prompt will be sent."""
    if nothing_to_ask:
        config = {**config, "prompt": {**config["prompt"], "hardware": None}}
    try:
        return prompt_builder(config, settings.backend)
    except (PromptError, TypeError, ValueError) as exc:
        raise BadInput(str(exc)) from None


def prompt_builder(config: dict[str, Any], backend: str) -> PromptBuilder:
    """The prompts a run's agents see, from its config (`prompt.*`, `context.*`); `harness serve` and `KernelEnv`
    build theirs here too, so an RL rollout sees what the loop's agents see. Raises `PromptError`."""
    return PromptBuilder(backend, context=config["context"]["policy"], last_k=config["context"]["k"], **config["prompt"])


def _exit_code(outcome: LoopOutcome) -> int:
    """Report how the run ended; the exit code says it to scripts."""
    for e in outcome.errors:
        _say(f"error: {e}")
    if outcome.finished and not outcome.errors:
        return EXIT_OK
    _say(f"stopped: {outcome.stop_reason}. Finished attempts are saved; re-run the same command to resume.")
    if outcome.stop_reason.startswith("auth:"):
        return EXIT_AUTH
    if outcome.stop_reason.startswith(f"{UNREACHABLE}:"):
        return EXIT_UNREACHABLE
    if outcome.stop_reason.startswith(f"{REFUSED}:"):
        return EXIT_REFUSED
    if outcome.stop_reason.startswith(f"{DISK}:"):
        return EXIT_BAD_INPUT
    if outcome.stop_reason.startswith(("budget:", "interrupted")):
        return EXIT_STOPPED
    return EXIT_ERROR


def _job_name(cfg: DictConfig) -> str:
    """`name`, plus the swept keys and values in a multirun (`ablation-search-serial`), path-safe.

    No `=` or `,`: the directory name must work as it is in every documented command, such as
    `agent=replay agent.path=runs/ablation-search-serial` (Hydra would parse an `=` there).
    """
    name = _check_name(str(cfg.name))
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return name
    parts = [safe_name(part) for kv in _swept().items() for part in kv]
    return f"{name}-{'-'.join(parts) or f'job{hc.job.num}'}"


def _swept() -> dict[str, str]:
    """This multirun job's values of the swept keys (`search` -> `serial`)."""
    keys = [k for k in os.environ.get(_SWEEP_ENV, "").split(",") if k]
    out = {}
    for override in HydraConfig.get().overrides.task:
        key, _, value = override.partition("=")
        if key.lstrip("+~") in keys:
            out[key.lstrip("+~")] = value
    return out


def _note_sweep_job(run_dir: Path, quiet: bool) -> None:
    """In a multirun, note this job's run in the sweep folder (`harness.sweep`), so the sweep can be compared."""
    try:
        hc = HydraConfig.get()
    except ValueError:  # not under Hydra (called directly)
        return
    if hc.mode != RunMode.MULTIRUN:
        return
    try:
        record_job(hc.sweep.dir, int(os.environ.get(_SWEEP_ID_ENV) or 0), hc.job.num, run_dir, _swept())
    except OSError as exc:  # the run itself goes on; only the sweep's table will miss it
        _say(f"warning: cannot note this run in the sweep folder {hc.sweep.dir}: {exc.strerror or exc}")
        return
    _sweep_dirs.append((str(hc.sweep.dir), quiet))


def _check_problem_sources(store: RunStore, problems: list[Problem]) -> None:
    """Refuse to resume when a problem's source changed since its attempts were recorded."""
    current = {p.id: p.source_hash for p in problems}
    changed = sorted({pid for pid, recorded in store.problem_hashes() if current.get(pid, recorded) != recorded})
    if changed:
        raise BadInput(
            f"{len(changed)} problem(s) changed since this run recorded attempts for them ({', '.join(changed[:5])}"
            f"{', ...' if len(changed) > 5 else ''}); resuming would mix two versions. "
            "Start a new run with another name=."
        )


def _check_runs_dir(runs_dir: str) -> None:
    """Refuse a `runs_dir` that `mkdir -p` could not make (a file on its path, a read-only parent), found without
    making anything."""
    nearest = Path(runs_dir)
    if nearest.is_dir():
        return
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        raise BadInput(f"runs_dir={runs_dir} cannot be made: {nearest} is a file, not a folder")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise BadInput(f"runs_dir={runs_dir} cannot be made: {nearest} is not writable")


def _check_name(name: str) -> str:
    if safe_name(name) != name or name.startswith("."):
        raise BadInput(f"name={name!r}: use only letters, digits and . _ + - (it names the run directory)")
    return name


def _cli_overrides() -> list[str]:
    """This job's command-line overrides (`turns=3`, `agent=openai`)."""
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # not under Hydra (called directly)
        return []


def _cli_keys() -> set[str]:
    """The config keys given on this job's command line (`turns=3`, `problems.spec=...`)."""
    return {o.partition("=")[0].lstrip("+~") for o in _cli_overrides()}


def _resumed_kinds(overrides: list[str]) -> list[str]:
    """For a resume, the agent and executor its run was recorded with (`agent=openai`), where the command line picks
    none: the keys it sets (`agent.model=...`) are then checked and composed against the run's own agent."""
    names, dirs = ov.values_of(overrides, "name"), ov.values_of(overrides, "runs_dir")
    stored = RunStore.stored_config(Path(dirs[-1] if dirs else RunConfig.runs_dir) / names[-1]) if names else None
    picked = {o.key_or_group for o in ov.parse(overrides)}
    return [o for o in kind_overrides(stored or {}) if o.partition("=")[0] not in picked]


def _with_the_stored_config(config: dict[str, Any]) -> dict[str, Any]:
    """A resume or extension starts from the config its run was recorded under and takes from `config` only what this
    command line changes (`harness.resume_config`), so the original overrides need not be repeated."""
    stored = RunStore.stored_config(Path(config["runs_dir"]) / config["name"])
    if stored is None:  # a new run
        return config
    kinds = kind_overrides(stored)
    given = {o.partition("=")[0].lstrip("+~") for o in _cli_overrides() if o not in kinds}
    return resumed(stored, config, changed_keys(given, config, _composed(kinds)))


def _composed(overrides: list[str]) -> dict[str, Any]:
    """The resolved config `harness run` composes for `overrides` (the defaults a command line's values are compared
    with)."""
    if not GlobalHydra.instance().is_initialized():  # not under Hydra (called directly)
        return ov.compose_config(overrides)
    return OmegaConf.to_container(compose(ov.CONFIG_NAME, overrides=overrides), resolve=True)  # type: ignore[return-value]


def _replay_defaults(config: dict[str, Any]) -> None:
    """Under agent=replay, turns, samples and the problem selection default to the source run's (its config.yaml),
    so that replaying a run replays all of it; what the command line sets wins."""
    agent = config["agent"]
    source = Path(str(agent.get("path") or "")) / CONFIG_NAME if agent.get("kind") == "replay" else None
    if source is None or not source.is_file():
        return
    try:
        recorded = OmegaConf.to_container(OmegaConf.load(source), resolve=False)
    except (OSError, OmegaConfBaseException) as exc:
        raise BadInput(f"replay: cannot read {source}: {exc}") from None
    given = _cli_keys()
    for key in ("turns", "samples"):
        if key not in given and isinstance(recorded, dict) and key in recorded:
            config[key] = recorded[key]
    if not given & {"problems", "problems.spec", "problems.limit"} and isinstance(recorded, dict):
        config["problems"] = dict(config["problems"], **dict(recorded.get("problems") or {}))


def _refuse_partial_replay(agent: Any, settings: LoopSettings, problems: list[Problem]) -> None:
    """A replay whose turns, samples or problems leave recorded attempts out would re-score part of a run and
    report it as the whole: refused, naming what would be dropped and what to set."""
    replay = getattr(agent, "inner", agent)  # make_agent wraps every agent in RetryingAgent
    recorded = getattr(replay, "recorded_keys", None)
    if recorded is None:
        return
    selected = {p.id for p in problems}
    keys = recorded()
    dropped = sorted(k for k in keys if k[0] not in selected or k[1] > settings.samples or k[2] > settings.turns)
    if not dropped:
        return
    first = dropped[0]
    raise BadInput(
        f"replay: {replay.path} holds {len(keys)} attempts ({len({k[0] for k in keys})} problems, samples up to "
        f"{max(k[1] for k in keys)}, turns up to {max(k[2] for k in keys)}); this run (turns={settings.turns}, "
        f"samples={settings.samples}, {len(selected)} problems) would leave out {len(dropped)} of them, e.g. "
        f"problem {first[0]!r} sample {first[1]} turn {first[2]}: set turns, samples and problems to cover them"
    )


def _settings(config: dict[str, Any]) -> LoopSettings:
    """The loop's settings; Hydra has checked each value's type against the schema (`harness.conf.schema`)."""
    budget = config["budget"]
    try:
        return LoopSettings(
            turns=config["turns"],
            samples=config["samples"],
            backend=config["backend"],
            # null: the evaluator's worker count, known once it is made; until then, the least it will be
            max_concurrency=MIN_CONCURRENCY if config["max_concurrency"] is None else config["max_concurrency"],
            target_speedup=config["target_speedup"],
            max_tokens=budget["max_tokens"],
            max_cost_usd=budget["max_cost_usd"],
            stop_grace_s=config["stop_grace_s"],
        )
    except ValueError as exc:
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


def _say(text: str) -> None:
    """A message for the user on stderr, unwrapped (so it can be read and grepped whole)."""
    print(text, file=sys.stderr, flush=True)


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
