"""Triton solution for L1/16_rms_norm: one program per row, fused square-mean, rsqrt and scale.

Eager PyTorch runs pow, mean, add, rsqrt and two multiplies as separate kernels (about five
passes over the tensor); this reads each row twice (the second read mostly hits L2) and writes once.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, x * rstd * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).contiguous()
        y = torch.empty_like(x2)
        n_cols = x2.shape[1]
        block = min(triton.next_power_of_2(n_cols), 4096)
        _rms_norm_kernel[(x2.shape[0],)](x2, self.weight, y, n_cols, x2.stride(0), y.stride(0), self.eps,
                                         BLOCK=block, num_warps=8)
        return y.view(shape)
