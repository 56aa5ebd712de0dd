"""Stop signals: SIGTERM (what SLURM and Kubernetes send) and SIGHUP (a closed terminal) end a command the way
Ctrl-C does, by raising `Interrupted` (a `KeyboardInterrupt`) in the main thread, so one code path handles all
three and none leaves a traceback."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A stop signal raised in the main thread; `name` says which (SIGINT, SIGTERM, SIGHUP)."""

    def __init__(self, name: str = "SIGINT") -> None:
        super().__init__(name)
        self.name = name


def signal_name(exc: KeyboardInterrupt) -> str:
    """Which signal a `KeyboardInterrupt` stands for (Python raises a plain one for SIGINT)."""
    return exc.name if isinstance(exc, Interrupted) else "SIGINT"


def stop_reason(exc: KeyboardInterrupt) -> str:
    """A run's stop reason for this signal: `interrupted` for Ctrl-C, `interrupted (SIGTERM)` for the others."""
    name = signal_name(exc)
    return "interrupted" if name == "SIGINT" else f"interrupted ({name})"


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def install() -> None:
    """Make SIGTERM and SIGHUP raise `Interrupted` (only the main thread can set handlers; elsewhere a no-op)."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, _raise)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold stop signals while a step that must not be cut runs (closing a run's session: an interrupted close
    leaves the session open); the first one that arrived meanwhile is raised once the step is done. Only the main
    thread sets handlers, and only it is interrupted: elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, *STOP_SIGNALS)
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in held}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if caught:
        raise KeyboardInterrupt() if caught[0] == signal.SIGINT else Interrupted(signal.Signals(caught[0]).name)


def exit_at_once_on_a_stop_signal(code: int) -> None:
    """Once a command has its exit code: a stop signal during the interpreter's exit (atexit handlers, finalizers
    such as torch's) ends the process at once with that code, where it would interrupt a handler and print a
    traceback. The command's own work is done by then, so quitting skips only clean-up the OS does anyway."""
    for sig in (signal.SIGINT, *STOP_SIGNALS):
        signal.signal(sig, lambda signum, frame: os._exit(code))
