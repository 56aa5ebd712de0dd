"""`harness bench serve`: its closed loop (a counter per completion, latency split into phases), its in-process side
(no more evaluations at once than the evaluator has workers, as the service), and a CPU run end to end."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from harness.bench import serve_bench


def test_closed_loop_counts_each_completion_and_splits_latency(capsys) -> None:
    def call(source: str) -> dict:
        time.sleep(0.05)
        return {"status": "correct", "timings": {"queue_s": 0.0, "eval_s": 0.01, "handoff_s": 0.0, "store_s": 0.0}}

    run = serve_bench.closed_loop(call, [f"s{i}" for i in range(5)], 2, "served")
    err = capsys.readouterr().err.splitlines()
    assert [re.match(r"\[(\d)/5, \d+s\] served: correct$", line).group(1) for line in err] == list("12345")
    assert run["statuses"] == ["correct"] * 5
    for t, latency in zip(run["timings"], run["latencies"]):
        assert t["eval_s"] == 0.01 and t["http_s"] >= 0.04 and sum(t.values()) == pytest.approx(latency)


def test_a_failed_request_is_an_answer_of_its_own_and_the_loop_goes_on(capsys) -> None:
    """A call that raises (the service gone, a 500) is counted as `request_failed` with its reason; before, it
    killed its caller thread, and the bench lost the answer and waited on."""
    def call(source: str) -> dict:
        if source == "s1":
            raise ConnectionError("refused")
        return {"status": "correct", "timings": {}}

    run = serve_bench.closed_loop(call, [f"s{i}" for i in range(4)], 2, "served")
    assert run["statuses"] == ["correct", serve_bench.REQUEST_FAILED, "correct", "correct"]
    assert "served: request_failed (ConnectionError: refused)" in capsys.readouterr().err


def test_in_process_side_runs_as_many_at_once_as_the_evaluator_has_workers() -> None:
    lock, running, most = threading.Lock(), [0], [0]

    def evaluate(problem, source, backend):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return SimpleNamespace(status=SimpleNamespace(value="correct"), reason="", flags=[])

    ev = SimpleNamespace(workers=2, evaluate=evaluate)
    with ThreadPoolExecutor(ev.workers) as runners:
        run = serve_bench.closed_loop(serve_bench.in_process_call(ev, None, runners), [str(i) for i in range(12)], 6)
    assert most[0] == 2 and run["statuses"] == ["correct"] * 12
    assert max(t["queue_s"] for t in run["timings"]) >= 0.05  # six callers, two at once: the others waited


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_cpu_run_end_to_end(capsys, tmp_path) -> None:
    """Two rounds, the sides' order alternating: the service's overhead is the median of the paired ratios."""
    out = tmp_path / "serve.json"
    assert serve_bench.main(2, out=str(out), rounds=2) == 0
    captured = capsys.readouterr()
    assert "median seconds per phase" in captured.out and "median of rounds" in captured.out
    sides = [line.split("] ", 1)[1].split(":")[0] for line in captured.err.splitlines() if line.startswith("[")]
    assert sides == ["in-process"] * 2 + ["served"] * 4 + ["in-process"] * 2  # in-process first, then served first
    report = json.loads(out.read_text())
    inproc, served = report["rows"]
    assert inproc["rounds"] == served["rounds"] == 2 and inproc["evaluations"] == served["evaluations"] == 4
    assert inproc["statuses"] == served["statuses"] == {"correct": 4}
    ratios = [s / p for p, s in zip(inproc["wall_s_per_round"], served["wall_s_per_round"])]
    assert report["overhead_per_round"] == [round(r - 1, 4) for r in ratios]
    assert report["overhead"] == round(sum(ratios) / 2 - 1, 4)  # the median of two
    assert set(served["phase_p50_s"]) == set(serve_bench.PHASES) and served["phase_p50_s"]["eval_s"] > 0


def test_evaluations_the_wall_bound_ran_twice_are_counted_on_either_side() -> None:
    """A doubted evaluation runs again alone and takes about twice as long, so a side with more of them is slower
    for that reason: the rows count them, from an in-process answer's flags or a served answer's result."""
    alone = "the wall bound found 90 us per repetition unexplained; evaluated again alone, in a new worker"
    answers = {"a": {"status": "correct", "flags": [alone]}, "b": {"status": "correct", "flags": []},
               "c": {"status": "correct", "result": {"flags": ["build: light", alone]}}, "d": {"status": "correct"}}
    run = serve_bench.closed_loop(lambda s: answers[s], list(answers), 2, "served")
    assert run["retried_alone"] == 2
