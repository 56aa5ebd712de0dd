"""`harness bench eval --part loop-overhead` on a GPU: every variant is timed in the native loop, and turning parts
of a repetition off leaves less of it outside the call's events."""

from __future__ import annotations

import pytest
import torch

from harness.bench import loop_overhead

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_each_part_of_a_repetition_costs_its_share(capsys):
    report = loop_overhead.run(elements=1 << 20, reps=8, rounds=2)
    rows = report["excess_per_rep"]
    assert set(rows) == {*loop_overhead.VARIANTS, "whole repetition + fresh draws", *loop_overhead.KERNEL_VARIANTS}
    whole = rows["whole repetition"]["median_us"]
    # the lead alone spins the GPU for about 200 us a repetition, and the call alone has none of it
    assert whole - rows["without lead"]["median_us"] > 150
    assert rows["call alone"]["median_us"] < whole and rows["without capture"]["median_us"] < whole
    loop_overhead.print_table(report)
    assert "whole repetition" in capsys.readouterr().out
