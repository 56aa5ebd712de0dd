"""On a GPU (`pytest -m gpu`): the own-share rule rejects a decoy and keeps honest GEMM + epilogue
hybrids; the back-to-back hidden-work check keeps honest microsecond-scale candidates and still catches
hidden side-stream work the output check cannot see."""

from __future__ import annotations

import pytest
import torch

from eval import Job, Status
from harness.corpus import candidates, flips, own_share

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


EVALUATOR = dict(device="cuda")  # no cache_dir: a fresh result cache for this module


def test_decoy_is_rejected_by_the_share_rule_with_the_share_in_the_reason(evaluator):
    (label, (pid, source)), = own_share.DECOYS.items()
    r = evaluator.evaluate(own_share.problem(pid), source)
    assert r.status is Status.REJECTED, f"{r.status}: {r.reason}"
    assert "eval.min_own_time_fraction" in r.reason and "of forward's GPU time" in r.reason, r.reason
    share = r.kernels.own_time_fraction
    assert share is not None and share < 0.005 and f"{share:.2%}" in r.reason, (share, r.reason)


@pytest.mark.parametrize("label", sorted(own_share.HYBRIDS))
def test_honest_hybrids_are_correct(evaluator, label):
    pid, source = own_share.HYBRIDS[label]
    r = evaluator.evaluate(own_share.problem(pid), source)
    assert r.status is Status.CORRECT, f"{r.status}: {r.reason} {r.error}"
    share = r.kernels.own_time_fraction
    # cuBLAS does the GEMM: the epilogue's share is small but above the minimum
    assert share is not None and 0.005 <= share < 0.5, share


def test_microsecond_candidates_are_not_rejected_for_hidden_work(evaluator):
    """Ten evaluations of each honest us-scale candidate, in flight together (the pool busy): all correct."""
    jobs = [Job(problem, source + f"\n# copy {k}\n") for k in range(10) for _, problem, source in flips.honest_cases()]
    results = evaluator.evaluate_many(jobs)
    bad = [(r.problem_id, r.status.value, r.reason) for r in results if r.status is not Status.CORRECT]
    assert not bad, bad
    assert all(r.hidden_work and r.hidden_work["unexplained_us"] <= r.hidden_work["limit_us"] for r in results)


# The output is computed on the current stream, so the output check sees nothing; ~0.5 ms of GPU
# work per call is queued on a side stream that forward never waits for. (With ~0.1 ms per call this
# candidate was judged correct on the H100: side work that keeps pace with the host's own time per
# call adds no wall time, so the back-to-back check cannot see it; it cannot change an output either.)
SIDE_WORK = candidates.triton_candidate().replace(
    "        return out\n",
    "        side = self.__dict__.setdefault('side', torch.cuda.Stream())\n"
    "        with torch.cuda.stream(side):\n"
    "            torch.cuda._sleep(1_000_000)\n"
    "        return out\n",
)


def test_side_stream_work_outside_the_output_is_caught_back_to_back(evaluator):
    assert "torch.cuda._sleep" in SIDE_WORK
    # 16M elements: the own kernel (~60 us on an H100) stays well above the own-share minimum beside 0.5-1 ms of
    # sleep (`_sleep` counts cycles, so its length follows the clock), and the share rule cannot fire first. At 1M
    # elements the share measured 1.5 % on one H100 run and 0.50 % on another, where the share rule rejected it.
    r = evaluator.evaluate(candidates.problem(1 << 24), SIDE_WORK)
    assert r.status is Status.REJECTED, f"{r.status}: {r.reason}"
    assert r.kernels.own_time_fraction is not None and r.kernels.own_time_fraction > 0.02, r.kernels
    assert "outside the timed stream" in r.reason and "back-to-back" in r.reason, r.reason
