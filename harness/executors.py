"""Where evaluations run: `executor=local` (this machine's GPUs) or `executor=ray` (a Ray cluster).

Both give the run loop the same thread-safe `evaluate(problem, source, backend) -> EvalResult`.

Trust: with `ray`, each evaluator actor is the trusted parent on its node. It owns one
`eval.Evaluator` (its warm pool of sandboxed workers, unchanged), draws the secret seeds,
computes the reference and decides the verdict there; the driver (`harness run`: agents, loop,
run store) only sends a problem and a candidate's source and gets a plain result dict back.
Nothing else crosses the network: no API keys (the driver's environment is never forwarded; no
`runtime_env` is set, and a local Ray instance is started from an environment scrubbed of
secret-looking names, since Ray's processes inherit the driver's), no pickled candidate objects.

Builds: a CUDA/C++ candidate is built on an actor first (`EvaluatorActor.build`, in its own concurrency
group, on the node's CPU cores) and only then takes one of that actor's evaluation slots, so no slot (no
warm worker, no GPU) waits for nvcc. The evaluation goes to the actor that built it, whose evaluator
joins the finished build: its folder, its verdict and the kernels read from its files stay on that node
and in that trusted parent. `prebuild` starts that build as a caller queues a candidate (`harness serve`).

Faults: an evaluation whose actor died (killed, node lost) is sent again to another actor, at
most `max_retries` times, and a replacement actor is started. `evaluate` returns exactly once
per call, so the loop records each attempt once. Identical candidates (same key as the
evaluator's cache, less the device) are evaluated once: later requests wait for the first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import re
import socket
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from eval import DEFAULT_BACKEND, EvalConfig, EvalResult, Evaluator, Status, analyze, cache_key, needs_build
from harness.executor_settings import EXECUTORS, ExecutorConfig, ExecutorError, LocalExecutorConfig
from problems import Problem

_CPU_ACTORS_MAX = 4
_MEMO_MAX = 4096  # finished results the driver keeps for dedupe (a few KB each)
# build calls an actor serves at once, beside its evaluations; each waits on the actor's builder, which runs
# `eval.parallel_compiles` of them at a time (a call is a thread waiting, not a build)
_BUILD_CALLS_PER_ACTOR = 256


def make_evaluator(executor: dict[str, Any], eval_config: EvalConfig,
                   log: Callable[[str], None] | None = None) -> Any:
    """The evaluator the run loop uses, for the `executor` config; raises `ExecutorError` for bad input."""
    kind = executor.get("kind", LocalExecutorConfig.kind)
    if kind not in EXECUTORS:
        raise ExecutorError(f"executor.kind must be one of {', '.join(EXECUTORS)}, not {kind!r}")
    try:
        cfg = EXECUTORS[kind](**executor)
    except TypeError as exc:
        raise ExecutorError(f"executor: {exc}") from None
    if isinstance(cfg, LocalExecutorConfig):
        return Evaluator(eval_config)
    return RayEvaluator(eval_config, cfg, log=log)


# -- the actor: the trusted parent on its node -------------------------------------------------
def actor_resources(total: dict[str, float], device: str, cpus_per_actor: int | None) -> tuple[dict[str, float], int]:
    """What each evaluator actor asks Ray for, and the default number of actors, from a cluster's totals.

    A GPU actor takes one GPU and `cpus_per_actor` CPUs (default: the cluster's CPUs over its GPUs):
    Ray sets the actor's OMP_NUM_THREADS to its CPUs, and the actor is the parent side of every
    evaluation. On a cluster without GPUs, each actor takes one CPU and there are half as many as CPUs (1 to 4).
    """
    gpus, cpus = int(total.get("GPU", 0)), int(total.get("CPU", 0))
    if device == "cpu" or gpus == 0:
        if device == "cuda":
            raise ExecutorError("eval.device=cuda but the Ray cluster has no GPU")
        return {"num_cpus": 1, "num_gpus": 0}, max(1, min(_CPU_ACTORS_MAX, cpus // 2))
    return {"num_cpus": int(cpus_per_actor or max(1, cpus // gpus)), "num_gpus": 1}, gpus


class EvaluatorActor:
    """One `Evaluator` on one GPU of the cluster (or the CPU). Methods run on several threads at once."""

    def __init__(self, eval_config: dict[str, Any]):
        import ray

        self.node = socket.gethostname()
        self.node_id = ray.get_runtime_context().get_node_id()
        self.gpu_ids = [str(g) for g in ray.get_gpu_ids()]  # physical GPU indices on this node
        self.evaluator = Evaluator(EvalConfig(**eval_config), host_gpu_ids=self.gpu_ids)

    def info(self) -> dict[str, Any]:
        """Where this actor runs and what it holds (also the readiness probe)."""
        return {"node": self.node, "node_id": self.node_id, "pid": os.getpid(), "gpu_ids": self.gpu_ids,
                "workers": self.evaluator.workers, "device": self.evaluator.device_name}

    def evaluate(self, problem: Problem, source: str, backend: str) -> dict[str, Any]:
        """The result as a plain dict (it names this node and the GPU's index on the node)."""
        return self.evaluator.evaluate(problem, source, backend).to_dict()

    def build(self, problem: Problem, source: str, backend: str) -> None:
        """Build a candidate ahead (`Evaluator.prebuild`) and return once the build is done; `evaluate` joins it."""
        build = self.evaluator.prebuild(problem, source, backend)
        if build is not None:
            build.result()

    def baseline(self, problem: Problem) -> dict[str, Any]:
        return self.evaluator.baseline(problem)

    def wait_warm(self, timeout: float) -> bool:
        """Whether every worker of this actor's pool started within `timeout` seconds."""
        return self.evaluator.wait_warm(timeout)

    def environment_names(self) -> list[str]:
        """The names (never values) of this actor's environment variables, to audit that no key arrived."""
        return sorted(os.environ)

    def close(self) -> None:
        self.evaluator.close()


# -- the driver's side -------------------------------------------------------------------------
@dataclass
class _Slot:
    """One live actor and the evaluations the driver has sent it."""

    name: str
    handle: Any
    info: dict[str, Any]
    capacity: int
    in_flight: int = 0
    building: int = 0  # builds sent to it that have not ended; they hold none of its `capacity`
    alive: bool = True


@contextlib.contextmanager
def _secrets_hidden() -> Iterator[None]:
    """Hide secret-looking variables while Ray starts its processes here (they inherit os.environ).

    Ray's own settings (`RAY_*`, such as its cluster token) stay: Ray's processes need them anyway.
    """
    from eval import is_secret_name

    hidden = {k: os.environ.pop(k) for k in [k for k in os.environ if is_secret_name(k) and not k.startswith("RAY_")]}
    try:
        yield
    finally:
        os.environ.update(hidden)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError('executor=ray needs the ray package: pip install -e ".[ray]"') from None
    return ray


class RayEvaluator:
    """The run loop's evaluator over Ray actors: thread-safe, bounded in flight, retried when an actor dies."""

    def __init__(self, eval_config: EvalConfig, config: ExecutorConfig, log: Callable[[str], None] | None = None):
        self.config = config
        self.eval_config = eval_config
        self._log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        self._ray = ray = _import_ray()
        if eval_config.gpus is not None:
            raise ExecutorError("eval.gpus picks GPUs of this machine; with executor=ray each actor uses the GPU "
                                "Ray assigns it (set executor.num_actors instead)")
        if config.address and config.address.startswith("ray://"):
            try:
                import grpc  # noqa: F401
            except ImportError:
                raise ExecutorError('executor.address=ray://... needs Ray Client: pip install "ray[client]"') from None
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            try:
                with _secrets_hidden() if config.address is None else contextlib.nullcontext():
                    # "local": a new instance even when `ray start` left one (or a stale address) on this machine
                    ray.init(address=config.address or "local", namespace=config.namespace, logging_level="ERROR",
                             log_to_driver=False, include_dashboard=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ExecutorError(f"executor.address={config.address}: cannot connect to Ray: "
                                    f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        self._cond = threading.Condition()
        self._slots: list[_Slot] = []
        self._starting = 0
        self._closing = False
        self._names = itertools.count()
        self._run_tag = f"{socket.gethostname()}-{os.getpid()}-{int(time.time())}"
        self._problem_refs: dict[str, Any] = {}
        self._pending: dict[str, Future[dict[str, Any]]] = {}
        self._memo: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._ahead: OrderedDict[str, tuple[_Slot, Any]] = OrderedDict()  # builds started by `prebuild`, by source
        self.stats = {"evaluated": 0, "retried": 0, "actors_lost": 0, "deduplicated": 0, "built_ahead": 0}
        self._actor_config = self._config_for_actors()
        try:
            self._start_actors()
        except BaseException:
            self.close()
            raise

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "RayEvaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop every actor (each closes its workers); shut Ray down when this evaluator started it."""
        ray = self._ray
        with self._cond:
            self._closing = True
            slots, self._slots = self._slots, []
            self._cond.notify_all()
        closing = [s.handle.close.remote() for s in slots]
        with contextlib.suppress(Exception):
            ray.wait(closing, num_returns=len(closing), timeout=30)
        for s in slots:
            with contextlib.suppress(Exception):
                ray.kill(s.handle, no_restart=True)
        if self._owns_ray:
            with contextlib.suppress(Exception):
                ray.shutdown()

    @property
    def actors(self) -> list[dict[str, Any]]:
        """Name and `info()` of every live actor (for messages and tests)."""
        with self._cond:
            return [{"name": s.name, **s.info} for s in self._slots]

    @property
    def workers(self) -> int:
        with self._cond:
            return sum(s.info["workers"] for s in self._slots)

    # -- public API --------------------------------------------------------------------------
    def evaluate(self, problem: Problem, source: str, backend: str = DEFAULT_BACKEND) -> EvalResult:
        """Evaluate one candidate on some actor; an identical candidate already seen is answered from it."""
        if self.eval_config.cache_dir is None:  # no cache asked for: every request is evaluated
            return EvalResult.from_dict(self._run(problem, source, backend))
        key = self._result_key(problem, source, backend)
        with self._cond:
            if (hit := self._memo.get(key)) is not None:
                self.stats["deduplicated"] += 1
                return self._copy(hit)
            waiting = self._pending.get(key)
            if waiting is None:
                mine: Future[dict[str, Any]] = Future()
                self._pending[key] = mine
        if waiting is not None:
            with self._cond:
                self.stats["deduplicated"] += 1
            return self._copy(waiting.result())
        try:
            d = self._run(problem, source, backend)
        except BaseException as exc:
            with self._cond:
                del self._pending[key]
            mine.set_exception(exc)
            raise
        with self._cond:
            del self._pending[key]
            # what the evaluator's cache keeps too
            if Status(d["status"]) not in (Status.TIMEOUT, Status.CRASH, Status.PROBLEM_ERROR):
                self._memo[key] = d
                while len(self._memo) > _MEMO_MAX:
                    self._memo.popitem(last=False)
        mine.set_result(d)
        return EvalResult.from_dict(d)

    def cached(self, problem: Problem, source: str, backend: str = DEFAULT_BACKEND) -> EvalResult | None:
        """The verdict this driver already holds for an identical candidate (None: none), with no actor asked, as
        `Evaluator.cached` reads the result cache."""
        if self.eval_config.cache_dir is None:
            return None
        with self._cond:
            hit = self._memo.get(self._result_key(problem, source, backend))
            if hit is not None:
                self.stats["deduplicated"] += 1
        return None if hit is None else self._copy(hit)

    def prebuild(self, problem: Problem, source: str, backend: str = DEFAULT_BACKEND) -> None:
        """Start building a candidate that needs a build on an actor now, as a caller queues it (`harness serve`);
        its evaluation then waits for that build, and runs on that actor (as `Evaluator.prebuild` locally)."""
        if not self._builds(source, backend):
            return
        with self._cond:
            known = self.eval_config.cache_dir is not None and self._result_key(problem, source, backend) in self._memo
            if known or _source_key(source) in self._ahead:
                return
        try:
            started = self._start_build(problem, source, backend)
        except RuntimeError:  # closed, or no actor left: the evaluation, when it runs, says so
            return
        with self._cond:
            self._ahead[_source_key(source)] = started
            while len(self._ahead) > _MEMO_MAX:  # builds nobody evaluated (a request withdrawn): forgotten here
                self._ahead.popitem(last=False)

    def evaluate_many(self, jobs: Iterable[Any], on_result: Callable[[int, EvalResult], None] | None = None
                      ) -> list[EvalResult]:
        """Evaluate a batch (`eval.Job`s) with every actor's capacity in use; `on_result` as each finishes."""
        jobs = list(jobs)
        lock = threading.Lock()
        width = max(1, sum(s.capacity for s in self._slots))

        def one(i: int) -> EvalResult:
            result = self.evaluate(jobs[i].problem, jobs[i].source, jobs[i].backend)
            if on_result is not None:
                with lock:
                    on_result(i, result)
            return result

        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="kh-ray") as pool:
            return list(pool.map(one, range(len(jobs))))

    def wait_warm(self, timeout: float | None = None) -> bool:
        """Block until every actor's workers have started (benchmarks start their clocks after it)."""
        with self._cond:
            handles = [s.handle for s in self._slots]
        return all(self._ray.get([h.wait_warm.remote(timeout if timeout is not None else 600.0) for h in handles]))

    def baseline(self, problem: Problem) -> dict[str, Any]:
        """Eager and torch.compile timings of a problem, measured on one actor."""
        slot = self._acquire()
        try:
            return self._ray.get(slot.handle.baseline.remote(self._problem_ref(problem)))
        finally:
            self._release(slot)

    # -- one evaluation, retried on another actor if its actor dies ---------------------------
    def _run(self, problem: Problem, source: str, backend: str) -> dict[str, Any]:
        """Build first where the candidate needs it (no evaluation slot held), then evaluate on the actor that built
        it; an actor lost on the way sends both to another."""
        ray = self._ray
        lost: list[str] = []
        builds = self._builds(source, backend)
        with self._cond:
            ahead = self._ahead.pop(_source_key(source), None) if builds else None
        while True:
            slot = None
            try:
                built_on = None
                if builds:
                    slot, ref = ahead or self._start_build(problem, source, backend)
                    ahead = None
                    ray.get(ref)
                    built_on = slot
                slot = self._acquire(on=built_on)
                try:
                    d = ray.get(slot.handle.evaluate.remote(self._problem_ref(problem), source, backend))
                finally:
                    self._release(slot)
                with self._cond:
                    self.stats["evaluated"] += 1
                    self.stats["retried"] += bool(lost)
                return d
            except ray.exceptions.RayActorError as exc:
                assert slot is not None  # only the actor calls above raise it
                lost.append(f"{slot.name} on {slot.info.get('node', '?')}")
                self._lose(slot, exc)
                if len(lost) > self.config.max_retries:
                    return self._actors_died(problem, backend, lost)
                self._log(f"retrying {problem.id} on another actor ({len(lost)} of {self.config.max_retries})")
            except ray.exceptions.RayTaskError as exc:  # the evaluator itself raised there: a harness fault
                raise RuntimeError(f"evaluator actor {slot.name if slot else '?'} raised: {exc.cause!r}") from None

    def _builds(self, source: str, backend: str) -> bool:
        """Whether the candidate is built before it is loaded (read from its source here; nothing of it runs)."""
        return needs_build(analyze(source), backend, self.eval_config.own_kernel_policy)

    def _start_build(self, problem: Problem, source: str, backend: str) -> tuple[_Slot, Any]:
        """Send a build to the actor with the least work for its size, beside its evaluation slots: the actor and
        the build's reference (its value is None once the build is done)."""
        with self._cond:
            while True:
                if self._closing:
                    raise RuntimeError("the ray evaluator is closed")
                if self._slots:
                    slot = min(self._slots, key=lambda s: (s.in_flight + s.building) / s.capacity)
                    slot.building += 1
                    self.stats["built_ahead"] += 1
                    break
                if not self._starting:
                    raise RuntimeError("no evaluator actor is left and none could be started")
                self._cond.wait(timeout=5)
        ref = slot.handle.build.options(concurrency_group="build").remote(self._problem_ref(problem), source, backend)
        ref.future().add_done_callback(lambda _: self._build_ended(slot))
        return slot, ref

    def _build_ended(self, slot: _Slot) -> None:
        with self._cond:
            slot.building -= 1
            self._cond.notify_all()

    def _result_key(self, problem: Problem, source: str, backend: str) -> str:
        """The driver's key of a verdict: the evaluator's cache key, less the device (an actor adds its own)."""
        return cache_key(problem=problem.source_hash, candidate=source, backend=backend,
                         config=self.eval_config.cache_fields())

    def _actors_died(self, problem: Problem, backend: str, lost: list[str]) -> dict[str, Any]:
        result = EvalResult(status=Status.CRASH, problem_id=problem.id, backend=backend,
                            reason=f"the evaluator actor died {len(lost)} times while evaluating this candidate "
                                   f"({'; '.join(lost)})",
                            flags=["evaluator_actor_died: the candidate or the cluster ended the actor; not retried "
                                   "further"])
        return result.to_dict()

    def _problem_ref(self, problem: Problem) -> Any:
        """Each problem goes into Ray's object store once; evaluations carry a reference to it."""
        with self._cond:
            ref = self._problem_refs.get(problem.source_hash)
            if ref is None:
                ref = self._problem_refs[problem.source_hash] = self._ray.put(problem)
            return ref

    @staticmethod
    def _copy(d: dict[str, Any]) -> EvalResult:
        return EvalResult.from_dict({**d, "cached": True})

    # -- actors: start, lease, lose, replace --------------------------------------------------
    def _config_for_actors(self) -> dict[str, Any]:
        """The evaluator settings each actor builds its `Evaluator` from (its cache relative to the driver's folder)."""
        d = dataclasses.asdict(self.eval_config)
        if d["cache_dir"] is not None and self.config.address is None:
            d["cache_dir"] = str(Path(d["cache_dir"]).resolve())  # same machine: share executor=local's cache
        return d

    def _resources(self) -> tuple[dict[str, float], int]:
        """Per-actor resources and the default number of actors, from the cluster's totals."""
        return actor_resources(self._ray.cluster_resources(), self.eval_config.device, self.config.cpus_per_actor)

    def _start_actors(self) -> None:
        per_actor, default = self._resources()
        n = int(self.config.num_actors or default)
        total = self._ray.cluster_resources()
        for res, key in (("num_gpus", "GPU"), ("num_cpus", "CPU")):
            if per_actor[res] and n * per_actor[res] > total.get(key, 0):
                raise ExecutorError(f"executor.num_actors={n} needs {n * per_actor[res]:g} {key}(s), but the Ray "
                                    f"cluster has {total.get(key, 0):g}")
        self._per_actor = per_actor
        started = [self._new_actor() for _ in range(n)]
        refs = [handle.info.remote() for _, handle in started]
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=self.config.actor_start_timeout_s)
        if len(ready) < len(refs):
            raise ExecutorError(f"only {len(ready)} of {n} evaluator actors started within "
                                f"{self.config.actor_start_timeout_s:g} s (executor.actor_start_timeout_s)")
        for (name, handle), ref in zip(started, refs):
            try:
                info = self._ray.get(ref)
            except self._ray.exceptions.RayError as exc:
                raise ExecutorError(f"evaluator actor {name} failed to start: {_summary(exc)}") from None
            self._add(name, handle, info)

    def _new_actor(self) -> tuple[str, Any]:
        name = f"kh-eval-{self._run_tag}-{next(self._names)}"
        capacity = self.config.max_in_flight_per_actor or 16  # Ray's thread pool; the driver bounds it further
        remote = self._ray.remote(concurrency_groups={"build": _BUILD_CALLS_PER_ACTOR})(EvaluatorActor).options(
            name=name, namespace=self.config.namespace, max_restarts=0, max_task_retries=0,
            max_concurrency=capacity, **self._per_actor)
        return name, remote.remote(self._actor_config)

    def _add(self, name: str, handle: Any, info: dict[str, Any]) -> None:
        capacity = self.config.max_in_flight_per_actor or max(1, int(info["workers"]))
        with self._cond:
            if self._closing:
                with contextlib.suppress(Exception):
                    self._ray.kill(handle, no_restart=True)
                return
            self._slots.append(_Slot(name=name, handle=handle, info=info, capacity=capacity))
            self._cond.notify_all()

    def _acquire(self, on: _Slot | None = None) -> _Slot:
        """An evaluation slot on `on` (the actor that built the candidate) while it lives, else on the least-loaded
        live actor with room; waits (back-pressure) while none has room."""
        with self._cond:
            while True:
                if self._closing:
                    raise RuntimeError("the ray evaluator is closed")
                free = [s for s in ([on] if on is not None and on.alive else self._slots) if s.in_flight < s.capacity]
                if free:
                    slot = min(free, key=lambda s: s.in_flight / s.capacity)
                    slot.in_flight += 1
                    return slot
                if not self._slots and not self._starting:
                    raise RuntimeError("no evaluator actor is left and none could be started")
                self._cond.wait(timeout=5)

    def _release(self, slot: _Slot) -> None:
        with self._cond:
            slot.in_flight -= 1
            self._cond.notify_all()

    def _lose(self, slot: _Slot, exc: BaseException) -> None:
        """Take a dead actor out of service (once) and start a replacement in the background."""
        with self._cond:
            if not slot.alive:
                return
            slot.alive = False
            self._slots.remove(slot)
            self.stats["actors_lost"] += 1
            self._cond.notify_all()  # an evaluation waiting for this actor's slot goes elsewhere
            if self._closing:
                return
            self._starting += 1
        with contextlib.suppress(Exception):
            self._ray.kill(slot.handle, no_restart=True)
        self._log(f"evaluator actor {slot.name} on {slot.info.get('node', '?')} died ({_summary(exc)}); "
                  f"its evaluations go to other actors; starting a replacement")
        threading.Thread(target=self._replace, name="kh-ray-replace", daemon=True).start()

    def _replace(self) -> None:
        try:
            name, handle = self._new_actor()
            info = self._ray.get(handle.info.remote(), timeout=self.config.actor_start_timeout_s)
            self._add(name, handle, info)
        except Exception as exc:  # noqa: BLE001  the run goes on with the actors it has
            self._log(f"a replacement evaluator actor did not start: {_summary(exc)}")
        finally:
            with self._cond:
                self._starting -= 1
                self._cond.notify_all()


def _source_key(source: str) -> str:
    return cache_key(candidate=source)


def _summary(exc: BaseException) -> str:
    """The error's first line and, for a remote traceback, its last (Ray puts the actor's own exception there)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # Ray colours the actor's name
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
