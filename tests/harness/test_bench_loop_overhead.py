"""`harness bench eval --part loop-overhead`: on a GPU every variant is timed in the native loop, and turning parts
of a repetition off leaves less of it outside the call's events; wherever nvcc exists, the capture kernels compile
as shipped and as each kernel variant the bench builds (a source error shows without a GPU)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from eval import CAPTURE_KERNELS, CAPTURE_SOURCE
from harness.bench import loop_overhead

NVCC = shutil.which("nvcc")


@pytest.mark.gpu
@pytest.mark.timeout(300)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_each_part_of_a_repetition_costs_its_share(capsys):
    report = loop_overhead.run(elements=1 << 20, reps=8, rounds=2)
    rows = report["excess_per_rep"]
    assert set(rows) == {*loop_overhead.VARIANTS, "whole repetition + fresh draws", *loop_overhead.KERNEL_VARIANTS}
    whole = rows["whole repetition"]["median_us"]
    # the lead alone spins the GPU for about 200 us a repetition, and the call alone has none of it
    assert whole - rows["without lead"]["median_us"] > 150
    assert rows["call alone"]["median_us"] < whole and rows["without capture"]["median_us"] < whole
    # the loop's own GPU time: the lead in the lead-in, none without it, and never more than the whole excess
    assert rows["whole repetition"]["gpu_us"]["lead_in"] > 190 > rows["without lead"]["gpu_us"]["lead_in"]
    assert rows["without capture"]["gpu_us"]["capture"] < rows["whole repetition"]["gpu_us"]["capture"]
    assert sum(rows["whole repetition"]["gpu_us"].values()) <= whole
    loop_overhead.print_table(report)
    assert "whole repetition" in capsys.readouterr().out


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
@pytest.mark.parametrize("defines", [{}, *loop_overhead.KERNEL_VARIANTS.values()],
                         ids=lambda d: ",".join(d) or "shipped")
def test_the_capture_kernels_compile(tmp_path, defines):
    out = tmp_path / "capture.ptx"
    flags = [f"-D{name}={value}" for name, value in defines.items()]
    done = subprocess.run([NVCC, "-arch=sm_90", "-ptx", *flags, "-o", str(out), str(CAPTURE_SOURCE)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    ptx = out.read_text()
    assert all(f".entry {name}" in ptx for name in CAPTURE_KERNELS)
