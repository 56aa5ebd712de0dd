"""A reward function for TRL's `GRPOTrainer`, with rewards from `harness serve`.

    from harness.rl.trl import TRLReward
    trainer = GRPOTrainer(model=..., reward_funcs=[TRLReward("http://127.0.0.1:8000")], train_dataset=ds, ...)

The dataset needs a column naming each row's problem (`problem`: a served id such as `L1/13_softmax`, or
`{"source": ..., "name": ...}`); prompts can come from `GET /v1/problems/{id}` so they are `harness run`'s own.
TRL calls the function with `prompts`, `completions` and every dataset column as keywords; completions are
strings or, for conversational datasets, lists of messages (the last one's content is the reply).
"""

from __future__ import annotations

from typing import Any

from eval import DEFAULT_BACKEND
from harness.client import EvalClient, ServeError


def completion_text(completion: Any) -> str:
    """The reply in a TRL completion: a string, or the content of the last message of a conversation."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


class TRLReward:
    """`reward(prompts, completions, **columns) -> list[float]`, one batch request per call."""

    def __init__(self, client: EvalClient | str, *, problem_column: str = "problem", backend: str = DEFAULT_BACKEND,
                 reward: str | None = None, eval: str | None = None) -> None:
        self.client = EvalClient(client) if isinstance(client, str) else client
        self.problem_column, self.backend, self.reward, self.eval = problem_column, backend, reward, eval
        self.__name__ = f"harness_{reward or 'reward'}"  # TRL logs each reward function under its __name__
        self.last_answers: list[dict[str, Any]] = []

    def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
        if self.problem_column not in columns:
            raise KeyError(f"the dataset has no {self.problem_column!r} column naming each row's problem")
        problems = columns[self.problem_column]
        requests = []
        for problem, completion in zip(problems, completions):
            body: dict[str, Any] = {"problem": problem, "code": completion_text(completion), "backend": self.backend}
            body.update({k: v for k, v in (("reward", self.reward), ("eval", self.eval)) if v is not None})
            requests.append(body)
        answers = self.client.evaluate_batch(requests)
        for answer in answers:
            if "error" in answer:
                e = answer["error"]
                raise ServeError(e.get("code", 400), e.get("message", ""), e.get("field"))
        self.last_answers = answers
        return [float(a["reward"]) for a in answers]
