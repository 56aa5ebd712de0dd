"""Timing windows: candidates of one problem on one GPU share one timing of the reference (`measure.time_group`).

An evaluation takes a seat in its GPU's open group for its key (the problem, its sizes, how it is timed) when its
pipeline starts. The group's secret gives every member the same reference weights and timing inputs, so one
reference timing can serve them all. A group closes to newcomers once it is full (`CAP`), or once any member
reaches the timing step or leaves: so no result of a member can have reached anyone before every other member was
seated, and a candidate written after seeing a member's result never shares that member's secret.

When every member has reached timing or left, the first to arrive runs one window for all of them; the others wait
for their own outcome. A member that fails before timing leaves, and is not waited for; a member still not there
`WAIT_S` after the first arrival is not waited for either (it is timed alone when it comes). Nobody waits while
holding the GPU gate, so a member on its way to timing always gets there.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any, Callable, Hashable

CAP = 4  # candidates per window at most: none waits for more than three others
WAIT_S = 60.0  # the longest a window waits for members still on their way, from its first arrival


class Windows:
    """The open groups of one GPU."""

    def __init__(self, cap: int = CAP):
        self._cond = threading.Condition()
        self._open: dict[Hashable, _Group] = {}
        self._cap = cap

    def join(self, key: Hashable) -> "Seat":
        """A seat in the open group for `key` (a new group when none is open)."""
        with self._cond:
            group = self._open.get(key)
            if group is None:
                group = self._open[key] = _Group(key)
            seat = Seat(self, group)
            group.members.append(seat)
            if len(group.members) >= self._cap:
                self._close(group)
            return seat

    def _close(self, group: "_Group") -> None:
        """No newcomer joins `group` from now on (under the lock)."""
        if self._open.get(group.key) is group:
            del self._open[group.key]


class _Group:
    def __init__(self, key: Hashable):
        self.key = key
        self.secret = secrets.randbits(62)
        self.members: list[Seat] = []  # in joining order; a member that left is removed
        self.tickets: dict[Seat, Any] = {}  # the members that arrived at timing
        self.deadline = 0.0  # monotonic time after which the window no longer waits (set by the first arrival)
        self.running = False
        self.outcomes: dict[Seat, Any] | None = None

    def ready(self) -> bool:
        return all(seat in self.tickets for seat in self.members) or time.monotonic() >= self.deadline

    def leader(self) -> "Seat":
        return next(seat for seat in self.members if seat in self.tickets)


class Seat:
    """One evaluation's place in a group."""

    def __init__(self, windows: Windows, group: _Group):
        self._windows, self._group = windows, group

    @property
    def secret(self) -> int:
        """The group's secret: the members' reference weights and timing inputs derive from it."""
        return self._group.secret

    def leave(self) -> None:
        """Leave before timing (a verdict, a failure, a retry): the window no longer waits for this member. Once
        arrived, leaving does nothing."""
        with self._windows._cond:
            group = self._group
            if self in group.tickets or self not in group.members:
                return
            group.members.remove(self)
            self._windows._close(group)
            self._windows._cond.notify_all()

    def time(self, ticket: Any, window: Callable[[list[Any]], list[Any]]) -> Any:
        """Arrive at timing with `ticket`, and return this member's outcome of `window`, which the first member to
        arrive runs on every arrived member's ticket (in joining order) once all have arrived or left. An exception
        `window` raised is raised to every member."""
        cond, group = self._windows._cond, self._group
        with cond:
            self._windows._close(group)
            group.tickets[self] = ticket
            group.deadline = group.deadline or time.monotonic() + WAIT_S
            cond.notify_all()
            while group.outcomes is None and (group.running or group.leader() is not self or not group.ready()):
                cond.wait(timeout=None if group.running else max(0.01, group.deadline - time.monotonic()))
            if group.outcomes is not None:
                if self in group.outcomes:
                    return _raised(group.outcomes[self])
                seats, shared = [self], False  # came after its group's window: timed alone
            else:
                group.running = True
                seats, shared = [seat for seat in group.members if seat in group.tickets], True
        try:
            outcomes: list[Any] = window([group.tickets[seat] for seat in seats])
        except Exception as exc:  # noqa: BLE001  every member waiting on this window must hear of it
            outcomes = [exc] * len(seats)
        if shared:
            with cond:
                group.outcomes = dict(zip(seats, outcomes))
                cond.notify_all()
        return _raised(outcomes[seats.index(self)])


def _raised(outcome: Any) -> Any:
    """An outcome, or the exception it is raised."""
    if isinstance(outcome, Exception):
        raise outcome
    return outcome
