"""Compile Gluon kernels for the H200 (sm_90) on a machine without a GPU, by running a candidate's forward on CPU
tensors with each launch replaced by Triton's compile for an explicit target (`GluonASTSource`, Triton >= 3.9).

Triton's interpreter never runs Gluon (`gluon.jit` does not take TRITON_INTERPRET's path), so this is what a CPU
can check of a Gluon kernel: that it compiles, with the argument types and constants its forward launches it with.
"""

from __future__ import annotations

from typing import Any

import torch

_POINTER = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.int64: "*i64",
            torch.int32: "*i32", torch.uint8: "*u8", torch.bool: "*i1"}


def compiling_launches(compiled: list[Any]):
    """A `GluonJITFunction.run` that compiles for sm_90 instead of launching, appending each compiled kernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import GluonASTSource

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
        compiled.append(triton.compile(GluonASTSource(self, signature, constexprs), target=GPUTarget("cuda", 90, 32),
                                       options=options))

    return run
