"""Shared material of the `test_report_*` tests: synthetic runs written through the run store API.

A CPU cannot measure speedups, so runs with GPU-like results (speedups, SOL fractions, own-kernel
shares, a device name) are written directly with `RunStore`, with outcomes chosen so that every
metric has a value that can be computed by hand.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

from eval.config import EvalConfig
from eval.result import EvalResult, KernelShare, Mismatch, Status
from harness.store import Attempt, RunStore

H100 = "NVIDIA H100 80GB HBM3 (sm_90)"
VERSIONS = {"torch": "2.13.0+cu128", "triton": "3.9.0", "cuda": "12.8", "python": "3.11.7"}
SMOKE = (
    "L1/13_softmax",
    "L1/16_rms_norm",
    "L2/16_add_rmsnorm",
    "L3/03_causal_self_attention",
    "LLM/01_rmsnorm",
    "LLM/03_silu_and_mul",
)
_EVAL_DEFAULTS = dataclasses.asdict(EvalConfig())  # the eval schema's defaults, as `harness run` stores them


def config(
    name: str,
    *,
    spec: str = "smoke",
    limit: int | None = None,
    samples: int = 1,
    turns: int = 1,
    search: str = "none",
    eval_overrides: dict[str, Any] | None = None,
    model: str = "gpt-4o",
) -> dict[str, Any]:
    """A resolved run config shaped like the one `harness run` stores."""
    ev = copy.deepcopy(_EVAL_DEFAULTS)
    ev.update(eval_overrides or {})
    return {
        "name": name,
        "runs_dir": "runs",
        "turns": turns,
        "samples": samples,
        "backend": "triton",
        "max_concurrency": 4,
        "target_speedup": None,
        "search": {"name": search, "attempts": 4},
        "agent": {"kind": "openai", "model": model, "retry": {"max_attempts": 5}},
        "model": {"name": model, "pricing": {"input": 2.5, "output": 10.0}},
        "problems": {"name": "custom", "spec": spec, "limit": limit},
        "eval": ev,
    }


def result(
    status: str,
    speedup: float | None = None,
    *,
    sol: float | None = None,
    own: float | None = 0.9,
    device: str = H100,
    versions: dict[str, str] | None = None,
    timed: bool = True,
    problem: str = "",
) -> EvalResult:
    """An evaluator verdict; timing fields only for correct results measured on a GPU."""
    correct = status == "correct"
    return EvalResult(
        status=Status(status),
        reason=f"synthetic {status}",
        problem_id=problem,
        speedup=speedup if correct and timed else None,
        timing_meaningful=correct and timed,
        sol_fraction=sol if correct and timed else None,
        kernels=KernelShare(own_kernels_launched=["k"], own_time_fraction=own if timed else None) if correct else None,
        mismatch=Mismatch(output=0, reason="values differ", max_abs_err=0.5) if status == "incorrect" else None,
        device=device,
        versions=dict(versions or VERSIONS),
        trials=5 if status in ("correct", "incorrect") else 0,
    )


def write_run(
    run_dir: Path,
    cfg: dict[str, Any],
    outcomes: list[tuple],
    *,
    finish: bool = True,
    reply: str | None = None,
    cost: float | None = 0.01,
    **result_kw: Any,
) -> Path:
    """Record `outcomes` = [(problem, sample, turn, status, speedup, sol), ...] as one session.

    Every attempt uses 100 input + 20 output tokens and costs `cost`; `result_kw` goes to `result`.
    """
    hashes = _suite_hashes()
    with RunStore.open(run_dir, cfg) as store:
        store.begin_session()
        for problem, sample, turn, status, speedup, sol in outcomes:
            res = None if status == Status.AGENT_ERROR else result(status, speedup, sol=sol, problem=problem, **result_kw)
            text = reply if reply is not None else f"Attempt {turn} for {problem}.\n\n```python\n# kernel {turn}\n```\n"
            store.record(
                Attempt(
                    problem_id=problem,
                    sample=sample,
                    turn=turn,
                    status=status,
                    prompt=[
                        {"role": "system", "content": "You write Triton kernels."},
                        {"role": "user", "content": f"Problem {problem}, turn {turn}."},
                    ],
                    reply="" if status == Status.AGENT_ERROR else text,
                    code=None if status == Status.AGENT_ERROR else f"# kernel {turn}\n",
                    result=res,
                    feedback=f"Status: {status}",
                    problem_hash=hashes.get(problem, ""),
                    error="HTTP 500" if status == Status.AGENT_ERROR else "",
                    speedup=res.speedup if res is not None and res.is_correct else None,
                    input_tokens=100,
                    output_tokens=20,
                    cost_usd=cost,
                    latency_s=1.5,
                    eval_s=2.0,
                    model="gpt-4o-2024-08-06",
                )
            )
        if finish:
            store.end_session("finished")
    return run_dir


def _suite_hashes() -> dict[str, str]:
    """Source hashes of the smoke problems (what `harness run` records with each attempt)."""
    from problems.select import select_problems

    return {p.id: p.source_hash for p in select_problems("smoke")}
