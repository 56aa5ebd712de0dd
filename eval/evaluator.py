"""The trusted parent: runs candidates in sandboxed workers and decides every verdict.

One long-lived worker per GPU evaluates candidates one after another; it is replaced after
any failure (a fresh one is started in the background at once). CUDA/C++ candidates are
built in parallel on the CPU cores by short-lived sandboxed workers while the GPU worker
checks and times the previous candidate. The parent never imports candidate code.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from eval import correctness, static_checks
from eval.cache import JsonCache, cache_key
from eval.config import EvalConfig
from eval.integrity import strict_precision
from eval.reference import Reference, derive_seed, encode_args, use_small_sizes
from eval.result import EvalResult, KernelShare, Status, Timing
from eval.roofline import IMPLAUSIBLE_BELOW_FLOOR, cached_ceilings
from eval.sandbox import (UNPRIVILEGED_UID, WorkerDied, WorkerProcess, WorkerTimeout, can_drop_privileges,
                          protect_parent)
from eval.tracing import kernel_base_name
from problems.problem import Problem

_ERROR_CHARS = 3000
# back-to-back calls: unexplained wall time per call beyond the reference's, as a share of the candidate's median
_HIDDEN_WORK_SHARE = 0.5
_HIDDEN_WORK_FLOOR_MS = 0.02
_BACK_TO_BACK = 20


@dataclass
class Job:
    """One candidate to evaluate."""

    problem: Problem
    source: str
    backend: str = "triton"


class _Verdict(Exception):
    """Raised inside an evaluation to end it with a status."""

    def __init__(self, status: Status, reason: str, error: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error


def _trim(text: str, n: int = _ERROR_CHARS) -> str:
    """Keep the start (what failed first) and the end (the final error) of a long log."""
    if len(text) <= n:
        return text
    head = n // 3
    return f"{text[:head]}\n... [{len(text) - n} characters trimmed] ...\n{text[-(n - head):]}"


def _lap(result: EvalResult, name: str, since: float) -> float:
    now = time.perf_counter()
    result.phase_seconds[name] = round(now - since, 4)
    return now


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


class Evaluator:
    """Evaluates candidates against problems. Use as a context manager; reuse across calls."""

    def __init__(self, config: EvalConfig | None = None, gpu_index: int = 0):
        self.config = config or EvalConfig()
        protect_parent()
        strict_precision()
        want = self.config.device
        if want not in ("auto", "cuda", "cpu"):
            raise ValueError(f"eval.device must be auto, cuda or cpu, not {want!r}")
        if self.config.problem_scale not in ("auto", "full", "small"):
            raise ValueError(f"eval.problem_scale must be auto, full or small, not {self.config.problem_scale!r}")
        if self.config.own_kernel_policy not in ("reject", "report"):
            raise ValueError(f"eval.own_kernel_policy must be reject or report, not {self.config.own_kernel_policy!r}")
        if want == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("eval.device=cuda but no CUDA GPU is visible")
        use_cuda = want == "cuda" or (want == "auto" and torch.cuda.is_available())
        self.gpu_index = gpu_index
        self.device = torch.device(f"cuda:{gpu_index}") if use_cuda else torch.device("cpu")
        self.versions = _versions()
        self.device_name = torch.cuda.get_device_name(self.device) if use_cuda else "cpu (Triton interpreter)"
        if use_cuda:
            cap = torch.cuda.get_device_capability(self.device)
            self._arch = f"{cap[0]}.{cap[1]}"
        else:
            self._arch = "9.0"  # compile-only checks target Hopper
        root = Path(self.config.cache_dir) if self.config.cache_dir else Path(os.getcwd()) / ".eval_cache"
        self._cache = JsonCache(root, "results") if self.config.cache_dir else None
        self._baselines = JsonCache(root, "baselines") if self.config.cache_dir else None
        # CUDA/C++ builds of this session; readable by the unprivileged worker whatever the cache's location
        self._ext_root = Path(tempfile.mkdtemp(prefix="kh-extensions-"))
        self._ext_root.chmod(0o755)
        self._ceilings = cached_ceilings(root, self.device_name) if use_cuda and self.config.cache_dir else None
        cores = self.config.parallel_compiles or os.cpu_count() or 2
        self._compile_pool = ThreadPoolExecutor(max_workers=cores, thread_name_prefix="kh-compile")
        self._compile_jobs = cores
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kh-spawn")
        self._spare: Future[WorkerProcess] | None = None
        self._worker: WorkerProcess | None = None
        self._used_worker = False

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        if self._spare is not None:
            try:
                self._spare.result(timeout=120).close()
            except Exception:  # noqa: BLE001  a spare that failed to start has nothing to close
                pass
            self._spare = None
        self._spawner.shutdown(wait=True)
        self._compile_pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self._ext_root, ignore_errors=True)

    # -- public API --------------------------------------------------------------------------
    def evaluate(self, problem: Problem, source: str, backend: str = "triton") -> EvalResult:
        """Evaluate one candidate source against one problem; never raises for candidate faults."""
        return self.evaluate_many([Job(problem, source, backend)])[0]

    def evaluate_many(self, jobs: Iterable[Job], on_result: Callable[[int, EvalResult], None] | None = None
                      ) -> list[EvalResult]:
        """Evaluate jobs in order, building CUDA/C++ candidates ahead on the CPU cores."""
        jobs = list(jobs)
        reports = [static_checks.analyze(job.source) for job in jobs]
        prepared: list[Future[dict[str, Any]] | None] = []
        for job, report in zip(jobs, reports):
            needs_build = report.status is None and (report.uses_load_inline or job.backend == "cuda")
            prepared.append(self._compile_pool.submit(self._prepare, job) if needs_build else None)
        results = []
        for i, job in enumerate(jobs):
            result = self._evaluate_one(job, reports[i], prepared[i])
            results.append(result)
            if on_result is not None:
                on_result(i, result)
        return results

    def baseline(self, problem: Problem) -> dict[str, Any]:
        """Eager and torch.compile timings of a problem (cached per device and versions)."""
        key = cache_key(problem=problem.source_hash, device=self.device_name, versions=self.versions,
                        timing=self._timing_fields())
        if self._baselines is not None and (hit := self._baselines.get(key)) is not None:
            return hit
        if self.device.type != "cuda":
            raise RuntimeError("baselines need a CUDA GPU")
        secret = secrets.randbits(62)
        ref = Reference(problem, derive_seed(secret, "weights"), self.device)
        worker = self._acquire_worker()
        try:
            load, _ = worker.request({"cmd": "load", "problem_source": problem.source,
                                      "candidate_source": None, "weight_seed": derive_seed(secret, "weights")},
                                     timeout=self.config.import_timeout_s)
            if not load.get("ok"):
                raise RuntimeError(f"baseline load failed: {load.get('error')}")
            pools = [ref.inputs(derive_seed(secret, f"pool{k}")) for k in range(self.config.timed_input_sets)]
            spec, _ = encode_args(pools[0])
            tensors = [t for p in pools for t in encode_args(p)[1]]
            reply, _ = worker.request({"cmd": "time_compiled", "args": spec, "n_inputs": len(tensors) // len(pools),
                                       "pool_size": len(pools), **self._timing_fields()}, tensors,
                                      timeout=self.config.timing_timeout_s + 600)
            if not reply.get("ok"):
                raise RuntimeError(f"baseline timing failed: {_trim(reply.get('error', ''))}")
            worker.request({"cmd": "unload"}, timeout=60)
        except (WorkerDied, WorkerTimeout):
            self._discard_worker()
            raise
        value = {"eager": reply["eager"], "compiled": reply["compiled"], "device": self.device_name, "versions": self.versions}
        if self._baselines is not None:
            self._baselines.put(key, value)
        return value

    # -- one evaluation ----------------------------------------------------------------------
    def _evaluate_one(self, job: Job, report: static_checks.SourceReport,
                      prepared: Future[dict[str, Any]] | None) -> EvalResult:
        t0 = time.perf_counter()
        result = EvalResult(status=Status.CORRECT, problem_id=job.problem.id, backend=job.backend,
                            device=self.device_name, versions=dict(self.versions))
        key = cache_key(problem=job.problem.source_hash, candidate=job.source, backend=job.backend,
                        config=self.config.cache_fields(), device=self.device_name, versions=self.versions)
        if self._cache is not None and (hit := self._cache.get(key)) is not None:
            cached = EvalResult.from_dict(hit)
            cached.cached = True
            if prepared is not None:
                prepared.cancel()
            return cached
        self._used_worker = False
        try:
            if report.status is not None:
                raise _Verdict(report.status, report.reason)
            if not report.kernels and self.config.own_kernel_policy == "reject":
                raise _Verdict(Status.REJECTED, "the candidate defines no kernel of its own (no @triton.jit function and "
                                                "no CUDA __global__ function): PyTorch-only solutions are not accepted")
            waited = time.perf_counter()
            prep = prepared.result() if prepared is not None else None
            _lap(result, "wait_for_build", waited)
            if prep is not None and not prep.get("ok"):
                raise _Verdict(Status.COMPILE_ERROR, "building the candidate failed", prep.get("error", ""))
            if self.device.type == "cpu" and (report.cuda_kernels or report.uses_load_inline or job.backend == "cuda"):
                raise _Verdict(Status.SKIPPED, prep.get("reason", "CUDA candidates cannot run without a GPU") if prep else
                               "CUDA candidates cannot run without a GPU")
            self._run_checks(job, report, result, prep)
        except _Verdict as verdict:
            result.status, result.reason, result.error = verdict.status, verdict.reason, _trim(verdict.error)
        except WorkerTimeout as exc:
            result.status, result.reason = Status.TIMEOUT, f"timeout: {exc.detail}"
            result.stdout_tail = _trim(exc.output)
            self._discard_worker()
        except WorkerDied as exc:
            result.status, result.reason = Status.CRASH, f"crash: {exc.detail}"
            result.stdout_tail = _trim(exc.output)
            result.error = _trim(exc.output)
            self._discard_worker()
        finally:
            if self._used_worker:
                self._release_worker(result.status)
        result.eval_seconds = time.perf_counter() - t0
        if self._cache is not None and result.status is not Status.TIMEOUT:
            self._cache.put(key, result.to_dict())
        return result

    def _run_checks(self, job: Job, report: static_checks.SourceReport, result: EvalResult,
                    prep: dict[str, Any] | None) -> None:
        cfg = self.config
        secret = secrets.randbits(62)
        weight_seed = derive_seed(secret, "weights")
        small = use_small_sizes(job.problem, cfg.problem_scale, self.device)
        result.problem_scale = "small" if small else "full"
        ref = Reference(job.problem, weight_seed, self.device, small)
        atol, rtol = cfg.tolerance(job.problem.dtype, job.problem.atol, job.problem.rtol)
        phase = time.perf_counter()
        worker = self._acquire_worker()
        phase = _lap(result, "worker", phase)
        result.network_isolated = worker.info.get("network_isolated")
        result.unprivileged = worker.unprivileged
        if worker.info.get("device_name"):
            result.device = worker.info["device_name"]
        load, _ = worker.request({"cmd": "load", "problem_source": job.problem.source, "candidate_source": job.source,
                                  "weight_seed": weight_seed,
                                  "size_overrides": job.problem.meta["small"] if small else {},
                                  "extensions_dir": prep.get("extensions_dir") if prep else None},
                         timeout=cfg.import_timeout_s)
        if not load.get("ok"):
            stage = load.get("stage")
            status = {"import": Status.COMPILE_ERROR, "format": Status.FORMAT_ERROR, "integrity": Status.REJECTED,
                      "construct": Status.RUNTIME_ERROR}.get(stage, Status.RUNTIME_ERROR)
            reason = {"import": "importing the candidate failed", "construct": "constructing ModelNew failed",
                      "integrity": f"integrity: {load.get('error', '')}"}.get(stage, load.get("error", "load failed"))
            raise _Verdict(status, _trim(reason, 600), load.get("error", ""))
        phase = _lap(result, "load", phase)
        self._correctness_trials(worker, ref, result, atol, rtol)
        phase = _lap(result, "correctness", phase)
        self._own_kernels(worker, ref, report, result, secret)
        phase = _lap(result, "kernels", phase)
        if self.device.type == "cuda":
            self._hidden_work(worker, ref, secret)
            phase = _lap(result, "hidden_work", phase)
            self._time(worker, job, ref, result, secret, atol, rtol)
            _lap(result, "timing", phase)
        notes = [] if result.timing_meaningful else ["CPU interpreter: timings not meaningful"]
        if small:
            notes.append("checked at the problem's reduced sizes")
        result.status, result.reason = Status.CORRECT, "correct" + (f" ({'; '.join(notes)})" if notes else "")

    def _correctness_trials(self, worker: WorkerProcess, ref: Reference, result: EvalResult,
                            atol: float, rtol: float) -> None:
        secret = secrets.randbits(62)
        plan: list[tuple[str, int | None]] = [(f"trial{t}", None) for t in range(max(2, self.config.trials))]
        plan += [(f"extra{j}", j) for j in range(ref.extra_count())]
        for trial, (label, extra) in enumerate(plan):
            inputs = ref.inputs(derive_seed(secret, label), extra)
            expected = ref.outputs(inputs)
            spec, tensors = encode_args(inputs)
            reply, outputs = worker.request({"cmd": "run", "args": spec, "poison": True}, tensors,
                                            timeout=self.config.call_timeout_s)
            result.trials = trial + 1
            if not reply.get("ok"):
                self._fail_from_reply(reply)
            mismatch = correctness.compare(expected, outputs, atol, rtol, trial=trial)
            if mismatch is not None:
                shape_note = f" on hidden input shapes #{extra}" if extra is not None else ""
                result.mismatch = mismatch
                raise _Verdict(Status.INCORRECT, f"output {mismatch.output}: {mismatch.reason} (trial {trial}{shape_note})")
            if reply.get("mutated_inputs"):
                raise _Verdict(Status.INCORRECT, f"the candidate modified input(s) {reply['mutated_inputs']} in place; "
                                                 "the reference leaves its inputs unchanged")

    def _fail_from_reply(self, reply: dict[str, Any]) -> None:
        stage, error = reply.get("stage"), reply.get("error", "")
        if reply.get("cuda_error"):
            self._discard_worker()
        if stage == "integrity":
            raise _Verdict(Status.REJECTED, f"integrity: {_trim(error, 600)}")
        if stage == "output":
            raise _Verdict(Status.INCORRECT, _trim(error, 600))
        last = error.strip().splitlines()[-1] if error.strip() else "forward failed"
        raise _Verdict(Status.RUNTIME_ERROR, f"forward raised: {_trim(last, 400)}", error)

    def _own_kernels(self, worker: WorkerProcess, ref: Reference, report: static_checks.SourceReport,
                     result: EvalResult, secret: int) -> None:
        spec, tensors = encode_args(ref.inputs(derive_seed(secret, "profile")))
        reply, _ = worker.request({"cmd": "kernels", "args": spec}, tensors, timeout=self.config.call_timeout_s)
        if not reply.get("ok"):
            self._fail_from_reply(reply)
        own_names = set(reply.get("triton_own", [])) | set(report.cuda_kernels)
        profile = [(str(n), float(ms)) for n, ms in reply.get("profile", [])]
        launched = set(reply.get("triton_own", []))
        share = None
        if profile:
            total = sum(ms for _, ms in profile)
            own_ms = sum(ms for n, ms in profile if kernel_base_name(n) in own_names)
            launched |= {kernel_base_name(n) for n, _ in profile if kernel_base_name(n) in own_names}
            share = own_ms / total if total > 0 else None
        result.kernels = KernelShare(own_kernels_launched=sorted(launched), own_kernels_defined=report.kernels,
                                     own_time_fraction=share, top_kernels=profile[:8])
        if not launched and self.config.own_kernel_policy == "reject":
            raise _Verdict(Status.REJECTED, "none of the candidate's own kernels ran during forward (defined: "
                                            f"{', '.join(report.kernels)}); the work was done by PyTorch or a fallback path")

    def _hidden_work(self, worker: WorkerProcess, ref: Reference, secret: int) -> None:
        spec, cand = encode_args(ref.inputs(derive_seed(secret, "hidden-c")))
        _, base = encode_args(ref.inputs(derive_seed(secret, "hidden-r")))
        reply, _ = worker.request({"cmd": "hidden_work", "args": spec, "n_inputs": len(cand), "reps": _BACK_TO_BACK},
                                  cand + base,
                                  timeout=self.config.timing_timeout_s)
        if not reply.get("ok"):
            self._fail_from_reply(reply)
        if reply.get("violations"):
            raise _Verdict(Status.REJECTED, "integrity: " + "; ".join(reply["violations"]))
        if reply.get("stream_mismatches"):
            raise _Verdict(Status.REJECTED, "integrity: the output changed after a device-wide synchronisation, so work "
                                            "was still running outside the current stream when forward returned")
        c, r = reply["candidate"], reply["reference"]
        per_call = c["event_ms"] / _BACK_TO_BACK
        unexplained = c["excess_ms_per_call"] - max(r["excess_ms_per_call"], 0.0)
        if unexplained > max(_HIDDEN_WORK_FLOOR_MS, _HIDDEN_WORK_SHARE * per_call):
            raise _Verdict(Status.REJECTED, f"integrity: back-to-back calls took {c['wall_ms']:.3f} ms of wall time but "
                                            f"their CUDA events only {c['event_ms']:.3f} ms: work runs outside the timed stream")

    def _timing_fields(self) -> dict[str, Any]:
        c = self.config
        return {"min_reps": c.min_reps, "max_reps": c.max_reps, "target_rel_stderr": c.target_rel_stderr,
                "budget_s": c.time_budget_s, "warmup_ms": c.warmup_ms}

    def _time(self, worker: WorkerProcess, job: Job, ref: Reference, result: EvalResult, secret: int,
              atol: float, rtol: float) -> None:
        pool = max(1, self.config.timed_input_sets)
        ref_sets = [ref.inputs(derive_seed(secret, f"time-r{k}")) for k in range(pool)]
        cand_sets = [ref.inputs(derive_seed(secret, f"time-c{k}")) for k in range(pool)]
        spec, first = encode_args(ref_sets[0])
        tensors = [t for s in ref_sets + cand_sets for t in encode_args(s)[1]]
        reply, outputs = worker.request({"cmd": "time", "args": spec, "n_inputs": len(first), "pool_size": pool,
                                         **self._timing_fields()}, tensors, timeout=self.config.timing_timeout_s)
        if not reply.get("ok"):
            self._fail_from_reply(reply)
        if reply.get("violations"):
            raise _Verdict(Status.REJECTED, "integrity: " + "; ".join(reply["violations"]))
        per_set = len(outputs) // pool if pool else 0
        for k in range(pool):
            expected = ref.outputs(cand_sets[k])
            mismatch = correctness.compare(expected, outputs[k * per_set:(k + 1) * per_set], atol, rtol)
            if mismatch is not None:
                result.mismatch = mismatch
                raise _Verdict(Status.INCORRECT, f"an output of a timed run is wrong: output {mismatch.output}: "
                                                 f"{mismatch.reason}")
        if reply.get("inconsistent_timed_outputs"):
            raise _Verdict(Status.REJECTED, f"integrity: {reply['inconsistent_timed_outputs']} timed runs returned "
                                            "different outputs for the same inputs (stale, cached or skipped work)")
        result.reference_timing = Timing.from_dict(reply["reference"])
        result.candidate_timing = Timing.from_dict(reply["candidate"])
        result.timing_meaningful = True
        result.speedup = result.reference_timing.median_ms / result.candidate_timing.median_ms
        self._speed_of_light(job.problem, result)
        if self.config.compile_baseline:
            base = self._baseline_in_fresh_worker(job.problem)
            result.compile_timing = Timing.from_dict(base["compiled"])
            eager = base["eager"]["median_ms"]
            result.speedup_compile = result.compile_timing.median_ms / result.candidate_timing.median_ms * (
                result.reference_timing.median_ms / eager)

    def _speed_of_light(self, problem: Problem, result: EvalResult) -> None:
        """SOL fraction against the probed ceilings; flag times under the roofline floor."""
        if self._ceilings is None or result.candidate_timing is None:
            return
        floor = self._ceilings.floor_s(problem.flops, problem.bytes_moved, problem.dtype)
        if floor is None:
            return
        measured = result.candidate_timing.median_ms / 1000.0
        result.sol_fraction = floor / measured
        if measured < IMPLAUSIBLE_BELOW_FLOOR * floor:
            result.flags.append(f"implausible: {measured * 1e6:.1f} us beats the roofline floor of {floor * 1e6:.1f} us "
                                "(FLOPs / peak, bytes / bandwidth); audit this result")

    def _baseline_in_fresh_worker(self, problem: Problem) -> dict[str, Any]:
        """`baseline` for use inside an evaluation: keeps the current worker, times in a fresh one."""
        saved, self._worker = self._worker, None
        try:
            return self.baseline(problem)
        finally:
            if self._worker is not None:
                self._worker.close()
            self._worker = saved

    # -- CUDA/C++ builds on the CPU cores ------------------------------------------------------
    def _prepare(self, job: Job) -> dict[str, Any]:
        """Build a CUDA/C++ candidate in a throwaway sandbox (compile-only without a GPU)."""
        ext_dir = self._ext_root / cache_key(candidate=job.source, versions=self.versions, arch=self._arch)[:24]
        ext_dir.mkdir(parents=True, exist_ok=True)
        if can_drop_privileges():
            os.chown(ext_dir, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        compile_only = self.device.type == "cpu"
        if compile_only and shutil.which("nvcc") is None:
            return {"ok": True, "reason": "CUDA candidates cannot run without a GPU, and nvcc is not installed, "
                                          "so not even a compile check was possible"}
        env = {"TORCH_CUDA_ARCH_LIST": self._arch, "MAX_JOBS": "2", "TORCH_EXTENSIONS_DIR": str(ext_dir)}
        env.update(self.config.extra_env)
        worker = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=self.config.log_cap_bytes,
                               isolate_network=self.config.isolate_network, extra_env=env)
        try:
            reply, _ = worker.request({"cmd": "prepare", "candidate_source": job.source, "compile_only": compile_only},
                                      timeout=self.config.import_timeout_s)
        except WorkerTimeout as exc:
            return {"ok": False, "error": f"building took longer than {self.config.import_timeout_s:.0f} s\n{exc.output}"}
        except WorkerDied as exc:
            return {"ok": False, "error": f"the build crashed: {exc.detail}\n{exc.output}"}
        finally:
            worker.close()
        reply["extensions_dir"] = str(ext_dir)
        if compile_only and reply.get("ok"):
            reply["reason"] = "compiled with nvcc (compile-only check): CUDA candidates cannot run without a GPU"
        return reply

    # -- workers -----------------------------------------------------------------------------
    def _spawn(self) -> WorkerProcess:
        # the same arch list as the builds made ahead, so loading a built extension finds it up to date
        env = {"TORCH_CUDA_ARCH_LIST": self._arch, **self.config.extra_env}
        worker = WorkerProcess(device=self.device.type, gpu_index=self.gpu_index if self.device.type == "cuda" else None,
                               log_cap_bytes=self.config.log_cap_bytes, isolate_network=self.config.isolate_network,
                               extra_env=env)
        try:
            reply, _ = worker.request({"cmd": "hello", "device": "cuda:0" if self.device.type == "cuda" else "cpu"},
                                      timeout=300)
        except (WorkerDied, WorkerTimeout) as exc:
            worker.kill()
            raise RuntimeError(f"the evaluation worker failed to start: {exc}\n{getattr(exc, 'output', '')}") from None
        worker.info = reply.get("info", {})
        return worker

    def _acquire_worker(self) -> WorkerProcess:
        self._used_worker = True
        if self._worker is not None and self._worker.alive():
            return self._worker
        if self._worker is not None:
            self._worker.kill()
        if self._spare is None:
            self._spare = self._spawner.submit(self._spawn)
        spare, self._spare = self._spare, None
        self._worker = spare.result()
        return self._worker

    def _discard_worker(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None
        if self._spare is None:
            self._spare = self._spawner.submit(self._spawn)

    def _release_worker(self, status: Status) -> None:
        """Keep the worker after a clean evaluation; replace it after anything else."""
        if self._worker is None:
            return
        if status is Status.CORRECT and self._worker.alive():
            try:
                reply, _ = self._worker.request({"cmd": "unload"}, timeout=60)
                if reply.get("ok"):
                    return
            except (WorkerDied, WorkerTimeout):
                pass
        self._discard_worker()

