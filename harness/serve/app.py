"""The HTTP routes of `harness serve` (FastAPI on uvicorn) over a `Service`.

FastAPI/Starlette on uvicorn: the most used ASGI stack in Python, maintained, typed, with an async request
model that lets one process hold thousands of waiting requests while the evaluator's threads work; uvicorn is
its reference server. Bodies are read and checked here by hand (not by pydantic models) so that every refusal
is ours: 400 naming the field, 413 naming the limit, 404, 401, 409 for an id reused with other content, 429 with
Retry-After.

A client that disconnects while its evaluation waits in the queue cancels it (unless another client waits for
the same work). No request and no candidate can stop the server: every error becomes a JSON answer.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from agents import TurnRecord
from eval import DEFAULT_BACKEND, EvaluatorClosed, backend_error
from harness.serve.queue import QueueFull
from harness.serve.catalog import BadRequest, NotFound, refuse_non_text
from harness.serve.ids import IdConflict
from harness.serve.service import Pending, Service

_POLL_S = 0.5  # how often a waiting request checks that its client is still there, and that the service goes on
_RETRY_AFTER_STOP_S = 5  # what a request cut off by a stop is told to wait before retrying (a restart, a replica)


class HTTPError(Exception):
    """An answer other than 200: status code, message, and the field or limit it names."""

    def __init__(self, code: int, message: str, *, field: str | None = None, limit: int | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.code, self.message, self.field, self.limit, self.headers = code, message, field, limit, headers or {}

    def response(self) -> JSONResponse:
        """The answer; a message quoting a request's non-text (a lone surrogate) is escaped, so it can be sent."""
        message = self.message.encode("utf-8", "backslashreplace").decode()
        error: dict[str, Any] = {"code": self.code, "message": message}
        if self.field is not None:
            error["field"] = self.field
        if self.limit is not None:
            error["limit"] = self.limit
        return JSONResponse({"error": error}, status_code=self.code, headers=self.headers)


def _item_error(exc: Exception) -> dict[str, Any]:
    """A batch item's own error, shaped like a whole request's."""
    if isinstance(exc, BadRequest):
        return {"error": {"code": 400, "field": exc.field, "message": str(exc)}}
    if isinstance(exc, IdConflict):
        return {"error": {"code": 409, "field": exc.field, "message": str(exc)}}
    return {"error": {"code": 404, "message": str(exc)}}


class _CountResponses:
    """Counts responses by status code. Plain ASGI (not `BaseHTTPMiddleware`, whose wrapped `receive` hides a
    client's disconnect from `Request.is_disconnected`, which cancellation depends on)."""

    def __init__(self, app: Any, metrics: Any) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def counting_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.metrics.response(int(message["status"]))
            await send(message)

        await self.app(scope, receive, counting_send)


def stopping_error() -> HTTPError:
    """The answer to a request the service cannot finish because it is stopping: clients retry a 503."""
    return HTTPError(503, "the service is stopping: retry this request, with its id, once it is back",
                     headers={"Retry-After": str(_RETRY_AFTER_STOP_S)})


@dataclass(frozen=True)
class Served:
    """What every route reads: the service and the limits `create_app` was given (`app.state.served`)."""

    service: Service
    token: str | None  # the bearer token every route but /v1/health requires (None: no auth)
    max_body_bytes: int
    max_batch: int


def served(request: Request) -> Served:
    return request.app.state.served


async def authorize(request: Request) -> None:
    """A dependency: 401 unless the request carries the bearer token (where one is set)."""
    token = served(request).token
    if token is None:
        return
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise HTTPError(401, "a valid bearer token is required (Authorization: Bearer $HARNESS_SERVE_TOKEN)",
                        headers={"WWW-Authenticate": "Bearer"})


async def json_body(request: Request) -> Any:
    """A dependency: the body as JSON, read in chunks and refused (413) once over `max_body_bytes`."""
    limit = served(request).max_body_bytes
    too_large = HTTPError(413, f"the body is over the limit of {limit} bytes (--max-body-bytes)", limit=limit)
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise HTTPError(400, f"the body is not JSON: {exc}", field="body") from None


def backend_of(request: Request) -> str:
    """A dependency: the `backend` query parameter, checked (`checked_backend`)."""
    return checked_backend(request.query_params.get("backend", DEFAULT_BACKEND))


def checked_backend(backend: Any) -> str:
    """`backend` if it names one, else 400 naming the field."""
    if why := backend_error(backend):
        raise HTTPError(400, f"backend: {why}", field="backend")
    return backend


async def answer(request: Request, pending: list[Pending]) -> list[dict[str, Any]] | None:
    """Wait for every pending item (woken when the last one finishes, checking the client every `_POLL_S`);
    None, and the queued work released, when the client went away. Once the service is stopping, no request
    is answered from its result: each still waiting, or whose work ended since, is answered 503 at once. Cut
    off at the end of the grace period it would get a bare 500, which clients do not retry; and a stop signal
    sent to the whole process group ends the evaluation workers too, so work that ends then may end as a
    `crash` that is the stop's doing, not the candidate's. The retry is evaluated afresh."""
    service = served(request).service
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    futures = [p.ticket.future for p in pending if p.ticket is not None]

    def wake(_: Any) -> None:
        if all(f.done() for f in futures):
            try:
                loop.call_soon_threadsafe(done.set)
            except RuntimeError:  # the loop closed at shutdown: nobody waits any more
                pass

    for f in futures:
        f.add_done_callback(wake)
    if all(f.done() for f in futures):
        done.set()
    while not done.is_set():
        try:
            await asyncio.wait_for(done.wait(), timeout=_POLL_S)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                service.release(pending)
                return None
            if service.stopping.is_set():
                service.release(pending)
                raise stopping_error() from None
    if service.stopping.is_set():  # set before this coroutine resumed: a signal is handled first
        raise stopping_error()
    return await asyncio.to_thread(lambda: [_finished(service, p) for p in pending])


def _finished(service: Service, p: Pending) -> dict[str, Any]:
    """The answer to `p`, or its error: an id bound to another request (one item's in a batch)."""
    try:
        return service.finish(p)
    except IdConflict as exc:
        return _item_error(exc)


def _submit(service: Service, requests: list[Any]) -> list[Pending]:
    if service.stopping.is_set():
        raise stopping_error()
    try:
        return service.submit(requests)
    except QueueFull as exc:
        raise HTTPError(429, str(exc), limit=exc.limit, headers={"Retry-After": str(exc.retry_after)}) from None


_GONE = {"error": {"code": 499, "message": "client went away"}}

evaluation = APIRouter(dependencies=[Depends(authorize)])


@evaluation.post("/v1/evaluate")
async def evaluate(request: Request, body: Any = Depends(json_body)) -> Response:
    service = served(request).service
    try:
        req = await asyncio.to_thread(service.parse, body)
    except BadRequest as exc:
        raise HTTPError(400, str(exc), field=exc.field) from None
    except NotFound as exc:
        raise HTTPError(404, str(exc), field="problem") from None
    pending = await asyncio.to_thread(_submit, service, [req])
    answers = await answer(request, pending)
    if answers and "error" in answers[0]:
        raise HTTPError(**answers[0]["error"])
    return JSONResponse(answers[0] if answers else _GONE)


@evaluation.post("/v1/evaluate/batch")
async def evaluate_batch(request: Request, body: Any = Depends(json_body)) -> Response:
    service, max_batch = served(request).service, served(request).max_batch
    items = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise HTTPError(400, "requests: must be a list of evaluate requests", field="requests")
    if len(items) > max_batch:
        raise HTTPError(413, f"requests: {len(items)} items, over the limit of {max_batch} (--max-batch)",
                        field="requests", limit=max_batch)
    parsed: list[Any] = []
    for i, item in enumerate(items):
        try:
            parsed.append(await asyncio.to_thread(service.parse, item, f"requests[{i}]."))
        except (BadRequest, NotFound) as exc:
            parsed.append(exc)
    good = [r for r in parsed if not isinstance(r, Exception)]
    pending = await asyncio.to_thread(_submit, service, good)
    answers = await answer(request, pending)
    if answers is None:
        return JSONResponse(_GONE)
    it = iter(answers)
    return JSONResponse({"results": [_item_error(r) if isinstance(r, Exception) else next(it) for r in parsed]})


catalog = APIRouter(dependencies=[Depends(authorize)])


@catalog.get("/v1/problems")
async def problems(request: Request) -> Response:
    service = served(request).service
    described = [service.catalog.describe(service.find_problem(i)) for i in service.catalog.ids()]
    return JSONResponse({"problems": described})


@catalog.get("/v1/problems/{problem_id:path}")
async def problem(problem_id: str, request: Request, backend: str = Depends(backend_of)) -> Response:
    service = served(request).service
    try:
        p = service.find_problem(problem_id)
    except NotFound as exc:
        raise HTTPError(404, str(exc), field="problem") from None
    messages = await asyncio.to_thread(service.messages, p, backend)
    return JSONResponse({"problem": service.catalog.describe(p), "backend": backend, "messages": messages})


@catalog.post("/v1/messages")
async def messages(request: Request, body: Any = Depends(json_body)) -> Response:
    """The conversation for a later turn: `{"problem", "backend", "history": [{"turn", "reply", "code",
    "feedback"}]}` -> the messages `harness run` would send next."""
    service = served(request).service
    if not isinstance(body, dict) or "problem" not in body:
        raise HTTPError(400, "problem: is required", field="problem")
    try:
        refuse_non_text(body)
    except BadRequest as exc:
        raise HTTPError(400, str(exc), field=exc.field) from None
    backend = checked_backend(body.get("backend", DEFAULT_BACKEND))
    try:
        p = service.find_problem(body["problem"])
        records = _turn_records(body.get("history", []))
    except BadRequest as exc:
        raise HTTPError(400, str(exc), field=exc.field) from None
    except NotFound as exc:
        raise HTTPError(404, str(exc), field="problem") from None
    return JSONResponse({"backend": backend, "messages": await asyncio.to_thread(service.messages, p, backend,
                                                                                   records)})


def _turn_records(history: Any) -> list[TurnRecord]:
    """A `/v1/messages` history as the loop's turn records; `BadRequest` naming the first item that is not one."""
    if not isinstance(history, list):
        raise BadRequest("history", "must be a list of turns")
    records = []
    for i, h in enumerate(history):
        if not (isinstance(h, dict) and isinstance(h.get("reply", ""), str) and isinstance(h.get("feedback", ""), str)
                and isinstance(h.get("code"), (str, type(None)))):
            raise BadRequest(f"history[{i}]", "must be {\"reply\": str, \"code\": str|null, \"feedback\": str}")
        turn = h.get("turn", i + 1)
        if isinstance(turn, bool) or not isinstance(turn, int):
            raise BadRequest(f"history[{i}].turn", "must be an integer")
        records.append(TurnRecord(turn=turn, reply=h.get("reply", ""), code=h.get("code"),
                                  feedback=h.get("feedback", "")))
    return records


operations = APIRouter()


@operations.get("/v1/health")
async def health(request: Request) -> Response:
    return JSONResponse(served(request).service.health())


@operations.get("/metrics", dependencies=[Depends(authorize)])
async def metrics(request: Request) -> Response:
    service = served(request).service
    text = service.metrics.render(service.queued(), service.in_flight(), service.workers_on)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


def create_app(service: Service, *, token: str | None, max_body_bytes: int = 8 << 20, max_batch: int = 256) -> FastAPI:
    """The ASGI app: the routers over `service`, its error handlers and its response counter. `token`: the bearer
    token every route but /v1/health requires (None: no auth)."""
    app = FastAPI(title="harness serve", version=service.health()["version"], docs_url=None, redoc_url=None)
    app.state.served = Served(service, token, max_body_bytes, max_batch)

    @app.exception_handler(HTTPError)
    async def _http_error(request: Request, exc: HTTPError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(EvaluatorClosed)
    async def _closed(request: Request, exc: EvaluatorClosed) -> JSONResponse:  # the service is closing: no verdict
        return stopping_error().response()

    @app.exception_handler(Exception)
    async def _any_error(request: Request, exc: Exception) -> JSONResponse:  # a harness bug: answered, not fatal
        return HTTPError(500, f"internal error: {type(exc).__name__}: {exc}").response()

    app.add_middleware(_CountResponses, metrics=service.metrics)
    for router in (evaluation, catalog, operations):
        app.include_router(router)
    return app
