"""Live counters of a run, and their display: rich progress bars, or nothing (quiet)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.text import Text

from eval.result import Status
from harness.store import Attempt, Outline


@dataclass
class RunStats:
    """What the run has done so far (this session and earlier ones), updated by the loop."""

    problems: int = 0
    problems_done: int = 0
    attempts_planned: int = 0  # upper bound; shrinks when a sample stops early
    attempts_done: int = 0
    attempts_this_session: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    usage_estimated: bool = False  # some tokens were counted here: the provider sent no usage
    correct: int = 0
    best_speedup: float | None = None
    statuses: dict[Status, int] = field(default_factory=dict)

    def add(self, a: Attempt | Outline, *, this_session: bool) -> None:
        """Count one recorded attempt."""
        self.attempts_done += 1
        self.attempts_this_session += int(this_session)
        self.statuses[a.status] = self.statuses.get(a.status, 0) + 1
        if not a.from_cache:
            self.usage_estimated |= a.usage_estimated
            self.tokens += a.input_tokens + a.output_tokens
            if a.cost_usd is None:
                self.cost_known = False
            else:
                self.cost_usd += a.cost_usd
        if a.status is Status.CORRECT:
            self.correct += 1
            if a.speedup is not None and (self.best_speedup is None or a.speedup > self.best_speedup):
                self.best_speedup = a.speedup

    def info(self) -> str:
        """One line: tokens, cost and best speedup so far."""
        cost = f"${self.cost_usd:.4f}" if self.cost_known else f"${self.cost_usd:.4f}+unpriced"
        best = "n/a" if self.best_speedup is None else f"{self.best_speedup:.2f}x"
        estimated = " (estimated: the provider sent no usage)" if self.usage_estimated else ""
        return f"tokens {self.tokens:,}  cost {cost}{estimated}  correct {self.correct}  best speedup {best}"


class Display(Protocol):
    """Where the loop reports progress."""

    def start(self, stats: RunStats) -> None: ...
    def update(self, stats: RunStats) -> None: ...
    def message(self, text: str) -> None: ...
    def stop(self) -> None: ...


class QuietDisplay:
    """Shows nothing (for scripts); warnings still go to stderr."""

    def __init__(self) -> None:
        self._console = Console(stderr=True)

    def start(self, stats: RunStats) -> None:
        pass

    def update(self, stats: RunStats) -> None:
        pass

    def message(self, text: str) -> None:
        self._console.print(text, markup=False, highlight=False)

    def stop(self) -> None:
        pass


class RichDisplay:
    """Live bars on stderr (problems, attempts) with elapsed time and an estimate of the time left (from this
    session's pace: attempts recorded earlier start the bar, they do not speed up the estimate), and a line of
    tokens, cost and best speedup below."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("{task.description:<9}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn(), console=self._console,
        )  # fmt: skip
        self._info = Text("")
        self._live = Live(Group(self._progress, self._info), console=self._console, refresh_per_second=8)
        self._lock = threading.Lock()
        self._problems: TaskID | None = None
        self._attempts: TaskID | None = None

    def start(self, stats: RunStats) -> None:
        with self._lock:
            self._problems = self._progress.add_task("problems", total=stats.problems, completed=stats.problems_done)
            self._attempts = self._progress.add_task("attempts", total=stats.attempts_planned,
                                                     completed=stats.attempts_done)
            self._live.start()
        self.update(stats)

    def update(self, stats: RunStats) -> None:
        with self._lock:
            if self._problems is None or self._attempts is None:
                return
            self._progress.update(self._problems, completed=stats.problems_done, total=stats.problems)
            self._progress.update(self._attempts, completed=stats.attempts_done, total=stats.attempts_planned)
            self._info.plain = stats.info()

    def message(self, text: str) -> None:
        self._console.print(text, markup=False, highlight=False)

    def stop(self) -> None:
        """End the live display, leaving the bars; the info line is left to the summary (printed once)."""
        with self._lock:
            self._live.update(self._progress, refresh=True)
            self._live.stop()
            if not self._console.is_terminal:  # Live ends a terminal's last line itself, not a file's
                self._console.line()
