"""Evaluator settings, validated on construction and registered as Hydra's `eval` schema.

Every field that can change a verdict or a timing keys the result cache (`cache_fields`);
where the work runs (which GPUs, how many workers, build parallelism, the cache's location)
does not.

A preset (`harness/conf/eval/NAME.yaml`, picked with `eval=NAME`) lists only its differences
from these defaults and names itself in `preset`, which every result records. The defaults are
our strict rules; `eval=kernelbench` follows KernelBench's published rules (see README.md,
"Evaluation presets").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from eval.measure import TimingRule
from problems.compare import tolerance

_CHOICES = {
    "device": ("auto", "cuda", "cpu"),
    "problem_scale": ("auto", "full", "small"),
    "own_kernel_policy": ("reject", "report"),
    "precision": ("strict", "torch_default"),
    "seeding": ("secret", "kernelbench"),
    "timing_method": ("adaptive", "fixed"),
    "timing_statistic": ("median", "mean"),
    "cuda_graphs": ("off", "auto"),
}
# Fields added after results were first cached: at their default they stay out of the cache key,
# so results cached under the strict rules before these fields existed are still found.
_ADDED_LATER: dict[str, Any] = {
    "preset": "default", "precision": "strict", "seeding": "secret", "public_seed": 42,
    "copy_reference_state": True, "hidden_shapes": True, "hidden_work_check": True, "timed_output_checks": True,
    "timing_method": "adaptive", "timing_statistic": "median", "l2_flush": True, "fixed_reps": 100,
    "fixed_warmup_calls": 3, "cuda_graphs": "off", "cpu_timing": False, "l2_flush_bytes": 0,
    "max_worker_memory_gib": 0.0, "max_worker_processes": 4096,
}
# The own-share rule changes strict verdicts, so at its default it keys the cache (no strict result cached
# before the rule existed is reused); off (0, as under eval=kernelbench) it stays out of the key.
_ADDED_LATER["min_own_time_fraction"] = 0.0
_ADDED_LATER["distribution_trials"] = False  # the same: on (the default) it changes strict verdicts
_WHERE_IT_RUNS = {"cache_dir", "parallel_compiles", "log_cap_bytes", "gpus", "workers_per_gpu",
                  "allow_unconfined_workers"}


@dataclass
class EvalConfig:
    """How candidates are checked and timed, and where.

    device: "auto" (cuda if available, else cpu with the Triton interpreter), "cuda" or "cpu".
    gpus: GPU indices to evaluate on; None uses every visible GPU (one worker pool each).
    workers_per_gpu: warm sandboxed workers per GPU (candidates in flight per GPU); 0 picks
      4 on a GPU and, on a CPU, one per two cores (at most 4).
    own_kernel_policy: "reject" fails candidates none of whose own kernels ran; "report" only notes it.
    min_own_time_fraction: under own_kernel_policy=reject, on a GPU, reject a candidate whose own kernels
      take less than this share of forward's GPU time (a decoy kernel beside PyTorch doing the work);
      in [0, 1), 0 turns it off. Not measurable on a CPU (no profile), so never applied there.
    problem_scale: "auto" uses a problem's reduced sizes (META["small"]) on CPU and full sizes on a GPU.
    max_output_bytes: the most bytes one forward's outputs may take, or the reference's own outputs where
      they take more (an honest candidate returns exactly those); a worker reply carrying more
      is a verdict on the candidate.
    max_worker_memory_gib: the most resident memory a worker's processes may hold together (a parent-side
      watchdog; over it the worker is killed and the verdict names the limit); 0 gives each worker an even
      share of the machine's memory among the workers and the parent (two shares), at least 4 GiB.
    max_worker_processes: the tasks (processes and threads) each worker may hold, counted per worker: its own
      pids cgroup where the host allows one, else RLIMIT_NPROC in its own user namespace (`eval.pids`); a fork
      bomb gets EAGAIN in its own worker only, and the verdict names the limit.
    allow_unconfined_workers: run candidate code even where no confinement keeps it from this harness's own
      identity and file access (no mount namespace; or root whose workers cannot become uid 65534). Off: the
      evaluator refuses to start, saying why. Every result records `filesystem_isolated` and `unprivileged`.
    cpu_timing: without a GPU, still run the staging and timing steps (reference process, blocks,
      captures) with host-clock times that mean nothing: it exercises the whole pipeline in CI.

    Rules a preset may relax (defaults are the strict ones; `eval=kernelbench` sets the others):
    preset: the name recorded in every result and shown in reports.
    precision: "strict" (TF32 off everywhere, as the fp32 tolerance assumes) or "torch_default"
      (PyTorch's own defaults, which KernelBench keeps: cuDNN TF32 on, matmul TF32 off).
    seeding: "secret" (weights and inputs from a fresh secret seed per evaluation) or "kernelbench"
      (public `public_seed`: both models built after seeding it, trial inputs from seeds drawn
      from it, inputs made on the CPU as KernelBench makes them).
    copy_reference_state: copy the reference's parameters into same-named ModelNew entries
      (KernelBench does not: its two models only share the construction seed).
    hidden_shapes: also check the problem's hidden input shapes (`get_extra_inputs()`).
    distribution_trials: also check inputs moved off get_inputs()'s distribution (`runtime.DISTRIBUTIONS`: scaled,
      shifted, negated), each skipped where the reference is not finite on them.
    hidden_work_check: reject work left running after forward returns (side streams, threads).
    timed_output_checks: capture every timed output and check it against the reference's output for the
      same inputs (`eval.capture`).
    timing_method: "adaptive" (blocks alternating between the two processes, until the relative standard error is under
      `target_rel_stderr`) or "fixed" (KernelBench's timer: the candidate, then the reference, each
      `fixed_warmup_calls` warm-up calls, one dropped call, then `fixed_reps` calls, each bracketed by CUDA
      events and synchronised, with no GPU lead; the candidate with autograd on, as KernelBench times it).
    timing_statistic: what speedups compare, "median" or "mean".
    l2_flush: flush the L2 cache before each timed call (under "adaptive", also queue a short GPU spin).
    l2_flush_bytes: bytes the flush writes; 0 is twice the L2 size (KernelBench writes 256 MiB).
    cuda_graphs: "off" (default: both forwards timed as eager calls, host launch work included) or
      "auto": each side's forward is captured once in a CUDA graph after warm-up (static input
      buffers, refilled outside the timed interval) and its replays are timed; if either side
      cannot be captured, both are timed eagerly and the result says why (`timing_mode`, a flag).
    """

    device: str = "auto"
    gpus: Optional[list[int]] = None
    workers_per_gpu: int = 0
    trials: int = 5
    atol: Optional[float] = None  # None: problem override, then dtype default
    rtol: Optional[float] = None
    own_kernel_policy: str = "reject"
    # Default 0.005 (0.5 %), from data: honest hybrids (cuBLAS GEMM + own epilogue) have the smallest
    # honest shares. Lowest estimate, from FLOPs and bytes on an H100: a 4096^3 fp32 GEMM (137 GFLOP at
    # ~50 TFLOP/s IEEE fp32, TF32 off: ~2.7 ms) against a 16M-element fp32 bias+ReLU epilogue (128 MB
    # at ~3 TB/s: ~45 us) is 1.6 %; a bf16 GEMM on tensor cores raises the share (~10 %), not lowers it.
    # The 15 reference solutions measured 32.7 % at least (L3/04). Decoys measured 0.0 % (decoy_kernel),
    # 0.12 % (side_stream) and 0.34 % (the one-element copy decoy). 0.5 % is a third of the lowest
    # honest estimate (room for GEMMs up to ~3x deeper per output than 4096, or faster epilogues) and
    # above every decoy measured. `harness bench eval --part own-share` prints the measured shares.
    min_own_time_fraction: float = 0.005
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
    allow_unconfined_workers: bool = False
    max_worker_memory_gib: float = 0.0
    max_worker_processes: int = 4096
    parallel_compiles: int = 0  # concurrent CUDA/C++ builds; 0: half the CPU cores (at least 1)
    cache_dir: Optional[str] = ".eval_cache"
    extra_env: dict[str, str] = field(default_factory=dict)
    # rules a preset may relax (see the docstring); defaults are the strict rules
    preset: str = "default"
    precision: str = "strict"
    seeding: str = "secret"
    public_seed: int = 42
    copy_reference_state: bool = True
    hidden_shapes: bool = True
    distribution_trials: bool = True
    hidden_work_check: bool = True
    timed_output_checks: bool = True
    timing_method: str = "adaptive"
    timing_statistic: str = "median"
    l2_flush: bool = True
    l2_flush_bytes: int = 0
    fixed_reps: int = 100
    fixed_warmup_calls: int = 3
    cuda_graphs: str = "off"
    cpu_timing: bool = False

    def __post_init__(self) -> None:
        problems = [f"eval.{name} must be one of {', '.join(ok)}, not {getattr(self, name)!r}"
                    for name, ok in _CHOICES.items() if getattr(self, name) not in ok]
        positive = ("trials", "min_reps", "max_reps", "timed_input_sets", "warmup_ms", "time_budget_s",
                    "target_rel_stderr", "import_timeout_s", "call_timeout_s", "timing_timeout_s",
                    "max_output_bytes", "log_cap_bytes", "fixed_reps")
        positive += ("max_worker_processes",)
        problems += [f"eval.{name} must be > 0, not {getattr(self, name)!r}" for name in positive
                     if not getattr(self, name) > 0]
        problems += [f"eval.{name} must be >= 0, not {getattr(self, name)!r}"
                     for name in ("workers_per_gpu", "parallel_compiles", "fixed_warmup_calls", "public_seed",
                                  "l2_flush_bytes", "max_worker_memory_gib")
                    if getattr(self, name) < 0]
        if not 0.0 <= self.min_own_time_fraction < 1.0:
            problems.append(f"eval.min_own_time_fraction must be in [0, 1), not {self.min_own_time_fraction!r}")
        if not str(self.preset).strip():
            problems.append("eval.preset must name the preset (it labels every result)")
        if self.min_reps > self.max_reps:
            problems.append(f"eval.min_reps ({self.min_reps}) exceeds eval.max_reps ({self.max_reps})")
        if self.timing_method == "fixed" and self.timed_input_sets != 1:
            problems.append("eval.timing_method=fixed times one input set, as KernelBench does: set eval.timed_input_sets=1")
        if self.gpus is not None and (not self.gpus or any(int(g) < 0 for g in self.gpus)):
            problems.append(f"eval.gpus must be null (all visible) or a non-empty list of GPU indices, not {self.gpus!r}")
        if problems:
            raise ValueError("; ".join(problems))
        if self.gpus is not None:
            self.gpus = [int(g) for g in self.gpus]
        self.extra_env = {str(k): str(v) for k, v in dict(self.extra_env).items()}

    def cache_fields(self) -> dict[str, Any]:
        """The settings that can change a verdict or a timing (so they key the cache).

        Fields added later are left out at their defaults, so the strict rules' keys are the same
        as before those fields existed.
        """
        return {k: v for k, v in dataclasses.asdict(self).items()
                if k not in _WHERE_IT_RUNS and not (k in _ADDED_LATER and v == _ADDED_LATER[k])}

    def timing_rule(self) -> TimingRule:
        """The timing rule these settings give: what the parent plans with and what each timed block carries."""
        return TimingRule(method=self.timing_method, min_reps=self.min_reps, max_reps=self.max_reps,
                          target_rel_stderr=self.target_rel_stderr, budget_s=self.time_budget_s,
                          warmup_ms=self.warmup_ms, flush=self.l2_flush, flush_bytes=self.l2_flush_bytes,
                          reps=self.fixed_reps,
                          warmup_calls=self.fixed_warmup_calls, check_outputs=self.timed_output_checks,
                          statistic=self.timing_statistic)

    def tolerance(self, dtype: str, problem_atol: float | None, problem_rtol: float | None) -> tuple[float, float]:
        """atol, rtol for a problem: explicit config, then the problem's override, then the dtype default."""
        atol, rtol = tolerance(dtype, problem_atol, problem_rtol)
        return (atol if self.atol is None else self.atol), (rtol if self.rtol is None else self.rtol)
