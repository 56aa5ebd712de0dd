"""`harness bench kernelbench`: KernelBench's own evaluator beside our `eval=kernelbench`, on the same candidates.

Each measurement runs in a fresh process, on the same GPU, one after the other:
  kb_eval  KernelBench's `eval_kernel_against_ref` (the candidate's runtime, and its in-eval reference);
  kb_ref   KernelBench's `measure_ref_program_time` in a clean process (the baseline its scores divide by);
  ours     our Evaluator under `eval=kernelbench`.
The figure to hold within 0.95-1.05 is ours / (kb_ref / kb_eval's candidate). Both KernelBench processes run on
one core of their own (`on_one_core`), as our evaluator's timed blocks do: the suite's Triton candidates are short
and timed one synchronised call at a time, so the host's launch is inside each interval, and on the H200 host an
unpinned KernelBench process measured L1/16_rms_norm's candidate at 0.165 ms against 0.139 ms pinned (ours: 0.137),
a comparison of where the scheduler put a process rather than of timing. KernelBench is imported from a
source folder (`--kernelbench-src`, its `src/`), never installed; the few packages its modules import at load
time and our device image lacks (dotenv, openai, litellm, pydantic) are replaced by inert stand-ins.
Candidates are the suite's reference solutions (Triton), whose problems have floating-point inputs only.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import statistics
import subprocess
import sys
import types
from typing import Any

from harness.progress import Tally

_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def stand_ins() -> None:
    """KernelBench's `__init__` imports `utils` (dotenv, openai, litellm) and `eval` imports pydantic."""
    for name, attrs in {"dotenv": {"load_dotenv": lambda *a, **k: None}, "openai": {"OpenAI": object},
                        "litellm": {"completion": None}}.items():
        try:
            __import__(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            sys.modules[name] = module
    try:
        import pydantic  # noqa: F401
    except ImportError:
        class BaseModel:  # what KernelExecResult needs: class defaults, keyword overrides
            def __init__(self, **kw: Any):
                for key in getattr(type(self), "__annotations__", {}):
                    setattr(self, key, copy.deepcopy(getattr(type(self), key, None)))
                for key, value in kw.items():
                    setattr(self, key, value)
        module = types.ModuleType("pydantic")
        module.BaseModel = BaseModel  # type: ignore[attr-defined]
        sys.modules["pydantic"] = module


def _load(problem_id: str) -> tuple[Any, str, str, str]:
    from problems import select_problems, solution_path

    (problem,) = select_problems(problem_id)
    path = solution_path(problem)
    if path is None:
        raise SystemExit(f"{problem_id} has no reference solution")
    return problem, problem.source, path.read_text(), _PRECISION.get(problem.dtype, "fp32")


def kb_eval(problem_id: str) -> dict[str, Any]:
    stand_ins()
    import torch
    from kernelbench.eval import eval_kernel_against_ref, get_torch_dtype_from_string

    _, ref_src, cand_src, precision = _load(problem_id)
    r = eval_kernel_against_ref(ref_src, cand_src, seed_num=42, num_correct_trials=5, num_perf_trials=100,
                                measure_performance=True, timing_method="cuda_event", verbose=False,
                                device=torch.device("cuda:0"), backend="triton",
                                precision=get_torch_dtype_from_string(precision), check_for_excessive_speedup=True)
    return {"correct": r.correctness, "cand_ms": r.runtime, "ref_ms_in_eval": r.ref_runtime,
            "metadata": str(r.metadata)[:300]}


def kb_ref(problem_id: str) -> dict[str, Any]:
    stand_ins()
    import torch
    from kernelbench.timing import measure_ref_program_time

    _, ref_src, _, precision = _load(problem_id)
    stats = measure_ref_program_time(ref_arch_name=problem_id, ref_arch_src=ref_src, num_trials=100,
                                     use_torch_compile=False, timing_method="cuda_event",
                                     device=torch.device("cuda:0"), verbose=False, precision=precision)
    return {"ref_ms": stats["mean"]}


def ours(problem_id: str) -> dict[str, Any]:
    from eval import Evaluator
    from eval import Job
    from harness.presets import preset_config

    problem, _, cand_src, _ = _load(problem_id)
    # no result cache: every round must measure again, as KernelBench's side does
    with Evaluator(preset_config("kernelbench", device="cuda", cache_dir=None)) as ev:
        (res,) = ev.evaluate_many([Job(problem, cand_src)])
    note = next((f for f in res.flags if f.startswith("timing (")), "")
    return {"status": res.status.value, "speedup": res.speedup, "timing_note": note}


_MODES = {"kb_eval": kb_eval, "kb_ref": kb_ref, "ours": ours}


def on_one_core() -> int | None:
    """Pin this process, before it starts any thread, to the highest core it may use: the core our evaluator sets
    aside for a GPU's timed blocks (`eval` does so on hosts with 4 or more cores a GPU, as here). The core, or None
    on a smaller host, where nothing is pinned on either side."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 4:
        return None
    os.sched_setaffinity(0, {cores[-1]})
    return cores[-1]


def kernelbench_missing(kernelbench_src: str) -> str:
    """The one-line complaint when `kernelbench_src` holds no KernelBench source; "" when it does."""
    if os.path.isfile(os.path.join(kernelbench_src, "kernelbench", "eval.py")):
        return ""
    return f"--kernelbench-src {kernelbench_src}: no kernelbench/eval.py there (give KernelBench's src/ folder)"


def run_child(module: str, args: list[str], kernelbench_src: str, timeout: float,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """`python -m module args` in a fresh process with KernelBench on its path, in a session of its own so that a
    timeout ends its compilers too. Its result is its last `{"__r": ...}` line on stdout; else `{"error": ...}`
    (with `"timeout": true` when it ran out of time)."""
    path = os.pathsep.join(p for p in (kernelbench_src, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {}), "PYTHONPATH": path}, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own group: this ends nothing of ours
        proc.communicate()
        return {"error": f"timed out after {timeout:g} s", "timeout": True}
    lines = [ln for ln in stdout.splitlines() if ln.startswith('{"__r"')]
    if not lines:
        return {"error": (stderr or stdout)[-800:] or f"exited with status {proc.returncode} and no output"}
    return json.loads(lines[-1])["__r"]


def _child(mode: str, problem_id: str, kernelbench_src: str) -> dict[str, Any]:
    return run_child(__name__, ["--child", mode, problem_id], kernelbench_src, timeout=600)


def main(problem_ids: list[str], kernelbench_src: str, repeat: int = 2, out: str | None = None) -> int:
    import torch

    missing = kernelbench_missing(kernelbench_src)
    if missing:
        print(missing)
        return 2
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, KernelBench from {kernelbench_src}; "
          "KernelBench's processes each on one core of their own (the highest), as our timed blocks are")
    print("| problem | round | KernelBench: candidate / clean-process reference | KernelBench in-eval | ours "
          "(eval=kernelbench) | ours / KernelBench |")
    print("|---|---|---|---|---|---|")
    rows, ratios = [], []
    tally = Tally(len(problem_ids) * repeat)
    for pid in problem_ids:
        for rnd in range(repeat):
            e, b, o = (_child(mode, pid, kernelbench_src) for mode in ("kb_eval", "kb_ref", "ours"))
            row = {"problem": pid, "round": rnd, "kb_eval": e, "kb_ref": b, "ours": o}
            rows.append(row)
            print(tally.step(), pid, f"round {rnd}", file=sys.stderr, flush=True)  # stdout stays one table
            if e.get("correct") is False:
                print(f"| {pid} | {rnd} | KernelBench judged it incorrect: {e.get('metadata')} | | "
                      f"{o.get('speedup')} | |", flush=True)
                continue
            try:
                kb = b["ref_ms"] / e["cand_ms"]
                ratio = o["speedup"] / kb
                ratios.append(ratio)
                print(f"| {pid} | {rnd} | {kb:.3f} | {e['ref_ms_in_eval'] / e['cand_ms']:.3f} | {o['speedup']:.3f} "
                      f"| {ratio:.3f} |", flush=True)
            except (KeyError, TypeError, ZeroDivisionError) as exc:
                print(f"| {pid} | {rnd} | failed: {exc!r}: {json.dumps(row, default=str)[:600]} | | | |", flush=True)
    if ratios:
        print(f"ours / KernelBench: median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-"
              f"{max(ratios):.3f} over {len(ratios)} measurements")
    if out:
        with open(out, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}, fh,
                      indent=1, default=str)
    return 0 if ratios else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        core = on_one_core() if sys.argv[2] != "ours" else None  # ours pins its own timed blocks
        result = {**_MODES[sys.argv[2]](sys.argv[3]), **({"core": core} if core is not None else {})}
        print(json.dumps({"__r": result}, default=str))
