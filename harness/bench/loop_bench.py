"""`harness bench loop`: the run loop's own cost per attempt, apart from the agent and the evaluator.

Setup: the worked example of the prompts (ReLU of a sum), shrunk to 64x64 so the Triton
interpreter judges it quickly; an instant agent that always returns the worked solution; the
real `Evaluator` with a fresh result cache, warmed by one real evaluation before the clock
starts, so every timed evaluation is a result-cache hit; a real run store on disk (fsync'd
commits); one thread (max_concurrency=1), so wall time splits cleanly into agent + evaluator +
loop; the display a log gets (a line per attempt on stderr: stdout is the JSON report), so its cost counts. Measured: (wall - time inside agent.respond - time inside Evaluator.evaluate) / attempts,
over `samples x turns` attempts with full context (prompts grow with every turn, as in a run).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agents import EXAMPLES_DIR, AgentResponse, Message, PromptBuilder, Usage, fenced
from eval import EvalConfig, Evaluator
from harness.loop import LoopSettings, RunLoop
from harness.progress import LineDisplay
from harness.store import RunStore
from problems import problem_from_source

_TURNS = 10


class _InstantAgent:
    """Replies at once with the worked solution (and a plausible token count)."""

    name = "instant"

    def __init__(self, reply: str) -> None:
        self._reply = reply

    def respond(self, messages: list[Message], *, problem_id: str, sample: int, turn: int) -> AgentResponse:
        return AgentResponse(text=self._reply, usage=Usage(1000, 500), cost_usd=0.0, latency_s=0.0, model="instant")


def run_loop_bench(attempts: int = 200) -> dict[str, Any]:
    """Run at least `attempts` attempts (rounded up to whole samples of 10 turns) and return the timings."""
    reference = (EXAMPLES_DIR / "add_relu_reference.py").read_text()
    reference = re.sub(r"^(M|N) = \d+$", r"\1 = 64", reference, flags=re.MULTILINE)
    problem = problem_from_source(reference, name="add_relu_64", problem_id="bench/add_relu_64")
    solution = (EXAMPLES_DIR / "add_relu_triton.py").read_text()
    samples = max(1, -(-attempts // _TURNS))
    with tempfile.TemporaryDirectory(prefix="kh-bench-loop-") as tmp:
        config = EvalConfig(trials=2, cache_dir=str(Path(tmp) / "eval_cache"))
        with Evaluator(config) as evaluator:
            t0 = time.perf_counter()
            warm = evaluator.evaluate(problem, solution)
            warm_s = time.perf_counter() - t0
            if not warm.is_correct:
                raise RuntimeError(f"the warm-up evaluation failed ({warm.status.value}: {warm.reason})")
            t0 = time.perf_counter()
            store = RunStore.open(Path(tmp) / "run", {"bench": "loop"})
            store.begin_session()
            setup_s = time.perf_counter() - t0
            loop = RunLoop(
                store=store, agent=_InstantAgent(fenced(solution)), evaluator=evaluator, problems=[problem],
                prompts=PromptBuilder("triton", hardware=None), display=LineDisplay(sys.stderr),
                settings=LoopSettings(turns=_TURNS, samples=samples, max_concurrency=1),
            )  # fmt: skip
            outcome = loop.run()
            recorded = store.attempts()
            store.close()
    n = len(recorded)
    if n != samples * _TURNS or not all(a.result is not None and a.result.cached for a in recorded):
        raise RuntimeError(f"expected {samples * _TURNS} cache-hit attempts, got {n}")
    overhead = outcome.wall_s - outcome.agent_s - outcome.eval_s
    return {
        "attempts": n,
        "samples": samples,
        "turns": _TURNS,
        "wall_s": round(outcome.wall_s, 4),
        "agent_s": round(outcome.agent_s, 4),
        "eval_s": round(outcome.eval_s, 4),
        "loop_overhead_s": round(overhead, 4),
        "loop_overhead_ms_per_attempt": round(1000 * overhead / n, 3),
        "eval_cache_hit_ms_per_attempt": round(1000 * outcome.eval_s / n, 3),
        "store_open_s": round(setup_s, 4),
        "warmup_real_eval_s": round(warm_s, 2),
        "target_ms_per_attempt": 50,
    }


def main(attempts: int = 200) -> int:
    """Print the timings as JSON; exit 1 if the overhead misses the 50 ms/attempt target."""
    report = run_loop_bench(attempts)
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0 if report["loop_overhead_ms_per_attempt"] < report["target_ms_per_attempt"] else 1
