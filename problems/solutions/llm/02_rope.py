"""Triton solution for LLM/02_rope: rotary embedding of queries and keys, fp32 math, one bf16 rounding.

Each program rotates BLOCK_ROWS (head, position) rows: it loads both halves of each row and the
cos/sin of its position once, and writes both output halves (out1 = x1 cos - x2 sin,
out2 = x2 cos + x1 sin). Eager PyTorch builds the rotated copy with a concatenation and runs
several elementwise kernels over full-size temporaries.
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
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, n_rows, seq, HALF: tl.constexpr, BLOCK_ROWS: tl.constexpr, INTERPRET: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    dims = tl.arange(0, HALF)
    row_mask = rows[:, None] < n_rows
    pos = rows % seq  # rows are (batch, head, position) flattened, position fastest
    base = rows[:, None] * (2 * HALF) + dims[None, :]
    x1 = tl.load(x_ptr + base, mask=row_mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + base + HALF, mask=row_mask, other=0.0).to(tl.float32)
    trig = pos[:, None] * (2 * HALF) + dims[None, :]  # cos/sin rows repeat their first half
    cos = tl.load(cos_ptr + trig, mask=row_mask, other=0.0)
    sin = tl.load(sin_ptr + trig, mask=row_mask, other=0.0)
    tl.store(y_ptr + base, _to_bf16(x1 * cos - x2 * sin, INTERPRET), mask=row_mask)
    tl.store(y_ptr + base + HALF, _to_bf16(x2 * cos + x1 * sin, INTERPRET), mask=row_mask)


class ModelNew(nn.Module):
    def __init__(self, head_dim: int, max_seq: int, base: float = 500000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def _rotate(self, t: torch.Tensor) -> torch.Tensor:
        t = t.contiguous()
        seq, head_dim = t.shape[-2], t.shape[-1]
        n_rows = t.numel() // head_dim
        out = torch.empty_like(t)
        block_rows = 16
        _rope_kernel[(triton.cdiv(n_rows, block_rows),)](t, self.cos, self.sin, out, n_rows, seq,
                                                        HALF=head_dim // 2, BLOCK_ROWS=block_rows, INTERPRET=INTERPRET, num_warps=4)
        return out

    def forward(self, q: torch.Tensor, k: torch.Tensor):
        return self._rotate(q), self._rotate(k)
