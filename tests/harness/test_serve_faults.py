"""`harness serve` under requests that reuse ids, carry odd or oversized fields, or repeat a cached candidate while
the evaluator is busy, against a real server on loopback: every answer is its own request's, every bad field is a
4xx naming it, and no valid request costs a 500."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid

import httpx
import pytest

from agents import extract_code
from harness.client import AsyncEvalClient, ServeError
from harness.corpus.hostile import GOOD, PROBLEM
from tests.serve_fixtures import Server, cpu_overrides, reply

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]
CUSTOM = {"source": PROBLEM, "name": "add_relu"}
SLOW_IMPORT_S = 60  # the busy evaluation's sleep at import: far longer than answering a cached verdict takes


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve_faults")
    overrides = [*cpu_overrides(tmp, workers=1), f"eval.import_timeout_s={SLOW_IMPORT_S * 3}"]
    with Server([*overrides, "--name", "faults"]) as s:
        yield s


@pytest.fixture
def client(server):
    with server.http() as c:
        yield c


def distinct(code: str) -> str:
    """The same candidate with a source of its own (neither the cache nor coalescing answers it)."""
    return f"{code}\n# {uuid.uuid4().hex}\n"


def post_raw(client: httpx.Client, path: str, text: str) -> httpx.Response:
    """POST a JSON body written by hand (for `\\u` escapes json.dumps would never write)."""
    return client.post(path, content=text.encode(), headers={"content-type": "application/json"})


def no_500s(server) -> bool:
    return not any(k.startswith("harness_serve_responses_total") and '"5' in k for k in server.metrics())


def test_a_reused_id_with_other_content_is_409_never_another_answer(client, server):
    body = {"id": "bound-1", "problem": CUSTOM, "code": reply(distinct(GOOD))}
    first = client.post("/v1/evaluate", json=body)
    assert first.status_code == 200 and first.json()["status"] == "correct"
    assert client.post("/v1/evaluate", json=body).json() == first.json()  # a retry: the same answer
    for change in ({"code": reply(distinct(GOOD))}, {"problem": "L1/13_softmax"}, {"turn": 2}, {"reward": "kevin"}):
        r = client.post("/v1/evaluate", json={**body, **change})
        assert r.status_code == 409, (change, r.text)
        assert r.json()["error"]["field"] == "id" and "bound-1" in r.json()["error"]["message"]
    batch = client.post("/v1/evaluate/batch", json={"requests": [
        body, {**body, "code": "other"}, {"id": "bound-2", "problem": CUSTOM, "code": "no code"}]}).json()["results"]
    assert batch[0] == first.json()
    assert batch[1]["error"]["code"] == 409 and batch[1]["error"]["field"] == "requests[1].id"
    assert batch[2]["id"] == "bound-2" and batch[2]["status"] == "format_error"


def test_two_requests_racing_on_one_id_get_their_own_answer_or_409(server):
    """Sent at once under one new id: one is answered with its own code, the other is refused."""
    codes = [reply(distinct(GOOD)), reply(distinct(GOOD))]

    async def race():
        async with AsyncEvalClient(server.url, timeout=600) as c:
            return await asyncio.gather(*[c.evaluate(CUSTOM, code, request_id="racing-1") for code in codes],
                                        return_exceptions=True)

    answers = asyncio.run(race())
    refused = [a for a in answers if isinstance(a, ServeError)]
    assert len(refused) == 1 and refused[0].status == 409, answers
    (i, answered), = [(i, a) for i, a in enumerate(answers) if isinstance(a, dict)]
    assert answered["code"] == extract_code(codes[i]) and answered["status"] == "correct"


LONE = "\\ud800"  # a lone surrogate as JSON writes it: valid JSON, not text


@pytest.mark.parametrize("text, field", [
    ('{"problem": "L1/13_softmax", "code": "x", "turn": 9223372036854775808}', "turn"),
    ('{"problem": "L1/13_softmax", "code": "x", "turn": 0}', "turn"),
    (f'{{"problem": "L1/13_softmax", "code": "x", "id": "a{LONE}"}}', "id"),
    (f'{{"problem": "L1/13_softmax", "code": "prose {LONE} only"}}', "code"),
    (f'{{"problem": {{"source": "x{LONE}", "name": "p"}}, "code": "x"}}', "problem.source"),
    (f'{{"problem": "L1/13_softmax", "code": "x", "a{LONE}": 1}}', "body (a key)"),
    (json.dumps({"problem": {"source": PROBLEM, "name": "p" * 5000}, "code": reply(GOOD)}), "problem.name"),
    ('{"problem": "L1/13_softmax", "code": "x", "reward": 5}', "reward"),
    ('{"problem": "L1/13_softmax", "code": "x", "reward": ["kevin"]}', "reward"),
    (json.dumps({"problem": "L1/13_softmax", "code": "x", "id": "i" * 129}), "id"),
])
def test_odd_fields_are_400_naming_them(client, server, text, field):
    r = post_raw(client, "/v1/evaluate", text)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == field
    assert no_500s(server)


def test_odd_fields_in_batch_items_and_histories_are_theirs_and_valid_extremes_are_answered(client, server):
    batch = post_raw(client, "/v1/evaluate/batch", '{"requests": [{"problem": "L1/13_softmax", "code": "no code"}, '
                                                   f'{{"problem": "L1/13_softmax", "code": "{LONE}"}}]}}')
    assert batch.status_code == 200, batch.text
    ok, bad = batch.json()["results"]
    assert ok["status"] == "format_error" and bad["error"] == {
        "code": 400, "field": "requests[1].code", "message": bad["error"]["message"]}
    history = post_raw(client, "/v1/messages", '{"problem": "L1/13_softmax", '
                                              f'"history": [{{"reply": "r{LONE}", "feedback": "f"}}]}}')
    assert history.status_code == 400 and history.json()["error"]["field"] == "history[0].reply"
    top = client.post("/v1/evaluate", json={"problem": "L1/13_softmax", "code": "no code", "turn": 2 ** 63 - 1})
    assert top.status_code == 200 and top.json()["status"] == "format_error"
    assert no_500s(server)


def test_a_cached_verdict_is_answered_while_the_evaluator_is_busy(client, server):
    """The only worker is busy with a slow candidate; a repeat of a candidate already judged is answered from the
    result cache at once, not after the slow one."""
    code = reply(distinct(GOOD))
    assert client.post("/v1/evaluate", json={"problem": CUSTOM, "code": code}).json()["status"] == "correct"
    slow = reply(f"import time\ntime.sleep({SLOW_IMPORT_S})\n{distinct(GOOD)}")
    done = threading.Event()

    def busy() -> None:
        with server.http() as c:
            c.post("/v1/evaluate", json={"problem": CUSTOM, "code": slow})
        done.set()

    thread = threading.Thread(target=busy)
    thread.start()
    try:
        while server.metrics()["harness_serve_in_flight"] < 1:
            assert not done.is_set(), "the slow candidate ended before it was seen in flight"
            time.sleep(0.1)
        again = client.post("/v1/evaluate", json={"problem": CUSTOM, "code": code}).json()
        assert not done.is_set(), "the cached verdict waited for the evaluation in flight"
        assert again["status"] == "correct" and again["result"]["cached"] is True
        assert again["timings"]["queue_s"] == 0.0
    finally:
        thread.join(SLOW_IMPORT_S * 5)


def test_under_load_every_answer_is_its_own_requests(server):
    """48 concurrent clients: fresh ids, retries of an id with the same content, reuses with other content and odd
    fields. Each 200 is for its own request (its id, problem and code), each reuse is a 409, each odd field a 400."""
    bound = [(f"load-{uuid.uuid4().hex}", reply(distinct(GOOD))) for _ in range(4)]

    async def one(c: AsyncEvalClient, i: int) -> tuple[str, object, object]:
        rid, code = bound[i % 4]
        kind = ("fresh", "retry", "reuse", "odd")[i % 4 if i >= 4 else 1]
        if kind == "fresh":
            rid, code = f"load-{i}-{uuid.uuid4().hex}", f"no code in reply {i}"
        elif kind == "reuse":
            code = f"other content {i}"
        body = {"id": rid, "problem": CUSTOM, "code": code, **({"turn": 2 ** 64} if kind == "odd" else {})}
        try:
            return kind, body, await c._call("POST", "/v1/evaluate", json=body)
        except ServeError as exc:
            return kind, body, exc

    async def load():
        async with AsyncEvalClient(server.url, timeout=600) as c:
            await asyncio.gather(*[one(c, i) for i in range(4)])  # bind the four ids first
            return await asyncio.wait_for(asyncio.gather(*[one(c, i) for i in range(4, 52)]), timeout=600)

    outcomes = asyncio.run(load())
    for kind, body, got in outcomes:
        if kind in ("fresh", "retry"):
            assert isinstance(got, dict), (kind, got)
            assert got["id"] == body["id"] and got["problem"] == "custom/add_relu"
            code = extract_code(body["code"]) if "```" in body["code"] else None
            assert got["code"] == code
        else:
            assert isinstance(got, ServeError) and got.status == (409 if kind == "reuse" else 400), (kind, got)
    assert no_500s(server)
