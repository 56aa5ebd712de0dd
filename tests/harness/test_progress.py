"""Progress as a person watches it: the counter format shared by `harness problems lint`, `harness bench` and
`harness run`, the run's ETA and its line per trajectory in flight, and what a log (not a terminal) receives."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from agents import PromptBuilder
from harness.cli import main
from harness.loop import LoopSettings, RunLoop
from harness.progress import (Flight, LineDisplay, RichDisplay, RunStats, Tally, counter_text, eta_text, flight_text,
                              live_display, status_text)
from harness.store import RunStore
from tests.harness.test_run_loop import PROBLEMS, ScriptedAgent, ScriptedEvaluator

ESCAPE = "\x1b"  # any terminal control sequence starts with it


def test_eta_is_unknown_until_an_attempt_finished_then_follows_the_pace() -> None:
    assert eta_text(0, 10, 30.0) == "ETA unknown"
    assert eta_text(2, 6, 20.0) == "ETA 1m 00s"  # 10 s per item, 6 left
    assert counter_text(3, 10, 12.4) == "[3/10, 12s]"
    assert counter_text(3, 10, 12.4, "ETA 28s") == "[3/10, 12s, ETA 28s]"


def test_the_runs_counter_takes_its_pace_from_this_session_only() -> None:
    """Attempts an earlier session recorded count as done, but not as pace: 20 resumed attempts and none of this
    session's yet leave the ETA unknown; then 4 in 40 s with 16 left is 160 s."""
    stats = RunStats(problems=4, attempts_planned=40, attempts_done=20)
    assert stats.counter(5.0) == "[20/40, 5s, ETA unknown]"
    stats.attempts_done, stats.attempts_this_session = 24, 4
    assert stats.counter(40.0) == "[24/40, 40s, ETA 2m 40s]"


def test_a_flight_line_names_problem_sample_turn_and_last_verdict() -> None:
    stats = RunStats(problems=2, attempts_planned=6, turns=3)
    stats.begin("L1/13_softmax", 2, 1, None)
    assert flight_text(stats.flights()[0], 3) == "L1/13_softmax  sample 2  turn 1/3  last: none yet"
    stats.begin("L1/13_softmax", 2, 2, "compile_error")
    stats.begin("L1/24_gelu", 1, 3, "incorrect")
    assert [flight_text(f, 3) for f in stats.flights()] == [
        "L1/13_softmax  sample 2  turn 2/3  last: compile_error", "L1/24_gelu  sample 1  turn 3/3  last: incorrect"]
    stats.end("L1/24_gelu", 1)
    assert stats.flights() == [Flight("L1/13_softmax", 2, 2, "compile_error")]
    assert status_text(stats, 0.0) == "[0/6, 0s, ETA unknown] attempts; problems 0/2 finished; 1 in flight"


def test_a_terminal_gets_the_redrawn_display_and_anything_else_plain_lines() -> None:
    assert isinstance(live_display(Console(file=io.StringIO(), force_terminal=True)), RichDisplay)
    assert isinstance(live_display(Console(file=io.StringIO(), force_terminal=False)), LineDisplay)


def test_a_log_gets_one_plain_line_per_finished_attempt(tmp_path: Path) -> None:
    """Not a terminal: a line when the run starts and one per finished attempt (never one per refresh), each with
    the counter and ETA, the attempt's problem, sample and turn and its verdict; no control codes."""
    out = io.StringIO()
    store = RunStore.open(tmp_path / "run", {"test": True})
    store.begin_session()
    ev = ScriptedEvaluator([("incorrect", None), ("correct", None)])
    loop = RunLoop(store=store, agent=ScriptedAgent(), evaluator=ev, problems=PROBLEMS[:2],
                   prompts=PromptBuilder("triton", hardware=None), display=LineDisplay(out),
                   settings=LoopSettings(turns=2, samples=2, max_concurrency=2))  # fmt: skip
    assert loop.run().finished
    recorded = {(a.problem_id, str(a.sample), str(a.turn), a.status) for a in store.attempts()}
    store.close()
    text = out.getvalue()
    lines = text.splitlines()
    assert ESCAPE not in text and "\r" not in text
    assert lines[0] == "[0/8, 0s, ETA unknown] attempts; problems 0/2 finished; 0 in flight"
    assert len(lines) == 1 + 8
    for i, line in enumerate(lines[1:], start=1):
        assert re.fullmatch(rf"\[{i}/8, \d+s, ETA \d+s\] p[01] sample [12] turn [12]/2: (in)?correct; \d other\(s\) in flight",
                            line), line
    others = [int(re.search(r"(\d) other", x).group(1)) for x in lines[1:]]
    assert max(others) <= 1 and others[-1] == 0  # at most 2 trajectories at once; nothing else left at the end
    done = {tuple(re.search(r"(p\d) sample (\d) turn (\d)/2: (\w+)", x).groups()) for x in lines[1:]}
    assert done == recorded and len(recorded) == 8 and {x[3] for x in done} == {"incorrect", "correct"}


def test_the_terminal_display_shows_each_trajectory_in_flight() -> None:
    console = Console(file=io.StringIO(), width=160, force_terminal=True, record=True)
    display = RichDisplay(console)
    stats = RunStats(problems=1, attempts_planned=4, turns=2)
    display.start(stats)
    stats.begin("p0", 1, 2, "incorrect")
    stats.attempts_done = stats.attempts_this_session = 1
    display.update(stats)
    display._live.refresh()
    shown = console.export_text()
    display.stop()
    assert "p0  sample 1  turn 2/2  last: incorrect" in shown and "[1/4, " in shown and "ETA " in shown


def test_harness_run_in_a_log_prints_a_line_per_attempt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`harness run` with stderr not a terminal (CI): the offline reference agent on a smoke problem (its reference
    solution, judged correct on CPU), two samples of two turns: a start line, then one line per attempt."""
    args = [f"runs_dir={tmp_path / 'runs'}", f"eval.cache_dir={tmp_path / 'eval_cache'}", "eval.trials=2",
            "prompt.hardware=null", "agent=reference", "problems=smoke", "problems.limit=1", "quiet=false", "name=log",
            "turns=2", "samples=2"]  # fmt: skip
    assert main(["run", *args]) == 0
    err = capsys.readouterr().err
    assert ESCAPE not in err
    counted = [x for x in err.splitlines() if re.match(r"\[\d/4, ", x)]
    assert counted[0] == "[0/4, 0s, ETA unknown] attempts; problems 0/1 finished; 0 in flight", err
    assert [x.split(",")[0] for x in counted[1:]] == [f"[{i}/4" for i in range(1, 5)], err
    assert all(re.search(r", ETA [^\]]+\] \S+ sample [12] turn [12]/2: correct; \d other\(s\) in flight$", x) for x in counted[1:]), err


def test_lint_and_bench_count_items_with_the_one_counter(capsys: pytest.CaptureFixture[str]) -> None:
    tally = Tally(2)
    assert re.fullmatch(r"\[1/2, \d+s\]", tally.step()) and tally.step().startswith("[2/2, ")
    assert main(["bench", "loop", "--attempts", "10"]) in (0, 1)  # 1: over the overhead target on a busy machine
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # stdout stays the JSON report; the progress goes to stderr
    assert report["attempts"] == 10
    counted = [x for x in captured.err.splitlines() if x.startswith("[")]
    assert [x.split(",")[0] for x in counted[1:]] == [f"[{i}/10" for i in range(1, 11)], captured.err
