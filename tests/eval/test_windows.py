"""Timing windows (`eval.process._windows`): which evaluations share one timing of the reference, and when it runs.

Threads stand in for evaluations here; `test_shared_timing.py` runs real ones."""

from __future__ import annotations

import threading

import pytest

from eval.process import _windows as windows
from eval.process._windows import Windows


def _arrive(seat, ticket, ran: list, results: dict) -> threading.Thread:
    def window(tickets):
        ran.append(list(tickets))
        return [f"timed {t} with {len(tickets)}" for t in tickets]

    thread = threading.Thread(target=lambda: results.__setitem__(ticket, seat.time(ticket, window)))
    thread.start()
    return thread


def test_members_share_a_secret_and_one_window_runs_once_all_have_arrived_or_left() -> None:
    w = Windows(cap=4)
    a, b, c = (w.join("problem") for _ in range(3))
    assert a.secret == b.secret == c.secret
    ran: list = []
    results: dict = {}
    first = _arrive(a, "a", ran, results)
    second = _arrive(b, "b", ran, results)
    first.join(0.3)
    assert first.is_alive() and not ran  # waits for c, which is still on its way
    c.leave()  # c failed before timing: nobody waits for it
    first.join(30)
    second.join(30)
    assert ran == [["a", "b"]] and results == {"a": "timed a with 2", "b": "timed b with 2"}


def test_a_group_closes_once_a_member_arrives_or_leaves_or_it_is_full() -> None:
    w = Windows(cap=2)
    a, b = w.join("p"), w.join("p")
    full = w.join("p")
    assert full.secret != a.secret == b.secret  # the group of two was full
    left = w.join("q")
    left.leave()
    assert w.join("q").secret != left.secret  # a result may have gone back to an agent: a new group
    d = w.join("r")
    ran: list = []
    results: dict = {}
    _arrive(d, "d", ran, results).join(30)
    late = w.join("r")
    assert late.secret != d.secret and ran == [["d"]]


def test_a_member_not_there_in_time_is_not_waited_for_and_is_timed_alone(monkeypatch) -> None:
    monkeypatch.setattr(windows, "WAIT_S", 0.2)
    w = Windows()
    a, b = w.join("p"), w.join("p")
    ran: list = []
    results: dict = {}
    _arrive(a, "a", ran, results).join(30)
    _arrive(b, "b", ran, results).join(30)
    assert ran == [["a"], ["b"]] and results == {"a": "timed a with 1", "b": "timed b with 1"}


def test_an_exception_of_the_window_reaches_every_member() -> None:
    w = Windows()
    a, b = w.join("p"), w.join("p")
    errors: list = []

    def window(tickets):
        raise RuntimeError("the reference process failed")

    def arrive(seat, ticket):
        with pytest.raises(RuntimeError, match="reference process failed"):
            seat.time(ticket, window)
        errors.append(ticket)

    threads = [threading.Thread(target=arrive, args=(s, t)) for s, t in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(errors) == ["a", "b"]
