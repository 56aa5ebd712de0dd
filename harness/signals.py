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
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_WITH_CTRL_C = (signal.SIGINT, *STOP_SIGNALS)


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
    """Make SIGTERM and SIGHUP raise `Interrupted` (once `release`d, while held; only the main thread can set
    handlers; elsewhere a no-op)."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            if _held is not None:  # held: these are the handlers `release` gives back
                _restored[sig] = _raise
            else:
                signal.signal(sig, _raise)


# While stop signals are held (`hold`): those that arrived, in order; None while they are not held
_held: list[int] | None = None
_restored: dict[int, Any] = {}
_quit_code: int | None = None


def _hold_one(signum: int, frame: FrameType | None) -> None:
    assert _held is not None
    _held.append(signum)
    if _quit_code is None:
        return
    if len(_held) == 1:  # os.write: a print here could re-enter a write the main thread was making
        os.write(2, b"interrupted: stopping once start-up is done (again to quit now)\n")
    elif len(_held) == 2:  # a second signal: the user wants out now
        os.write(2, b"interrupted: quitting now\n")
        os._exit(_quit_code)


def hold(quit_code: int | None = None) -> bool:
    """Hold stop signals (SIGINT, SIGTERM, SIGHUP) until `release`: one that arrives is recorded, not raised.

    Raised at an arbitrary point, a `KeyboardInterrupt` can land inside a finalizer or a weakref callback, where
    Python prints it and drops it (seen during `harness run`'s start-up, inside importlib's module-lock
    callback: the run then went on, or hung). So start-up holds them and acts at one safe point. With `quit_code`,
    a second signal quits at once with it. Only the main thread sets handlers: elsewhere, and while already
    held, a no-op (False). A SIGINT that the process ignores (started in the background) stays ignored."""
    global _held, _quit_code
    if threading.current_thread() is not threading.main_thread() or _held is not None:
        return False
    _held, _quit_code = [], quit_code
    for sig in _WITH_CTRL_C:
        if not (sig == signal.SIGINT and signal.getsignal(sig) is signal.SIG_IGN):
            _restored[sig] = signal.signal(sig, _hold_one)
    return True


def release() -> None:
    """Give the handlers held by `hold` back, then raise the first signal that arrived meanwhile, if any."""
    global _held, _quit_code
    if threading.current_thread() is not threading.main_thread() or _held is None:
        return
    arrived = _held
    for sig, handler in _restored.items():
        signal.signal(sig, handler)
    _restored.clear()
    _held, _quit_code = None, None
    if arrived:
        raise Interrupted(signal.Signals(arrived[0]).name)


@contextmanager
def deferred() -> Iterator[None]:
    """`hold` around a step that must not be cut (closing a run's session: an interrupted close leaves the session
    open); the first signal that arrived meanwhile is raised once the step is done. Inside a longer hold, that
    hold goes on."""
    took = hold()
    try:
        yield
    finally:
        if took:
            release()


def exit_at_once_on_a_stop_signal(code: int) -> None:
    """Once a command has its exit code: a stop signal during the interpreter's exit (atexit handlers, finalizers
    such as torch's) ends the process at once with that code, where it would interrupt a handler and print a
    traceback. The command's own work is done by then, so quitting skips only clean-up the OS does anyway."""
    for sig in _WITH_CTRL_C:
        signal.signal(sig, lambda signum, frame: os._exit(code))
