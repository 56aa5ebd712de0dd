"""`kill -9` of `harness serve` in the middle of a load from 32 clients (issue 60): no answered id is lost. Every
request a client got a 200 for is in the served study's run store, once, with the status and code it was answered
with, and the store holds no id that no client sent; a restart on the same store opens it and answers again."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path

import httpx
import pytest

from harness.corpus.hostile import GOOD, PROBLEM
from tests.serve_fixtures import Server, cpu_overrides, free_port, reply

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]
CUSTOM = {"source": PROBLEM, "name": "add_relu"}
CLIENTS = 32
KILL_AFTER = 120  # answers received before the kill, of which at least KILL_AFTER_CORRECT evaluated kernels
KILL_AFTER_CORRECT = 2
PACE_S = 0.1  # between a client's requests without code (so that evaluations are answered among them)
LOAD_LIMIT_S = 600  # a hang guard: the load reaches KILL_AFTER answers long before this


def _body(client: int, n: int) -> dict[str, object]:
    """A request with an id of its own: mostly replies without code (answered and stored without a worker), and
    from every eighth client a real kernel that sleeps at import (evaluations in flight when the kill comes)."""
    rid = f"c{client}-{n}-{uuid.uuid4().hex[:8]}"
    if client % 8 == 0:
        code = reply(f"import time\ntime.sleep(2)\n{GOOD}\n# {rid}\n")
    else:
        code = f"no code in this reply ({rid})"
    return {"id": rid, "problem": CUSTOM, "code": code}


async def _load(server: Server) -> tuple[dict[str, dict], set[str]]:
    """32 clients send requests one after another until the server is killed (after `KILL_AFTER` answers, evaluated
    kernels among them); the answers received by id, and every id sent."""
    answered: dict[str, dict] = {}
    sent: set[str] = set()
    killed = asyncio.Event()

    async def client(c: httpx.AsyncClient, i: int) -> None:
        n = 0
        while not killed.is_set():
            body = _body(i, n)
            n += 1
            sent.add(str(body["id"]))
            try:
                r = await c.post("/v1/evaluate", json=body)
            except httpx.TransportError:  # the server is gone: this request was never answered
                return
            assert r.status_code == 200, (r.status_code, r.text)
            answered[str(body["id"])] = r.json()
            correct = sum(a["status"] == "correct" for a in answered.values())
            if len(answered) >= KILL_AFTER and correct >= KILL_AFTER_CORRECT and not killed.is_set():
                killed.set()
                await asyncio.to_thread(server.kill9)
            if i % 8:
                await asyncio.sleep(PACE_S)

    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as c:
        await asyncio.wait_for(asyncio.gather(*[client(c, i) for i in range(CLIENTS)]), LOAD_LIMIT_S)
    return answered, sent


def _stored(run_dir: Path) -> list[tuple[str, str, str | None]]:
    """(request id, status, code) of every attempt the served study's store committed."""
    conn = sqlite3.connect(f"file:{run_dir / 'attempts.sqlite'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT finish_reason, status, code FROM attempts").fetchall()
    finally:
        conn.close()
    return [(reason.removeprefix("request "), status, code) for reason, status, code in rows]


def test_kill9_under_load_loses_no_answered_id(tmp_path: Path) -> None:
    port = free_port()
    args = [*cpu_overrides(tmp_path, workers=1), "--name", "kill9-load"]
    server = Server(args, port=port)
    try:
        answered, sent = asyncio.run(_load(server))
    finally:
        server.stop()
    assert len(answered) >= KILL_AFTER
    stored = _stored(tmp_path / "runs" / "serve-kill9-load")
    ids = [rid for rid, _, _ in stored]
    assert len(ids) == len(set(ids)), "an id was stored twice"
    assert set(ids) <= sent, "the store holds an id no client sent"
    by_id = {rid: (status, code) for rid, status, code in stored}
    lost = sorted(set(answered) - set(by_id))
    assert not lost, f"{len(lost)} answered id(s) are not in the store: {lost[:5]}"
    for rid, answer in answered.items():
        assert answer["id"] == rid and by_id[rid] == (answer["status"], answer["code"]), rid
    again = Server(args, port=port)  # the store the kill left opens, and the study goes on
    try:
        with again.http(120) as c:
            r = c.post("/v1/evaluate", json={"problem": CUSTOM, "code": "after the restart"})
        assert r.status_code == 200 and r.json()["status"] == "format_error", r.text
    finally:
        again.stop()
    assert len(_stored(tmp_path / "runs" / "serve-kill9-load")) == len(stored) + 1
