"""The trusted parent's front: `Evaluator` takes candidates and returns verdicts.

It is thin on purpose. Static checks and the result cache are answered here; CUDA/C++
candidates are built ahead on the CPU cores (`eval.builds`); everything else is the check
pipeline (`eval.pipeline.checks`) run on a worker leased from the warm pool (`eval.process.pool`), which
spans every GPU in `eval.gpus`. `evaluate` is thread-safe, so callers may keep several
candidates in flight (the run loop does); `evaluate_many` does that for a batch. The parent
never imports candidate code.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import secrets
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch

from eval import problem_check, static_checks
from eval.pipeline import checks
from eval.steps import compile_baseline, context, staging
from eval.crossing import _stopwatch as stopwatch, protocol as p
from eval.backends import DEFAULT_BACKEND, NEEDS_GPU, check_backend  # issue 56: NEEDS_GPU
from eval.builds import Build, Builder, Claim, needs_build
from eval.cache import JsonCache, cache_key
from eval.steps.context import Context, RetryAlone, RetryEager, Verdict, trim
from eval.config import EvalConfig
from eval.process import _bytecode, _reaper as reaper
from eval.process.pool import WorkerPool
from eval._reference import traced_cost, use_small_sizes
from eval.result import EvalResult, EvaluatorClosed, Status, Timing
from eval.timing.roofline import Ceilings, cached_ceilings, probe, probe_and_cache
from eval.process.sandbox import WorkerDied, WorkerProcess, WorkerTimeout, check_identity, protect_parent
from eval.process._worker_env import visible_device_entry
from eval.process._watchdog import GIB, default_limit_bytes
from problems import Problem, ProblemError, estimate_memory, strict_precision

# How timings are taken; a cached result or baseline measured another way is not reused.
MEASUREMENT = "two-process-native-v1"
_CPU_WORKERS_MAX = 4
_GPU_WORKERS_DEFAULT = 4


@dataclass
class Job:
    """One candidate to evaluate."""

    problem: Problem
    source: str
    backend: str = DEFAULT_BACKEND

    def __post_init__(self) -> None:
        check_backend(self.backend)  # a label the evaluator would otherwise cache and report unchecked


def _versions() -> dict[str, str]:
    versions = {"torch": torch.__version__, "python": sys.version.split()[0]}
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        versions["triton"] = "absent"
    if torch.version.cuda:
        versions["cuda"] = torch.version.cuda
    return versions


def _gpu_indices(config: EvalConfig) -> list[int | None]:
    """The devices to evaluate on: [None] for the CPU, else GPU indices (all visible by default)."""
    if config.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("eval.device=cuda but no CUDA GPU is visible")
    if config.device == "cpu" or not torch.cuda.is_available():
        return [None]
    visible = torch.cuda.device_count()
    wanted = config.gpus if config.gpus is not None else list(range(visible))
    missing = [g for g in wanted if g >= visible]
    if missing:
        raise RuntimeError(f"eval.gpus names GPU(s) {missing}, but only {visible} are visible")
    return list(dict.fromkeys(wanted))


def _device_uuid(gpu_index: int | None) -> str:
    """This process's GPU `gpu_index`, by UUID (a worker must be on the same one); "" for the CPU."""
    if gpu_index is None:
        return ""
    return str(getattr(torch.cuda.get_device_properties(gpu_index), "uuid", ""))


def host_gpu_index(host_gpu_ids: Sequence[str], index: int | None) -> int | None:
    """The host's index of the visible GPU `index`: its entry in `host_gpu_ids` when that is a number, else `index`."""
    if index is not None and index < len(host_gpu_ids) and host_gpu_ids[index].isdigit():
        return int(host_gpu_ids[index])
    return index


# Verdicts a process's end decides are never cached: the end may be the host's doing (a stop signal sent to the
# whole process group, the out-of-memory killer, a busy machine), and a cached verdict outlives the evaluator. Nor is
# a broken problem's: its check is redone once per process (a problem that hung may have met a busy machine).
_NOT_CACHED = (Status.TIMEOUT, Status.CRASH, Status.PROBLEM_ERROR)


class Evaluator:
    """Evaluates candidates against problems. Use as a context manager; reuse across calls."""

    def __init__(self, config: EvalConfig | None = None, *, host_gpu_ids: Sequence[str] = (),
                 confined: bool = True, pipeline: Sequence[checks.Step] = checks.PIPELINE):
        """`host_gpu_ids`: the host's names of the GPUs this process sees, in order, where they differ from the
        visible indices (Ray renumbers an actor's GPUs from 0), so that a result names the host's GPU.
        `confined=False` starts evaluation workers with no namespace, mount or memory limit: only for measuring
        what confinement costs (`harness bench eval --part confinement`); every result says so
        (`filesystem_isolated`). `pipeline`: the checks, in order; another than `checks.PIPELINE` is a diagnostic
        (`harness bench eval --part steps` leaves steps out), so its verdicts are never cached."""
        self.config = config or EvalConfig()
        self._host_gpu_ids = list(host_gpu_ids)
        self._confined = confined
        self._pipeline = tuple(pipeline)
        protect_parent()
        strict_precision()
        reaper.sweep_stale()
        reaper.watch_this_process()  # this process's folders go with it, even on `kill -9`
        check_identity(self.config.allow_unconfined_workers)
        self.gpu_indices = _gpu_indices(self.config)
        use_cuda = self.gpu_indices != [None]
        self.device = torch.device(f"cuda:{self.gpu_indices[0]}") if use_cuda else torch.device("cpu")
        self.versions = _versions()
        self.device_name = torch.cuda.get_device_name(self.device) if use_cuda else "cpu (Triton interpreter)"
        cap = torch.cuda.get_device_capability(self.device) if use_cuda else (9, 0)  # compile-only checks target Hopper
        self._arch = f"{cap[0]}.{cap[1]}"
        cores = len(os.sched_getaffinity(0))  # the cores this process may use (taskset, a cpuset), not the host's
        per_device = self.config.workers_per_gpu or (
            _GPU_WORKERS_DEFAULT if use_cuda else max(1, min(_CPU_WORKERS_MAX, cores // 2)))
        gib = self.config.max_worker_memory_gib
        self._memory_limit = int(gib * GIB) if gib else default_limit_bytes(per_device * len(self.gpu_indices))
        root = self.config.cache_dir
        self._cache = JsonCache(root, "results") if root and self._pipeline == checks.PIPELINE else None
        self._baselines = JsonCache(root, "baselines") if root else None
        self._ceilings = _ceilings(root, self.device, self.device_name) if use_cuda else None
        # before any worker starts: they all read it (none where the installation has its own bytecode)
        first = self.gpu_indices[0]
        self._bytecode = _bytecode.workers_folder(None if first is None else visible_device_entry(first))
        self._builder = Builder(parallel=self.config.parallel_compiles or max(1, cores // 2), arch=self._arch,
                                gpu_available=use_cuda, timeout_s=self.config.import_timeout_s,
                                log_cap_bytes=self.config.log_cap_bytes, isolate_network=self.config.isolate_network,
                                extra_env=self.config.extra_env, versions=self.versions,
                                kept_bytes=int(self.config.kept_builds_gib * GIB), memory_limit_bytes=self._memory_limit,
                                bytecode=self._bytecode)
        if use_cuda:  # built here, where the project is writable; workers load them read-only
            from eval.crossing._native_build import prepare_native

            prepare_native(cap)
            stopwatch.library()  # the parent's own, for timed blocks (elsewhere built on first use)
        self._starting: set[WorkerProcess] = set()  # spawned, not yet answered Hello (`close` stops them)
        self._starting_lock = threading.Lock()
        self._closing = False
        self._pool = WorkerPool(self.gpu_indices, per_device, self._spawn)
        self.workers = self._pool.size
        self._baseline_lock = threading.Lock()
        self._profiler = self._make_profiler()  # profile (issue 57): None with eval.profile=off

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker and build, and remove every folder this evaluator made. Workers still starting are
        killed, not waited for (a start takes seconds of CPU that nothing would use)."""
        with self._starting_lock:
            self._closing = True
            starting = list(self._starting)
        for worker in starting:
            worker.abort()
        self._pool.close()
        self._builder.close()

    # -- public API --------------------------------------------------------------------------
    def wait_warm(self, timeout: float | None = None) -> bool:
        """Block until every worker of the pool has started (benchmarks start their clocks after it)."""
        return self._pool.wait_warm(timeout)

    def gate_usage(self) -> dict[str, dict[str, float]]:
        """How long each GPU's gate was held exclusively and shared so far (benchmarks take differences)."""
        return self._pool.gate_usage()

    def evaluate(self, problem: Problem, source: str, backend: str = DEFAULT_BACKEND) -> EvalResult:
        """Evaluate one candidate; never raises for candidate faults. Safe to call from several threads."""
        job = Job(problem, source, backend)
        return self._evaluate(job, static_checks.analyze(source), None)

    def evaluate_many(self, jobs: Iterable[Job], on_result: Callable[[int, EvalResult], None] | None = None
                      ) -> list[EvalResult]:
        """Evaluate a batch with the pool full: builds start at once, each job enters the pipeline when its build is done.

        `on_result(i, result)` is called (from one thread at a time) as each job finishes, in finishing order.
        """
        jobs = list(jobs)
        results: list[EvalResult | None] = [None] * len(jobs)
        done: queue.Queue[int] = queue.Queue()
        runners = ThreadPoolExecutor(max_workers=max(1, self.workers), thread_name_prefix="kh-eval")

        reports = [static_checks.analyze(job.source) for job in jobs]

        def run(i: int, build: Claim | None) -> None:
            try:
                results[i] = self._evaluate(jobs[i], reports[i], build)
            except Exception as exc:  # noqa: BLE001  a harness-side failure is recorded, the batch goes on
                results[i] = self._new_result(jobs[i])
                results[i].status, results[i].reason = Status.CRASH, f"the evaluator raised {type(exc).__name__}: {exc}"
                results[i].flags.append("evaluator_exception: the harness, not the candidate, failed here")
            finally:
                if build is not None:
                    build.release()
                done.put(i)

        def enter(i: int, build: Claim | None) -> None:
            runners.submit(run, i, build)

        policy = self.config.own_kernel_policy
        for i, job in enumerate(jobs):
            build = self._builder.claim(job.source) if needs_build(reports[i], job.backend, policy) else None
            if build is None:
                enter(i, None)
            else:
                build.future.add_done_callback(lambda _, i=i, build=build: enter(i, build))
        try:
            for _ in jobs:
                i = done.get()
                if on_result is not None and results[i] is not None:
                    on_result(i, results[i])
        finally:
            runners.shutdown(wait=True)
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise RuntimeError(f"evaluations {missing} ended without a result")
        return results  # type: ignore[return-value]

    def prebuild(self, problem: Problem, source: str, backend: str = DEFAULT_BACKEND) -> Future[Build] | None:
        """Start building a candidate that needs a build, unless it is refused before one or its verdict is cached;
        the build, or None. A caller that queues evaluations (`harness serve`, an `executor=ray` actor) calls this
        as it queues one, so the build runs on the CPU cores while the candidate waits, as `evaluate_many` starts
        every build at once; `evaluate` then joins that build (an identical source is built once)."""
        job = Job(problem, source, backend)
        if not needs_build(static_checks.analyze(source), backend, self.config.own_kernel_policy):
            return None
        if self._cache is not None and self._cache.get(self._result_key(job)) is not None:
            return None
        return self._builder.submit(source)

    def baseline(self, problem: Problem) -> dict[str, Any]:
        """Eager and torch.compile timings of a problem (cached per device and versions)."""
        key = cache_key(problem=problem.source_hash, device=self.device_name, versions=self.versions,
                        timing=dataclasses.asdict(self.config.timing_rule()), measure=MEASUREMENT)
        with self._baseline_lock:
            if self._baselines is not None and (hit := self._baselines.get(key)) is not None:
                return hit
            if self.device.type != "cuda":
                raise RuntimeError("baselines need a CUDA GPU")
            if fault := self._problem_fault(problem):
                raise ProblemError(fault.fault)
            value = {**compile_baseline.timings(self._pool, self.config, problem), "device": self.device_name,
                     "versions": self.versions}
            if self._baselines is not None:
                self._baselines.put(key, value)
            return value

    def cached(self, problem: Problem, source: str, backend: str = DEFAULT_BACKEND) -> EvalResult | None:
        """The verdict the result cache holds for this candidate, read without a worker (None: not cached), so a
        caller that queues evaluations (`harness serve`) can answer a repeat at once instead of queueing it."""
        return self._cached(self._result_key(Job(problem, source, backend)))

    def _cached(self, key: str) -> EvalResult | None:
        hit = self._cache.get(key) if self._cache is not None else None
        if hit is None:
            return None
        return EvalResult.from_dict({**hit, "cached": True, "node": hit.get("node") or socket.gethostname()})

    # -- one evaluation ----------------------------------------------------------------------
    def _evaluate(self, job: Job, report: static_checks.SourceReport, build: Claim | None) -> EvalResult:
        t0 = time.perf_counter()
        key = self._result_key(job)
        if (hit := self._cached(key)) is not None:
            return hit
        closed = f"the evaluator closed while {job.problem.id} was being evaluated; evaluate it again"
        try:
            result = self._judge(job, report, build)
        except Exception as exc:  # the closing took the worker or its channel away mid-exchange
            if self._closing:
                raise EvaluatorClosed(closed) from exc
            raise
        if result.status is Status.PENDING:
            raise RuntimeError("the check pipeline ended without a verdict")  # a harness bug, never a candidate's
        result.settle()
        if self.config.compile_baseline and result.is_correct:
            self.compile_speedup(job.problem, result)
        result.eval_seconds = time.perf_counter() - t0
        if self._closing:  # its worker may have been stopped under it: no verdict, and nothing cached
            raise EvaluatorClosed(closed)
        if self._cache is not None and result.status not in _NOT_CACHED:
            self._cache.put(key, result.to_dict())
        return result

    def _problem_fault(self, problem: Problem) -> problem_check.Outcome | None:
        """The problem's fault at the sizes it is evaluated at here (`eval.problem_check`, once per process), or None."""
        small = use_small_sizes(problem, self.config.problem_scale, self.device)
        outcome = problem_check.check(problem, small, self.config.import_timeout_s + self.config.call_timeout_s)
        return outcome if outcome.fault else None

    def _result_key(self, job: Job) -> str:
        """The result cache's key of a job's verdict."""
        return cache_key(problem=job.problem.source_hash, candidate=job.source, backend=job.backend,
                         config=self.config.cache_fields(), device=self.device_name, versions=self.versions,
                         measure=MEASUREMENT)

    def _new_result(self, job: Job) -> EvalResult:
        return EvalResult(problem_id=job.problem.id, backend=job.backend, device=self.device_name,
                          versions=dict(self.versions), preset=self.config.preset, node=socket.gethostname())

    def _judge(self, job: Job, report: static_checks.SourceReport, build: Claim | None) -> EvalResult:
        """The judged result (its last attempt's, when it was evaluated again); `build` is the caller's claim on the
        candidate's build, else one is taken here and released when the evaluation ends (the build folder is never
        removed while it is held)."""
        result = self._new_result(job)
        if _ended(result, lambda: self._refuse_or_skip(job, report)):
            return result
        own = None
        if build is None and needs_build(report, job.backend, self.config.own_kernel_policy):
            build = own = self._builder.claim(job.source)
        try:
            result = self._judge_built(job, report, build, result)
            if self._profiler is not None and result.is_correct:  # profile (issue 57): after the verdict, never in it
                self._profile(job, build, result)
        finally:
            if own is not None:
                own.release()
        return result

    def _refuse_or_skip(self, job: Job, report: static_checks.SourceReport) -> None:
        """A verdict, raised, for a candidate refused unbuilt, a faulty problem, or one too big for a CPU worker."""
        refused = static_checks.refusal(report, self.config.own_kernel_policy, job.backend)  # issue 56: backend
        if refused:
            raise Verdict(*refused)
        if fault := self._problem_fault(job.problem):  # before this process or a worker imports the problem
            raise Verdict(Status.PROBLEM_ERROR, fault.fault, fault.log)
        if self.device.type == "cpu":
            too_big = _too_big_for_a_worker(job.problem, self.config.problem_scale, self._memory_limit)
            if too_big:
                raise Verdict(Status.SKIPPED, too_big)

    def _judge_built(self, job: Job, report: static_checks.SourceReport, build: Claim | None,
                     result: EvalResult) -> EvalResult:
        """The result of the candidate's evaluation on a worker: `result`, or a retry's own result (each retry
        turns one thing off, so this ends), with the retries named in its flags."""
        waited = time.perf_counter()
        built = build.result() if build is not None else None
        result.phase_seconds["wait_for_build"] = round(time.perf_counter() - waited, 4)
        if _ended(result, lambda: self._refuse_unrunnable(job, report, built)):
            return result
        notes = [f"build: {built.note}"] if built is not None and built.note else []
        alone, graphs, retried = False, self.config.cuda_graphs == "auto", []
        while True:
            attempt = self._new_result(job) if retried else result
            attempt.flags.extend(notes + retried)
            attempt.phase_seconds.setdefault("wait_for_build", result.phase_seconds["wait_for_build"])
            try:
                _ended(attempt, lambda: self._run_on_worker(job, report, built, attempt, alone=alone, graphs=graphs))
            except RetryAlone as exc:
                alone = True
                retried.append(f"{exc.why}; evaluated again alone, in a new worker")
                continue
            except RetryEager as exc:
                graphs = False
                retried.append(f"cuda_graphs: {exc.note}; evaluated again in a new worker, both sides timed as "
                               "eager calls")
                continue
            return attempt

    def _refuse_unrunnable(self, job: Job, report: static_checks.SourceReport, built: Build | None) -> None:
        """A verdict, raised, for a failed build or a candidate this device cannot run."""
        if built is not None and not built.ok:
            raise Verdict(Status.COMPILE_ERROR, "building the candidate failed", built.error)
        if self.device.type == "cpu" and (report.cuda_kernels or report.uses_load_inline or job.backend == "cuda"):
            raise Verdict(Status.SKIPPED, (built.note if built else "") or "CUDA candidates cannot run without a GPU")
        if self.device.type == "cpu" and (report.gluon_kernels or job.backend in NEEDS_GPU):  # issue 56
            raise Verdict(Status.SKIPPED, "Gluon kernels cannot run without a GPU: Triton's interpreter does not run "
                                          "them (gluon.jit never takes TRITON_INTERPRET's path; docs/backends.md)")

    def _run_on_worker(self, job: Job, report: static_checks.SourceReport, built: Build | None, result: EvalResult,
                       alone: bool, graphs: bool) -> None:
        waited = time.perf_counter()
        lease = self._pool.acquire()
        result.phase_seconds["worker"] = round(time.perf_counter() - waited, 4)
        result.network_isolated = lease.worker.info.get("network_isolated")
        result.filesystem_isolated = lease.worker.info.get("filesystem_isolated")
        result.unprivileged = lease.worker.unprivileged
        result.ipc_isolated = lease.worker.ipc_isolated
        result.memory_accounting = lease.worker.memory_accounting
        result.process_limit = lease.worker.process_limit
        result.freeze = lease.worker.freezer.mechanism
        result.gpu_index = host_gpu_index(self._host_gpu_ids, lease.gpu_index)
        result.device = lease.worker.info.get("device_name") or result.device
        small = use_small_sizes(job.problem, self.config.problem_scale, lease.device)
        result.problem_scale = "small" if small else "full"
        ctx = Context(problem=job.problem, source=job.source, report=report, config=self.config, lease=lease,
                      result=result, small=small, build=built, ceilings=self._ceilings, alone=alone, graphs=graphs,
                      seat=lease.windows.join((job.problem.source_hash, small, graphs)) if self._shares_timing(
                          lease, alone) else None)
        lease.worker.cap_replies(context.reply_cap(self.config))  # until this problem's trials say more
        try:
            with lease.gate.hold("exclusive" if alone else "none"):
                if alone and lease.device.type == "cuda":
                    torch.cuda.empty_cache()  # what the attempt that ran out of memory left cached here
                checks.run_pipeline(ctx, self._pipeline)
        except RetryAlone:
            lease.worker.kill()  # its device memory is free before the retry starts, not later in the background
            raise
        except WorkerTimeout as exc:
            cap = lease.worker.process_limit_note(exc.output)
            if cap:  # a fork bomb that keeps forking at the cap: judged as the limit it hit, not as slow
                result.status, result.reason = Status.RUNTIME_ERROR, f"{cap}; then the call ran out of time: {exc.detail}"
            else:
                result.status, result.reason = Status.TIMEOUT, lease.worker.with_notes(f"timeout: {exc.detail}",
                                                                                        exc.output)
            result.stdout_tail = trim(exc.output)
        except WorkerDied as exc:
            result.status, result.reason = Status.CRASH, lease.worker.with_notes(f"crash: {exc.detail}", exc.output)
            result.stdout_tail = result.error = trim(exc.output)
        finally:
            if ctx.seat is not None:
                ctx.seat.leave()  # a window no longer waits for an evaluation that ended before timing
            if ctx.session is not None:
                ctx.session.close()
            self._pool.release(lease)
            if staging.holds_large_tensors(ctx):  # the parent's cached blocks would crowd the next evaluations
                torch.cuda.empty_cache()

    def _shares_timing(self, lease: Any, alone: bool) -> bool:
        """Whether an evaluation takes a seat in a timing window (`eval.process._windows`): under the adaptive method
        with `eval.share_reference_timing` on, where timings are taken, unless it holds its GPU alone throughout."""
        timed = lease.device.type == "cuda" or self.config.cpu_timing
        return (self.config.share_reference_timing and self.config.timing_method == "adaptive" and timed
                and not alone)

    # -- baselines ---------------------------------------------------------------------------
    def compile_speedup(self, problem: Problem, result: EvalResult) -> None:
        """Add the speedup over torch.compile to a correct, timed result (`eval.compile_baseline`)."""
        if result.candidate_timing is None or result.reference_timing is None:
            return
        if result.timing_mode == "cuda_graph":  # the baseline is timed eagerly: its ratio to graph replays means nothing
            result.flags.append("no speedup over torch.compile: the baselines are timed as eager calls, this result "
                                "as CUDA-graph replays")
            return
        base = self.baseline(problem)
        result.compile_timing = Timing.from_dict(base["compiled"])
        eager = base["eager"]["median_ms"]
        result.speedup_compile = result.compile_timing.median_ms / result.candidate_timing.median_ms * (
            result.reference_timing.median_ms / eager)

    # -- workers -----------------------------------------------------------------------------
    def _spawn(self, gpu_index: int | None, host_pids: bool = False) -> WorkerProcess:
        # the same arch list as the builds made ahead, so loading a built extension finds it up to date
        env = {"TORCH_CUDA_ARCH_LIST": self._arch, **self.config.extra_env}
        worker = WorkerProcess(device="cuda" if gpu_index is not None else "cpu", gpu_index=gpu_index,
                               log_cap_bytes=self.config.log_cap_bytes,
                               isolate_network=self.config.isolate_network and self._confined,
                               isolate_filesystem=self._confined, extra_env=env,
                               max_reply_bytes=context.reply_cap(self.config),
                               memory_limit_bytes=self._memory_limit if self._confined else None,
                               max_processes=self.config.max_worker_processes, bytecode=self._bytecode,
                               host_pids=host_pids)  # observed: the reference process's
        # keys the captures of its timed outputs; sent before any candidate code exists in the worker
        worker.capture_key = secrets.randbits(63) | 1
        with self._starting_lock:
            self._starting.add(worker)
            if self._closing:
                worker.abort()
        try:
            reply, _ = worker.request(p.Hello(device="cuda:0" if gpu_index is not None else "cpu",
                                              capture_key=worker.capture_key), timeout=300)
        except (WorkerDied, WorkerTimeout) as exc:
            worker.kill()
            raise RuntimeError(f"the evaluation worker failed to start: {exc}\n{getattr(exc, 'output', '')}") from None
        finally:
            with self._starting_lock:
                self._starting.discard(worker)
        if not reply.ok:
            worker.kill()
            raise RuntimeError(f"the evaluation worker failed to start: {reply.error}")
        worker.info = reply.info
        worker.pin_own_folders()  # before any candidate code: where the parent reads what it builds at run time
        expected = _device_uuid(gpu_index)
        if expected and reply.info.get("device_uuid") != expected:
            worker.kill()
            raise RuntimeError(f"the evaluation worker for GPU {gpu_index} ({expected}) runs on another GPU "
                               f"({reply.info.get('device_uuid') or 'unknown'}); its timings would not be this GPU's")
        return worker


    # -- profiles (issue 57) ---------------------------------------------------------------------
    def _make_profiler(self) -> Any:
        """profile (issue 57): the profiler of correct candidates (`eval.profiling`), or None with eval.profile=off."""
        if self.config.profile == "off":
            return None
        from eval.profiling.profiler import Profiler

        return Profiler(self.config.profile, self.config.profile_ncu, self.config.profile_timeout_s, self._ceilings,
                        precision=self.config.precision, copy_state=self.config.copy_reference_state)

    def _profile(self, job: Job, build: Claim | None, result: EvalResult) -> None:
        """profile (issue 57): a correct result's profile, stored in it; whatever happens, its verdict stays as is."""
        from functools import partial

        from eval.profiling.profiler import attach
        from eval.profile_record import Profile

        def make() -> Profile:
            host = result.gpu_index  # the host's index: this process's own is its place in host_gpu_ids, if given
            gpu = self._host_gpu_ids.index(str(host)) if str(host) in self._host_gpu_ids else host
            built = build.result() if build is not None else None
            return self._profiler.evaluation(job.problem, job.source, built.extensions_dir if built else None, result,
                                             self._pool.gate(gpu), partial(self._run_profiling, gpu))

        attach(result, make)

    def _run_profiling(self, gpu_index: int | None, command: list[str], env: dict[str, str], timeout_s: float
                       ) -> tuple[int | None, str]:
        """profile (issue 57): one profiling process, `command` (ncu's) wrapping `eval.worker.profile_target` in a
        sandbox like a worker's (the same settings), on GPU `gpu_index` (None: the CPU, for the tests' fake ncu);
        its exit code (None: timed out) and output."""
        from eval.profiling.profiler import OUTPUT_CAP, ncu_home, wait_for

        worker = WorkerProcess(device="cpu" if gpu_index is None else "cuda", gpu_index=gpu_index,
                               log_cap_bytes=OUTPUT_CAP,
                               isolate_network=self.config.isolate_network and self._confined,
                               isolate_filesystem=self._confined,
                               extra_env={"TORCH_CUDA_ARCH_LIST": self._arch, **self.config.extra_env, **env},
                               memory_limit_bytes=self._memory_limit if self._confined else None,
                               max_processes=self.config.max_worker_processes, bytecode=self._bytecode,
                               wrapper=command, module="eval.worker.profile_target",
                               extra_binds=[ncu_home(command[0])])
        with self._starting_lock:  # `close` kills it as it kills workers still starting
            self._starting.add(worker)
            if self._closing:
                worker.abort()
        try:
            return wait_for(worker, timeout_s)
        finally:
            with self._starting_lock:
                self._starting.discard(worker)


def _ceilings(cache_dir: str | None, device: torch.device, device_name: str) -> Ceilings:
    """The device's measured ceilings: from the cache, else probed now (about a second), so that every GPU result
    has a floor and a SOL fraction, KernelBench's problems and single files included."""
    cached = cached_ceilings(cache_dir, device_name) if cache_dir else None
    if cached is not None:
        return cached
    return probe_and_cache(cache_dir, device) if cache_dir else probe(device)


def _ended(result: EvalResult, step: Callable[[], None]) -> bool:
    """Run `step`; a verdict it raises (or a reference that failed in the parent, where no candidate code runs) is
    recorded on `result`. True when the evaluation ended so."""
    try:
        step()
    except Verdict as verdict:
        result.status, result.reason, result.error = verdict.status, verdict.reason, trim(verdict.error)
    except ProblemError as exc:
        result.status, result.reason = Status.PROBLEM_ERROR, problem_check.broken(result.problem_id, str(exc))
        result.error = trim(traceback.format_exc())
    else:
        return False
    return True


def _too_big_for_a_worker(problem: Problem, scale: str, limit_bytes: int) -> str:
    """Why a problem cannot be evaluated on this CPU at the sizes it would run at (or ""): a KernelBench problem has
    no reduced sizes, and its full-size inputs can exceed a worker's memory (a 6.4 GB softmax input on a laptop)."""
    small = use_small_sizes(problem, scale, torch.device("cpu"))
    cost = traced_cost(problem, small)
    if cost is None:  # a forward that cannot be traced without data: the worker's memory watchdog still holds
        return ""
    need = estimate_memory(cost)
    if need <= limit_bytes:
        return ""
    return (f"at {'its reduced' if small else 'full'} size this problem needs about {need / 1e9:.1f} GB (inputs, "
            f"parameters, outputs and the reference's intermediates), over a worker's memory limit of "
            f"{limit_bytes / 1e9:.1f} GB (eval.max_worker_memory_gib); evaluate it on a GPU, or give it reduced sizes "
            "for CPU runs (META['small'], see problems/problem.py)")
