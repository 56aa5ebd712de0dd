"""Evaluator settings. Every field is part of the result-cache key (see `EvalConfig.cache_fields`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TOLERANCES: dict[str, float] = {
    "float32": 1e-4,
    "float64": 1e-7,
    "float16": 1e-2,
    "bfloat16": 1e-2,
}


@dataclass
class EvalConfig:
    """How candidates are checked and timed.

    device: "auto" (cuda if available, else cpu with the Triton interpreter), "cuda" or "cpu".
    own_kernel_policy: "reject" fails candidates none of whose own kernels ran; "report" only notes it.
    """

    device: str = "auto"
    trials: int = 5
    atol: float | None = None  # None: problem override, then dtype default
    rtol: float | None = None
    own_kernel_policy: str = "reject"
    # "auto": a problem's reduced sizes (META["small"]) on CPU, full sizes on a GPU; or "full" / "small"
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
    parallel_compiles: int = 0  # 0: number of CPU cores
    cache_dir: str | None = ".eval_cache"
    extra_env: dict[str, str] = field(default_factory=dict)

    def cache_fields(self) -> dict[str, Any]:
        """The settings that can change a verdict or a timing (so they key the cache)."""
        skip = {"cache_dir", "parallel_compiles", "log_cap_bytes"}
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}

    def tolerance(self, dtype: str, problem_atol: float | None, problem_rtol: float | None) -> tuple[float, float]:
        """atol, rtol for a problem: explicit config, then the problem's override, then the dtype default."""
        default = DEFAULT_TOLERANCES.get(dtype, 1e-4)
        atol = self.atol if self.atol is not None else (problem_atol if problem_atol is not None else default)
        rtol = self.rtol if self.rtol is not None else (problem_rtol if problem_rtol is not None else default)
        return atol, rtol
