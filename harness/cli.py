"""The `harness` command: dispatches `harness <command> ...` to one module per command.

Each module in `harness.commands` exposes `add_arguments(parser)` and `run(args) -> int`;
`harness run` is the Hydra app and receives its arguments untouched.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys

from harness.signals import exit_at_once_on_a_stop_signal, install as install_signal_handlers, signal_name

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("harness.commands.eval_cmd", "evaluate one candidate against one problem"),
    "export": ("harness.commands.export_cmd", "export every attempt of a run as JSON lines (prompts and code too)"),
    "bench": ("harness.commands.bench_cmd", "benchmarks of the harness itself (eval repeatability, throughput)"),
    "problems": ("harness.commands.problems_cmd", "list, show and lint problems (our suite, KernelBench, files)"),
    "baseline": ("harness.commands.baseline_cmd", "eager and torch.compile times per problem on this GPU (cached)"),
    "device": ("harness.commands.device_cmd", "measure and cache this GPU's ceilings (harness device probe)"),
    "report": ("harness.commands.report_cmd", "leaderboard (md, csv, json) and an HTML page with plots and transcripts"),
    "serve": ("harness.commands.serve_cmd", "the evaluator as an HTTP reward service for RL training (docs/serve.md)"),
    "presets": ("harness.commands.presets_cmd",
                "strict against KernelBench-compatible rules: re-score a run, pair two runs, benchmark both"),
}
# commands that take their own argv (Hydra apps)
PASSTHROUGH: dict[str, tuple[str, str]] = {
    "run": ("harness.commands.run_cmd", "run agents on problems over several turns (Hydra app: harness run --help)"),
}
EXIT_BROKEN_PIPE = 141  # what a shell reports for a writer killed by SIGPIPE (`harness ... | head`)
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM or SIGHUP (`harness run` says 3: stopped, resumable; see harness.app)
EXIT_RUN_STOPPED = 3


def _version() -> str:
    """The installed package's version (pyproject.toml is its one home)."""
    try:
        return importlib.metadata.version("kernel-harness")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


VERSION = _version()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `harness` console script; a reader that closes the pipe early ends it quietly, and a stop
    signal (Ctrl-C, SIGTERM, SIGHUP) that no command handled ends it with one line, never a traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    install_signal_handlers()
    try:
        code = _dispatch(argv)
        sys.stdout.flush()  # inside the try: a closed pipe must not surface at interpreter exit
        return code
    except BrokenPipeError:
        return stdout_closed()
    except KeyboardInterrupt as exc:
        print(f"interrupted ({signal_name(exc)})", file=sys.stderr, flush=True)
        return EXIT_RUN_STOPPED if argv[:1] == ["run"] else EXIT_INTERRUPTED


def entry() -> None:
    """The `harness` console script: `main`, then an exit that a further stop signal cannot interrupt (Ctrl-C
    twice may land after the run has finished, while the interpreter runs its exit handlers)."""
    code = main()
    exit_at_once_on_a_stop_signal(code)
    sys.exit(code)


def stdout_closed() -> int:
    """After a `BrokenPipeError`: point stdout at /dev/null (nothing left to flush at exit); the exit code."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in PASSTHROUGH:
        module = importlib.import_module(PASSTHROUGH[argv[0]][0])
        return int(module.run(argv[1:]) or 0)
    parser = argparse.ArgumentParser(prog="harness", description="Kernel-generation evaluation harness.")
    parser.add_argument("--version", action="version", version=f"harness {VERSION}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in {**COMMANDS, **PASSTHROUGH}.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] not in COMMANDS:
        parser.print_help() if not argv else parser.parse_args(argv)  # --version and --help exit here
        return 0 if not argv else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    cmd_parser = argparse.ArgumentParser(prog=f"harness {argv[0]}", description=COMMANDS[argv[0]][1])
    module.add_arguments(cmd_parser)
    args = cmd_parser.parse_args(argv[1:])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    entry()
