"""Evaluator settings, validated on construction and registered as Hydra's `eval` schema.

Every field that can change a verdict or a timing keys the result cache (`cache_fields`);
where the work runs (which GPUs, how many workers, build parallelism, the cache's location)
does not.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from problems.compare import tolerance

_CHOICES = {
    "device": ("auto", "cuda", "cpu"),
    "problem_scale": ("auto", "full", "small"),
    "own_kernel_policy": ("reject", "report"),
}
_WHERE_IT_RUNS = {"cache_dir", "parallel_compiles", "log_cap_bytes", "gpus", "workers_per_gpu"}


@dataclass
class EvalConfig:
    """How candidates are checked and timed, and where.

    device: "auto" (cuda if available, else cpu with the Triton interpreter), "cuda" or "cpu".
    gpus: GPU indices to evaluate on; None uses every visible GPU (one worker pool each).
    workers_per_gpu: warm sandboxed workers per GPU (candidates in flight per GPU); 0 picks
      4 on a GPU and, on a CPU, one per two cores (at most 4).
    own_kernel_policy: "reject" fails candidates none of whose own kernels ran; "report" only notes it.
    problem_scale: "auto" uses a problem's reduced sizes (META["small"]) on CPU and full sizes on a GPU.
    max_output_bytes: the most tensor bytes one worker reply may carry; more is a verdict on the candidate.
    """

    device: str = "auto"
    gpus: Optional[list[int]] = None
    workers_per_gpu: int = 0
    trials: int = 5
    atol: Optional[float] = None  # None: problem override, then dtype default
    rtol: Optional[float] = None
    own_kernel_policy: str = "reject"
    problem_scale: str = "auto"
    # timing (GPU only)
    warmup_ms: float = 25.0
    min_reps: int = 20
    max_reps: int = 1000
    target_rel_stderr: float = 0.01
    time_budget_s: float = 6.0
    timed_input_sets: int = 3
    compile_baseline: bool = False
    # limits
    import_timeout_s: float = 180.0  # import, including CUDA/C++ builds
    call_timeout_s: float = 60.0  # one correctness trial
    timing_timeout_s: float = 120.0
    max_output_bytes: int = 1 << 30
    log_cap_bytes: int = 16_384
    # sandbox
    isolate_network: bool = True
    parallel_compiles: int = 0  # concurrent CUDA/C++ builds; 0: half the CPU cores (at least 1)
    cache_dir: Optional[str] = ".eval_cache"
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = [f"eval.{name} must be one of {', '.join(ok)}, not {getattr(self, name)!r}"
                    for name, ok in _CHOICES.items() if getattr(self, name) not in ok]
        positive = ("trials", "min_reps", "max_reps", "timed_input_sets", "warmup_ms", "time_budget_s",
                    "target_rel_stderr", "import_timeout_s", "call_timeout_s", "timing_timeout_s",
                    "max_output_bytes", "log_cap_bytes")
        problems += [f"eval.{name} must be > 0, not {getattr(self, name)!r}" for name in positive
                     if not getattr(self, name) > 0]
        problems += [f"eval.{name} must be >= 0, not {getattr(self, name)!r}"
                     for name in ("workers_per_gpu", "parallel_compiles") if getattr(self, name) < 0]
        if self.min_reps > self.max_reps:
            problems.append(f"eval.min_reps ({self.min_reps}) exceeds eval.max_reps ({self.max_reps})")
        if self.gpus is not None and (not self.gpus or any(int(g) < 0 for g in self.gpus)):
            problems.append(f"eval.gpus must be null (all visible) or a non-empty list of GPU indices, not {self.gpus!r}")
        if problems:
            raise ValueError("; ".join(problems))
        if self.gpus is not None:
            self.gpus = [int(g) for g in self.gpus]
        self.extra_env = {str(k): str(v) for k, v in dict(self.extra_env).items()}

    def cache_fields(self) -> dict[str, Any]:
        """The settings that can change a verdict or a timing (so they key the cache)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in _WHERE_IT_RUNS}

    def tolerance(self, dtype: str, problem_atol: float | None, problem_rtol: float | None) -> tuple[float, float]:
        """atol, rtol for a problem: explicit config, then the problem's override, then the dtype default."""
        atol, rtol = tolerance(dtype, problem_atol, problem_rtol)
        return (atol if self.atol is None else self.atol), (rtol if self.rtol is None else self.rtol)
