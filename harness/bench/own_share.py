"""`harness bench eval --part own-share`: the own-kernel share of GPU time (`eval.min_own_time_fraction`).

Evaluates every reference solution (`problems/solutions/`), three honest hybrid candidates (a
cuBLAS GEMM through `torch.matmul`, then a hand-written Triton epilogue: the smallest honest
shares we know of) and a decoy (PyTorch does all the work; a Triton kernel copies a few
elements) under the default rules, and prints one Markdown row per case: verdict, the share of
forward's GPU time in the candidate's own kernels and the largest kernel. The decoy must be
rejected by the share rule and every other case must be correct; the lowest honest share against
the highest decoy share is what the default minimum is chosen between (see `eval/config.py`).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from typing import Any

import torch

from eval import EvalConfig, EvalResult, Evaluator, Job, Status
from eval.feedback import share_text
from problems import select_problems
from problems.problem import Problem

_EPILOGUE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def {name}(y_ptr, b_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    z = y + tl.load(b_ptr + offs % cols, mask=mask)
    {body}
    tl.store(y_ptr + offs, out, mask=mask)


class ModelNew(nn.Module):
    """cuBLAS GEMM (torch.matmul, without bias), then bias and activation in place in one Triton pass."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1])
        y = torch.matmul(x2, self.linear.weight.t())
        n, cols = y.numel(), y.shape[-1]
        {name}[(triton.cdiv(n, 1024),)](y, self.linear.bias, n, cols, BLOCK=1024)
        return y.reshape(*x.shape[:-1], cols)
'''

_RELU = "out = tl.maximum(z, 0.0)"
# tanh-approximated GELU, tanh(u) = 1 - 2 / (exp(2u) + 1)
_GELU = ("u = 0.7978845608028654 * (z + 0.044715 * z * z * z)\n"
         "    out = 0.5 * z * (2.0 - 2.0 / (tl.exp(2.0 * u) + 1.0))")

HYBRID_SCALE_RESIDUAL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_residual_epilogue(y_ptr, x_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x + alpha * y, mask=mask)


class ModelNew(nn.Module):
    """cuBLAS GEMM (torch.matmul), then x + alpha * y in place in one Triton pass."""

    def __init__(self, features: int, alpha: float):
        super().__init__()
        self.linear = nn.Linear(features, features, bias=False)
        self.alpha = alpha

    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.matmul(x2, self.linear.weight.t())
        n = y.numel()
        scale_residual_epilogue[(triton.cdiv(n, 1024),)](y, x2, n, self.alpha, BLOCK=1024)
        return y.reshape(x.shape)
'''

DECOY = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    """A decoy: PyTorch computes everything; the Triton kernel copies four elements onto themselves."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.relu(self.linear(x))
        touch_kernel[(1,)](y, min(y.numel(), 4), BLOCK=16)
        return y
'''


@dataclass(frozen=True)
class ShareCase:
    """One candidate for one suite problem and the verdict it must get under the default rules."""

    kind: str  # solution, hybrid or decoy
    label: str
    problem_id: str
    source: str
    expected: str


HYBRIDS: dict[str, tuple[str, str]] = {
    "hybrid_gemm_bias_relu": ("L2/01_gemm_bias_relu", _EPILOGUE.format(name="bias_relu_epilogue", body=_RELU)),
    "hybrid_gemm_bias_gelu": ("L2/02_gemm_bias_gelu", _EPILOGUE.format(name="bias_gelu_epilogue", body=_GELU)),
    "hybrid_matmul_scale_residual": ("L2/03_matmul_scale_residual", HYBRID_SCALE_RESIDUAL),
}
DECOYS: dict[str, tuple[str, str]] = {"decoy_gemm_bias_relu": ("L2/01_gemm_bias_relu", DECOY)}


def problem(problem_id: str) -> Problem:
    (found,) = select_problems(problem_id)
    return found


def cases(with_solutions: bool = True) -> list[ShareCase]:
    """The reference solutions (optional), the hybrids and the decoys."""
    out: list[ShareCase] = []
    if with_solutions:
        from harness.bench.presets_bench import solution_cases

        out += [ShareCase("solution", c.label, c.problem.id, c.source, "correct") for c in solution_cases("all")]
    out += [ShareCase("hybrid", label, pid, src, "correct") for label, (pid, src) in HYBRIDS.items()]
    decoy = "rejected" if torch.cuda.is_available() else "correct"  # a CPU measures no share, so never rejects
    out += [ShareCase("decoy", label, pid, src, decoy) for label, (pid, src) in DECOYS.items()]
    return out


def run(config: EvalConfig | None = None) -> dict[str, Any]:
    """Evaluate every case with the pool full; rows with verdict, share and the largest kernel."""
    chosen = cases()
    problems = {pid: problem(pid) for pid in {c.problem_id for c in chosen}}
    with tempfile.TemporaryDirectory() as cache:
        config = config or EvalConfig(device="cuda" if torch.cuda.is_available() else "cpu", cache_dir=cache)
        t0 = time.perf_counter()
        with Evaluator(config) as ev:
            results = ev.evaluate_many([Job(problems[c.problem_id], c.source) for c in chosen])
        wall = time.perf_counter() - t0
    rows = [_row(c, r) for c, r in zip(chosen, results)]
    honest = [r["own_share"] for r in rows if r["kind"] != "decoy" and r["own_share"] is not None]
    decoys = [r["own_share"] for r in rows if r["kind"] == "decoy" and r["own_share"] is not None]
    return {"minimum": config.min_own_time_fraction, "wall_s": round(wall, 1), "rows": rows,
            "lowest_honest_share": min(honest) if honest else None,
            "highest_decoy_share": max(decoys) if decoys else None,
            "unexpected": [r["case"] for r in rows if r["verdict"] != r["expected"]]}


def _row(case: ShareCase, result: EvalResult) -> dict[str, Any]:
    k = result.kernels
    top = k.top_kernels[0] if k and k.top_kernels else None
    return {"kind": case.kind, "case": case.label, "problem": case.problem_id, "verdict": result.status.value,
            "expected": case.expected, "own_share": k.own_time_fraction if k else None,
            "own_kernels": k.own_kernels_launched if k else [],
            "top_kernel": [top[0][:60], round(top[1] * 1000, 1)] if top else None,
            "reason": result.reason if result.status is not Status.CORRECT else ""}


def print_table(report: dict[str, Any]) -> None:
    """The Markdown table (paste into docs/benchmarks.md) and the two numbers the minimum sits between."""
    print(f"\nown-kernel share of forward's GPU time, default rules (eval.min_own_time_fraction = "
          f"{report['minimum']:.2%}); {len(report['rows'])} cases in {report['wall_s']} s\n")
    print("| kind | case | verdict | own share | largest kernel (us per call) |")
    print("|---|---|---|---:|---|")
    for r in report["rows"]:
        share = "n/a" if r["own_share"] is None else share_text(r["own_share"])
        top = f"{r['top_kernel'][0]} ({r['top_kernel'][1]})" if r["top_kernel"] else "—"
        verdict = r["verdict"] + ("" if r["verdict"] == r["expected"] else f" (expected {r['expected']})")
        print(f"| {r['kind']} | {r['case']} | {verdict} | {share} | {top.replace('|', '/')} |")
    low, high = report["lowest_honest_share"], report["highest_decoy_share"]
    print(f"\nlowest honest share: {'n/a' if low is None else share_text(low)}; highest decoy share: "
          f"{'n/a' if high is None else share_text(high)}; minimum: {share_text(report['minimum'])}; unexpected "
          f"verdicts: {', '.join(report['unexpected']) or 'none'}")
    for r in report["rows"]:
        if r["reason"]:
            print(f"  {r['case']}: {r['reason'][:300]}")
