"""`kill -9` of a running `harness run` at random moments, then resume: nothing repeated, nothing lost."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.run_fixtures import (FINISH_GRACE_S, agent_script, base_overrides, logged_requests, recorded_attempts, rows,
                                sigint_as_from_a_terminal, write_problem)

SAMPLES, TURNS = 6, 3


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_kill_9_at_random_moments_then_resume(tmp_path: Path) -> None:
    script, log = agent_script(tmp_path)
    problem = write_problem(tmp_path / "problems")
    args = [*base_overrides(tmp_path, problem, tmp_path / "eval_cache"), "agent=command",
            f"agent.command=sh {script}", f"samples={SAMPLES}", f"turns={TURNS}", "max_concurrency=3", "name=k9"]
    run = tmp_path / "runs" / "k9"
    rng = random.Random(1234)
    recorded: set[tuple[str, int, int]] = set()
    kills = 0
    for session in range(30):
        log_mark = len(logged_requests(log))
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", "run", *args], cwd=REPO, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        # the first kill lands during start-up; later ones after 0-2 new attempts, at a random instant
        target = None if session == 0 else len(recorded) + rng.randint(0, 2)
        deadline = time.monotonic() + (rng.uniform(0.5, 2.5) if session == 0 else 120)
        while proc.poll() is None and time.monotonic() < deadline:
            if target is not None and len(recorded_attempts(run)) >= target:
                time.sleep(rng.uniform(0, 0.3))
                break
            time.sleep(0.02)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        out, err = proc.communicate(timeout=60)
        now = recorded_attempts(run)
        assert recorded <= now, f"attempts lost after a kill: {sorted(recorded - now)}"
        # a request for an attempt recorded before this session started was never made again
        again = [k for k in logged_requests(log)[log_mark:] if k in recorded]
        assert not again, f"recorded attempts were requested again: {again}"
        recorded = now
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, f"exit {proc.returncode}: {err[-2000:]}"
    else:
        raise AssertionError("the run never finished")
    assert kills >= 3, "the test should have killed the run several times"
    expected = {("add_relu", s, t) for s in range(1, SAMPLES + 1) for t in range(1, TURNS + 1)}
    assert recorded == expected
    lines = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    assert sorted((x["problem_id"], x["sample"], x["turn"]) for x in lines) == sorted(expected)
    statuses = {(x["sample"], x["turn"]): x["status"] for x in lines}
    assert all(statuses[(s, 2)] == "correct" for s in range(1, SAMPLES + 1))
    assert all(statuses[(s, t)] == "format_error" for s in range(1, SAMPLES + 1) for t in (1, 3))
    for turn, prompt in rows(run, "turn, prompt"):  # each turn's conversation holds exactly the turns before it
        assert sum(m["role"] == "assistant" for m in json.loads(prompt)) == turn - 1


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_ctrl_c_finishes_attempts_in_flight_and_saves_state(tmp_path: Path) -> None:
    gate = tmp_path / "answer"  # the agent answers only once it exists: the run cannot end before the Ctrl-C lands
    script, log = agent_script(tmp_path, gate)
    problem = write_problem(tmp_path / "problems")
    args = [*base_overrides(tmp_path, problem, tmp_path / "eval_cache"), "agent=command", f"agent.command=sh {script}",
            "samples=4", "turns=3", "max_concurrency=2", f"stop_grace_s={FINISH_GRACE_S}", "name=intr"]  # fmt: skip
    run = tmp_path / "runs" / "intr"
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_from_a_terminal)  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    deadline = time.monotonic() + 900  # only a hang bound: a loaded machine may take minutes to start the pool
    while not logged_requests(log) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None and logged_requests(log), "the run ended, or asked nothing, before the Ctrl-C"
    proc.send_signal(signal.SIGINT)
    while not any("finishing the attempts in flight" in line for line in lines) and time.monotonic() < deadline:
        time.sleep(0.02)
    gate.touch()  # the attempts in flight may now finish
    proc.wait(timeout=FINISH_GRACE_S + 120)
    reader.join(timeout=60)
    err = "".join(lines)
    assert proc.returncode == 3, err
    assert f"finishing the attempts in flight for up to {FINISH_GRACE_S} s" in err and "stopped: interrupted" in err
    assert "abandoned" not in err, err
    partial = recorded_attempts(run)
    assert 0 < len(partial) < 12
    requested = set(logged_requests(log))
    assert requested == partial  # every request that was sent got recorded
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert recorded_attempts(run) == {("add_relu", s, t) for s in range(1, 5) for t in range(1, 4)}
    assert len(logged_requests(log)) == 12  # nothing asked twice
