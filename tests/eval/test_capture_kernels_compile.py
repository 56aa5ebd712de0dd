"""capture.cu compiles, as shipped and with the macro variants the loop-overhead bench builds, wherever nvcc exists
(the GPU tests run them; this catches a source error on a machine without a GPU)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from eval.worker.native import kernels
from harness.bench.loop_overhead import KERNEL_VARIANTS

NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
@pytest.mark.parametrize("defines", [{}, *KERNEL_VARIANTS.values()], ids=lambda d: ",".join(d) or "shipped")
def test_the_capture_kernels_compile(tmp_path, defines):
    out = tmp_path / "capture.ptx"
    flags = [f"-D{name}={value}" for name, value in defines.items()]
    done = subprocess.run([NVCC, "-arch=sm_90", "-ptx", *flags, "-o", str(out), str(kernels.SOURCE)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    ptx = out.read_text()
    assert all(f".entry {name}" in ptx for name in kernels.KERNELS)
