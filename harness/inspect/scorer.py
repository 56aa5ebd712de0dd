"""The scorer: our evaluator's verdict on the last reply, and the trajectory's score as `harness run` counts it.

A sample's score is its best attempt (a correct one, the fastest measured first, as `harness.loop.best_key`
orders them), or its last attempt when none is correct. `value` is inspect's CORRECT or INCORRECT, `answer` our
status, `explanation` our feedback (status, reason, mismatch, timings); `metadata` holds the status, speedup,
reason, every turn's verdict and the scored attempt's full `EvalResult`. The metrics are `eval.score` over them:
the correct and compile rates and fast_p for p in `eval.DEFAULT_PS`.
"""

from __future__ import annotations

from typing import Any

import anyio
from inspect_ai.scorer import CORRECT, INCORRECT, Metric, SampleScore, Score, Scorer, Target, metric, scorer
from inspect_ai.solver import TaskState

from eval import DEFAULT_PS, EvalResult, Status, score
from harness.inspect.judge import Judge
from harness.inspect.solver import TURNS, turn_entry
from harness.loop import best_key


@metric(scores="unreduced")
def kernel_metrics() -> Metric:
    """`eval.score` over the samples (each epoch of a problem counts as one): correct, compiled, fast_p."""

    def compute(scores: list[SampleScore]) -> dict[str, float]:
        results = {str(i): EvalResult.from_dict(s.score.metadata["result"])
                   for i, s in enumerate(scores) if s.score.metadata}
        totals = score(results)
        return {"correct": totals.correct_rate, "compiled": totals.compile_rate,
                **{f"fast_{p:g}": totals.fast_p[p] for p in DEFAULT_PS}}

    return compute


def scored_turn(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """The attempt a trajectory is scored by: its best correct one, else its last."""
    best = max(turns, key=lambda t: best_key(Status(t["result"]["status"]), t["result"]["speedup"]))
    return best if best["result"]["status"] == Status.CORRECT.value else turns[-1]


async def judged(judge: Judge, state: TaskState) -> Score:
    """Judge the sample's last reply and score its whole trajectory (the solver's judged turns before it)."""
    turns = list(state.store.get(TURNS, []))
    reply = state.output.completion
    problem = judge.problems[str(state.sample_id)]
    verdict = await anyio.to_thread.run_sync(judge.verdict, problem, reply, len(turns) + 1)
    turns.append(turn_entry(len(turns) + 1, reply, verdict))
    best = scored_turn(turns)
    result = best["result"]
    return Score(
        value=CORRECT if result["status"] == Status.CORRECT.value else INCORRECT,
        answer=result["status"],
        explanation=best["feedback"],
        metadata={"status": result["status"], "speedup": result["speedup"], "reason": result["reason"],
                  "turn": best["turn"], "result": result,
                  "turns": [{k: t["result"][k] for k in ("status", "speedup", "reason")} | {"turn": t["turn"]}
                            for t in turns]},
    )


@scorer(metrics=[kernel_metrics()])
def kernel_scorer(judge: Judge) -> Scorer:
    """Our evaluator's verdict on each sample's last reply; the trajectory scored by its best attempt."""

    async def score_sample(state: TaskState, target: Target) -> Score:
        return await judged(judge, state)

    return score_sample
