"""`EvalClient` and `AsyncEvalClient`: the HTTP clients of `harness serve`.

Every request carries an id made once per logical request (uuid4), so its retries are idempotent: the server
answers a repeated id with the answer it already gave. Retries (connection errors, 429 with its Retry-After,
502/503/504) back off exponentially with jitter, with `agents.retry.RetryPolicy` (the agents' own policy).
Other errors raise `ServeError` with the server's message and, where given, the field or limit it names.

    client = EvalClient("http://127.0.0.1:8000")            # token from $HARNESS_SERVE_TOKEN
    answer = client.evaluate("L1/13_softmax", reply_text)   # {"id", "status", "speedup", "reward", "feedback", "result"}
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from typing import Any

import httpx

from agents import RetryPolicy
from eval import DEFAULT_BACKEND

TOKEN_ENV = "HARNESS_SERVE_TOKEN"
RETRY_STATUSES = frozenset({429, 502, 503, 504})
DEFAULT_POLICY = RetryPolicy(max_attempts=8, initial_delay_s=0.5, max_delay_s=30.0)


class ServeError(RuntimeError):
    """An answer the client does not retry (400, 401, 404, 413, ...), or retries exhausted."""

    def __init__(self, status: int, message: str, field: str | None = None, limit: int | None = None):
        super().__init__(f"{status}: {message}")
        self.status, self.message, self.field, self.limit = status, message, field, limit


def request_body(problem: str | dict[str, str], code: str, *, backend: str = DEFAULT_BACKEND, eval: str | None = None,
                 reward: str | None = None, turn: int | None = None, request_id: str | None = None) -> dict[str, Any]:
    """One `/v1/evaluate` body, with a fresh request id unless given."""
    body: dict[str, Any] = {"id": request_id or uuid.uuid4().hex, "problem": problem, "code": code, "backend": backend}
    for key, value in (("eval", eval), ("reward", reward), ("turn", turn)):
        if value is not None:
            body[key] = value
    return body


def _error(response: httpx.Response) -> ServeError:
    try:
        err = response.json().get("error", {})
    except ValueError:
        err = {}
    return ServeError(response.status_code, err.get("message") or response.text[:500], err.get("field"),
                      err.get("limit"))


def _retry_after(response: httpx.Response | None) -> float | None:
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class _Base:
    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 3600.0,
                 policy: RetryPolicy = DEFAULT_POLICY, seed: int | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout
        self.policy = policy
        self._rng = random.Random(seed)

    def _next_delay(self, attempt: int, response: httpx.Response | None, exc: Exception | None) -> float:
        """Seconds to wait before retrying, or raise when this failure is not retried (or retries are spent)."""
        if response is not None and response.status_code not in RETRY_STATUSES:
            raise _error(response)
        delay = self.policy.delay(attempt, _retry_after(response), self._rng)
        if delay is None:
            if response is not None:
                raise _error(response)
            raise ServeError(0, f"the service could not be reached after {attempt} attempts: {exc}")
        return delay


class EvalClient(_Base):
    """Synchronous client (thread-safe: one `httpx.Client` pool)."""

    def __init__(self, base_url: str, token: str | None = None, **kwargs: Any) -> None:
        super().__init__(base_url, token, **kwargs)
        self._http = httpx.Client(base_url=self.base_url, headers=self.headers, timeout=self.timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "EvalClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            attempt += 1
            response, error = None, None
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:  # refused, reset, timed out: the server may be restarting
                error = exc
            if response is not None and response.status_code == 200:
                return response.json()
            time.sleep(self._next_delay(attempt, response, error))

    def evaluate(self, problem: str | dict[str, str], code: str, **options: Any) -> dict[str, Any]:
        """Evaluate one candidate (`backend`, `eval`, `reward`, `turn`, `request_id` as keywords)."""
        return self._call("POST", "/v1/evaluate", json=request_body(problem, code, **options))

    def evaluate_batch(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Answers in order; a bad item is that item's `{"error": ...}`. Give ids to keep retries idempotent."""
        body = {"requests": [{"id": uuid.uuid4().hex, **r} for r in requests]}
        return self._call("POST", "/v1/evaluate/batch", json=body)["results"]

    def problems(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/problems")["problems"]

    def problem(self, problem_id: str, backend: str = DEFAULT_BACKEND) -> dict[str, Any]:
        return self._call("GET", f"/v1/problems/{problem_id}", params={"backend": backend})

    def messages(self, problem: str | dict[str, str], backend: str = DEFAULT_BACKEND,
                 history: list[dict[str, Any]] | None = None) -> list[dict[str, str]]:
        """The conversation `harness run` would send after `history` ([{"turn", "reply", "code", "feedback"}])."""
        return self._call("POST", "/v1/messages", json={"problem": problem, "backend": backend,
                                                        "history": history or []})["messages"]

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/v1/health")


class AsyncEvalClient(_Base):
    """Asynchronous client (`async with AsyncEvalClient(url) as c: await c.evaluate(...)`)."""

    def __init__(self, base_url: str, token: str | None = None, **kwargs: Any) -> None:
        super().__init__(base_url, token, **kwargs)
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=self.timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncEvalClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            attempt += 1
            response, error = None, None
            try:
                response = await self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                error = exc
            if response is not None and response.status_code == 200:
                return response.json()
            await asyncio.sleep(self._next_delay(attempt, response, error))

    async def evaluate(self, problem: str | dict[str, str], code: str, **options: Any) -> dict[str, Any]:
        return await self._call("POST", "/v1/evaluate", json=request_body(problem, code, **options))

    async def evaluate_batch(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        body = {"requests": [{"id": uuid.uuid4().hex, **r} for r in requests]}
        return (await self._call("POST", "/v1/evaluate/batch", json=body))["results"]

    async def problem(self, problem_id: str, backend: str = DEFAULT_BACKEND) -> dict[str, Any]:
        return await self._call("GET", f"/v1/problems/{problem_id}", params={"backend": backend})

    async def health(self) -> dict[str, Any]:
        return await self._call("GET", "/v1/health")
