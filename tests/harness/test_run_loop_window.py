"""A very large plan: the loop submits trajectories as threads free up (a bounded window of futures), never one
future per trajectory up front, and a stop signal is obeyed with nothing left to submit or cancel."""

from __future__ import annotations

import gc
import signal
import threading
from concurrent.futures import Future
from pathlib import Path

from agents import AgentResponse, Message
from tests.harness.test_run_loop import ScriptedAgent, ScriptedEvaluator, run_loop
from tests.run_fixtures import FINISH_GRACE_S


def _futures() -> int:
    return sum(isinstance(o, Future) for o in gc.get_objects())


class CountingAgent(ScriptedAgent):
    """Counts the live `Future` objects at every 25th request (a full count of the heap is slow)."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.most_futures = 0

    def respond(self, messages: list[Message], **where: object) -> AgentResponse:
        if len(self.calls) % 25 == 0:
            self.most_futures = max(self.most_futures, _futures())
        return super().respond(messages, **where)  # type: ignore[arg-type]


def test_a_large_plan_holds_a_window_of_futures_not_one_per_trajectory(tmp_path: Path) -> None:
    before = _futures()
    agent = CountingAgent()
    _, outcome, store = run_loop(tmp_path, agent, ScriptedEvaluator(eval_delay=0.0), samples=400, turns=1,
                                 max_concurrency=2)
    assert outcome.finished and len(agent.calls) == 400 and store.totals().attempts == 400
    assert agent.most_futures - before <= 2 * 2  # the window (and ended ones not yet reaped), where all 400 were
    store.close()


def test_a_stop_signal_during_a_huge_plan_stops_at_once(tmp_path: Path, stop_handlers: None) -> None:
    """Ctrl-C (SIGTERM and SIGHUP take the same path) during a 100,000-trajectory plan: the attempts in flight finish
    and are recorded, no further trajectory starts, and nothing of the plan's rest is ever submitted."""
    asked = threading.Event()

    class SignallingAgent(ScriptedAgent):
        def respond(self, messages: list[Message], **where: object) -> AgentResponse:
            if len(self.calls) == 10:
                asked.set()
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]
            return super().respond(messages, **where)  # type: ignore[arg-type]

    agent = SignallingAgent(delay=0.05)
    _, outcome, store = run_loop(tmp_path, agent, ScriptedEvaluator(eval_delay=0.0), samples=100_000, turns=1,
                                 max_concurrency=2, stop_grace_s=FINISH_GRACE_S)
    assert asked.is_set() and outcome.stop_reason == "interrupted" and outcome.abandoned == 0
    recorded = {(a.problem_id, a.sample, a.turn) for a in store.attempts()}
    assert recorded == set(agent.calls) and len(recorded) <= 10 + 2 + 2  # those asked, and at most a window more
    store.close()
