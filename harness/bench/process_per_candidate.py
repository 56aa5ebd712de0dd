"""A KernelBench-style evaluator, for comparison only: one fresh process per candidate.

`python -m harness.bench.process_per_candidate PROBLEM CANDIDATE DEVICE` imports the problem
and the candidate in one new process (no sandbox, no warm state, builds on the candidate's
path), seeds both models alike, runs 5 correctness trials with atol = rtol = 1e-2 and times
100 calls with CUDA events after 3 warm-up calls, as KernelBench's `eval_kernel_against_ref`
does. It prints one JSON line with the verdict and where its time went. The benchmark runs
it under a wall-clock limit, killing it on expiry, which KernelBench itself does not have.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_TRIALS = 5
_TIMED = 100
_WARMUP = 3


def evaluate_in_new_process(problem_source: str, candidate_source: str, device: str, timeout_s: float,
                            workdir: Path) -> dict[str, Any]:
    """Run one candidate in a fresh interpreter; the verdict and phase times, or timeout/crash."""
    problem_path, candidate_path = workdir / "problem.py", workdir / "candidate.py"
    problem_path.write_text(problem_source)
    candidate_path.write_text(candidate_source)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "harness.bench.process_per_candidate", str(problem_path),
                               str(candidate_path), device], capture_output=True, text=True, timeout=timeout_s,
                              cwd=workdir, env=_env(workdir))
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "phase_seconds": {"total": time.perf_counter() - t0}}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"status": "crash", "error": proc.stderr[-500:], "phase_seconds": {"total": time.perf_counter() - t0}}
    out = json.loads(lines[-1])
    out["phase_seconds"]["total"] = time.perf_counter() - t0
    return out


def _env(workdir: Path) -> dict[str, str]:
    import os

    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env["TORCH_EXTENSIONS_DIR"] = str(workdir / "extensions")  # a cold build, as a fresh KernelBench run has
    env["TRITON_CACHE_DIR"] = str(workdir / "triton-cache")
    if env.get("KH_BENCH_DEVICE") == "cpu":
        env["TRITON_INTERPRET"] = "1"
    return env


def _import(path: str, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _main(problem_path: str, candidate_path: str, device: str) -> dict[str, Any]:
    phases: dict[str, float] = {}
    t = time.perf_counter()
    import torch

    phases["import_torch"] = time.perf_counter() - t
    t = time.perf_counter()
    problem = _import(problem_path, "problem")
    init = problem.get_init_inputs()
    torch.manual_seed(42)
    ref = problem.Model(*init).to(device)
    try:
        candidate_module = _import(candidate_path, "candidate")
        torch.manual_seed(42)
        cand = candidate_module.ModelNew(*init).to(device)
    except Exception as exc:  # noqa: BLE001
        return {"status": "compile_error", "error": str(exc)[-300:], "phase_seconds": phases}
    finally:
        phases["load"] = time.perf_counter() - t
    t = time.perf_counter()
    with torch.no_grad():
        for trial in range(_TRIALS):
            torch.manual_seed(trial)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
            try:
                got = cand(*inputs)
                expected = ref(*inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001
                return {"status": "runtime_error", "error": str(exc)[-300:], "phase_seconds": phases}
            if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-2, rtol=1e-2):
                phases["correctness"] = time.perf_counter() - t
                return {"status": "incorrect", "phase_seconds": phases}
    phases["correctness"] = time.perf_counter() - t
    result: dict[str, Any] = {"status": "correct", "phase_seconds": phases}
    if device == "cuda":
        t = time.perf_counter()
        with torch.no_grad():
            result["candidate_ms"] = _mean_event_ms(lambda: cand(*inputs))
            result["reference_ms"] = _mean_event_ms(lambda: ref(*inputs))
        result["speedup"] = result["reference_ms"] / result["candidate_ms"]
        phases["timing"] = time.perf_counter() - t
    return result


def _mean_event_ms(call: Any) -> float:
    import torch

    for _ in range(_WARMUP):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(_TIMED):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sum(times) / len(times)


if __name__ == "__main__":
    print(json.dumps(_main(*sys.argv[1:4])))
