"""Observed timing's parts that a CPU can decide: the shared buffer's layout, the full check of a block's outputs,
the figures from the reference process's windows. The windows themselves need CUDA IPC: `test_observed_gpu.py`."""

from __future__ import annotations

import pytest
import torch

from eval.pipeline import checks
from eval.crossing import protocol as p
from eval.config import EvalConfig
from eval.timing.observed import (BUFFER_BUDGET_BYTES, MAX_REPS, PAIRS, Observation, ObservedFailure, _Session,
                           observe, reps_per_block)
from eval.worker import cuda_ipc
from eval.worker.observed import FLAG_BYTES, POISON, Layout, compare_block, run_into_slots


def _layout(reps: int = 3) -> tuple[Layout, list[torch.Tensor], list[torch.Tensor]]:
    inputs = [torch.randn(5, 3).t(), torch.randn(7).half()]  # a transposed input keeps its strides
    outputs = [torch.randn(4, 6), torch.zeros(2, dtype=torch.int64)]
    return Layout.plan(reps, inputs, outputs), inputs, outputs


def test_regions_are_aligned_disjoint_and_inputs_keep_their_layout():
    layout, inputs, outputs = _layout()
    regions = [e for rows in (layout.inputs, layout.outputs) for row in rows for e in row]
    offsets = [e[0] for e in regions]
    assert offsets[0] == FLAG_BYTES  # the flags come first
    assert all(o % cuda_ipc.ALIGN == 0 for o in offsets)
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert layout.outputs_start == layout.outputs[0][0][0] > max(e[0] for row in layout.inputs for e in row)
    assert [e[3] for e in layout.inputs[0]] == [list(t.stride()) for t in inputs]
    assert [e[3] for e in layout.outputs[0]] == [list(t.contiguous().stride()) for t in outputs]
    base = torch.zeros(layout.nbytes, dtype=torch.uint8)
    ins, outs = layout.views(base)
    for rep, row in enumerate(ins + outs):
        for t in row:
            t.copy_(torch.full(t.shape, rep + 1, dtype=t.dtype))
    for rep, row in enumerate(ins + outs):  # no region overwrote another
        assert all(bool((t == rep + 1).all()) for t in row)


def test_the_block_check_reads_every_element():
    layout, _, _ = _layout(reps=2)
    base = torch.full((layout.nbytes,), POISON, dtype=torch.uint8)
    in_slots, out_slots = layout.views(base)
    drawn = [[torch.randn(5, 3).t(), torch.randn(7).half()] for _ in range(2)]
    reference = lambda v: [v[0].float().sum() * torch.ones(4, 6), torch.arange(2)]  # noqa: E731
    assert compare_block(drawn, out_slots, reference, 1e-5, 1e-5).count == 2  # both repetitions still poisoned
    for values, slots in zip(drawn, out_slots):
        for got, want in zip(reference(values), slots):
            want.copy_(got)
    assert compare_block(drawn, out_slots, reference, 1e-5, 1e-5).count == 0
    out_slots[1][0].view(-1)[17] += 1.0  # one element of one repetition
    found = compare_block(drawn, out_slots, reference, 1e-5, 1e-5)
    assert found.count == 1 and found.detail.startswith("repetition 1, output 0: ")
    # the float64 answer may overrule the reference's own rounding; it decides only the repetitions that missed
    asked = []
    overruled = compare_block(drawn, out_slots, reference, 1e-5, 1e-5, lambda v, o: asked.append(v) or True)
    assert overruled.count == 0 and len(asked) == 1 and asked[0] is drawn[1]
    assert compare_block(drawn, out_slots, reference, 1e-5, 1e-5, lambda v, o: False).count == 1


def test_outputs_the_regions_cannot_take_stay_poisoned():
    layout, _, _ = _layout(reps=1)
    base = torch.full((layout.nbytes,), POISON, dtype=torch.uint8)
    in_slots, out_slots = layout.views(base)
    run_into_slots(in_slots, out_slots, 1, lambda ins: [torch.ones(6, 4), torch.ones(2, dtype=torch.int64)])
    assert bool(torch.isnan(out_slots[0][0]).all())  # another shape: not copied
    assert out_slots[0][1].tolist() == [1, 1]


def test_the_figures_are_the_windows_less_handover_and_copies():
    obs = Observation(reps=4, handover_ms=[0.30, 0.31, 0.29], windows_ms=[0.71, 0.70, 0.75],
                      reference_ms=[0.90, 0.92, 0.88], copies_ms=[0.01, 0.02, 0.0], own_ms=[0.5, 0.5, 0.5],
                      reported_ms=[0.01, 0.01, 0.01])
    assert obs.handover == pytest.approx(0.30)
    assert obs.candidate_per_rep == pytest.approx((0.71 - 0.30 - 0.01) / 4)
    # the reference's figure is its windows' (timed as the candidate's are), not its own blocks'
    assert obs.reference_per_rep == pytest.approx((0.90 - 0.30 - 0.01) / 4)
    summary = obs.summary()
    assert summary["speedup"] == pytest.approx(obs.reference_per_rep / obs.candidate_per_rep)
    assert summary["reference_own_context_ms"] == pytest.approx((0.5 - 0.01) / 4)
    # what the worker reported, and the own blocks, are carried as diagnostics and change no figure
    assert summary["reported_candidate_ms"] == pytest.approx(0.0025)
    assert Observation(**{**obs.__dict__, "reported_ms": [9.0] * 3}).candidate_per_rep == obs.candidate_per_rep
    changed = Observation(**{**obs.__dict__, "own_ms": [9.0] * 3}).summary()
    assert changed["speedup"] == summary["speedup"]


class _Side:
    """A side of observed timing that answers each request with a scripted reply and records what it was asked."""

    def __init__(self, name: str, log: list, replies: dict | None = None):
        self.name, self.log, self.replies = name, log, replies or {}
        self.load = p.Load(problem_source="x", subject="ref7")

    def request(self, message, tensors=None, timeout=None, device=None):
        self.log.append((self.name, message))
        make = self.replies.get(message.cmd)
        return (make(message) if make else message.reply()), []


def _sides(close=None):
    log: list = []

    def by_kind(m):  # a handover window (no inputs released) is shorter than a block's
        opened = next(o for who, o in reversed(log) if isinstance(o, p.WindowOpen) and o.seq == m.seq)
        return p.WindowCloseReply(window_ms=0.9 if opened.seeds else 0.3)
    close = close or by_kind
    reference = _Side("reference", log, {
        "window_setup": lambda m: p.WindowSetupReply(handle="h", layout={}),
        "window_close": close,
        "own_block": lambda m: p.OwnBlockReply(block_ms=0.8, copies_ms=0.05)})
    return log, reference, _Side("candidate", log), _Side("client", log)


def test_the_reference_is_timed_in_windows_of_the_clean_client_as_the_candidate_is():
    log, reference, candidate, client = _sides()
    stage = p.Stage(subject="ref7", args=[], n_inputs=1, sets=1, seeds=[3])
    obs = observe(reference, "ref7", candidate, client, stage=stage, secret=1, reps=4, timeout_s=5.0,
                  tolerance=(1e-5, 1e-5))
    asked = [(who, m) for who, m in log]
    # the clean client loads the evaluation's own reference before anything else, and drops it at the end
    to_client = [m for who, m in asked if who == "client"]
    assert to_client[0] is reference.load and to_client[1] is stage
    assert isinstance(asked[-1][1], p.Unload) and asked[-1] == ("client", p.Unload(subject="ref7"))
    runs = [(who, m) for who, m in asked if isinstance(m, p.WindowRun)]
    reference_runs = [m for who, m in runs if who == "client" and m.reps]
    candidate_runs = [m for who, m in runs if who == "candidate"]
    # the same number of windows of the same size, and the same seeds in each pair's windows
    assert len(reference_runs) == len(candidate_runs) == PAIRS + 1
    assert all(m.subject == "ref7" and m.reps == 4 for m in reference_runs)
    assert all(m.subject == "candidate" for m in candidate_runs)
    opens = [m for who, m in asked if isinstance(m, p.WindowOpen) and m.seeds]
    assert len(opens) == 2 * (PAIRS + 1) and all(a.seeds == b.seeds for a, b in zip(opens[::2], opens[1::2]))
    assert len(obs.reference_ms) == len(obs.windows_ms) == len(obs.own_ms) == PAIRS


@pytest.mark.parametrize("side", ["reference", "candidate"])
def test_a_failing_window_is_the_candidates_verdict_only_on_the_candidates_side(side):
    log, reference, candidate, client = _sides(lambda m: p.WindowCloseReply(window_ms=0.9, mismatched=1, detail="x"))
    session = _Session(reference, "ref7", candidate, client, 5.0, (1e-5, 1e-5), False)
    worker = candidate if side == "candidate" else client
    with pytest.raises(ObservedFailure) as failed:
        session.window(worker, 4, [1, 2, 3, 4], side, subject="candidate" if side == "candidate" else "ref7")
    assert failed.value.kind == ("incorrect" if side == "candidate" else "reference")


def test_reps_per_block_stay_within_time_and_memory():
    block_ms = EvalConfig().observed_block_ms
    assert reps_per_block(block_ms / 4, 1.0, 1 << 20, block_ms) == 4
    assert reps_per_block(block_ms / 4, 1.0, 1 << 20, 2 * block_ms) == 8  # the setting sizes the block
    assert reps_per_block(1e-6, 1e-6, 1, block_ms) == MAX_REPS
    assert reps_per_block(1e-3, 1e-3, BUFFER_BUDGET_BYTES // 3, block_ms) == 3
    assert reps_per_block(100.0, 100.0, BUFFER_BUDGET_BYTES * 2, block_ms) == 1


def test_observed_timing_runs_after_timing_and_only_on_a_gpu():
    names = [s.name for s in checks.PIPELINE]
    step = next(s for s in checks.PIPELINE if s.name == "observed")
    assert names.index("timing") < names.index("observed") < names.index("speed_of_light")
    assert step.runs == "gpu" and step.scores and step.access == "exclusive"
