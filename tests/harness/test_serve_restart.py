"""`kill -9` of `harness serve` in the middle of a batch, then a restart on the same port: the client's retries
complete the batch, and every answer equals the one `harness eval` gives for the same candidate."""

from __future__ import annotations

import json
import threading
import time

import pytest

from agents import extract_code
from harness.cli import main
from harness.client import EvalClient
from agents.retry import RetryPolicy
from harness.corpus.hostile import GOOD, HOSTILE, PROBLEM
from tests.serve_fixtures import Server, cpu_overrides, free_port, reply

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]
CUSTOM = {"source": PROBLEM, "name": "add_relu"}
TOKEN = "restart-token"


def test_kill9_mid_batch_then_restart(tmp_path, capsys):
    port = free_port()
    args = [*cpu_overrides(tmp_path, workers=1), "--name", "restart"]
    slow_good = f"import time\ntime.sleep(4)\n{GOOD}\n# restart\n"
    candidates = [slow_good, HOSTILE["wrong_values"][0] + "\n# restart\n", HOSTILE["raises"][0],
                  "no code at all"]
    texts = [reply(c) if c != "no code at all" else c for c in candidates]
    results: dict[str, object] = {}
    policy = RetryPolicy(max_attempts=60, initial_delay_s=0.5, max_delay_s=5.0)
    first = Server(args, token=TOKEN, port=port)
    try:
        client = EvalClient(first.url, TOKEN, policy=policy, timeout=600)

        def run_batch() -> None:
            try:
                results["answers"] = client.evaluate_batch([{"problem": CUSTOM, "code": t} for t in texts])
            except Exception as exc:  # noqa: BLE001  reported by the assertion below
                results["error"] = exc

        batch = threading.Thread(target=run_batch)
        batch.start()
        deadline = time.monotonic() + 120
        while first.metrics()["harness_serve_in_flight"] < 1:  # the batch is being evaluated
            assert time.monotonic() < deadline, "the batch never started"
            time.sleep(0.2)
        first.kill9()
    finally:
        first.stop()
    second = Server(args, token=TOKEN, port=port)
    try:
        batch.join(600)
        assert "error" not in results, results.get("error")
        answers = results["answers"]
        answered = second.metrics()  # the restarted server gave the answers: the first died before answering
        assert sum(v for k, v in answered.items() if k.startswith("harness_serve_verdicts_total")) == len(texts)
    finally:
        second.stop()
    assert [a["status"] for a in answers] == ["correct", "incorrect", "runtime_error", "format_error"]
    # the same candidates through `harness eval` (its CLI entry, default settings, on the CPU)
    problem_file = tmp_path / "problem.py"
    problem_file.write_text(PROBLEM)
    for text, answer in zip(texts[:3], answers[:3]):
        cand = tmp_path / "candidate.py"
        cand.write_text(extract_code(text))
        assert main(["eval", "--problem", str(problem_file), "--candidate", str(cand), "--device", "cpu",
                     "--no-cache", "--json"]) == 0
        expected = json.loads(capsys.readouterr().out)
        got = answer["result"]
        assert got["status"] == expected["status"] and answer["status"] == expected["status"]
        assert (got["mismatch"] is None) == (expected["mismatch"] is None)
        assert (got["kernels"] or {}).get("own_kernels_launched") == (expected["kernels"] or {}).get("own_kernels_launched")
        assert got["speedup"] is None and expected["speedup"] is None


def _waiting_or_running(server: Server) -> float:
    """The evaluations a server holds now: running, or queued for a worker."""
    metrics = server.metrics()
    return metrics["harness_serve_in_flight"] + metrics["harness_serve_queue_depth"]


def test_a_stop_signal_answers_waiting_requests_503_and_their_retries_complete_after_a_restart(tmp_path):
    """SIGTERM (what Kubernetes and SLURM send) while requests wait: each is answered 503 with a Retry-After, which
    clients retry, not a bare 500 when the grace period cuts it off (as a device run of `harness bench serve` showed);
    a client's retries then complete on the restarted server with the right verdict."""
    import httpx

    port = free_port()
    args = [*cpu_overrides(tmp_path, workers=1), "--name", "stop"]
    slow = [reply(f"import time\ntime.sleep(4)\n{GOOD}\n# stop {i}\n") for i in range(2)]
    policy = RetryPolicy(max_attempts=60, initial_delay_s=0.5, max_delay_s=5.0)
    raw: dict[str, httpx.Response] = {}
    retried: dict[str, object] = {}
    first = Server(args, token=TOKEN, port=port)
    try:
        client = EvalClient(first.url, TOKEN, policy=policy, timeout=600)

        def post_once() -> None:
            raw["response"] = httpx.post(f"{first.url}/v1/evaluate", json={"problem": CUSTOM, "code": slow[0]},
                                         headers={"Authorization": f"Bearer {TOKEN}"}, timeout=600)

        def with_retries() -> None:
            try:
                retried["answer"] = client.evaluate(CUSTOM, slow[1])
            except Exception as exc:  # noqa: BLE001  reported by the assertion below
                retried["error"] = exc

        threads = [threading.Thread(target=post_once), threading.Thread(target=with_retries)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while _waiting_or_running(first) < 2:  # both requests arrived: one evaluates, the other waits
            assert time.monotonic() < deadline, "the two requests did not both arrive"
            time.sleep(0.2)
        first.stop()  # SIGTERM; neither evaluation can have ended (each sleeps 4 s at import)
    finally:
        first.stop()
    threads[0].join(120)
    response = raw["response"]
    assert response.status_code == 503, (response.status_code, response.text)
    assert response.headers["Retry-After"] == "5" and "the service is stopping" in response.json()["error"]["message"]
    second = Server(args, token=TOKEN, port=port)
    try:
        threads[1].join(600)
    finally:
        second.stop()
    assert "error" not in retried, retried.get("error")
    assert retried["answer"]["status"] == "correct", retried["answer"]["result"]["reason"]
