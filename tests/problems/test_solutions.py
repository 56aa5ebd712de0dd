"""Reference solutions: correct under the Triton interpreter, own kernels launched, and each launched
kernel compiles for an H100 (sm_90) without a GPU.

The interpreter run happens in a subprocess (TRITON_INTERPRET must be set before Triton is
imported) at the problems' declared reduced sizes (`META["small"]`, which are chosen so every
kernel loops over several blocks and hits its masked tails) and on the problems' extra input
shapes. Each solution then runs once more at full size on fake tensors, with kernel launches
recorded but not executed, to learn the full-size specialisations (block sizes, head dims).
The compile check rebuilds every launch seen (argument types, constexprs, warps, stages) with
the interpreter switched off and compiles it to a cubin with Triton's bundled ptxas: a type
error, an unsupported op or a shared-memory overflow that the interpreter lets through fails here.

Run as a script (`python tests/problems/test_solutions.py interpret|compile`) it is the worker.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from problems.suite import LEVELS
from tests.paths import REPO as ROOT


def _solutions() -> list[Path]:
    return sorted((ROOT / "problems" / "solutions").glob("*/[0-9]*.py"))


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _type_of(value) -> str:
    import torch

    names = {
        torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float8_e4m3fn: "fp8e4nv",
        torch.int64: "i64", torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1",
    }
    if isinstance(value, torch.Tensor):
        return "*" + names[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"unsupported kernel argument {value!r}")


def _interpret_worker() -> None:
    """Check every solution against its reference at reduced sizes; print one JSON line per solution."""
    import inspect

    import torch
    from triton.runtime.interpreter import InterpretedFunction

    sys.path.insert(0, str(ROOT))
    from eval.config import EvalConfig
    from problems._compare import compare
    from problems.runtime import build_model, load_module, make_extra_inputs, make_inputs, output_tensors, run_forward
    from problems.suite import suite_problem

    from torch._subclasses.fake_tensor import FakeTensorMode

    launches: list[dict] = []
    dry_run = [False]
    original = InterpretedFunction.run

    def recording_run(self, *args, grid, warmup, **kwargs):
        params = inspect.signature(self.fn).parameters
        options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages") if k in kwargs}
        bound = dict(zip(self.arg_names, args), **kwargs)
        signature, constexprs = {}, {}
        for name, value in bound.items():
            if params[name].annotation is not inspect.Parameter.empty and "constexpr" in str(params[name].annotation):
                signature[name], constexprs[name] = "constexpr", value
            else:
                signature[name] = _type_of(value)
        launches.append({"kernel": self.fn.__name__, "module": self.fn.__module__, "signature": signature,
                         "constexprs": constexprs, "options": options, "full_size": dry_run[0]})
        return None if dry_run[0] else original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = recording_run
    for path in _solutions():
        problem = suite_problem(f"{LEVELS[path.parent.name]}/{path.stem}")
        module = load_module(problem, small=True)
        solution = _import(path, f"solution_{path.parent.name}_{path.stem}")
        reference = build_model(module, seed=7)
        torch.manual_seed(7)
        candidate = solution.ModelNew(*module.get_init_inputs())
        state = candidate.state_dict()
        candidate.load_state_dict({k: v for k, v in reference.state_dict().items() if k in state}, strict=False)
        atol, rtol = EvalConfig().tolerance(problem.dtype, problem.atol, problem.rtol)
        results, start = [], len(launches)
        for inputs in [make_inputs(module, seed=11)] + make_extra_inputs(module, seed=12):
            expected = output_tensors(run_forward(reference, inputs))
            got = output_tensors(run_forward(candidate, inputs))
            mismatch = compare(expected, got, atol, rtol)
            results.append("ok" if mismatch is None else f"{mismatch.reason} (max abs err {mismatch.max_abs_err})")
        with FakeTensorMode():  # full size: record the launches, run nothing
            full = load_module(problem)
            torch.manual_seed(7)
            dry_run[0] = True
            solution.ModelNew(*full.get_init_inputs())(*make_inputs(full, seed=11))
            dry_run[0] = False
        own = [launch for launch in launches[start:] if launch["module"] == solution.__name__]
        print(json.dumps({"solution": str(path.relative_to(ROOT)), "problem": problem.id, "results": results,
                          "launches": own}), flush=True)


def _compile_worker() -> None:
    """Compile each recorded launch (JSON lines on stdin) for sm_90; print one JSON line per launch."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    modules: dict[str, object] = {}
    for line in sys.stdin:
        record = json.loads(line)
        path = ROOT / record["solution"]
        if record["solution"] not in modules:
            modules[record["solution"]] = _import(path, f"gpu_{path.parent.name}_{path.stem}")
        kernel = getattr(modules[record["solution"]], record["kernel"])
        constexprs = {k: (False if k == "INTERPRET" else v) for k, v in record["constexprs"].items()}
        try:
            source = ASTSource(fn=kernel, signature=record["signature"], constexprs=constexprs)
            compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=record["options"])
            error = None if compiled.asm.get("cubin") else "no cubin produced"
        except Exception as exc:  # report, do not stop: every kernel gets checked
            error = f"{type(exc).__name__}: {str(exc)[-800:]}"
        print(json.dumps({"solution": record["solution"], "kernel": record["kernel"], "error": error}), flush=True)


def _run_worker(phase: str, stdin: str | None = None, interpret: bool = False) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, __file__, phase], input=stdin, capture_output=True, text=True, env=env,
                          timeout=900, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def interpreted() -> list[dict]:
    return _run_worker("interpret", interpret=True)


def test_solutions_cover_all_levels():
    solved = {p.parent.name for p in _solutions()}
    assert len(_solutions()) >= 12
    assert solved == set(LEVELS), f"levels without a solution: {set(LEVELS) - solved}"


def test_solutions_match_references_under_interpreter(interpreted):
    assert len(interpreted) == len(_solutions())
    wrong = {r["problem"]: r["results"] for r in interpreted if any(res != "ok" for res in r["results"])}
    assert not wrong, wrong
    # the main inputs and at least one hidden extra shape were checked for every solution
    assert all(len(r["results"]) >= 2 for r in interpreted)


def test_every_solution_launches_its_own_kernels(interpreted):
    for r in interpreted:
        assert any(not launch["full_size"] for launch in r["launches"]), f"{r['problem']}: no own kernel ran"
        assert any(launch["full_size"] for launch in r["launches"]), f"{r['problem']}: no own kernel at full size"


@pytest.mark.slow
def test_solutions_pass_the_evaluator_on_cpu():
    """The real evaluator (sandboxed worker, several trials, hidden shapes, integrity and own-kernel
    checks) accepts every solution on the CPU, at the problems' reduced sizes."""
    from eval import EvalConfig, Evaluator, Job, Status
    from problems.suite import suite_problem

    jobs = [Job(suite_problem(f"{LEVELS[path.parent.name]}/{path.stem}"), path.read_text(), "triton")
            for path in _solutions()]
    with Evaluator(EvalConfig(device="cpu", problem_scale="small", cache_dir=None)) as evaluator:
        results = evaluator.evaluate_many(jobs)  # one batch, so the pool's workers share it
    assert [r.problem_scale for r in results] == ["small"] * len(jobs)
    verdicts = {job.problem.id: (r.status, r.reason[:300]) for job, r in zip(jobs, results)}
    assert len(verdicts) == len(jobs) > 0
    assert {pid: v for pid, v in verdicts.items() if v[0] != Status.CORRECT} == {}


@pytest.mark.slow
def test_launched_kernels_compile_for_sm90(interpreted):
    records = {}
    for r in interpreted:
        for launch in r["launches"]:
            key = json.dumps([r["solution"], launch["kernel"], launch["signature"], launch["constexprs"], launch["options"]],
                             sort_keys=True)
            records[key] = {"solution": r["solution"], **{k: v for k, v in launch.items() if k != "full_size"}}
    stdin = "".join(json.dumps(rec) + "\n" for rec in records.values())
    compiled = _run_worker("compile", stdin=stdin)
    assert len(compiled) == len(records)
    failures = [c for c in compiled if c["error"]]
    assert not failures, failures


if __name__ == "__main__":
    {"interpret": _interpret_worker, "compile": _compile_worker}[sys.argv[1]]()
