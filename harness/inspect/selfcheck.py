"""The self-check: candidates whose verdicts are known, through the real scorer; any other verdict is an error.

The fixtures come from the project's own corpus: a hand-written suite solution and the worked example (honest:
`correct`, and on a GPU also timed), a wrong kernel (`incorrect`), hostile kernels (`rejected`), and a kernel whose
work hides on a side stream (`rejected` on a GPU, honest on a CPU, so it checks the GPU path itself). Each carries
a fresh comment, so no result cache (ours or a server's) can answer for the sandbox: every fixture is evaluated now.
A verdict other than the expected one raises `SelfCheckFailed`, which fails the whole eval with its message.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from inspect_ai.model import ChatMessageAssistant, ModelOutput
from inspect_ai.scorer import CORRECT, Score, Scorer, Target, accuracy, scorer
from inspect_ai.solver import Generate, Solver, TaskState, solver

from agents import fenced
from eval import Status
from harness.corpus import hostile
from harness.corpus.solutions import solutions
from harness.inspect.judge import Judge
from harness.inspect.scorer import judged
from problems import Problem, problem_from_source

HOSTILE = ("wrong_values", "patch_allclose_disguised", "pytorch_only", "decoy_kernel")  # names in `hostile.HOSTILE`
HONEST_SOLUTION = "L1/13_softmax"  # a suite problem with a hand-written solution


class SelfCheckFailed(RuntimeError):
    """A fixture got a verdict other than its known one: the evaluator, its sandbox or its GPU path is broken."""


@dataclass(frozen=True)
class Expected:
    """The verdict a fixture must get, and whether it must carry a measured speedup."""

    status: Status
    timed: bool = False


@dataclass(frozen=True)
class Fixture:
    """A candidate, its problem and what it must get."""

    name: str
    problem: Problem
    code: str
    expected: Expected


def fixtures(gpu: bool) -> list[Fixture]:
    """The self-check's fixtures, with the verdicts they must get on a GPU (`gpu`) or on a CPU."""
    add_relu = problem_from_source(hostile.PROBLEM, name="add_relu", problem_id="selfcheck/add_relu")
    [(softmax, solution)] = solutions(HONEST_SOLUTION)
    _, side_stream, side_verdict = hostile.kernelbench_gaps(on_gpu=gpu)["side_stream"]
    found = [Fixture("honest_solution", softmax, solution, Expected(Status.CORRECT, timed=gpu)),
             Fixture("honest_example", add_relu, hostile.GOOD, Expected(Status.CORRECT, timed=gpu)),
             Fixture("side_stream", add_relu, side_stream, Expected(Status(side_verdict),
                                                                    timed=gpu and side_verdict == "correct"))]
    found += [Fixture(name, add_relu, hostile.HOSTILE[name][0], Expected(Status(hostile.HOSTILE[name][1])))
              for name in HOSTILE]
    nonce = uuid.uuid4().hex
    return [Fixture(f.name, f.problem, f"{f.code.rstrip()}\n# harness self-check {nonce}\n", f.expected) for f in found]


@solver
def fixture_reply(codes: dict[str, str]) -> Solver:
    """The sample's fixture (`codes` by sample id) as the model's reply, in one fenced block, with no model call."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        reply = fenced(codes[str(state.sample_id)])
        state.output = ModelOutput.from_content(model="selfcheck", content=reply)
        state.messages.append(ChatMessageAssistant(content=reply))
        return state

    return solve


def mismatch(expected: Expected, score: Score) -> str | None:
    """What is wrong with a fixture's score, or None when it got its known verdict."""
    meta = score.metadata or {}
    if meta.get("status") != expected.status.value:
        return f"expected {expected.status.value}, got {meta.get('status')}: {meta.get('reason')}"
    if expected.timed and meta.get("speedup") is None:
        device = (meta.get("result") or {}).get("device") or "unknown"
        return f"expected a measured speedup on a GPU, got none (device: {device}): {meta.get('reason')}"
    return None


@scorer(metrics=[accuracy()])
def selfcheck_scorer(judge: Judge, expected: dict[str, Expected]) -> Scorer:
    """The real scorer on each fixture; its known verdict (`expected` by sample id), or `SelfCheckFailed`."""

    async def score_fixture(state: TaskState, target: Target) -> Score:
        score = await judged(judge, state)
        wrong = mismatch(expected[str(state.sample_id)], score)
        if wrong is not None:
            raise SelfCheckFailed(f"self-check fixture {state.sample_id!r}: {wrong}")
        return Score(value=CORRECT, answer=score.answer, explanation=score.explanation, metadata=score.metadata)

    return score_fixture
