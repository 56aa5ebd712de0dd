"""Stop signals to a real `harness run` process: SIGTERM and SIGHUP end a run as Ctrl-C does (attempts in flight
finish and are recorded, the session is closed, exit 3, no traceback); Ctrl-C during start-up or twice gives no
traceback either; a resume then finishes with nothing lost and nothing recorded twice."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.signals import Interrupted, deferred, hold, install, release, signal_name
from tests.paths import REPO
from tests.run_fixtures import (FINISH_GRACE_S, agent_script, base_overrides, logged_requests, recorded_attempts,
                                sigint_as_from_a_terminal, write_problem)

ALL = {("add_relu", s, t) for s in range(1, 5) for t in range(1, 4)}
ABANDON_GRACE_S = 2  # for an agent that never answers: any grace is exceeded, so a short one keeps the test short


def _args(tmp: Path, script: Path, name: str, grace_s: float = FINISH_GRACE_S) -> list[str]:
    """`harness run` overrides for 4 samples x 3 turns, 2 in flight, with a stop grace of `grace_s`."""
    problem = write_problem(tmp / "problems")
    return [*base_overrides(tmp, problem, tmp / "eval_cache"), "agent=command", f"agent.command=sh {script}",
            "samples=4", "turns=3", "max_concurrency=2", f"stop_grace_s={grace_s:g}", f"name={name}"]  # fmt: skip


def _start(args: list[str]) -> subprocess.Popen[str]:
    """`harness run` with SIGINT at its default, as from a terminal (`sigint_as_from_a_terminal`)."""
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "run", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_from_a_terminal)  # fmt: skip


def _wait_handled(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
    """Wait until the process catches `sig` (its bit in /proc/PID/status `SigCgt`): before that it may not have
    exec'd Python yet, and a signal to a forked child that inherited a Python handler is lost."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:") and int(line.split()[1], 16) >> (sig - 1) & 1:
                return
        time.sleep(0.005)
    raise AssertionError(f"the process never caught {sig.name}")


def _wait_recorded(run: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not recorded_attempts(run) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert recorded_attempts(run), "the run recorded nothing before the signal"


def _sessions(run: Path) -> list[tuple[float | None, str | None]]:
    conn = sqlite3.connect(run / "attempts.sqlite")
    try:
        return conn.execute("SELECT finished_at, stop_reason FROM sessions ORDER BY id").fetchall()
    finally:
        conn.close()


def _resume_finishes(args: list[str], run: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert recorded_attempts(run) == ALL


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_end_a_run_like_ctrl_c(tmp_path: Path, sig: signal.Signals) -> None:
    script, log = agent_script(tmp_path)
    args = _args(tmp_path, script, "sig")
    run = tmp_path / "runs" / "sig"
    proc = _start(args)
    _wait_recorded(run, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=FINISH_GRACE_S + 120)
    assert proc.returncode == 3, err
    assert "Traceback" not in err, err
    assert f"interrupted: finishing the attempts in flight for up to {FINISH_GRACE_S} s" in err
    assert "abandoned" not in err, err
    assert f"stopped: interrupted ({sig.name})" in err
    finished_at, reason = _sessions(run)[-1]
    assert finished_at is not None and reason == f"interrupted ({sig.name})"  # the session is closed
    partial = recorded_attempts(run)
    assert 0 < len(partial) < len(ALL)
    assert set(logged_requests(log)) == partial  # every request sent got its reply recorded: none dropped
    _resume_finishes(args, run)
    assert len(logged_requests(log)) == len(ALL)  # nothing asked twice


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_ctrl_c_twice_quits_at_once_without_a_traceback(tmp_path: Path) -> None:
    script, log = agent_script(tmp_path)
    args = _args(tmp_path, script, "twice")
    run = tmp_path / "runs" / "twice"
    proc = _start(args)
    _wait_recorded(run, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "Traceback" not in err, err
    finished_at, reason = _sessions(run)[-1]
    assert finished_at is not None and reason == "interrupted"
    assert recorded_attempts(run) <= set(logged_requests(log))  # recorded attempts were all asked for; none is recorded twice
    _resume_finishes(args, run)


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_start_up_gives_one_line_and_no_traceback(tmp_path: Path, sig: signal.Signals) -> None:
    script, log = agent_script(tmp_path)
    args = _args(tmp_path, script, "early")
    proc = _start(args)
    # once the harness catches SIGTERM its code runs (a signal in CPython's own first milliseconds of start-up is
    # CPython's), and it is still importing or starting its evaluator for seconds
    _wait_handled(proc, signal.SIGTERM)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "Traceback" not in err, err
    assert "interrupted" in err
    run = tmp_path / "runs" / "early"
    if (run / "attempts.sqlite").exists():  # no session may be left open
        assert all(finished is not None for finished, _ in _sessions(run))
    _resume_finishes(args, run)


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_attempts_that_outlast_the_grace_period_are_abandoned_and_run_again(tmp_path: Path) -> None:
    """An agent that never answers: SIGTERM ends the run after the grace period, recording nothing for the
    attempts in flight; a resume with a working agent runs them."""
    script = tmp_path / "agent.sh"  # the same command as `agent_script`'s, so the resume keeps the config
    started = tmp_path / "started.log"
    script.write_text(f"#!/bin/sh\ncat > /dev/null\necho $$ >> {started}\nexec sleep 300\n")
    args = _args(tmp_path, script, "grace", grace_s=ABANDON_GRACE_S)
    run = tmp_path / "runs" / "grace"
    proc = _start(args)
    try:
        deadline = time.monotonic() + 120
        while not (started.exists() and len(started.read_text().split()) >= 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=ABANDON_GRACE_S + 120)
    finally:
        for pid in started.read_text().split() if started.exists() else []:  # the agent's sleeps this test started
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert proc.returncode == 3, err
    assert "Traceback" not in err, err
    assert f"interrupted: finishing the attempts in flight for up to {ABANDON_GRACE_S} s" in err
    assert "2 attempt(s) still in flight were abandoned" in err
    assert recorded_attempts(run) == set()
    finished_at, reason = _sessions(run)[-1]
    assert finished_at is not None and reason == "interrupted (SIGTERM)"
    assert agent_script(tmp_path)[0] == script  # now an agent that answers
    _resume_finishes(args, run)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_interpreter_exits_ends_it_with_the_commands_code_and_no_traceback(
        sig: signal.Signals) -> None:  # fmt: skip
    """Ctrl-C twice can land after the run has finished, while exit handlers (torch's finalizers) run: the
    console script then quits at once with the code it already has instead of printing the handler's traceback."""
    code = ("import atexit, os, signal, sys, time\n"
            "from harness import cli\n"
            f"atexit.register(lambda: (os.kill(os.getpid(), {int(sig)}), time.sleep(30), print('unreached')))\n"
            "sys.argv = ['harness', 'problems', 'show', 'no_such_problem']\n"
            "cli.entry()\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          preexec_fn=sigint_as_from_a_terminal)  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    assert "unreached" not in done.stdout
    assert done.returncode == 2, done.stderr  # the command's own code (a bad argument), not a signal's


STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.mark.parametrize("sig, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Interrupted)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_session_closes_is_raised_once_it_is_closed(stop_handlers: None, sig: signal.Signals,
                                                                       raised: type) -> None:  # fmt: skip
    """`harness run` closes its session under `deferred`: a stop signal that lands mid-close (Ctrl-C twice, a
    SIGTERM after the run finished) must not leave the session open; it is raised right after, with its name."""
    install()  # SIGTERM raises `Interrupted`, as in `harness run`
    installed = {s: signal.getsignal(s) for s in STOPS}
    steps = []
    with pytest.raises(raised) as caught:
        with deferred():
            os.kill(os.getpid(), sig)
            time.sleep(0.05)  # the handler has run by now: with the signal held, nothing was raised here
            steps.append("closed")
    assert {s: signal.getsignal(s) for s in STOPS} == installed  # the handlers are back
    assert steps == ["closed"]
    assert signal_name(caught.value) == sig.name


def test_signals_held_through_start_up_are_raised_at_release_and_install_keeps_them_held(stop_handlers: None) -> None:
    """`harness run` holds stop signals through its start-up (a `KeyboardInterrupt` raised at any point there can
    land in importlib's weakref callback, where Python drops it: the run then went on, or hung) and raises the
    first one where start-up is done. Installing the stop handlers meanwhile (as `harness.app` does) keeps
    them held."""
    steps = []
    assert hold()
    assert not hold()  # already held: the outer hold goes on
    install()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.05)
    steps.append("started")
    with pytest.raises(Interrupted) as caught:
        release()
    assert getattr(signal.getsignal(signal.SIGTERM), '__name__', '') == '_raise'  # what install() set, now live
    release()  # nothing held any more: a no-op
    assert steps == ["started"] and signal_name(caught.value) == "SIGTERM"


def test_a_second_signal_during_start_up_quits_at_once_with_the_code() -> None:
    code = ("import os, signal, time\n"
            "from harness import signals\n"
            "signals.hold(quit_code=3)\n"
            "os.kill(os.getpid(), signal.SIGTERM)\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            "time.sleep(30)\n"
            "print('unreached')\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          preexec_fn=sigint_as_from_a_terminal)  # fmt: skip
    assert done.returncode == 3 and "unreached" not in done.stdout
    assert done.stderr == ("interrupted: stopping once start-up is done (again to quit now)\n"
                           "interrupted: quitting now\n")
