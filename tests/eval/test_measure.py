"""The parent's timing plan and bounds (`eval.timing.measure`), on a CPU: block order, inputs shared by repetition
index, statistics from raw samples, the wall bound, and the capture comparison."""

from __future__ import annotations

import dataclasses
import json
import time
from types import SimpleNamespace

import pytest
import torch

from eval.crossing import _capture as capture_math
from eval.timing import claim_bounds, host_share, measure
from eval.steps import context
from eval.steps import timing_steps
from eval.crossing import protocol as p
from eval.timing.measure import Block, Measurement, Side, TimingRule
from eval.result import EvalResult, Status

KEY = 0x1234_5678_9ABC_DEF1
SAMPLES = 256


class FakeProcess:
    """Answers TimeBlock like a worker: a fixed time per repetition; records every block it ran."""

    def __init__(self, name: str, log: list, ms: float = 0.5, leaves: list | None = None):
        self.name, self.log, self.ms = name, log, ms
        self.leaves = leaves if leaves is not None else [["float32", [4]]]

    def request(self, message, tensors=None, timeout=None, device=None):
        self.log.append((self.name, message))
        if isinstance(message, p.Stage):
            return p.StageReply(), []
        assert isinstance(message, p.TimeBlock)
        captures = [torch.zeros(message.reps, 1, SAMPLES + capture_math.CAPTURE_EXTRA, dtype=torch.float64)]
        return (p.TimeBlockReply(times_ms=[self.ms] * message.reps, leaves=self.leaves, fresh_inputs=True),
                captures if message.capture else [])

    def timed_request(self, message, timeout=None, device=None):
        t0 = time.perf_counter()
        reply, tensors = self.request(message, timeout=timeout, device=device)
        return reply, tensors, (time.perf_counter() - t0) * 1000.0


def _sides(log: list, **kw) -> tuple[Side, Side]:
    return (Side("reference", FakeProcess("reference", log), "ref0", key=KEY),
            Side("candidate", FakeProcess("candidate", log, **kw), "candidate"))


def test_adaptive_blocks_alternate_abba_and_both_sides_time_the_same_repetitions() -> None:
    log: list = []
    reference, candidate = _sides(log)
    rule = TimingRule(min_reps=20, max_reps=200, warmup_ms=1.0)
    nonce = 0x2B5E_7A11_C0DE_F00D
    meas = measure.time_pair(reference, candidate, rule, nonce=nonce, graphs=False, timeout=10)
    assert not [m for _, m in log if isinstance(m, p.Stage)]  # fresh inputs are never staged ahead of their block
    log[:] = [(name, m) for name, m in log if isinstance(m, p.TimeBlock)]
    timed = [(name, m) for name, m in log if m.capture]
    assert all(m.flush and not m.sync_each and m.lead and not m.grad for _, m in timed)
    # each timed block carries the seeds of exactly its own repetitions, derived here; the nonce never leaves
    for _, m in timed:
        assert m.seeds == [measure.fresh_seed(nonce, m.first_rep + i) for i in range(m.reps)]
        assert str(nonce) not in json.dumps(dataclasses.asdict(m))
    cand_seeds = [s for n, m in timed if n == "candidate" for s in m.seeds]
    assert len(set(cand_seeds)) == len(cand_seeds)  # no repetition's inputs are seen twice
    # pairs of blocks: (R, C), then (C, R), ...: A B B A at block level
    order = [name for name, _ in timed]
    assert order[:4] == ["reference", "candidate", "candidate", "reference"]
    ranges = {name: [(m.first_rep, m.reps) for n, m in timed if n == name] for name in ("reference", "candidate")}
    assert ranges["reference"] == ranges["candidate"]  # repetition r: the same inputs on both sides
    assert all(m.key == KEY for n, m in log if n == "reference") and all(m.key == 0 for n, m in log if n == "candidate")
    warm = [m for _, m in log if not m.capture]
    assert warm and all(m.first_rep < 0 for m in warm)  # warm-up repetitions never reuse a timed repetition's inputs
    assert meas.summary("candidate")["median_ms"] == 0.5 and len(meas.samples["reference"]) >= 20


def test_fixed_method_is_kernelbench_timer_one_side_after_the_other() -> None:
    """KernelBench's `time_execution_with_cuda_event`: candidate first, warm-up, one dropped call, then the timed
    calls, each synchronised, its L2 write as the only lead, the candidate with autograd on."""
    log: list = []
    reference, candidate = _sides(log)
    rule = TimingRule(method="fixed", reps=100, warmup_calls=3, flush=True, flush_bytes=256 << 20,
                      check_outputs=False, statistic="mean")
    meas = measure.time_pair(reference, candidate, rule, nonce=0, graphs=False, timeout=10)
    assert [(n, m.reps, m.sync_each, m.capture, m.grad) for n, m in log] == [
        ("candidate", 3, True, False, True), ("candidate", 1, True, False, True), ("candidate", 100, True, False, True),
        ("reference", 3, True, False, False), ("reference", 1, True, False, False),
        ("reference", 100, True, False, False)]
    assert all(m.flush and m.flush_bytes == 256 << 20 and not m.lead for _, m in log)
    assert len(meas.samples["candidate"]) == 100 == len(meas.samples["reference"])  # the dropped call is not kept


def _candidate_whose_blocks(edit) -> tuple[Side, Side]:
    """A reference and a candidate whose captured blocks' replies `edit(reply)` changes."""
    class Edited(FakeProcess):
        def request(self, message, tensors=None, timeout=None, device=None):
            reply, caps = super().request(message, tensors, timeout, device)
            if isinstance(message, p.TimeBlock) and message.capture:
                edit(reply)
            return reply, caps

    log: list = []
    return Side("reference", FakeProcess("reference", log), "ref0"), Side("candidate", Edited("candidate", log),
                                                                          "candidate")


def test_a_side_that_reports_too_few_or_bad_times_is_forged() -> None:
    reference, candidate = _candidate_whose_blocks(lambda reply: setattr(reply, "times_ms", reply.times_ms[:-1]))
    with pytest.raises(measure.Forged, match="valid times"):
        measure.time_pair(reference, candidate, TimingRule(warmup_ms=1.0), nonce=1, graphs=False, timeout=10)


@pytest.mark.parametrize("outside", [[-1.0, 0.2, 0.0], [0.1, 0.2], [float("nan"), 0.2, 0.0]])
def test_a_side_that_reports_an_impossible_loop_gpu_time_is_forged(outside: list[float]) -> None:
    reference, candidate = _candidate_whose_blocks(lambda reply: setattr(reply, "outside_ms", list(outside)))
    with pytest.raises(measure.Forged, match="loop's own GPU time"):
        measure.time_pair(reference, candidate, TimingRule(warmup_ms=1.0), nonce=1, graphs=False, timeout=10)


def test_statistics_are_computed_here_from_raw_samples() -> None:
    s = measure.summarize([1.0, 2.0, 3.0, 10.0])
    assert s["mean_ms"] == 4.0 and s["median_ms"] == 2.5 and s["max_ms"] == 10.0 and s["min_ms"] == 1.0


def _blocks(excess_ms: list[float], call_ms: float, reps: int = 20) -> list[Block]:
    return [Block(0, reps, wall_ms=reps * (call_ms + e), event_ms=reps * call_ms) for e in excess_ms]


def test_wall_bound_passes_an_honest_candidate_with_host_noise_in_some_blocks() -> None:
    meas = Measurement(samples={"candidate": [1.0] * 80, "reference": [2.0] * 80},
                       blocks={"reference": _blocks([0.30, 0.31, 0.30, 0.33], 2.0),
                               "candidate": _blocks([0.30, 0.9, 0.31, 2.5], 1.0)})
    finding, numbers = claim_bounds.wall_bound(meas)
    assert finding is None and numbers["unexplained_us"] == pytest.approx(0.0, abs=1e-6)


def test_wall_bound_rejects_times_a_worker_did_not_take() -> None:
    # the worker reports 1 ms per call, but each of its blocks took 8 ms per repetition of wall time
    meas = Measurement(samples={"candidate": [1.0] * 80, "reference": [8.0] * 80},
                       blocks={"reference": _blocks([0.3] * 4, 8.0), "candidate": _blocks([7.3] * 4, 1.0)})
    finding, numbers = claim_bounds.wall_bound(meas)
    assert finding and "reported times it did not take" in finding and numbers["unexplained_us"] == pytest.approx(7000)


def _captures(out: torch.Tensor, rep: int = 0) -> torch.Tensor:
    return capture_math.capture(out, KEY, rep, 0, SAMPLES)


@pytest.mark.parametrize("n", [100, 5000])
def test_an_output_within_tolerance_everywhere_always_passes(n: int) -> None:
    gen = torch.Generator().manual_seed(n)
    ref = torch.randn(n, generator=gen, dtype=torch.float64).float()
    atol = rtol = 1e-3
    for trial in range(30):  # errors at up to the tolerance itself, random signs: the worst honest case
        bound = atol + rtol * ref.abs()
        err = bound * (2 * torch.rand(n, generator=gen) - 1) * 0.999
        assert claim_bounds.capture_mismatch(_captures(ref, trial), _captures(ref + err, trial), atol, rtol) is None


def test_one_wrong_sampled_element_is_caught_and_located() -> None:
    ref = torch.linspace(-1, 1, 100)
    bad = ref.clone()
    bad[37] = 5.0
    why = claim_bounds.capture_mismatch(_captures(ref), _captures(bad), 1e-4, 1e-4)
    assert why and "1 of the sampled elements differ (e.g. 5.0" in why


def test_an_output_wrong_everywhere_but_at_the_samples_is_caught_by_the_projections() -> None:
    n = 200_000
    ref = torch.randn(n, generator=torch.Generator().manual_seed(0))
    cand = torch.zeros(n)
    positions = capture_math.positions(KEY, 0, 0, n, SAMPLES)
    cand[positions] = ref[positions]  # right exactly where it is sampled (as if it knew the key), wrong elsewhere
    why = claim_bounds.capture_mismatch(_captures(ref), _captures(cand), 1e-4, 1e-4)
    assert why and "secret projection" in why


def test_nan_and_inf_must_match_in_number_and_place() -> None:
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    moved = torch.tensor([float("nan"), 1.0, float("inf"), 2.0])
    assert "sampled elements differ" in claim_bounds.capture_mismatch(_captures(ref), _captures(moved), 1e-3, 1e-3)
    fewer = torch.tensor([1.0, 0.0, float("inf"), 2.0])
    assert "NaN values" in claim_bounds.capture_mismatch(_captures(ref), _captures(fewer), 1e-3, 1e-3)
    assert claim_bounds.capture_mismatch(_captures(ref), _captures(ref.clone()), 1e-3, 1e-3) is None


def test_first_capture_mismatch_names_the_repetition_and_refuses_missing_captures() -> None:
    ref = torch.arange(10.0)
    caps = {r: torch.stack([_captures(ref, r)]) for r in range(3)}
    wrong = dict(caps)
    wrong[2] = torch.stack([_captures(ref + 1, 2)])
    meas = Measurement(captures={"reference": caps, "candidate": wrong},
                       leaves={"reference": [["float32", [10]]], "candidate": [["float32", [10]]]})
    assert claim_bounds.first_capture_mismatch(meas, 1e-4, 1e-4).startswith("the output of timed repetition 2 is wrong")
    meas.captures["candidate"] = {0: caps[0]}
    assert "repetition 1 returned no capture" in claim_bounds.first_capture_mismatch(meas, 1e-4, 1e-4)
    meas.leaves["candidate"] = [["float16", [10]]]
    assert "timed outputs are shaped" in claim_bounds.first_capture_mismatch(meas, 1e-4, 1e-4)


def test_wall_bound_allows_noise_proportional_to_the_loops_overhead() -> None:
    # a 0.1 ms call under a 2 ms loop overhead: the candidate's lowest block 0.08 ms above the reference's lowest is
    # within OVERHEAD_SHARE (5 %) of the overhead (the spread between honest processes pinned to one core on the
    # H100); 0.15 ms above it is not, whatever the reference's slower blocks
    ref = _blocks([2.0, 2.1, 1.9, 2.0], 0.3)
    honest = Measurement(samples={"candidate": [0.1] * 80, "reference": [0.3] * 80},
                         blocks={"reference": ref, "candidate": _blocks([1.98, 2.6], 0.1)})
    hider = Measurement(samples={"candidate": [0.1] * 80, "reference": [0.3] * 80},
                        blocks={"reference": ref, "candidate": _blocks([2.05, 2.6], 0.1)})
    finding, numbers = claim_bounds.wall_bound(honest)
    assert finding is None
    assert numbers["paired_gap_median_us"] == pytest.approx(1000 * ((1.98 - 2.0) + (2.6 - 2.1)) / 2)  # block k with k
    finding, numbers = claim_bounds.wall_bound(hider)
    assert finding and numbers["limit_us"] == pytest.approx(claim_bounds.OVERHEAD_SHARE * 1900)


def _timed_blocks(per_block: list[list[float]]) -> list[Block]:
    return [Block(0, len(t), wall_ms=sum(t) + 1.0, event_ms=sum(t), median_ms=sorted(t)[len(t) // 2]) for t in per_block]


def test_work_concentrated_in_one_call_of_every_block_is_found() -> None:
    # each block's first call does all 20 repetitions' work (20 ms), the other 19 return what it computed (0.01 ms)
    front = [[20.0] + [0.01] * 19 for _ in range(3)]
    meas = Measurement(blocks={"candidate": _timed_blocks(front)})
    finding, ratio = claim_bounds.concentration(meas)
    assert finding and "concentrated in a few calls" in finding and ratio > 50


def test_an_honest_slow_call_now_and_then_is_not_concentration() -> None:
    blocks = [[1.0] * 20, [1.0] * 18 + [3.0, 9.0], [1.0] * 20]  # one block with two slow calls
    finding, ratio = claim_bounds.concentration(Measurement(blocks={"candidate": _timed_blocks(blocks)}))
    assert finding is None and ratio == pytest.approx(1.0)


def _concentration_ctx(alone: bool, judged: bool = True) -> SimpleNamespace:
    return SimpleNamespace(config=SimpleNamespace(hidden_work_check=judged), result=EvalResult(), alone=alone)


def test_concentration_beside_others_is_judged_again_alone_and_rejected_there() -> None:
    """An honest candidate's blocks can meet another CUDA context's work beside other evaluations: a first finding
    asks for the evaluation again alone; alone, the same finding is the verdict."""
    front = Measurement(blocks={"candidate": _timed_blocks([[20.0] + [0.01] * 19 for _ in range(3)])})
    rule = TimingRule()
    with pytest.raises(context.RetryAlone, match="concentrated in a few calls.*other evaluations could run"):
        timing_steps.judge_concentration(_concentration_ctx(alone=False), front, rule)
    with pytest.raises(context.Verdict, match="integrity: in every one of 3 timed blocks") as verdict:
        timing_steps.judge_concentration(_concentration_ctx(alone=True), front, rule)
    assert verdict.value.status is Status.REJECTED
    unjudged = _concentration_ctx(alone=False, judged=False)
    timing_steps.judge_concentration(unjudged, front, rule)  # eval.hidden_work_check=false: a flag, no retry
    assert unjudged.result.flags and "not judged" in unjudged.result.flags[0]
    honest = _concentration_ctx(alone=False)
    timing_steps.judge_concentration(honest, Measurement(blocks={"candidate": _timed_blocks([[1.0] * 20] * 3)}), rule)
    assert honest.result.wall_bound["concentration"] == pytest.approx(1.0) and not honest.result.flags


def test_a_busy_reply_is_read_into_host_time_with_bad_values_dropped():
    floor, at = host_share.HOST_FLOOR_MS, host_share.HOST_SHARE_AT
    bound = host_share.host_time({"busy": 1.7, "host_ms": 2 * floor, "kernel_ms": 2 * floor / (at * 2)})
    assert bound.busy == 1.0 and bound.share == round(2 * at, 4) and bound.bound
    unprofiled = host_share.host_time({"busy": float("nan"), "host_ms": floor / 2})
    assert unprofiled == host_share.HostTime(None, round(floor / 2, 4), None, False)
    fast_host = host_share.host_time({"host_ms": floor / 2, "kernel_ms": floor / 100})  # a high share under the floor
    assert fast_host.share is not None and fast_host.share >= at and not fast_host.bound
    assert host_share.host_time({"busy": 0.5}) == host_share.HostTime(0.5)


# -- a window of several candidates (`measure.time_group`) ------------------------------------------------------
class FakeFreezer:
    """Records which workers stand still: a `freeze.held` of this worker adds its name to `stopped`."""

    def __init__(self, name: str, stopped: set):
        self.name, self.stopped = name, stopped

    def stop(self) -> bool:
        self.stopped.add(self.name)
        return True

    def resume(self) -> None:
        self.stopped.discard(self.name)


class HeldProcess(FakeProcess):
    """A fake worker that can be held still, and logs which workers stood still through each of its blocks."""

    def __init__(self, name: str, log: list, stopped: set, **kw):
        super().__init__(name, log, **kw)
        self.freezer, self.stopped, self.still = FakeFreezer(name, stopped), stopped, []

    def request(self, message, tensors=None, timeout=None, device=None):
        self.still.append(frozenset(self.stopped))
        return super().request(message, tensors, timeout, device)


def _window(log: list, k: int, stopped: set, candidate=HeldProcess) -> list[tuple[Side, Side]]:
    """k pairs as the evaluator makes them: each candidate's own reference subject in the one reference process,
    keyed to its worker, holding it."""
    pairs = []
    for i in range(k):
        cand = candidate(f"cand{i}", log, stopped)
        pairs.append((Side("reference", FakeProcess(f"ref{i}", log), f"ref{i}", key=KEY + i, hold=cand),
                      Side("candidate", cand, "candidate")))
    return pairs


def _timed_order(log: list) -> list[str]:
    """The processes of the timed blocks (flushed, with a lead, captured) in the order they ran."""
    return [name for name, m in log if isinstance(m, p.TimeBlock) and m.capture and m.lead]


def test_a_window_times_the_reference_once_per_round_in_a_palindrome_for_every_candidate() -> None:
    log: list = []
    stopped: set = set()
    pairs = _window(log, 3, stopped)
    rule = TimingRule(min_reps=20, max_reps=200, warmup_ms=1.0)
    nonce = 0x5EED_0F_A11
    metas = measure.time_group(pairs, rule, nonce=nonce, graphs=False, timeout=10)
    assert [m.shared_with for m in metas] == [3, 3, 3] and not any(m.failure or m.violations for m in metas)
    order = _timed_order(log)
    rounds = [order[i:i + 4] for i in range(0, len(order), 4)]
    assert len(rounds) >= 2 and rounds[0] == ["ref0", "cand0", "cand1", "cand2"]
    assert rounds[1] == ["cand2", "cand1", "cand0", "ref0"]  # R C1 C2 C3 C3 C2 C1 R: the same mean place for all
    blocks = [(n, m) for n, m in log if isinstance(m, p.TimeBlock) and m.capture]
    timed = {n: [(m.first_rep, m.reps) for n2, m in blocks if n2 == n and m.lead] for n in ("ref0", "cand0", "cand1",
                                                                                          "cand2", "ref1", "ref2")}
    # the reference's timed blocks ran once per round, not once per candidate; only the first pair's subject is timed
    assert timed["ref0"] == timed["cand0"] == timed["cand1"] == timed["cand2"] and not timed["ref1"] + timed["ref2"]
    # the other pairs' references capture the same repetitions under their own worker's key, untimed
    for i in (1, 2):
        caps = [m for n, m in blocks if n == f"ref{i}"]
        assert [(m.first_rep, m.reps) for m in caps] == timed["ref0"]
        assert all(m.key == KEY + i and not m.lead and not m.flush for m in caps)
    assert all(m.key == KEY for n, m in blocks if n == "ref0")
    # repetition r has the same fresh inputs on every side
    for _, m in blocks:
        assert m.seeds == [measure.fresh_seed(nonce, m.first_rep + j) for j in range(m.reps)]
    for meas in metas:  # each candidate's measurement is whole: the shared reference's samples, its own captures
        assert len(meas.samples["reference"]) == len(meas.samples["candidate"]) >= 20
        assert sorted(meas.captures["reference"]) == sorted(meas.captures["candidate"])
        assert claim_bounds.first_capture_mismatch(meas, 1e-5, 1e-5) is None
    # while one side runs, every candidate but itself stands still
    for i, (_, cand) in enumerate(pairs):
        assert all(still == {f"cand{j}" for j in range(3)} - {f"cand{i}"} for still in cand.worker.still)


def test_a_candidate_that_fails_in_a_window_leaves_it_and_the_others_carry_on(monkeypatch) -> None:
    # blocks of 8 repetitions whatever the warm-up's wall time: on a busy machine a block sized to BLOCK_MS took 7
    # (42 repetitions, not 40), and the block where each candidate stops is what this test reads
    monkeypatch.setattr(measure, "BLOCK_MS", 1e9)

    class ForgesLater(HeldProcess):
        """Reports one time too few from its third timed block on."""

        def request(self, message, tensors=None, timeout=None, device=None):
            reply, caps = super().request(message, tensors, timeout, device)
            timed = [m for n, m in self.log if n == self.name and isinstance(m, p.TimeBlock) and m.capture]
            if isinstance(message, p.TimeBlock) and message.capture and len(timed) >= 3:
                reply.times_ms = reply.times_ms[:-1]
            return reply, caps

    class Violates(HeldProcess):
        def request(self, message, tensors=None, timeout=None, device=None):
            reply, caps = super().request(message, tensors, timeout, device)
            if isinstance(message, p.TimeBlock) and message.capture:
                reply.violations = ["a hook was added"]
            return reply, caps

    log: list = []
    stopped: set = set()
    pairs = _window(log, 4, stopped)
    pairs[1] = (pairs[1][0], Side("candidate", ForgesLater("cand1", log, stopped), "candidate"))
    pairs[2] = (pairs[2][0], Side("candidate", Violates("cand2", log, stopped), "candidate"))
    rule = TimingRule(min_reps=40, max_reps=400, warmup_ms=1.0)  # settled at 40 repetitions (constant times)
    metas = measure.time_group(pairs, rule, nonce=7, graphs=False, timeout=10, max_block_reps=8)
    assert isinstance(metas[1].failure, measure.Forged) and "valid times" in str(metas[1].failure)
    assert metas[2].violations == ["candidate: a hook was added"] and metas[2].failure is None
    for i in (0, 3):  # timed to the end, as alone
        assert metas[i].failure is None and not metas[i].violations
        assert len(metas[i].samples["candidate"]) == len(metas[i].samples["reference"]) == 40
        assert claim_bounds.first_capture_mismatch(metas[i], 1e-5, 1e-5) is None
    last_rep = {n: max(m.first_rep for n2, m in log if n2 == n and isinstance(m, p.TimeBlock) and m.capture)
                for n in ("cand1", "cand2", "ref1", "ref2", "cand3", "ref0")}
    assert last_rep["cand2"] == 0 and last_rep["ref2"] == 0  # dropped at its first timed block
    assert last_rep["cand1"] == 16 and last_rep["ref1"] <= 24  # its third block; its reference's captures stop too
    assert last_rep["cand3"] == last_rep["ref0"] == 32


def test_the_reference_failing_in_a_window_stops_every_candidate_with_its_failure() -> None:
    class Fails(FakeProcess):
        def request(self, message, tensors=None, timeout=None, device=None):
            reply, caps = super().request(message, tensors, timeout, device)
            if isinstance(message, p.TimeBlock) and message.capture:
                return p.TimeBlockReply(ok=False, stage="run", error="out of memory", oom=True), []
            return reply, caps

    log: list = []
    pairs = _window(log, 2, set())
    pairs[0] = (Side("reference", Fails("ref0", log), "ref0", key=KEY), pairs[0][1])
    metas = measure.time_group(pairs, TimingRule(warmup_ms=1.0), nonce=7, graphs=False, timeout=10)
    assert all(isinstance(m.failure, measure.BlockFailed) and m.failure.side == "reference" for m in metas)
    with pytest.raises(measure.BlockFailed):
        measure.time_pair(*pairs[0], TimingRule(warmup_ms=1.0), nonce=7, graphs=False, timeout=10)


def test_the_loops_own_gpu_time_is_recorded_by_part_and_bounded_in_sum() -> None:
    """Each block's loop GPU time (lead-in, capture, between; ms over the block) gives the candidate's lowest less the
    reference's lowest, per repetition, beside the wall bound's figures; a block without it (off a GPU) gives none.
    Their sum is bounded on its own: 25 us more a repetition is inside the wall bound's allowance (30 us, host noise
    included) but over the loop's GPU limit (5 % of the reference's 459.5 us); 10 us more is not."""

    def with_outside(blocks: list[Block], lead_in: list[float], capture: float) -> list[Block]:
        for b, li in zip(blocks, lead_in):
            b.outside_ms = (li * b.reps, capture * b.reps, 0.01 * (b.reps - 1))
        return blocks

    ref = with_outside(_blocks([0.5] * 3, 0.3), [0.31, 0.30, 0.32], 0.15)
    cand = with_outside(_blocks([0.52] * 3, 0.1), [0.33, 0.325, 0.34], 0.15)  # 25 us more in the lead-in, at best
    meas = Measurement(samples={"candidate": [0.1] * 60, "reference": [0.3] * 60},
                       blocks={"reference": ref, "candidate": cand})
    finding, numbers = claim_bounds.wall_bound(meas)
    assert numbers["unexplained_us"] == pytest.approx(20.0) and numbers["limit_us"] == pytest.approx(30.0)
    assert finding and "the loop's own GPU work" in finding and "outside the candidate's timed intervals" in finding
    assert numbers["loop_gpu_gap_us"] == pytest.approx(25.0)
    assert numbers["loop_gpu_limit_us"] == pytest.approx(claim_bounds.LOOP_GPU_SHARE * 459.5)
    assert numbers["lead_in_gap_us"] == pytest.approx(25.0)
    assert numbers["capture_gap_us"] == pytest.approx(0.0, abs=1e-6)
    assert numbers["reference_lead_in_us"] == pytest.approx(300.0)
    # the rest of the excess is host time: 500 - 300 - 150 - 9.5 us for the reference, 520 - 325 - 150 - 9.5 at best
    assert numbers["reference_host_us"] == pytest.approx(500 - 320 - 150 - 9.5)
    assert numbers["host_gap_us"] == pytest.approx((520 - 340 - 150 - 9.5) - (500 - 320 - 150 - 9.5))
    meas.blocks["candidate"] = with_outside(_blocks([0.52] * 3, 0.1), [0.31, 0.33, 0.34], 0.15)  # 10 us more
    finding, numbers = claim_bounds.wall_bound(meas)
    assert finding is None and numbers["loop_gpu_gap_us"] == pytest.approx(10.0)
    meas.blocks["candidate"] = _blocks([0.52] * 3, 0.1)
    assert "lead_in_gap_us" not in claim_bounds.wall_bound(meas)[1] and claim_bounds.wall_bound(meas)[0] is None


def test_a_retry_alone_names_the_bound_it_was_over() -> None:
    from eval.steps.timing_steps import _over_bound

    wall = {"unexplained_us": 90.0, "limit_us": 60.0, "loop_gpu_gap_us": 3.0, "loop_gpu_limit_us": 20.0}
    loop = {"unexplained_us": 40.0, "limit_us": 60.0, "loop_gpu_gap_us": 34.5, "loop_gpu_limit_us": 21.0}
    assert _over_bound(wall) == "the wall bound found 90 us per repetition unexplained"
    assert _over_bound(loop) == "the loop's own GPU work took 34 us per repetition longer"
