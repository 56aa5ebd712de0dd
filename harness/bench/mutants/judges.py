"""The two evaluators a mutant is judged by: ours (the real pipeline, the default preset `harness run` uses) and
KernelBench's own `eval_kernel_against_ref` (a fetched checkout, as `harness bench kernelbench` imports it).

Both take `Candidate`s and return one record a candidate, `accepted` saying whether it passed: our `correct`, or
KernelBench's correctness over its 5 trials (correctness only, every candidate in a fresh process, `jobs` at once,
as `harness bench corpus` runs it). `accepted: None` only where KernelBench itself asked for a retry; a process the
candidate ended or hung is a rejection (if KernelBench could not run at all, its originals are rejected too and the
table shows why).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from harness.bench.kernelbench_side_by_side import run_child, stand_ins

KB_TRIALS = 5
KB_TIMEOUT_S = 240.0
_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class Candidate:
    """A source to judge against a problem: an original or one of its mutants."""

    key: str
    problem: Any  # problems.Problem
    source: str
    backend: str  # "triton" or "cuda"


def ours(candidates: list[Candidate], device: str, on_record: Callable[[dict[str, Any]], None],
         deadline: float | None = None, chunk: int = 16) -> int:
    """Each candidate through one session of our evaluator (`preset_config("default")`, no result cache), in order,
    `chunk` at a time; no chunk starts after `deadline`. How many were left unjudged."""
    from eval import Evaluator, Job
    from harness.presets import preset_config

    if not candidates:
        return 0
    with Evaluator(preset_config("default", device=device, cache_dir=None)) as ev:
        for c in candidates:  # every build queued now, in order; closing cancels those not started
            ev.prebuild(c.problem, c.source, c.backend)
        for start in range(0, len(candidates), chunk):
            if deadline is not None and time.monotonic() >= deadline:
                return len(candidates) - start
            part = candidates[start:start + chunk]

            def done(i: int, result: Any, part: list[Candidate] = part) -> None:
                status = result.status.value
                on_record({"key": part[i].key, "side": "ours", "accepted": status == "correct", "status": status,
                           "step": next(reversed(result.phase_seconds), "source"), "reason": result.reason[:400],
                           "seconds": round(result.eval_seconds, 1), "device": result.device})

            ev.evaluate_many([Job(c.problem, c.source, c.backend) for c in part], on_result=done)
    return 0


def kb_child(job_path: str) -> dict[str, Any]:
    """In a fresh process: KernelBench's correctness check of one candidate (seed 42, 5 trials, cuda:0)."""
    stand_ins()
    import torch
    from kernelbench.eval import eval_kernel_against_ref, get_torch_dtype_from_string

    with open(job_path) as fh:
        job = json.load(fh)
    r = eval_kernel_against_ref(job["ref"], job["source"], seed_num=42, num_correct_trials=KB_TRIALS,
                                measure_performance=False, verbose=False, device=torch.device("cuda:0"),
                                backend=job["backend"], precision=get_torch_dtype_from_string(job["precision"]))
    if r is None:
        return {"verdict": "error", "reason": "KernelBench asked for a retry (a lock-file error while building)"}
    meta = r.metadata
    if r.correctness:
        return {"verdict": "correct", "reason": f"correct {meta.get('correctness_trials', '')}".strip()}
    for verdict, name, detail in (("compile_error", "compilation_error_name", "compilation_error"),
                                  ("runtime_error", "runtime_error_name", "runtime_error"),
                                  ("incorrect", "correctness_issue_name", "correctness_issue")):
        if name in meta or detail in meta:
            return {"verdict": verdict, "reason": f"{meta.get(name, '')}: {meta.get(detail, '')}"}
    return {"verdict": "compile_error" if not r.compiled else "incorrect", "reason": str(meta)[:300]}


def _kb_one(c: Candidate, kernelbench_src: str, jobs: int) -> dict[str, Any]:
    t0 = time.monotonic()
    folder = tempfile.mkdtemp(prefix="kh-kbmut-")  # its own extensions and job file: candidates share names
    try:
        job = os.path.join(folder, "job.json")
        with open(job, "w") as fh:
            json.dump({"ref": c.problem.source, "source": c.source, "backend": c.backend,
                       "precision": _PRECISION.get(c.problem.dtype, "fp32")}, fh)
        env = {"TORCH_EXTENSIONS_DIR": folder, "MAX_JOBS": str(max(1, len(os.sched_getaffinity(0)) // jobs))}
        got = run_child(__name__, ["--kb-child", job], kernelbench_src, timeout=KB_TIMEOUT_S, env=env)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if "verdict" not in got:  # its process died or hung on the candidate: KernelBench would record a failure
        last = (got["error"].strip().splitlines() or [""])[-1]
        got = {"verdict": "timeout" if got.get("timeout") else "crash", "reason": f"KernelBench's process: {last}"}
    accepted = None if got["verdict"] == "error" else got["verdict"] == "correct"
    return {"key": c.key, "side": "kb", "accepted": accepted, "verdict": got["verdict"], "reason": got["reason"][:400],
            "seconds": round(time.monotonic() - t0, 1)}


def kernelbench(candidates: list[Candidate], kernelbench_src: str, jobs: int,
                on_record: Callable[[dict[str, Any]], None]) -> None:
    """Each candidate through KernelBench's evaluator, `jobs` at once."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for record in pool.map(lambda c: _kb_one(c, kernelbench_src, jobs), candidates):
            on_record(record)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--kb-child"]:
        print(json.dumps({"__r": kb_child(sys.argv[2])}, default=str))
