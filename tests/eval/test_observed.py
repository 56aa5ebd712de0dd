"""Observed timing's parts that a CPU can decide: the shared buffer's layout, the full check of a block's outputs,
the figures from the reference process's windows. The windows themselves need CUDA IPC: `test_observed_gpu.py`."""

from __future__ import annotations

import pytest
import torch

from eval import checks
from eval.observed import BLOCK_MS, BUFFER_BUDGET_BYTES, MAX_REPS, Observation, reps_per_block
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
                      reference_ms=[0.90, 0.92, 0.88], copies_ms=[0.01, 0.02, 0.0], reported_ms=[0.01, 0.01, 0.01])
    assert obs.handover == pytest.approx(0.30)
    assert obs.candidate_per_rep == pytest.approx((0.71 - 0.30 - 0.01) / 4)
    assert obs.reference_per_rep == pytest.approx((0.90 - 0.01) / 4)
    summary = obs.summary()
    assert summary["speedup"] == pytest.approx(obs.reference_per_rep / obs.candidate_per_rep)
    # what the worker reported is carried as a diagnostic and changes no figure
    assert summary["reported_candidate_ms"] == pytest.approx(0.0025)
    assert Observation(**{**obs.__dict__, "reported_ms": [9.0] * 3}).candidate_per_rep == obs.candidate_per_rep


def test_reps_per_block_stay_within_time_and_memory():
    assert reps_per_block(BLOCK_MS / 4, 1.0, 1 << 20) == 4
    assert reps_per_block(1e-6, 1e-6, 1) == MAX_REPS
    assert reps_per_block(1e-3, 1e-3, BUFFER_BUDGET_BYTES // 3) == 3
    assert reps_per_block(100.0, 100.0, BUFFER_BUDGET_BYTES * 2) == 1


def test_observed_timing_runs_after_timing_and_only_on_a_gpu():
    names = [s.name for s in checks.PIPELINE]
    step = next(s for s in checks.PIPELINE if s.name == "observed")
    assert names.index("timing") < names.index("observed") < names.index("speed_of_light")
    assert step.runs == "gpu" and step.scores and step.access == "exclusive"
