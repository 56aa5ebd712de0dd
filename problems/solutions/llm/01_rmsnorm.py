"""Triton solution for LLM/01_rmsnorm: LLaMA RMSNorm in one kernel, with the reference's bf16 roundings.

Statistics in fp32; the normalised value is rounded to bf16 before the weight multiply, exactly
as the reference does, so results agree to the last bit except for the order of the sum.
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


# Triton's CPU interpreter (TRITON_INTERPRET=1) truncates fp32 -> bf16 casts instead of rounding
# to nearest even as the GPU does; under the interpreter the rounding is done by hand so the
# CPU check sees GPU numerics. On the GPU this is a single cvt.rn instruction.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _to_bf16(x, INTERPRET: tl.constexpr):
    if INTERPRET:
        bits = x.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        out = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        out = x.to(tl.bfloat16)
    return out


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr, INTERPRET: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offset = row * n_cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offset + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + offset + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        normed = _to_bf16(x * rstd, INTERPRET).to(tl.float32)
        tl.store(y_ptr + offset + cols, _to_bf16(w * normed, INTERPRET), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((torch.rand(hidden) + 0.5).to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).contiguous()
        y = torch.empty_like(x2)
        n_cols = x2.shape[1]
        block = min(triton.next_power_of_2(n_cols), 4096)
        _rmsnorm_kernel[(x2.shape[0],)](x2, self.weight, y, n_cols, self.eps, BLOCK=block, INTERPRET=INTERPRET, num_warps=8)
        return y.view(shape)
