"""Shared material of the `harness run` tests: a tiny problem, three candidates, a runner, and a logging agent.

The problem (ReLU of a sum, the prompts' worked example at 1 x 4096 floats) is small enough for the Triton interpreter on CPU, so
the real evaluator judges every candidate in well under a second once its worker is up.
"""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path
from typing import Any

from harness.corpus.candidates import EXAMPLE_TRITON, edit, example_problem_source

# The prompts' worked example is the one add-relu problem and kernel; here at 1 x 4096 floats.
PROBLEM = example_problem_source(4096)
GOOD = EXAMPLE_TRITON
WRONG = edit(GOOD, "out = tl.maximum(a + b, 0.0)", "out = a + b")  # forgets the ReLU: runs, but the outputs differ
BROKEN = "import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n"  # a syntax error
# `stop_grace_s` for tests whose attempts in flight must finish after a stop signal: a bound no loaded machine reaches
# (two Triton evaluations under the interpreter outlasted the default 20 s on a busy 2-core CI machine)
FINISH_GRACE_S = 300


def fenced(code: str, prose: str = "Here is my kernel.") -> str:
    """A reply in the requested format: prose, then one fenced python block."""
    return f"{prose}\n\n```python\n{code}```\n"


def sigint_as_from_a_terminal() -> None:
    """`preexec_fn` of a `harness run` that a test stops with SIGINT: SIGINT at its default, as from a terminal. A
    test runner started in the background of a shell inherits SIGINT ignored, and Python then leaves it ignored in
    every child, which never sees the Ctrl-C (a CI run started that way waited out its 900 s bound)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def write_problem(directory: Path) -> Path:
    """The tiny problem as `directory/add_relu.py` (problem id `add_relu`)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "add_relu.py"
    path.write_text(PROBLEM)
    return path


def base_overrides(tmp: Path, problem: Path, eval_cache: Path) -> list[str]:
    """Overrides that keep a run inside `tmp` and evaluate quickly on CPU."""
    return [
        f"runs_dir={tmp / 'runs'}",
        f"problems.spec=file:{problem}",
        "eval.trials=2",
        f"eval.cache_dir={eval_cache}",
        "prompt.hardware=null",
        "quiet=true",
    ]


def rows(run_dir: Path, columns: str = "problem_id, sample, turn, status") -> list[tuple[Any, ...]]:
    """Attempt rows of a run's database, ordered by problem, sample, turn."""
    conn = sqlite3.connect(run_dir / "attempts.sqlite")
    try:
        return conn.execute(f"SELECT {columns} FROM attempts ORDER BY problem_id, sample, turn").fetchall()
    finally:
        conn.close()


def agent_script(tmp: Path, gate: Path | None = None) -> tuple[Path, Path]:
    """A `command` agent that logs every request it gets and answers slowly (with a `gate`, only once that file
    exists); turn 2 brings a real kernel."""
    log = tmp / "requests.log"
    good = tmp / "good_reply.md"
    good.write_text(fenced(GOOD))
    script = tmp / "agent.sh"
    script.write_text(
        "#!/bin/sh\n"
        "cat > /dev/null\n"
        f'echo "$HARNESS_PROBLEM_ID $HARNESS_SAMPLE $HARNESS_TURN" >> {log}\n'
        + (f"while [ ! -e {gate} ]; do sleep 0.05; done\n" if gate else "")
        + "sleep 0.15\n"
        f'if [ "$HARNESS_TURN" = 2 ]; then cat {good}; else echo "Still thinking, no code yet."; fi\n'
    )
    return script, log


def logged_requests(log: Path) -> list[tuple[str, int, int]]:
    """(problem, sample, turn) of each request the `agent_script` agent got, in order."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        pid, sample, turn = line.split()
        out.append((pid, int(sample), int(turn)))
    return out


def recorded_attempts(run: Path) -> set[tuple[str, int, int]]:
    """(problem, sample, turn) of each attempt the run recorded, each at most once."""
    if not (run / "attempts.sqlite").exists():
        return set()
    got = rows(run, "problem_id, sample, turn")
    assert len(got) == len(set(got))  # the UNIQUE key holds
    return set(got)
