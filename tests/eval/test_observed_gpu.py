"""Observed timing on a GPU (`eval.timing.observed`): the speedup comes from the reference process's own windows, and a
candidate that rewrites what its worker does inside them gains nothing or shows a wrong output.

Each hostile candidate here rewrites the worker's side of observed timing from its own import (everything in its
process is its to rewrite): the reply, the flag, the work. Run on the device: `pytest -m gpu tests/eval/test_observed_gpu.py`.
"""

from __future__ import annotations

import json

import pytest
import torch

from eval import Status
from eval.steps.timing_steps import OBSERVED_BOUND
from harness.corpus import candidates

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

EVALUATOR = dict(device="cuda", timing_timeout_s=30.0, observed_timing=True)
OBSERVED_PHRASE = "read by the reference process after the window"


@pytest.fixture(scope="module")
def problem():
    return candidates.problem(1 << 22)


def _honest(tag: str) -> str:
    return candidates.triton_candidate(1024, 4) + f"\n# {tag}\n"


def _with_patch(patch: str, tag: str) -> str:
    """The honest candidate, with `patch` run at its import (inside the worker's process). The patches swap the
    `__code__` of the worker's own functions, so no function's identity changes (the tamper snapshot watches
    identities), by a name built at run time (the static check reads the source for rebinding); the swapped-in code
    runs with `eval.worker.observed`'s globals."""
    return _honest(tag) + _FIND + patch


# the worker's module, reached without naming it in a way the static check resolves
_FIND = """
import sys as _s
_obs = _s.modules["eval.worker." + "observed"]
_member = lambda cls, name: vars(vars(_obs)[cls])[name]
"""


@pytest.fixture(scope="module")
def honest(evaluator, problem):
    r = evaluator.evaluate(problem, _honest("honest twin"))
    assert r.status is Status.CORRECT, r.reason + r.error
    return r


def test_the_speedup_is_the_observed_one(honest):
    obs = honest.observed
    assert obs, "observed timing did not run"
    print("observed:", json.dumps({**obs, "loop_candidate_ms": honest.candidate_timing.median_ms,  # the whole record
                                   "loop_reference_ms": honest.reference_timing.median_ms}))
    # the loop's speedup, scored up to OBSERVED_BOUND times the observed one
    assert honest.speedup == pytest.approx(min(obs["loop_speedup"], OBSERVED_BOUND * obs["speedup"]))
    # for an honest candidate the observed speedup agrees with the worker loop's within the bound's reach (both sides
    # timed alike in windows: blocks back to back on exported memory, against calls each behind an L2 flush on the
    # worker's own; H200, 2026-12-04: 1.73-1.74 observed against 1.90-1.92 in the loop), and the observed
    # figure stays under the worker's own events around its block (which hold the output copies it leaves out)
    assert obs["speedup"] == pytest.approx(obs["loop_speedup"], rel=0.2), obs
    assert obs["candidate_ms"] <= obs["reported_candidate_ms"] * 1.02, obs
    assert not any(f.startswith("observed:") for f in honest.flags), honest.flags
    assert obs["handover_spread_us"] < 50, obs  # the handover is steady enough to subtract
    assert 1.5 < honest.speedup < 4.5, honest.speedup  # three eager memory-bound kernels against one fused


def test_the_references_own_code_as_the_candidate_reads_even(problem, tmp_path):
    """Both sides are timed alike: the reference's blocks in the clean client's windows, the candidate's in its
    worker's. The reference's own code as the candidate (`ModelNew = Model`) then reads 1.0 observed, as in the loop;
    when the reference was timed in the reference process's own context, it read 0.83-0.93 (H200, 2026-12-03)."""
    from eval import EvalConfig, Evaluator
    source = candidates.problem_source(1 << 22) + "\nModelNew = Model\n"
    settings = {**EVALUATOR, "own_kernel_policy": "report", "cache_dir": str(tmp_path)}
    with Evaluator(EvalConfig(**settings)) as ev:
        r = ev.evaluate(problem, source)
    assert r.status is Status.CORRECT, r.reason + r.error
    assert 0.92 < r.observed["speedup"] < 1.08, r.observed


def test_a_forged_report_changes_nothing(evaluator, problem, honest):
    """The worker's reply says its blocks took a tenth of their time: the figure is the reference process's."""
    forged = _with_patch("""
def _fast(self, seq, reps, forward):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(self.stream):
        cuda_ipc.wait_flag(self.stream, self.go, seq)
        start.record(self.stream)
        run_into_slots(self.in_slots, self.out_slots, reps, forward)
        end.record(self.stream)
        cuda_ipc.write_flag(self.stream, self.done, seq)
    self.stream.synchronize()
    return start.elapsed_time(end) / 10, 0.0
setattr(_member("Attached", "run"), "__" + "code__", _fast.__code__)
""", "forged report")
    r = evaluator.evaluate(problem, forged)
    assert r.status is Status.CORRECT, r.reason + r.error[-2000:]
    assert r.speedup < honest.speedup * 1.15, (r.speedup, honest.speedup)
    assert any(f.startswith("observed: the worker reported") for f in r.flags), r.flags


def test_rewritten_loop_times_gain_at_most_the_bound(evaluator, problem, honest):
    """The worker's channel scales every timed block's reply to 0.6 of its times (the `send` of `eval.crossing.wire`'s
    channel given new code that edits the header, so no identity changes): the loop's speedup is scored up to
    OBSERVED_BOUND times the observed one, so the forgery gains at most that over its honest twin, or is caught."""
    forged = _honest("loop times forged") + """
import sys as _s, types as _t
_wire = _s.modules["eval." + "wire"]
_send = vars(vars(_wire)["Channel"])["send"]
vars(_wire)["_kh_sent"] = _t.FunctionType(_send.__code__, vars(_wire), "_kh_sent", _send.__defaults__)
def _scaled(self, header, tensors=None, in_frame=False):
    if isinstance(header.get("times_ms"), list):
        header = {**header, "times_ms": [t * 0.6 for t in header["times_ms"]]}
    return _kh_sent(self, header, tensors, in_frame)
setattr(_send, "__" + "code__", _scaled.__code__)
"""
    r = evaluator.evaluate(problem, forged)
    if r.status is Status.CORRECT:
        assert r.speedup <= OBSERVED_BOUND * r.observed["speedup"] * 1.0001, (r.speedup, r.observed)
        assert r.speedup < honest.speedup * 1.15, (r.speedup, honest.speedup)
    else:
        assert r.status is Status.REJECTED, r.reason + r.error[-2000:]


def test_done_before_the_work_shows_a_wrong_output(evaluator, problem):
    """done is written first, on a stream that never waited for go; the work follows behind go."""
    early = _with_patch("""
def _early(self, seq, reps, forward):
    side = torch.cuda.Stream()
    cuda_ipc.write_flag(side, self.done, seq)
    side.synchronize()
    with torch.cuda.stream(self.stream):
        cuda_ipc.wait_flag(self.stream, self.go, seq)
        run_into_slots(self.in_slots, self.out_slots, reps, forward)
    self.stream.synchronize()
    return 0.0, 0.0
setattr(_member("Attached", "run"), "__" + "code__", _early.__code__)
""", "early done")
    r = evaluator.evaluate(problem, early)
    assert r.status is Status.INCORRECT, r.reason
    assert OBSERVED_PHRASE in r.reason


def test_work_that_starts_before_go_shows_a_wrong_output(evaluator, problem):
    """The block runs at once, without waiting for go (its inputs are not there yet), and says done at its end."""
    eager = _with_patch("""
def _no_wait(self, seq, reps, forward):
    with torch.cuda.stream(self.stream):
        run_into_slots(self.in_slots, self.out_slots, reps, forward)
        cuda_ipc.write_flag(self.stream, self.done, seq)
    self.stream.synchronize()
    return 0.0, 0.0
setattr(_member("Attached", "run"), "__" + "code__", _no_wait.__code__)
""", "no wait")
    r = evaluator.evaluate(problem, eager)
    assert r.status is Status.INCORRECT, r.reason
    assert OBSERVED_PHRASE in r.reason


def test_skipping_the_work_shows_a_wrong_output(evaluator, problem):
    skip = _with_patch("""
setattr(vars(_obs)["run_into_slots"], "__" + "code__", (lambda in_slots, out_slots, reps, forward: None).__code__)
""", "skip")
    r = evaluator.evaluate(problem, skip)
    assert r.status is Status.INCORRECT, r.reason
    assert OBSERVED_PHRASE in r.reason


def test_never_saying_done_is_rejected(evaluator, problem):
    silent = _with_patch("""
def _silent(self, seq, reps, forward):
    with torch.cuda.stream(self.stream):
        cuda_ipc.wait_flag(self.stream, self.go, seq)
        run_into_slots(self.in_slots, self.out_slots, reps, forward)
    self.stream.synchronize()
    return 0.0, 0.0
setattr(_member("Attached", "run"), "__" + "code__", _silent.__code__)
""", "silent")
    r = evaluator.evaluate(problem, silent)
    assert r.status is Status.REJECTED, r.reason
    assert "never signalled done" in r.reason


def test_the_next_evaluation_is_unharmed(evaluator, problem, honest):
    """After the hostile ones (the reference process released every window), an honest candidate is timed as before."""
    r = evaluator.evaluate(problem, _honest("after the hostile ones"))
    assert r.status is Status.CORRECT, r.reason + r.error
    assert r.speedup == pytest.approx(honest.speedup, rel=0.15)
