"""`harness serve` against a real server on loopback (a `harness serve` subprocess, real HTTP, real evaluations on
CPU under the Triton interpreter): the contract, auth, 400/401/404/413, batch order, coalescing, a load test."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
import pytest

from agents import extract_code
from harness.app import prompt_builder
from harness.cli import main
from harness.client import AsyncEvalClient, EvalClient
from harness.overrides import compose_config
from harness.store import read_run
from problems.select import select_problems
from harness.corpus.hostile import GOOD, HOSTILE, PROBLEM
from tests.serve_fixtures import Server, cpu_overrides, reply

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]
TOKEN = "test-token-" + uuid.uuid4().hex
CUSTOM = {"source": PROBLEM, "name": "add_relu"}
BODY_LIMIT = 300_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    with Server([*cpu_overrides(tmp), "--max-body-bytes", str(BODY_LIMIT), "--name", "contract"], token=TOKEN) as s:
        s.tmp = tmp
        yield s


@pytest.fixture
def client(server):
    with server.http() as c:
        yield c


def distinct(code: str, tag: str) -> str:
    """The same candidate with a distinct source (so neither the cache nor coalescing answers it)."""
    return f"{code}\n# {tag} {uuid.uuid4().hex}\n"


def test_evaluate_contract(client, server):
    """A reply with prose around the code: the loop's extraction, a real verdict, a reward, feedback, the result."""
    body = {"problem": CUSTOM, "code": reply(distinct(GOOD, "contract")), "backend": "triton", "id": "req-contract-1"}
    r = client.post("/v1/evaluate", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert {"id", "status", "speedup", "reward", "feedback", "result"} <= set(d)
    assert d["id"] == "req-contract-1" and d["status"] == "correct" and d["speedup"] is None
    assert d["reward"] == 1.0  # log_speedup: correct and untimed on a CPU
    assert d["feedback"].startswith("Status: correct") and "add_relu_kernel" in d["feedback"]
    assert d["result"]["status"] == "correct" and d["result"]["kernels"]["own_kernels_launched"] == ["add_relu_kernel"]
    assert "seed" not in json.dumps(d["result"]).lower()
    # the same request again: the same answer, not a second evaluation; the same id with other content: 409
    again = client.post("/v1/evaluate", json=body).json()
    assert again == d
    other = client.post("/v1/evaluate", json={**body, "code": "anything"})
    assert other.status_code == 409 and other.json()["error"]["field"] == "id"


def test_rewards_by_name_and_failures(client):
    wrong = client.post("/v1/evaluate", json={"problem": CUSTOM, "code": reply(distinct(HOSTILE["wrong_values"][0], "w"))})
    assert wrong.json()["status"] == "incorrect" and wrong.json()["reward"] == -0.25
    prose = client.post("/v1/evaluate", json={"problem": CUSTOM, "code": "I cannot write this kernel.", "reward": "fast_1"})
    assert prose.json()["status"] == "format_error" and prose.json()["reward"] == 0.0
    assert "no fenced code block" in prose.json()["feedback"]
    kevin = client.post("/v1/evaluate", json={"problem": CUSTOM, "code": GOOD, "reward": "kevin"}).json()
    assert kevin["status"] == "correct" and kevin["reward"] == pytest.approx(0.3)


def test_auth(server):
    body = {"problem": CUSTOM, "code": "x"}
    with httpx.Client(base_url=server.url, timeout=60) as anon:
        assert anon.post("/v1/evaluate", json=body).status_code == 401
        assert anon.get("/metrics").status_code == 401
        assert anon.get("/v1/problems").status_code == 401
        wrong = anon.post("/v1/evaluate", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        assert anon.get("/v1/health").json()["status"] == "ok"


@pytest.mark.parametrize("body, field", [
    ({"code": "x"}, "problem"),
    ({"problem": "L1/13_softmax"}, "code"),
    ({"problem": "L1/13_softmax", "code": 3}, "code"),
    ({"problem": "L1/13_softmax", "code": "x", "backend": "metal"}, "backend"),
    ({"problem": "L1/13_softmax", "code": "x", "eval": "nonesuch"}, "eval"),
    ({"problem": "L1/13_softmax", "code": "x", "reward": "nonesuch"}, "reward"),
    ({"problem": {"source": "x = 1\n", "name": "p"}, "code": "x"}, "problem.source"),
    ({"problem": 7, "code": "x"}, "problem"),
    ([1, 2], "body"),
])
def test_bad_input_names_the_field(client, body, field):
    r = client.post("/v1/evaluate", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == field and field.split(".")[0] in r.json()["error"]["message"]


def test_malformed_json_oversized_body_unknown_problem(client):
    r = client.post("/v1/evaluate", content=b'{"problem": "L1/13_softmax", "code": ', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "body"
    big = client.post("/v1/evaluate", json={"problem": CUSTOM, "code": "#" * (BODY_LIMIT + 10)})
    assert big.status_code == 413 and big.json()["error"]["limit"] == BODY_LIMIT and str(BODY_LIMIT) in big.text
    missing = client.post("/v1/evaluate", json={"problem": "L9/99_nothing", "code": "x"})
    assert missing.status_code == 404 and "L9/99_nothing" in missing.json()["error"]["message"]
    # still serving after all of that
    assert client.get("/v1/health").json()["status"] == "ok"


def test_batch_keeps_order_and_isolates_bad_items(client):
    items = [
        {"id": "b0", "problem": CUSTOM, "code": reply(distinct(GOOD, "b0"))},
        {"id": "b1", "problem": CUSTOM},  # no code
        {"id": "b2", "problem": CUSTOM, "code": "no code here"},
        {"id": "b3", "problem": CUSTOM, "code": distinct(HOSTILE["wrong_values"][0], "b3")},
        {"id": "b4", "problem": "L9/99_nothing", "code": "x"},
        {"id": "b5", "problem": CUSTOM, "code": distinct(HOSTILE["os_exit_in_forward"][0], "b5")},
    ]
    r = client.post("/v1/evaluate/batch", json={"requests": items})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert len(res) == len(items)
    assert [x.get("id") for x in res] == ["b0", None, "b2", "b3", None, "b5"]
    assert [x.get("status") for x in res] == ["correct", None, "format_error", "incorrect", None, "crash"]
    assert res[1]["error"]["code"] == 400 and res[1]["error"]["field"] == "requests[1].code"
    assert res[4]["error"]["code"] == 404
    assert client.post("/v1/evaluate/batch", json={"requests": "x"}).json()["error"]["field"] == "requests"


def test_problems_and_prompts_are_the_loops(client, server):
    listed = client.get("/v1/problems").json()["problems"]
    assert {p["id"] for p in listed} == {p.id for p in select_problems("all")}
    r = client.get("/v1/problems/L1/13_softmax", params={"backend": "cuda"})
    assert r.status_code == 200
    config = compose_config(["problems=all", *cpu_overrides(server.tmp)])
    problem = next(p for p in select_problems("L1/13_softmax"))
    expected = [{"role": m.role, "content": m.content} for m in prompt_builder(config, "cuda").messages(problem.source)]
    assert r.json()["messages"] == expected and "load_inline" in json.dumps(expected)
    assert "META" not in r.json()["problem"]["source"]
    assert client.get("/v1/problems/L1/13_softmax", params={"backend": "x"}).status_code == 400
    assert client.get("/v1/problems/L9/nothing").status_code == 404


def test_identical_requests_are_coalesced(client, server):
    code = reply(distinct(GOOD, "coalesce"))
    before = server.metrics()

    async def burst():
        async with AsyncEvalClient(server.url, TOKEN) as c:
            return await asyncio.gather(*[c.evaluate(CUSTOM, code) for _ in range(6)])

    answers = asyncio.run(burst())
    after = server.metrics()
    assert {a["status"] for a in answers} == {"correct"} and len({a["id"] for a in answers}) == 6
    assert after["harness_serve_evaluations_total"] - before["harness_serve_evaluations_total"] == 1
    shared = (after["harness_serve_coalesced_total"] - before["harness_serve_coalesced_total"]
              + after["harness_serve_cached_total"] - before["harness_serve_cached_total"])
    assert shared == 5
    # afterwards the authenticated result cache answers it
    later = EvalClient(server.url, TOKEN).evaluate(CUSTOM, code)
    assert later["result"]["cached"] is True and later["status"] == "correct"


def test_load_64_clients_each_get_exactly_one_answer(server):
    """64 concurrent clients, 4 distinct candidates among them: 64 answers, one per id; at most 4 evaluations."""
    codes = [reply(distinct(GOOD, f"load{k}")) for k in range(4)]
    ids = [f"load-{i}-{uuid.uuid4().hex}" for i in range(64)]
    before = server.metrics()

    async def one(i: int) -> dict:
        async with AsyncEvalClient(server.url, TOKEN, timeout=600) as c:
            return await c.evaluate(CUSTOM, codes[i % 4], request_id=ids[i])

    async def all_of_them():
        return await asyncio.wait_for(asyncio.gather(*[one(i) for i in range(64)]), timeout=600)

    answers = asyncio.run(all_of_them())
    after = server.metrics()
    assert sorted(a["id"] for a in answers) == sorted(ids)
    assert {a["status"] for a in answers} == {"correct"}
    assert after["harness_serve_evaluations_total"] - before["harness_serve_evaluations_total"] <= 4
    assert after['harness_serve_verdicts_total{status="correct"}'] - before.get(
        'harness_serve_verdicts_total{status="correct"}', 0) == 64


def test_metrics_and_audit_trail(client, server, capsys):
    text = client.get("/metrics").text
    for name in ("harness_serve_queue_depth", "harness_serve_in_flight", "harness_serve_evaluations_per_second",
                 'harness_serve_verdicts_total{status="correct"}', 'harness_serve_device_busy_share{device="cpu"}'):
        assert name in text
    run = read_run(server.tmp / "runs" / "serve-contract")
    statuses = [a.status for a in run.attempts]
    assert "correct" in statuses and "incorrect" in statuses and "format_error" in statuses
    ok = next(a for a in run.attempts if a.status == "correct")
    assert ok.code == extract_code(ok.reply) and ok.feedback.startswith("Status: correct")
    # `harness report` works on the served study: its problems are the ones clients asked about
    out = server.tmp / "report"
    assert main(["report", str(server.tmp / "runs" / "serve-contract"), "--out", str(out)]) == 0
    assert f"{len({a.problem_id for a in run.attempts})} problems, correct" in capsys.readouterr().out
    assert (out / "leaderboard.html").is_file()
