"""Triton solution for LLM/03_silu_and_mul: silu(gate) * up in one elementwise pass (fp32 math, one rounding).

A 2D grid (row, column block) reads the gate and up halves of each row directly, so no chunked
copies are made; eager PyTorch writes silu(gate) to memory and reads it back for the product.
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
def _silu_and_mul_kernel(x_ptr, y_ptr, half, BLOCK: tl.constexpr, INTERPRET: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < half
    gate = tl.load(x_ptr + row * 2 * half + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * half + half + cols, mask=mask, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(y_ptr + row * half + cols, _to_bf16(out, INTERPRET), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        x = gate_up.reshape(-1, gate_up.shape[-1]).contiguous()
        half = x.shape[1] // 2
        y = torch.empty(x.shape[0], half, dtype=x.dtype, device=x.device)
        block = 1024
        _silu_and_mul_kernel[(x.shape[0], triton.cdiv(half, block))](x, y, half, BLOCK=block, INTERPRET=INTERPRET, num_warps=4)
        return y.view(*gate_up.shape[:-1], half)
