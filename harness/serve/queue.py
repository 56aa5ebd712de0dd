"""A bounded work queue that coalesces identical work and drops work nobody waits for any more.

`submit(items)` takes (key, fn) pairs: a key already queued or running gets the same `Ticket` (its waiter count
goes up), a new key takes a queue slot. When the new keys do not fit, nothing is submitted and `QueueFull`
says how long to wait. `release(ticket)` is called when a waiter goes away (a client disconnected): queued work
with no waiter left is cancelled and never runs; running work finishes (its result still reaches the cache).
`workers` threads run the work, so at most that many run at once.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable


class QueueFull(Exception):
    """No room for the work; retry after `retry_after` seconds."""

    def __init__(self, retry_after: int, limit: int):
        super().__init__(f"the queue is full ({limit} evaluations waiting); retry after {retry_after} s")
        self.retry_after = retry_after
        self.limit = limit


@dataclass(eq=False)
class Ticket:
    """One piece of work and everyone waiting for it."""

    key: str
    fn: Callable[[], Any]
    future: Future = field(default_factory=Future)
    waiters: int = 1
    state: str = "queued"  # queued | running | done | cancelled
    started_at: float | None = None  # time.monotonic() when a worker thread took it
    ended_at: float | None = None  # time.monotonic() when it finished


class WorkQueue:
    """See the module docstring. `on_cancel(n)` is told how many queued items were dropped."""

    def __init__(self, workers: int, max_queued: int, *, name: str = "kh-serve",
                 on_cancel: Callable[[int], None] | None = None, on_coalesce: Callable[[int], None] | None = None):
        if workers < 1 or max_queued < 0:
            raise ValueError(f"workers must be >= 1 and max_queued >= 0 (got {workers}, {max_queued})")
        self.workers, self.max_queued = workers, max_queued
        self._cond = threading.Condition()
        self._queue: collections.deque[Ticket] = collections.deque()
        self._live: dict[str, Ticket] = {}  # queued or running, by key
        self._running = 0
        self._closed = False
        self._mean_s = 5.0  # running mean of a run's seconds, for Retry-After
        self._on_cancel = on_cancel or (lambda n: None)
        self._on_coalesce = on_coalesce or (lambda n: None)
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    @property
    def depth(self) -> int:
        with self._cond:
            return len(self._queue)

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._running

    def submit(self, items: list[tuple[str, Callable[[], Any]]]) -> list[Ticket]:
        """A ticket per item, in order (identical keys share one); all or nothing (`QueueFull`)."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the queue is closed")
            new_keys = {k for k, _ in items if k not in self._live}
            if len(self._queue) + len(new_keys) > self.max_queued:
                raise QueueFull(self._retry_after(), self.max_queued)
            tickets, coalesced = [], 0
            for key, fn in items:
                ticket = self._live.get(key)
                if ticket is None:
                    ticket = self._live[key] = Ticket(key, fn)
                    self._queue.append(ticket)
                    self._cond.notify()
                else:
                    ticket.waiters += 1
                    coalesced += 1
                tickets.append(ticket)
        if coalesced:
            self._on_coalesce(coalesced)
        return tickets

    def release(self, tickets: list[Ticket]) -> None:
        """Their waiters went away: queued work nobody waits for any more is cancelled."""
        dropped = 0
        with self._cond:
            for t in tickets:
                t.waiters -= 1
                if t.waiters <= 0 and t.state == "queued":
                    t.state = "cancelled"
                    self._queue.remove(t)
                    self._live.pop(t.key, None)
                    t.future.cancel()
                    dropped += 1
        if dropped:
            self._on_cancel(dropped)

    def close(self) -> None:
        """Cancel what is queued; running work finishes on its own."""
        with self._cond:
            self._closed = True
            for t in self._queue:
                t.state = "cancelled"
                t.future.cancel()
            self._queue.clear()
            self._cond.notify_all()

    def _retry_after(self) -> int:
        """Seconds until a slot is likely free: the queue ahead over the workers, times a run's mean time."""
        return max(1, math.ceil(self._mean_s * (len(self._queue) + 1) / self.workers))

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed and not self._queue:
                    return
                ticket = self._queue.popleft()
                ticket.state = "running"
                self._running += 1
            t0 = ticket.started_at = time.monotonic()
            try:
                value = ticket.fn()
            except BaseException as exc:  # noqa: BLE001  reaches the waiters, never ends the thread
                outcome: tuple[str, Any] = ("error", exc)
            else:
                outcome = ("ok", value)
            with self._cond:
                self._running -= 1
                ticket.ended_at = time.monotonic()
                self._mean_s = 0.8 * self._mean_s + 0.2 * (ticket.ended_at - t0)
                ticket.state = "done"
                self._live.pop(ticket.key, None)
            if outcome[0] == "ok":
                ticket.future.set_result(outcome[1])
            else:
                ticket.future.set_exception(outcome[1])
