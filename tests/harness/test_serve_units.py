"""Rewards, the work queue and the client's retry rules, without a server (the server's tests are test_serve*.py)."""

from __future__ import annotations

import threading
import time

import pytest

from eval.result import EvalResult, Status
from harness.env import discounted_returns
from harness.serve import rewards
from harness.serve.queue import QueueFull, WorkQueue


def result(status: Status, speedup: float | None = None, timed: bool = False) -> EvalResult:
    return EvalResult(status=status, speedup=speedup, timing_meaningful=timed)


@pytest.mark.parametrize("name", ["log_speedup", "kevin", "fast_0", "fast_1", "fast_1.5", "fast_3.25"])
def test_rejected_never_earns_more_than_incorrect(name):
    assert rewards.score(name, result(Status.REJECTED)) <= rewards.score(name, result(Status.INCORRECT))
    assert rewards.score(name, result(Status.CORRECT, 4.0, True)) > rewards.score(name, result(Status.INCORRECT))


def test_reward_values():
    assert rewards.score("log_speedup", result(Status.CORRECT)) == 1.0  # untimed (CPU): correctness only
    assert rewards.score("log_speedup", result(Status.CORRECT, 2.0, True)) == pytest.approx(1.0 + 0.6931, abs=1e-3)
    assert rewards.score("log_speedup", result(Status.CORRECT, 1e-9, True)) == -1.0  # clipped
    assert rewards.score("log_speedup", result(Status.FORMAT_ERROR)) == -1.0
    assert rewards.score("fast_1.5", result(Status.CORRECT, 1.4, True)) == 0.0
    assert rewards.score("fast_1.5", result(Status.CORRECT, 1.6, True)) == 1.0
    assert rewards.score("fast_1", result(Status.CORRECT, 5.0, False)) == 0.0  # a speedup not measured earns nothing
    assert rewards.score("kevin", result(Status.CORRECT, 2.0, True)) == pytest.approx(2.3)
    assert discounted_returns([0.3, 0.0, 1.3]) == pytest.approx([0.3 + 0.16 * 1.3, 0.4 * 1.3, 1.3])
    with pytest.raises(rewards.RewardError, match="unknown reward"):
        rewards.get("nonesuch")


def test_custom_reward_is_checked_when_registered():
    rewards.register("test_correct_only", lambda r, turn: float(r.is_correct))
    assert rewards.score("test_correct_only", result(Status.CORRECT)) == 1.0
    with pytest.raises(rewards.RewardError, match="rejected"):
        rewards.register("test_pays_cheats", lambda r, turn: 1.0 if r.status is Status.REJECTED else 0.0)
    assert "test_pays_cheats" not in rewards.names()


def test_queue_coalesces_bounds_and_cancels():
    gate = threading.Event()
    runs: list[str] = []

    def job(tag: str):
        def run():
            gate.wait(30)
            runs.append(tag)
            return tag
        return run

    cancelled: list[int] = []
    q = WorkQueue(1, 2, on_cancel=cancelled.append)
    (a,) = q.submit([("a", job("a"))])
    deadline = time.monotonic() + 300  # a hang guard: a busy machine may start the thread late
    while q.in_flight < 1:
        assert time.monotonic() < deadline, "the queue never started the first job"
        time.sleep(0.01)
    b1, b2, c = q.submit([("b", job("b")), ("b", job("b-again")), ("c", job("c"))])
    assert b1 is b2 and b1.waiters == 2 and q.depth == 2
    with pytest.raises(QueueFull) as full:
        q.submit([("d", job("d"))])
    assert full.value.retry_after >= 1 and full.value.limit == 2
    assert q.submit([("a", job("a2"))])[0] is a  # running work is joined, not queued again
    q.release([c])  # its only waiter left: never runs
    q.release([b1])  # one of two waiters left: still runs
    gate.set()
    assert a.future.result(10) == "a" and b2.future.result(10) == "b"
    assert c.future.cancelled() and cancelled == [1] and runs == ["a", "b"]
    q.close()


def test_catalog_refuses_problem_sources_when_told():
    from harness.overrides import compose_config
    from harness.serve.catalog import BadRequest, Catalog, NotFound
    from harness.corpus.hostile import PROBLEM

    config = compose_config(["problems=smoke"])
    open_catalog, closed = Catalog(config), Catalog(config, allow_problem_source=False)
    assert open_catalog.find({"source": PROBLEM, "name": "add_relu"}).id == "custom/add_relu"
    with pytest.raises(BadRequest) as refused:
        closed.find({"source": PROBLEM, "name": "add_relu"})
    assert refused.value.field == "problem" and "--no-problem-source" in str(refused.value)
    assert closed.find("L1/13_softmax").id == "L1/13_softmax"
    with pytest.raises(NotFound):
        closed.find("L1/01_square_matmul")  # not in problems=smoke


@pytest.mark.parametrize("argv, env, phrase", [
    (["serve", "--no-auth", "--host", "0.0.0.0"], {}, "only on a loopback address"),
    (["serve"], {}, "HARNESS_SERVE_TOKEN"),
    (["serve", "--no-auth", "eval.nonesuch=1"], {}, "unknown config key 'eval.nonesuch'"),
    (["serve", "--no-auth", "--reward", "nonesuch"], {}, "unknown reward"),
    (["serve", "--no-auth", "--max-queue", "0"], {}, "--max-queue must be >= 1"),
    # a reward plugin that cannot be imported is named (the handler once named a class bound after the import)
    (["serve", "--no-auth", "--rewards", "no_such_reward_plugin"], {}, "No module named 'no_such_reward_plugin'"),
])
def test_serve_refuses_bad_settings_before_starting(argv, env, phrase, capsys, monkeypatch):
    from harness.cli import main

    monkeypatch.delenv("HARNESS_SERVE_TOKEN", raising=False)
    assert main(argv) == 2
    assert phrase in capsys.readouterr().err


def test_the_announced_address_accepts_connections_before_the_server_loop_runs():
    """`harness serve` prints its address as soon as its socket is ready; a client that connects at once must be
    queued, not refused (CI's server test was refused when it connected before uvicorn's own `listen`)."""
    import socket

    from harness.commands.serve_cmd import listening_socket

    sock = listening_socket("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname()[:2], timeout=10):  # nothing has called accept or run a loop
            pass
    finally:
        sock.close()
