"""The timing inputs staged on the device: how many fresh input sets fit a share of its memory, and when large
ones are released."""

from __future__ import annotations


import torch

from eval.crossing import protocol as p
from eval.timing import measure
from eval.steps.context import Context, tensor_bytes
from eval._reference import encode_args
from eval.steps.trials import stop_worker_draws
from problems import derive_seed, input_fingerprint


def stage_timing_inputs(ctx: Context) -> None:
    """`_stage` with the parent's cached device memory handed back before and after, when an evaluation's tensors
    are past a worker's budget: the trials' outputs compared here, and the sets drawn here to check fingerprints,
    stay cached in this process otherwise (20 GiB for a 6 GiB problem on the H100, which ran the candidate's
    staging out of memory)."""
    _release_if_large(ctx, holds_large_tensors(ctx))
    try:
        _stage(ctx)
    finally:
        budget = device_budget(ctx.lease.device)
        _release_if_large(ctx, holds_large_tensors(ctx) or (budget is not None and ctx.input_bytes > budget))


def _release_if_large(ctx: Context, large: bool) -> None:
    if large and ctx.lease.device.type == "cuda":
        torch.cuda.empty_cache()


def _stage(ctx: Context) -> None:
    """Send the timing input sets ahead to both processes, so the exclusive window holds only GPU work.

    Both get the same sets: repetition r runs on the same inputs on both sides. Where the worker
    draws its sets itself, the parent draws each once to check its fingerprint and keeps only the
    seeds (it never holds every set at once); the reference process draws as the parent does.
    KernelBench's seeding times both on the inputs of its public seed.
    """
    kb = ctx.kernelbench_seeding
    draw = ctx.draw_timing_inputs
    first_seed = ctx.config.public_seed if kb else derive_seed(ctx.shared_secret, "time0")
    first = draw(first_seed)
    ctx.input_bytes = tensor_bytes(first)
    count = staged_set_count(ctx, ctx.input_bytes)
    seeds = [first_seed] + [derive_seed(ctx.shared_secret, f"time{k}") for k in range(1, count)]
    spec, tensors = encode_args(first)
    n_tensors = len(tensors)
    reference, candidate = ctx.sides()
    ctx.reference_stage = p.Stage(subject=reference.subject, args=spec, n_inputs=n_tensors, sets=1, seeds=[first_seed],
                                  on_cpu=kb)
    timeout = ctx.config.call_timeout_s
    if ctx.worker_draws:
        fingerprints = [input_fingerprint(first)]
        del first, tensors
        fingerprints += [input_fingerprint(draw(seed)) for seed in seeds[1:]]
        replies = [ctx.request(p.Stage(subject=side.subject, args=spec, n_inputs=n_tensors, sets=count, seeds=seeds,
                                       on_cpu=kb), timeout=timeout, worker=side.worker)[0]
                   for side in (candidate, reference)]
        if all(r.fingerprints == fingerprints for r in replies):
            return
        stop_worker_draws(ctx)
        first = draw(seeds[0])
    sets = [first] + [draw(seed) for seed in seeds[1:]]
    carried = [t for s in sets for t in encode_args(s)[1]]
    for side in (candidate, reference):
        ctx.request(p.Stage(subject=side.subject, args=spec, n_inputs=n_tensors, sets=count), carried,
                    timeout=timeout, worker=side.worker)


# Each process's staged timing sets take at most this share of the device's memory (a GPU's 4 evaluations: a
# quarter together, the reference process's copies included). Past it, the sides get fewer sets, down to one.
# Sets that large are far bigger than L2, which is flushed before every repetition anyway, and under the strict
# rules every repetition gets fresh values: fewer sets change no measurement, where holding 3 + 3 sets of a
# 6 GiB input (KernelBench's scaled level 1) ran the device out of memory and failed an honest candidate.
DEVICE_SHARE = 1 / 16


def device_budget(device: torch.device) -> int | None:
    """Bytes of device memory one worker's staged sets, or its kept outputs, may take (None: no device limit)."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(device).total_memory * DEVICE_SHARE)


def fitting_set_count(wanted: int, set_bytes: int, device: torch.device) -> int:
    """Timing input sets per side: `wanted`, fewer (at least one) where one process's sets would not fit its budget."""
    budget = device_budget(device)
    wanted = max(1, wanted)
    if budget is None or set_bytes <= 0:
        return wanted
    return max(1, min(wanted, budget // set_bytes))


def staged_set_count(ctx: Context, set_bytes: int) -> int:
    """`fitting_set_count` for this evaluation; a smaller count than `eval.timed_input_sets` is flagged."""
    wanted = max(1, ctx.config.timed_input_sets)  # as fitting_set_count counts it
    pool = fitting_set_count(wanted, set_bytes, ctx.lease.device)
    if pool < wanted:
        ctx.result.flags.append(f"timed on {pool} input set(s) per side, not {wanted}: one set takes "
                                f"{set_bytes / 2**30:.2f} GiB, and a worker's staged sets stay under "
                                f"{DEVICE_SHARE:.2%} of the device's memory")
    return pool


def fresh_sets_per_block(ctx: Context) -> int:
    """How many repetitions' fresh inputs one process may stage for a block within its device budget."""
    budget = device_budget(ctx.lease.device)
    return measure.MAX_BLOCK_REPS if not budget or not ctx.input_bytes else max(2, budget // ctx.input_bytes)


def holds_large_tensors(ctx: Context) -> bool:
    """Whether this evaluation's outputs were past the budget: then the parent hands its cached device memory back
    when the evaluation ends, so the next evaluations' workers can have it."""
    budget = device_budget(ctx.lease.device)
    return budget is not None and ctx.output_bytes > budget
