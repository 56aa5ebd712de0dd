"""`harness bench observed-blocks`: observed timing's figures across block sizes, and what a fixed cost per window
would explain (GPU).

Observed timing (issue 52) reads fused Triton kernels 30-60 % slower than their timing loop does, and eager
references less, so the loop's speedup is up to 1.8x the observed one (H200, 2026-12-04). Memory another process
exported is not the cause (`harness bench imported-memory`: within 0.6 %). One cause that would fall harder on the
faster side is a cost paid once per window beyond the handover its empty windows measure: a side's figure is
(window - handover - copies) / reps, so a fixed excess `a` per window reads as `a / reps` on each side, which is a
larger share of the faster side's time. This judges the same candidates with `eval.observed_block_ms` at several
sizes (each block size its own evaluator, observed timing on, nothing cached) and fits, per side, the figure
against the repetitions as `per_rep + fixed / reps`. If the fitted per-rep figures give the loop's speedup, a fixed
cost per window is the excess; if they do not, the excess is paid per repetition. A negative `fixed` is a cost that
grows with the block instead: work of one repetition paid in the next, as when a repetition's outputs (and their
copies into the regions), still dirty in L2 at its end, are written back to DRAM during the next one. The loop
flushes L2 before each call, outside its events, so it never pays that write-back; a window's repetitions run back
to back and pay it in every repetition but the first, the same bytes on both sides, which is a larger share of the
faster side's time.

The candidates: the honest Triton add of `harness.corpus.candidates` (4M elements), the reference's own code as the
candidate (its speedup must read 1), and reference solutions (`--solutions`, by problem id).
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eval import EvalConfig, EvalResult, Evaluator, Job, Status
from harness.bench.trusted_solutions import SOLUTIONS
from harness.corpus import candidates
from problems import LEVELS, suite_problem

DEFAULT_BLOCKS = (0.25, 0.5, 1.0, 2.0)
DEFAULT_SOLUTIONS = ("LLM/03_silu_and_mul", "LLM/02_rope", "L1/16_rms_norm")
ADD_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Fit:
    """A side's figure against its block's repetitions: `per_rep + fixed / reps` (ms), by least squares."""

    per_rep: float
    fixed: float


def fit_fixed_cost(points: list[tuple[int, float]]) -> Fit | None:
    """The least-squares `per_rep + fixed / reps` through (reps, figure per rep) points; None with fewer than two
    distinct repetition counts (a block of one repetition at every size says nothing about a fixed cost)."""
    xs = [1.0 / reps for reps, _ in points]
    ys = [figure for _, figure in points]
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    fixed = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return Fit(per_rep=my - fixed * mx, fixed=fixed)


def jobs(solutions: list[str]) -> list[tuple[str, Job]]:
    """(name, job) for the add, the reference's own code as the candidate, and each solution named."""
    add = candidates.problem(ADD_ELEMENTS)
    found = [("add/triton", Job(add, candidates.triton_candidate(1024, 4), "triton")),
             ("add/reference-code", Job(add, candidates.problem_source(ADD_ELEMENTS) + "\nModelNew = Model\n",
                                        "triton"))]
    folders = {short: folder for folder, short in LEVELS.items()}
    for pid in solutions:
        short, _, stem = pid.partition("/")
        path = SOLUTIONS / folders[short] / f"{stem}.py"
        found.append((pid, Job(suite_problem(pid), path.read_text(), "triton")))
    return found


def _row(name: str, block_ms: float, r: EvalResult) -> dict[str, Any]:
    o = r.observed
    row: dict[str, Any] = {"job": name, "block_ms": block_ms, "status": r.status.value, "reason": r.reason[:300]}
    if r.candidate_timing and r.reference_timing:
        row["loop_speedup"] = r.reference_timing.median_ms / r.candidate_timing.median_ms
    if o:
        row.update(reps=int(o["reps_per_block"]), candidate_ms=o["candidate_ms"], reference_ms=o["reference_ms"],
                   observed_speedup=o["speedup"], handover_us=o["handover_us"],
                   reference_own_context_ms=o["reference_own_context_ms"])
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per job: the fits of both sides, the speedup their per-rep figures give, and the loop's (median over blocks)."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["job"] for r in rows):
        seen = [r for r in rows if r["job"] == name and "reps" in r]
        loops = sorted(r["loop_speedup"] for r in rows if r["job"] == name and "loop_speedup" in r)
        cand = fit_fixed_cost([(r["reps"], r["candidate_ms"]) for r in seen])
        ref = fit_fixed_cost([(r["reps"], r["reference_ms"]) for r in seen])
        entry: dict[str, Any] = {"loop_speedup": loops[len(loops) // 2] if loops else None,
                                 "candidate": cand.__dict__ if cand else None, "reference": ref.__dict__ if ref else None}
        if cand and ref and cand.per_rep > 0:
            entry["fitted_speedup"] = ref.per_rep / cand.per_rep
        out[name] = entry
    return out


def main(blocks: tuple[float, ...] = DEFAULT_BLOCKS, solutions: tuple[str, ...] = DEFAULT_SOLUTIONS,
         out: str | None = None) -> int:
    if not torch.cuda.is_available():
        print("harness bench observed-blocks needs a CUDA GPU (observed timing runs only there)")
        return 2
    import triton

    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, Triton {triton.__version__}, "
          f"Python {platform.python_version()}", flush=True)
    named = jobs(list(solutions))
    rows = []
    for block_ms in blocks:
        config = EvalConfig(device="cuda", cache_dir=None, observed_timing=True, observed_block_ms=block_ms)
        with Evaluator(config) as ev:
            results = ev.evaluate_many([job for _, job in named])
        for (name, _), r in zip(named, results):
            row = _row(name, block_ms, r)
            rows.append(row)
            figures = (f"reps {row['reps']:3d} candidate {row['candidate_ms'] * 1000:9.1f} us reference "
                       f"{row['reference_ms'] * 1000:9.1f} us observed {row['observed_speedup']:6.3f}"
                       if "reps" in row else f"{r.reason[:160]}")
            print(f"block {block_ms:5.2f} ms  {name:30s} {r.status.value:10s} loop "
                  f"{row.get('loop_speedup', 0):6.3f}  {figures}", flush=True)
    summary = summarize(rows)
    for name, s in summary.items():
        c, f = s["candidate"], s["reference"]
        fits = (f"candidate {c['per_rep'] * 1000:.1f} us + {c['fixed'] * 1000:.1f} us/reps, reference "
                f"{f['per_rep'] * 1000:.1f} us + {f['fixed'] * 1000:.1f} us/reps, fitted speedup "
                f"{s.get('fitted_speedup', float('nan')):.3f}" if c and f else "no fit (one repetition count)")
        print(f"fit {name:30s} loop {s['loop_speedup'] or 0:6.3f}  {fits}")
    if out:
        Path(out).write_text(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                         "rows": rows, "summary": summary}, indent=1))
    return 0 if all(r["status"] == Status.CORRECT.value for r in rows) else 1
