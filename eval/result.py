"""Typed records of one evaluation: the verdict, its evidence and its timings.

Every field is plain data so a result round-trips through JSON (run store, cache, CLI).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from eval.backends import DEFAULT_BACKEND
from eval.profile_record import Profile  # profile (issue 57)
from problems import Mismatch


class Status(str, Enum):
    """The one status type from the evaluator to the report: an evaluation's verdict, and an attempt's status
    in the run store. Only `CORRECT` counts as solved. A member is its value as text (JSON, SQLite, f-strings),
    so stored runs hold the bare strings; readers turn them back into members where they load them."""

    FORMAT_ERROR = "format_error"  # no usable code / no ModelNew / no kernel in the source
    COMPILE_ERROR = "compile_error"  # import or build of the candidate failed
    RUNTIME_ERROR = "runtime_error"  # forward raised
    TIMEOUT = "timeout"  # wall-clock limit hit; worker killed
    CRASH = "crash"  # worker died (segfault, exit, sticky CUDA error)
    INCORRECT = "incorrect"  # outputs differ from the reference
    REJECTED = "rejected"  # an integrity check failed
    SKIPPED = "skipped"  # cannot be run here (e.g. CUDA candidate without a GPU); reason says why
    CORRECT = "correct"
    PENDING = "pending"  # not yet decided: every evaluation starts here and must end elsewhere
    AGENT_ERROR = "agent_error"  # the provider refused the request: no candidate (set by the run loop, not here)
    # the problem is broken, not the candidate: its reference raised, returned no tensors, exited or hung
    # (`eval.problem_check`); no candidate can be judged on it, and its trajectory ends there
    PROBLEM_ERROR = "problem_error"

    def __str__(self) -> str:
        return self.value


# the value of a `distributions` or `workloads` entry whose trial the candidate never finished: it raised, crashed or
# hung on inputs or sizes it was never shown (the verdict is then that runtime_error, crash or timeout)
UNFINISHED = "unfinished"


class EvaluatorClosed(RuntimeError):
    """An evaluation ended after `close()` began: its verdict may be the closing's doing, so there is none. Here,
    with the results, so that code that handles it (the run loop) loads no evaluator to name it."""


@dataclass
class Timing:
    """Summary of repeated timings of one callable, in milliseconds."""

    median_ms: float
    iqr_ms: float
    n: int
    rel_stderr: float
    min_ms: float

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Timing":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})


@dataclass
class KernelShare:
    """Evidence that the candidate's own kernels ran, and their share of GPU time."""

    own_kernels_launched: list[str] = field(default_factory=list)
    own_kernels_defined: list[str] = field(default_factory=list)  # the first `KEPT_KERNEL_NAMES` of them
    own_kernels_defined_count: int = 0
    own_time_fraction: float | None = None  # None when not measurable (CPU interpreter)
    top_kernels: list[tuple[str, float]] = field(default_factory=list)  # (name, ms) by GPU time


@dataclass
class EvalResult:
    """The full outcome of evaluating one candidate against one problem."""

    status: Status = Status.PENDING
    reason: str = ""
    problem_id: str = ""
    backend: str = DEFAULT_BACKEND
    speedup: float | None = None
    speedup_compile: float | None = None
    candidate_timing: Timing | None = None
    reference_timing: Timing | None = None
    compile_timing: Timing | None = None
    timing_meaningful: bool = False
    unscored: str = ""  # why no speedup was scored although the candidate may be correct (a degenerate problem)
    reference_shared_with: int = 0  # candidates timed against its (first) reference timing, itself included; 0: untimed
    mismatch: Mismatch | None = None
    kernels: KernelShare | None = None
    sol_fraction: float | None = None
    hidden_work: dict[str, float] = field(default_factory=dict)  # back-to-back check, us per call
    wall_bound: dict[str, float] = field(default_factory=dict)  # timed blocks' wall vs events, us per rep (claim_bounds.wall_bound)
    # observed timing: what the reference process saw (eval.timing.observed)
    observed: dict[str, float] = field(default_factory=dict)
    float64_decided: int = 0  # trials whose outputs missed the reference's but met its float64 answer
    flags: list[str] = field(default_factory=list)  # audit notes (implausible speedup, drift, ...)
    error: str = ""  # trimmed compile log / traceback tail
    stdout_tail: str = ""
    trials: int = 0
    distributions: dict[str, str] = field(default_factory=dict)  # off-distribution trials: name -> passed/failed/skipped/UNFINISHED
    workloads: dict[str, str] = field(default_factory=dict)  # derived hidden workloads ("batch=9") -> the same
    problem_scale: str = "full"  # "small" when the problem's reduced sizes (META["small"]) were used
    network_isolated: bool | None = None
    filesystem_isolated: bool | None = None  # the worker could write nowhere but its own folder
    gpu_index: int | None = None  # which GPU of the host evaluated it
    node: str = ""  # hostname of the machine that evaluated it (executor=local or ray alike)
    ipc_isolated: bool | None = None  # the worker had IPC and UTS namespaces of its own (System V IPC is its own)
    unprivileged: bool | None = None  # worker ran as an unprivileged user (only possible when the harness is root)
    memory_accounting: str = ""  # what held the worker to its memory limit: cgroup (shared memory too) or pss (`eval.process._memcg`)
    process_limit: str = ""  # how eval.max_worker_processes held the worker: cgroup, userns, uid or none (`eval.process._pids`)
    freeze: str = ""  # how the worker was stopped while the reference was timed: cgroup, signals or signals-tree (`eval.process._freeze`)
    # reference blocks the GPU-idle probe found beside other GPU work, waited for or redone (`eval.timing._gpu_idle`)
    contended_blocks: int = 0
    device: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    eval_seconds: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)  # where the evaluation time went
    cached: bool = False
    preset: str = "default"  # the evaluator preset (`eval.preset`) whose rules produced this verdict
    # launch-bound timings (eval.timing.measure), per side ({"reference": .., "candidate": ..}): the host's time to
    # make an eager call (ms); for a side whose host time is over eval.timing.host_share.HOST_FLOOR_MS (the others
    # are never host-bound, so not profiled), the GPU busy share of the call and the host's time over its GPU time;
    # the host-bound sides (eval.steps.timing_steps.host_bound), and how the timed calls ran ("eager" or "cuda_graph")
    host_ms: dict[str, float] = field(default_factory=dict)
    gpu_busy: dict[str, float] = field(default_factory=dict)
    host_share: dict[str, float] = field(default_factory=dict)
    host_bound: list[str] = field(default_factory=list)
    timing_mode: str = "eager"
    profile: Profile | None = None  # profile (issue 57): hardware counters of a correct candidate, a diagnostic only

    @property
    def is_correct(self) -> bool:
        return self.status is Status.CORRECT

    @property
    def compiled(self) -> bool:
        """True when the candidate got past import/compilation."""
        return self.status not in (Status.FORMAT_ERROR, Status.COMPILE_ERROR, Status.SKIPPED, Status.PROBLEM_ERROR)

    def settle(self) -> "EvalResult":
        """The status decides the evidence: only a correct candidate is scored, so any other verdict carries no
        speedup, no torch.compile speedup and no speed-of-light fraction (a step after the timing that rejects it,
        or a result stored before this rule, would else keep them, and feedback and reports show them). The times
        stay: they are the evidence of a rejection made after timing."""
        if self.status is not Status.CORRECT:
            self.speedup = self.speedup_compile = self.sol_fraction = None
        return self

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EvalResult":
        d = dict(d)
        d["status"] = Status(d["status"])
        for key in ("candidate_timing", "reference_timing", "compile_timing"):
            if d.get(key) is not None:
                d[key] = Timing.from_dict(d[key])
        if d.get("mismatch") is not None:
            d["mismatch"] = Mismatch(**d["mismatch"])
        if d.get("kernels") is not None:
            k = dict(d["kernels"])
            k["top_kernels"] = [tuple(x) for x in k.get("top_kernels", [])]
            d["kernels"] = KernelShare(**k)
        if d.get("profile") is not None:  # profile (issue 57)
            d["profile"] = Profile.from_dict(d["profile"])
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known}).settle()
