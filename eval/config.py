"""Evaluator settings, validated on construction and registered as Hydra's `eval` schema.

Every field that can change a verdict or a timing keys the result cache (`cache_fields`);
where the work runs (which GPUs, how many workers, build parallelism, the cache's location)
does not. What each field is (its choices, its bound, its role for the cache) is said once,
in its `setting(...)`.

A preset (`harness/conf/eval/NAME.yaml`, picked with `eval=NAME`) lists only its differences
from these defaults and names itself in `preset`, which every result records. The defaults are
our strict rules; `eval=kernelbench` follows KernelBench's published rules (see README.md,
"Evaluation presets").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from eval.profile_record import LEVELS as PROFILE_LEVELS  # profile (issue 57)
from problems import tolerance

if TYPE_CHECKING:  # the timing module loads torch, which reading or checking a config must not
    from eval.timing.measure import TimingRule

_UNSET: Any = object()
SAME: Any = object()  # `unkeyed_at=SAME`: the field's own default


def setting(default: Any = None, *, factory: Callable[[], Any] | None = None, choices: tuple[str, ...] = (),
            above_zero: bool = False, not_negative: bool = False, where_it_runs: bool = False,
            unkeyed_at: Any = _UNSET) -> Any:
    """An `EvalConfig` field with what is known about it in one place (its `metadata`):

    choices: the values it may take; above_zero / not_negative: its bound; where_it_runs: where the work runs
    (which GPUs, how many workers, build parallelism, the cache's location), not what a verdict or a timing
    means, so it never keys the result cache; unkeyed_at: for a field added after results were first cached,
    the value at which it stays out of the cache key, so results cached before it existed are still found
    (`SAME` for its default).
    """
    metadata = {"choices": choices, "above_zero": above_zero, "not_negative": not_negative,
                "where_it_runs": where_it_runs}
    if unkeyed_at is not _UNSET:
        metadata["unkeyed_at"] = default if unkeyed_at is SAME else unkeyed_at
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


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
      pids cgroup where the host allows one, else RLIMIT_NPROC in its own user namespace (`eval.process._pids`); a fork
      bomb gets EAGAIN in its own worker only, and the verdict names the limit.
    allow_unconfined_workers: run candidate code even where no confinement keeps it from this harness's own
      identity and file access (no mount namespace; or root whose workers cannot become uid 65534). Off: the
      evaluator refuses to start, saying why. Every result records `filesystem_isolated` and `unprivileged`.
    cpu_timing: without a GPU, still run the staging and timing steps (reference process, blocks,
      captures) with host-clock times that mean nothing: it exercises the whole pipeline in CI.
    share_reference_timing: under the adaptive method, candidates of the same problem that reach timing together
      on one GPU (up to `eval.process._windows.CAP`) are timed against one timing of the reference, in one window
      (`measure.time_group`); each result says how many shared it (`reference_shared_with`). Off: each
      candidate is timed against a reference timing of its own. Off by default: under concurrent load on the H100
      (2026-11-26) it raised the wall bound's false rejects of honest candidates from 3 in 96 to 24 in 192.

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
      shifted, negated, heavy-tailed), each skipped where the reference is not finite or is ill-conditioned
      on them (`problems.conditioning`).
    hidden_work_check: reject work left running after forward returns (side streams, threads).
    timed_output_checks: capture every timed output and check it against the reference's output for the
      same inputs (`eval.crossing._capture`).
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
    profile: hardware counters of each correct candidate's kernels and its reference's (`eval.profiling`), for the
      next turn's feedback and the report: "off" (default), "basic" (time share, DRAM and SM throughput against the
      peaks, occupancy, registers, shared memory, spills, roofline position) or "full" (and the top stall reasons).
      Nsight Compute runs them in the sandbox, after the verdict and off the timing path; a diagnostic that never
      changes a verdict. A machine without ncu or counter access gets a note instead.
    profile_ncu: the ncu command (a name on PATH or a path); profile_timeout_s: the most one profiling process may take.
    """

    device: str = setting("auto", choices=("auto", "cuda", "cpu"))
    gpus: Optional[list[int]] = setting(None, where_it_runs=True)
    workers_per_gpu: int = setting(0, not_negative=True, where_it_runs=True)
    trials: int = setting(5, above_zero=True)
    atol: Optional[float] = None  # None: problem override, then dtype default
    rtol: Optional[float] = None
    own_kernel_policy: str = setting("reject", choices=("reject", "report"))
    # Default 0.005 (0.5 %), from data: honest hybrids (cuBLAS GEMM + own epilogue) have the smallest
    # honest shares. Lowest estimate, from FLOPs and bytes on an H100: a 4096^3 fp32 GEMM (137 GFLOP at
    # ~50 TFLOP/s IEEE fp32, TF32 off: ~2.7 ms) against a 16M-element fp32 bias+ReLU epilogue (128 MB
    # at ~3 TB/s: ~45 us) is 1.6 %; a bf16 GEMM on tensor cores raises the share (~10 %), not lowers it.
    # The 15 reference solutions measured 32.7 % at least (L3/04). Decoys measured 0.0 % (decoy_kernel),
    # 0.12 % (side_stream) and 0.34 % (the one-element copy decoy). 0.5 % is a third of the lowest
    # honest estimate (room for GEMMs up to ~3x deeper per output than 4096, or faster epilogues) and
    # above every decoy measured. `harness bench eval --part own-share` prints the measured shares.
    # The own-share rule changes strict verdicts, so at its default it keys the cache (no strict result cached
    # before the rule existed is reused); off (0, as under eval=kernelbench) it stays out of the key.
    min_own_time_fraction: float = setting(0.005, unkeyed_at=0.0)
    problem_scale: str = setting("auto", choices=("auto", "full", "small"))
    # timing (GPU only)
    warmup_ms: float = setting(25.0, above_zero=True)
    min_reps: int = setting(20, above_zero=True)
    max_reps: int = setting(1000, above_zero=True)
    target_rel_stderr: float = setting(0.01, above_zero=True)
    time_budget_s: float = setting(6.0, above_zero=True)
    timed_input_sets: int = setting(3, above_zero=True)
    compile_baseline: bool = False
    # limits
    import_timeout_s: float = setting(180.0, above_zero=True)  # import, including CUDA/C++ builds
    call_timeout_s: float = setting(60.0, above_zero=True)  # one correctness trial
    timing_timeout_s: float = setting(120.0, above_zero=True)
    max_output_bytes: int = setting(1 << 30, above_zero=True)
    log_cap_bytes: int = setting(16_384, above_zero=True, where_it_runs=True)
    # sandbox
    isolate_network: bool = True
    allow_unconfined_workers: bool = setting(False, where_it_runs=True)
    max_worker_memory_gib: float = setting(0.0, not_negative=True, unkeyed_at=SAME)
    max_worker_processes: int = setting(4096, above_zero=True, unkeyed_at=SAME)
    # concurrent CUDA/C++ builds; 0: half the CPU cores (at least 1)
    parallel_compiles: int = setting(0, not_negative=True, where_it_runs=True)
    # disk for finished build folders no evaluation holds, kept for identical sources to come (`eval.builds`):
    # past it the oldest are removed; a held folder never is. 0 keeps none (a build made ahead may then be made again)
    kept_builds_gib: float = setting(2.0, not_negative=True, where_it_runs=True)
    cache_dir: Optional[str] = setting(".eval_cache", where_it_runs=True)
    extra_env: dict[str, str] = setting(factory=dict)
    # rules a preset may relax (see the docstring); defaults are the strict rules
    preset: str = setting("default", unkeyed_at=SAME)
    precision: str = setting("strict", choices=("strict", "torch_default"), unkeyed_at=SAME)
    seeding: str = setting("secret", choices=("secret", "kernelbench"), unkeyed_at=SAME)
    public_seed: int = setting(42, not_negative=True, unkeyed_at=SAME)
    copy_reference_state: bool = setting(True, unkeyed_at=SAME)
    hidden_shapes: bool = setting(True, unkeyed_at=SAME)
    distribution_trials: bool = setting(True, unkeyed_at=False)  # the same: on (the default) it changes verdicts
    hidden_work_check: bool = setting(True, unkeyed_at=SAME)
    timed_output_checks: bool = setting(True, unkeyed_at=SAME)
    # observed: score the speedup from the reference process's own windows (`eval.timing.observed`); off by default
    # until its figure agrees with the timing loop's for honest memory-bound kernels (docs/evaluator.md,
    # "Observed timing")
    observed_timing: bool = setting(False, unkeyed_at=False)
    # observed timing's block: its repetitions add up to about this many ms of the faster side's time. Short enough
    # that the GPU does not switch to the reference process's context (its stream waits on done) in the middle of
    # the candidate's block: with 4 ms blocks an honest add kernel on an H200 ran 40 % slower in its window than in
    # its own events' loop, and its own events said the same (the contexts took turns); 130 us blocks showed none of
    # it (2026-12-02). `harness bench observed-blocks` measures the figures across block sizes.
    observed_block_ms: float = setting(0.5, above_zero=True, unkeyed_at=SAME)
    timing_method: str = setting("adaptive", choices=("adaptive", "fixed"), unkeyed_at=SAME)
    timing_statistic: str = setting("median", choices=("median", "mean"), unkeyed_at=SAME)
    l2_flush: bool = setting(True, unkeyed_at=SAME)
    l2_flush_bytes: int = setting(0, not_negative=True, unkeyed_at=SAME)
    fixed_reps: int = setting(100, above_zero=True, unkeyed_at=SAME)
    fixed_warmup_calls: int = setting(3, not_negative=True, unkeyed_at=SAME)
    cuda_graphs: str = setting("off", choices=("off", "auto"), unkeyed_at=SAME)
    cpu_timing: bool = setting(False, unkeyed_at=SAME)
    share_reference_timing: bool = setting(False, unkeyed_at=SAME)
    # profile (issue 57): a diagnostic, never a verdict figure; on, it keys the cache (a result without a profile is
    # not reused for one that wants it), off it stays out of the key
    profile: str = setting("off", choices=PROFILE_LEVELS, unkeyed_at=SAME)
    profile_ncu: str = setting("ncu", where_it_runs=True)
    profile_timeout_s: float = setting(120.0, above_zero=True, where_it_runs=True)

    def __post_init__(self) -> None:
        problems = []
        for f in dataclasses.fields(self):
            value, meta = getattr(self, f.name), f.metadata
            if meta.get("choices") and value not in meta["choices"]:
                problems.append(f"eval.{f.name} must be one of {', '.join(meta['choices'])}, not {value!r}")
            if meta.get("above_zero") and not value > 0:
                problems.append(f"eval.{f.name} must be > 0, not {value!r}")
            if meta.get("not_negative") and value < 0:
                problems.append(f"eval.{f.name} must be >= 0, not {value!r}")
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

        Left out: where the work runs, and each field added later at its `unkeyed_at` value, so the strict
        rules' keys are the same as before those fields existed.
        """
        values = dataclasses.asdict(self)
        return {f.name: values[f.name] for f in dataclasses.fields(self) if not f.metadata.get("where_it_runs")
                and not ("unkeyed_at" in f.metadata and values[f.name] == f.metadata["unkeyed_at"])}

    @classmethod
    def values_before_added(cls) -> dict[str, Any]:
        """Each field added after results or runs were first stored, at its `unkeyed_at` value: the behaviour before
        it existed, which a stored cache key or run config without the field means."""
        return {f.name: f.metadata["unkeyed_at"] for f in dataclasses.fields(cls) if "unkeyed_at" in f.metadata}

    def timing_rule(self) -> TimingRule:
        """The timing rule these settings give: what the parent plans with and what each timed block carries."""
        from eval.timing.measure import TimingRule

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
