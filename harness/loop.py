"""The refinement loop: for each problem x sample, prompt -> reply -> extract -> evaluate -> feedback,
turn after turn, every attempt committed to the run store before the next turn depends on it.

Concurrency: each (problem, sample) is one trajectory, run on a thread pool of
`max_concurrency` threads, so agent requests and evaluations overlap: the `Evaluator` is
thread-safe and keeps one candidate in flight per warm worker on every GPU. Nothing a candidate does can end the run:
the evaluator judges it, and an evaluator exception is recorded as a crash of that attempt.

Samples and turns count from 1.

Budgets (tokens or cost, counted over the whole run including earlier sessions): each request
reserves its worst case before it is sent (its prompt at `CHARS_PER_TOKEN` characters per token,
plus `agent.max_tokens` or `OUTPUT_RESERVE` reply tokens, at the agent's prices), and a request is
sent only while the spending plus the reservations in flight stays below the budget; so a budget
is exceeded by at most one request, and the stop reason states what was spent.

Stopping: Ctrl-C, SIGTERM or SIGHUP (a `KeyboardInterrupt` in the main thread, `harness.signals`)
stops new requests; the attempts in flight get `stop_grace_s` to finish and be recorded, then are
abandoned (nothing of them is recorded, so a resume runs them again); a second signal abandons them
at once. An `AuthError` stops the run with its message, and so does a write the store cannot make
(`disk: ...`, a full disk). An `UnavailableError` (the agent could not be reached or run) records
nothing: that sample waits for a resume, and when no request of this session has reached the agent
yet, the run stops (`unreachable: ...`) instead of failing every attempt the same way. Any other
agent error (the provider refused this request) is recorded as an `agent_error` attempt and ends
that sample; but refusals before any request of this session was answered are held:
`PERSISTENT_REFUSALS` alike stop the run (`refused: ...`) recording nothing, so that a request the
provider refuses every time (a model name it rejects) does not burn the run and a resume after the
fix retries them; a first answer, or the run's end without that many, records the held ones as
usual. A `problem_error` (the problem is broken, not the candidate: `eval.problem_check`) ends that sample too:
no later turn can mend it. A stopped run resumes where it stopped (docs/exit-codes.md).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, Sequence

from agents import (
    ABSTENTION_REASON,
    CHARS_PER_TOKEN,
    AgentError,
    AgentResponse,
    AuthError,
    Message,
    Pricing,
    PromptBuilder,
    TurnRecord,
    UnavailableError,
    Usage,
)
from eval import DEFAULT_BACKEND, EvalResult, Status, backend_error, render_feedback
from harness.progress import Display, RunStats
from harness.response_cache import ResponseCache, request_key
from harness.signals import deferred as deferred_signals, stop_reason
from harness.store import Attempt, Outline, RunStore, StoreWriteError
from harness.verdict import Evaluates, evaluate_safely, extract_candidate
from problems import Problem


class Responds(Protocol):
    """What the loop needs of an agent (`agents.Agent`)."""

    def respond(self, messages: list[Message], *, problem_id: str, sample: int, turn: int) -> AgentResponse: ...


MIN_CONCURRENCY = 4  # trajectories in flight when `max_concurrency` is left to the evaluator's size (at least)


def concurrency_for(workers: int) -> int:
    """Trajectories in flight for an evaluator of `workers` workers when the run does not say: one per worker (so
    every pool can fill when the agent answers at once), and at least `MIN_CONCURRENCY`."""
    return max(MIN_CONCURRENCY, workers)


@dataclass(frozen=True)
class LoopSettings:
    """How many attempts, on which backend, how concurrently, and when to stop early."""

    turns: int = 1
    samples: int = 1
    backend: str = DEFAULT_BACKEND
    max_concurrency: int = MIN_CONCURRENCY
    target_speedup: float | None = None  # a sample stops once a correct attempt reaches it (measured only)
    max_tokens: int | None = None  # input + output tokens over the whole run
    max_cost_usd: float | None = None
    stop_grace_s: float = 20.0  # after a stop signal, how long attempts in flight may finish (schedulers kill at 30 s)

    def __post_init__(self) -> None:
        problems = []
        if self.turns < 1:
            problems.append(f"turns must be >= 1, got {self.turns}")
        if self.samples < 1:
            problems.append(f"samples must be >= 1, got {self.samples}")
        if why := backend_error(self.backend):
            problems.append(why)
        if self.max_concurrency < 1:
            problems.append(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        # written `not x > 0`, not `x <= 0`, so that nan (which no comparison holds for, and so would never stop
        # anything) is refused too
        if self.target_speedup is not None and not self.target_speedup > 0:
            problems.append(f"target_speedup must be > 0 or null, got {self.target_speedup}")
        if self.max_tokens is not None and self.max_tokens < 0:
            problems.append(f"budget.max_tokens must be >= 0 or null, got {self.max_tokens}")
        if self.max_cost_usd is not None and not self.max_cost_usd >= 0:
            problems.append(f"budget.max_cost_usd must be >= 0 or null, got {self.max_cost_usd}")
        if not self.stop_grace_s >= 0:
            problems.append(f"stop_grace_s must be >= 0, got {self.stop_grace_s}")
        if problems:
            raise ValueError("; ".join(problems))


OUTPUT_RESERVE = 4096  # reply tokens reserved per request when `agent.max_tokens` is not set
DISK = "disk"  # stop reason prefix: the run store could not write (a full disk); nothing committed is lost
PERSISTENT_REFUSALS = 3  # the same refusal on this many of a session's first requests stops the run
REFUSED = "refused"  # stop reason prefix: the provider refused the session's first requests (nothing recorded)
UNREACHABLE = "unreachable"  # stop reason prefix: attempts left unfinished because the agent could not be reached


@dataclass
class LoopOutcome:
    """How the loop ended. `stop_reason` is `finished`, or why it stopped early."""

    stop_reason: str
    stats: RunStats
    wall_s: float
    agent_s: float = 0.0  # wall time inside agent calls (this session)
    eval_s: float = 0.0  # wall time inside the evaluator (this session)
    errors: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)  # this session's UnavailableError messages, in order
    abandoned: int = 0  # attempts still in flight when the run stopped waiting for them (not recorded)

    @property
    def finished(self) -> bool:
        return self.stop_reason == "finished"


class _Stop(Exception):
    """Ends a trajectory because the run is stopping."""


class _Held(Exception):
    """Ends a trajectory whose refused attempt is held (see `RunLoop._hold`); recording it finishes the trajectory."""


def best_key(status: Status, speedup: float | None) -> tuple[int, float]:
    """Order of attempts for best-so-far: correct beats everything; then the higher measured speedup."""
    if status is not Status.CORRECT:
        return (0, 0.0)
    return (1, speedup if speedup is not None else float("-inf"))


def finished(last: Attempt | Outline | None, settings: LoopSettings) -> bool:
    """Whether a trajectory whose last recorded attempt is `last` is finished: after its last turn, a refused
    request, a broken problem, or reaching the target speedup."""
    if last is None:
        return False
    target = settings.target_speedup
    reached = (target is not None and last.best_status is Status.CORRECT and last.best_speedup is not None
               and last.best_speedup >= target)  # fmt: skip
    return last.turn >= settings.turns or last.status in (Status.AGENT_ERROR, Status.PROBLEM_ERROR) or reached


def unfinished(outline: Sequence[Outline], problem_ids: Sequence[str], settings: LoopSettings) -> int:
    """How many trajectories of these problems a run (its attempts' `outline`) has not finished."""
    last: dict[tuple[str, int], Outline] = {}
    for o in outline:  # by problem, sample, turn: the last one of a trajectory wins
        last[(o.problem_id, o.sample)] = o
    return sum(not finished(last.get((pid, s)), settings)
               for pid in problem_ids for s in range(1, settings.samples + 1))


class RunLoop:
    """Runs (or resumes) every trajectory of a run; see the module docstring."""

    def __init__(
        self,
        *,
        store: RunStore,
        agent: Responds,
        evaluator: Evaluates,
        problems: Sequence[Problem],
        prompts: PromptBuilder,
        settings: LoopSettings,
        display: Display,
        response_cache: ResponseCache | None = None,
        agent_config: Mapping[str, Any] | None = None,
    ) -> None:
        self._store = store
        self._agent = agent
        self._evaluator = evaluator
        self._problems = list(problems)
        self._prompts = prompts
        self.settings = settings
        self._display = display
        self._cache = response_cache
        self._agent_config = dict(agent_config or {})
        self._lock = threading.Lock()  # guards stats, budget counters, stop reason and timers
        self._stop = threading.Event()
        self._stop_reason = "finished"
        self._budget: str | None = None  # which budget stopped the run (its stop reason gets what was spent)
        self._stats = RunStats()
        self._agent_s = 0.0
        self._eval_s = 0.0
        self._tokens = 0
        self._cost = 0.0
        self._reserved_tokens = 0  # worst cases of the requests in flight
        self._reserved_cost = 0.0
        self._pricing = Pricing.from_config(self._agent_config.get("pricing") or None)
        self._output_reserve = int(self._agent_config.get("max_tokens") or OUTPUT_RESERVE)
        self._remaining: dict[str, int] = {}  # problem id -> trajectories not finished
        self._reached = False  # a request of this session got an answer from the agent
        self._unreachable: list[str] = []
        self._held: list[tuple[Problem, Attempt, list[Attempt]]] = []  # refusals before any answer (not recorded yet)
        self._refusals: list[str] = []  # their messages, in order

    # ------------------------------------------------------------------ public
    def run(self) -> LoopOutcome:
        """Run every unfinished trajectory; return how the run ended (state is saved either way)."""
        start = time.perf_counter()
        pending = self._plan()
        self._display.start(self._stats)
        pool = ThreadPoolExecutor(max_workers=self.settings.max_concurrency, thread_name_prefix="kh-loop")
        futures: set[Future[None]] = set()  # the trajectories submitted and not yet reaped: at most max_concurrency
        errors: list[str] = []
        abandoned = 0
        try:
            try:
                self._run_in_window(pool, pending, futures, errors)
            except KeyboardInterrupt as exc:
                self._request_stop(stop_reason(exc))
                grace = self.settings.stop_grace_s
                self._display.message(f"interrupted: finishing the attempts in flight for up to {grace:g} s "
                                      "(Ctrl-C again to quit now)")
                try:
                    abandoned = _wait_all(futures, timeout=grace)
                except KeyboardInterrupt:  # a second signal: quit now
                    abandoned = sum(f.running() for f in futures)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            self._display.stop()
        errors += _errors(f for f in futures if f.done())
        if self._budget is not None:
            self._stop_reason += self._spent()
        self._stop_if_all_refused()
        self._record_held()  # fewer refusals than stop a run, and no answer: they are recorded as usual
        if self._unreachable and self._stop_reason == "finished":
            self._stop_reason = (
                f"{UNREACHABLE}: {len(self._unreachable)} attempt(s) could not reach the agent and are not "
                f"finished; first error: {self._unreachable[0]}"
            )
        return LoopOutcome(
            stop_reason=self._stop_reason,
            unreachable=list(self._unreachable),
            stats=self._stats,
            wall_s=time.perf_counter() - start,
            agent_s=self._agent_s,
            eval_s=self._eval_s,
            errors=errors,
            abandoned=abandoned,
        )

    def _run_in_window(self, pool: ThreadPoolExecutor, pending: Sequence[tuple[Problem, int]],
                       futures: set[Future[None]], errors: list[str]) -> None:
        """Submit each trajectory only once a thread is free for it, and wait for the last ones: a plan of any size
        holds at most `max_concurrency` futures (one each, up front, was 1.6 GB for 600,000 trajectories and kept a
        stop signal waiting), and none is started once the run is stopping. A stop signal while one is submitted is
        raised once it is tracked, so the caller lets the attempts in flight finish."""
        for problem, sample in pending:
            while len(futures) >= self.settings.max_concurrency:
                errors += _reap(futures)
            if self._stop.is_set():
                break
            with deferred_signals():
                futures.add(pool.submit(self._trajectory, problem, sample))
        while futures:
            errors += _reap(futures)

    # ---------------------------------------------------------------- planning
    def _plan(self) -> list[tuple[Problem, int]]:
        """Trajectories still to run; counts what is already done. Reads only the attempts' outlines: a trajectory
        reads its own history (with the texts its prompts need) when it starts."""
        recorded: dict[tuple[str, int], list[Outline]] = {}
        for o in self._store.outline():
            recorded.setdefault((o.problem_id, o.sample), []).append(o)
        totals = self._store.totals()
        self._tokens, self._cost = totals.tokens, totals.cost_usd
        st = self._stats
        st.problems = len(self._problems)
        st.turns = self.settings.turns
        pending = []
        for problem in self._problems:
            self._remaining[problem.id] = 0
            for sample in range(1, self.settings.samples + 1):
                history = recorded.pop((problem.id, sample), [])
                for o in history:
                    st.add(o, this_session=False)
                if self._done(history):
                    st.attempts_planned += len(history)
                else:
                    st.attempts_planned += self.settings.turns
                    self._remaining[problem.id] += 1
                    pending.append((problem, sample))
            if self._remaining[problem.id] == 0:
                st.problems_done += 1
        return pending

    def _done(self, history: Sequence[Attempt | Outline]) -> bool:
        """A trajectory is finished after its last turn, a refused request, or reaching the target."""
        return finished(history[-1] if history else None, self.settings)

    # --------------------------------------------------------------- execution
    def _trajectory(self, problem: Problem, sample: int) -> None:
        """Run the remaining turns of one (problem, sample)."""
        try:
            history = self._store.history(problem.id, sample)
            while not self._done(history):
                history.append(self._turn(problem, sample, history))
        except (_Stop, _Held):
            return
        except StoreWriteError as exc:  # a full disk: what is committed stays, the run resumes once there is room
            self._request_stop(f"{DISK}: {exc}")
            return
        except BaseException as exc:
            self._request_stop(f"error: {type(exc).__name__}: {exc}")
            raise
        finally:
            with self._lock:
                self._stats.end(problem.id, sample)
        self._trajectory_done(problem, len(history))

    def _trajectory_done(self, problem: Problem, turns: int) -> None:
        with self._lock:
            self._stats.attempts_planned -= self.settings.turns - turns
            self._remaining[problem.id] -= 1
            if self._remaining[problem.id] == 0:
                self._stats.problems_done += 1
        self._display.update(self._stats)

    def _turn(self, problem: Problem, sample: int, history: list[Attempt]) -> Attempt:
        """One attempt: ask, extract, evaluate, record. Raises `_Stop` when the run is stopping."""
        turn = len(history) + 1
        if self._stop.is_set():
            raise _Stop
        with self._lock:
            self._stats.begin(problem.id, sample, turn, history[-1].status if history else None)
        messages = self._prompts.messages(problem.source, [_record(a) for a in history])
        prompt = [{"role": m.role, "content": m.content} for m in messages]
        started = time.time()
        base = dict(problem_id=problem.id, sample=sample, turn=turn, prompt=prompt, problem_hash=problem.source_hash)
        reserved = self._admit(messages)
        try:
            response, from_cache = self._ask(messages, problem.id, sample, turn)
            self._charge(response, from_cache)
        except AuthError as exc:
            self._request_stop(f"auth: {exc}")
            raise _Stop from None
        except UnavailableError as exc:
            self._agent_unavailable(str(exc))
            raise _Stop from None
        except AgentError as exc:
            requests = getattr(exc, "attempts", 1)
            failed = Attempt(status=Status.AGENT_ERROR, error=str(exc), requests=requests, started_at=started, **base)
            if self._hold(problem, failed, history):
                raise _Held from None
            return self._commit(failed, history)
        finally:
            self._release(reserved)
        code: str | None = None
        eval_s = 0.0
        if response.abstained:  # no candidate offered: nothing to judge, and no reply format to blame
            result = EvalResult(status=Status.SKIPPED, reason=f"{ABSTENTION_REASON}: {response.text}",
                                problem_id=problem.id, backend=self.settings.backend)
        else:
            code, refused = extract_candidate(response.text, problem.id, self.settings.backend)
            if refused is not None:
                result = refused
            else:
                result, eval_s = self._evaluate(problem, code)
        attempt = Attempt(
            status=result.status,
            reply=response.text,
            code=code,
            result=result,
            feedback=render_feedback(result),
            speedup=result.speedup if result.is_correct else None,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            cached_tokens=response.usage.cached_tokens,
            cost_usd=response.cost_usd,
            usage_estimated=response.usage.estimated,
            latency_s=response.latency_s,
            model=response.model,
            finish_reason=response.finish_reason,
            requests=response.attempts,
            eval_s=eval_s,
            from_cache=from_cache,
            started_at=started,
            **base,
        )
        return self._commit(attempt, history)

    def _ask(self, messages: list[Message], problem_id: str, sample: int, turn: int) -> tuple[AgentResponse, bool]:
        """The agent's response (from the response cache when enabled and present)."""
        key = request_key(self._agent_config, messages, sample) if self._cache is not None else None
        if key is not None and (hit := self._cache.get(key)) is not None:
            return hit, True
        t0 = time.perf_counter()
        try:
            response = self._agent.respond(messages, problem_id=problem_id, sample=sample, turn=turn)
        finally:
            with self._lock:
                self._agent_s += time.perf_counter() - t0
        with self._lock:
            self._reached = True
        self._record_held()
        if key is not None:
            self._cache.put(key, response)
        return response, False

    def _evaluate(self, problem: Problem, code: str) -> tuple[EvalResult, float]:
        """Evaluate (several trajectories' candidates are in flight at once); an evaluator exception becomes a
        recorded crash."""
        t0 = time.perf_counter()
        result = evaluate_safely(self._evaluator, problem, code, self.settings.backend)
        elapsed = time.perf_counter() - t0
        with self._lock:
            self._eval_s += elapsed
        return result, elapsed

    def _commit(self, attempt: Attempt, history: list[Attempt]) -> Attempt:
        """Fill in best-so-far, record durably, update the counters."""
        best = max([*history, attempt], key=lambda a: best_key(a.status, a.speedup))
        if best.status is Status.CORRECT:
            attempt.best_turn, attempt.best_status, attempt.best_speedup = best.turn, best.status, best.speedup
        attempt.finished_at = time.time()
        self._store.record(attempt)
        with self._lock:
            self._stats.add(attempt, this_session=True)
        self._display.finished(attempt, self._stats)
        return attempt

    # ------------------------------------------------------------------ budget
    def _charge(self, response: AgentResponse, from_cache: bool) -> None:
        """Add a fresh response's tokens and cost to the run's spending (cache hits are free)."""
        if from_cache:
            return
        with self._lock:
            self._tokens += response.usage.total_tokens
            self._cost += response.cost_usd or 0.0
        if response.cost_usd is None and self.settings.max_cost_usd is not None:
            self._request_stop(
                "budget: budget.max_cost_usd is set but the agent reports no cost (set prices with model=<preset> "
                "or agent.pricing={input: ..., output: ...})"
            )

    def _admit(self, messages: list[Message]) -> tuple[int, float]:
        """Reserve a request's worst case, or stop the run (`_Stop`) when the budget is spent or reserved."""
        s = self.settings
        tokens = sum(len(m.content) for m in messages) // CHARS_PER_TOKEN + self._output_reserve
        cost = 0.0 if self._pricing is None else self._pricing.cost(Usage(tokens - self._output_reserve,
                                                                          self._output_reserve))
        with self._lock:
            if not self._stop.is_set():
                if s.max_tokens is not None and self._tokens + self._reserved_tokens >= s.max_tokens:
                    self._stop_reason, self._budget = f"budget: max_tokens={s.max_tokens} reached", "tokens"
                    self._stop.set()
                elif s.max_cost_usd is not None and self._cost + self._reserved_cost >= s.max_cost_usd:
                    self._stop_reason, self._budget = f"budget: max_cost_usd={s.max_cost_usd:g} reached", "cost"
                    self._stop.set()
            if self._stop.is_set():
                raise _Stop
            self._reserved_tokens += tokens
            self._reserved_cost += cost
        return tokens, cost

    def _release(self, reserved: tuple[int, float]) -> None:
        with self._lock:
            self._reserved_tokens -= reserved[0]
            self._reserved_cost -= reserved[1]

    def _spent(self) -> str:
        """What the run has spent, for the budget's stop reason (once the requests in flight are in)."""
        estimated = " (some counted here: the provider sent no usage)" if self._stats.usage_estimated else ""
        if self._budget == "tokens":
            return f"; {self._tokens:,} tokens spent{estimated}"
        return f"; ${self._cost:.4f} spent{estimated}"

    def _hold(self, problem: Problem, failed: Attempt, history: list[Attempt]) -> bool:
        """Hold a refused attempt when no request of this session has been answered yet (True); stop the run once
        `PERSISTENT_REFUSALS` held refusals say the same."""
        with self._lock:
            if self._reached:
                return False
            self._held.append((problem, failed, list(history)))
            self._refusals.append(failed.error)
            same = self._refusals.count(failed.error)
        if same >= PERSISTENT_REFUSALS:
            self._request_stop(f"{REFUSED}: the provider refused the first {same} requests of this session the same "
                               f"way (nothing is recorded for them; fix it and resume): {failed.error}")
        return True

    def _stop_if_all_refused(self) -> None:
        """A run too small to reach `PERSISTENT_REFUSALS`, whose every request was refused the same way, naming the
        model asked for, and none answered, stops as refused too: a typo in the model name must not end as
        "finished" with nothing done (a refusal that names no model, such as a context too long, is this request's
        own: it is recorded)."""
        model = str(self._agent_config.get("model") or "")
        with self._lock:
            refusals, reached, finished = list(self._refusals), self._reached, self._stop_reason == "finished"
        if model and refusals and finished and not reached and len(set(refusals)) == 1 and model in refusals[0]:
            self._request_stop(f"{REFUSED}: the provider refused every request of this session ({len(refusals)}) "
                               f"the same way (nothing is recorded for them; fix it and resume): {refusals[0]}")

    def _record_held(self) -> None:
        """Record the held refusals as `agent_error` attempts (each ends its trajectory), unless the run stopped
        because of them."""
        with self._lock:
            held, self._held = self._held, []
            refused = self._stop_reason.startswith(f"{REFUSED}:")
        if refused:
            return
        for problem, failed, history in held:
            self._commit(failed, history)
            self._trajectory_done(problem, len(history) + 1)

    def _agent_unavailable(self, message: str) -> None:
        """Note an attempt left unfinished; stop the run when nothing of this session has reached the agent."""
        with self._lock:
            self._unreachable.append(message)
            reached, first = self._reached, len(self._unreachable) == 1
        if first:
            self._display.message(f"agent unavailable (the attempt is left for a resume): {message}")
        if not reached:
            self._request_stop(f"{UNREACHABLE}: the agent could not be reached: {message}")

    def _request_stop(self, reason: str) -> None:
        """Stop starting new requests; the first reason given is the one reported."""
        with self._lock:
            if not self._stop.is_set():
                self._stop_reason = reason
                self._stop.set()


def _record(a: Attempt) -> TurnRecord:
    return TurnRecord(turn=a.turn, reply=a.reply, code=a.code, feedback=a.feedback)


def _reap(futures: set[Future[None]]) -> list[str]:
    """Wait up to 0.2 s (signals stay responsive) for a trajectory to end; drop the ended ones from `futures` and
    return their errors."""
    done, _ = wait(futures, timeout=0.2, return_when=FIRST_COMPLETED)
    futures.difference_update(done)
    return _errors(done)


def _errors(futures: Iterable[Future[None]]) -> list[str]:
    """The exceptions of ended trajectories, one line each (a cancelled one never ran)."""
    return [f"{type(e).__name__}: {e}" for f in futures if not f.cancelled() and (e := f.exception()) is not None]


def _wait_all(futures: Iterable[Future[None]], timeout: float | None = None) -> int:
    """Wait for every future (at most `timeout` seconds), staying responsive to signals; how many are still running
    (cancelled ones, never started, do not count)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = {f for f in futures if not f.cancelled()}
    while pending and (deadline is None or time.monotonic() < deadline):
        done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
    return sum(f.running() for f in pending)
