"""`harness bench suite`: its tables and findings from result rows, and its refusal without a GPU."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from harness.bench.suite_bench import markdown_tables, summary
from tests.paths import REPO as ROOT

ROWS = [
    {"id": "L1/13_softmax", "level": "level1", "dtype": "float32", "floor_us": 182.2, "eager_us": 223.6,
     "compile_us": 186.4, "eager_sol": 182.2 / 223.6, "compile_sol": 182.2 / 186.4,
     "solution_status": "correct", "solution_speedup": 1.2, "solution_sol": 0.99},
    {"id": "L1/24_gelu", "level": "level1", "dtype": "float32", "floor_us": 182.2, "eager_us": 40.0,
     "compile_us": 41.0, "eager_sol": 0.9, "compile_sol": 0.88},
    {"id": "LLM/04_attn", "level": "llm", "dtype": "bfloat16", "floor_us": None, "eager_us": 268.5,
     "compile_us": 269.2, "solution_status": "correct", "solution_speedup": 0.77, "solution_sol": None},
    {"id": "LLM/07_fp8", "level": "llm", "dtype": "bfloat16", "floor_us": 136.7,
     "error": "RuntimeError: baseline timing failed", "solution_status": "runtime_error",
     "solution_speedup": None, "solution_sol": None},
]


def test_one_table_per_level_with_every_problem() -> None:
    md = markdown_tables(ROWS)
    assert md.index("### level1") < md.index("### llm")
    assert "| L1/13_softmax | float32 | 223.6 | 186.4 | 182.2 | 81% | 98% | 1.20× | 99% |" in md
    assert "| L1/24_gelu | float32 | 40.0 | 41.0 | 182.2 | 90% | 88% |  |  |" in md
    assert "| LLM/04_attn | bfloat16 | 268.5 | 269.2 | — | — | — | 0.77× | — |" in md
    assert "| LLM/07_fp8 | bfloat16 | baseline failed: RuntimeError: baseline timing failed" in md


def test_summary_names_failures_slow_solutions_and_small_problems() -> None:
    lines = summary(ROWS)
    assert lines[0] == "problems: 4; baselines failed: 1 ['LLM/07_fp8']"
    assert "not faster than eager: ['LLM/04_attn']" in lines[1]
    assert "not correct: ['LLM/07_fp8']" in lines[1] and "correct: 2;" in lines[1]
    assert lines[2] == "eager under 50 µs: ['L1/24_gelu (40.0 µs)']"


def test_summary_lists_host_bound_sides_once_solutions_report_them() -> None:
    rows = [dict(ROWS[0], host_share={"reference": 1.31, "candidate": 0.2}, host_bound=["reference"]),
            dict(ROWS[2], host_share={"reference": 0.1, "candidate": 0.1}, host_bound=[])]
    assert summary(rows)[-1] == "flagged host-bound (side, host/GPU): ['L1/13_softmax (reference 1.31)']"
    assert not any(line.startswith("flagged host-bound") for line in summary(ROWS))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_refuses_without_a_gpu() -> None:
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "bench", "suite", "smoke"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)  # a hang guard
    assert proc.returncode == 2
    assert "no CUDA GPU is visible" in proc.stdout
