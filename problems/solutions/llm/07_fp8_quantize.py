"""Triton solution for LLM/07_fp8_quantize: per-token amax, scale and e4m3 conversion in one kernel.

Pass 1 reduces |x| over the row (one DRAM read); pass 2 re-reads the row (mostly from L2),
divides by the scale, clamps and converts to float8 e4m3 (round to nearest even). Eager PyTorch
runs abs, amax, two casts, a division and a clamp over full-size temporaries.
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

FP8_MAX = 448.0

# Triton's CPU interpreter (TRITON_INTERPRET=1) does not carry a rounded-up mantissa into the
# exponent when it converts to fp8 (124.6 becomes 64, not 128); under the interpreter the value is
# rounded to the e4m3 grid by hand first, after which the conversion is exact. On the GPU the
# conversion is a single cvt.rn.satfinite instruction.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _to_e4m3(v, INTERPRET: tl.constexpr):
    if INTERPRET:
        bits = v.to(tl.uint32, bitcast=True)
        normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000).to(tl.float32, bitcast=True)
        v = tl.where(tl.abs(v) >= 0.015625, normal, (v + 24576.0) - 24576.0)  # subnormals: steps of 2^-9
    return v.to(tl.float8e4nv)


@triton.jit
def _fp8_quantize_kernel(x_ptr, q_ptr, scale_ptr, n_cols, BLOCK: tl.constexpr, INTERPRET: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offset = row * n_cols
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offset + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    scale = tl.maximum(tl.max(amax, axis=0), 1e-4) / 448.0
    tl.store(scale_ptr + row, scale)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + offset + cols, mask=mask, other=0.0).to(tl.float32)
        q = tl.minimum(tl.maximum(x / scale, -448.0), 448.0)
        tl.store(q_ptr + offset + cols, _to_e4m3(q, INTERPRET), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        rows, cols = x2.shape
        q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn, device=x.device)
        scale = torch.empty(rows, 1, dtype=torch.float32, device=x.device)
        block = min(triton.next_power_of_2(cols), 4096)
        _fp8_quantize_kernel[(rows,)](x2, q, scale, cols, BLOCK=block, INTERPRET=INTERPRET, num_warps=8)
        return q.view(x.shape), scale.view(*x.shape[:-1], 1)
