"""The bounds on what a worker claims, judged from a finished measurement (`eval.timing.measure`), parent side.

The wall bound: a block's wall time, observed by the parent, minus the sum of the event times the worker reports,
is the time per repetition the worker spent outside its timed intervals. For the clean reference process that is
the loop's own overhead (flush, GPU lead, input draw, capture, the round trip). A candidate's blocks must show no
more than that, plus `WALL_SHARE` of its own time per call (at least `WALL_FLOOR_MS`): otherwise it either hid
work from its events (side streams, threads, work after the end event) or reported times it did not take.

The loop's own GPU work a repetition is bounded apart (`LOOP_GPU_FLOOR_MS`), work concentrated in a few calls of
every block is refused (`concentration`), and every timed output's capture is compared with the reference's for
the same repetition (`first_capture_mismatch`).
"""

from __future__ import annotations

import math
import statistics

import torch

from eval.crossing import _capture as capture_math
from eval.crossing import protocol as p
from eval.timing.measure import Block, Measurement

# The wall bound, per repetition: the candidate's lowest block excess over the reference's lowest block excess must
# stay under the largest of WALL_FLOOR_MS, WALL_SHARE x the candidate's median call and OVERHEAD_SHARE x the
# reference's excess. Why: both processes run the same loop (input draws, copies, flush, GPU lead, capture, the
# round trip), so their excess differs by noise, which only ever adds time to some blocks. On the H100 the loop's
# GPU part agreed between processes within about 20 us a repetition; the host part (draws, request and reply) did
# not, by 100-300 us, until both processes ran on one core (`eval.process._affinity`). `harness bench trusted` prints
# each honest solution's figures against this limit.
WALL_SHARE = 0.25
OVERHEAD_SHARE = 0.05
# A candidate over the bound is timed once more with this many A B B A pairs, and judged on that timing alone: an
# honest process's lowest block falls with more blocks, a forger's or hider's gap stays in every block.
SECOND_LOOK_PAIRS = 6
WALL_FLOOR_MS = 0.03
# The loop's own GPU work a repetition (lead-in, capture, between: `protocol.OUTSIDE_PARTS`, each block's sum over its
# repetitions), the candidate's lowest block less the reference's lowest, must stay under the larger of
# LOOP_GPU_FLOOR_MS and LOOP_GPU_SHARE x the reference's. Why: this part is GPU time, without the host noise that
# sets the wall bound's allowance, and it runs the same kernels in both processes: the 15 honest solutions on an
# H200 differed by -4.2 to +4.0 us (2026-11-28), while work queued aside to run beside the loop's kernels (class 9)
# stretched the lead-in by 99 us at 2**26 elements and hid inside the wall bound's allowance. A candidate can
# under-report these parts too; the time it moves out of them then stays in its excess, under the wall bound.
LOOP_GPU_FLOOR_MS = 0.015
LOOP_GPU_SHARE = 0.05


def wall_bound(meas: Measurement, reference: str = "reference", candidate: str = "candidate"
               ) -> tuple[str | None, dict[str, float]]:
    """Why the candidate's reported times are below what its blocks' wall time allows (or None), with the numbers
    (us per repetition)."""
    ref_blocks, cand_blocks = meas.blocks.get(reference, []), meas.blocks.get(candidate, [])
    if not ref_blocks or not cand_blocks:
        return None, {}
    cand_excess = [b.excess_ms for b in cand_blocks]
    ref_excess = [b.excess_ms for b in ref_blocks]
    lowest = min(cand_excess)
    overhead = min(ref_excess)  # lowest against lowest: noise only ever adds time, to either side's blocks
    per_call = statistics.median(meas.samples[candidate])
    limit = max(WALL_FLOOR_MS, WALL_SHARE * per_call, OVERHEAD_SHARE * overhead)
    unexplained = lowest - overhead
    us = lambda ms: round(ms * 1000, 3)  # noqa: E731
    numbers = {"unexplained_us": us(unexplained), "limit_us": us(limit), "candidate_lowest_us": us(lowest),
               "candidate_median_us": us(statistics.median(cand_excess)), "reference_overhead_us": us(overhead),
               "reference_lowest_us": us(min(ref_excess)), "reference_highest_us": us(max(ref_excess)),
               "call_us": us(per_call), "blocks": len(cand_blocks),
               # each candidate block against the reference block of the same repetitions, timed next to it: a
               # steady gap between the two processes shows here, where noise in single blocks does not (recorded
               # for audits; the verdict stays lowest against lowest)
               "paired_gap_median_us": us(statistics.median(c.excess_ms - r.excess_ms
                                                            for r, c in zip(ref_blocks, cand_blocks))),
               **_outside_gaps(ref_blocks, cand_blocks)}
    loop_gpu = _loop_gpu_bound(ref_blocks, cand_blocks, numbers)
    if unexplained <= limit:
        return loop_gpu, numbers
    return (f"in every one of {len(cand_blocks)} timed blocks the candidate's process took at least "
            f"{lowest * 1000:.1f} us per repetition more than the CUDA events it reported (the clean reference "
            f"process's loop overhead, its lowest block: {overhead * 1000:.1f} us; allowed beyond it: {limit * 1000:.1f} us, for "
            f"calls of {per_call * 1000:.1f} us): work ran outside its timed intervals, or it reported times it "
            "did not take"), numbers


def _loop_gpu_bound(ref_blocks: list[Block], cand_blocks: list[Block], numbers: dict[str, float]) -> str | None:
    """Why the loop's own GPU work took longer in the candidate's process than in the reference's (or None); adds
    the figures to `numbers` (us a repetition). See LOOP_GPU_FLOOR_MS."""
    refs = [sum(b.outside_ms) / max(b.reps, 1) for b in ref_blocks if b.outside_ms]
    cands = [sum(b.outside_ms) / max(b.reps, 1) for b in cand_blocks if b.outside_ms]
    if not refs or not cands:
        return None
    reference = min(refs)
    gap, limit = min(cands) - reference, max(LOOP_GPU_FLOOR_MS, LOOP_GPU_SHARE * reference)
    numbers.update(loop_gpu_gap_us=round(gap * 1000, 3), loop_gpu_limit_us=round(limit * 1000, 3))
    if gap <= limit:
        return None
    return (f"in every one of {len(cands)} timed blocks the loop's own GPU work (lead-in with its flush, capture, "
            f"between) took at least {gap * 1000:.1f} us per repetition longer in the candidate's process than in the "
            f"clean reference process's (its lowest block: {reference * 1000:.1f} us; allowed: {limit * 1000:.1f} us): "
            "work ran on the GPU beside the loop's kernels, outside the candidate's timed intervals")


def _outside_gaps(ref_blocks: list[Block], cand_blocks: list[Block]) -> dict[str, float]:
    """The loop's own GPU time a repetition, by part (`protocol.OUTSIDE_PARTS`), and the rest of each block's excess
    (`host`: the time no event accounts for, the draws, the request and the reply), each the candidate's lowest
    block less the reference's lowest (us). Work queued aside that competes with the loop's kernels shows in the
    GPU parts at GPU precision, where the wall time also holds host noise; a steady offset between the processes'
    host work shows in `host_gap_us`. Recorded for audits; their sum is judged by `_loop_gpu_bound`."""
    refs = [b for b in ref_blocks if b.outside_ms]
    cands = [b for b in cand_blocks if b.outside_ms]
    if not refs or not cands:
        return {}

    def per_rep(b: Block) -> list[float]:
        parts = [t / max(b.reps, 1) for t in b.outside_ms]
        return [*parts, b.excess_ms - sum(parts)]

    names = [*p.OUTSIDE_PARTS, "host"]
    lowest = lambda blocks, k: min(per_rep(b)[k] for b in blocks)  # noqa: E731
    gaps = {f"{name}_gap_us": round((lowest(cands, k) - lowest(refs, k)) * 1000, 3) for k, name in enumerate(names)}
    return {**gaps, "reference_lead_in_us": round(lowest(refs, 0) * 1000, 3),
            "reference_host_us": round(lowest(refs, len(names) - 1) * 1000, 3)}


# A block's calls may take at most this many times their median in total, in every block: the speedup is a ratio of
# medians, so work moved into a few calls of each block (the others returning outputs computed there) would not count.
# Honest blocks on the H100 sum to 1.0-1.1x their median (a slow call now and then).
CONCENTRATION_LIMIT = 1.5


def concentration(meas: Measurement, candidate: str = "candidate") -> tuple[str | None, float]:
    """Why the candidate's work sits in a few calls of every block (or None), with the lowest block's ratio of its
    total event time to reps x its median."""
    ratios = [b.event_ms / (b.reps * b.median_ms) for b in meas.blocks.get(candidate, []) if b.median_ms > 0]
    if not ratios:
        return None, 0.0
    lowest = min(ratios)
    if lowest <= CONCENTRATION_LIMIT:
        return None, lowest
    return (f"in every one of {len(ratios)} timed blocks the candidate's calls took at least {lowest:.1f}x their "
            f"median time in total (allowed: {CONCENTRATION_LIMIT:g}x): its work is concentrated in a few calls of "
            "each block, which the median would not count"), lowest


def first_capture_mismatch(meas: Measurement, atol: float, rtol: float, reference: str = "reference",
                           candidate: str = "candidate") -> str | None:
    """The first timed repetition whose output disagrees with the reference's for the same inputs, as a reason."""
    ref_caps, cand_caps = meas.captures.get(reference, {}), meas.captures.get(candidate, {})
    if meas.leaves.get(reference) != meas.leaves.get(candidate):
        return (f"timed outputs are shaped {meas.leaves.get(candidate)}, the reference's "
                f"{meas.leaves.get(reference)}")
    missing = sorted(set(ref_caps) - set(cand_caps))
    if missing:
        return f"timed repetition {missing[0]} returned no capture of its output"
    for rep in sorted(ref_caps):
        for leaf, (ref_row, cand_row) in enumerate(zip(ref_caps[rep], cand_caps[rep])):
            why = capture_mismatch(ref_row, cand_row, atol, rtol)
            if why:
                return f"the output of timed repetition {rep} is wrong: output {leaf}: {why}"
    return None


# Projections are compared within PROJECTION_SIGMAS x sqrt(sum of squared elementwise tolerances): for an output
# within tolerance everywhere, a projection with secret random signs exceeds that with probability at most
# 2 exp(-PROJECTION_SIGMAS**2 / 2) (Hoeffding), about 1e-14, so an honest kernel is never rejected by it.
PROJECTION_SIGMAS = 8.0


def capture_mismatch(ref: torch.Tensor, cand: torch.Tensor, atol: float, rtol: float) -> str | None:
    """Why a candidate output's capture disagrees with the reference's for the same inputs and key, or None.

    Sampled elements are compared one by one (NaN must match NaN, infinities exactly); non-finite counts
    exactly; projections within the Hoeffding bound above, so any error spread over the output shows.
    """
    extra = capture_math.CAPTURE_EXTRA
    samples = ref.numel() - extra
    r, c = ref[samples:], cand[samples:]
    if c[capture_math.NUMEL] != r[capture_math.NUMEL]:
        return f"it has {int(c[capture_math.NUMEL])} elements, the reference's {int(r[capture_math.NUMEL])}"
    for index, what in ((capture_math.N_NAN, "NaN"), (capture_math.N_POSINF, "+Inf"), (capture_math.N_NEGINF, "-Inf")):
        if c[index] != r[index]:
            return f"{int(c[index])} {what} values where the reference has {int(r[index])}"
    if c[capture_math.NONFINITE_PROJ] != r[capture_math.NONFINITE_PROJ]:
        return "its NaN/Inf values sit at other positions than the reference's"
    rs, cs = ref[:samples], cand[:samples]
    nan_differs = torch.isnan(rs) != torch.isnan(cs)
    both = ~torch.isnan(rs) & ~torch.isnan(cs)
    inf_differs = both & (torch.isinf(rs) | torch.isinf(cs)) & (rs != cs)
    finite = both & torch.isfinite(rs) & torch.isfinite(cs)
    beyond = finite & ((cs - rs).abs() > atol + rtol * rs.abs())
    bad = nan_differs | inf_differs | beyond
    if bool(bad.any()):
        slot = int(bad.nonzero()[0])
        return (f"{int(bad.sum())} of the sampled elements differ (e.g. {float(cs[slot])!r} where the reference has "
                f"{float(rs[slot])!r}; atol {atol:g}, rtol {rtol:g})")
    finite_n = float(r[capture_math.NUMEL] - r[capture_math.N_NAN] - r[capture_math.N_POSINF] - r[capture_math.N_NEGINF])
    spread = math.sqrt(max(finite_n * atol * atol + 2 * atol * rtol * float(r[capture_math.SUM_ABS])
                           + rtol * rtol * float(r[capture_math.SUM_SQ]), 0.0))
    rounding = 1e-9 * (float(r[capture_math.SUM_ABS]) + float(c[capture_math.SUM_ABS]))
    limit = PROJECTION_SIGMAS * spread + rounding
    gaps = (c[capture_math.PROJ:capture_math.PROJ + capture_math.PROJECTIONS]
            - r[capture_math.PROJ:capture_math.PROJ + capture_math.PROJECTIONS]).abs()
    if not bool(torch.isfinite(gaps).all()) or float(gaps.max()) > limit:
        return (f"a secret projection of it differs from the reference's by {float(gaps.max()):.6g}, beyond "
                f"{limit:.6g} ({PROJECTION_SIGMAS:g} x the tolerance's spread): the output is wrong beyond its "
                "sampled elements")
    return None
