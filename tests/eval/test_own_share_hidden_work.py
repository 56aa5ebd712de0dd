"""On a CPU: the own-kernel share rule (`eval.min_own_time_fraction`) and the back-to-back
hidden-work decision, as plain functions; their config, feedback and report column; the hybrid
candidates of `harness bench eval --part own-share` are correct (the share itself needs a GPU)."""

from __future__ import annotations

import random

import pytest

from eval import EvalConfig, Evaluator, Job
from eval.timing import measure
from eval.crossing import protocol as p
from eval.steps.kernel_evidence import own_share_shortfall
from eval.steps.timing_steps import _HIDDEN_WORK_BATCHES, _HIDDEN_WORK_FLOOR_MS, judge_back_to_back, settled_clean
from eval.feedback import render_feedback
from eval.result import EvalResult, KernelShare, Status
from harness.corpus import own_share
from harness.presets import preset_config


# -- config ------------------------------------------------------------------------------------
def test_min_own_time_fraction_default_and_presets() -> None:
    assert EvalConfig().min_own_time_fraction == 0.005
    assert preset_config("kernelbench").min_own_time_fraction == 0.0  # KernelBench has no such rule
    assert preset_config("fast").min_own_time_fraction == 0.005
    # on, it keys the cache (strict verdicts changed); off, kernelbench's keys are as before
    assert EvalConfig().cache_fields()["min_own_time_fraction"] == 0.005
    assert "min_own_time_fraction" not in preset_config("kernelbench").cache_fields()


@pytest.mark.parametrize("bad", [-0.01, 1.0, 1.5])
def test_min_own_time_fraction_is_validated(bad: float) -> None:
    with pytest.raises(ValueError, match=r"eval.min_own_time_fraction must be in \[0, 1\)"):
        EvalConfig(min_own_time_fraction=bad)


def test_hydra_schema_accepts_the_setting() -> None:
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    import harness.conf  # noqa: F401  registers the eval schema

    with initialize_config_module("harness.conf", version_base="1.3"):
        cfg = compose("config", overrides=["eval.min_own_time_fraction=0.02"])
        kb = compose("config", overrides=["eval=kernelbench"])
    assert EvalConfig(**OmegaConf.to_container(cfg.eval, resolve=True)).min_own_time_fraction == 0.02
    assert EvalConfig(**OmegaConf.to_container(kb.eval, resolve=True)).min_own_time_fraction == 0.0


# -- the share rule ----------------------------------------------------------------------------
@pytest.mark.parametrize("share, minimum, rejects", [
    (None, 0.005, False),   # CPU: not measurable, never rejects
    (0.0, 0.005, True),     # decoy_kernel on the H100
    (0.0034, 0.005, True),  # the one-element copy decoy
    (0.0049, 0.005, True),
    (0.005, 0.005, False),  # at the minimum: kept
    (0.016, 0.005, False),  # GEMM + epilogue hybrid (estimate)
    (0.327, 0.005, False),  # L3/04 reference solution
    (1.0, 0.005, False),
    (0.0, 0.0, False),      # off (eval=kernelbench)
])
def test_own_share_decision(share, minimum, rejects) -> None:
    reason = own_share_shortfall(share, minimum)
    assert (reason is not None) == rejects
    if rejects:
        assert f"{share:.2%}" in reason and f"{minimum:.2%}" in reason and "eval.min_own_time_fraction" in reason


# -- the back-to-back decision -----------------------------------------------------------------
def _batches(excess_us: list[float], call_us: float = 5.0, calls: int = 50) -> list[dict[str, float]]:
    return [{"wall_ms": (call_us + e) * calls / 1000, "event_ms": call_us * calls / 1000,
             "excess_ms_per_call": e / 1000, "calls": calls} for e in excess_us]


def test_host_noise_in_some_batches_does_not_reject() -> None:
    # a us-scale candidate: 6 quiet batches and one with a 2 ms host stall (40 us per call): once a reject
    reason, numbers = judge_back_to_back(_batches([3, 2, 40, 3, 4, 2, 3]), _batches([1, 1, 2, 1, 1, 1, 1], 2000, 5))
    assert reason is None
    assert numbers["unexplained_us"] == pytest.approx(1.0) and numbers["limit_us"] == pytest.approx(20.0)
    # noise in most batches still leaves the quietest one
    assert judge_back_to_back(_batches([60, 45, 80, 5, 70, 90, 50]), _batches([1] * 7))[0] is None


def test_work_in_every_batch_is_rejected() -> None:
    # a side stream queueing ~0.5 ms of hidden GPU work per call: every batch shows it
    reason, numbers = judge_back_to_back(_batches([480, 510, 495, 470, 500, 520, 490]), _batches([2] * 7))
    assert reason is not None and "outside the timed stream" in reason and "470.0 us per call" in reason
    assert numbers["unexplained_us"] == pytest.approx(468.0)


def test_limit_scales_with_the_call_and_the_reference_excess_is_subtracted() -> None:
    long_call = _batches([400] * 7, call_us=1000.0, calls=10)  # 1 ms calls: the limit is half a call, 500 us
    assert judge_back_to_back(long_call, _batches([0] * 7))[0] is None
    assert judge_back_to_back(_batches([600] * 7, 1000.0, 10), _batches([0] * 7))[0] is not None
    # a reference that shows the same excess (its own host pattern) explains the candidate's
    assert judge_back_to_back(_batches([30] * 7), _batches([25] * 7))[0] is None
    assert _HIDDEN_WORK_FLOOR_MS == pytest.approx(0.02)


class _BatchPlayer:
    """A side's process as `measure.back_to_back` sees it: answers each BackToBack with the next of its batches and
    logs the order of the requests (the GPU path is `tests/eval/test_gpu_own_share.py`)."""

    def __init__(self, name: str, batches: list[dict[str, float]], log: list[str]):
        self.name, self.batches, self.log = name, list(batches), log

    def request(self, msg: p.BackToBack, timeout: float) -> tuple[p.BackToBackReply, list]:
        self.log.append(self.name)
        return p.BackToBackReply(batches=[self.batches.pop(0)]), []


def _played(candidate: list[dict[str, float]], reference: list[dict[str, float]], settled=settled_clean):
    log: list[str] = []
    sides = [measure.Side(name, _BatchPlayer(name, batches, log), name)
             for name, batches in (("candidate", candidate), ("reference", reference))]
    _, cand, ref = measure.back_to_back(*sides, calls=50, batches=_HIDDEN_WORK_BATCHES, timeout=1.0, settled=settled)
    return log, cand, ref


def test_back_to_back_stops_once_the_verdict_is_settled() -> None:
    # an honest candidate's first batch at the floor or under it: no other batch of either side is asked for
    log, cand, ref = _played(_batches([_HIDDEN_WORK_FLOOR_MS * 1000] * 7), _batches([1] * 7))
    assert log == ["candidate"] and len(cand) == 1 and ref == []
    reason, numbers = judge_back_to_back(cand, ref)
    assert reason is None and numbers["reference_batches"] == 0 and numbers["batches"] == 1
    # noise in its first batches: on, A B B A, until its first quiet batch
    log, cand, ref = _played(_batches([60, 45, 80, 5, 70, 90, 50]), _batches([1] * 7))
    assert log == ["candidate", "reference", "reference", "candidate", "candidate", "reference", "reference",
                   "candidate"] and len(cand) == 4
    # work hidden in every batch: every batch of both sides, as before
    log, cand, ref = _played(_batches([480, 510, 495, 470, 500, 520, 490]), _batches([2] * 7))
    assert len(log) == 2 * _HIDDEN_WORK_BATCHES and log[:4] == ["candidate", "reference", "reference", "candidate"]
    assert judge_back_to_back(cand, ref)[0] is not None
    # without a settling rule every batch runs
    assert len(_played(_batches([1] * 7), _batches([1] * 7), settled=None)[0]) == 2 * _HIDDEN_WORK_BATCHES


def test_stopping_once_settled_never_changes_the_verdict() -> None:
    # the stop is exact, not a looser check: on random batches (quiet, noisy, hidden work, references above and
    # under the candidate, negative excesses), the verdict on the batches measured up to the stop is the verdict
    # on all of them
    rng = random.Random(20261129)
    stopped_early = rejected = 0
    for _ in range(3000):
        call_us = rng.choice([2.0, 5.0, 40.0, 400.0, 2000.0])
        base = rng.choice([0.0, 5.0, 15.0, 25.0, 300.0])
        cand = _batches([base + rng.expovariate(1 / rng.choice([1.0, 10.0, 100.0])) - rng.uniform(0, 3)
                         for _ in range(_HIDDEN_WORK_BATCHES)], call_us)
        ref = _batches([rng.uniform(-2, 30) for _ in range(_HIDDEN_WORK_BATCHES)], call_us)
        _, early_cand, early_ref = _played(cand, ref)
        full = judge_back_to_back(cand, ref)[0]
        assert (judge_back_to_back(early_cand, early_ref)[0] is None) == (full is None)
        stopped_early += len(early_cand) < _HIDDEN_WORK_BATCHES
        rejected += full is not None
    assert stopped_early > 300 and rejected > 300  # both ways were exercised


def test_no_reference_batch_is_judged_only_when_settled() -> None:
    with pytest.raises(ValueError, match="no back-to-back batches"):
        judge_back_to_back(_batches([30]), [])
    assert not settled_clean([]) and not settled_clean(_batches([20.5, 30]))
    assert settled_clean(_batches([30, 20]))


def test_hidden_work_request_and_reply_cross_the_boundary() -> None:
    req = p.BackToBack(subject="ref4", calls=50, batches=1, check_stream=True)
    assert p.decode_request(p.encode(req)) == req
    reply = p.BackToBackReply(batches=_batches([1, 2]), stream_mismatches=1)
    assert p.decode_reply(req, p.encode(reply, "back_to_back")) == reply


# -- feedback and report -----------------------------------------------------------------------
def test_feedback_shows_small_shares_with_their_digits() -> None:
    r = EvalResult(status=Status.REJECTED, reason=own_share_shortfall(0.0034, 0.005) or "",
                   kernels=KernelShare(own_kernels_launched=["touch_kernel"], own_time_fraction=0.0034,
                                       top_kernels=[("sgemm_128x64", 2.7), ("touch_kernel", 0.002)]))
    text = render_feedback(r)
    assert "0.34% of forward's GPU time" in text and "under the minimum of 0.50%" in text
    assert "touch_kernel" in text
    full = EvalResult(status=Status.CORRECT, kernels=KernelShare(own_kernels_launched=["k"], own_time_fraction=1.0))
    assert "100% of forward's GPU time" in render_feedback(full)
    cpu = EvalResult(status=Status.CORRECT, kernels=KernelShare(own_kernels_launched=["k"], own_time_fraction=None))
    assert "GPU time" not in render_feedback(cpu).split("Own kernels launched")[1]


def test_leaderboard_has_an_own_share_column(tmp_path) -> None:
    from harness.report.compare import compare
    from harness.report.load import load_run
    from harness.report.metrics import compute_metrics
    from harness.report.tables import leaderboard_table, to_csv
    from tests.report_fixtures import SMOKE, config, write_run

    path = write_run(tmp_path / "a", config("a"), [(SMOKE[0], 1, 1, "correct", 2.0, 0.5),
                                                   (SMOKE[1], 1, 1, "correct", 1.5, 0.5)], own=0.25)
    run = load_run(path)
    m = compute_metrics(run, n_boot=50)
    headers, rows = leaderboard_table([m], compare([run], [m]))
    col = headers.index("own share (median)")
    assert headers[col - 1] == "SOL (median)" and rows[0][col] == "0.25"
    assert "median_own_time_fraction" in to_csv([m], compare([run], [m])).splitlines()[0]


# -- the bench's hybrids and decoy on the CPU interpreter ----------------------------------------
@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_hybrids_and_decoy_are_correct_on_cpu(tmp_path) -> None:
    """On a CPU the share is not measurable, so even the decoy is correct; on a GPU see test_eval_gpu_own_share."""
    cases = own_share.cases(with_solutions=False)
    assert {c.kind for c in cases} == {"hybrid", "decoy"} and len([c for c in cases if c.kind == "hybrid"]) == 3
    with Evaluator(EvalConfig(device="cpu", cache_dir=str(tmp_path), workers_per_gpu=2)) as ev:
        results = ev.evaluate_many([Job(own_share.problem(c.problem_id), c.source) for c in cases])
    for case, r in zip(cases, results):
        assert r.status is Status.CORRECT, f"{case.label}: {r.reason} {r.error}"
        assert r.kernels is not None and r.kernels.own_kernels_launched and r.kernels.own_time_fraction is None
