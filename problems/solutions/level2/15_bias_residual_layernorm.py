"""Triton solution for L2/15_bias_residual_layernorm: bias + residual add and LayerNorm in one kernel.

Per row: pass 1 accumulates the mean and the sum of squared deviations of h = x + bias + residual
with Welford-style chunk merging (stable for large means); pass 2 recomputes h (inputs now hit
L2) and writes the normalised, scaled and shifted output. Nothing but the output is stored.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bias_residual_layernorm_kernel(x_ptr, r_ptr, b_ptr, w_ptr, nb_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offset = row * n_cols
    mean = 0.0
    m2 = 0.0
    count = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        h = (tl.load(x_ptr + offset + cols, mask=mask, other=0.0)
             + tl.load(b_ptr + cols, mask=mask, other=0.0)
             + tl.load(r_ptr + offset + cols, mask=mask, other=0.0)).to(tl.float32)
        n = tl.minimum(n_cols - start, BLOCK).to(tl.float32)
        chunk_mean = tl.sum(h, axis=0) / n
        d = tl.where(mask, h - chunk_mean, 0.0)
        chunk_m2 = tl.sum(d * d, axis=0)
        total = count + n
        delta = chunk_mean - mean
        mean = mean + delta * (n / total)
        m2 = m2 + chunk_m2 + delta * delta * (count * n / total)
        count = total
    rstd = 1.0 / tl.sqrt(m2 / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        h = (tl.load(x_ptr + offset + cols, mask=mask, other=0.0)
             + tl.load(b_ptr + cols, mask=mask, other=0.0)
             + tl.load(r_ptr + offset + cols, mask=mask, other=0.0)).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        nb = tl.load(nb_ptr + cols, mask=mask, other=0.0)
        tl.store(y_ptr + offset + cols, (h - mean) * rstd * w + nb, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden) * 0.5)
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)
        self.norm_bias = nn.Parameter(torch.randn(hidden) * 0.2)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).contiguous()
        r2 = residual.reshape(-1, shape[-1]).contiguous()
        y = torch.empty_like(x2)
        n_cols = x2.shape[1]
        block = min(triton.next_power_of_2(n_cols), 2048)
        _bias_residual_layernorm_kernel[(x2.shape[0],)](x2, r2, self.bias, self.weight, self.norm_bias, y, n_cols, 1e-5,
                                                       BLOCK=block, num_warps=8)
        return y.view(shape)
