"""Shared material of the `test_run_*` tests: a tiny problem, three candidates, and a runner.

The problem (ReLU of a sum, 4096 floats) is small enough for the Triton interpreter on CPU, so
the real evaluator judges every candidate in well under a second once its worker is up.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

PROBLEM = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a + b)


N = 4096


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
'''

_KERNEL = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, {expr}, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        out = torch.empty_like(a)
        n = out.numel()
        add_relu_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
        return out
'''

GOOD = _KERNEL.format(expr="tl.maximum(a + b, 0.0)")
WRONG = _KERNEL.format(expr="a + b")  # forgets the ReLU: runs, but the outputs differ
BROKEN = "import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n"  # a syntax error


def fenced(code: str, prose: str = "Here is my kernel.") -> str:
    """A reply in the requested format: prose, then one fenced python block."""
    return f"{prose}\n\n```python\n{code}```\n"


def write_problem(directory: Path) -> Path:
    """The tiny problem as `directory/add_relu.py` (problem id `add_relu`)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "add_relu.py"
    path.write_text(PROBLEM)
    return path


def base_overrides(tmp: Path, problem: Path, eval_cache: Path) -> list[str]:
    """Overrides that keep a run inside `tmp` and evaluate quickly on CPU."""
    return [
        f"runs_dir={tmp / 'runs'}",
        f"problems.spec=file:{problem}",
        "eval.trials=2",
        f"eval.cache_dir={eval_cache}",
        "prompt.hardware=null",
        "quiet=true",
    ]


def rows(run_dir: Path, columns: str = "problem_id, sample, turn, status") -> list[tuple[Any, ...]]:
    """Attempt rows of a run's database, ordered by problem, sample, turn."""
    conn = sqlite3.connect(run_dir / "attempts.sqlite")
    try:
        return conn.execute(f"SELECT {columns} FROM attempts ORDER BY problem_id, sample, turn").fetchall()
    finally:
        conn.close()
