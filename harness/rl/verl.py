"""A verl custom reward function with rewards from `harness serve`.

In verl's config (`custom_reward_function.path` = this file, `custom_reward_function.name` = `compute_score`;
with `reward_model.reward_manager=batch`, name `compute_score_batch`). The service's address comes from
`HARNESS_SERVE_URL` (default http://127.0.0.1:8000) and its token from `HARNESS_SERVE_TOKEN`. Each row's
`ground_truth` (or `extra_info["problem"]`) names its problem: a served id such as `L1/13_softmax`.
Options: `HARNESS_SERVE_REWARD` (a reward name), `HARNESS_SERVE_BACKEND` (triton | cuda).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from eval import DEFAULT_BACKEND
from harness.client import EvalClient, ServeError

URL_ENV = "HARNESS_SERVE_URL"
_client: EvalClient | None = None
_lock = threading.Lock()


def client() -> EvalClient:
    """One client per process (verl calls the reward function from its reward workers)."""
    global _client
    with _lock:
        if _client is None:
            _client = EvalClient(os.environ.get(URL_ENV, "http://127.0.0.1:8000"))
        return _client


def _request(solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None) -> dict[str, Any]:
    problem = (extra_info or {}).get("problem", ground_truth)
    body: dict[str, Any] = {"problem": problem, "code": solution_str,
                            "backend": os.environ.get("HARNESS_SERVE_BACKEND", DEFAULT_BACKEND)}
    if os.environ.get("HARNESS_SERVE_REWARD"):
        body["reward"] = os.environ["HARNESS_SERVE_REWARD"]
    return body


def _reward(answer: dict[str, Any]) -> float:
    if "error" in answer:
        e = answer["error"]
        raise ServeError(e.get("code", 400), e.get("message", ""), e.get("field"))
    return float(answer["reward"])


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                  **kwargs: Any) -> float:
    """verl's per-sample signature (NaiveRewardManager)."""
    return _reward(client().evaluate_batch([_request(solution_str, ground_truth, extra_info)])[0])


def compute_score_batch(data_sources: list[Any], solution_strs: list[str], ground_truths: list[Any],
                        extra_infos: list[dict[str, Any] | None] | None = None, **kwargs: Any) -> list[float]:
    """verl's batched signature (BatchRewardManager): one batch request for the whole batch."""
    extras = extra_infos or [None] * len(solution_strs)
    answers = client().evaluate_batch([_request(s, g, e) for s, g, e in zip(solution_strs, ground_truths, extras)])
    return [_reward(a) for a in answers]
