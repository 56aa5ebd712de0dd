"""Progress: the `[done/total, elapsed]` counter that commands print as each item finishes (`harness problems
lint`, `harness bench`, `harness run`), and a run's live counters with their displays: bars redrawn in place on a
terminal, one plain line per finished attempt elsewhere (logs, CI, pipes), or nothing (quiet)."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from eval import Status
from harness.store import Attempt, Outline

MAX_FLIGHT_LINES = 12  # in-flight trajectories shown on a terminal; more are counted on one line
NOT_TIMED = "n/t"  # in place of a speed that was not measured (CPU), in the run summary and the reports


def duration_text(seconds: float) -> str:
    """`42s`, `3m 05s`, `1h 02m`: a duration at the precision a person reads."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def eta_text(done: int, remaining: int, elapsed: float) -> str:
    """The time left at the pace so far (`done` items in `elapsed` seconds); unknown before the first is done."""
    if done <= 0:
        return "ETA unknown"
    return f"ETA {duration_text(elapsed / done * max(0, remaining))}"


def counter_text(done: int, total: int, elapsed: float, eta: str | None = None) -> str:
    """`[3/10, 12s]` (or `[3/10, 12s, ETA 28s]`): the one format of progress counters."""
    return f"[{done}/{total}, {duration_text(elapsed)}{'' if eta is None else f', {eta}'}]"


class Tally:
    """Counts items as they finish, from its creation: `step()` gives the counter to print beside each one.
    Thread-safe (items may finish on several threads)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self._started = time.monotonic()
        self._lock = threading.Lock()

    def step(self) -> str:
        """Count one more finished item; its `[done/total, elapsed]`."""
        with self._lock:
            self.done += 1
            return counter_text(self.done, self.total, time.monotonic() - self._started)


@dataclass
class Flight:
    """A trajectory in flight: which turn it is on, and the verdict of its latest finished attempt."""

    problem_id: str
    sample: int
    turn: int
    last: Status | None = None  # None: no attempt of it finished yet


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
    turns: int = 1
    in_flight: dict[tuple[str, int], Flight] = field(default_factory=dict)  # (problem, sample) -> its turn

    def begin(self, problem_id: str, sample: int, turn: int, last: Status | None) -> None:
        """A trajectory starts a turn (`last`: the verdict of its previous attempt, if any)."""
        self.in_flight[(problem_id, sample)] = Flight(problem_id, sample, turn, last)

    def end(self, problem_id: str, sample: int) -> None:
        """A trajectory has no turn in flight any more."""
        self.in_flight.pop((problem_id, sample), None)

    def add(self, a: Attempt | Outline, *, this_session: bool) -> None:
        """Count one recorded attempt."""
        if (flight := self.in_flight.get((a.problem_id, a.sample))) is not None:
            flight.last = a.status
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

    def counter(self, elapsed: float) -> str:
        """Attempts done of planned, `elapsed` seconds into this session, and the time left at this session's pace
        (attempts recorded by earlier sessions count as done, not as pace)."""
        eta = eta_text(self.attempts_this_session, self.attempts_planned - self.attempts_done, elapsed)
        return counter_text(self.attempts_done, self.attempts_planned, elapsed, eta)

    def flights(self) -> list[Flight]:
        """The trajectories in flight, by problem and sample (a copy: the loop's threads change the live ones)."""
        return [Flight(f.problem_id, f.sample, f.turn, f.last) for _, f in sorted(self.in_flight.copy().items())]


def flight_text(f: Flight, turns: int) -> str:
    """One trajectory in flight: `L1/13_softmax  sample 2  turn 3/5  last: incorrect`."""
    return f"{f.problem_id}  sample {f.sample}  turn {f.turn}/{turns}  last: {f.last or 'none yet'}"


def status_text(stats: RunStats, elapsed: float) -> str:
    """The counter line of a run: attempts, elapsed, ETA, problems finished, trajectories in flight."""
    return (f"{stats.counter(elapsed)} attempts; problems {stats.problems_done}/{stats.problems} finished; "
            f"{len(stats.in_flight)} in flight")


class Display(Protocol):
    """Where the loop reports progress."""

    def start(self, stats: RunStats) -> None: ...
    def update(self, stats: RunStats) -> None: ...
    def finished(self, attempt: Attempt, stats: RunStats) -> None: ...
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

    def finished(self, attempt: Attempt, stats: RunStats) -> None:
        pass

    def message(self, text: str) -> None:
        self._console.print(text, markup=False, highlight=False)

    def stop(self) -> None:
        pass


class _LiveText:
    """What the terminal shows below the bars, rendered afresh at each refresh (so elapsed time and the ETA move
    between events): the counter line, tokens and cost, and a line per trajectory in flight."""

    def __init__(self, stats: RunStats) -> None:
        self.stats = stats
        self._started = time.monotonic()

    def __rich__(self) -> Text:
        st = self.stats
        flights = st.flights()
        lines = [status_text(st, time.monotonic() - self._started), st.info()]
        lines += [f"  {flight_text(f, st.turns)}" for f in flights[:MAX_FLIGHT_LINES]]
        if len(flights) > MAX_FLIGHT_LINES:
            lines.append(f"  ... and {len(flights) - MAX_FLIGHT_LINES} more in flight")
        return Text("\n".join(lines))


class RichDisplay:
    """For a terminal: live bars on stderr (problems, attempts) with the elapsed time, redrawn in place, and below
    them the counter line with the ETA (from this session's pace: attempts recorded earlier fill the bar, they do
    not speed up the estimate), tokens, cost and best speedup, and a line per trajectory in flight (its turn,
    sample and latest verdict)."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("{task.description:<9}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=self._console,
        )  # fmt: skip
        self._text: _LiveText | None = None
        self._live: Live | None = None
        self._lock = threading.Lock()
        self._problems: TaskID | None = None
        self._attempts: TaskID | None = None

    def start(self, stats: RunStats) -> None:
        with self._lock:
            self._problems = self._progress.add_task("problems", total=stats.problems, completed=stats.problems_done)
            self._attempts = self._progress.add_task("attempts", total=stats.attempts_planned,
                                                     completed=stats.attempts_done)
            self._text = _LiveText(stats)
            self._live = Live(Group(self._progress, self._text), console=self._console, refresh_per_second=4)
            self._live.start()
        self.update(stats)

    def update(self, stats: RunStats) -> None:
        with self._lock:
            if self._problems is None or self._attempts is None:
                return
            self._progress.update(self._problems, completed=stats.problems_done, total=stats.problems)
            self._progress.update(self._attempts, completed=stats.attempts_done, total=stats.attempts_planned)

    def finished(self, attempt: Attempt, stats: RunStats) -> None:
        self.update(stats)

    def message(self, text: str) -> None:
        self._console.print(text, markup=False, highlight=False)

    def stop(self) -> None:
        """End the live display, leaving the bars; the info line is left to the summary (printed once)."""
        with self._lock:
            if self._live is None:
                return
            self._live.update(self._progress, refresh=True)
            self._live.stop()
            if not self._console.is_terminal:  # Live ends a terminal's last line itself, not a file's
                self._console.line()


class LineDisplay:
    """For logs, CI and pipes (no terminal to redraw): one plain line per finished attempt, appended, without
    control codes: the counter with the ETA, the attempt (problem, sample, turn) and its verdict, and how many
    trajectories are in flight."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._started = time.monotonic()
        self._lock = threading.Lock()

    def _print(self, line: str) -> None:
        with self._lock:
            print(line, file=self._stream or sys.stderr, flush=True)

    def start(self, stats: RunStats) -> None:
        self._started = time.monotonic()
        self._print(status_text(stats, 0.0))

    def update(self, stats: RunStats) -> None:
        pass  # a line per finished attempt is enough; more would be one per event

    def finished(self, attempt: Attempt, stats: RunStats) -> None:
        elapsed = time.monotonic() - self._started
        others = sum(key != (attempt.problem_id, attempt.sample) for key in stats.in_flight.copy())
        self._print(f"{stats.counter(elapsed)} {attempt.problem_id} sample {attempt.sample} turn "
                    f"{attempt.turn}/{stats.turns}: {attempt.status}; {others} other(s) in flight")

    def message(self, text: str) -> None:
        self._print(text)

    def stop(self) -> None:
        pass


def live_display(console: Console) -> RichDisplay | LineDisplay:
    """The display for `console`'s stream: redrawn in place on a terminal, plain appended lines elsewhere."""
    return RichDisplay(console) if console.is_terminal else LineDisplay(console.file)
