"""The parent's side of a profile: Nsight Compute run in the sandbox on the candidate, and on its reference.

Why ncu and not CUPTI (`cupti-python`): ncu is installed where the GPUs are (no package to carry), replays each kernel
until it has every counter asked for (CUPTI's range profiler needs that replay logic written and kept per version),
and its CSV is a stable, documented text. Its cost is a process of its own per profile, started after the verdict.

One profile is two short processes, each a sandboxed worker started by ncu (`WorkerProcess` with ncu as `wrapper`:
the same mount, PID, IPC and network namespaces, uid, memory and process limits; its loopback up, which ncu's front
end talks to its target over, and ncu's installation bound read-only): the reference's, in a process that never sees
candidate code (once per problem and size, then cached for the evaluator's life), and the candidate's. Each loads
its subject with the worker's own loader, calls forward to compile and warm up, then once under the profiler
(`eval.worker.profile_target`). The parent reads what ncu printed through the capped pipe, in a bounded time, and
parses it (`eval.profiling.ncu`). The GPU is held exclusively meanwhile (DRAM counters are device-wide, so another
process's traffic would count), never during a timing: the verdict is given before the profile starts.

Nothing here can change a verdict: `attach` catches every failure into the profile's note, and a forged profile (the
candidate writes to the same pipe) is only a wrong diagnostic. A machine without ncu, without a GPU or without access
to the counters gets a profile whose note says so.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from eval.profiling import ncu
from eval.profile_record import Profile, SideProfile
from eval.result import EvalResult
from eval.crossing.protocol import PROFILE_REQUEST_ENV

OUTPUT_CAP = 1 << 20  # bytes of a profiling process's output kept (its first and last): ncu's table comes last
MAX_REQUEST_BYTES = 120_000  # the request travels in the environment, whose strings Linux caps at 128 KiB
WARMUP_CALLS = 2  # forward calls before the profiled one: Triton's JIT and autotuning run in the first


@dataclass(frozen=True)
class Subject:
    """What one profiling process loads: the problem (its public source for a candidate), the candidate's source or
    None (the reference), and how the evaluation loaded it."""

    problem_source: str
    problem_label: str
    candidate_source: str | None = None
    size_overrides: dict[str, Any] = field(default_factory=dict)
    extensions_dir: str | None = None
    precision: str = "strict"
    copy_state: bool = True

    def request(self) -> str:
        """The request `eval.worker.profile_target` reads, as JSON."""
        load = {"subject": "candidate" if self.candidate_source is not None else "reference",
                "problem_source": self.problem_source, "problem_label": self.problem_label,
                "candidate_source": self.candidate_source, "weight_seed": secrets.randbits(62),
                "size_overrides": self.size_overrides, "extensions_dir": self.extensions_dir,
                "precision": self.precision, "copy_state": self.copy_state}
        return json.dumps({"load": load, "input_seed": secrets.randbits(62), "warmup_calls": WARMUP_CALLS})


LEFT_OUT = {"tensor_ops": "the tensor-core operation metrics (tensor-core FLOPs are not counted)",
            "stalls": "the stall-reason metrics"}
# (ncu's command, environment entries, time limit) -> (exit code, None when killed at the limit; output): one sandboxed
# profiling process on the evaluation's GPU
Launch = Callable[[list[str], dict[str, str], float], tuple[int | None, str]]


def find_ncu(command: str) -> tuple[str | None, str]:
    """ncu's absolute path and version line, or None and why it cannot be used."""
    path = shutil.which(command)
    if path is None:
        return None, f"Nsight Compute ({command}) was not found on PATH (eval.profile_ncu names it)"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{path} --version failed: {exc}"
    version = next((line.strip() for line in out.stdout.splitlines() if "Version" in line), "").strip()
    return (path, version or "ncu") if out.returncode == 0 else (None, f"{path} --version exited {out.returncode}")


class Profiler:
    """Profiles correct candidates and their references on one evaluator's GPUs (thread-safe)."""

    def __init__(self, level: str, ncu_command: str, timeout_s: float, ceilings: Any = None,
                 precision: str = "strict", copy_state: bool = True) -> None:
        """`ceilings`: the device's measured `eval.timing.roofline.Ceilings`, for the ridge (None: no roofline);
        `precision`, `copy_state`: the evaluator's rules, which the profiled subjects are loaded under."""
        self.level = level
        self.timeout_s = timeout_s
        self._ceilings = ceilings
        self._rules = (precision, copy_state)
        self._ncu_command = ncu_command
        self._ncu: tuple[str | None, str] | None = None
        self._dropped: set[str] = set()  # optional metric groups this ncu refused (asked for no more)
        self._references: dict[tuple[str, bool], SideProfile] = {}
        self._lock = threading.Lock()

    def ncu(self) -> tuple[str | None, str]:
        """ncu's path and version, found once."""
        with self._lock:
            if self._ncu is None:
                self._ncu = find_ncu(self._ncu_command)
            return self._ncu

    def evaluation(self, problem: Any, source: str, extensions_dir: str | None, result: EvalResult, gate: Any,
                   launch: Launch) -> Profile:
        """A correct evaluation's profile: its candidate as it was loaded (the problem's public source, the same sizes
        and rules, its build), and its reference; `gate`: its GPU's `GpuGate`, held exclusively while the processes
        run; `launch`: runs one sandboxed process on that GPU."""
        from problems import public_source

        if result.gpu_index is None:
            return Profile(level=self.level, note="profiles need a CUDA GPU (the Triton interpreter has no hardware "
                                                  "counters)")
        small = result.problem_scale == "small"
        sizes = dict(problem.meta["small"]) if small else {}
        label = problem.path or f"<{problem.id}>"
        rules = {"precision": self._rules[0], "copy_state": self._rules[1]}
        candidate = Subject(public_source(problem.source), label, source, sizes, extensions_dir, **rules)
        reference = Subject(problem.source, label, None, sizes, **rules)
        own = set(result.kernels.own_kernels_launched) if result.kernels is not None else set()
        return self.profile(candidate, reference, own, problem.dtype, (problem.source_hash, small), gate, launch)

    def profile(self, candidate: Subject, reference: Subject, own: set[str], dtype: str,
                reference_key: tuple[str, bool], gate: Any, launch: Launch) -> Profile:
        """The candidate's profile and its reference's (cached by `reference_key`); `own`: the base names of the
        candidate's own kernels."""
        t0 = time.perf_counter()
        profile = Profile(level=self.level)
        if self._ceilings is not None:
            profile.peak_bytes_per_s = self._ceilings.copy_bytes_per_s
            peaks = self._ceilings.matmul_flops_per_s
            profile.peak_flops_per_s = peaks.get(dtype) or peaks.get("float32")
        path, version = self.ncu()
        if path is None:
            profile.note = version
            return profile
        profile.tool = version
        with gate.hold("exclusive"):
            with self._lock:
                cached = self._references.get(reference_key)
            if cached is None:
                cached = self._side(path, "reference", reference, lambda name: False, launch)
                if not cached.note:
                    with self._lock:
                        self._references[reference_key] = cached
            profile.reference = cached
            profile.candidate = self._side(path, "candidate", candidate, lambda name: _is_own(name, own), launch)
        notes = [n for n in (profile.candidate.note, profile.reference.note) if n]
        notes += [f"this ncu lacks {LEFT_OUT[g]}: left out" for g in sorted(self._dropped)]
        if notes:
            profile.note = "; ".join(dict.fromkeys(notes))
        profile.seconds = round(time.perf_counter() - t0, 3)
        return profile

    def _side(self, path: str, side: str, subject: Subject, is_own: Callable[[str], bool],
              launch: Launch) -> SideProfile:
        """One profiling process (a second without the optional metrics this ncu refused), parsed."""
        request = subject.request()
        if len(request.encode()) > MAX_REQUEST_BYTES:
            return SideProfile(side, note=f"the sources are too large to hand a profiling process ({len(request)} "
                                          f"characters, over {MAX_REQUEST_BYTES})")
        for _ in range(2):
            dropped = set(self._dropped)
            code, output = launch(ncu.command(path, self.level, dropped), {PROFILE_REQUEST_ENV: request}, self.timeout_s)
            again = ncu.retry_without(output, self.level, dropped)
            if again is None:
                break
            with self._lock:
                self._dropped |= again
        return read_side(side, code, output, is_own, self.timeout_s)


def read_side(side: str, code: int | None, output: str, is_own: Callable[[str], bool], timeout_s: float) -> SideProfile:
    """A side's profile from its process's exit code (None: killed at the time limit) and output."""
    try:
        launches = ncu.parse_raw_csv(output)
    except ValueError:
        launches = []
    note = ""
    if code is None:
        note = f"the profiling process ran out of its {timeout_s:.0f} s (eval.profile_timeout_s) and was killed"
    elif not launches:
        loaded = next((line.split("kh-profile:", 1)[1].strip() for line in output.splitlines()
                       if "kh-profile:" in line and "failed" in line), "")
        last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "")
        note = (ncu.failure_note(output) or (f"the profiling process {loaded}" if loaded else "")
                or f"ncu printed no profile (exit code {code}; its output ended: {last[-200:] or 'nothing'})")
    elif len(launches) >= ncu.MAX_LAUNCHES:
        note = f"only the first {ncu.MAX_LAUNCHES} kernel launches of the call were profiled"
    return SideProfile(side, kernels=ncu.kernels(launches, is_own), note=note)


def _is_own(profiled_name: str, own: set[str]) -> bool:
    """A profiled kernel is the candidate's own as the verdict decided (`kernel_evidence.own_kernels`): by its base name,
    never a library's."""
    from eval.steps.kernel_evidence import is_library_kernel, kernel_base_name

    return kernel_base_name(profiled_name) in own and not is_library_kernel(profiled_name)


def attach(result: EvalResult, make: Callable[[], Profile]) -> None:
    """Store `make()`'s profile in `result`, whatever happens: a profiler that raises leaves a note, and nothing
    else of the result (its verdict, its figures) is ever touched."""
    try:
        result.profile = make()
    except Exception as exc:  # noqa: BLE001  a diagnostic's failure is noted, never the evaluation's
        result.profile = Profile(note=f"the profiler failed: {type(exc).__name__}: {str(exc)[:300]}")


def ncu_home(path: str) -> str:
    """The folder ncu's installation lives in (bound read-only for the profiling process)."""
    return os.path.dirname(os.path.realpath(path))


def wait_for(worker: Any, timeout_s: float) -> tuple[int | None, str]:
    """A profiling process's exit code (None: killed at `timeout_s`) and its output, once it is gone."""
    try:
        code: int | None = worker.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        worker.kill()
    output = worker._final_output()  # the whole process tree is gone: the pipe drains to its end
    return code, output + (f"\n==ERROR== the profiling process was killed: {worker.killed_for}" if worker.killed_for
                           else "")
