"""Triton solution for L2/16_add_rmsnorm: residual add, RMS statistics, normalisation in one kernel.

Per row: pass 1 forms h = x + residual, stores it (it is an output) and accumulates sum(h^2);
pass 2 reads h back (from L2 for rows this size) and writes the normalised output. Eager PyTorch
needs six kernels and reads/writes every intermediate.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offset = row * n_cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + offset + cols, mask=mask, other=0.0)
        r = tl.load(r_ptr + offset + cols, mask=mask, other=0.0)
        h = x + r
        tl.store(h_ptr + offset + cols, h, mask=mask)
        hf = h.to(tl.float32)
        acc += hf * hf
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        h = tl.load(h_ptr + offset + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + offset + cols, h * rstd * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).contiguous()
        r2 = residual.reshape(-1, shape[-1]).contiguous()
        y, h = torch.empty_like(x2), torch.empty_like(x2)
        n_cols = x2.shape[1]
        block = min(triton.next_power_of_2(n_cols), 4096)
        _add_rmsnorm_kernel[(x2.shape[0],)](x2, r2, self.weight, y, h, n_cols, self.eps, BLOCK=block, num_warps=8)
        return y.view(shape), h.view(shape)
