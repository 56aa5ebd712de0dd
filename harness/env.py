"""`KernelEnv`: a multi-turn environment for RL rollouts that sees exactly what `harness run`'s agents see.

    env = KernelEnv(EvalClient("http://127.0.0.1:8000"))      # or KernelEnv(service) in-process
    messages = env.reset("L1/13_softmax")                     # the loop's first prompt
    messages, reward, done, info = env.step(reply_text)       # extraction, verdict, feedback: the loop's own

The prompts (`harness.app.prompt_builder`, the server's config), the extraction (`harness.verdict.extract_candidate`)
and the feedback (`eval.feedback.render_feedback`) all come from the service, in-process or over HTTP, so a
rollout and a `harness run` trajectory are turn for turn the same conversation. With `reward="kevin"`, `info`
holds Kevin's discounted per-turn returns once the episode is done.
"""

from __future__ import annotations

from typing import Any

from agents import TurnRecord
from eval import DEFAULT_BACKEND, Status

KEVIN_GAMMA = 0.4  # Kevin-32B's discount of later turns' scores


def discounted_returns(scores: list[float], gamma: float = KEVIN_GAMMA) -> list[float]:
    """Kevin's per-turn rewards: each turn's score plus the discounted scores of the turns after it."""
    out, running = [0.0] * len(scores), 0.0
    for i in range(len(scores) - 1, -1, -1):
        running = scores[i] + gamma * running
        out[i] = running
    return out


class KernelEnv:
    """One episode at a time: `reset(problem)`, then `step(reply)` until `done` (after `max_turns`)."""

    def __init__(self, source: Any, *, backend: str = DEFAULT_BACKEND, max_turns: int = 4, reward: str | None = None,
                 eval: str | None = None, stop_when_correct: bool = False) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.source = source  # a `harness.serve.service.Service` or a `harness.client.EvalClient`
        self.backend, self.max_turns, self.reward, self.eval = backend, max_turns, reward, eval
        self.stop_when_correct = stop_when_correct
        self.problem: Any = None
        self.history: list[dict[str, Any]] = []
        self.scores: list[float] = []
        self.done = True

    # -- the two ways to reach the service -----------------------------------------------------
    def _in_process(self) -> bool:
        return hasattr(self.source, "find_problem")

    def _messages(self) -> list[dict[str, str]]:
        if self._in_process():
            records = [TurnRecord(**h) for h in self.history]
            return self.source.messages(self.source.find_problem(self.problem), self.backend, records)
        return self.source.messages(self.problem, self.backend, self.history)

    def _evaluate(self, reply: str, turn: int) -> dict[str, Any]:
        options = {"backend": self.backend, "eval": self.eval, "reward": self.reward, "turn": turn}
        if self._in_process():
            body = {"problem": self.problem, "code": reply, **{k: v for k, v in options.items() if v is not None}}
            return self.source.evaluate(body)
        return self.source.evaluate(self.problem, reply, **options)

    # -- the environment -----------------------------------------------------------------------
    def reset(self, problem: str | dict[str, str]) -> list[dict[str, str]]:
        """Start an episode on a problem id or `{"source": ..., "name": ...}`; the first turn's messages."""
        self.problem, self.history, self.scores, self.done = problem, [], [], False
        return self._messages()

    def step(self, reply: str) -> tuple[list[dict[str, str]], float, bool, dict[str, Any]]:
        """Judge `reply` as the next turn: (the next turn's messages, reward, done, info with the answer)."""
        if self.done:
            raise RuntimeError("the episode is over: call reset(problem) first")
        turn = len(self.history) + 1
        answer = self._evaluate(reply, turn)
        self.history.append({"turn": turn, "reply": reply, "code": answer.get("code"),
                             "feedback": answer["feedback"]})
        self.scores.append(float(answer["reward"]))
        correct = answer["status"] == Status.CORRECT  # the answer is JSON: its status is the text
        self.done = turn >= self.max_turns or (self.stop_when_correct and correct)
        info: dict[str, Any] = {"turn": turn, "answer": answer, "status": answer["status"], "scores": list(self.scores)}
        if self.done and (self.reward or "") == "kevin":
            info["returns"] = discounted_returns(self.scores)
        return self._messages(), float(answer["reward"]), self.done, info
