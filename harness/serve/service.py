"""The service behind the HTTP routes: a request to a verdict, a reward, feedback and a stored attempt.

No HTTP here (the routes are `harness.serve.app`), so `KernelEnv` can use a `Service` in-process and see
exactly what an HTTP client sees. Every part is the one `harness run` uses: the Hydra config
(`harness.overrides.compose_config`), the problems and prompts (`catalog`), the reply
extraction and the crash-safe evaluation (`harness.verdict`), the feedback (`eval.feedback`), the executors
(`harness.executors.make_evaluator`) and the run store (`audit`: `runs/serve-<name>/`).

Identical requests (same problem, code, backend, evaluator settings and device) are coalesced while in flight
(`WorkQueue`); afterwards the evaluator's authenticated result cache (`eval.cache_dir`) answers them.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from eval import DEFAULT_BACKEND, EvalConfig, EvalResult, backend_error, cache_key, render_feedback
from harness import overrides as ov
from harness.cli import VERSION
from harness.executors import make_evaluator
from harness.verdict import evaluate_safely, extract_candidate
from harness.serve import rewards
from harness.serve.audit import AuditTrail
from harness.serve.catalog import BadRequest, Catalog, refuse_non_text
from harness.serve.ids import IdConflict, RequestIds, fingerprint
from harness.serve.metrics import Metrics
from harness.serve.queue import QueueFull, Ticket, WorkQueue
from problems import Problem

MAX_CODE_CHARS = 1 << 20  # one reply or candidate
MAX_ID_CHARS = 128
MAX_TURN = (1 << 63) - 1  # the largest integer the audit trail's SQLite column holds
_ANSWERS_KEPT = 16384  # answers kept by request id, so a retried request gets the same answer


@dataclass
class EvalRequest:
    """One parsed `/v1/evaluate` request."""

    id: str
    problem: Problem
    reply: str
    backend: str = DEFAULT_BACKEND
    preset: str | None = None
    reward: str | None = None
    turn: int = 1
    field: str = "id"  # where the id was given (`requests[2].id` in a batch), for a conflict's answer

    @property
    def fingerprint(self) -> str:
        """The digest its id is bound to: everything that shapes its answer."""
        return fingerprint(self.problem.id, self.problem.source_hash, self.reply, self.backend, self.preset,
                           self.reward, self.turn)


@dataclass
class Pending:
    """A request on its way: answered at once (`answer`) or waiting on a queue `ticket`."""

    request: EvalRequest
    code: str | None = None
    answer: dict[str, Any] | None = None
    result: EvalResult | None = None
    ticket: Ticket | None = None
    queue: WorkQueue | None = None
    conflict: IdConflict | None = None  # its id is bound to another request: answered 409, never evaluated
    coalesced: bool = False
    started: float = dataclasses.field(default_factory=time.time)
    submitted: float = dataclasses.field(default_factory=time.monotonic)  # for the answer's `timings`


@dataclass
class Lane:
    """One evaluator (one preset's settings) and the queue that feeds it."""

    preset: str
    config: EvalConfig
    evaluator: Any
    queue: WorkQueue

    @property
    def device(self) -> str:
        """The device name (`executor=ray`: the actors' devices), part of the coalescing key."""
        name = getattr(self.evaluator, "device_name", None)
        if name is None:
            name = "ray: " + ", ".join(sorted({str(a.get("device")) for a in getattr(self.evaluator, "actors", [])}))
        return str(name)


class Service:
    """See the module docstring. Thread-safe; `close()` stops every evaluator and the store."""

    def __init__(self, overrides: list[str], *, name: str = "default", max_queue: int = 256,
                 reward: str | None = None, allow_problem_source: bool = True,
                 log: Callable[[str], None] = print) -> None:
        self.config = ov.compose_config(overrides)
        self._overrides = [o for o in overrides if ov.parse([o])[0].key_or_group != "eval"]
        self.default_preset = next((v for v in ov.values_of(overrides, "eval")), "default")
        self.presets = ov.groups()["eval"]
        self.default_reward = reward or rewards.DEFAULT
        rewards.get(self.default_reward)  # an unknown name fails here, at start
        self.max_queue = max_queue
        self.metrics = Metrics()
        self.catalog = Catalog(self.config, allow_problem_source=allow_problem_source)
        self._log = log
        self.stopping = threading.Event()  # set by a stop signal: waiting requests are told to retry (503)
        self._lock = threading.Lock()
        self._finish_lock = threading.Lock()  # held while an answer is stored (the store writes one at a time anyway)
        self._lane_lock = threading.Lock()  # held while a preset's evaluator starts (slow); requests go on meanwhile
        self._lanes: dict[str, Lane] = {}
        self._ids = RequestIds(_ANSWERS_KEPT)
        self.audit: AuditTrail | None = None
        try:
            first = self.lane(self.default_preset)
            if hasattr(first.evaluator, "wait_warm"):  # listen once the workers are up, not before
                first.evaluator.wait_warm(600)
            self.audit = AuditTrail(self.config, name)
        except BaseException:
            self.close()
            raise
        self.run_dir = self.audit.run_dir

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            lane.queue.close()
            lane.evaluator.close()
        if self.audit is not None:
            self.audit.close()
            self.audit = None

    def lane(self, preset: str) -> Lane:
        """The evaluator of `preset` (started on first use, with the server's other settings)."""
        with self._lock:
            if preset in self._lanes:
                return self._lanes[preset]
        with self._lane_lock:
            if preset in self._lanes:
                return self._lanes[preset]
            config = ov.compose_config([*self._overrides, f"eval={preset}"])
            eval_config = EvalConfig(**config["eval"])
            evaluator = make_evaluator(config["executor"], eval_config, log=self._log)
            queue = WorkQueue(max(1, int(evaluator.workers)), self.max_queue, name=f"kh-serve-{preset}",
                              on_cancel=lambda n: self.metrics.count("cancelled", n),
                              on_coalesce=lambda n: self.metrics.count("coalesced", n))
            lane = Lane(preset, eval_config, evaluator, queue)
            with self._lock:
                self._lanes[preset] = lane
            return lane

    @property
    def lanes(self) -> list[Lane]:
        with self._lock:
            return list(self._lanes.values())

    # -- problems and prompts (the catalog's) ----------------------------------------------------
    def find_problem(self, spec: Any, field: str = "problem") -> Problem:
        return self.catalog.find(spec, field)

    def messages(self, problem: Problem, backend: str, history: Any = ()) -> list[dict[str, str]]:
        return self.catalog.messages(problem, backend, history)

    # -- requests ----------------------------------------------------------------------------
    def parse(self, body: Any, prefix: str = "") -> EvalRequest:
        """Check one evaluate request; `BadRequest` names the first bad field, `NotFound` an unknown problem. Every
        field is checked here, before any work, so that nothing a request holds can fail its store or its answer."""
        if not isinstance(body, dict):
            raise BadRequest(prefix.rstrip(".") or "body", "must be a JSON object")
        refuse_non_text(body, prefix.rstrip("."))
        for key in ("problem", "code"):
            if key not in body:
                raise BadRequest(prefix + key, "is required")
        code = body["code"]
        if not isinstance(code, str):
            raise BadRequest(prefix + "code", "must be a string (a reply or bare code)")
        if len(code) > MAX_CODE_CHARS:
            raise BadRequest(prefix + "code", f"longer than {MAX_CODE_CHARS} characters")
        backend = body.get("backend", DEFAULT_BACKEND)
        if why := backend_error(backend):
            raise BadRequest(prefix + "backend", why)
        preset = body.get("eval")
        if preset is not None and preset not in self.presets:
            raise BadRequest(prefix + "eval", f"unknown preset {preset!r}; valid: {', '.join(self.presets)}")
        reward = body.get("reward")
        if reward is not None and not isinstance(reward, str):
            raise BadRequest(prefix + "reward", "must be a reward's name (a string)")
        try:
            rewards.get(reward if reward is not None else self.default_reward)
        except rewards.RewardError as exc:
            raise BadRequest(prefix + "reward", str(exc)) from None
        rid, turn = body.get("id"), body.get("turn", 1)
        if rid is not None and (not isinstance(rid, str) or not 0 < len(rid) <= MAX_ID_CHARS):
            raise BadRequest(prefix + "id", f"must be a string of 1 to {MAX_ID_CHARS} characters")
        if isinstance(turn, bool) or not isinstance(turn, int) or not 1 <= turn <= MAX_TURN:
            raise BadRequest(prefix + "turn", f"must be an integer from 1 to {MAX_TURN}")
        problem = self.find_problem(body["problem"], prefix + "problem")
        return EvalRequest(id=rid or uuid.uuid4().hex, problem=problem, reply=code, backend=backend,
                           preset=preset, reward=reward, turn=turn, field=prefix + "id")

    def submit(self, requests: list[EvalRequest]) -> list[Pending]:
        """Start every request (all or nothing: `QueueFull`); format errors, cached verdicts and repeated ids are
        answered at once, never queued behind evaluations. A request whose id is bound to other content is never
        evaluated: `finish` raises its `IdConflict`."""
        pending: list[Pending] = []
        by_lane: dict[str, list[tuple[int, tuple[str, Callable[[], Any]]]]] = collections.defaultdict(list)
        for i, req in enumerate(requests):
            p = Pending(req)
            pending.append(p)
            try:
                p.answer = self._ids.bind(req.id, req.fingerprint, req.field)
            except IdConflict as exc:
                p.conflict = exc
            if p.answer is not None or p.conflict is not None:
                continue
            code, refused = extract_candidate(req.reply, req.problem.id, req.backend)
            p.code, p.result = code, refused
            if refused is not None:
                continue
            lane = self.lane(req.preset or self.default_preset)
            p.result = lane.evaluator.cached(req.problem, code, req.backend)
            if p.result is not None:
                continue
            key = cache_key(problem=req.problem.source_hash, candidate=code, backend=req.backend,
                            config=lane.config.cache_fields(), device=lane.device)
            by_lane[lane.preset].append((i, (key, self._job(lane, req.problem, code, req.backend))))
        try:
            for preset, items in by_lane.items():
                tickets = self.lane(preset).queue.submit([item for _, item in items])
                for (i, _), ticket in zip(items, tickets):
                    pending[i].ticket, pending[i].queue = ticket, self.lane(preset).queue
                    pending[i].coalesced = ticket.waiters > 1
        except QueueFull:  # all or nothing: what another preset's queue took is given back
            self.release(pending)
            raise
        for p in pending:  # builds start now, on the CPU cores, not when a queue slot takes the candidate
            if p.ticket is None or p.code is None:
                continue
            self.lane(p.request.preset or self.default_preset).evaluator.prebuild(p.request.problem, p.code,
                                                                                  p.request.backend)
        return pending

    def _job(self, lane: Lane, problem: Problem, code: str, backend: str) -> Callable[[], tuple[EvalResult, float]]:
        def run() -> tuple[EvalResult, float]:
            t0 = time.perf_counter()
            result = evaluate_safely(lane.evaluator, problem, code, backend)
            elapsed = time.perf_counter() - t0
            if not result.cached:
                device = "cpu" if result.gpu_index is None else f"{result.node or 'local'}:gpu{result.gpu_index}"
                self.metrics.evaluated(device, elapsed)
            return result, elapsed
        return run

    def release(self, pending: list[Pending]) -> None:
        """The client went away: its queued work is cancelled unless someone else waits for it."""
        by_queue: dict[int, tuple[WorkQueue, list[Ticket]]] = {}
        for p in pending:
            if p.ticket is not None and p.queue is not None and not p.ticket.future.done():
                by_queue.setdefault(id(p.queue), (p.queue, []))[1].append(p.ticket)
        for queue, tickets in by_queue.values():
            queue.release(tickets)

    def finish(self, p: Pending) -> dict[str, Any]:
        """The answer to a request whose result is known: reward, feedback, and the attempt stored.

        One answer per id, recorded once, and on disk before anyone gets it: a retry of the id that arrives while
        the first try is being stored waits for it (`_finish_lock`) and gets the same answer; a request of other
        content under that id gets `IdConflict`, never that answer."""
        if p.conflict is not None:
            raise p.conflict
        if p.answer is not None:
            return p.answer
        handed = time.monotonic()
        if p.result is None:
            assert p.ticket is not None
            result, eval_s = p.ticket.future.result()
        else:
            result, eval_s = p.result, 0.0
        req = p.request
        reward = rewards.score(req.reward or self.default_reward, result, req.turn)
        feedback = render_feedback(result)
        speedup = result.speedup if result.is_correct else None
        answer = {"id": req.id, "status": result.status.value, "speedup": speedup, "reward": reward,
                  "feedback": feedback, "code": p.code, "problem": req.problem.id, "reward_name": req.reward or self.default_reward,
                  "coalesced": p.coalesced, "result": result.to_dict()}
        with self._finish_lock:
            known = self._ids.bind(req.id, req.fingerprint, req.field)
            if known is not None:
                return known
            self.metrics.verdict(result.status.value, cached=result.cached)
            stored = time.monotonic()
            if self.audit is not None:
                self.audit.record(request_id=req.id, problem=req.problem, turn=req.turn, reply=req.reply,
                                  code=p.code, result=result, feedback=feedback, speedup=speedup, eval_s=eval_s,
                                  started=p.started)
            answer["timings"] = _timings(p, eval_s, handed, stored, time.monotonic())
            return self._ids.keep(req.id, req.fingerprint, answer, req.field)

    def evaluate(self, body: dict[str, Any]) -> dict[str, Any]:
        """One request, answered in this thread (what `KernelEnv` uses in-process); waits while the queue is full."""
        req = self.parse(body)
        while True:
            try:
                (p,) = self.submit([req])
                break
            except QueueFull as exc:
                time.sleep(min(exc.retry_after, 5))
        return self.finish(p)

    # -- status ------------------------------------------------------------------------------
    def queued(self) -> int:
        return sum(l.queue.depth for l in self.lanes)

    def in_flight(self) -> int:
        return sum(l.queue.in_flight for l in self.lanes)

    def workers_on(self, device: str) -> int:
        """Workers per device label (for the busy share): a lane's workers over its devices."""
        lanes = self.lanes
        if not lanes:
            return 1
        ev = lanes[0].evaluator
        gpus = len(getattr(ev, "gpu_indices", [None]) or [None])
        return max(1, int(ev.workers) // max(1, gpus))

    def health(self) -> dict[str, Any]:
        lanes = self.lanes
        return {"status": "ok", "version": VERSION, "run_dir": str(self.run_dir),
                "presets": {l.preset: {"device": l.device, "workers": int(l.evaluator.workers)} for l in lanes},
                "queued": self.queued(), "in_flight": self.in_flight(), "max_queue": self.max_queue,
                "problems": len(self.catalog.ids()), "rewards": rewards.names(), "default_reward": self.default_reward}


def _timings(p: Pending, eval_s: float, handed: float, stored: float, done: float) -> dict[str, float]:
    """Where a request's time went on the server (seconds): waiting for a queue worker, evaluating, between the
    evaluation's end and its answer being built (waking the waiting request), and storing the attempt. An answer
    that needed no evaluation (a format error) spent none in the queue."""
    queue_s = handoff_s = 0.0
    t = p.ticket
    if t is not None and t.started_at is not None and t.ended_at is not None:
        queue_s, handoff_s = max(0.0, t.started_at - p.submitted), max(0.0, handed - t.ended_at)
    return {"queue_s": round(queue_s, 4), "eval_s": round(eval_s, 4), "handoff_s": round(handoff_s, 4),
            "store_s": round(done - stored, 4)}
