"""The host logic of the native timed loop (timed_loop.c) without a GPU: a fake libcuda.so.1
(tests/fakes/fake_libcuda.c) stands in for the driver, in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO as ROOT


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_timed_loop_host_logic_with_a_fake_driver(tmp_path: Path) -> None:
    lib = tmp_path / "libcuda.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(lib),
                    str(ROOT / "tests" / "fakes" / "fake_libcuda.c")], check=True)
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path), "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("native_loop_cpu_script.py"))], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr
