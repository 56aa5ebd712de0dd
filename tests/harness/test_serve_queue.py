"""`harness serve` under pressure: a full queue answers 429 with Retry-After, and a client that leaves cancels its
queued work (it is never evaluated). One worker and a queue of one make both happen on demand."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from harness.corpus.hostile import GOOD, PROBLEM
from tests.serve_fixtures import Server, cpu_overrides

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
CUSTOM = {"source": PROBLEM, "name": "add_relu"}


def slow(tag: str, seconds: int = 8) -> str:
    """An honest candidate that takes `seconds` to import: it holds the one worker that long."""
    return f"import time\ntime.sleep({seconds})  # {tag}\n{GOOD}"


def wait_for(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting (hang guard)"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serveq")
    with Server([*cpu_overrides(tmp, workers=1, cache=False), "--max-queue", "1", "--name", "queue"]) as s:
        yield s


def test_full_queue_429_then_a_leaving_client_cancels_its_work(server):
    answers: dict[str, object] = {}

    def send(name: str, code: str, timeout: float) -> None:
        try:
            with httpx.Client(base_url=server.url, timeout=timeout) as c:
                answers[name] = c.post("/v1/evaluate", json={"problem": CUSTOM, "code": code})
        except httpx.TimeoutException as exc:
            answers[name] = exc

    running = threading.Thread(target=send, args=("a", slow("a"), 300))
    running.start()
    wait_for(lambda: server.metrics()["harness_serve_in_flight"] == 1)
    queued = threading.Thread(target=send, args=("b", slow("b"), 2.5))  # gives up while still queued
    queued.start()
    wait_for(lambda: server.metrics()["harness_serve_queue_depth"] == 1)
    with httpx.Client(base_url=server.url, timeout=60) as c:
        full = c.post("/v1/evaluate", json={"problem": CUSTOM, "code": slow("c")})
        # a request with nothing to evaluate (a format error) is still answered at once
        prose = c.post("/v1/evaluate", json={"problem": CUSTOM, "code": "no code"})
    assert full.status_code == 429 and int(full.headers["retry-after"]) >= 1 and full.json()["error"]["limit"] == 1
    assert prose.status_code == 200 and prose.json()["status"] == "format_error"
    queued.join(60)
    assert isinstance(answers["b"], httpx.TimeoutException)
    wait_for(lambda: server.metrics()["harness_serve_cancelled_total"] == 1)
    assert server.metrics()["harness_serve_queue_depth"] == 0
    running.join(300)
    assert answers["a"].status_code == 200 and answers["a"].json()["status"] == "correct"
    time.sleep(1.0)
    m = server.metrics()
    assert m["harness_serve_evaluations_total"] == 1  # b never ran
    assert m["harness_serve_in_flight"] == 0


def test_answers_say_where_their_time_went(server):
    """Each answer's `timings`: a request that waited behind another spent time in the queue, both spent their
    import's sleep evaluating, and no phase adds up to more than the caller waited."""
    answers: dict[str, tuple[dict, float]] = {}

    def send(name: str, code: str) -> None:
        with httpx.Client(base_url=server.url, timeout=300) as c:
            t0 = time.perf_counter()
            r = c.post("/v1/evaluate", json={"problem": CUSTOM, "code": code})
            answers[name] = (r.json(), time.perf_counter() - t0)

    first = threading.Thread(target=send, args=("first", slow("t-first", 5)))
    first.start()
    wait_for(lambda: server.metrics()["harness_serve_in_flight"] == 1)
    second = threading.Thread(target=send, args=("second", slow("t-second", 5)))
    second.start()
    wait_for(lambda: server.metrics()["harness_serve_queue_depth"] == 1)  # it waits behind the first
    first.join(300)
    second.join(300)
    send("prose", "no code")
    for name, (answer, latency) in answers.items():
        t = answer["timings"]
        assert set(t) == {"queue_s", "eval_s", "handoff_s", "store_s"} and min(t.values()) >= 0, name
        assert sum(t.values()) <= latency, name
    assert answers["first"][0]["status"] == answers["second"][0]["status"] == "correct"
    assert answers["first"][0]["timings"]["eval_s"] >= 5 and answers["second"][0]["timings"]["eval_s"] >= 5
    assert answers["second"][0]["timings"]["queue_s"] > 0
    prose = answers["prose"][0]
    assert prose["status"] == "format_error" and prose["timings"]["queue_s"] == prose["timings"]["eval_s"] == 0
