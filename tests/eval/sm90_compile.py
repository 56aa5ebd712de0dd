"""Compile a solution's kernels for the H200 (sm_90) on a machine without a GPU: run its forward on CPU tensors at
the problem's reduced sizes with Triton's launch entry replaced by Triton's compile for an explicit target.

- Gluon: Triton's interpreter never runs it (`gluon.jit` does not take TRITON_INTERPRET's path), so this is what a
  CPU can check of a Gluon kernel (`GluonASTSource`, Triton >= 3.9 compiles it with no driver).
- Helion: its generated Triton kernels are compiled the same way (`ASTSource`), which checks what the interpreter
  cannot run (libdevice calls, bf16 rounding). Run with TRITON_INTERPRET unset, so that `triton.jit` makes
  `JITFunction`s: as a script, `python tests/eval/sm90_compile.py PATH=PROBLEM_ID ...` prints, as JSON, for each
  problem whether each launch compiled to an sm_90 cubin.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import torch

_POINTER = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.int64: "*i64",
            torch.int32: "*i32", torch.uint8: "*u8", torch.bool: "*i1"}


def compiling_launches(compiled: list[Any], source_cls: type):
    """A launch entry (`JITFunction.run`) that compiles for sm_90 instead of launching, appending each kernel."""
    import triton
    from triton.backends.compiler import GPUTarget

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "num_ctas") if k in kwargs}
        bound = dict(zip(self.arg_names, args)) | kwargs
        signature, constexprs = {}, {}
        for param in self.params:
            value = bound.get(param.name, param.default)
            if param.is_constexpr:
                signature[param.name], constexprs[param.name] = "constexpr", value
            elif isinstance(value, torch.Tensor):
                signature[param.name] = _POINTER[value.dtype]
            elif isinstance(value, float):
                signature[param.name] = "fp32"
            else:
                signature[param.name] = "i64" if abs(int(value)) >= 2**31 else "i32"
        compiled.append(triton.compile(source_cls(self, signature, constexprs), target=GPUTarget("cuda", 90, 32),
                                       options=options))

    return run


def compile_forward(path: Path, problem_id: str, launcher: type, source_cls: type) -> list[Any]:
    """Every launch of the solution's forward at the problem's reduced sizes, compiled for sm_90."""
    from problems import load_source, suite_problem

    problem = suite_problem(problem_id)
    spec = importlib.util.spec_from_file_location(f"sm90_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reference = load_source(problem.source, problem.id, problem.meta.get("small", {}))
    compiled: list[Any] = []
    original = launcher.__dict__["run"] if "run" in launcher.__dict__ else None
    launcher.run = compiling_launches(compiled, source_cls)
    try:
        module.ModelNew(*reference.get_init_inputs())(*reference.get_inputs())
    finally:
        if original is None:
            del launcher.run
        else:
            launcher.run = original
    return compiled


if __name__ == "__main__":  # Helion (or plain Triton) solutions, in a process without the interpreter
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    found = {}
    for entry in sys.argv[1:]:  # PATH=PROBLEM_ID each
        path, problem_id = entry.rsplit("=", 1)
        kernels = compile_forward(Path(path), problem_id, JITFunction, ASTSource)
        found[problem_id] = [".target sm_90a" in k.asm["ptx"] and bool(k.asm.get("cubin")) for k in kernels]
    print(json.dumps(found))
