"""Gluon: LayerNorm(x + bias + residual), one row per program: mean and variance in fp32 from the row in registers."""
import torch
import torch.nn as nn
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

NUM_WARPS = 8


@gluon.jit
def bias_residual_layer_norm_kernel(x_ptr, r_ptr, b_ptr, w_ptr, nb_ptr, out_ptr, n_cols, eps, BLOCK: gl.constexpr,
                                    NUM_WARPS: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[4], threads_per_warp=[32], warps_per_cta=[NUM_WARPS],
                                            order=[0])
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, BLOCK, layout=layout)
    mask = cols < n_cols
    offsets = row * n_cols + cols
    h = gl.load(x_ptr + offsets, mask=mask, other=0.0) + gl.load(b_ptr + cols, mask=mask, other=0.0) \
        + gl.load(r_ptr + offsets, mask=mask, other=0.0)
    centred = gl.where(mask, h - gl.sum(h, axis=0) / n_cols, 0.0)
    inv_std = 1.0 / gl.sqrt(gl.sum(centred * centred, axis=0) / n_cols + eps)
    w = gl.load(w_ptr + cols, mask=mask, other=0.0)
    nb = gl.load(nb_ptr + cols, mask=mask, other=0.0)
    gl.store(out_ptr + offsets, centred * inv_std * w + nb, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden) * 0.5)
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)
        self.norm_bias = nn.Parameter(torch.randn(hidden) * 0.2)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x, residual = x.contiguous(), residual.contiguous()
        out = torch.empty_like(x)
        n_cols = x.shape[-1]
        block = max(triton.next_power_of_2(n_cols), 4 * 32 * NUM_WARPS)
        bias_residual_layer_norm_kernel[(x.numel() // n_cols,)](x, residual, self.bias, self.weight, self.norm_bias,
                                                                out, n_cols, 1e-5, BLOCK=block, NUM_WARPS=NUM_WARPS,
                                                                num_warps=NUM_WARPS)
        return out
