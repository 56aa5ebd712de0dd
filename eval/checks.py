"""The check pipeline: plain functions, run in order on one evaluation's `Context`.

load -> correctness trials -> stage timing inputs -> own kernels -> hidden work -> time ->
timed outputs -> speed of light -> replies in order. Each step either returns (the candidate passed it) or
raises `Verdict`. Each declares the access to its GPU it needs (`GpuGate`): consecutive
steps with the same access share one hold, and only the steps whose numbers depend on
having the GPU alone (kernel shares, back-to-back wall time, timing) hold it exclusively.
The correctness trials hold it shared one trial at a time ("per_trial"): a timing waiting for
the GPU then waits for the trial in flight, not for every trial of every other candidate.

The rules come from `EvalConfig`: the defaults are the strict ones; a preset such as
`eval=kernelbench` changes the tolerance, precision, seeding, hidden shapes, own-kernel
policy, the two integrity checks a preset may drop (hidden work, timed outputs) and the timing
method. Everything a strict check adds beyond those stays on under every preset, since it is
the sandbox itself (static refusals, the tamper snapshot, output type and aliasing checks,
poisoned allocations, unchanged inputs).
"""

from __future__ import annotations

import re
import secrets
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from eval import protocol as p
from eval import launch, static_checks
from eval.builds import Build
from eval.config import EvalConfig
from eval.pool import Lease
from eval.reference import Reference, encode_args, problem_size
from eval.result import EvalResult, KernelShare, Status, Timing
from eval.roofline import IMPLAUSIBLE_BELOW_FLOOR, Ceilings
from problems import runtime
from problems.compare import compare
from problems.runtime import derive_seed
from problems.problem import Problem

ERROR_CHARS = 3000
# Hidden work, back-to-back: batches of calls (each ending in one device synchronisation), the candidate's
# and the reference's interleaved; per batch, wall time minus the sum of the calls' CUDA events, per call.
# Host noise (preemption, page faults, other workers' builds) only ever adds wall time, and to some batches;
# work hidden on a side stream or thread adds to every batch. So the statistic is the candidate's LOWEST
# batch minus the reference's MEDIAN batch: an honest candidate is rejected only if all
# _HIDDEN_WORK_BATCHES of its batches are disturbed by more than the limit. The limit per call is
# max(_HIDDEN_WORK_FLOOR_MS, _HIDDEN_WORK_SHARE x the candidate's median event time per call). Why these:
# an undisturbed batch's excess is the host's loop between two event records (a few us per call, on both
# sides alike) plus one synchronisation spread over the batch (<= ~1 us per call at 50 calls); a us-scale
# candidate's single 20-call batch used to exceed 20 us per call from one 0.4 ms host stall (issue 10:
# correct at 674x, then rejected), which the lowest of 7 batches no longer sees. The attacks stay far
# above the floor: the side-stream candidates queue 0.1-1 ms of hidden GPU work per call (5-50x), in every
# batch. `harness bench eval --part flips` prints the largest honest statistic seen against this limit.
_HIDDEN_WORK_SHARE = 0.5
_HIDDEN_WORK_FLOOR_MS = 0.02
_HIDDEN_WORK_BATCHES = 7
_BACK_TO_BACK = 50  # calls per batch at most (fewer for long calls: a batch lasts about 20 ms)


class Verdict(Exception):
    """Raised inside an evaluation to end it with a status."""

    def __init__(self, status: Status, reason: str, error: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error


class RetryEager(Exception):
    """A CUDA-graph capture failed in the worker, which may have left its CUDA state unusable: evaluate again in
    a new worker with both sides timed as eager calls."""

    def __init__(self, note: str):
        super().__init__(note)
        self.note = note


class RetryAlone(Exception):
    """The device ran out of memory while other evaluations shared the GPU: run this one again, alone."""


def trim(text: str, n: int = ERROR_CHARS) -> str:
    """Keep the start (what failed first) and the end (the final error) of a long log."""
    if len(text) <= n:
        return text
    head = n // 3
    return f"{text[:head]}\n... [{len(text) - n} characters trimmed] ...\n{text[-(n - head):]}"


@dataclass
class Context:
    """Everything one evaluation's steps share."""

    problem: Problem
    source: str
    report: static_checks.SourceReport
    config: EvalConfig
    lease: Lease
    result: EvalResult
    small: bool
    build: Build | None = None
    ceilings: Ceilings | None = None
    alone: bool = False  # the evaluation holds its GPU exclusively throughout (a retry after running out of memory)
    graphs: bool = False  # time both sides as CUDA-graph replays (eval.cuda_graphs=auto, unless a capture failed)
    secret: int = field(default_factory=lambda: secrets.randbits(62))
    reference: Reference | None = None
    timed_sets: list[list[Any]] = field(default_factory=list)  # the candidate's timing inputs, when carried over
    timed_seeds: list[int] = field(default_factory=list)  # their seeds, when the worker drew them (redrawn to check)
    timed_outputs: list[torch.Tensor] = field(default_factory=list)
    timing_nonce: int = 0  # seeds the fresh inputs of every timed repetition (strict adaptive timing)
    sampled_reps: list[int] = field(default_factory=list)  # repetitions whose outputs came back, when fresh
    worker_draws: bool = True  # the worker draws inputs from seeds (false once its draw did not match ours)
    output_bytes: int = 0  # the largest reference output of this evaluation (bytes per forward), once trials start

    @property
    def on_gpu(self) -> bool:
        return self.lease.device.type == "cuda"

    def request(self, message: p.Request, tensors: list[torch.Tensor] | None = None,
                timeout: float | None = None, on_host: bool = False) -> tuple[Any, list[torch.Tensor]]:
        """Ask the worker; a failed reply becomes the verdict it implies. Reply tensors land on the evaluation's
        device, or stay in host memory (`on_host`)."""
        device = torch.device("cpu") if on_host else self.lease.device
        reply, out = self.lease.worker.request(message, tensors, timeout=timeout, device=device)
        if not reply.ok:
            self.fail_from_reply(reply)
        return reply, out

    def fail_from_reply(self, reply: p.Reply) -> None:
        if reply.oom and not self.alone:
            raise RetryAlone()
        if reply.cuda_error:
            self.lease.worker.kill()  # a sticky CUDA error: this worker is done
        if reply.stage == "integrity":
            raise Verdict(Status.REJECTED, f"integrity: {trim(reply.error, 600)}")
        if reply.stage == "output":
            raise Verdict(Status.INCORRECT, trim(reply.error, 600))
        last = reply.error.strip().splitlines()[-1] if reply.error.strip() else "forward failed"
        if reply.oom:  # alone on the GPU, so not another evaluation's doing
            raise Verdict(Status.RUNTIME_ERROR, f"the device ran out of memory in the '{reply.stage}' step with this "
                                                f"evaluation alone on it: {trim(last, 400)}", reply.error)
        raise Verdict(Status.RUNTIME_ERROR, f"forward raised: {trim(last, 400)}", reply.error)

    def tolerance(self) -> tuple[float, float]:
        return self.config.tolerance(self.problem.dtype, self.problem.atol, self.problem.rtol)

    @property
    def kernelbench_seeding(self) -> bool:
        return self.config.seeding == "kernelbench"

    def allow_outputs(self, expected: list[torch.Tensor]) -> None:
        """Let replies carry the reference's own output size per forward, however large: an honest candidate returns
        exactly those bytes, so `eval.max_output_bytes` bounds only what the reference does not justify."""
        self.output_bytes = max(self.output_bytes, tensor_bytes(expected))
        self.lease.worker.cap_replies(reply_cap(self.config, self.output_bytes))

    def draw_timing_inputs(self, seed: int) -> list[Any]:
        """A timing input set as the worker draws it from `seed` (on the CPU and moved, under KernelBench's seeding)."""
        assert self.reference is not None
        return runtime.draw_inputs(self.reference.module, seed, self.lease.device, None, on_cpu=self.kernelbench_seeding)

    def expected(self, inputs: list[Any]) -> list[torch.Tensor]:
        """Reference outputs under the preset's precision (the parent is strict unless told otherwise)."""
        assert self.reference is not None
        if self.config.precision == "strict":
            return self.reference.outputs(inputs)
        with runtime.precision(self.config.precision):
            return self.reference.outputs(inputs)


# -- the steps ---------------------------------------------------------------------------------
def load(ctx: Context) -> None:
    """Build the reference here and the candidate in the worker, from the same weight seed.

    The seed is secret, or KernelBench's public one under `seeding=kernelbench`; the reference's
    parameters are copied into ModelNew unless `copy_reference_state` is off.
    """
    weight_seed = ctx.config.public_seed if ctx.kernelbench_seeding else derive_seed(ctx.secret, "weights")
    ctx.reference = Reference(ctx.problem, weight_seed, ctx.lease.device, ctx.small)
    overrides = ctx.problem.meta["small"] if ctx.small else {}
    rules = {} if ctx.config.precision == "strict" and ctx.config.copy_reference_state else {
        "precision": ctx.config.precision, "copy_state": ctx.config.copy_reference_state}
    reply, _ = ctx.lease.worker.request(
        p.Load(problem_source=ctx.problem.source, problem_label=ctx.problem.path or f"<{ctx.problem.id}>",
               candidate_source=ctx.source, weight_seed=weight_seed, size_overrides=overrides,
               extensions_dir=ctx.build.extensions_dir if ctx.build else None, **rules),
        timeout=ctx.config.import_timeout_s)
    if reply.ok:
        return
    if reply.oom and not ctx.alone:
        raise RetryAlone()
    status = {"import": Status.COMPILE_ERROR, "format": Status.FORMAT_ERROR, "integrity": Status.REJECTED,
              "construct": Status.RUNTIME_ERROR}.get(reply.stage, Status.RUNTIME_ERROR)
    reason = {"import": "importing the candidate failed", "construct": "constructing ModelNew failed",
              "integrity": f"integrity: {reply.error}",
              "problem": "the problem itself failed to load in the worker"}.get(reply.stage, reply.error or "load failed")
    raise Verdict(status, trim(reason, 600), reply.error)


def reply_cap(config: EvalConfig, reference_output_bytes: int = 0) -> int:
    """The most tensor bytes one worker reply may carry: the outputs of up to max(3, timed_input_sets) forwards, each
    at most `eval.max_output_bytes` or, when larger, the reference's own output size."""
    return max(config.max_output_bytes, reference_output_bytes) * max(p.SAMPLED_REPS, config.timed_input_sets)


def trials(ctx: Context) -> None:
    """Fresh inputs per trial (and every hidden shape set, unless off), outputs compared here, inputs
    must stay unchanged. Each trial holds the GPU gate shared on its own (the step is "per_trial")."""
    assert ctx.reference is not None
    ref, atol_rtol = ctx.reference, ctx.tolerance()
    plan: list[tuple[str, int | None]] = [(f"trial{t}", None) for t in range(max(2, ctx.config.trials))]
    if ctx.config.hidden_shapes:
        plan += [(f"extra{j}", j) for j in range(ref.extra_count())]
    public = runtime.kernelbench_trial_seeds(ctx.config.public_seed, len(plan)) if ctx.kernelbench_seeding else []
    for trial, (label, extra) in enumerate(plan):
        seed = public[trial] if public else derive_seed(ctx.secret, label)
        with ctx.lease.gate.hold("shared"):
            inputs = runtime.draw_inputs(ref.module, seed, ctx.lease.device, extra, on_cpu=bool(public))
            fingerprint = runtime.input_fingerprint(inputs) if ctx.worker_draws else []
            expected = ctx.expected(inputs)
            ctx.allow_outputs(expected)
            reply, outputs = _run_trial(ctx, inputs, fingerprint, p.Run(seed=seed, extra=-1 if extra is None else extra,
                                                                         on_cpu=bool(public)))
            ctx.result.trials = trial + 1
            mismatch = compare(expected, outputs, *atol_rtol, trial=trial)
            del inputs, expected, outputs
        if mismatch is not None:
            shape_note = f" on hidden input shapes #{extra}" if extra is not None else ""
            ctx.result.mismatch = mismatch
            raise Verdict(Status.INCORRECT, f"output {mismatch.output}: {mismatch.reason} (trial {trial}{shape_note})")
        if reply.mutated_inputs:
            raise Verdict(Status.INCORRECT, f"the candidate modified input(s) {reply.mutated_inputs} in place; "
                                            "the reference leaves its inputs unchanged")


def _run_trial(ctx: Context, inputs: list[Any], fingerprint: list[str], drawn: p.Run) -> tuple[Any, list[torch.Tensor]]:
    """One trial: the worker draws the inputs itself when its draws match ours, else they are carried over."""
    timeout = ctx.config.call_timeout_s
    if ctx.worker_draws:
        reply, outputs = ctx.request(drawn, timeout=timeout)
        if reply.fingerprint == fingerprint:
            return reply, outputs
        _stop_worker_draws(ctx)
    spec, tensors = encode_args(inputs)
    return ctx.request(p.Run(args=spec, poison=True), tensors, timeout=timeout)


def _stop_worker_draws(ctx: Context) -> None:
    ctx.worker_draws = False
    ctx.result.flags.append("inputs carried to the worker: its draws from the same seed differed from the "
                            "parent's (get_inputs() is not reproducible across processes)")


def stage_timing_inputs(ctx: Context) -> None:
    """Send the timing input sets ahead, so the exclusive window holds only GPU work.

    Secret seeding gives the two sides different values; KernelBench's times both on the inputs
    of its public seed. Where the worker draws the sets itself, the parent draws each once to
    check its fingerprint and keeps only the seeds: it never holds every set at once.
    """
    kb = ctx.kernelbench_seeding
    draw = ctx.draw_timing_inputs

    def seeds_for(side: str, n: int) -> list[int]:
        return [ctx.config.public_seed if kb else derive_seed(ctx.secret, f"time-{side}{k}") for k in range(n)]

    first = draw(seeds_for("r", 1)[0])
    pool = staged_set_count(ctx, tensor_bytes(first))
    seeds = seeds_for("r", pool) + seeds_for("c", pool)
    spec, tensors = encode_args(first)
    staged = p.Stage(args=spec, n_inputs=len(tensors), ref_sets=pool, cand_sets=pool)
    timeout = ctx.config.call_timeout_s
    if ctx.worker_draws:
        fingerprints = [runtime.input_fingerprint(first)]
        del first, tensors
        fingerprints += [runtime.input_fingerprint(draw(seed)) for seed in seeds[1:]]
        reply, _ = ctx.request(replace(staged, seeds=seeds, on_cpu=kb), timeout=timeout)
        if reply.fingerprints == fingerprints:
            ctx.timed_seeds = seeds[pool:]
            return
        _stop_worker_draws(ctx)
        first = draw(seeds[0])
    sets = [first] + [draw(seed) for seed in seeds[1:]]
    ctx.timed_sets = sets[pool:]
    ctx.request(staged, [t for s in sets for t in encode_args(s)[1]], timeout=timeout)


# Each worker's staged timing sets, and the timed outputs it keeps for the parent, take at most this share of
# the device's memory (a GPU's 4 workers: a quarter together). Past it, a side gets fewer sets, down to one, and
# the kept outputs wait in host memory. Sets that large are far bigger than L2, which is flushed before every
# repetition anyway, and under the strict rules every candidate repetition gets fresh values: fewer sets change
# no measurement, where holding 3 + 3 sets of a 6 GiB input (KernelBench's scaled level 1) ran the device out of
# memory and failed an honest candidate.
DEVICE_SHARE = 1 / 16


def tensor_bytes(values: list[Any]) -> int:
    """Bytes held by the tensors among `values` (inputs or outputs of one forward)."""
    return sum(t.nbytes for t in values if isinstance(t, torch.Tensor))


def device_budget(device: torch.device) -> int | None:
    """Bytes of device memory one worker's staged sets, or its kept outputs, may take (None: no device limit)."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(device).total_memory * DEVICE_SHARE)


def fitting_set_count(wanted: int, set_bytes: int, device: torch.device) -> int:
    """Timing input sets per side: `wanted`, fewer (at least one) where two sides' sets would not fit the budget."""
    budget = device_budget(device)
    wanted = max(1, wanted)
    if budget is None or set_bytes <= 0:
        return wanted
    return max(1, min(wanted, budget // (2 * set_bytes)))


def staged_set_count(ctx: Context, set_bytes: int) -> int:
    """`fitting_set_count` for this evaluation; a smaller count than `eval.timed_input_sets` is flagged."""
    wanted = max(1, ctx.config.timed_input_sets)  # as fitting_set_count counts it
    pool = fitting_set_count(wanted, set_bytes, ctx.lease.device)
    if pool < wanted:
        ctx.result.flags.append(f"timed on {pool} input set(s) per side, not {wanted}: one set takes "
                                f"{set_bytes / 2**30:.2f} GiB, and a worker's staged sets stay under "
                                f"{DEVICE_SHARE:.2%} of the device's memory")
    return pool


def holds_large_tensors(ctx: Context) -> bool:
    """Whether this evaluation's outputs were past the budget: then the parent hands its cached device memory back
    when the evaluation ends, so the next evaluations' workers can have it."""
    budget = device_budget(ctx.lease.device)
    return budget is not None and ctx.output_bytes > budget


def timed_outputs_on_host(ctx: Context) -> bool:
    """Whether the timed outputs the worker keeps would take more of the device than the budget allows."""
    budget = device_budget(ctx.lease.device)
    kept = max(p.SAMPLED_REPS, ctx.config.timed_input_sets) * ctx.output_bytes
    return budget is not None and kept > budget


def own_kernels(ctx: Context) -> None:
    """The candidate's own kernels must have run; on a GPU, report their share of GPU time."""
    reply, _ = ctx.request(p.Kernels(), timeout=ctx.config.call_timeout_s)
    report = ctx.report
    own_names = set(reply.triton_own) | set(report.cuda_kernels)
    profile = [(str(n), float(ms)) for n, ms in reply.profile]
    launched = set(reply.triton_own)
    share = None
    if profile:
        total = sum(ms for _, ms in profile)
        own = [(n, ms) for n, ms in profile if kernel_base_name(n) in own_names and not is_library_kernel(n)]
        own_ms = sum(ms for _, ms in own)
        launched |= {kernel_base_name(n) for n, _ in own}
        share = own_ms / total if total > 0 else None
    ctx.result.kernels = KernelShare(own_kernels_launched=sorted(launched), own_kernels_defined=report.kernels,
                                     own_time_fraction=share, top_kernels=profile[:8])
    if ctx.config.own_kernel_policy != "reject":
        return
    library_named = sorted(n for n in own_names if is_library_kernel(n))
    hint = (f" (kernels named like a library's, {', '.join(library_named)}, never count as the candidate's own: "
            "rename them)") if library_named else ""
    if not launched:
        raise Verdict(Status.REJECTED, "none of the candidate's own kernels ran during forward (defined: "
                                       f"{', '.join(report.kernels)}); the work was done by PyTorch or a fallback "
                                       f"path{hint}")
    shortfall = own_share_shortfall(share, ctx.config.min_own_time_fraction)
    if shortfall:
        raise Verdict(Status.REJECTED, shortfall + hint)


def own_share_shortfall(share: float | None, minimum: float) -> str | None:
    """Why own kernels' share of forward's GPU time is too small (`eval.min_own_time_fraction`), or None.

    A share that could not be measured (None: CPU interpreter, no profile) or a minimum of 0 never rejects.
    """
    if share is None or minimum <= 0 or share >= minimum:
        return None
    return (f"the candidate's own kernels took {share:.2%} of forward's GPU time, under the minimum of "
            f"{minimum:.2%} (eval.min_own_time_fraction): library kernels (PyTorch, cuBLAS) did the work and the "
            "own kernels look like a decoy; write the substantial part of the computation as your own kernels")


def hidden_work(ctx: Context) -> None:
    """Work left running after return (side streams, threads) must not exist."""
    reply, _ = ctx.request(p.HiddenWork(reps=_BACK_TO_BACK, batches=_HIDDEN_WORK_BATCHES),
                           timeout=ctx.config.timing_timeout_s)
    if reply.violations:
        raise Verdict(Status.REJECTED, "integrity: " + "; ".join(reply.violations))
    if reply.stream_mismatches:
        raise Verdict(Status.REJECTED, "integrity: the output changed after a device-wide synchronisation, so work "
                                       "was still running outside the current stream when forward returned")
    finding, ctx.result.hidden_work = judge_back_to_back(reply.candidate, reply.reference)
    if finding:
        raise Verdict(Status.REJECTED, f"integrity: {finding}")


def judge_back_to_back(candidate: list[dict[str, float]],
                       reference: list[dict[str, float]]) -> tuple[str | None, dict[str, float]]:
    """Why back-to-back batches show work outside the timed stream (or None), and the numbers, in us per call.

    Each batch: `wall_ms`, `event_ms`, `excess_ms_per_call`, `calls`. Unexplained wall time per call is
    the candidate's lowest batch excess minus the reference's median; it must stay under the limit
    (see `_HIDDEN_WORK_SHARE`).
    """
    if not candidate or not reference:
        raise ValueError("hidden-work check: no back-to-back batches measured")
    lowest = min(b["excess_ms_per_call"] for b in candidate)
    reference_excess = max(statistics.median(b["excess_ms_per_call"] for b in reference), 0.0)
    per_call = statistics.median(b["event_ms"] / max(b["calls"], 1) for b in candidate)
    limit = max(_HIDDEN_WORK_FLOOR_MS, _HIDDEN_WORK_SHARE * per_call)
    unexplained = lowest - reference_excess
    numbers = {"unexplained_us": round(unexplained * 1000, 3), "limit_us": round(limit * 1000, 3),
               "candidate_lowest_us": round(lowest * 1000, 3), "reference_median_us": round(reference_excess * 1000, 3),
               "call_us": round(per_call * 1000, 3), "batches": len(candidate), "calls": int(candidate[0]["calls"])}
    if unexplained <= limit:
        return None, numbers
    return (f"in every one of {len(candidate)} batches of {numbers['calls']} back-to-back calls, wall time exceeded "
            f"the sum of the calls' CUDA events by at least {lowest * 1000:.1f} us per call (the reference's median: "
            f"{reference_excess * 1000:.1f} us; allowed beyond it: {limit * 1000:.1f} us, for calls of "
            f"{per_call * 1000:.1f} us): work runs outside the timed stream (side streams, threads)"), numbers


def time_candidate(ctx: Context) -> None:
    """Timing of reference and candidate; under the strict rule every candidate repetition gets unseen inputs."""
    fresh = ctx.config.timing_method == "adaptive" and ctx.config.timed_output_checks
    ctx.timing_nonce = secrets.randbits(62) | 1 if fresh else 0
    on_host = timed_outputs_on_host(ctx)
    reply, outputs = ctx.request(p.Time(**timing_rule(ctx.config), nonce=ctx.timing_nonce,
                                        graphs=ctx.graphs, host_outputs=on_host),
                                 timeout=ctx.config.timing_timeout_s, on_host=on_host)
    if ctx.graphs and reply.timing_mode == "capture_failed":
        ctx.lease.worker.kill()
        raise RetryEager(reply.graph_note[:400] or "a CUDA-graph capture failed")
    if reply.violations:
        raise Verdict(Status.REJECTED, "integrity: " + "; ".join(reply.violations))
    ctx.timed_outputs = outputs
    launch.record_mode(ctx, reply)
    ctx.sampled_reps = reply.sampled_reps if reply.fresh_inputs else []
    if fresh and not reply.fresh_inputs:
        ctx.result.flags.append("timed inputs rotated among the staged sets: the problem's get_inputs() draws "
                                "other shapes each time, so fresh inputs per repetition could not be used")
    if ctx.config.timed_output_checks and reply.inconsistent_timed_outputs:
        raise Verdict(Status.REJECTED, f"integrity: {reply.inconsistent_timed_outputs} timed runs returned "
                                       "different outputs for the same inputs (stale, cached or skipped work)")
    result = ctx.result
    result.reference_timing = Timing.from_dict(reply.reference)
    result.candidate_timing = Timing.from_dict(reply.candidate)
    result.timing_meaningful = True
    if ctx.config.timing_statistic == "median":
        result.speedup = result.reference_timing.median_ms / result.candidate_timing.median_ms
    else:  # the mean is not a field of Timing: the note below keeps both means with the result
        result.speedup = reply.reference["mean_ms"] / reply.candidate["mean_ms"]
    if ctx.config.timing_method != "adaptive" or ctx.config.timing_statistic != "median" or not ctx.config.l2_flush:
        result.flags.append(timing_note(ctx.config, reply.reference, reply.candidate))


def timed_outputs(ctx: Context) -> None:
    """What the candidate returned while being timed must be right too.

    With fresh inputs, the outputs are those of repetitions the worker sampled at random as they
    ran; their inputs are redrawn here from the nonce, so a memo or a skipped call shows as wrong.
    """
    assert ctx.reference is not None
    if ctx.sampled_reps:
        per_rep = len(ctx.timed_outputs) // len(ctx.sampled_reps)
        for i, rep in enumerate(ctx.sampled_reps):
            inputs = ctx.reference.inputs(derive_seed(ctx.timing_nonce, f"rep{rep}"))
            got = ctx.timed_outputs[i * per_rep:(i + 1) * per_rep]
            mismatch = compare(ctx.expected(inputs), got, *ctx.tolerance())
            if mismatch is not None:
                ctx.result.mismatch = mismatch
                ctx.result.speedup = None
                raise Verdict(Status.INCORRECT, f"the output of timed repetition {rep} (fresh inputs) is wrong: "
                                                f"output {mismatch.output}: {mismatch.reason}")
        return
    pool = len(ctx.timed_sets) or len(ctx.timed_seeds)
    per_set = len(ctx.timed_outputs) // pool if pool else 0
    for k in range(pool):
        inputs = ctx.timed_sets[k] if ctx.timed_sets else ctx.draw_timing_inputs(ctx.timed_seeds[k])
        expected = ctx.expected(inputs)
        mismatch = compare(expected, ctx.timed_outputs[k * per_set:(k + 1) * per_set], *ctx.tolerance())
        if mismatch is not None:
            ctx.result.mismatch = mismatch
            ctx.result.speedup = None
            raise Verdict(Status.INCORRECT, f"an output of a timed run is wrong: output {mismatch.output}: "
                                            f"{mismatch.reason}")


def in_order(ctx: Context) -> None:
    """The worker's replies are still in step: no reply a candidate forged earlier displaced a real one."""
    ctx.request(p.Sync(), timeout=ctx.config.call_timeout_s)


def speed_of_light(ctx: Context) -> None:
    """SOL fraction against the probed ceilings; flag times under the roofline floor."""
    result = ctx.result
    if ctx.ceilings is None or result.candidate_timing is None:
        return
    result.sol_fraction, flag = judge_speed(ctx.problem, ctx.ceilings, result.candidate_timing.median_ms / 1000.0)
    if flag:
        result.flags.append(flag)


def judge_speed(problem: Problem, ceilings: Ceilings, seconds: float) -> tuple[float | None, str]:
    """SOL fraction of a measured time, and an audit flag when it beats the roofline floor.

    FLOPs and bytes come from the problem's META, or are traced from its source when it has none.
    """
    flops, nbytes = problem_size(problem)
    floor = ceilings.floor_s(flops, nbytes, problem.dtype)
    if floor is None:
        return None, ""
    if seconds < IMPLAUSIBLE_BELOW_FLOOR * floor:
        return floor / seconds, (f"implausible: {seconds * 1e6:.1f} us beats the roofline floor of {floor * 1e6:.1f} us "
                                 "(FLOPs / peak, bytes / bandwidth); audit this result")
    return floor / seconds, ""


@dataclass(frozen=True)
class Step:
    """One check: its name (a key of `phase_seconds`), function, GPU access, and whether it runs only on a GPU.

    access: "shared", "exclusive", "none", or "per_trial" (the step holds the gate itself, shared,
    around each unit of its GPU work).
    """

    name: str
    run: Callable[[Context], None]
    access: str
    gpu_only: bool = False
    enabled: Callable[[EvalConfig], bool] = lambda config: True  # a preset may leave the step out


PIPELINE: tuple[Step, ...] = (
    Step("load", load, "shared"),
    Step("correctness", trials, "per_trial"),
    Step("stage", stage_timing_inputs, "shared", gpu_only=True),
    Step("kernels", own_kernels, "exclusive"),
    Step("hidden_work", hidden_work, "exclusive", gpu_only=True, enabled=lambda c: c.hidden_work_check),
    Step("timing", time_candidate, "exclusive", gpu_only=True),
    Step("host_bound", launch.host_bound, "exclusive", gpu_only=True),
    Step("timed_outputs", timed_outputs, "shared", gpu_only=True, enabled=lambda c: c.timed_output_checks),
    Step("speed_of_light", speed_of_light, "none", gpu_only=True),
    Step("in_order", in_order, "none"),
)


def run_pipeline(ctx: Context) -> None:
    """Run every step in order, holding the GPU gate per run of same-access steps; decide `correct` at the end."""
    ctx.result.preset = ctx.config.preset
    steps = [s for s in PIPELINE if (ctx.on_gpu or not s.gpu_only) and s.enabled(ctx.config)]
    i = 0
    while i < len(steps):
        j = i
        while j < len(steps) and steps[j].access == steps[i].access:
            j += 1
        with ctx.lease.gate.hold("none" if steps[i].access == "per_trial" else steps[i].access):
            for step in steps[i:j]:
                t0 = time.perf_counter()
                try:
                    step.run(ctx)
                except torch.OutOfMemoryError:  # the parent's own share of the GPU ran out
                    if ctx.alone:
                        raise
                    raise RetryAlone() from None
                finally:
                    ctx.result.phase_seconds[step.name] = round(time.perf_counter() - t0, 4)
        i = j
    notes = [] if ctx.result.timing_meaningful else ["CPU interpreter: timings not meaningful"]
    if ctx.small:
        notes.append("checked at the problem's reduced sizes")
    ctx.result.status = Status.CORRECT
    ctx.result.reason = "correct" + (f" ({'; '.join(notes)})" if notes else "")


def timing_rule(config: EvalConfig) -> dict[str, Any]:
    """The timing fields of a `Time` or `TimeCompiled` request.

    Fields of KernelBench's method appear only when they differ from the strict rule, so the
    strict rule (which keys the baseline cache) reads as it did before they existed.
    """
    rule: dict[str, Any] = {"min_reps": config.min_reps, "max_reps": config.max_reps,
                            "target_rel_stderr": config.target_rel_stderr, "budget_s": config.time_budget_s,
                            "warmup_ms": config.warmup_ms}
    extra = {"method": config.timing_method, "flush": config.l2_flush, "reps": config.fixed_reps,
             "warmup_calls": config.fixed_warmup_calls, "check_outputs": config.timed_output_checks}
    if config.timing_method == "adaptive":
        extra.pop("reps"), extra.pop("warmup_calls")
    strict = {"method": "adaptive", "flush": True, "check_outputs": True}
    rule.update({k: v for k, v in extra.items() if strict.get(k) != v})
    return rule


def timing_note(config: EvalConfig, reference: dict[str, float], candidate: dict[str, float]) -> str:
    """How a non-default timing was taken, with both sides' mean and median (Timing keeps only the median).

    Times are printed to the nanosecond, so the speedup can be recomputed from the note even at a few µs."""
    if config.timing_method == "fixed":
        method = f"{config.fixed_reps} calls after {config.fixed_warmup_calls} warm-up calls, each synchronised"
    else:
        method = "adaptive, interleaved"
    return (f"timing ({config.preset}): {method}, L2 {'flushed' if config.l2_flush else 'not flushed'}, speedup from "
            f"the {config.timing_statistic}; reference mean {reference.get('mean_ms', float('nan')):.6f} ms, "
            f"median {reference['median_ms']:.6f} ms; candidate mean {candidate.get('mean_ms', float('nan')):.6f} ms, "
            f"median {candidate['median_ms']:.6f} ms")


# Kernels of the libraries a candidate calls: PyTorch (incl. its FlashAttention copy), CUB/Thrust, CUTLASS, cuBLAS,
# cuDNN. Namespaces honest code would reuse for its own kernels (`flash`, say) are left out; vendor GEMM names
# are recognised by their tile shapes (`ampere_sgemm_128x64_nn`), not by a prefix an honest name could start with.
_LIBRARY_NAMESPACES = frozenset({"at", "c10", "cub", "thrust", "cutlass", "cudnn", "xmma_cudnn", "pytorch_flash",
                                 "cublas", "cublasLt"})
_LIBRARY_NAME = re.compile(r"^(nvjet_|cutlass_\d|cublas|cudnn|(ampere|volta|turing|maxwell|sm\d+)_\w*?\d+x\d+)|_cublas$")


def kernel_base_name(profiler_name: str) -> str:
    """A kernel's own name as the profiler reports it, in any of the forms a CUDA kernel takes.

    `void ns::my_kernel<float>(float*, int)`, `void (anonymous namespace)::k<16>(float*)` and the
    mangled `_ZN2ns9my_kernelIfEEvPfi` or `_Z9my_kernelPfi` all give `my_kernel`/`k`; Triton and
    `extern "C"` names pass through.
    """
    return _qualified_name(profiler_name)[-1]


def is_library_kernel(profiler_name: str) -> bool:
    """Whether a profiled kernel belongs to a library (PyTorch, CUB, CUTLASS, cuBLAS, cuDNN, ...).

    Such a kernel never counts as the candidate's own, whatever the candidate named its kernels: a
    decoy could otherwise define (or launch on one element) a kernel named like the library kernel
    that does the real work, e.g. `vectorized_elementwise_kernel`, and have that work counted as its own.
    """
    parts = _qualified_name(profiler_name)
    return (len(parts) > 1 and parts[0] in _LIBRARY_NAMESPACES) or bool(_LIBRARY_NAME.search(parts[-1]))


def _qualified_name(profiler_name: str) -> list[str]:
    """The namespace path and name of a profiled kernel, template arguments and signature dropped."""
    name = profiler_name.strip()
    if name.startswith("_Z"):
        return _demangled_path(name) or [name]
    name = name.replace("(anonymous namespace)", "_anonymous_")
    name = name.split("(", 1)[0]
    depth, kept = 0, []
    for ch in name:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            kept.append(ch)
    words = "".join(kept).split()
    return (words[-1] if words else name).split("::")


def _demangled_path(mangled: str) -> list[str]:
    """The identifiers of an Itanium-mangled function name (`_Z<len><id>` or `_ZN<len><id>...[I...]E`)."""
    nested = mangled.startswith("_ZN")
    rest = mangled[3:] if nested else mangled[2:]
    path = []
    while rest and rest[0].isdigit():
        digits = len(rest) - len(rest.lstrip("0123456789"))
        length = int(rest[:digits])
        path.append(rest[digits:digits + length])
        rest = rest[digits + length:]
        if not nested:
            break
    return ["_anonymous_" if part.startswith("_GLOBAL__N") else part for part in path]
