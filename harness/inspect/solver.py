"""The multi-turn solver: our prompts to the model, our feedback after each turn, as `harness run` sends them.

Every turn's conversation is rebuilt by the judge from the finished turns (so `context.policy=last_k` holds as in
a run), and the model's reply is appended by inspect's `generate`. Turns 1..N-1 are judged here, for their
feedback; the last turn is the scorer's to judge. The judged turns are kept in the sample's store (`TURNS`),
where the scorer finds them and inspect's log viewer shows them.
"""

from __future__ import annotations

from typing import Any

import anyio
from inspect_ai.model import ChatMessage, ChatMessageAssistant, ChatMessageSystem, ChatMessageUser
from inspect_ai.solver import Generate, Solver, TaskState, solver

from agents import TurnRecord
from harness.inspect.judge import Judge, Verdict

TURNS = "harness_turns"  # the store key: [{"turn", "reply", "code", "feedback", "result"}] of the judged turns
_ROLES = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}


def chat(messages: list[dict[str, str]]) -> list[ChatMessage]:
    """Our `{"role", "content"}` messages as inspect's chat messages."""
    return [_ROLES[m["role"]](content=m["content"]) for m in messages]


def turn_entry(turn: int, reply: str, verdict: Verdict) -> dict[str, Any]:
    """One judged turn as the store keeps it (JSON, for the log)."""
    return {"turn": turn, "reply": reply, "code": verdict.code, "feedback": verdict.feedback,
            "result": verdict.result.to_dict()}


def records(entries: list[dict[str, Any]]) -> list[TurnRecord]:
    """The judged turns as the prompt builder's history."""
    return [TurnRecord(turn=e["turn"], reply=e["reply"], code=e["code"], feedback=e["feedback"]) for e in entries]


@solver
def kernel_turns(judge: Judge, turns: int = 1) -> Solver:
    """`turns` turns per problem: prompt, reply, and (before the last) our verdict's feedback."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        problem = judge.problems[str(state.sample_id)]
        judged: list[dict[str, Any]] = []
        for turn in range(1, turns + 1):
            state.messages = chat(await anyio.to_thread.run_sync(judge.messages, problem, records(judged)))
            state = await generate(state)
            if turn == turns:
                break
            reply = state.output.completion
            verdict = await anyio.to_thread.run_sync(judge.verdict, problem, reply, turn)
            judged.append(turn_entry(turn, reply, verdict))
            state.store.set(TURNS, judged)
        return state

    return solve
